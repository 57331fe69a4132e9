// RUN: infer-opt %s | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | infer-opt | filecheck %s

// Linear algebra, convolution, pooling and normalization ops in their custom
// form, with and without their optional operands and attributes.

func.func @linalg(%a: tensor<2x3x4xf32>, %b: tensor<4x5xf32>, %c: tensor<2x5x4xf32>, %v: tensor<4xf32>, %w: tensor<6x4xf32>, %bias: tensor<6xf32>) {
  %0 = graph.matmul %a, %b : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  %1 = graph.matmul %a, %c {transpose_b = true} : (tensor<2x3x4xf32>, tensor<2x5x4xf32>) -> tensor<2x3x5xf32>
  %2 = graph.matmul %b, %a {transpose_a = true, transpose_b = true} : (tensor<4x5xf32>, tensor<2x3x4xf32>) -> tensor<2x5x3xf32>
  %3 = graph.matmul %v, %b : (tensor<4xf32>, tensor<4x5xf32>) -> tensor<5xf32>
  %4 = graph.matmul %v, %v : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  %5 = graph.linear %a, %w, %bias : (tensor<2x3x4xf32>, tensor<6x4xf32>, tensor<6xf32>) -> tensor<2x3x6xf32>
  %6 = graph.linear %v, %w : (tensor<4xf32>, tensor<6x4xf32>) -> tensor<6xf32>
  func.return
}

func.func @cnn(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>, %dw: tensor<4x1x3x3xf32>, %bias: tensor<8xf32>, %s: tensor<4xf32>) {
  %0 = graph.conv2d %x, %w : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  %1 = graph.conv2d %x, %w, %bias {stride = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x4x4xf32>
  %2 = graph.conv2d %x, %dw {groups = 4 : i64, dilation = array<i64: 2, 2>, padding = array<i64: 2, 2, 2, 2>} : (tensor<1x4x8x8xf32>, tensor<4x1x3x3xf32>) -> tensor<1x4x8x8xf32>
  %3 = graph.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  %4 = graph.max_pool2d %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, ceil_mode = true} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  %5 = graph.avg_pool2d %x {kernel = array<i64: 3, 3>, padding = array<i64: 1, 1, 1, 1>, count_include_pad = true} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %6 = graph.global_avg_pool %x : (tensor<1x4x8x8xf32>) -> tensor<1x4x1x1xf32>
  %7 = graph.global_max_pool %x : (tensor<1x4x8x8xf32>) -> tensor<1x4x1x1xf32>
  %8 = graph.batch_norm %x, %s, %s, %s, %s {epsilon = 1.0e-3 : f64} : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  func.return
}

func.func @norms(%x: tensor<2x5x8xf32>, %g: tensor<8xf32>, %g2: tensor<5x8xf32>) {
  %0 = graph.layer_norm %x, %g, %g : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %1 = graph.layer_norm %x, %g2 {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<2x5x8xf32>, tensor<5x8xf32>) -> tensor<2x5x8xf32>
  %2 = graph.rms_norm %x, %g {epsilon = 1.0e-6 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %3 = graph.softmax %x : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %4 = graph.softmax %x {axis = 1 : i64} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %5 = graph.log_softmax %x {axis = -2 : i64} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  func.return
}

// CHECK:      builtin.module {
// CHECK-NEXT: func.func @linalg(%a: tensor<2x3x4xf32>, %b: tensor<4x5xf32>, %c: tensor<2x5x4xf32>, %v: tensor<4xf32>, %w: tensor<6x4xf32>, %bias: tensor<6xf32>) {
// CHECK-NEXT: %0 = graph.matmul %a, %b : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
// CHECK-NEXT: %1 = graph.matmul %a, %c {transpose_b = true} : (tensor<2x3x4xf32>, tensor<2x5x4xf32>) -> tensor<2x3x5xf32>
// CHECK-NEXT: %2 = graph.matmul %b, %a {transpose_a = true, transpose_b = true} : (tensor<4x5xf32>, tensor<2x3x4xf32>) -> tensor<2x5x3xf32>
// CHECK-NEXT: %3 = graph.matmul %v, %b : (tensor<4xf32>, tensor<4x5xf32>) -> tensor<5xf32>
// CHECK-NEXT: %4 = graph.matmul %v, %v : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
// CHECK-NEXT: %5 = graph.linear %a, %w, %bias : (tensor<2x3x4xf32>, tensor<6x4xf32>, tensor<6xf32>) -> tensor<2x3x6xf32>
// CHECK-NEXT: %6 = graph.linear %v, %w : (tensor<4xf32>, tensor<6x4xf32>) -> tensor<6xf32>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: func.func @cnn(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xf32>, %dw: tensor<4x1x3x3xf32>, %bias: tensor<8xf32>, %s: tensor<4xf32>) {
// CHECK-NEXT: %0 = graph.conv2d %x, %w : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
// CHECK-NEXT: %1 = graph.conv2d %x, %w, %bias {stride = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x4x4xf32>
// CHECK-NEXT: %2 = graph.conv2d %x, %dw {groups = 4 : i64, dilation = array<i64: 2, 2>, padding = array<i64: 2, 2, 2, 2>} : (tensor<1x4x8x8xf32>, tensor<4x1x3x3xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT: %3 = graph.max_pool2d %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT: %4 = graph.max_pool2d %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, ceil_mode = true} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT: %5 = graph.avg_pool2d %x {kernel = array<i64: 3, 3>, padding = array<i64: 1, 1, 1, 1>, count_include_pad = true} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT: %6 = graph.global_avg_pool %x : (tensor<1x4x8x8xf32>) -> tensor<1x4x1x1xf32>
// CHECK-NEXT: %7 = graph.global_max_pool %x : (tensor<1x4x8x8xf32>) -> tensor<1x4x1x1xf32>
// CHECK-NEXT: %8 = graph.batch_norm %x, %s, %s, %s, %s {epsilon = 1.000000e-03 : f64} : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: func.func @norms(%x: tensor<2x5x8xf32>, %g: tensor<8xf32>, %g2: tensor<5x8xf32>) {
// CHECK-NEXT: %0 = graph.layer_norm %x, %g, %g : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
// CHECK-NEXT: %1 = graph.layer_norm %x, %g2 {axis = 1 : i64, epsilon = 1.000000e-06 : f64} : (tensor<2x5x8xf32>, tensor<5x8xf32>) -> tensor<2x5x8xf32>
// CHECK-NEXT: %2 = graph.rms_norm %x, %g {epsilon = 1.000000e-06 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
// CHECK-NEXT: %3 = graph.softmax %x : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
// CHECK-NEXT: %4 = graph.softmax %x {axis = 1 : i64} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
// CHECK-NEXT: %5 = graph.log_softmax %x {axis = -2 : i64} : (tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: }
