// RUN: infer-opt %s -p graph-raise-attention | filecheck %s
// Each raised form computes what its matmuls and softmax did (the interpreter, within rounding):
// RUN: infer-opt %s -p graph-raise-attention --verify-each-numerically --verify-numerics-entry sdpa_export -o /dev/null
// RUN: infer-opt %s -p graph-raise-attention --verify-each-numerically --verify-numerics-entry eager -o /dev/null
// RUN: infer-opt %s -p graph-raise-attention --verify-each-numerically --verify-numerics-entry export_bmm -o /dev/null

// Attention written out as matmul, softmax, matmul becomes one graph.attention.

// torch.onnx's scaled_dot_product_attention: both operands scaled by sqrt(scale), kT from
// the head split, an additive mask, and the NaN guard of fully masked rows.
func.func @sdpa_export(%q: tensor<1x2x4x8xf32>, %kh: tensor<1x4x2x8xf32>, %v: tensor<1x2x4x8xf32>, %mask: tensor<1x1x4x4xf32>) -> tensor<1x2x4x8xf32> {
  %kt = graph.transpose %kh {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x4x2x8xf32>) -> tensor<1x2x8x4xf32>
  %c = graph.constant dense<0.594603539> : tensor<f32>
  %qs = graph.mul %q, %c : (tensor<1x2x4x8xf32>, tensor<f32>) -> tensor<1x2x4x8xf32>
  %ks = graph.mul %kt, %c : (tensor<1x2x8x4xf32>, tensor<f32>) -> tensor<1x2x8x4xf32>
  %s = graph.matmul %qs, %ks : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %z = graph.add %s, %mask : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %z {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %same = graph.equal %p, %p : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xi1>
  %nan = graph.not %same : (tensor<1x2x4x4xi1>) -> tensor<1x2x4x4xi1>
  %zero = graph.constant dense<0.0> : tensor<1xf32>
  %pg = graph.where %nan, %zero, %p : (tensor<1x2x4x4xi1>, tensor<1xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = graph.matmul %pg, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  func.return %o : tensor<1x2x4x8xf32>
}
// CHECK-LABEL: func.func @sdpa_export(
// CHECK-NEXT:    %k = graph.transpose %kh {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NEXT:    %o = graph.attention %q, %k, %v, %mask {scale = 0.35355{{[0-9]+}} : f64}
// CHECK-NEXT:    func.return %o

// eager attention: q @ k^T (transpose_b), divided by sqrt(d), no mask
func.func @eager(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x6x8xf32>, %v: tensor<1x2x6x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = graph.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x6x8xf32>) -> tensor<1x2x4x6xf32>
  %d = graph.constant dense<2.828427> : tensor<f32>
  %z = graph.div %s, %d : (tensor<1x2x4x6xf32>, tensor<f32>) -> tensor<1x2x4x6xf32>
  %p = graph.softmax %z {axis = -1 : i64} : (tensor<1x2x4x6xf32>) -> tensor<1x2x4x6xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x6xf32>, tensor<1x2x6x8xf32>) -> tensor<1x2x4x8xf32>
  func.return %o : tensor<1x2x4x8xf32>
}
// CHECK-LABEL: func.func @eager(
// CHECK-NEXT:    %o = graph.attention %q, %k, %v {scale = 0.35355{{[0-9]+}} : f64}
// CHECK-NEXT:    func.return %o

// not attention: the softmax is over the queries (axis 2)
func.func @wrong_axis(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = graph.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %s {axis = 2 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  func.return %o : tensor<1x2x4x8xf32>
}
// CHECK-LABEL: func.func @wrong_axis(
// CHECK-NOT:     graph.attention
// CHECK:         func.return

// not raised: the probabilities are returned too, so they are computed anyway
func.func @probabilities_used(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>) {
  %s = graph.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %s {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  func.return %o, %p : tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>
}
// CHECK-LABEL: func.func @probabilities_used(
// CHECK-NOT:     graph.attention
// CHECK:         func.return

// not raised: v's batch (2) is not q's and k's (1); the checks of graph.attention refuse it and
// nothing of the attempt stays behind
func.func @batch_mismatch(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32> {
  %s = graph.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %s {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  func.return %o : tensor<2x2x4x8xf32>
}
// CHECK-LABEL: func.func @batch_mismatch(
// CHECK-NEXT:    %s = graph.matmul
// CHECK-NEXT:    %p = graph.softmax
// CHECK-NEXT:    %o = graph.matmul
// CHECK-NEXT:    func.return %o

// torch.export writes a 4-D matmul as a 3-D bmm between reshapes: q (scaled) and kT reshaped
// from their heads, the scores reshaped back for the bias, v reshaped straight from a 5-D split
func.func @export_bmm(%q: tensor<2x3x5x4xf32>, %kh: tensor<2x3x5x4xf32>, %qkv: tensor<1x2x3x5x4xf32>, %bias: tensor<1x3x5x5xf32>) -> tensor<6x5x4xf32> {
  %c = graph.constant dense<0.5> : tensor<f32>
  %qs = graph.mul %q, %c : (tensor<2x3x5x4xf32>, tensor<f32>) -> tensor<2x3x5x4xf32>
  %kt = graph.transpose %kh {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x3x5x4xf32>) -> tensor<2x3x4x5xf32>
  %q3 = graph.reshape %qs : (tensor<2x3x5x4xf32>) -> tensor<6x5x4xf32>
  %k3 = graph.reshape %kt : (tensor<2x3x4x5xf32>) -> tensor<6x4x5xf32>
  %s3 = graph.matmul %q3, %k3 : (tensor<6x5x4xf32>, tensor<6x4x5xf32>) -> tensor<6x5x5xf32>
  %s = graph.reshape %s3 : (tensor<6x5x5xf32>) -> tensor<2x3x5x5xf32>
  %z = graph.add %s, %bias : (tensor<2x3x5x5xf32>, tensor<1x3x5x5xf32>) -> tensor<2x3x5x5xf32>
  %p = graph.softmax %z {axis = -1 : i64} : (tensor<2x3x5x5xf32>) -> tensor<2x3x5x5xf32>
  %p3 = graph.reshape %p : (tensor<2x3x5x5xf32>) -> tensor<6x5x5xf32>
  %v3 = graph.reshape %qkv : (tensor<1x2x3x5x4xf32>) -> tensor<6x5x4xf32>
  %o = graph.matmul %p3, %v3 : (tensor<6x5x5xf32>, tensor<6x5x4xf32>) -> tensor<6x5x4xf32>
  func.return %o : tensor<6x5x4xf32>
}
// CHECK-LABEL: func.func @export_bmm(
// CHECK-NEXT:    %v3 = graph.reshape %qkv : (tensor<1x2x3x5x4xf32>) -> tensor<6x5x4xf32>
// CHECK-NEXT:    %v = graph.reshape %v3 : (tensor<6x5x4xf32>) -> tensor<2x3x5x4xf32>
// CHECK-NEXT:    %attention = graph.attention %q, %kh, %v, %bias {scale = 5.000000e-01 : f64}
// CHECK-NEXT:    %o = graph.reshape %attention : (tensor<2x3x5x4xf32>) -> tensor<6x5x4xf32>
// CHECK-NEXT:    func.return %o
