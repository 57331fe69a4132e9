// RUN: infer-opt %s -p graph-fuse,graph-fuse-norm-prologue | filecheck %s
// RUN: infer-opt %s -p graph-fuse,graph-fuse-norm-prologue,graph-fuse-norm-prologue | filecheck %s

// An rms_norm kernel whose every user is a product on packed (GGUF block-quantized) weights
// joins each of them as its prologue; a norm that also feeds a dense product stays a kernel.

func.func @packed(%x: tensor<1x64xf32>) -> (tensor<1x8xf32>, tensor<1x16xf32>) {
  %g = graph.weight @g : tensor<64xf32>
  %pq = graph.weight @q : tensor<8x40xui8>
  %pk = graph.weight @k : tensor<16x40xui8>
  %h = graph.rms_norm %x, %g {epsilon = 1.0e-5 : f64} : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
  %wq = graph.dequantize_blocks %pq {format = "q4_1"} : (tensor<8x40xui8>) -> tensor<8x64xf32>
  %q = graph.linear %h, %wq : (tensor<1x64xf32>, tensor<8x64xf32>) -> tensor<1x8xf32>
  %wk = graph.dequantize_blocks %pk {format = "q4_1"} : (tensor<16x40xui8>) -> tensor<16x64xf32>
  %k = graph.linear %h, %wk : (tensor<1x64xf32>, tensor<16x64xf32>) -> tensor<1x16xf32>
  %s = graph.silu %k : (tensor<1x16xf32>) -> tensor<1x16xf32>
  func.return %q, %s : tensor<1x8xf32>, tensor<1x16xf32>
}

// CHECK-LABEL: func.func @packed(
// CHECK-NOT:     graph.kernel "norm"
// CHECK:         %q = graph.kernel "matmul" (%x, %g, %wq) : (tensor<1x64xf32>, tensor<64xf32>, tensor<8x64xf32>) -> tensor<1x8xf32> {
// CHECK-NEXT:    ^bb0(%x_1: tensor<1x64xf32>, %g_1: tensor<64xf32>, %wq_1: tensor<8x64xf32>):
// CHECK-NEXT:      %h = graph.rms_norm %x_1, %g_1 : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
// CHECK-NEXT:      %q_1 = graph.linear %h, %wq_1 : (tensor<1x64xf32>, tensor<8x64xf32>) -> tensor<1x8xf32>
// CHECK-NEXT:      graph.yield %q_1 : tensor<1x8xf32>
// CHECK-NEXT:    }
// CHECK:         %s = graph.kernel "matmul" (%x, %g, %wk) : (tensor<1x64xf32>, tensor<64xf32>, tensor<16x64xf32>) -> tensor<1x16xf32> {
// CHECK-NEXT:    ^bb0(%x_1: tensor<1x64xf32>, %g_1: tensor<64xf32>, %wk_1: tensor<16x64xf32>):
// CHECK-NEXT:      %h = graph.rms_norm %x_1, %g_1 : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
// CHECK-NEXT:      %k = graph.linear %h, %wk_1 : (tensor<1x64xf32>, tensor<16x64xf32>) -> tensor<1x16xf32>
// CHECK-NEXT:      %s_1 = graph.silu %k : (tensor<1x16xf32>) -> tensor<1x16xf32>
// CHECK-NEXT:      graph.yield %s_1 : tensor<1x16xf32>
// CHECK-NEXT:    }

func.func @dense_user(%x: tensor<1x64xf32>, %w: tensor<8x64xf32>) -> (tensor<1x8xf32>, tensor<1x8xf32>) {
  %g = graph.weight @g : tensor<64xf32>
  %pq = graph.weight @q : tensor<8x40xui8>
  %h = graph.rms_norm %x, %g {epsilon = 1.0e-5 : f64} : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
  %wq = graph.dequantize_blocks %pq {format = "q4_1"} : (tensor<8x40xui8>) -> tensor<8x64xf32>
  %q = graph.linear %h, %wq : (tensor<1x64xf32>, tensor<8x64xf32>) -> tensor<1x8xf32>
  %d = graph.linear %h, %w : (tensor<1x64xf32>, tensor<8x64xf32>) -> tensor<1x8xf32>
  func.return %q, %d : tensor<1x8xf32>, tensor<1x8xf32>
}

// CHECK-LABEL: func.func @dense_user(
// CHECK:         %h = graph.kernel "norm" (%x, %g)
// CHECK:         %q = graph.kernel "matmul" (%h, %wq)
// CHECK-NOT:       graph.rms_norm
// CHECK:         %d = graph.kernel "matmul" (%h, %w)
