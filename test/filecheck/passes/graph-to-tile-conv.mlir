// RUN: infer-opt %s -p 'graph-to-tile{target=edge overrides="kernel0=16x448x16"}' | filecheck %s --check-prefix=EDGE
// RUN: infer-opt %s -p 'graph-to-tile{target=server}' | filecheck %s --check-prefix=SERVER
// RUN: infer-opt %s -p 'graph-to-tile{target=edge debug-tiling=true}' -o /dev/null 2>&1 | filecheck %s --check-prefix=DEBUG

// conv 3x3 pad 1 + residual add (fused by graph-to-tile as the epilogue), lowered as an
// implicit GEMM: the padded input is prepared once in DRAM as bf16 planes (hi/lo halves for
// the fp32 emulation), rows of padded width (29 for 28 columns: neighbouring rows share one
// border column, planes.py `Planes.Wq`) so that one window in the scratchpad serves
// every tap (a tap is an offset into it). The cost model picks the orientation per target:
// on edge the window is the stationary operand (pixel-major planes [N, phases, Hq, Wq, C]),
// output channels stream; on server, the padded window built on chip instead (the cost model's
// `on-chip-padding` choice: the input rows DMA'd once, the border columns filled, rounded to
// bf16 hi/lo; no planes written to DRAM) and im2col of the whole image, weights streaming.
// EDGE pins the tiles TO=16 TOH=16 TC=16 (an override) to check that lowering; the cost model's
// own edge choice is the DEBUG line (TO=64 TOH=1 TC=64: 425 K simulated cycles, 1,594
// instructions; TO=32 TOH=2 TC=64, its choice before the weights came per kernel row: 429 K and
// 796 instructions then, 429 K and 981 now; TO=16 TOH=16 TC=16: 592 K).

func.func @main(%x: tensor<1x64x28x28xf32>, %res: tensor<1x64x28x28xf32>) -> tensor<1x64x28x28xf32> {
  %w = graph.constant dense<0.01> : tensor<64x64x3x3xf32>
  %y = graph.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x64x28x28xf32>, tensor<64x64x3x3xf32>) -> tensor<1x64x28x28xf32>
  %s = graph.add %y, %res : (tensor<1x64x28x28xf32>, tensor<1x64x28x28xf32>) -> tensor<1x64x28x28xf32>
  func.return %s : tensor<1x64x28x28xf32>
}

// EDGE-DAG:  tile.weight @kernel0.weight.packed_t_hi : memref<2304x16xbf16, "dram">
// EDGE-DAG:  tile.weight @kernel0.weight.packed_t_lo : memref<2304x16xbf16, "dram">
// EDGE-DAG:  tile.alloc {buffers = 2 : i64} : memref<551x16xbf16, "spad">
// EDGE-DAG:  tile.alloc : memref<464x16xf32, "acc">
// EDGE-DAG:  %[[PLANES:.*]] = tile.alloc : memref<1x1x31x29x64xbf16, "dram">
// EDGE:      tile.dma {{.*}}, %{{.*}}[{{.*}}] {shape = array<i64: 3, 28, 64>}
// EDGE:      scf.for
// several channel steps with the output-channel tiles outside: the tile's whole weight block
// [taps.C, TO] (hi, lo) loaded once per output tile, each step reading its rows of it
// (ConvTiles.whole_weights; a [144, 16] block per step and row tile before)
// EDGE:        tile.dma {{.*}} {shape = array<i64: 576, 16>} : memref<2304x16xbf16, "dram">, memref<576x16xbf16, "spad">
// EDGE:        tile.dma {{.*}} {shape = array<i64: 576, 16>} : memref<2304x16xbf16, "dram">, memref<576x16xbf16, "spad">
// EDGE:        tile.fill {{.*}} {rows = 464 : i64, cols = 16 : i64, value = 0.000000e+00 : f32}
// EDGE-NEXT:   scf.for
// EDGE-NEXT:     tile.dma {{.*}} {shape = array<i64: 551, 16>}
// EDGE-NEXT:     tile.dma {{.*}} {shape = array<i64: 551, 16>}
// EDGE-NOT:      tile.dma
// EDGE:          scf.for
// EDGE-NEXT:       scf.for
// EDGE:              tile.matmul {{.*}} {m = 464 : i64, k = 16 : i64, n = 16 : i64, accumulate = true}
// EDGE-NEXT:         tile.matmul
// EDGE-NEXT:         tile.matmul
// EDGE:        tile.dma {{.*}} {shape = array<i64: 16, 16, 28>} : memref<64x28x28xf32, "dram">, memref<16x16x29xf32, "spad">
// EDGE-NEXT:   tile.vector "add" {{.*}} bmode = "tile"
// EDGE:        tile.dma {{.*}} {shape = array<i64: 16, 16, 28>} : memref<16x16x29xf32, "spad">, memref<64x28x28xf32, "dram">
// the last 12 output rows: their own buffers
// EDGE:        tile.dma {{.*}} {shape = array<i64: 16, 12, 28>} : memref<16x12x29xf32, "spad">, memref<64x28x28xf32, "dram">

// SERVER-DAG:  tile.weight @kernel0.weight.packed_hi : memref<64x576xbf16, "dram">
// SERVER-DAG:  tile.weight @kernel0.weight.packed_lo : memref<64x576xbf16, "dram">
// SERVER-NOT:  tile.alloc : memref<{{.*}}xbf16, "dram">
// SERVER:      tile.dma {{.*}} {shape = array<i64: 64, 28, 28>} : memref<64x28x28xf32, "dram">, memref<64x31x28xf32, "spad">
// SERVER:      tile.fill {{.*}} {rows = 1984 : i64, cols = 1 : i64, value = 0.000000e+00 : f32} : memref<1984x29xbf16, "spad">
// SERVER:      tile.vector "copy" {{.*}} {rows = 1984 : i64, cols = 28 : i64} : memref<1984x29xbf16, "spad">, memref<1984x28xf32, "spad">
// the im2col (9 taps x 64 channels) in chunks of the array's 128 rows, the partial one (tap 0)
// first, each by column groups of array-wide blocks (the vector queue holds a chunk's 4
// copies, 2 taps hi and lo, twice: 512 and 300 columns, the first group ramped up as 1, 2 and 1
// blocks, `tiling_cost.im2col_copy_groups`): the first chunk's copies all ahead of its matmuls,
// each later chunk's group right after the chunk before's matmuls of those columns
// SERVER-COUNT-2: tile.vector "copy" {{.*}} {rows = 64 : i64, cols = 128 : i64} : memref<576x812xbf16, "spad">, memref<64x899xbf16, "spad">
// SERVER-COUNT-2: tile.vector "copy" {{.*}} {rows = 64 : i64, cols = 256 : i64} : memref<576x812xbf16, "spad">, memref<64x899xbf16, "spad">
// SERVER-COUNT-2: tile.vector "copy" {{.*}} {rows = 64 : i64, cols = 128 : i64} : memref<576x812xbf16, "spad">, memref<64x899xbf16, "spad">
// SERVER-COUNT-2: tile.vector "copy" {{.*}} {rows = 64 : i64, cols = 300 : i64} : memref<576x812xbf16, "spad">, memref<64x899xbf16, "spad">
// SERVER:      tile.matmul {{.*}} {m = 64 : i64, k = 64 : i64, n = 128 : i64} : memref<64x576xbf16, "spad">, memref<576x812xbf16, "spad">, memref<64x812xf32, "acc">
// SERVER-COUNT-4: tile.vector "copy" {{.*}} {rows = 64 : i64, cols = 128 : i64}
// SERVER:      scf.for
// SERVER:        tile.matmul {{.*}} {m = 64 : i64, k = 64 : i64, n = 128 : i64}
// SERVER-COUNT-4: tile.vector "copy" {{.*}} {rows = 64 : i64, cols = 256 : i64}
// SERVER:      tile.matmul {{.*}} {m = 64 : i64, k = 64 : i64, n = 128 : i64}
// SERVER-COUNT-4: tile.vector "copy" {{.*}} {rows = 64 : i64, cols = 128 : i64}
// SERVER:      scf.for
// SERVER:        tile.matmul {{.*}} {m = 64 : i64, k = 64 : i64, n = 128 : i64}
// SERVER:      tile.matmul {{.*}} {m = 64 : i64, k = 64 : i64, n = 44 : i64}
// SERVER-COUNT-4: tile.vector "copy" {{.*}} {rows = 64 : i64, cols = 300 : i64}
// SERVER:      tile.matmul {{.*}} {m = 64 : i64, k = 128 : i64, n = 128 : i64, accumulate = true}
// SERVER:      tile.vector "add" {{.*}} {rows = 64 : i64, cols = 812 : i64, bmode = "tile"}
// SERVER:      tile.dma {{.*}} {tile.roofline = {macs = 28901376 : i64, {{.*}}class = "conv2d"}, shape = array<i64: 64, 28, 28>}

// DEBUG: [graph-to-tile] kernel0: conv2d O=64 P=28x28 C=64 taps=3x3 batch=1 tiles channels TO=64 TOH=1 TC=64 outer=o
