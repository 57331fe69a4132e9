// RUN: rm -rf %t && mkdir -p %t && cp %s %t/model.mlir
// RUN: python -c "import numpy as np; from safetensors.numpy import save_file; save_file({'fc.weight': np.arange(32, dtype=np.float32).reshape(4, 8), 'fc.scale': np.full((4,), 2, np.float32)}, '%t/model.safetensors')"
// RUN: cd %t && infer-opt model.mlir -p graph-constant-fold -o out.mlir
// RUN: filecheck %s < %t/out.mlir
// RUN: python -c "import re, os, numpy as np; from safetensors.numpy import load_file; text = open('%t/out.mlir').read(); f = re.search(r'graph.weights = \"([^\"]+)\"', text).group(1); assert not os.path.isabs(f), f; w = load_file(os.path.join('%t', f)); assert sorted(w) == ['fc.weight.transpose'], sorted(w); assert np.array_equal(w['fc.weight.transpose'], np.arange(32, dtype=np.float32).reshape(4, 8).T); print('weights ok')" | filecheck %s --check-prefix=FILE
// RUN: infer-opt %t/out.mlir | filecheck %s --check-prefix=REREAD
// RUN: cd %t && infer-opt model.mlir -p 'graph-constant-fold{max-elements=16}' | filecheck %s --check-prefix=LIMIT
// RUN: cd %t && infer-opt model.mlir -p 'graph-constant-fold{inline-limit=32}' | filecheck %s --check-prefix=INLINE

// Folding ops on weights: the transposed weight (32 elements > inline-limit 16)
// becomes a new weight named after its source, written with the output into a
// new safetensors file next to it (holding only the weights the output still
// uses); the small product stays inline. The input's weight file is untouched.

builtin.module attributes {graph.weights = "model.safetensors"} {
  func.func @main(%x: tensor<2x4xf32>) -> tensor<2x8xf32> {
    %w = graph.weight @fc.weight : tensor<4x8xf32>
    %s = graph.weight @fc.scale : tensor<4xf32>
    %t = graph.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
    %h = graph.constant dense<0.5> : tensor<f32>
    %s2 = graph.mul %s, %h : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    %y = graph.mul %x, %s2 : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    %z = graph.linear %y, %t : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
    func.return %z : tensor<2x8xf32>
  }
}

// CHECK:      builtin.module attributes {graph.weights = "out.{{[0-9a-f]+}}.weights.safetensors"} {
// CHECK-NEXT:   func.func @main(%x: tensor<2x4xf32>) -> tensor<2x8xf32> {
// CHECK-NEXT:     %t = graph.weight @fc.weight.transpose : tensor<8x4xf32>
// CHECK-NEXT:     %s2 = graph.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK-NEXT:     %y = graph.mul %x, %s2 : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:     %z = graph.linear %y, %t : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>

// FILE: weights ok

// REREAD: %t = graph.weight @fc.weight.transpose : tensor<8x4xf32>

// LIMIT:      %w = graph.weight @fc.weight : tensor<4x8xf32>
// LIMIT:      %t = graph.transpose %w
// LIMIT:      %s2 = graph.constant dense<1.000000e+00> : tensor<4xf32>

// INLINE-NOT: graph.weight
// INLINE:     %t = graph.constant dense<{{\[\[}}0.000000e+00, 8.000000e+00, 1.600000e+01, 2.400000e+01], [1.000000e+00,
// INLINE-NOT: graph.weight
