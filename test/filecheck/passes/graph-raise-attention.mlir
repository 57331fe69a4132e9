// RUN: infer-opt %s -p graph-raise-attention | filecheck %s
// Each raised form computes what its matmuls and softmax did (the interpreter, within rounding):
// RUN: infer-opt %s -p graph-raise-attention --verify-each-numerically --verify-numerics-entry sdpa_export -o /dev/null
// RUN: infer-opt %s -p graph-raise-attention --verify-each-numerically --verify-numerics-entry eager -o /dev/null
// RUN: infer-opt %s -p graph-raise-attention --verify-each-numerically --verify-numerics-entry export_bmm -o /dev/null
// RUN: infer-opt %s -p graph-raise-attention --verify-each-numerically --verify-numerics-entry shifted_windows -o /dev/null
// RUN: infer-opt %s -p graph-raise-attention --verify-each-numerically --verify-numerics-entry runtime_window_mask -o /dev/null
// RUN: infer-opt %s -p graph-raise-attention --verify-each-numerically --verify-numerics-entry boolean_mask -o /dev/null
// RUN: infer-opt %s -p graph-raise-attention --verify-each-numerically --verify-numerics-entry mixed_terms -o /dev/null

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
// CHECK-NEXT:    %v = graph.reshape %qkv : (tensor<1x2x3x5x4xf32>) -> tensor<2x3x5x4xf32>
// CHECK-NEXT:    %attention = graph.attention %q, %kh, %v, %bias {scale = 5.000000e-01 : f64}
// CHECK-NEXT:    %o = graph.reshape %attention : (tensor<2x3x5x4xf32>) -> tensor<6x5x4xf32>
// CHECK-NEXT:    func.return %o

// Swin's shifted windows (torch.export): q @ kT of 2 windows x 2 heads (bmm between the heads'
// reshapes) plus a relative position bias, then the windows' mask added through the 5-D view
// [1, windows, heads, L, L]; both terms compile-time: summed into one [2, 2, 4, 4] weight
func.func @shifted_windows(%q: tensor<2x2x4x8xf32>, %kt: tensor<2x2x8x4xf32>, %v: tensor<2x2x4x8xf32>) -> tensor<4x4x8xf32> {
  %q3 = graph.reshape %q : (tensor<2x2x4x8xf32>) -> tensor<4x4x8xf32>
  %k3 = graph.reshape %kt : (tensor<2x2x8x4xf32>) -> tensor<4x8x4xf32>
  %s3 = graph.matmul %q3, %k3 : (tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<4x4x4xf32>
  %s = graph.reshape %s3 : (tensor<4x4x4xf32>) -> tensor<2x2x4x4xf32>
  %bias = graph.constant dense<[[[[1.764, 0.400, 0.979, 2.241],   [1.868, -0.977, 0.950, -0.151],   [-0.103, 0.411, 0.144, 1.454],   [0.761, 0.122, 0.444, 0.334]],  [[1.494, -0.205, 0.313, -0.854],   [-2.553, 0.654, 0.864, -0.742],   [2.270, -1.454, 0.046, -0.187],   [1.533, 1.469, 0.155, 0.378]]]]> : tensor<1x2x4x4xf32>
  %sb = graph.add %s, %bias : (tensor<2x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %s5 = graph.reshape %sb : (tensor<2x2x4x4xf32>) -> tensor<1x2x2x4x4xf32>
  %mask = graph.constant dense<[[[[[0.000, 0.000, 0.000, -100.000],    [0.000, 0.000, -100.000, -100.000],    [0.000, 0.000, 0.000, 0.000],    [0.000, -100.000, -100.000, -100.000]]],  [[[0.000, -100.000, 0.000, -100.000],    [-100.000, -100.000, 0.000, -100.000],    [-100.000, 0.000, 0.000, -100.000],    [0.000, -100.000, 0.000, 0.000]]]]]> : tensor<1x2x1x4x4xf32>
  %z5 = graph.add %s5, %mask : (tensor<1x2x2x4x4xf32>, tensor<1x2x1x4x4xf32>) -> tensor<1x2x2x4x4xf32>
  %z = graph.reshape %z5 : (tensor<1x2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = graph.softmax %z {axis = -1 : i64} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p3 = graph.reshape %p : (tensor<2x2x4x4xf32>) -> tensor<4x4x4xf32>
  %v3 = graph.reshape %v : (tensor<2x2x4x8xf32>) -> tensor<4x4x8xf32>
  %o = graph.matmul %p3, %v3 : (tensor<4x4x4xf32>, tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
  func.return %o : tensor<4x4x8xf32>
}
// CHECK-LABEL: func.func @shifted_windows(
// CHECK-NEXT:    %k = graph.transpose %kt {perm = array<i64: 0, 1, 3, 2>}
// CHECK-NEXT:    %mask = graph.weight @attention_mask : tensor<2x2x4x4xf32>
// CHECK-NEXT:    %attention = graph.attention %q, %k, %v, %mask {scale = 1.000000e+00 : f64}
// CHECK-NEXT:    %o = graph.reshape %attention : (tensor<2x2x4x8xf32>) -> tensor<4x4x8xf32>
// CHECK-NEXT:    func.return %o

// a runtime mask through the 5-D view and a runtime bias: the mask broadcast over the windows'
// batch, merged to 4-D and added to the bias by graph ops
func.func @runtime_window_mask(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>, %bias: tensor<2x4x4xf32>, %mask: tensor<2x1x4x4xf32>) -> tensor<2x2x4x8xf32> {
  %s = graph.matmul %q, %k {transpose_b = true} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %sb = graph.add %bias, %s : (tensor<2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %s5 = graph.reshape %sb : (tensor<2x2x4x4xf32>) -> tensor<1x2x2x4x4xf32>
  %z5 = graph.add %mask, %s5 : (tensor<2x1x4x4xf32>, tensor<1x2x2x4x4xf32>) -> tensor<1x2x2x4x4xf32>
  %z = graph.reshape %z5 : (tensor<1x2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = graph.softmax %z {axis = -1 : i64} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  func.return %o : tensor<2x2x4x8xf32>
}
// CHECK-LABEL: func.func @runtime_window_mask(
// CHECK-NEXT:    %[[BIAS:.*]] = graph.reshape %bias : (tensor<2x4x4xf32>) -> tensor<1x2x4x4xf32>
// CHECK-NEXT:    %[[FULL:.*]] = graph.broadcast %mask : (tensor<2x1x4x4xf32>) -> tensor<1x2x1x4x4xf32>
// CHECK-NEXT:    %[[MERGED:.*]] = graph.reshape %[[FULL]] : (tensor<1x2x1x4x4xf32>) -> tensor<2x1x4x4xf32>
// CHECK-NEXT:    %[[MASK:.*]] = graph.add %[[BIAS]], %[[MERGED]] : (tensor<1x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32>
// CHECK-NEXT:    %o = graph.attention %q, %k, %v, %[[MASK]] {scale = 1.000000e+00 : f64}
// CHECK-NEXT:    func.return %o

// torch.onnx's boolean mask: where(mask, 0, -inf) added to the scores; graph.attention takes the
// boolean mask itself (its kernel never meets -inf - -inf for a row with every key masked)
func.func @boolean_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %mask: tensor<1x1x4x4xi1>) -> tensor<1x2x4x8xf32> {
  %s = graph.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %zero = graph.constant dense<0.0> : tensor<1xf32>
  %ninf = graph.constant dense<0xFF800000> : tensor<1xf32>
  %bias = graph.where %mask, %zero, %ninf : (tensor<1x1x4x4xi1>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x1x4x4xf32>
  %z = graph.add %s, %bias : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %z {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  func.return %o : tensor<1x2x4x8xf32>
}
// CHECK-LABEL: func.func @boolean_mask(
// CHECK-NEXT:    %o = graph.attention %q, %k, %v, %mask {scale = 1.000000e+00 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x1x4x4xi1>)
// CHECK-NEXT:    func.return %o

// a compile-time mask through the 5-D view, then a runtime bias: lifted and added by graph ops
func.func @mixed_terms(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>, %bias: tensor<1x2x4x4xf32>) -> tensor<2x2x4x8xf32> {
  %s = graph.matmul %q, %k {transpose_b = true} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %s5 = graph.reshape %s : (tensor<2x2x4x4xf32>) -> tensor<1x2x2x4x4xf32>
  %mask = graph.constant dense<[[[[0.0, -100.0, 0.0, 0.0]]], [[[0.0, 0.0, -100.0, 0.0]]]]> : tensor<2x1x1x4xf32>
  %z5 = graph.add %s5, %mask : (tensor<1x2x2x4x4xf32>, tensor<2x1x1x4xf32>) -> tensor<1x2x2x4x4xf32>
  %z = graph.reshape %z5 : (tensor<1x2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %zb = graph.add %z, %bias : (tensor<2x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = graph.softmax %zb {axis = -1 : i64} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  func.return %o : tensor<2x2x4x8xf32>
}
// CHECK-LABEL: func.func @mixed_terms(
// CHECK:         %[[FULL:.*]] = graph.broadcast %mask : (tensor<2x1x1x4xf32>) -> tensor<1x2x1x1x4xf32>
// CHECK-NEXT:    %[[MERGED:.*]] = graph.reshape %[[FULL]] : (tensor<1x2x1x1x4xf32>) -> tensor<2x1x1x4xf32>
// CHECK-NEXT:    %[[MASK:.*]] = graph.add %[[MERGED]], %bias : (tensor<2x1x1x4xf32>, tensor<1x2x4x4xf32>) -> tensor<2x2x4x4xf32>
// CHECK-NEXT:    %o = graph.attention %q, %k, %v, %[[MASK]] {scale = 1.000000e+00 : f64}
