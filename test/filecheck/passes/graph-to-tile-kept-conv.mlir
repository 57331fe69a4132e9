// RUN: infer-opt %s -p 'graph-to-tile{target=server precision=bf16}' | filecheck %s
// RUN: infer-opt %s -p 'graph-to-tile{target=edge precision=bf16}' | filecheck %s --check-prefix=EDGE

// A 3x3 conv + relu, then a 1x1 conv + relu reading it (64 channels at 14x14). On server the
// 3x3 conv is one output tile: it rounds it into a compact bf16 tile, stores that into the
// bf16 intermediate, and keeps it on chip (conv_store.store_output_tile); the 1x1 conv (one
// channel step, one row tile) multiplies its weights by that tile itself as its window: no DMA
// reads the intermediate back. On edge (not latency-bound: nothing kept) the 1x1 conv loads
// its windows from the intermediate in DRAM.

func.func @main(%x: tensor<1x64x14x14xf32>) -> tensor<1x64x14x14xf32> {
  %w0 = graph.constant dense<0.01> : tensor<64x64x3x3xf32>
  %b0 = graph.constant dense<0.5> : tensor<64xf32>
  %c0 = graph.conv2d %x, %w0, %b0 {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x64x14x14xf32>, tensor<64x64x3x3xf32>, tensor<64xf32>) -> tensor<1x64x14x14xf32>
  %r0 = graph.relu %c0 : (tensor<1x64x14x14xf32>) -> tensor<1x64x14x14xf32>
  %w1 = graph.constant dense<0.02> : tensor<64x64x1x1xf32>
  %b1 = graph.constant dense<0.25> : tensor<64xf32>
  %c1 = graph.conv2d %r0, %w1, %b1 : (tensor<1x64x14x14xf32>, tensor<64x64x1x1xf32>, tensor<64xf32>) -> tensor<1x64x14x14xf32>
  %r1 = graph.relu %c1 : (tensor<1x64x14x14xf32>) -> tensor<1x64x14x14xf32>
  func.return %r1 : tensor<1x64x14x14xf32>
}

// CHECK:     %[[KEPT:[0-9]+]] = tile.alloc : memref<64x196xbf16, "spad">
// CHECK:     tile.alloc {{.*}} : memref<1x64x14x14xbf16, "dram">
// CHECK:     tile.dma %[[KEPT]][{{.*}}], %{{[0-9]+}}[{{.*}}] {{.*}} : memref<64x196xbf16, "spad">, memref<64x196xbf16, "dram">
// CHECK-NOT: tile.dma {{.*}} : memref<{{[0-9x]+}}xbf16, "dram">, memref<{{[0-9x]+}}xbf16, "spad">
// CHECK:     tile.matmul %{{[0-9]+}}[{{.*}}], %[[KEPT]][{{.*}}], %{{[0-9]+}}[{{.*}}] {m = 64 : i64, k = 64 : i64, n = 128 : i64}
// CHECK:     func.return

// EDGE:      tile.alloc {{.*}} : memref<1x64x14x14xbf16, "dram">
// EDGE:      tile.dma {{.*}} : memref<64x196xbf16, "spad">, memref<64x196xbf16, "dram">
// EDGE:      tile.dma {{.*}} : memref<64x14x14xbf16, "dram">, memref<{{[0-9x]+}}xbf16, "spad">
