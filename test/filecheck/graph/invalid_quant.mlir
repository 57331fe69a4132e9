// RUN: infer-opt %s --split-input-file --verify-diagnostics

// Verifier messages of the quantization ops and integer kernels: element types, per-tensor
// and per-axis parameters, zero points in range.

// -----

func.func @f(%x: tensor<4xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{the result must be i8 or ui8, got i16}}
  %q = graph.quantize_linear %x, %s : (tensor<4xf32>, tensor<f32>) -> tensor<4xi16>
  func.return
}

// -----

func.func @f(%x: tensor<4xi8>, %s: tensor<f32>) {
  // expected-error @+1 {{the input must have a floating-point element type (f32, f16, bf16, f64), got i8}}
  %q = graph.quantize_linear %x, %s : (tensor<4xi8>, tensor<f32>) -> tensor<4xi8>
  func.return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %s: tensor<3xf32>) {
  // expected-error @+1 {{a per-tensor scale has one element (shape [] or [1]), got 3 (give `axis` for one scale per slice)}}
  %q = graph.quantize_linear %x, %s : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xi8>
  func.return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %s: tensor<3xf32>) {
  // expected-error @+1 {{a per-axis scale along axis 0 of a 4x3 operand has shape 4, got 3}}
  %q = graph.quantize_linear %x, %s {axis = 0 : i64} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xi8>
  func.return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %s: tensor<3xf32>) {
  // expected-error @+1 {{axis 2 is out of range for a rank-2 operand (expected -2 <= axis < 2)}}
  %q = graph.quantize_linear %x, %s {axis = 2 : i64} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xi8>
  func.return
}

// -----

func.func @f(%x: tensor<4xf32>, %s: tensor<f32>, %zp: tensor<ui8>) {
  // expected-error @+1 {{the zero point is ui8 but the result is i8 (they must agree)}}
  %q = graph.quantize_linear %x, %s, %zp : (tensor<4xf32>, tensor<f32>, tensor<ui8>) -> tensor<4xi8>
  func.return
}

// -----

func.func @f(%x: tensor<4xf32>, %s: tensor<f16>) {
  // expected-error @+1 {{the scale must be f32, got f16}}
  %q = graph.quantize_linear %x, %s : (tensor<4xf32>, tensor<f16>) -> tensor<4xi8>
  func.return
}

// -----

func.func @f(%x: tensor<4x3xi8>, %s: tensor<3xf32>, %zp: tensor<1xi8>) {
  // expected-error @+1 {{the zero point has shape 1 but the scale has 3}}
  %d = graph.dequantize_linear %x, %s, %zp {axis = 1 : i64} : (tensor<4x3xi8>, tensor<3xf32>, tensor<1xi8>) -> tensor<4x3xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{the input must be i8 or ui8 or i32, got f32}}
  %d = graph.dequantize_linear %x, %s : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4xi8>, %s: tensor<f32>) {
  // expected-error @+1 {{the result must be f32, got bf16}}
  %d = graph.dequantize_linear %x, %s : (tensor<4xi8>, tensor<f32>) -> tensor<4xbf16>
  func.return
}

// -----

func.func @f(%x: tensor<4xi32>, %m: tensor<f32>) {
  // expected-error @+1 {{the zero point 200 is outside the range of i8 [-128, 127]}}
  %y = graph.requantize %x, %m {zero_point = 200 : i64} : (tensor<4xi32>, tensor<f32>) -> tensor<4xi8>
  func.return
}

// -----

func.func @f(%x: tensor<4xi8>, %m: tensor<f32>) {
  // expected-error @+1 {{the input must be i32 or f32 or f16 or bf16, got i8}}
  %y = graph.requantize %x, %m : (tensor<4xi8>, tensor<f32>) -> tensor<4xi8>
  func.return
}

// -----

func.func @f(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3xi8>) {
  // expected-error @+1 {{the input must be i8 or ui8, got f32}}
  %acc = graph.conv2d_integer %x, %w : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xi8>) -> tensor<1x8x6x6xi32>
  func.return
}

// -----

func.func @f(%x: tensor<1x4x8x8xi8>, %w: tensor<8x4x3x3xi8>, %b: tensor<8xf32>) {
  // expected-error @+1 {{the bias must be i32, got f32}}
  %acc = graph.conv2d_integer %x, %w, %b : (tensor<1x4x8x8xi8>, tensor<8x4x3x3xi8>, tensor<8xf32>) -> tensor<1x8x6x6xi32>
  func.return
}

// -----

func.func @f(%x: tensor<1x4x8x8xui8>, %w: tensor<8x4x3x3xi8>) {
  // expected-error @+1 {{input_zero_point -1 is outside the range of ui8 [0, 255]}}
  %acc = graph.conv2d_integer %x, %w {input_zero_point = -1 : i64} : (tensor<1x4x8x8xui8>, tensor<8x4x3x3xi8>) -> tensor<1x8x6x6xi32>
  func.return
}

// -----

func.func @f(%x: tensor<1x4x8x8xi8>, %w: tensor<8x4x3x3xi8>) {
  // expected-error @+1 {{result #0 has element type f32 but the operands give i32}}
  %acc = graph.conv2d_integer %x, %w : (tensor<1x4x8x8xi8>, tensor<8x4x3x3xi8>) -> tensor<1x8x6x6xf32>
  func.return
}

// -----

func.func @f(%x: tensor<2x5xi8>, %w: tensor<3x4xi8>) {
  // expected-error @+1 {{input features 5 (shape 2x5) do not match the weight's in-features 4 (weight shape 3x4, expected [out, in])}}
  %acc = graph.linear_integer %x, %w : (tensor<2x5xi8>, tensor<3x4xi8>) -> tensor<2x3xi32>
  func.return
}

// -----

func.func @f(%a: tensor<2x5xi8>, %b: tensor<4x3xi8>) {
  // expected-error @+1 {{contraction dimensions differ: lhs 2x5 has K=5, rhs 4x3 has K=4}}
  %acc = graph.matmul_integer %a, %b : (tensor<2x5xi8>, tensor<4x3xi8>) -> tensor<2x3xi32>
  func.return
}
