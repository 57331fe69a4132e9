// RUN: infer-opt %s | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | infer-opt | filecheck %s

// Every elementwise graph op and graph.constant in their custom form. Default
// attributes (gelu approximate = "none", leaky_relu alpha = 0.01, hard_sigmoid
// beta = 0.5) are not printed.

func.func @unary(%x: tensor<2x3xf32>, %i: tensor<4xi32>, %b: tensor<4xi1>) {
  %0 = graph.neg %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = graph.neg %i : (tensor<4xi32>) -> tensor<4xi32>
  %2 = graph.abs %i : (tensor<4xi32>) -> tensor<4xi32>
  %3 = graph.sign %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = graph.exp %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %5 = graph.log %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %6 = graph.sqrt %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %7 = graph.rsqrt %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %8 = graph.reciprocal %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %9 = graph.tanh %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %10 = graph.sigmoid %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %11 = graph.erf %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %12 = graph.sin %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %13 = graph.cos %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %14 = graph.floor %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %15 = graph.ceil %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %16 = graph.round %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %17 = graph.relu %i : (tensor<4xi32>) -> tensor<4xi32>
  %18 = graph.silu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %19 = graph.softplus %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %20 = graph.not %b : (tensor<4xi1>) -> tensor<4xi1>
  %21 = graph.gelu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %22 = graph.gelu %x {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %23 = graph.gelu %x {approximate = "none"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %24 = graph.clip %x {min = 0.0 : f64, max = 6.0 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %25 = graph.clip %i {max = 1.5 : f64} : (tensor<4xi32>) -> tensor<4xi32>
  %26 = graph.clip %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %27 = graph.leaky_relu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %28 = graph.leaky_relu %x {alpha = 0.2 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %29 = graph.elu %x {alpha = 0.5 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %30 = graph.hard_sigmoid %x {alpha = 0.1666 : f64, beta = 0.5 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return
}

func.func @binary(%x: tensor<2x3xf32>, %y: tensor<3xf32>, %i: tensor<4xi32>, %j: tensor<1xi32>, %b: tensor<4xi1>, %c: tensor<2x1xi1>) {
  %0 = graph.add %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = graph.sub %y, %x : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = graph.mul %x, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = graph.div %i, %j : (tensor<4xi32>, tensor<1xi32>) -> tensor<4xi32>
  %4 = graph.pow %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %5 = graph.maximum %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %6 = graph.minimum %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %7 = graph.mod %i, %j : (tensor<4xi32>, tensor<1xi32>) -> tensor<4xi32>
  %8 = graph.equal %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %9 = graph.less %i, %j : (tensor<4xi32>, tensor<1xi32>) -> tensor<4xi1>
  %10 = graph.less_equal %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %11 = graph.greater %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %12 = graph.greater_equal %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %13 = graph.and %b, %b : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %14 = graph.or %b, %b : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %15 = graph.xor %b, %b : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %16 = graph.where %c, %x, %y : (tensor<2x1xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %17 = graph.cast %x : (tensor<2x3xf32>) -> tensor<2x3xbf16>
  %18 = graph.cast %i : (tensor<4xi32>) -> tensor<4xi1>
  func.return
}

func.func @bitwise(%u: tensor<4xui8>, %i: tensor<4xi32>, %x: tensor<4xf32>) {
  %0 = graph.bitwise_and %u, %u : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xui8>
  %1 = graph.bitwise_or %i, %i : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %2 = graph.bitwise_xor %i, %i : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %3 = graph.bitwise_not %u : (tensor<4xui8>) -> tensor<4xui8>
  %4 = graph.shift_left %u, %u : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xui8>
  %5 = graph.shift_right %i, %i : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %6 = graph.cast %x {saturate = true} : (tensor<4xf32>) -> tensor<4xf8E4M3FN>
  %7 = graph.cast %x {round_mode = "nearest"} : (tensor<4xf32>) -> tensor<4xf8E8M0FNU>
  %8 = graph.cast %6 : (tensor<4xf8E4M3FN>) -> tensor<4xf16>
  %9 = graph.cast %i : (tensor<4xi32>) -> tensor<4xi4>
  func.return
}

func.func @constants() {
  %0 = graph.constant dense<[1.5, -2.0]> : tensor<2xf32>
  %1 = graph.constant dense<7> : tensor<2x2xi64>
  %2 = graph.constant dense<[true, false]> : tensor<2xi1>
  %3 = graph.constant dense<0.5> : tensor<bf16>
  %4 = graph.constant dense<[1, 255]> : tensor<2xui8>
  func.return
}

// CHECK:      builtin.module {
// CHECK-NEXT: func.func @unary(%x: tensor<2x3xf32>, %i: tensor<4xi32>, %b: tensor<4xi1>) {
// CHECK-NEXT: %0 = graph.neg %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %1 = graph.neg %i : (tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT: %2 = graph.abs %i : (tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT: %3 = graph.sign %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %4 = graph.exp %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %5 = graph.log %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %6 = graph.sqrt %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %7 = graph.rsqrt %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %8 = graph.reciprocal %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %9 = graph.tanh %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %10 = graph.sigmoid %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %11 = graph.erf %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %12 = graph.sin %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %13 = graph.cos %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %14 = graph.floor %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %15 = graph.ceil %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %16 = graph.round %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %17 = graph.relu %i : (tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT: %18 = graph.silu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %19 = graph.softplus %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %20 = graph.not %b : (tensor<4xi1>) -> tensor<4xi1>
// CHECK-NEXT: %21 = graph.gelu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %22 = graph.gelu %x {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %23 = graph.gelu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %24 = graph.clip %x {min = 0.000000e+00 : f64, max = 6.000000e+00 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %25 = graph.clip %i {max = 1.500000e+00 : f64} : (tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT: %26 = graph.clip %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %27 = graph.leaky_relu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %28 = graph.leaky_relu %x {alpha = 2.000000e-01 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %29 = graph.elu %x {alpha = 5.000000e-01 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %30 = graph.hard_sigmoid %x {alpha = 1.666000e-01 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: func.func @binary(%x: tensor<2x3xf32>, %y: tensor<3xf32>, %i: tensor<4xi32>, %j: tensor<1xi32>, %b: tensor<4xi1>, %c: tensor<2x1xi1>) {
// CHECK-NEXT: %0 = graph.add %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %1 = graph.sub %y, %x : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %2 = graph.mul %x, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %3 = graph.div %i, %j : (tensor<4xi32>, tensor<1xi32>) -> tensor<4xi32>
// CHECK-NEXT: %4 = graph.pow %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %5 = graph.maximum %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %6 = graph.minimum %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %7 = graph.mod %i, %j : (tensor<4xi32>, tensor<1xi32>) -> tensor<4xi32>
// CHECK-NEXT: %8 = graph.equal %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
// CHECK-NEXT: %9 = graph.less %i, %j : (tensor<4xi32>, tensor<1xi32>) -> tensor<4xi1>
// CHECK-NEXT: %10 = graph.less_equal %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
// CHECK-NEXT: %11 = graph.greater %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
// CHECK-NEXT: %12 = graph.greater_equal %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
// CHECK-NEXT: %13 = graph.and %b, %b : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
// CHECK-NEXT: %14 = graph.or %b, %b : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
// CHECK-NEXT: %15 = graph.xor %b, %b : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
// CHECK-NEXT: %16 = graph.where %c, %x, %y : (tensor<2x1xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: %17 = graph.cast %x : (tensor<2x3xf32>) -> tensor<2x3xbf16>
// CHECK-NEXT: %18 = graph.cast %i : (tensor<4xi32>) -> tensor<4xi1>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: func.func @bitwise(%u: tensor<4xui8>, %i: tensor<4xi32>, %x: tensor<4xf32>) {
// CHECK-NEXT: %0 = graph.bitwise_and %u, %u : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xui8>
// CHECK-NEXT: %1 = graph.bitwise_or %i, %i : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT: %2 = graph.bitwise_xor %i, %i : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT: %3 = graph.bitwise_not %u : (tensor<4xui8>) -> tensor<4xui8>
// CHECK-NEXT: %4 = graph.shift_left %u, %u : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xui8>
// CHECK-NEXT: %5 = graph.shift_right %i, %i : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT: %6 = graph.cast %x {saturate = true} : (tensor<4xf32>) -> tensor<4xf8E4M3FN>
// CHECK-NEXT: %7 = graph.cast %x {round_mode = "nearest"} : (tensor<4xf32>) -> tensor<4xf8E8M0FNU>
// CHECK-NEXT: %8 = graph.cast %6 : (tensor<4xf8E4M3FN>) -> tensor<4xf16>
// CHECK-NEXT: %9 = graph.cast %i : (tensor<4xi32>) -> tensor<4xi4>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: func.func @constants() {
// CHECK-NEXT: %0 = graph.constant dense<[1.500000e+00, -2.000000e+00]> : tensor<2xf32>
// CHECK-NEXT: %1 = graph.constant dense<7> : tensor<2x2xi64>
// CHECK-NEXT: %2 = graph.constant dense<[true, false]> : tensor<2xi1>
// CHECK-NEXT: %3 = graph.constant dense<5.000000e-01> : tensor<bf16>
// CHECK-NEXT: %4 = graph.constant dense<[1, 255]> : tensor<2xui8>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: }
