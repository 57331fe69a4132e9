// RUN: rm -rf %t && mkdir -p %t && cp %s %t/model.mlir
// RUN: python -c "import numpy as np; from safetensors.numpy import save_file; save_file({'layer.0.weight': np.ones((4, 3), np.float16), 'emb': np.zeros((10, 2), np.float32)}, '%t/model.safetensors')"
// RUN: infer-opt %t/model.mlir | filecheck %s
// RUN: infer-opt %t/model.mlir --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: cd %t && infer-opt model.mlir -o out.mlir && infer-opt out.mlir | filecheck %s

// graph.weight refers by name to the weight file named by the module attribute
// graph.weights (relative to the IR file). Printing to stdout makes the path
// absolute; writing with -o keeps it relative to the output file. The weight
// names may contain dots.

builtin.module attributes {graph.weights = "model.safetensors"} {
  func.func @main(%ids: tensor<3xi64>) -> (tensor<4x3xf16>, tensor<3x2xf32>) {
    %w = graph.weight @layer.0.weight : tensor<4x3xf16>
    %e = graph.weight @emb : tensor<10x2xf32>
    %g = graph.gather %e, %ids : (tensor<10x2xf32>, tensor<3xi64>) -> tensor<3x2xf32>
    func.return %w, %g : tensor<4x3xf16>, tensor<3x2xf32>
  }
}

// CHECK:      builtin.module attributes {graph.weights = "{{(.*/)?}}model.safetensors"} {
// CHECK:        %w = graph.weight @layer.0.weight : tensor<4x3xf16>
// CHECK-NEXT:   %e = graph.weight @emb : tensor<10x2xf32>
// CHECK-NEXT:   %g = graph.gather %e, %ids : (tensor<10x2xf32>, tensor<3xi64>) -> tensor<3x2xf32>

// GENERIC: %w = "graph.weight"() <{name = @layer.0.weight}> : () -> tensor<4x3xf16>
