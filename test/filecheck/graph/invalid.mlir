// RUN: infer-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Verifier messages of every graph op: shape inference, element types and
// attribute ranges. One split-input-file chunk per case; each CHECK is the message
// the verifier gives for the op in that chunk (cases with `?` dimensions are in
// invalid_dynamic.mlir).

// -----

// graph.constant: the result type is the value's type.
func.func @f() {
  %0 = "graph.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<3xf32>
  func.return
}
// CHECK: attribute tensor<3xf32> expected from variable 'T', but got tensor<2xf32>
// CHECK-NEXT: "builtin.module"() ({

// -----

// float-only unary op on integers.
func.func @f(%x: tensor<2x3xi32>) {
  %0 = graph.exp %x : (tensor<2x3xi32>) -> tensor<2x3xi32>
  func.return
}
// CHECK: graph.exp: the operand must have a floating-point element type (f32, f16, bf16, f64), got i32
// CHECK-NEXT: "builtin.module"() ({

// -----

// float-only unary op on i1.
func.func @f(%x: tensor<4xi1>) {
  %0 = graph.sigmoid %x : (tensor<4xi1>) -> tensor<4xi1>
  func.return
}
// CHECK: graph.sigmoid: the operand must have a floating-point element type (f32, f16, bf16, f64), got i1
// CHECK-NEXT: "builtin.module"() ({

// -----

// unary result shape.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.relu %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return
}
// CHECK: result #0 has shape 3x2 but the operands and attributes give 2x3
// CHECK-NEXT: "builtin.module"() ({

// -----

// unary result element type.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.neg %x : (tensor<2x3xf32>) -> tensor<2x3xf16>
  func.return
}
// CHECK: result #0 has element type f16 but the operands give f32
// CHECK-NEXT: "builtin.module"() ({

// -----

// unary result rank.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.tanh %x : (tensor<2x3xf32>) -> tensor<2x3x1xf32>
  func.return
}
// CHECK: result #0 has shape 2x3x1 but the operands and attributes give 2x3
// CHECK-NEXT: "builtin.module"() ({

// -----

// gelu approximation.
func.func @f(%x: tensor<2xf32>) {
  %0 = graph.gelu %x {approximate = "fast"} : (tensor<2xf32>) -> tensor<2xf32>
  func.return
}
// CHECK: approximate must be "none" or "tanh", got "fast"
// CHECK-NEXT: "builtin.module"() ({

// -----

// clip bounds.
func.func @f(%x: tensor<2xf32>) {
  %0 = graph.clip %x {min = 6.0 : f64, max = 0.0 : f64} : (tensor<2xf32>) -> tensor<2xf32>
  func.return
}
// CHECK: min (6.0) must not exceed max (0.0)
// CHECK-NEXT: "builtin.module"() ({

// -----

// leaky_relu on integers.
func.func @f(%x: tensor<2xi8>) {
  %0 = graph.leaky_relu %x : (tensor<2xi8>) -> tensor<2xi8>
  func.return
}
// CHECK: graph.leaky_relu: the operand must have a floating-point element type (f32, f16, bf16, f64), got i8
// CHECK-NEXT: "builtin.module"() ({

// -----

// leaky_relu alpha must be a float.
func.func @f(%x: tensor<2xf32>) {
  %0 = graph.leaky_relu %x {alpha = 1 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  func.return
}
// CHECK: 1 : i64 should be of base attribute float
// CHECK-NEXT: // -----

// -----

// elu on integers.
func.func @f(%x: tensor<2xi32>) {
  %0 = graph.elu %x : (tensor<2xi32>) -> tensor<2xi32>
  func.return
}
// CHECK: graph.elu: the operand must have a floating-point element type (f32, f16, bf16, f64), got i32
// CHECK-NEXT: "builtin.module"() ({

// -----

// hard_sigmoid result shape.
func.func @f(%x: tensor<2xf32>) {
  %0 = graph.hard_sigmoid %x : (tensor<2xf32>) -> tensor<3xf32>
  func.return
}
// CHECK: result #0 has shape 3 but the operands and attributes give 2
// CHECK-NEXT: "builtin.module"() ({

// -----

// softplus result type.
func.func @f(%x: tensor<2xf32>) {
  %0 = graph.softplus %x : (tensor<2xf32>) -> tensor<2xbf16>
  func.return
}
// CHECK: result #0 has element type bf16 but the operands give f32
// CHECK-NEXT: "builtin.module"() ({

// -----

// not keeps the element type.
func.func @f(%x: tensor<2xf32>) {
  %0 = graph.not %x : (tensor<2xf32>) -> tensor<2xi1>
  func.return
}
// CHECK: the operand must be an i1 tensor, got f32
// CHECK-NEXT: "builtin.module"() ({

// -----

// broadcasting.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<4xf32>) {
  %0 = graph.add %x, %y : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  func.return
}
// CHECK: shapes 2x3, 4 are not broadcast-compatible (dimension -1 is 3 in one operand and 4 in another)
// CHECK-NEXT: "builtin.module"() ({

// -----

// mixed element types.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf16>) {
  %0 = graph.mul %x, %y : (tensor<2x3xf32>, tensor<3xf16>) -> tensor<2x3xf32>
  func.return
}
// CHECK: graph.mul: operands must share one element type, got f32, f16
// CHECK-NEXT: "builtin.module"() ({

// -----

// broadcast result rank.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf32>) {
  %0 = graph.sub %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return
}
// CHECK: result #0 has shape 3 but the operands and attributes give 2x3
// CHECK-NEXT: "builtin.module"() ({

// -----

// broadcast result shape.
func.func @f(%x: tensor<2x1xf32>, %y: tensor<3xf32>) {
  %0 = graph.div %x, %y : (tensor<2x1xf32>, tensor<3xf32>) -> tensor<2x1xf32>
  func.return
}
// CHECK: result #0 has shape 2x1 but the operands and attributes give 2x3
// CHECK-NEXT: "builtin.module"() ({

// -----

// comparisons give i1.
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) {
  %0 = graph.less %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: result #0 has element type f32 but the operands give i1
// CHECK-NEXT: "builtin.module"() ({

// -----

// logical ops need i1.
func.func @f(%x: tensor<4xi32>, %y: tensor<4xi32>) {
  %0 = graph.and %x, %y : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  func.return
}
// CHECK: operands must be i1 tensors, got i32
// CHECK-NEXT: "builtin.module"() ({

// -----

// logical op broadcasting.
func.func @f(%x: tensor<4xi1>, %y: tensor<5xi1>) {
  %0 = graph.xor %x, %y : (tensor<4xi1>, tensor<5xi1>) -> tensor<4xi1>
  func.return
}
// CHECK: shapes 4, 5 are not broadcast-compatible (dimension -1 is 4 in one operand and 5 in another)
// CHECK-NEXT: "builtin.module"() ({

// -----

// mod operand types.
func.func @f(%x: tensor<4xi64>, %y: tensor<4xi32>) {
  %0 = graph.mod %x, %y : (tensor<4xi64>, tensor<4xi32>) -> tensor<4xi64>
  func.return
}
// CHECK: graph.mod: operands must share one element type, got i64, i32
// CHECK-NEXT: "builtin.module"() ({

// -----

// pow operand types.
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf64>) {
  %0 = graph.pow %x, %y : (tensor<4xf32>, tensor<4xf64>) -> tensor<4xf32>
  func.return
}
// CHECK: graph.pow: operands must share one element type, got f32, f64
// CHECK-NEXT: "builtin.module"() ({

// -----

// maximum broadcasting.
func.func @f(%x: tensor<2xf32>, %y: tensor<3xf32>) {
  %0 = graph.maximum %x, %y : (tensor<2xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return
}
// CHECK: shapes 2, 3 are not broadcast-compatible (dimension -1 is 2 in one operand and 3 in another)
// CHECK-NEXT: "builtin.module"() ({

// -----

// where condition must be i1.
func.func @f(%c: tensor<4xf32>, %x: tensor<4xf32>) {
  %0 = graph.where %c, %x, %x : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: the condition must be an i1 tensor, got f32
// CHECK-NEXT: "builtin.module"() ({

// -----

// where branches share a type.
func.func @f(%c: tensor<4xi1>, %x: tensor<4xf32>, %y: tensor<4xi32>) {
  %0 = graph.where %c, %x, %y : (tensor<4xi1>, tensor<4xf32>, tensor<4xi32>) -> tensor<4xf32>
  func.return
}
// CHECK: graph.where: operands must share one element type, got f32, i32
// CHECK-NEXT: "builtin.module"() ({

// -----

// where broadcasting.
func.func @f(%c: tensor<3xi1>, %x: tensor<4xf32>) {
  %0 = graph.where %c, %x, %x : (tensor<3xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: shapes 3, 4, 4 are not broadcast-compatible (dimension -1 is 3 in one operand and 4 in another)
// CHECK-NEXT: "builtin.module"() ({

// -----

// cast keeps the shape.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.cast %x : (tensor<2x3xf32>) -> tensor<3x2xi32>
  func.return
}
// CHECK: result #0 has shape 3x2 but the operands and attributes give 2x3
// CHECK-NEXT: "builtin.module"() ({

// -----

// matmul contraction.
func.func @f(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  %0 = graph.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  func.return
}
// CHECK: contraction dimensions differ: lhs 2x3 has K=3, rhs 4x5 has K=4
// CHECK-NEXT: "builtin.module"() ({

// -----

// matmul transposed result.
func.func @f(%a: tensor<2x3xf32>, %b: tensor<5x3xf32>) {
  %0 = graph.matmul %a, %b {transpose_b = true} : (tensor<2x3xf32>, tensor<5x3xf32>) -> tensor<2x3xf32>
  func.return
}
// CHECK: result #0 has shape 2x3 but the operands and attributes give 2x5
// CHECK-NEXT: "builtin.module"() ({

// -----

// matmul of a scalar.
func.func @f(%a: tensor<f32>, %b: tensor<3xf32>) {
  %0 = graph.matmul %a, %b : (tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
  func.return
}
// CHECK: operands must have rank >= 1 (scalars cannot be multiplied)
// CHECK-NEXT: "builtin.module"() ({

// -----

// transpose of a vector.
func.func @f(%a: tensor<3xf32>, %b: tensor<3x4xf32>) {
  %0 = graph.matmul %a, %b {transpose_a = true} : (tensor<3xf32>, tensor<3x4xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: a transposed operand must have rank >= 2
// CHECK-NEXT: "builtin.module"() ({

// -----

// matmul batch broadcasting.
func.func @f(%a: tensor<2x4x3xf32>, %b: tensor<3x3x5xf32>) {
  %0 = graph.matmul %a, %b : (tensor<2x4x3xf32>, tensor<3x3x5xf32>) -> tensor<2x4x5xf32>
  func.return
}
// CHECK: shapes 2, 3 are not broadcast-compatible (dimension -1 is 2 in one operand and 3 in another)
// CHECK-NEXT: "builtin.module"() ({

// -----

// matmul element types.
func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x5xbf16>) {
  %0 = graph.matmul %a, %b : (tensor<2x3xf32>, tensor<3x5xbf16>) -> tensor<2x5xf32>
  func.return
}
// CHECK: graph.matmul: operands must share one element type, got f32, bf16
// CHECK-NEXT: "builtin.module"() ({

// -----

// vector dot product is a scalar.
func.func @f(%a: tensor<3xf32>, %b: tensor<3xf32>) {
  %0 = graph.matmul %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<1xf32>
  func.return
}
// CHECK: result #0 has shape 1 but the operands and attributes give scalar
// CHECK-NEXT: "builtin.module"() ({

// -----

// linear in-features.
func.func @f(%x: tensor<2x3xf32>, %w: tensor<4x5xf32>) {
  %0 = graph.linear %x, %w : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x4xf32>
  func.return
}
// CHECK: input features 3 (shape 2x3) do not match the weight's in-features 5 (weight shape 4x5, expected [out, in])
// CHECK-NEXT: "builtin.module"() ({

// -----

// linear weight rank.
func.func @f(%x: tensor<2x3xf32>, %w: tensor<3xf32>) {
  %0 = graph.linear %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2xf32>
  func.return
}
// CHECK: graph.linear: the weight [out, in] must have rank 2, got shape 3
// CHECK-NEXT: "builtin.module"() ({

// -----

// linear bias shape.
func.func @f(%x: tensor<2x3xf32>, %w: tensor<4x3xf32>, %b: tensor<3xf32>) {
  %0 = graph.linear %x, %w, %b : (tensor<2x3xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x4xf32>
  func.return
}
// CHECK: bias must have shape 4, got 3
// CHECK-NEXT: "builtin.module"() ({

// -----

// linear of a scalar.
func.func @f(%x: tensor<f32>, %w: tensor<4x1xf32>) {
  %0 = graph.linear %x, %w : (tensor<f32>, tensor<4x1xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: the input must have rank >= 1
// CHECK-NEXT: "builtin.module"() ({

// -----

// conv2d input rank.
func.func @f(%x: tensor<1x4x8xf32>, %w: tensor<8x4x3x3xf32>) {
  %0 = graph.conv2d %x, %w : (tensor<1x4x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: graph.conv2d: the input (NCHW) must have rank 4, got shape 1x4x8
// CHECK-NEXT: "builtin.module"() ({

// -----

// conv2d weight rank.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3xf32>) {
  %0 = graph.conv2d %x, %w : (tensor<1x4x8x8xf32>, tensor<8x4x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: graph.conv2d: the weight (OIHW) must have rank 4, got shape 8x4x3
// CHECK-NEXT: "builtin.module"() ({

// -----

// conv2d channels.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x3x3x3xf32>) {
  %0 = graph.conv2d %x, %w : (tensor<1x4x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: the weight expects 3 input channels per group, but the input has 4 channels in 1 group(s) (4 per group)
// CHECK-NEXT: "builtin.module"() ({

// -----

// conv2d groups divide channels.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<6x2x3x3xf32>) {
  %0 = graph.conv2d %x, %w {groups = 4 : i64} : (tensor<1x4x8x8xf32>, tensor<6x2x3x3xf32>) -> tensor<1x6x6x6xf32>
  func.return
}
// CHECK: input channels (4) and output channels (6) must both be divisible by groups (4)
// CHECK-NEXT: "builtin.module"() ({

// -----

// conv2d groups >= 1.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  %0 = graph.conv2d %x, %w {groups = 0 : i64} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: groups must be >= 1, got 0
// CHECK-NEXT: "builtin.module"() ({

// -----

// conv2d bias.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<4xf32>) {
  %0 = graph.conv2d %x, %w, %b : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<4xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: bias must have shape 8 (one per output channel), got 4
// CHECK-NEXT: "builtin.module"() ({

// -----

// conv2d stride.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  %0 = graph.conv2d %x, %w {stride = array<i64: 0, 1>} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: stride must be 2 positive integers, got [0, 1]
// CHECK-NEXT: "builtin.module"() ({

// -----

// conv2d padding has 4 entries.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  %0 = graph.conv2d %x, %w {padding = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x8x8xf32>
  func.return
}
// CHECK: padding must be 4 non-negative integers [top, left, bottom, right], got [1, 1]
// CHECK-NEXT: "builtin.module"() ({

// -----

// conv2d dilation.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  %0 = graph.conv2d %x, %w {dilation = array<i64: 1, 0>} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}
// CHECK: dilation must be 2 positive integers, got [1, 0]
// CHECK-NEXT: "builtin.module"() ({

// -----

// conv2d window larger than the input.
func.func @f(%x: tensor<1x4x2x2xf32>, %w: tensor<8x4x3x3xf32>) {
  %0 = graph.conv2d %x, %w : (tensor<1x4x2x2xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x1x1xf32>
  func.return
}
// CHECK: the window (kernel 3, dilation 1) is larger than the padded input (2 + padding 0+0)
// CHECK-NEXT: "builtin.module"() ({

// -----

// conv2d output size.
func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>) {
  %0 = graph.conv2d %x, %w {stride = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x4x4xf32>
  func.return
}
// CHECK: result #0 has shape 1x8x4x4 but the operands and attributes give 1x8x3x3
// CHECK-NEXT: "builtin.module"() ({

// -----

// conv2d element types.
func.func @f(%x: tensor<1x4x8x8xf16>, %w: tensor<8x4x3x3xf32>) {
  %0 = graph.conv2d %x, %w : (tensor<1x4x8x8xf16>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf16>
  func.return
}
// CHECK: graph.conv2d: operands must share one element type, got f16, f32
// CHECK-NEXT: "builtin.module"() ({

// -----

// max_pool2d kernel.
func.func @f(%x: tensor<1x4x8x8xf32>) {
  %0 = graph.max_pool2d %x {kernel = array<i64: 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  func.return
}
// CHECK: kernel must be 2 positive integers, got [2]
// CHECK-NEXT: "builtin.module"() ({

// -----

// max_pool2d padding at most half the kernel.
func.func @f(%x: tensor<1x4x8x8xf32>) {
  %0 = graph.max_pool2d %x {kernel = array<i64: 2, 2>, padding = array<i64: 2, 0, 0, 0>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x5x4xf32>
  func.return
}
// CHECK: padding [2, 0, 0, 0] must be at most half the kernel [2, 2]
// CHECK-NEXT: "builtin.module"() ({

// -----

// max_pool2d input rank.
func.func @f(%x: tensor<4x8x8xf32>) {
  %0 = graph.max_pool2d %x {kernel = array<i64: 2, 2>} : (tensor<4x8x8xf32>) -> tensor<4x4x4xf32>
  func.return
}
// CHECK: graph.max_pool2d: the input (NCHW) must have rank 4, got shape 4x8x8
// CHECK-NEXT: "builtin.module"() ({

// -----

// max_pool2d floor mode output size.
func.func @f(%x: tensor<1x4x8x8xf32>) {
  %0 = graph.max_pool2d %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  func.return
}
// CHECK: result #0 has shape 1x4x4x4 but the operands and attributes give 1x4x3x3
// CHECK-NEXT: "builtin.module"() ({

// -----

// avg_pool2d dilation.
func.func @f(%x: tensor<1x4x8x8xf32>) {
  %0 = graph.avg_pool2d %x {kernel = array<i64: 2, 2>, dilation = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x6x6xf32>
  func.return
}
// CHECK: dilation is not supported for average pooling
// CHECK-NEXT: "builtin.module"() ({

// -----

// avg_pool2d kernel.
func.func @f(%x: tensor<1x4x8x8xf32>) {
  %0 = graph.avg_pool2d %x {kernel = array<i64: 0, 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x7xf32>
  func.return
}
// CHECK: kernel must be 2 positive integers, got [0, 2]
// CHECK-NEXT: "builtin.module"() ({

// -----

// global_avg_pool rank.
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.global_avg_pool %x : (tensor<4x8xf32>) -> tensor<4x1xf32>
  func.return
}
// CHECK: the input must be N x C x spatial... (rank >= 3), got 4x8
// CHECK-NEXT: "builtin.module"() ({

// -----

// global_max_pool keeps the spatial dims.
func.func @f(%x: tensor<1x4x8x8xf32>) {
  %0 = graph.global_max_pool %x : (tensor<1x4x8x8xf32>) -> tensor<1x4xf32>
  func.return
}
// CHECK: result #0 has shape 1x4 but the operands and attributes give 1x4x1x1
// CHECK-NEXT: "builtin.module"() ({

// -----

// batch_norm parameter shape.
func.func @f(%x: tensor<1x4x8x8xf32>, %s: tensor<4xf32>, %m: tensor<3xf32>) {
  %0 = graph.batch_norm %x, %s, %s, %m, %s : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  func.return
}
// CHECK: mean must have shape 4 (one per channel), got 3
// CHECK-NEXT: "builtin.module"() ({

// -----

// batch_norm on integers.
func.func @f(%x: tensor<1x4x8x8xi32>, %s: tensor<4xi32>) {
  %0 = graph.batch_norm %x, %s, %s, %s, %s : (tensor<1x4x8x8xi32>, tensor<4xi32>, tensor<4xi32>, tensor<4xi32>, tensor<4xi32>) -> tensor<1x4x8x8xi32>
  func.return
}
// CHECK: graph.batch_norm: the input must have a floating-point element type (f32, f16, bf16, f64), got i32
// CHECK-NEXT: "builtin.module"() ({

// -----

// batch_norm rank.
func.func @f(%x: tensor<4xf32>, %s: tensor<4xf32>) {
  %0 = graph.batch_norm %x, %s, %s, %s, %s : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: the input must have rank >= 2 (N x C x ...), got 4
// CHECK-NEXT: "builtin.module"() ({

// -----

// batch_norm epsilon.
func.func @f(%x: tensor<1x4xf32>, %s: tensor<4xf32>) {
  %0 = graph.batch_norm %x, %s, %s, %s, %s {epsilon = -1.0 : f64} : (tensor<1x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4xf32>
  func.return
}
// CHECK: epsilon must be >= 0
// CHECK-NEXT: "builtin.module"() ({

// -----

// layer_norm scale shape.
func.func @f(%x: tensor<2x5x8xf32>, %g: tensor<5xf32>) {
  %0 = graph.layer_norm %x, %g : (tensor<2x5x8xf32>, tensor<5xf32>) -> tensor<2x5x8xf32>
  func.return
}
// CHECK: scale of shape 5 does not broadcast to the normalized shape 8
// CHECK-NEXT: "builtin.module"() ({

// -----

// layer_norm axis.
func.func @f(%x: tensor<2x5x8xf32>, %g: tensor<8xf32>) {
  %0 = graph.layer_norm %x, %g {axis = 3 : i64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  func.return
}
// CHECK: axis 3 is out of range for a rank-3 operand (expected -3 <= axis < 3)
// CHECK-NEXT: "builtin.module"() ({

// -----

// layer_norm bias type.
func.func @f(%x: tensor<2x5x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf16>) {
  %0 = graph.layer_norm %x, %g, %b : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf16>) -> tensor<2x5x8xf32>
  func.return
}
// CHECK: graph.layer_norm: operands must share one element type, got f32, f32, f16
// CHECK-NEXT: "builtin.module"() ({

// -----

// rms_norm epsilon.
func.func @f(%x: tensor<2x8xf32>, %g: tensor<8xf32>) {
  %0 = graph.rms_norm %x, %g {epsilon = -1.0e-6 : f64} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: epsilon must be >= 0
// CHECK-NEXT: "builtin.module"() ({

// -----

// rms_norm scale over the normalized dims.
func.func @f(%x: tensor<2x8xf32>, %g: tensor<2x8xf32>) {
  %0 = graph.rms_norm %x, %g : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: scale of shape 2x8 does not broadcast to the normalized shape 8
// CHECK-NEXT: "builtin.module"() ({

// -----

// softmax axis.
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.softmax %x {axis = 2 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: axis 2 is out of range for a rank-2 operand (expected -2 <= axis < 2)
// CHECK-NEXT: "builtin.module"() ({

// -----

// softmax on integers.
func.func @f(%x: tensor<2x8xi32>) {
  %0 = graph.softmax %x : (tensor<2x8xi32>) -> tensor<2x8xi32>
  func.return
}
// CHECK: graph.softmax: the input must have a floating-point element type (f32, f16, bf16, f64), got i32
// CHECK-NEXT: "builtin.module"() ({

// -----

// log_softmax axis.
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.log_softmax %x {axis = -3 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: axis -3 is out of range for a rank-2 operand (expected -2 <= axis < 2)
// CHECK-NEXT: "builtin.module"() ({

// -----

// attention query rank.
func.func @f(%q: tensor<8x4x16xf32>, %k: tensor<1x2x6x16xf32>, %v: tensor<1x2x6x32xf32>) {
  %0 = graph.attention %q, %k, %v : (tensor<8x4x16xf32>, tensor<1x2x6x16xf32>, tensor<1x2x6x32xf32>) -> tensor<1x8x4x32xf32>
  func.return
}
// CHECK: graph.attention: the query [B, Hq, Sq, D] must have rank 4, got shape 8x4x16
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
// CHECK: graph.attention: the query must have a floating-point element type (f32, f16, bf16, f64), got i8
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
// CHECK: graph.rotary: operands must share one element type, got f16, f32, f32
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

// -----

// reshape element count.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.reshape %x : (tensor<2x3xf32>) -> tensor<5xf32>
  func.return
}
// CHECK: cannot reshape 2x3 (6 elements) to 5 (5 elements)
// CHECK-NEXT: "builtin.module"() ({

// -----

// reshape keeps the element type.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.reshape %x : (tensor<2x3xf32>) -> tensor<6xi32>
  func.return
}
// CHECK: result #0 has element type i32 but the operands give f32
// CHECK-NEXT: "builtin.module"() ({

// -----

// transpose perm length.
func.func @f(%x: tensor<2x3x4xf32>) {
  %0 = graph.transpose %x {perm = array<i64: 0, 1>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  func.return
}
// CHECK: perm [0, 1] is not a permutation of 0..2 (input rank 3)
// CHECK-NEXT: "builtin.module"() ({

// -----

// transpose perm repeats.
func.func @f(%x: tensor<2x3x4xf32>) {
  %0 = graph.transpose %x {perm = array<i64: 0, 1, 1>} : (tensor<2x3x4xf32>) -> tensor<2x3x3xf32>
  func.return
}
// CHECK: perm [0, 1, 1] is not a permutation of 0..2 (input rank 3)
// CHECK-NEXT: "builtin.module"() ({

// -----

// transpose result shape.
func.func @f(%x: tensor<2x3x4xf32>) {
  %0 = graph.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  func.return
}
// CHECK: result #0 has shape 2x3x4 but the operands and attributes give 4x2x3
// CHECK-NEXT: "builtin.module"() ({

// -----

// concat other dims agree.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<3x3xf32>) {
  %0 = graph.concat %x, %y {axis = 1 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x6xf32>
  func.return
}
// CHECK: shapes 2x3, 3x3 must agree on every dimension except axis 1
// CHECK-NEXT: "builtin.module"() ({

// -----

// concat axis.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.concat %x, %x {axis = 2 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return
}
// CHECK: axis 2 is out of range for a rank-2 operand (expected -2 <= axis < 2)
// CHECK-NEXT: "builtin.module"() ({

// -----

// concat element types.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<2x3xf16>) {
  %0 = graph.concat %x, %y {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<4x3xf32>
  func.return
}
// CHECK: graph.concat: operands must share one element type, got f32, f16
// CHECK-NEXT: "builtin.module"() ({

// -----

// concat of nothing.
func.func @f() {
  %0 = "graph.concat"() <{axis = 0 : i64}> : () -> tensor<0xf32>
  func.return
}
// CHECK: needs at least one input
// CHECK-NEXT: "builtin.module"() ({

// -----

// concat ranks.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<2xf32>) {
  %0 = graph.concat %x, %y {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2xf32>) -> tensor<4x3xf32>
  func.return
}
// CHECK: shapes 2x3, 2 must agree on every dimension except axis 0
// CHECK-NEXT: "builtin.module"() ({

// -----

// slice needs an entry per dim.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.slice %x {starts = array<i64: 0>, ends = array<i64: 2>, steps = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return
}
// CHECK: starts, ends and steps need one entry per dimension (2), got 1, 1 and 1
// CHECK-NEXT: "builtin.module"() ({

// -----

// slice step 0.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.slice %x {starts = array<i64: 0, 0>, ends = array<i64: 2, 3>, steps = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return
}
// CHECK: step of dimension 1 is 0
// CHECK-NEXT: "builtin.module"() ({

// -----

// slice end past the dim.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.slice %x {starts = array<i64: 0, 0>, ends = array<i64: 2, 4>, steps = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2x4xf32>
  func.return
}
// CHECK: dimension 1 (size 3): need 0 <= start (0) <= end (4) <= 3
// CHECK-NEXT: "builtin.module"() ({

// -----

// slice start after end.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.slice %x {starts = array<i64: 0, 2>, ends = array<i64: 2, 1>, steps = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2x0xf32>
  func.return
}
// CHECK: dimension 1 (size 3): need 0 <= start (2) <= end (1) <= 3
// CHECK-NEXT: "builtin.module"() ({

// -----

// slice negative step start.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.slice %x {starts = array<i64: 0, 3>, ends = array<i64: 2, -1>, steps = array<i64: 1, -1>} : (tensor<2x3xf32>) -> tensor<2x4xf32>
  func.return
}
// CHECK: dimension 1 (size 3): with a negative step need -1 <= end (-1) <= start (3) < 3
// CHECK-NEXT: "builtin.module"() ({

// -----

// slice result shape (ceil division).
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.slice %x {starts = array<i64: 0, 0>, ends = array<i64: 2, 3>, steps = array<i64: 1, 2>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  func.return
}
// CHECK: result #0 has shape 2x1 but the operands and attributes give 2x2
// CHECK-NEXT: "builtin.module"() ({

// -----

// broadcast dims.
func.func @f(%x: tensor<3x2xf32>) {
  %0 = graph.broadcast %x : (tensor<3x2xf32>) -> tensor<3x4xf32>
  func.return
}
// CHECK: cannot broadcast 3x2 to 3x4
// CHECK-NEXT: "builtin.module"() ({

// -----

// broadcast rank.
func.func @f(%x: tensor<3x2xf32>) {
  %0 = graph.broadcast %x : (tensor<3x2xf32>) -> tensor<2xf32>
  func.return
}
// CHECK: cannot broadcast 3x2 to 2
// CHECK-NEXT: "builtin.module"() ({

// -----

// pad length.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.pad %x {pads = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<3x4xf32>
  func.return
}
// CHECK: pads must hold 4 non-negative integers (before..., after...), got [1, 1]
// CHECK-NEXT: "builtin.module"() ({

// -----

// pad negative.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.pad %x {pads = array<i64: 0, -1, 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  func.return
}
// CHECK: pads must hold 4 non-negative integers (before..., after...), got [0, -1, 0, 0]
// CHECK-NEXT: "builtin.module"() ({

// -----

// reduce axis range.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.reduce_sum %x {axes = array<i64: 2>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return
}
// CHECK: reduction axis 2 is out of range for a rank-2 operand (expected -2 <= reduction axis < 2)
// CHECK-NEXT: "builtin.module"() ({

// -----

// reduce axes repeat.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.reduce_mean %x {axes = array<i64: 1, -1>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  func.return
}
// CHECK: axes [1, -1] repeat a dimension
// CHECK-NEXT: "builtin.module"() ({

// -----

// reduce keepdims result.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.reduce_max %x {axes = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
  func.return
}
// CHECK: result #0 has shape 2 but the operands and attributes give 2x1
// CHECK-NEXT: "builtin.module"() ({

// -----

// reduce all without keepdims.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.reduce_min %x {keepdims = false} : (tensor<2x3xf32>) -> tensor<1x1xf32>
  func.return
}
// CHECK: result #0 has shape 1x1 but the operands and attributes give scalar
// CHECK-NEXT: "builtin.module"() ({

// -----

// reduce keeps the element type.
func.func @f(%x: tensor<2x3xi32>) {
  %0 = graph.reduce_prod %x : (tensor<2x3xi32>) -> tensor<1x1xi64>
  func.return
}
// CHECK: result #0 has element type i64 but the operands give i32
// CHECK-NEXT: "builtin.module"() ({

// -----

// argmax needs one axis.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.argmax %x : (tensor<2x3xf32>) -> tensor<1x1xi64>
  func.return
}
// CHECK: axes must name exactly one axis, got []
// CHECK-NEXT: "builtin.module"() ({

// -----

// argmin gives i64.
func.func @f(%x: tensor<2x3xf32>) {
  %0 = graph.argmin %x {axes = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  func.return
}
// CHECK: result #0 has element type f32 but the operands give i64
// CHECK-NEXT: "builtin.module"() ({
