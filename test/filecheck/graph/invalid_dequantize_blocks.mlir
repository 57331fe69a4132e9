// RUN: infer-opt %s --split-input-file --verify-diagnostics

// Verifier messages of graph.dequantize_blocks: the format, the packed operand's
// element type and row length, the result's element type and shape. One
// split-input-file chunk per case; the expected-error annotation is the message
// the verifier gives for the op below it.

// -----

func.func @f(%p: tensor<3x40xui8>) {
  // expected-error @+1 {{unknown block format "q5_k" (supported: q8_0, q4_0, q4_1)}}
  %0 = graph.dequantize_blocks %p {format = "q5_k"} : (tensor<3x40xui8>) -> tensor<3x64xf32>
  func.return
}

// -----

func.func @f(%p: tensor<3x40xi8>) {
  // expected-error @+1 {{the packed weight must be ui8, got i8}}
  %0 = graph.dequantize_blocks %p {format = "q4_1"} : (tensor<3x40xi8>) -> tensor<3x64xf32>
  func.return
}

// -----

func.func @f(%p: tensor<3x30xui8>) {
  // expected-error @+1 {{a packed q4_1 row is a whole number of 20-byte blocks, got 3x30}}
  %0 = graph.dequantize_blocks %p {format = "q4_1"} : (tensor<3x30xui8>) -> tensor<3x48xf32>
  func.return
}

// -----

func.func @f(%p: tensor<3x34xui8>) {
  // expected-error @+1 {{result #0 has shape 3x64 but the operands and attributes give 3x32}}
  %0 = graph.dequantize_blocks %p {format = "q8_0"} : (tensor<3x34xui8>) -> tensor<3x64xf32>
  func.return
}

// -----

func.func @f(%p: tensor<3x34xui8>) {
  // expected-error @+1 {{the result must be f32, f16 or bf16, got i32}}
  %0 = graph.dequantize_blocks %p {format = "q8_0"} : (tensor<3x34xui8>) -> tensor<3x32xi32>
  func.return
}
