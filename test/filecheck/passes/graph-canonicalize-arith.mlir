// RUN: infer-opt %s -p graph-canonicalize | filecheck %s
// RUN: infer-opt %s -p 'graph-canonicalize{ignore-signed-zeros=true}' | filecheck %s --check-prefix=NSZ

// graph-canonicalize on elementwise ops. By default only bit-exact rewrites:
// x + (-0.0) and x - (+0.0) fold, x + (+0.0) does not (-0.0 + 0.0 is +0.0);
// ignore-signed-zeros=true folds those too. An identity whose other operand
// would broadcast x to a larger shape is left alone, and a clip whose range
// becomes empty is not merged.

func.func @add_zero(%x: tensor<2x3xf32>, %i: tensor<4xi32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<4xi32>) {
  %nz = graph.constant dense<-0.0> : tensor<f32>
  %pz = graph.constant dense<0.0> : tensor<3xf32>
  %iz = graph.constant dense<0> : tensor<4xi32>
  %0 = graph.add %x, %nz : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %1 = graph.sub %0, %pz : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %2 = graph.add %pz, %x : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = graph.sub %x, %nz : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %4 = graph.add %iz, %i : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  func.return %1, %2, %3, %4 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<4xi32>
}

func.func @add_zero_broadcasts(%x: tensor<3xf32>) -> tensor<2x3xf32> {
  %z = graph.constant dense<-0.0> : tensor<2x3xf32>
  %0 = graph.add %x, %z : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

func.func @mul_div_pow_one(%x: tensor<2x3xf16>, %b: tensor<4xi1>) -> (tensor<2x3xf16>, tensor<4xi1>) {
  %one = graph.constant dense<1.0> : tensor<1xf16>
  %t = graph.constant dense<true> : tensor<4xi1>
  %0 = graph.mul %one, %x : (tensor<1xf16>, tensor<2x3xf16>) -> tensor<2x3xf16>
  %1 = graph.div %0, %one : (tensor<2x3xf16>, tensor<1xf16>) -> tensor<2x3xf16>
  %2 = graph.pow %1, %one : (tensor<2x3xf16>, tensor<1xf16>) -> tensor<2x3xf16>
  %3 = graph.mul %b, %t : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  func.return %2, %3 : tensor<2x3xf16>, tensor<4xi1>
}

func.func @not_one(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %c = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %0 = graph.mul %x, %c : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %1 = graph.div %c, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %0, %1 : tensor<2xf32>, tensor<2xf32>
}

func.func @involutions(%x: tensor<4xi8>, %b: tensor<4xi1>) -> (tensor<4xi8>, tensor<4xi1>) {
  %0 = graph.neg %x : (tensor<4xi8>) -> tensor<4xi8>
  %1 = graph.neg %0 : (tensor<4xi8>) -> tensor<4xi8>
  %2 = graph.not %b : (tensor<4xi1>) -> tensor<4xi1>
  %3 = graph.not %2 : (tensor<4xi1>) -> tensor<4xi1>
  func.return %1, %3 : tensor<4xi8>, tensor<4xi1>
}

func.func @idempotent(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = graph.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  %1 = graph.relu %0 : (tensor<4xf32>) -> tensor<4xf32>
  %2 = graph.neg %x : (tensor<4xf32>) -> tensor<4xf32>
  %3 = graph.abs %2 : (tensor<4xf32>) -> tensor<4xf32>
  %4 = graph.abs %3 : (tensor<4xf32>) -> tensor<4xf32>
  %5 = graph.floor %x : (tensor<4xf32>) -> tensor<4xf32>
  %6 = graph.floor %5 : (tensor<4xf32>) -> tensor<4xf32>
  func.return %1, %4, %6 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

func.func @clip_relu(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %r = graph.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  %0 = graph.clip %r {max = 6.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  %c = graph.clip %x {min = -1.0 : f64, max = 1.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = graph.relu %c : (tensor<4xf32>) -> tensor<4xf32>
  %2 = graph.clip %c {min = 0.5 : f64, max = 4.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  %3 = graph.clip %c : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0, %1, %2, %3 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

func.func @clip_disjoint(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = graph.clip %x {max = -1.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  %0 = graph.relu %c : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

func.func @where(%c: tensor<4xi1>, %x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %t = graph.constant dense<true> : tensor<i1>
  %f = graph.constant dense<false> : tensor<4xi1>
  %0 = graph.where %t, %x, %y : (tensor<i1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = graph.where %f, %x, %y : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = graph.where %c, %y, %y : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0, %1, %2 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @add_zero(
// CHECK-NEXT:    %nz = graph.constant dense<-0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %pz = graph.constant dense<0.000000e+00> : tensor<3xf32>
// CHECK-NEXT:    %0 = graph.add %pz, %x : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %1 = graph.sub %x, %nz : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
// CHECK-NEXT:    func.return %x, %0, %1, %i : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<4xi32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @add_zero_broadcasts(
// CHECK-NEXT:    %z = graph.constant dense<-0.000000e+00> : tensor<2x3xf32>
// CHECK-NEXT:    %0 = graph.add %x, %z : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    func.return %0 : tensor<2x3xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @mul_div_pow_one(
// CHECK-NEXT:    func.return %x, %b : tensor<2x3xf16>, tensor<4xi1>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @not_one(
// CHECK-NEXT:    %c = graph.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK-NEXT:    %0 = graph.mul %x, %c : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    %1 = graph.div %c, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    func.return %0, %1 : tensor<2xf32>, tensor<2xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @involutions(
// CHECK-NEXT:    func.return %x, %b : tensor<4xi8>, tensor<4xi1>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @idempotent(
// CHECK-NEXT:    %0 = graph.relu %x : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %1 = graph.abs %x : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %2 = graph.floor %x : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    func.return %0, %1, %2 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @clip_relu(
// CHECK-NEXT:    %0 = graph.clip %x {min = 0.000000e+00 : f64, max = 6.000000e+00 : f64} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %c = graph.clip %x {min = -1.000000e+00 : f64, max = 1.000000e+00 : f64} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %1 = graph.clip %x {min = 0.000000e+00 : f64, max = 1.000000e+00 : f64} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %2 = graph.clip %x {min = 5.000000e-01 : f64, max = 1.000000e+00 : f64} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    func.return %0, %1, %2, %c : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @clip_disjoint(
// CHECK-NEXT:    %c = graph.clip %x {max = -1.000000e+00 : f64} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %0 = graph.relu %c : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    func.return %0 : tensor<4xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @where(
// CHECK-NEXT:    func.return %x, %y, %y : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
// CHECK-NEXT:  }

// NSZ-LABEL: func.func @add_zero(
// NSZ-NEXT:    func.return %x, %x, %x, %i : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<4xi32>
// NSZ-NEXT:  }
// NSZ-LABEL: func.func @add_zero_broadcasts(
// NSZ-NEXT:    %z = graph.constant
// NSZ-NEXT:    %0 = graph.add %x, %z
