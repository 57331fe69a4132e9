// RUN: infer-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Verifier messages of the graph dialect's attention, rotary and gather: shape inference, element
// types and attribute ranges. One split-input-file chunk per case; each CHECK is
// the message the verifier gives for the op in that chunk, first in the output.

// -----

// attention query rank.
func.func @f(%q: tensor<8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>) {
  %0 = graph.attention %q, %k, %v : (tensor<8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<1x8x4x32xf32>
  func.return
}
// CHECK: the query [B, Hq, Sq, D] must have rank 4, got shape 8x4x16
// CHECK-NEXT: "builtin.module"() ({

// -----

// attention key/value length.
func.func @f(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x5x32xf32>) {
  %0 = graph.attention %q, %k, %v : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x5x32xf32>) -> tensor<1x8x4x32xf32>
  func.return
}
// CHECK: key 1x2x6x16 and value 1x2x5x32 must agree on batch, heads and length
// CHECK-NEXT: "builtin.module"() ({

// -----

// attention batch.
func.func @f(%q: tensor<2x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>) {
  %0 = graph.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<2x8x4x32xf32>
  func.return
}
// CHECK: query batch 2 differs from key batch 1
// CHECK-NEXT: "builtin.module"() ({

// -----

// attention head dim.
func.func @f(%q: tensor<1x8x4x8xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>) {
  %0 = graph.attention %q, %k, %v : (tensor<1x8x4x8xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<1x8x4x32xf32>
  func.return
}
// CHECK: query head dim 8 differs from key head dim 16
// CHECK-NEXT: "builtin.module"() ({

// -----

// attention grouped heads.
func.func @f(%q: tensor<1x6x4x16xf32>, %k: tensor<1x4x6x16xf32>, %v: tensor<1x4x6x32xf32>) {
  %0 = graph.attention %q, %k, %v : (tensor<1x6x4x16xf32>, tensor<1x4x6x16xf32>, tensor<1x4x6x32xf32>) -> tensor<1x6x4x32xf32>
  func.return
}
// CHECK: query heads (6) must be a multiple of key/value heads (4)
// CHECK-NEXT: "builtin.module"() ({

// -----

// causal attention needs Skv >= Sq.
func.func @f(%q: tensor<1x8x8x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>) {
  %0 = graph.attention %q, %k, %v {causal = true} : (tensor<1x8x8x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<1x8x8x32xf32>
  func.return
}
// CHECK: causal attention needs at least as many keys (6) as queries (8)
// CHECK-NEXT: "builtin.module"() ({

// -----

// attention mask type.
func.func @f(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>, %m: tensor<4x6xi32>) {
  %0 = graph.attention %q, %k, %v, %m : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>, tensor<4x6xi32>) -> tensor<1x8x4x32xf32>
  func.return
}
// CHECK: the mask must be i1 (true = attend) or additive with the query's element type, got i32
// CHECK-NEXT: "builtin.module"() ({

// -----

// attention mask shape.
func.func @f(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>, %m: tensor<4x5xi1>) {
  %0 = graph.attention %q, %k, %v, %m : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>, tensor<4x5xi1>) -> tensor<1x8x4x32xf32>
  func.return
}
// CHECK: shapes 4x5, 1x8x4x6 are not broadcast-compatible (dimension -1 is 5 in one operand and 6 in another)
// CHECK-NEXT: "builtin.module"() ({

// -----

// attention mask must not grow the scores.
func.func @f(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>, %m: tensor<2x1x4x6xf32>) {
  %0 = graph.attention %q, %k, %v, %m : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>, tensor<2x1x4x6xf32>) -> tensor<1x8x4x32xf32>
  func.return
}
// CHECK: mask 2x1x4x6 does not broadcast to the scores' shape 1x8x4x6
// CHECK-NEXT: "builtin.module"() ({

// -----

// attention on integers.
func.func @f(%q: tensor<1x8x4x16xi8>, %k: tensor<1x2x6x16xi8>, %v: tensor<1x2x6x32xi8>) {
  %0 = graph.attention %q, %k, %v : (tensor<1x8x4x16xi8>, tensor<1x2x6x16xi8>, tensor<1x2x6x32xi8>) -> tensor<1x8x4x32xi8>
  func.return
}
// CHECK: the query must have a floating-point element type (f32, f16, bf16, f64), got i8
// CHECK-NEXT: "builtin.module"() ({

// -----

// attention result takes the value's head dim.
func.func @f(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>) {
  %0 = graph.attention %q, %k, %v : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<1x8x4x16xf32>
  func.return
}
// CHECK: result #0 has shape 1x8x4x16 but the operands and attributes give 1x8x4x32
// CHECK-NEXT: "builtin.module"() ({

// -----

// rotary cos/sin shapes.
func.func @f(%x: tensor<4x16xf32>, %c: tensor<4x16xf32>, %s: tensor<4x8xf32>) {
  %0 = graph.rotary %x, %c, %s : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>
  func.return
}
// CHECK: cos 4x16 and sin 4x8 differ
// CHECK-NEXT: "builtin.module"() ({

// -----

// rotary dim even.
func.func @f(%x: tensor<4x16xf32>, %c: tensor<4x7xf32>) {
  %0 = graph.rotary %x, %c, %c : (tensor<4x16xf32>, tensor<4x7xf32>, tensor<4x7xf32>) -> tensor<4x16xf32>
  func.return
}
// CHECK: the rotary dim (cos.shape[-1] = 7) must be even and at most the feature dim 16
// CHECK-NEXT: "builtin.module"() ({

// -----

// rotary dim at most the feature dim.
func.func @f(%x: tensor<4x16xf32>, %c: tensor<4x32xf32>) {
  %0 = graph.rotary %x, %c, %c : (tensor<4x16xf32>, tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x16xf32>
  func.return
}
// CHECK: the rotary dim (cos.shape[-1] = 32) must be even and at most the feature dim 16
// CHECK-NEXT: "builtin.module"() ({

// -----

// rotary input rank.
func.func @f(%x: tensor<16xf32>, %c: tensor<16xf32>) {
  %0 = graph.rotary %x, %c, %c : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  func.return
}
// CHECK: the input must be [..., S, D], got 16
// CHECK-NEXT: "builtin.module"() ({

// -----

// rotary positions.
func.func @f(%x: tensor<4x16xf32>, %c: tensor<5x16xf32>) {
  %0 = graph.rotary %x, %c, %c : (tensor<4x16xf32>, tensor<5x16xf32>, tensor<5x16xf32>) -> tensor<4x16xf32>
  func.return
}
// CHECK: shapes 5x16, 4x16 are not broadcast-compatible (dimension -2 is 5 in one operand and 4 in another)
// CHECK-NEXT: "builtin.module"() ({

// -----

// rotary element types.
func.func @f(%x: tensor<4x16xf16>, %c: tensor<4x16xf32>) {
  %0 = graph.rotary %x, %c, %c : (tensor<4x16xf16>, tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf16>
  func.return
}
// CHECK: operands must share one element type, got f16, f32, f32
// CHECK-NEXT: "builtin.module"() ({

// -----

// gather indices are integers.
func.func @f(%t: tensor<10x4xf32>, %i: tensor<3xf32>) {
  %0 = graph.gather %t, %i : (tensor<10x4xf32>, tensor<3xf32>) -> tensor<3x4xf32>
  func.return
}
// CHECK: indices must be integers, got f32
// CHECK-NEXT: "builtin.module"() ({

// -----

// gather axis.
func.func @f(%t: tensor<10x4xf32>, %i: tensor<3xi64>) {
  %0 = graph.gather %t, %i {axis = 2 : i64} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
  func.return
}
// CHECK: axis 2 is out of range for a rank-2 operand (expected -2 <= axis < 2)
// CHECK-NEXT: "builtin.module"() ({

// -----

// gather result shape.
func.func @f(%t: tensor<10x4xf32>, %i: tensor<3xi64>) {
  %0 = graph.gather %t, %i {axis = 1 : i64} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
  func.return
}
// CHECK: result #0 has shape 3x4 but the operands and attributes give 10x3
// CHECK-NEXT: "builtin.module"() ({

// -----

// gather from a scalar.
func.func @f(%t: tensor<f32>, %i: tensor<3xi64>) {
  %0 = graph.gather %t, %i : (tensor<f32>, tensor<3xi64>) -> tensor<3xf32>
  func.return
}
// CHECK: cannot gather from a scalar
// CHECK-NEXT: "builtin.module"() ({
