// RUN: infer-opt %s --split-input-file --verify-diagnostics

// Verifier messages of the graph dialect's constants and elementwise ops (unary, binary, where, cast): shape inference, element
// types and attribute ranges. One split-input-file chunk per case; the
// expected-error annotation is (part of) the message the verifier gives for the op below it.

// -----

// graph.constant: the result type is the value's type.
func.func @f() {
  // expected-error @+1 {{attribute tensor<3xf32> expected from variable 'T', but got tensor<2xf32>}}
  %0 = "graph.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<3xf32>
  func.return
}

// -----

// float-only unary op on integers.
func.func @f(%x: tensor<2x3xi32>) {
  // expected-error @+1 {{the operand must have a floating-point element type (f32, f16, bf16, f64), got i32}}
  %0 = graph.exp %x : (tensor<2x3xi32>) -> tensor<2x3xi32>
  func.return
}

// -----

// float-only unary op on i1.
func.func @f(%x: tensor<4xi1>) {
  // expected-error @+1 {{the operand must have a floating-point element type (f32, f16, bf16, f64), got i1}}
  %0 = graph.sigmoid %x : (tensor<4xi1>) -> tensor<4xi1>
  func.return
}

// -----

// unary result shape.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{result #0 has shape 3x2 but the operands and attributes give 2x3}}
  %0 = graph.relu %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return
}

// -----

// unary result element type.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{result #0 has element type f16 but the operands give f32}}
  %0 = graph.neg %x : (tensor<2x3xf32>) -> tensor<2x3xf16>
  func.return
}

// -----

// unary result rank.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{result #0 has shape 2x3x1 but the operands and attributes give 2x3}}
  %0 = graph.tanh %x : (tensor<2x3xf32>) -> tensor<2x3x1xf32>
  func.return
}

// -----

// gelu approximation.
func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{approximate must be "none" or "tanh", got "fast"}}
  %0 = graph.gelu %x {approximate = "fast"} : (tensor<2xf32>) -> tensor<2xf32>
  func.return
}

// -----

// clip bounds.
func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{min (6.0) must not exceed max (0.0)}}
  %0 = graph.clip %x {min = 6.0 : f64, max = 0.0 : f64} : (tensor<2xf32>) -> tensor<2xf32>
  func.return
}

// -----

// leaky_relu on integers.
func.func @f(%x: tensor<2xi8>) {
  // expected-error @+1 {{the operand must have a floating-point element type (f32, f16, bf16, f64), got i8}}
  %0 = graph.leaky_relu %x : (tensor<2xi8>) -> tensor<2xi8>
  func.return
}

// -----

// leaky_relu alpha must be a float.
func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{1 : i64 should be of base attribute float}}
  %0 = graph.leaky_relu %x {alpha = 1 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  func.return
}

// -----

// elu on integers.
func.func @f(%x: tensor<2xi32>) {
  // expected-error @+1 {{the operand must have a floating-point element type (f32, f16, bf16, f64), got i32}}
  %0 = graph.elu %x : (tensor<2xi32>) -> tensor<2xi32>
  func.return
}

// -----

// hard_sigmoid result shape.
func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{result #0 has shape 3 but the operands and attributes give 2}}
  %0 = graph.hard_sigmoid %x : (tensor<2xf32>) -> tensor<3xf32>
  func.return
}

// -----

// softplus result type.
func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{result #0 has element type bf16 but the operands give f32}}
  %0 = graph.softplus %x : (tensor<2xf32>) -> tensor<2xbf16>
  func.return
}

// -----

// not keeps the element type.
func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{the operand must be an i1 tensor, got f32}}
  %0 = graph.not %x : (tensor<2xf32>) -> tensor<2xi1>
  func.return
}

// -----

// broadcasting.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<4xf32>) {
  // expected-error @+1 {{shapes 2x3, 4 are not broadcast-compatible (dimension -1 is 3 in one operand and 4 in another)}}
  %0 = graph.add %x, %y : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  func.return
}

// -----

// mixed element types.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf16>) {
  // expected-error @+1 {{operands must share one element type, got f32, f16}}
  %0 = graph.mul %x, %y : (tensor<2x3xf32>, tensor<3xf16>) -> tensor<2x3xf32>
  func.return
}

// -----

// broadcast result rank.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf32>) {
  // expected-error @+1 {{result #0 has shape 3 but the operands and attributes give 2x3}}
  %0 = graph.sub %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return
}

// -----

// broadcast result shape.
func.func @f(%x: tensor<2x1xf32>, %y: tensor<3xf32>) {
  // expected-error @+1 {{result #0 has shape 2x1 but the operands and attributes give 2x3}}
  %0 = graph.div %x, %y : (tensor<2x1xf32>, tensor<3xf32>) -> tensor<2x1xf32>
  func.return
}

// -----

// comparisons give i1.
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) {
  // expected-error @+1 {{result #0 has element type f32 but the operands give i1}}
  %0 = graph.less %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// logical ops need i1.
func.func @f(%x: tensor<4xi32>, %y: tensor<4xi32>) {
  // expected-error @+1 {{operands must be i1 tensors, got i32}}
  %0 = graph.and %x, %y : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  func.return
}

// -----

// logical op broadcasting.
func.func @f(%x: tensor<4xi1>, %y: tensor<5xi1>) {
  // expected-error @+1 {{shapes 4, 5 are not broadcast-compatible (dimension -1 is 4 in one operand and 5 in another)}}
  %0 = graph.xor %x, %y : (tensor<4xi1>, tensor<5xi1>) -> tensor<4xi1>
  func.return
}

// -----

// mod operand types.
func.func @f(%x: tensor<4xi64>, %y: tensor<4xi32>) {
  // expected-error @+1 {{operands must share one element type, got i64, i32}}
  %0 = graph.mod %x, %y : (tensor<4xi64>, tensor<4xi32>) -> tensor<4xi64>
  func.return
}

// -----

// pow operand types.
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf64>) {
  // expected-error @+1 {{operands must share one element type, got f32, f64}}
  %0 = graph.pow %x, %y : (tensor<4xf32>, tensor<4xf64>) -> tensor<4xf32>
  func.return
}

// -----

// maximum broadcasting.
func.func @f(%x: tensor<2xf32>, %y: tensor<3xf32>) {
  // expected-error @+1 {{shapes 2, 3 are not broadcast-compatible (dimension -1 is 2 in one operand and 3 in another)}}
  %0 = graph.maximum %x, %y : (tensor<2xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return
}

// -----

// where condition must be i1.
func.func @f(%c: tensor<4xf32>, %x: tensor<4xf32>) {
  // expected-error @+1 {{the condition must be an i1 tensor, got f32}}
  %0 = graph.where %c, %x, %x : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// where branches share a type.
func.func @f(%c: tensor<4xi1>, %x: tensor<4xf32>, %y: tensor<4xi32>) {
  // expected-error @+1 {{operands must share one element type, got f32, i32}}
  %0 = graph.where %c, %x, %y : (tensor<4xi1>, tensor<4xf32>, tensor<4xi32>) -> tensor<4xf32>
  func.return
}

// -----

// where broadcasting.
func.func @f(%c: tensor<3xi1>, %x: tensor<4xf32>) {
  // expected-error @+1 {{shapes 3, 4, 4 are not broadcast-compatible (dimension -1 is 3 in one operand and 4 in another)}}
  %0 = graph.where %c, %x, %x : (tensor<3xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// cast keeps the shape.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{result #0 has shape 3x2 but the operands and attributes give 2x3}}
  %0 = graph.cast %x : (tensor<2x3xf32>) -> tensor<3x2xi32>
  func.return
}

// -----

// bitwise ops take integers.
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{operands must be integer tensors (i8 to i64, ui8 to ui64), got f32}}
  %0 = graph.bitwise_and %x, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// shifts take integers (not i1).
func.func @f(%x: tensor<4xi1>) {
  // expected-error @+1 {{operands must be integer tensors (i8 to i64, ui8 to ui64), got i1}}
  %0 = graph.shift_left %x, %x : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  func.return
}

// -----

// bitwise_not takes integers.
func.func @f(%x: tensor<4xf16>) {
  // expected-error @+1 {{the operand must be an integer tensor, got f16}}
  %0 = graph.bitwise_not %x : (tensor<4xf16>) -> tensor<4xf16>
  func.return
}

// -----

// storage-only types are not arithmetic.
func.func @f(%x: tensor<4xf8E4M3FN>) {
  // expected-error @+1 {{the operand must have a floating-point element type (f32, f16, bf16, f64), got f8E4M3FN}}
  %0 = graph.exp %x : (tensor<4xf8E4M3FN>) -> tensor<4xf8E4M3FN>
  func.return
}

// -----

// graph.cast's round_mode (f8E8M0FNU results).
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{round_mode must be one of up, down, nearest, got "odd"}}
  %0 = graph.cast %x {round_mode = "odd"} : (tensor<4xf32>) -> tensor<4xf8E8M0FNU>
  func.return
}
