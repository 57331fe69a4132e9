// RUN: rm -rf %t && mkdir -p %t
// RUN: python -c "import numpy as np; np.savez('%t/in.npz', x=np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32))"
// RUN: infer run-ir %s --inputs %t/in.npz --output %t/out.npz | filecheck %s
// RUN: python -c "import numpy as np; print(np.load('%t/out.npz')['y'].tolist())" | filecheck %s --check-prefix=VALUES
// RUN: infer run-ir %s 2>&1 | filecheck %s --check-prefix=RANDOM

// `infer run-ir` runs graph IR on the reference interpreter; outputs are keyed by
// the function's result names.

// CHECK: y: float32 2x2  min 0  max 6  mean 2.5
// VALUES: {{\[\[}}0.0, 4.0], [6.0, 0.0]]
// RANDOM: note: no --inputs given; using deterministic random inputs for x
func.func @main(%x: tensor<2x2xf32> {graph.name = "x"}) -> (tensor<2x2xf32> {graph.name = "y"}) {
  %two = graph.constant dense<2.0> : tensor<f32>
  %r = graph.relu %x : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %y = graph.mul %r, %two : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  func.return %y : tensor<2x2xf32>
}
