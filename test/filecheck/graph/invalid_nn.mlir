// RUN: infer-opt %s --split-input-file --verify-diagnostics

// Verifier messages of the graph dialect's matmul, linear, conv2d, pooling and normalization ops: shape inference, element
// types and attribute ranges. One split-input-file chunk per case; the
// expected-error annotation is (part of) the message the verifier gives for the op below it.

// -----

// matmul contraction.
func.func @f(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+1 {{contraction dimensions differ: lhs 2x3 has K=3, rhs 4x5 has K=4}}
  %0 = graph.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  func.return
}

// -----

// matmul transposed result.
func.func @f(%a: tensor<2x3xf32>, %b: tensor<5x3xf32>) {
  // expected-error @+1 {{result #0 has shape 2x3 but the operands and attributes give 2x5}}
  %0 = graph.matmul %a, %b {transpose_b = true} : (tensor<2x3xf32>, tensor<5x3xf32>) -> tensor<2x3xf32>
  func.return
}

// -----

// matmul of a scalar.
func.func @f(%a: tensor<f32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{operands must have rank >= 1 (scalars cannot be multiplied)}}
  %0 = graph.matmul %a, %b : (tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
  func.return
}

// -----

// transpose of a vector.
func.func @f(%a: tensor<3xf32>, %b: tensor<3x4xf32>) {
  // expected-error @+1 {{a transposed operand must have rank >= 2}}
  %0 = graph.matmul %a, %b {transpose_a = true} : (tensor<3xf32>, tensor<3x4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// matmul batch broadcasting.
func.func @f(%a: tensor<2x4x3xf32>, %b: tensor<3x3x5xf32>) {
  // expected-error @+1 {{shapes 2, 3 are not broadcast-compatible (dimension -1 is 2 in one operand and 3 in another)}}
  %0 = graph.matmul %a, %b : (tensor<2x4x3xf32>, tensor<3x3x5xf32>) -> tensor<2x4x5xf32>
  func.return
}

// -----

// matmul element types.
func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x5xbf16>) {
  // expected-error @+1 {{operands must share one element type, got f32, bf16}}
  %0 = graph.matmul %a, %b : (tensor<2x3xf32>, tensor<3x5xbf16>) -> tensor<2x5xf32>
  func.return
}

// -----

// vector dot product is a scalar.
func.func @f(%a: tensor<3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{result #0 has shape 1 but the operands and attributes give scalar}}
  %0 = graph.matmul %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<1xf32>
  func.return
}

// -----

// linear in-features.
func.func @f(%x: tensor<2x3xf32>, %w: tensor<4x5xf32>) {
  // expected-error @+1 {{input features 3 (shape 2x3) do not match the weight's in-features 5 (weight shape 4x5, expected [out, in])}}
  %0 = graph.linear %x, %w : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x4xf32>
  func.return
}

// -----

// linear weight rank.
func.func @f(%x: tensor<2x3xf32>, %w: tensor<3xf32>) {
  // expected-error @+1 {{the weight [out, in] must have rank 2, got shape 3}}
  %0 = graph.linear %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2xf32>
  func.return
}

// -----

// linear bias shape.
func.func @f(%x: tensor<2x3xf32>, %w: tensor<4x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{bias must have shape 4, got 3}}
  %0 = graph.linear %x, %w, %b : (tensor<2x3xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x4xf32>
  func.return
}

// -----

// linear of a scalar.
func.func @f(%x: tensor<f32>, %w: tensor<4x1xf32>) {
  // expected-error @+1 {{the input must have rank >= 1}}
  %0 = graph.linear %x, %w : (tensor<f32>, tensor<4x1xf32>) -> tensor<4xf32>
  func.return
}

// -----

// conv2d input rank.
func.func @f(%x: tensor<1x4x8xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+1 {{the input (NCHW) must have rank 4, got shape 1x4x8}}
  %0 = graph.conv2d %x, %w : (tensor<1x4x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}

// -----

// conv2d weight rank.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3xf32>) {
  // expected-error @+1 {{the weight (OIHW) must have rank 4, got shape 8x4x3}}
  %0 = graph.conv2d %x, %w : (tensor<1x4x8x8xf32>, tensor<8x4x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}

// -----

// conv2d channels.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x3x3x3xf32>) {
  // expected-error @+1 {{the weight expects 3 input channels per group, but the input has 4 channels in 1 group(s) (4 per group)}}
  %0 = graph.conv2d %x, %w : (tensor<1x4x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}

// -----

// conv2d groups divide channels.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<6x2x3x3xf32>) {
  // expected-error @+1 {{input channels (4) and output channels (6) must both be divisible by groups (4)}}
  %0 = graph.conv2d %x, %w {groups = 4 : i64} : (tensor<1x4x8x8xf32>, tensor<6x2x3x3xf32>) -> tensor<1x6x6x6xf32>
  func.return
}

// -----

// conv2d groups >= 1.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+1 {{groups must be >= 1, got 0}}
  %0 = graph.conv2d %x, %w {groups = 0 : i64} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}

// -----

// conv2d bias.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{bias must have shape 8 (one per output channel), got 4}}
  %0 = graph.conv2d %x, %w, %b : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<4xf32>) -> tensor<1x8x6x6xf32>
  func.return
}

// -----

// conv2d stride.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+1 {{stride must be 2 positive integers, got [0, 1]}}
  %0 = graph.conv2d %x, %w {stride = array<i64: 0, 1>} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}

// -----

// conv2d padding has 4 entries.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+1 {{padding must be 4 non-negative integers [top, left, bottom, right], got [1, 1]}}
  %0 = graph.conv2d %x, %w {padding = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x8x8xf32>
  func.return
}

// -----

// conv2d dilation.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+1 {{dilation must be 2 positive integers, got [1, 0]}}
  %0 = graph.conv2d %x, %w {dilation = array<i64: 1, 0>} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}

// -----

// conv2d window larger than the input.
func.func @f(%x: tensor<1x4x2x2xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+1 {{the window (kernel 3, dilation 1) is larger than the padded input (2 + padding 0+0)}}
  %0 = graph.conv2d %x, %w : (tensor<1x4x2x2xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x1x1xf32>
  func.return
}

// -----

// conv2d output size.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+1 {{result #0 has shape 1x8x4x4 but the operands and attributes give 1x8x3x3}}
  %0 = graph.conv2d %x, %w {stride = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x4x4xf32>
  func.return
}

// -----

// conv2d element types.
func.func @f(%x: tensor<1x4x8x8xf16>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+1 {{operands must share one element type, got f16, f32}}
  %0 = graph.conv2d %x, %w : (tensor<1x4x8x8xf16>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf16>
  func.return
}

// -----

// max_pool2d kernel.
func.func @f(%x: tensor<1x4x8x8xf32>) {
  // expected-error @+1 {{kernel must be 2 positive integers, got [2]}}
  %0 = graph.max_pool2d %x {kernel = array<i64: 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  func.return
}

// -----

// max_pool2d padding at most half the kernel.
func.func @f(%x: tensor<1x4x8x8xf32>) {
  // expected-error @+1 {{padding [2, 0, 0, 0] must be at most half the kernel [2, 2]}}
  %0 = graph.max_pool2d %x {kernel = array<i64: 2, 2>, padding = array<i64: 2, 0, 0, 0>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x5x4xf32>
  func.return
}

// -----

// max_pool2d input rank.
func.func @f(%x: tensor<4x8x8xf32>) {
  // expected-error @+1 {{the input (NCHW) must have rank 4, got shape 4x8x8}}
  %0 = graph.max_pool2d %x {kernel = array<i64: 2, 2>} : (tensor<4x8x8xf32>) -> tensor<4x4x4xf32>
  func.return
}

// -----

// max_pool2d floor mode output size.
func.func @f(%x: tensor<1x4x8x8xf32>) {
  // expected-error @+1 {{result #0 has shape 1x4x4x4 but the operands and attributes give 1x4x3x3}}
  %0 = graph.max_pool2d %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  func.return
}

// -----

// avg_pool2d dilation.
func.func @f(%x: tensor<1x4x8x8xf32>) {
  // expected-error @+1 {{dilation is not supported for average pooling}}
  %0 = graph.avg_pool2d %x {kernel = array<i64: 2, 2>, dilation = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x6x6xf32>
  func.return
}

// -----

// avg_pool2d kernel.
func.func @f(%x: tensor<1x4x8x8xf32>) {
  // expected-error @+1 {{kernel must be 2 positive integers, got [0, 2]}}
  %0 = graph.avg_pool2d %x {kernel = array<i64: 0, 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x7xf32>
  func.return
}

// -----

// global_avg_pool rank.
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{the input must be N x C x spatial... (rank >= 3), got 4x8}}
  %0 = graph.global_avg_pool %x : (tensor<4x8xf32>) -> tensor<4x1xf32>
  func.return
}

// -----

// global_max_pool keeps the spatial dims.
func.func @f(%x: tensor<1x4x8x8xf32>) {
  // expected-error @+1 {{result #0 has shape 1x4 but the operands and attributes give 1x4x1x1}}
  %0 = graph.global_max_pool %x : (tensor<1x4x8x8xf32>) -> tensor<1x4xf32>
  func.return
}

// -----

// batch_norm parameter shape.
func.func @f(%x: tensor<1x4x8x8xf32>, %s: tensor<4xf32>, %m: tensor<3xf32>) {
  // expected-error @+1 {{mean must have shape 4 (one per channel), got 3}}
  %0 = graph.batch_norm %x, %s, %s, %m, %s : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  func.return
}

// -----

// batch_norm on integers.
func.func @f(%x: tensor<1x4x8x8xi32>, %s: tensor<4xi32>) {
  // expected-error @+1 {{the input must have a floating-point element type (f32, f16, bf16, f64), got i32}}
  %0 = graph.batch_norm %x, %s, %s, %s, %s : (tensor<1x4x8x8xi32>, tensor<4xi32>, tensor<4xi32>, tensor<4xi32>, tensor<4xi32>) -> tensor<1x4x8x8xi32>
  func.return
}

// -----

// batch_norm rank.
func.func @f(%x: tensor<4xf32>, %s: tensor<4xf32>) {
  // expected-error @+1 {{the input must have rank >= 2 (N x C x ...), got 4}}
  %0 = graph.batch_norm %x, %s, %s, %s, %s : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// batch_norm epsilon.
func.func @f(%x: tensor<1x4xf32>, %s: tensor<4xf32>) {
  // expected-error @+1 {{epsilon must be >= 0}}
  %0 = graph.batch_norm %x, %s, %s, %s, %s {epsilon = -1.0 : f64} : (tensor<1x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4xf32>
  func.return
}

// -----

// layer_norm scale shape.
func.func @f(%x: tensor<2x5x8xf32>, %g: tensor<5xf32>) {
  // expected-error @+1 {{scale of shape 5 does not broadcast to the normalized shape 8}}
  %0 = graph.layer_norm %x, %g : (tensor<2x5x8xf32>, tensor<5xf32>) -> tensor<2x5x8xf32>
  func.return
}

// -----

// layer_norm axis.
func.func @f(%x: tensor<2x5x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{axis 3 is out of range for a rank-3 operand (expected -3 <= axis < 3)}}
  %0 = graph.layer_norm %x, %g {axis = 3 : i64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  func.return
}

// -----

// layer_norm bias type.
func.func @f(%x: tensor<2x5x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf16>) {
  // expected-error @+1 {{operands must share one element type, got f32, f32, f16}}
  %0 = graph.layer_norm %x, %g, %b : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf16>) -> tensor<2x5x8xf32>
  func.return
}

// -----

// rms_norm epsilon.
func.func @f(%x: tensor<2x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{epsilon must be >= 0}}
  %0 = graph.rms_norm %x, %g {epsilon = -1.0e-6 : f64} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return
}

// -----

// rms_norm scale over the normalized dims.
func.func @f(%x: tensor<2x8xf32>, %g: tensor<2x8xf32>) {
  // expected-error @+1 {{scale of shape 2x8 does not broadcast to the normalized shape 8}}
  %0 = graph.rms_norm %x, %g : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return
}

// -----

// softmax axis.
func.func @f(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{axis 2 is out of range for a rank-2 operand (expected -2 <= axis < 2)}}
  %0 = graph.softmax %x {axis = 2 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return
}

// -----

// softmax on integers.
func.func @f(%x: tensor<2x8xi32>) {
  // expected-error @+1 {{the input must have a floating-point element type (f32, f16, bf16, f64), got i32}}
  %0 = graph.softmax %x : (tensor<2x8xi32>) -> tensor<2x8xi32>
  func.return
}

// -----

// log_softmax axis.
func.func @f(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{axis -3 is out of range for a rank-2 operand (expected -2 <= axis < 2)}}
  %0 = graph.log_softmax %x {axis = -3 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return
}
