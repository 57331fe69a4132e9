// RUN: infer-opt %s -p tile-plan-memory,tile-to-npu -t npu-asm | filecheck %s

// Deferred epilogue in a loop that loads nothing ahead (rotation._plan_pipelining,
// docs/codegen.md "Deferred epilogue"): the weights are loaded whole before the loop, and the
// residual tile is read by the epilogue alone, so it goes with the epilogue instead of an
// iteration ahead (it would overwrite the half the epilogue before still reads). The epilogue
// (16 column relus, more than the vector queue's 8, the residual's load, its add, the store)
// is issued one iteration behind, after the next tile's matmul.

builtin.module attributes {tile.target = "edge"} {
  func.func @main(%x: memref<16x16xbf16, "dram"> {graph.name = "x"}, %w: memref<16x64xbf16, "dram"> {graph.name = "w"}, %r: memref<16x64xf32, "dram"> {graph.name = "r"}, %y: memref<16x64xf32, "dram"> {graph.name = "y", tile.output}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c16 = arith.constant 16 : index
    %c64 = arith.constant 64 : index
    %lx = tile.alloc : memref<16x16xbf16, "spad">
    %lw = tile.alloc : memref<16x64xbf16, "spad">
    tile.dma %x[%c0, %c0], %lx[%c0, %c0] {shape = array<i64: 16, 16>} : memref<16x16xbf16, "dram">, memref<16x16xbf16, "spad">
    tile.dma %w[%c0, %c0], %lw[%c0, %c0] {shape = array<i64: 16, 64>} : memref<16x64xbf16, "dram">, memref<16x64xbf16, "spad">
    scf.for %j = %c0 to %c64 step %c16 {
      %acc = tile.alloc {buffers = 2 : i64} : memref<16x16xf32, "acc">
      %t = tile.alloc {buffers = 2 : i64} : memref<16x16xf32, "spad">
      %lr = tile.alloc {buffers = 2 : i64} : memref<16x16xf32, "spad">
      %o = tile.alloc {buffers = 2 : i64} : memref<16x16xf32, "spad">
      tile.matmul %lx[%c0, %c0], %lw[%c0, %j], %acc[%c0, %c0] {m = 16 : i64, k = 16 : i64, n = 16 : i64} : memref<16x16xbf16, "spad">, memref<16x64xbf16, "spad">, memref<16x16xf32, "acc">
      scf.for %c = %c0 to %c16 step %c1 {
        tile.vector "relu" %t[%c0, %c], %acc[%c0, %c] {rows = 16 : i64, cols = 1 : i64} : memref<16x16xf32, "spad">, memref<16x16xf32, "acc">
      }
      tile.dma %r[%c0, %j], %lr[%c0, %c0] {shape = array<i64: 16, 16>} : memref<16x64xf32, "dram">, memref<16x16xf32, "spad">
      tile.vector "add" %o[%c0, %c0], %t[%c0, %c0], %lr[%c0, %c0] {rows = 16 : i64, cols = 16 : i64, bmode = "tile"} : memref<16x16xf32, "spad">, memref<16x16xf32, "spad">, memref<16x16xf32, "spad">
      tile.dma %o[%c0, %c0], %y[%c0, %j] {shape = array<i64: 16, 16>} : memref<16x16xf32, "spad">, memref<16x64xf32, "dram">
    }
    func.return
  }
}

// Prologue: the input and the whole weights, then iteration 0's matmul (accumulator half 0),
// which signals "computed"; no load of a residual tile ahead of it.
// CHECK:      dma.load dram=r0+0x0, local=r0+0x2000,
// CHECK-NEXT: dma.load dram=r0+0x200, local=r0+0x0,
// CHECK:      mx.matmul act=r0+0x2000, acc=r0+0x2000000, {{.*}} accum=0, {{.*}} signal=[[COMPUTED:s[0-9]+]]
// CHECK-NOT:  dma.load
// CHECK-NOT:  vec.relu
// Loop (iterations 1 and 2 per trip): the matmul of t, then the epilogue of t-1 with its
// residual tile's load.
// CHECK:      loop count=r0+1, body=24
// CHECK-NEXT:   mx.loadw w=r1+0x20,
// CHECK-NEXT:   mx.matmul act=r0+0x2000, acc=r0+0x2000400, {{.*}} signal=[[COMPUTED]]
// CHECK-NEXT:   vec.relu dst=r0+0x800, a=r0+0x2000000, {{.*}} wait=[[COMPUTED]]
// CHECK:        dma.load dram=r3+0xa00, local=r0+0x1000,
// CHECK-NEXT:   vec.add dst=r0+0x1800, a=r0+0x800, b=r0+0x1000,
// CHECK-NEXT:   dma.store dram=r3+0x1a00, local=r0+0x1800,
// CHECK-NEXT:   mx.loadw w=r1+0x40,
// CHECK-NEXT:   mx.matmul act=r0+0x2000, acc=r0+0x2000000, {{.*}} signal=[[COMPUTED]]
// CHECK-NEXT:   vec.relu dst=r0+0xc00, a=r0+0x2000400, {{.*}} wait=[[COMPUTED]]
// CHECK:        dma.load dram=r3+0xa40, local=r0+0x1400,
// CHECK:        dma.store dram=r3+0x1a40, local=r0+0x1c00,
// Tail: the matmul of iteration 3, then the epilogues of iterations 2 and 3.
// CHECK:      mx.matmul act=r0+0x2000, acc=r0+0x2000400, {{.*}} signal=[[COMPUTED]]
// CHECK-NEXT: vec.relu dst=r0+0x800, a=r0+0x2000000, {{.*}} wait=[[COMPUTED]]
// CHECK:      dma.load dram=r0+0xa80, local=r0+0x1000,
// CHECK:      dma.store dram=r0+0x1a80, local=r0+0x1800,
// CHECK-NEXT: vec.relu dst=r0+0xc00, a=r0+0x2000400, {{.*}} wait=[[COMPUTED]]
// CHECK:      dma.load dram=r0+0xac0, local=r0+0x1400,
// CHECK:      dma.store dram=r0+0x1ac0, local=r0+0x1c00,
// CHECK-NEXT: halt
