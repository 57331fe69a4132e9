// RUN: infer-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Verifier messages of the graph dialect's constants and elementwise ops (unary, binary, where, cast): shape inference, element
// types and attribute ranges. One split-input-file chunk per case; each CHECK is
// the message the verifier gives for the op in that chunk, first in the output.

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
// CHECK: the operand must have a floating-point element type (f32, f16, bf16, f64), got i32
// CHECK-NEXT: "builtin.module"() ({

// -----

// float-only unary op on i1.
func.func @f(%x: tensor<4xi1>) {
  %0 = graph.sigmoid %x : (tensor<4xi1>) -> tensor<4xi1>
  func.return
}
// CHECK: the operand must have a floating-point element type (f32, f16, bf16, f64), got i1
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
// CHECK: the operand must have a floating-point element type (f32, f16, bf16, f64), got i8
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
// CHECK: the operand must have a floating-point element type (f32, f16, bf16, f64), got i32
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
// CHECK: operands must share one element type, got f32, f16
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
// CHECK: operands must share one element type, got i64, i32
// CHECK-NEXT: "builtin.module"() ({

// -----

// pow operand types.
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf64>) {
  %0 = graph.pow %x, %y : (tensor<4xf32>, tensor<4xf64>) -> tensor<4xf32>
  func.return
}
// CHECK: operands must share one element type, got f32, f64
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
// CHECK: operands must share one element type, got f32, i32
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
