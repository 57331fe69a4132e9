// RUN: infer-opt %s -p 'graph-to-tile{target=edge overrides="kernel0=64x128x16"}' | filecheck %s --check-prefix=EDGE
// RUN: infer-opt %s -p 'graph-to-tile{target=server}' | filecheck %s --check-prefix=SERVER
// RUN: infer-opt %s -p 'graph-to-tile{target=edge precision=bf16}' | filecheck %s --check-prefix=BF16
// RUN: infer-opt %s -p 'graph-to-tile{target=edge overrides="kernel0=32x64x32"}' | filecheck %s --check-prefix=OVR
// RUN: infer-opt %s -p 'graph-to-tile{target=edge debug-tiling=true}' -o /dev/null 2>&1 | filecheck %s --check-prefix=DEBUG

// linear + bias + relu: one GEMM kernel with the bias and relu as its epilogue.
// Edge (16x16 array, 256 KiB spad, 64 KiB acc) and server (128x128, 16 MiB,
// 4 MiB) choose different tiles; loops stay scf.for.
// EDGE pins 64x128x16 (an override) to check that lowering; the cost model's own edge choice
// is the DEBUG line (128x64x16, the same simulated cycles within 0.2 %).

func.func @main(%x: tensor<256x512xf32> {graph.name = "x"}) -> (tensor<256x384xf32> {graph.name = "y"}) {
  %w = graph.constant dense<0.5> : tensor<384x512xf32>
  %b = graph.constant dense<0.25> : tensor<384xf32>
  %y = graph.linear %x, %w, %b : (tensor<256x512xf32>, tensor<384x512xf32>, tensor<384xf32>) -> tensor<256x384xf32>
  %r = graph.relu %y : (tensor<256x384xf32>) -> tensor<256x384xf32>
  func.return %r : tensor<256x384xf32>
}

// EDGE:      builtin.module attributes {tile.target = "edge", graph.weights = "{{.*}}.weights.safetensors"} {
// EDGE-NEXT:   func.func @main(%0: memref<256x512xf32, "dram"> {graph.name = "x"}, %1: memref<256x384xf32, "dram"> {graph.name = "y", tile.output}) {
// EDGE-DAG:      tile.weight @kernel0.weight.packed_hi : memref<1536x128xbf16, "dram">
// EDGE-DAG:      tile.weight @kernel0.weight.packed_lo : memref<1536x128xbf16, "dram">
// EDGE-DAG:      tile.alloc {buffers = 2 : i64} : memref<64x16xf32, "spad">
// EDGE-DAG:      tile.alloc {buffers = 2 : i64} : memref<64x128xf32, "acc">
// EDGE:          scf.for
// EDGE-NEXT:       scf.for
// EDGE:              tile.fill {{.*}} {rows = 64 : i64, cols = 128 : i64, value = 0.000000e+00 : f32}
// EDGE-NEXT:         scf.for
// EDGE-NEXT:           tile.dma %0[{{.*}}] {shape = array<i64: 64, 16>}
// EDGE-NEXT:           tile.vector "copy" {{.*}} : memref<64x16xbf16, "spad">, memref<64x16xf32, "spad">
// EDGE-NEXT:           tile.vector "sub" {{.*}} : memref<64x16xbf16, "spad">, memref<64x16xf32, "spad">, memref<64x16xbf16, "spad">
// EDGE:                tile.dma {{.*}} {shape = array<i64: 16, 128>}
// EDGE-NEXT:           tile.dma {{.*}} {shape = array<i64: 16, 128>}
// EDGE-NEXT:           scf.for
// EDGE-NEXT:             tile.matmul {{.*}} {m = 64 : i64, k = 16 : i64, n = 16 : i64, accumulate = true}
// EDGE-NEXT:             tile.matmul
// EDGE-NEXT:             tile.matmul
// EDGE-NEXT:           }
// EDGE-NEXT:         }
// EDGE-NEXT:         tile.dma {{.*}} {shape = array<i64: 1, 128>}
// EDGE-NEXT:         tile.vector "add" {{.*}} bmode = "row"
// EDGE-NEXT:         tile.vector "relu"
// EDGE-NEXT:         tile.dma {{.*}}, %1[{{.*}}] {shape = array<i64: 64, 128>}
// EDGE-NEXT:       }
// EDGE-NEXT:     }
// EDGE-NEXT:     func.return

// SERVER:      tile.weight @kernel0.weight.packed_hi : memref<512x384xbf16, "dram">
// SERVER-DAG:  tile.alloc {buffers = 2 : i64} : memref<256x128xf32, "spad">
// SERVER-DAG:  tile.alloc : memref<256x384xf32, "acc">
// SERVER:      tile.fill {{.*}} {rows = 256 : i64, cols = 384 : i64
// SERVER-NEXT: scf.for
// SERVER-NEXT:   tile.dma %0[{{.*}}] {shape = array<i64: 256, 128>}
// SERVER:        scf.for
// SERVER-NEXT:     tile.matmul {{.*}} {m = 256 : i64, k = 128 : i64, n = 128 : i64, accumulate = true}

// bf16: one bf16 copy of each operand, one matmul per array tile. The cost model keeps the
// nest within edge's 4 hardware loops (m, n, k, array columns): TK = 16.
// BF16-NOT:    packed_lo
// BF16:        tile.vector "copy"
// BF16-NOT:    tile.vector "sub"
// BF16:        tile.dma {{.*}} {shape = array<i64: 16, 128>}
// BF16-NEXT:   scf.for
// BF16-NEXT:     tile.matmul {{.*}} {m = 64 : i64, k = 16 : i64, n = 16 : i64, accumulate = true}
// BF16-NEXT:   }

// OVR:  tile.alloc {buffers = 2 : i64} : memref<32x32xf32, "spad">
// OVR:  tile.alloc {buffers = 2 : i64} : memref<32x64xf32, "acc">

// DEBUG:      [graph-to-tile] kernel0: linear M=256 N=384 K=512 tiles TMxTNxTK = 128x64x16: est {{[0-9]+}} cycles (compute {{[0-9]+}}, memory {{[0-9]+}}, vector {{[0-9]+}}) -> compute-bound; spad {{[0-9]+}} B, acc {{[0-9]+}} B
// DEBUG-NEXT: [graph-to-tile] kernel0:   why: fewest cycles of {{[0-9]+}} fitting candidates ({{[0-9]+}} over capacity); next best
