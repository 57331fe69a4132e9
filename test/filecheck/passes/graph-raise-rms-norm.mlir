// RUN: infer-opt %s -p graph-raise-rms-norm | filecheck %s
// Each raised form computes what its arithmetic did (the interpreter, within rounding):
// RUN: infer-opt %s -p graph-raise-rms-norm --verify-each-numerically --verify-numerics-entry onnx_llama -o /dev/null
// RUN: infer-opt %s -p graph-raise-rms-norm --verify-each-numerically --verify-numerics-entry rsqrt_unit_scale -o /dev/null
// RUN: infer-opt %s -p graph-raise-rms-norm --verify-each-numerically --verify-numerics-entry divided -o /dev/null

// RMSNorm written out as arithmetic becomes one graph.rms_norm.

// torch.onnx's Llama RMSNorm: w * (x * (1 / sqrt(mean(pow(x, 2)) + eps)))
func.func @onnx_llama(%x: tensor<2x5x8xf32>, %w: tensor<8xf32>) -> tensor<2x5x8xf32> {
  %two = graph.constant dense<2.0> : tensor<f32>
  %sq = graph.pow %x, %two : (tensor<2x5x8xf32>, tensor<f32>) -> tensor<2x5x8xf32>
  %m = graph.reduce_mean %sq {axes = array<i64: 2>} : (tensor<2x5x8xf32>) -> tensor<2x5x1xf32>
  %eps = graph.constant dense<1.0e-06> : tensor<f32>
  %v = graph.add %m, %eps : (tensor<2x5x1xf32>, tensor<f32>) -> tensor<2x5x1xf32>
  %s = graph.sqrt %v : (tensor<2x5x1xf32>) -> tensor<2x5x1xf32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %r = graph.div %one, %s : (tensor<f32>, tensor<2x5x1xf32>) -> tensor<2x5x1xf32>
  %n = graph.mul %x, %r : (tensor<2x5x8xf32>, tensor<2x5x1xf32>) -> tensor<2x5x8xf32>
  %y = graph.mul %w, %n : (tensor<8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  func.return %y : tensor<2x5x8xf32>
}
// CHECK-LABEL: func.func @onnx_llama(
// CHECK-NEXT:    %y = graph.rms_norm %x, %w {epsilon = 9.99999{{[0-9]+}}e-07 : f64}
// CHECK-NEXT:    func.return %y

// x * rsqrt(mean(x * x) + eps), eps first, no weight: a unit scale
func.func @rsqrt_unit_scale(%x: tensor<4x6xf32>) -> tensor<4x6xf32> {
  %sq = graph.mul %x, %x : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %m = graph.reduce_mean %sq {axes = array<i64: -1>} : (tensor<4x6xf32>) -> tensor<4x1xf32>
  %eps = graph.constant dense<1.0e-05> : tensor<1xf32>
  %v = graph.add %eps, %m : (tensor<1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %r = graph.rsqrt %v : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = graph.mul %r, %x : (tensor<4x1xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  func.return %n : tensor<4x6xf32>
}
// CHECK-LABEL: func.func @rsqrt_unit_scale(
// CHECK-NEXT:    %scale = graph.weight @rms_norm.unit_scale : tensor<6xf32>
// CHECK-NEXT:    %n = graph.rms_norm %x, %scale {epsilon = 9.99999{{[0-9]+}}e-06 : f64}
// CHECK-NEXT:    func.return %n

// x / sqrt(mean(x^2) + eps) * w
func.func @divided(%x: tensor<3x8xf32>, %w: tensor<8xf32>) -> tensor<3x8xf32> {
  %two = graph.constant dense<2.0> : tensor<f32>
  %sq = graph.pow %x, %two : (tensor<3x8xf32>, tensor<f32>) -> tensor<3x8xf32>
  %m = graph.reduce_mean %sq {axes = array<i64: 1>} : (tensor<3x8xf32>) -> tensor<3x1xf32>
  %eps = graph.constant dense<1.0e-06> : tensor<f32>
  %v = graph.add %m, %eps : (tensor<3x1xf32>, tensor<f32>) -> tensor<3x1xf32>
  %s = graph.sqrt %v : (tensor<3x1xf32>) -> tensor<3x1xf32>
  %n = graph.div %x, %s : (tensor<3x8xf32>, tensor<3x1xf32>) -> tensor<3x8xf32>
  %y = graph.mul %n, %w : (tensor<3x8xf32>, tensor<8xf32>) -> tensor<3x8xf32>
  func.return %y : tensor<3x8xf32>
}
// CHECK-LABEL: func.func @divided(
// CHECK-NEXT:    %y = graph.rms_norm %x, %w
// CHECK-NEXT:    func.return %y

// not an RMSNorm: the mean is over the first axis
func.func @wrong_axis(%x: tensor<3x8xf32>) -> tensor<3x8xf32> {
  %sq = graph.mul %x, %x : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  %m = graph.reduce_mean %sq {axes = array<i64: 0>} : (tensor<3x8xf32>) -> tensor<1x8xf32>
  %eps = graph.constant dense<1.0e-06> : tensor<f32>
  %v = graph.add %m, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %r = graph.rsqrt %v : (tensor<1x8xf32>) -> tensor<1x8xf32>
  %n = graph.mul %x, %r : (tensor<3x8xf32>, tensor<1x8xf32>) -> tensor<3x8xf32>
  func.return %n : tensor<3x8xf32>
}
// CHECK-LABEL: func.func @wrong_axis(
// CHECK-NOT:     graph.rms_norm
// CHECK:         func.return
