// RUN: infer-opt %s | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | infer-opt | filecheck %s
// RUN: rm -rf %t && mkdir -p %t && infer run-ir %s --entry values --output %t/out.npz
// RUN: python -c "import numpy as np; o = np.load('%t/out.npz'); [print(k, o[k].tolist()) for k in sorted(o.files)]" | filecheck %s --check-prefix=VALUES

// Quantization ops and integer kernels in their custom form: per-tensor and per-axis
// parameters, optional zero points, i8 / ui8 operands, i32 results.

// CHECK-LABEL: func.func @convert(
func.func @convert(%x: tensor<2x16xf32>, %s: tensor<f32>, %zp: tensor<ui8>, %cs: tensor<16xf32>, %czp: tensor<16xi8>) {
  // CHECK-NEXT: %q = graph.quantize_linear %x, %s, %zp : (tensor<2x16xf32>, tensor<f32>, tensor<ui8>) -> tensor<2x16xui8>
  %q = graph.quantize_linear %x, %s, %zp : (tensor<2x16xf32>, tensor<f32>, tensor<ui8>) -> tensor<2x16xui8>
  // CHECK-NEXT: %qc = graph.quantize_linear %x, %cs, %czp {axis = 1 : i64} : (tensor<2x16xf32>, tensor<16xf32>, tensor<16xi8>) -> tensor<2x16xi8>
  %qc = graph.quantize_linear %x, %cs, %czp {axis = 1 : i64} : (tensor<2x16xf32>, tensor<16xf32>, tensor<16xi8>) -> tensor<2x16xi8>
  // CHECK-NEXT: %qs = graph.quantize_linear %x, %s : (tensor<2x16xf32>, tensor<f32>) -> tensor<2x16xi8>
  %qs = graph.quantize_linear %x, %s : (tensor<2x16xf32>, tensor<f32>) -> tensor<2x16xi8>
  // CHECK-NEXT: %d = graph.dequantize_linear %q, %s, %zp : (tensor<2x16xui8>, tensor<f32>, tensor<ui8>) -> tensor<2x16xf32>
  %d = graph.dequantize_linear %q, %s, %zp : (tensor<2x16xui8>, tensor<f32>, tensor<ui8>) -> tensor<2x16xf32>
  // CHECK-NEXT: %dc = graph.dequantize_linear %qc, %cs {axis = -1 : i64} : (tensor<2x16xi8>, tensor<16xf32>) -> tensor<2x16xf32>
  %dc = graph.dequantize_linear %qc, %cs {axis = -1 : i64} : (tensor<2x16xi8>, tensor<16xf32>) -> tensor<2x16xf32>
  // CHECK-NEXT: %r = graph.requantize %x, %s {zero_point = -3 : i64} : (tensor<2x16xf32>, tensor<f32>) -> tensor<2x16xi8>
  %r = graph.requantize %x, %s {zero_point = -3 : i64} : (tensor<2x16xf32>, tensor<f32>) -> tensor<2x16xi8>
  func.return
}

// CHECK-LABEL: func.func @kernels(
func.func @kernels(%x: tensor<1x4x8x8xi8>, %w: tensor<8x4x3x3xi8>, %b: tensor<8xi32>, %m: tensor<8xf32>, %a: tensor<2x3x4xui8>, %bw: tensor<4x5xi8>, %lw: tensor<6x4xi8>, %lb: tensor<6xi32>) {
  // CHECK-NEXT: %acc = graph.conv2d_integer %x, %w, %b {padding = array<i64: 1, 1, 1, 1>, input_zero_point = -2 : i64} : (tensor<1x4x8x8xi8>, tensor<8x4x3x3xi8>, tensor<8xi32>) -> tensor<1x8x8x8xi32>
  %acc = graph.conv2d_integer %x, %w, %b {padding = array<i64: 1, 1, 1, 1>, input_zero_point = -2 : i64} : (tensor<1x4x8x8xi8>, tensor<8x4x3x3xi8>, tensor<8xi32>) -> tensor<1x8x8x8xi32>
  // CHECK-NEXT: %y = graph.requantize %acc, %m {axis = 1 : i64} : (tensor<1x8x8x8xi32>, tensor<8xf32>) -> tensor<1x8x8x8xi8>
  %y = graph.requantize %acc, %m {axis = 1 : i64} : (tensor<1x8x8x8xi32>, tensor<8xf32>) -> tensor<1x8x8x8xi8>
  // CHECK-NEXT: %f = graph.dequantize_linear %acc, %m {axis = 1 : i64} : (tensor<1x8x8x8xi32>, tensor<8xf32>) -> tensor<1x8x8x8xf32>
  %f = graph.dequantize_linear %acc, %m {axis = 1 : i64} : (tensor<1x8x8x8xi32>, tensor<8xf32>) -> tensor<1x8x8x8xf32>
  // CHECK-NEXT: %dw = graph.conv2d_integer %x, %w {stride = array<i64: 2, 2>, weight_zero_point = 5 : i64} : (tensor<1x4x8x8xi8>, tensor<8x4x3x3xi8>) -> tensor<1x8x3x3xi32>
  %dw = graph.conv2d_integer %x, %w {stride = array<i64: 2, 2>, groups = 1 : i64, weight_zero_point = 5 : i64} : (tensor<1x4x8x8xi8>, tensor<8x4x3x3xi8>) -> tensor<1x8x3x3xi32>
  // CHECK-NEXT: %mm = graph.matmul_integer %a, %bw {lhs_zero_point = 128 : i64} : (tensor<2x3x4xui8>, tensor<4x5xi8>) -> tensor<2x3x5xi32>
  %mm = graph.matmul_integer %a, %bw {lhs_zero_point = 128 : i64} : (tensor<2x3x4xui8>, tensor<4x5xi8>) -> tensor<2x3x5xi32>
  // CHECK-NEXT: %mt = graph.matmul_integer %a, %a {transpose_b = true} : (tensor<2x3x4xui8>, tensor<2x3x4xui8>) -> tensor<2x3x3xi32>
  %mt = graph.matmul_integer %a, %a {transpose_b = true} : (tensor<2x3x4xui8>, tensor<2x3x4xui8>) -> tensor<2x3x3xi32>
  // CHECK-NEXT: %l = graph.linear_integer %a, %lw, %lb {input_zero_point = 7 : i64} : (tensor<2x3x4xui8>, tensor<6x4xi8>, tensor<6xi32>) -> tensor<2x3x6xi32>
  %l = graph.linear_integer %a, %lw, %lb {input_zero_point = 7 : i64} : (tensor<2x3x4xui8>, tensor<6x4xi8>, tensor<6xi32>) -> tensor<2x3x6xi32>
  func.return
}

// The reference interpreter on known values: ONNX's round half to even and saturation,
// the requant multiplier, exact integer accumulation with the zero points.
// x / 0.5 = [0.5, -0.5, 1.5, 200, -200, 0.6]: ties to even, saturated to [-128, 127];
// (q - 3) * 0.1; (250 - 3) * -128 + (3 - 3) * 1 + (7 - 3) * 2 = -31608, (250 - 3) * 127 = 31369.
// VALUES: output0 [0, 0, 2, 127, -128, 1]
// VALUES-NEXT: output1 [-0.30000001192092896, -0.30000001192092896, -0.10000000149011612, 12.40000057220459, -13.100000381469727, -0.20000000298023224]
// VALUES-NEXT: output2 [-31608, 31369]
func.func @values() -> (tensor<6xi8>, tensor<6xf32>, tensor<2xi32>) {
  %x = graph.constant dense<[0.25, -0.25, 0.75, 100.0, -100.0, 0.3]> : tensor<6xf32>
  %s = graph.constant dense<0.5> : tensor<f32>
  %q = graph.quantize_linear %x, %s : (tensor<6xf32>, tensor<f32>) -> tensor<6xi8>
  %zp = graph.constant dense<3> : tensor<i8>
  %t = graph.constant dense<0.1> : tensor<f32>
  %d = graph.dequantize_linear %q, %t, %zp : (tensor<6xi8>, tensor<f32>, tensor<i8>) -> tensor<6xf32>
  %a = graph.constant dense<[[250, 3, 7]]> : tensor<1x3xui8>
  %w = graph.constant dense<[[-128, 1, 2], [127, -1, 0]]> : tensor<2x3xi8>
  %acc = graph.linear_integer %a, %w {input_zero_point = 3 : i64} : (tensor<1x3xui8>, tensor<2x3xi8>) -> tensor<1x2xi32>
  %acc1 = graph.reshape %acc : (tensor<1x2xi32>) -> tensor<2xi32>
  func.return %q, %d, %acc1 : tensor<6xi8>, tensor<6xf32>, tensor<2xi32>
}
