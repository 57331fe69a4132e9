// RUN: infer-opt %s --split-input-file --verify-diagnostics

// Verifier messages of the graph dialect's data movement and reductions: shape inference, element
// types and attribute ranges. One split-input-file chunk per case; the
// expected-error annotation is (part of) the message the verifier gives for the op below it.

// -----

// reshape element count.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{cannot reshape 2x3 (6 elements) to 5 (5 elements)}}
  %0 = graph.reshape %x : (tensor<2x3xf32>) -> tensor<5xf32>
  func.return
}

// -----

// reshape keeps the element type.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{result #0 has element type i32 but the operands give f32}}
  %0 = graph.reshape %x : (tensor<2x3xf32>) -> tensor<6xi32>
  func.return
}

// -----

// transpose perm length.
func.func @f(%x: tensor<2x3x4xf32>) {
  // expected-error @+1 {{perm [0, 1] is not a permutation of 0..2 (input rank 3)}}
  %0 = graph.transpose %x {perm = array<i64: 0, 1>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  func.return
}

// -----

// transpose perm repeats.
func.func @f(%x: tensor<2x3x4xf32>) {
  // expected-error @+1 {{perm [0, 1, 1] is not a permutation of 0..2 (input rank 3)}}
  %0 = graph.transpose %x {perm = array<i64: 0, 1, 1>} : (tensor<2x3x4xf32>) -> tensor<2x3x3xf32>
  func.return
}

// -----

// transpose result shape.
func.func @f(%x: tensor<2x3x4xf32>) {
  // expected-error @+1 {{result #0 has shape 2x3x4 but the operands and attributes give 4x2x3}}
  %0 = graph.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  func.return
}

// -----

// concat other dims agree.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<3x3xf32>) {
  // expected-error @+1 {{shapes 2x3, 3x3 must agree on every dimension except axis 1}}
  %0 = graph.concat %x, %y {axis = 1 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x6xf32>
  func.return
}

// -----

// concat axis.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{axis 2 is out of range for a rank-2 operand (expected -2 <= axis < 2)}}
  %0 = graph.concat %x, %x {axis = 2 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return
}

// -----

// concat element types.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<2x3xf16>) {
  // expected-error @+1 {{operands must share one element type, got f32, f16}}
  %0 = graph.concat %x, %y {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<4x3xf32>
  func.return
}

// -----

// concat of nothing.
func.func @f() {
  // expected-error @+1 {{needs at least one input}}
  %0 = "graph.concat"() <{axis = 0 : i64}> : () -> tensor<0xf32>
  func.return
}

// -----

// concat ranks.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<2xf32>) {
  // expected-error @+1 {{shapes 2x3, 2 must agree on every dimension except axis 0}}
  %0 = graph.concat %x, %y {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2xf32>) -> tensor<4x3xf32>
  func.return
}

// -----

// slice needs an entry per dim.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{starts, ends and steps need one entry per dimension (2), got 1, 1 and 1}}
  %0 = graph.slice %x {starts = array<i64: 0>, ends = array<i64: 2>, steps = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return
}

// -----

// slice step 0.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{step of dimension 1 is 0}}
  %0 = graph.slice %x {starts = array<i64: 0, 0>, ends = array<i64: 2, 3>, steps = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return
}

// -----

// slice end past the dim.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{dimension 1 (size 3): need 0 <= start (0) <= end (4) <= 3}}
  %0 = graph.slice %x {starts = array<i64: 0, 0>, ends = array<i64: 2, 4>, steps = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2x4xf32>
  func.return
}

// -----

// slice start after end.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{dimension 1 (size 3): need 0 <= start (2) <= end (1) <= 3}}
  %0 = graph.slice %x {starts = array<i64: 0, 2>, ends = array<i64: 2, 1>, steps = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2x0xf32>
  func.return
}

// -----

// slice negative step start.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{dimension 1 (size 3): with a negative step need -1 <= end (-1) <= start (3) < 3}}
  %0 = graph.slice %x {starts = array<i64: 0, 3>, ends = array<i64: 2, -1>, steps = array<i64: 1, -1>} : (tensor<2x3xf32>) -> tensor<2x4xf32>
  func.return
}

// -----

// slice result shape (ceil division).
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{result #0 has shape 2x1 but the operands and attributes give 2x2}}
  %0 = graph.slice %x {starts = array<i64: 0, 0>, ends = array<i64: 2, 3>, steps = array<i64: 1, 2>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  func.return
}

// -----

// broadcast dims.
func.func @f(%x: tensor<3x2xf32>) {
  // expected-error @+1 {{cannot broadcast 3x2 to 3x4}}
  %0 = graph.broadcast %x : (tensor<3x2xf32>) -> tensor<3x4xf32>
  func.return
}

// -----

// broadcast rank.
func.func @f(%x: tensor<3x2xf32>) {
  // expected-error @+1 {{cannot broadcast 3x2 to 2}}
  %0 = graph.broadcast %x : (tensor<3x2xf32>) -> tensor<2xf32>
  func.return
}

// -----

// pad length.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{pads must hold 4 non-negative integers (before..., after...), got [1, 1]}}
  %0 = graph.pad %x {pads = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<3x4xf32>
  func.return
}

// -----

// pad negative.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{pads must hold 4 non-negative integers (before..., after...), got [0, -1, 0, 0]}}
  %0 = graph.pad %x {pads = array<i64: 0, -1, 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  func.return
}

// -----

// reduce axis range.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{reduction axis 2 is out of range for a rank-2 operand (expected -2 <= reduction axis < 2)}}
  %0 = graph.reduce_sum %x {axes = array<i64: 2>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return
}

// -----

// reduce axes repeat.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{axes [1, -1] repeat a dimension}}
  %0 = graph.reduce_mean %x {axes = array<i64: 1, -1>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  func.return
}

// -----

// reduce keepdims result.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{result #0 has shape 2 but the operands and attributes give 2x1}}
  %0 = graph.reduce_max %x {axes = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
  func.return
}

// -----

// reduce all without keepdims.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{result #0 has shape 1x1 but the operands and attributes give scalar}}
  %0 = graph.reduce_min %x {keepdims = false} : (tensor<2x3xf32>) -> tensor<1x1xf32>
  func.return
}

// -----

// reduce keeps the element type.
func.func @f(%x: tensor<2x3xi32>) {
  // expected-error @+1 {{result #0 has element type i64 but the operands give i32}}
  %0 = graph.reduce_prod %x : (tensor<2x3xi32>) -> tensor<1x1xi64>
  func.return
}

// -----

// argmax needs one axis.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{axes must name exactly one axis, got []}}
  %0 = graph.argmax %x : (tensor<2x3xf32>) -> tensor<1x1xi64>
  func.return
}

// -----

// argmin gives i64.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{result #0 has element type f32 but the operands give i64}}
  %0 = graph.argmin %x {axes = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  func.return
}

// -----

// top_k's k is at most the axis length.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{k = 4 is out of range for an axis of 3 elements (0 <= k <= 3)}}
  %0 = graph.top_k %x {k = 4 : i64} : (tensor<2x3xf32>) -> tensor<2x4xi64>
  func.return
}

// -----

// top_k's axis is in range.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{axis 2 is out of range for a rank-2 operand}}
  %0 = graph.top_k %x {k = 1 : i64, axis = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x1xi64>
  func.return
}

// -----

// top_k gives i64 indices.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{result #0 has element type f32 but the operands give i64}}
  %0 = graph.top_k %x {k = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  func.return
}

// -----

// top_k of a scalar.
func.func @f(%x: tensor<f32>) {
  // expected-error @+1 {{the input must have rank 1 or more, got a scalar}}
  %0 = graph.top_k %x {k = 1 : i64} : (tensor<f32>) -> tensor<i64>
  func.return
}
