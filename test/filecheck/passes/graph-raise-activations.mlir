// RUN: infer-opt %s -p graph-raise-activations | filecheck %s
// Each raised form computes what its formula did (the interpreter, within rounding):
// RUN: infer-opt %s -p graph-raise-activations --verify-each-numerically --verify-numerics-entry onnx_exporter -o /dev/null
// RUN: infer-opt %s -p graph-raise-activations --verify-each-numerically --verify-numerics-entry half_first -o /dev/null
// RUN: infer-opt %s -p graph-raise-activations --verify-each-numerically --verify-numerics-entry half_of_the_sum -o /dev/null
// RUN: infer-opt %s -p graph-raise-activations --verify-each-numerically --verify-numerics-entry tanh_form -o /dev/null
// RUN: infer-opt %s -p graph-raise-activations --verify-each-numerically --verify-numerics-entry silu -o /dev/null

// GELU and SiLU formulas as exporters write them become one graph.gelu / graph.silu; the ops only
// the formula used are removed. Look-alikes are left alone.

// torch.onnx (opset < 20) writes nn.GELU() as (x * (erf(x / sqrt2) + 1)) * 0.5
func.func @onnx_exporter(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %c = graph.constant dense<1.41421354> : tensor<f32>
  %d = graph.div %x, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = graph.erf %d : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %a = graph.add %e, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = graph.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %h = graph.constant dense<0.5> : tensor<f32>
  %y = graph.mul %m, %h : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
// CHECK-LABEL: func.func @onnx_exporter(
// CHECK-NEXT:    %y = graph.gelu %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:    func.return %y

// 0.5 * x * (1 + erf(x * (1 / sqrt2))): the half first, the other operand orders
func.func @half_first(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %h = graph.constant dense<0.5> : tensor<f32>
  %hx = graph.mul %h, %x : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %c = graph.constant dense<0.707106769> : tensor<f32>
  %d = graph.mul %x, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = graph.erf %d : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %a = graph.add %one, %e : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = graph.mul %hx, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
// CHECK-LABEL: func.func @half_first(
// CHECK-NEXT:    %y = graph.gelu %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:    func.return %y

// x * ((1 + erf(x / sqrt2)) * 0.5)
func.func @half_of_the_sum(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %c = graph.constant dense<1.41421354> : tensor<f32>
  %d = graph.div %x, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = graph.erf %d : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %a = graph.add %e, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %h = graph.constant dense<0.5> : tensor<f32>
  %ha = graph.mul %a, %h : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %y = graph.mul %ha, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
// CHECK-LABEL: func.func @half_of_the_sum(
// CHECK-NEXT:    %y = graph.gelu %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:    func.return %y

// GPT-2's gelu_new: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x ** 3)))
func.func @tanh_form(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %three = graph.constant dense<3.0> : tensor<f32>
  %cube = graph.pow %x, %three : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %a = graph.constant dense<0.044715> : tensor<f32>
  %ac = graph.mul %a, %cube : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %inner = graph.add %x, %ac : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %k = graph.constant dense<0.797884583> : tensor<f32>
  %s = graph.mul %inner, %k : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %t = graph.tanh %s : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %p = graph.add %t, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %h = graph.constant dense<0.5> : tensor<f32>
  %hx = graph.mul %x, %h : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %y = graph.mul %hx, %p : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
// CHECK-LABEL: func.func @tanh_form(
// CHECK-NEXT:    %y = graph.gelu %x {approximate = "tanh"} : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:    func.return %y

// not GELU: the argument is x / 2, not x / sqrt2
func.func @wrong_constant(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %c = graph.constant dense<2.0> : tensor<f32>
  %d = graph.div %x, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = graph.erf %d : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %a = graph.add %e, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = graph.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %h = graph.constant dense<0.5> : tensor<f32>
  %y = graph.mul %m, %h : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
// CHECK-LABEL: func.func @wrong_constant(
// CHECK:         graph.erf
// CHECK-NOT:     graph.gelu
// CHECK:         func.return

// not raised: erf(x / sqrt2) + 1 is also returned, so the formula's steps are needed anyway
func.func @intermediate_used(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %c = graph.constant dense<1.41421354> : tensor<f32>
  %d = graph.div %x, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = graph.erf %d : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %a = graph.add %e, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = graph.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %h = graph.constant dense<0.5> : tensor<f32>
  %y = graph.mul %m, %h : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  func.return %y, %a : tensor<2x8xf32>, tensor<2x8xf32>
}
// CHECK-LABEL: func.func @intermediate_used(
// CHECK:         graph.erf
// CHECK-NOT:     graph.gelu
// CHECK:         func.return

// torch.onnx's nn.SiLU(): x * sigmoid(x), either operand order
func.func @silu(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = graph.sigmoid %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = graph.mul %s, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}
// CHECK-LABEL: func.func @silu(
// CHECK-NEXT:    %y = graph.silu %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:    func.return %y

// not SiLU: the gate is another value's sigmoid (a GLU), and a sigmoid used twice stays
func.func @not_silu(%x: tensor<2x8xf32>, %g: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %s = graph.sigmoid %g : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = graph.mul %x, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %t = graph.sigmoid %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %z = graph.mul %x, %t : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %w = graph.add %z, %t : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %y, %w : tensor<2x8xf32>, tensor<2x8xf32>
}
// CHECK-LABEL: func.func @not_silu(
// CHECK-NOT:     graph.silu
// CHECK:         func.return
