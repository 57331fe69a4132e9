// RUN: infer-opt %s -p 'graph-to-tile{target=server precision=bf16}' | filecheck %s
// RUN: infer-opt %s -p 'graph-to-tile{target=server precision=bf16 debug-tiling=true}' -o /dev/null 2>&1 | filecheck %s --check-prefix=DEBUG
// RUN: infer-opt %s -p 'graph-to-tile{target=edge precision=bf16}' | filecheck %s --check-prefix=EDGE

// A depthwise 3x3 conv (one input and one output channel per group; MobileNet's 960 channels
// at 7x7) + bias + relu on server: the cost model ranks the vector unit faster than the matrix
// unit's merged groups (depthwise.py). The input rows are DMA'd once per tile into the window
// (the border filled with 0; neighbouring rows share one border column, so each op covers the
// 7 output rows as 7 x 8 = 56 columns). The first tap's `mul` of its shifted window by the tap's weight
// of each channel (bmode col, from the [C, 9] weight table) starts the result; every other tap
// is such a `mul` and an `add` into the result, in loops (the rest of the first kernel row,
// then the 2 x 3 taps after it; the tap's index affine in the loop variables);
// then the bias (bmode col), the relu and the store of the valid columns. No matmul. On edge
// too, in tiles of 32 channels: a loop over the channel tiles whose buffers rotate on it
// (buffers = 2), so each tile's window loads while the tile before computes.

func.func @main(%x: tensor<1x960x7x7xf32>) -> tensor<1x960x7x7xf32> {
  %w = graph.constant dense<0.125> : tensor<960x1x3x3xf32>
  %b = graph.constant dense<0.5> : tensor<960xf32>
  %y = graph.conv2d %x, %w, %b {padding = array<i64: 1, 1, 1, 1>, groups = 960 : i64} : (tensor<1x960x7x7xf32>, tensor<960x1x3x3xf32>, tensor<960xf32>) -> tensor<1x960x7x7xf32>
  %r = graph.relu %y : (tensor<1x960x7x7xf32>) -> tensor<1x960x7x7xf32>
  func.return %r : tensor<1x960x7x7xf32>
}

// CHECK:     tile.weight @kernel0.taps : memref<960x9xf32, "dram">
// CHECK-NOT: tile.matmul
// CHECK:     tile.dma {{.*}} {shape = array<i64: 960, 9>}
// CHECK-NOT: tile.fill {{.*}} {rows = 960 : i64, cols = 56 : i64
// CHECK:     tile.vector "mul" {{.*}} {rows = 960 : i64, cols = 56 : i64, bmode = "col"}
// CHECK-NEXT: scf.for
// CHECK-NEXT:   tile.vector "mul" {{.*}} {rows = 960 : i64, cols = 56 : i64, bmode = "col"}
// CHECK-NEXT:   tile.vector "add" {{.*}} {rows = 960 : i64, cols = 56 : i64, bmode = "tile"}
// CHECK:     scf.for
// CHECK-NEXT:  scf.for
// CHECK:         tile.vector "mul" {{.*}} {rows = 960 : i64, cols = 56 : i64, bmode = "col"}
// CHECK-NEXT:    tile.vector "add" {{.*}} {rows = 960 : i64, cols = 56 : i64, bmode = "tile"}
// CHECK:     tile.vector "add" {{.*}} {rows = 960 : i64, cols = 56 : i64, bmode = "col"}
// CHECK:     tile.vector "relu"
// CHECK-NOT: tile.matmul
// CHECK:     func.return

// DEBUG: [graph-to-tile] kernel0: depthwise conv2d C=960 P=7x7 taps=3x3 batch=1 on the vector unit: channels x output rows per tile = 960x7: est {{[0-9]+}} cycles (matrix unit: {{[0-9]+}})

// EDGE:      tile.weight @kernel0.taps : memref<960x9xf32, "dram">
// EDGE:      tile.alloc {buffers = 2 : i64} : memref<32x80xf32, "spad">
// EDGE-NOT:  tile.matmul
// EDGE:      scf.for
// EDGE:        tile.dma {{.*}} {shape = array<i64: 32, 7, 7>}
// EDGE:        tile.vector "mul" {{.*}} {rows = 32 : i64, cols = 56 : i64, bmode = "col"}
// EDGE-NOT:  tile.matmul
// EDGE:      func.return
