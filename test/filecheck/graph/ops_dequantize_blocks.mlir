// RUN: infer-opt %s | filecheck %s
// RUN: infer-opt %s --print-op-generic | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// graph.dequantize_blocks states the values of a block-quantized weight kept
// packed (ui8): the last dimension is whole blocks (q4_1: 20 bytes per 32
// values), the result is the logical weight in f32, f16 or bf16.

func.func @linear_q4_1(%x: tensor<2x64xf32>, %p: tensor<3x40xui8>) -> tensor<2x3xf32> {
  %w = graph.dequantize_blocks %p {format = "q4_1"} : (tensor<3x40xui8>) -> tensor<3x64xf32>
  %y = graph.linear %x, %w : (tensor<2x64xf32>, tensor<3x64xf32>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}
// CHECK-LABEL: func.func @linear_q4_1
// CHECK:       %w = graph.dequantize_blocks %p {format = "q4_1"} : (tensor<3x40xui8>) -> tensor<3x64xf32>
// GENERIC:     "graph.dequantize_blocks"(%{{.*}}) <{format = "q4_1"}> : (tensor<3x40xui8>) -> tensor<3x64xf32>

func.func @formats(%a: tensor<5x68xui8>, %b: tensor<2x4x18xui8>, %c: tensor<20xui8>) -> (tensor<5x64xbf16>, tensor<2x4x32xf16>, tensor<32xf32>) {
  %0 = graph.dequantize_blocks %a {format = "q8_0"} : (tensor<5x68xui8>) -> tensor<5x64xbf16>
  %1 = graph.dequantize_blocks %b {format = "q4_0"} : (tensor<2x4x18xui8>) -> tensor<2x4x32xf16>
  %2 = graph.dequantize_blocks %c {format = "q4_1"} : (tensor<20xui8>) -> tensor<32xf32>
  func.return %0, %1, %2 : tensor<5x64xbf16>, tensor<2x4x32xf16>, tensor<32xf32>
}
// CHECK-LABEL: func.func @formats
// CHECK:       graph.dequantize_blocks %a {format = "q8_0"} : (tensor<5x68xui8>) -> tensor<5x64xbf16>
// CHECK:       graph.dequantize_blocks %b {format = "q4_0"} : (tensor<2x4x18xui8>) -> tensor<2x4x32xf16>
// CHECK:       graph.dequantize_blocks %c {format = "q4_1"} : (tensor<20xui8>) -> tensor<32xf32>
