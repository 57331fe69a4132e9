// RUN: infer-opt %s -p graph-raise-linear | filecheck %s
// RUN: infer-opt %s -p graph-raise-linear --verify-each-numerically --verify-numerics-entry projection -o /dev/null

// torch.onnx writes nn.Linear on rank-3 activations as MatMul(x, W^T) + b: one graph.linear,
// the weight stored transposed once ([N, K]), the bias its third operand.
func.func @projection(%x: tensor<1x4x3xf32>) -> tensor<1x4x2xf32> {
  %w = graph.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf32>
  %p = graph.matmul %x, %w : (tensor<1x4x3xf32>, tensor<3x2xf32>) -> tensor<1x4x2xf32>
  %b = graph.constant dense<[0.5, -0.5]> : tensor<2xf32>
  %y = graph.add %b, %p : (tensor<2xf32>, tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  func.return %y : tensor<1x4x2xf32>
}
// CHECK-LABEL: func.func @projection(
// CHECK-NEXT:    %w = graph.weight @linear.linear : tensor<2x3xf32>
// CHECK-NEXT:    %bias = graph.weight @linear.bias : tensor<2xf32>
// CHECK-NEXT:    %y = graph.linear %x, %w, %bias : (tensor<1x4x3xf32>, tensor<2x3xf32>, tensor<2xf32>) -> tensor<1x4x2xf32>
// CHECK-NEXT:    func.return %y

// transpose_b: the weight is already [N, K] and is used as it is; no bias add after it
func.func @transposed(%x: tensor<4x3xf32>, %w: tensor<2x3xf32>) -> tensor<4x2xf32> {
  %c = graph.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %p = graph.matmul %x, %c {transpose_b = true} : (tensor<4x3xf32>, tensor<2x3xf32>) -> tensor<4x2xf32>
  %q = graph.relu %p : (tensor<4x2xf32>) -> tensor<4x2xf32>
  func.return %q : tensor<4x2xf32>
}
// CHECK-LABEL: func.func @transposed(
// CHECK-NEXT:    %c = graph.constant
// CHECK-NEXT:    %p = graph.linear %x, %c : (tensor<4x3xf32>, tensor<2x3xf32>) -> tensor<4x2xf32>
// CHECK-NEXT:    %q = graph.relu %p

// left alone: a run-time right operand, and an add of a run-time value (a residual) stays after
// the raised product
func.func @runtime(%x: tensor<4x3xf32>, %w: tensor<3x2xf32>, %r: tensor<4x2xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>) {
  %p = graph.matmul %x, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %c = graph.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf32>
  %q = graph.matmul %x, %c : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %s = graph.add %q, %r : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  func.return %p, %s : tensor<4x2xf32>, tensor<4x2xf32>
}
// CHECK-LABEL: func.func @runtime(
// CHECK-NEXT:    %p = graph.matmul %x, %w
// CHECK:         %q = graph.linear %x
// CHECK-NEXT:    %s = graph.add %q, %r
