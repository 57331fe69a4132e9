// RUN: infer-opt %s -p graph-constant-fold | filecheck %s

// graph-constant-fold evaluates ops whose operands are all constants with the
// reference interpreter: chains fold in one run, every element type keeps its
// type, constants still used elsewhere stay, an integer division by zero is left
// for run time, and a splat result stays inline whatever its size.

func.func @chain(%x: tensor<3xf32>) -> tensor<3xf32> {
  %a = graph.constant dense<[1.0, -2.0, 3.0]> : tensor<3xf32>
  %b = graph.constant dense<0.5> : tensor<f32>
  %0 = graph.mul %a, %b : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  %1 = graph.relu %0 : (tensor<3xf32>) -> tensor<3xf32>
  %2 = graph.add %x, %1 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return %2 : tensor<3xf32>
}

func.func @types() -> (tensor<2xi1>, tensor<2x2xi32>, tensor<bf16>, tensor<i64>) {
  %a = graph.constant dense<[1.5, -2.5]> : tensor<2xf32>
  %z = graph.constant dense<0.0> : tensor<f32>
  %0 = graph.greater %a, %z : (tensor<2xf32>, tensor<f32>) -> tensor<2xi1>
  %1 = graph.cast %a : (tensor<2xf32>) -> tensor<2xi32>
  %2 = graph.broadcast %1 : (tensor<2xi32>) -> tensor<2x2xi32>
  %3 = graph.reduce_sum %a {keepdims = false} : (tensor<2xf32>) -> tensor<f32>
  %4 = graph.cast %3 : (tensor<f32>) -> tensor<bf16>
  %5 = graph.argmin %a {axes = array<i64: 0>, keepdims = false} : (tensor<2xf32>) -> tensor<i64>
  func.return %0, %2, %4, %5 : tensor<2xi1>, tensor<2x2xi32>, tensor<bf16>, tensor<i64>
}

func.func @shared_constant(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %a = graph.constant dense<[4.0, 9.0]> : tensor<2xf32>
  %0 = graph.sqrt %a : (tensor<2xf32>) -> tensor<2xf32>
  %1 = graph.mul %x, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %0, %1 : tensor<2xf32>, tensor<2xf32>
}

func.func @int_div_by_zero() -> tensor<2xi32> {
  %a = graph.constant dense<[7, -7]> : tensor<2xi32>
  %z = graph.constant dense<[2, 0]> : tensor<2xi32>
  %0 = graph.div %a, %z : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
  func.return %0 : tensor<2xi32>
}

func.func @large() -> tensor<4x8xf32> {
  %a = graph.constant dense<1.0> : tensor<8x4xf32>
  %0 = graph.transpose %a {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @chain(
// CHECK-NEXT:    %0 = graph.constant dense<[5.000000e-01, 0.000000e+00, 1.500000e+00]> : tensor<3xf32>
// CHECK-NEXT:    %1 = graph.add %x, %0 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    func.return %1 : tensor<3xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @types(
// CHECK-NEXT:    %0 = graph.constant dense<[true, false]> : tensor<2xi1>
// CHECK-NEXT:    %1 = graph.constant dense<[[1, -2], [1, -2]]> : tensor<2x2xi32>
// CHECK-NEXT:    %2 = graph.constant dense<-1.000000e+00> : tensor<bf16>
// CHECK-NEXT:    %3 = graph.constant dense<1> : tensor<i64>
// CHECK-NEXT:    func.return %0, %1, %2, %3 : tensor<2xi1>, tensor<2x2xi32>, tensor<bf16>, tensor<i64>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @shared_constant(
// CHECK-NEXT:    %a = graph.constant dense<[4.000000e+00, 9.000000e+00]> : tensor<2xf32>
// CHECK-NEXT:    %0 = graph.constant dense<[2.000000e+00, 3.000000e+00]> : tensor<2xf32>
// CHECK-NEXT:    %1 = graph.mul %x, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    func.return %0, %1 : tensor<2xf32>, tensor<2xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @int_div_by_zero(
// CHECK-NEXT:    %a = graph.constant dense<[7, -7]> : tensor<2xi32>
// CHECK-NEXT:    %z = graph.constant dense<[2, 0]> : tensor<2xi32>
// CHECK-NEXT:    %0 = graph.div %a, %z : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
// CHECK-NEXT:    func.return %0 : tensor<2xi32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @large(
// CHECK-NEXT:    %0 = graph.constant dense<1.000000e+00> : tensor<4x8xf32>
// CHECK-NEXT:    func.return %0 : tensor<4x8xf32>
// CHECK-NEXT:  }
