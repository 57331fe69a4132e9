// RUN: infer-opt %s | infer-opt | filecheck %s
// RUN: infer-opt %s -p graph-constant-fold | filecheck %s --check-prefix=FOLD
// A hexadecimal element of a float dense literal is the value's bit pattern (MLIR's reading,
// and how -inf, inf and NaN print): printed IR with a -inf attention mask reads back as -inf.

func.func @specials() -> (tensor<4xf32>, tensor<2xbf16>, tensor<2xf16>, tensor<f64>, tensor<2xi32>) {
  %f = graph.constant dense<[0xff800000, 0x7f800000, 0x7fc00000, 0x3fc00000]> : tensor<4xf32>
  %b = graph.constant dense<[0xff80, 0x3f80]> : tensor<2xbf16>
  %h = graph.constant dense<[0xfc00, 0x3c00]> : tensor<2xf16>
  %d = graph.constant dense<0xfff0000000000000> : tensor<f64>
  %i = graph.constant dense<[0x10, -3]> : tensor<2xi32>
  func.return %f, %b, %h, %d, %i : tensor<4xf32>, tensor<2xbf16>, tensor<2xf16>, tensor<f64>, tensor<2xi32>
}
// CHECK-LABEL: func.func @specials()
// CHECK-NEXT:    %f = graph.constant dense<[0xff800000, 0x7f800000, 0x7fc00000, 1.500000e+00]> : tensor<4xf32>
// CHECK-NEXT:    %b = graph.constant dense<[0xff80, 1.000000e+00]> : tensor<2xbf16>
// CHECK-NEXT:    %h = graph.constant dense<[0xfc00, 1.000000e+00]> : tensor<2xf16>
// CHECK-NEXT:    %d = graph.constant dense<0xfff0000000000000> : tensor<f64>
// CHECK-NEXT:    %i = graph.constant dense<[16, -3]> : tensor<2xi32>

// the folded sum of -inf and 1 is -inf (it was 4.3e9 + 1)
func.func @fold() -> tensor<2xf32> {
  %m = graph.constant dense<[0xff800000, 0.0]> : tensor<2xf32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %s = graph.add %m, %one : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  func.return %s : tensor<2xf32>
}
// FOLD-LABEL: func.func @fold()
// FOLD-NEXT:    %{{.*}} = graph.constant dense<[0xff800000, 1.000000e+00]> : tensor<2xf32>
