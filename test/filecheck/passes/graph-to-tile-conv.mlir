// RUN: infer-opt %s -p 'graph-to-tile{target=edge}' | filecheck %s --check-prefix=EDGE
// RUN: infer-opt %s -p 'graph-to-tile{target=server}' | filecheck %s --check-prefix=SERVER
// RUN: infer-opt %s -p 'graph-to-tile{target=edge debug-tiling=true}' -o /dev/null 2>&1 | filecheck %s --check-prefix=DEBUG

// conv 3x3 pad 1 + residual add (fused by graph-to-tile as the epilogue): the
// input is copied into a zero-bordered DRAM buffer once, then per output tile
// the kh x kw taps load shifted windows (one 3-D DMA each) that become the
// stationary operand, the weight block [O, C] per tap streams through the array.

func.func @main(%x: tensor<1x64x28x28xf32>, %res: tensor<1x64x28x28xf32>) -> tensor<1x64x28x28xf32> {
  %w = graph.constant dense<0.01> : tensor<64x64x3x3xf32>
  %y = graph.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x64x28x28xf32>, tensor<64x64x3x3xf32>) -> tensor<1x64x28x28xf32>
  %s = graph.add %y, %res : (tensor<1x64x28x28xf32>, tensor<1x64x28x28xf32>) -> tensor<1x64x28x28xf32>
  func.return %s : tensor<1x64x28x28xf32>
}

// EDGE:      tile.weight @kernel0.weight.packed_hi : memref<576x64xbf16, "dram">
// EDGE:      %[[XP:.*]] = tile.alloc : memref<64x30x30xf32, "dram">
// EDGE:      tile.fill {{.*}} value = 0.000000e+00
// EDGE:      scf.for
// EDGE:        tile.dma {{.*}}, %[[XP]][{{.*}}] {shape = array<i64: {{[0-9]+}}, 28, 28>}
// EDGE:      scf.for
// EDGE-NEXT:     tile.fill {{.*}} {rows = 64 : i64, cols = 112 : i64
// EDGE-NEXT:     scf.for
// EDGE-NEXT:       scf.for
// EDGE-NEXT:         scf.for
// EDGE:                tile.dma %[[XP]][{{.*}}] {shape = array<i64: 16, 4, 28>}
// EDGE-NEXT:           tile.vector "copy"
// EDGE-NEXT:           tile.vector "sub"
// EDGE-NEXT:           tile.vector "copy"
// EDGE:                tile.dma {{.*}} {shape = array<i64: 64, 16>}
// EDGE:                tile.matmul {{.*}} {m = 64 : i64, k = 16 : i64, n = 16 : i64, accumulate = true}
// EDGE:          tile.dma {{.*}} {shape = array<i64: 64, 112>}
// EDGE-NEXT:     tile.vector "add" {{.*}} bmode = "tile"

// SERVER:      tile.dma %[[XP:.*]][{{.*}}] {shape = array<i64: 64, {{[0-9]+}}, 28>}
// SERVER:      tile.matmul {{.*}} {m = 64 : i64, k = 64 : i64, n = 128 : i64, accumulate = true}

// DEBUG: [graph-to-tile] kernel0: conv2d O=64 P=28x28 C=64 taps=3x3 batch=1 tiles TMxTNxTK = 64x112x16
