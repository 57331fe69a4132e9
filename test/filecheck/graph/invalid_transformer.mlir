// RUN: infer-opt %s --split-input-file --verify-diagnostics

// Verifier messages of the graph dialect's attention, rotary and gather: shape inference, element
// types and attribute ranges. One split-input-file chunk per case; the
// expected-error annotation is (part of) the message the verifier gives for the op below it.

// -----

// attention query rank.
func.func @f(%q: tensor<8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>) {
  // expected-error @+1 {{the query [B, Hq, Sq, D] must have rank 4, got shape 8x4x16}}
  %0 = graph.attention %q, %k, %v : (tensor<8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<1x8x4x32xf32>
  func.return
}

// -----

// attention key/value length.
func.func @f(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x5x32xf32>) {
  // expected-error @+1 {{key 1x2x6x16 and value 1x2x5x32 must agree on batch, heads and length}}
  %0 = graph.attention %q, %k, %v : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x5x32xf32>) -> tensor<1x8x4x32xf32>
  func.return
}

// -----

// attention batch.
func.func @f(%q: tensor<2x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>) {
  // expected-error @+1 {{query batch 2 differs from key batch 1}}
  %0 = graph.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<2x8x4x32xf32>
  func.return
}

// -----

// attention head dim.
func.func @f(%q: tensor<1x8x4x8xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>) {
  // expected-error @+1 {{query head dim 8 differs from key head dim 16}}
  %0 = graph.attention %q, %k, %v : (tensor<1x8x4x8xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<1x8x4x32xf32>
  func.return
}

// -----

// attention grouped heads.
func.func @f(%q: tensor<1x6x4x16xf32>, %k: tensor<1x4x6x16xf32>, %v: tensor<1x4x6x32xf32>) {
  // expected-error @+1 {{query heads (6) must be a multiple of key/value heads (4)}}
  %0 = graph.attention %q, %k, %v : (tensor<1x6x4x16xf32>, tensor<1x4x6x16xf32>, tensor<1x4x6x32xf32>) -> tensor<1x6x4x32xf32>
  func.return
}

// -----

// causal attention needs Skv >= Sq.
func.func @f(%q: tensor<1x8x8x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>) {
  // expected-error @+1 {{causal attention needs at least as many keys (6) as queries (8)}}
  %0 = graph.attention %q, %k, %v {causal = true} : (tensor<1x8x8x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<1x8x8x32xf32>
  func.return
}

// -----

// attention mask type.
func.func @f(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>, %m: tensor<4x6xi32>) {
  // expected-error @+1 {{the mask must be i1 (true = attend) or additive with the query's element type, got i32}}
  %0 = graph.attention %q, %k, %v, %m : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>, tensor<4x6xi32>) -> tensor<1x8x4x32xf32>
  func.return
}

// -----

// attention mask shape.
func.func @f(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>, %m: tensor<4x5xi1>) {
  // expected-error @+1 {{shapes 4x5, 1x8x4x6 are not broadcast-compatible (dimension -1 is 5 in one operand and 6 in another)}}
  %0 = graph.attention %q, %k, %v, %m : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>, tensor<4x5xi1>) -> tensor<1x8x4x32xf32>
  func.return
}

// -----

// attention mask must not grow the scores.
func.func @f(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>, %m: tensor<2x1x4x6xf32>) {
  // expected-error @+1 {{mask 2x1x4x6 does not broadcast to the scores' shape 1x8x4x6}}
  %0 = graph.attention %q, %k, %v, %m : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>, tensor<2x1x4x6xf32>) -> tensor<1x8x4x32xf32>
  func.return
}

// -----

// attention on integers.
func.func @f(%q: tensor<1x8x4x16xi8>, %k: tensor<1x2x6x16xi8>, %v: tensor<1x2x6x32xi8>) {
  // expected-error @+1 {{the query must have a floating-point element type (f32, f16, bf16, f64), got i8}}
  %0 = graph.attention %q, %k, %v : (tensor<1x8x4x16xi8>, tensor<1x2x6x16xi8>, tensor<1x2x6x32xi8>) -> tensor<1x8x4x32xi8>
  func.return
}

// -----

// attention result takes the value's head dim.
func.func @f(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>) {
  // expected-error @+1 {{result #0 has shape 1x8x4x16 but the operands and attributes give 1x8x4x32}}
  %0 = graph.attention %q, %k, %v : (tensor<1x8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<1x8x4x16xf32>
  func.return
}

// -----

// rotary cos/sin shapes.
func.func @f(%x: tensor<4x16xf32>, %c: tensor<4x16xf32>, %s: tensor<4x8xf32>) {
  // expected-error @+1 {{cos 4x16 and sin 4x8 differ}}
  %0 = graph.rotary %x, %c, %s : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

// rotary dim even.
func.func @f(%x: tensor<4x16xf32>, %c: tensor<4x7xf32>) {
  // expected-error @+1 {{the rotary dim (cos.shape[-1] = 7) must be even and at most the feature dim 16}}
  %0 = graph.rotary %x, %c, %c : (tensor<4x16xf32>, tensor<4x7xf32>, tensor<4x7xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

// rotary dim at most the feature dim.
func.func @f(%x: tensor<4x16xf32>, %c: tensor<4x32xf32>) {
  // expected-error @+1 {{the rotary dim (cos.shape[-1] = 32) must be even and at most the feature dim 16}}
  %0 = graph.rotary %x, %c, %c : (tensor<4x16xf32>, tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

// rotary input rank.
func.func @f(%x: tensor<16xf32>, %c: tensor<16xf32>) {
  // expected-error @+1 {{the input must be [..., S, D], got 16}}
  %0 = graph.rotary %x, %c, %c : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  func.return
}

// -----

// rotary positions.
func.func @f(%x: tensor<4x16xf32>, %c: tensor<5x16xf32>) {
  // expected-error @+1 {{shapes 5x16, 4x16 are not broadcast-compatible (dimension -2 is 5 in one operand and 4 in another)}}
  %0 = graph.rotary %x, %c, %c : (tensor<4x16xf32>, tensor<5x16xf32>, tensor<5x16xf32>) -> tensor<4x16xf32>
  func.return
}

// -----

// rotary element types.
func.func @f(%x: tensor<4x16xf16>, %c: tensor<4x16xf32>) {
  // expected-error @+1 {{operands must share one element type, got f16, f32, f32}}
  %0 = graph.rotary %x, %c, %c : (tensor<4x16xf16>, tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf16>
  func.return
}

// -----

// gather indices are integers.
func.func @f(%t: tensor<10x4xf32>, %i: tensor<3xf32>) {
  // expected-error @+1 {{indices must be integers, got f32}}
  %0 = graph.gather %t, %i : (tensor<10x4xf32>, tensor<3xf32>) -> tensor<3x4xf32>
  func.return
}

// -----

// gather axis.
func.func @f(%t: tensor<10x4xf32>, %i: tensor<3xi64>) {
  // expected-error @+1 {{axis 2 is out of range for a rank-2 operand (expected -2 <= axis < 2)}}
  %0 = graph.gather %t, %i {axis = 2 : i64} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
  func.return
}

// -----

// gather result shape.
func.func @f(%t: tensor<10x4xf32>, %i: tensor<3xi64>) {
  // expected-error @+1 {{result #0 has shape 3x4 but the operands and attributes give 10x3}}
  %0 = graph.gather %t, %i {axis = 1 : i64} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
  func.return
}

// -----

// gather from a scalar.
func.func @f(%t: tensor<f32>, %i: tensor<3xi64>) {
  // expected-error @+1 {{cannot gather from a scalar}}
  %0 = graph.gather %t, %i : (tensor<f32>, tensor<3xi64>) -> tensor<3xf32>
  func.return
}
