// RUN: infer-opt %s -p tile-plan-memory,tile-to-npu -t npu-asm | filecheck %s

// Deferred epilogue (rotation.deferrable_epilogue, docs/codegen.md): a software-pipelined loop
// over four output tiles whose epilogue (16 column relus, more than the vector queue's 8, then
// the store) is issued one iteration behind, after the next tile's matmul. Each tile's matmul
// signals the "computed" semaphore that the first relu of its epilogue takes; the accumulator
// halves alternate, so tile t+1's matmul does not wait for tile t's epilogue.

builtin.module attributes {tile.target = "edge"} {
  func.func @main(%x: memref<16x16xbf16, "dram"> {graph.name = "x"}, %w: memref<16x64xbf16, "dram"> {graph.name = "w"}, %y: memref<16x64xf32, "dram"> {graph.name = "y", tile.output}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c16 = arith.constant 16 : index
    %c64 = arith.constant 64 : index
    %lx = tile.alloc : memref<16x16xbf16, "spad">
    tile.dma %x[%c0, %c0], %lx[%c0, %c0] {shape = array<i64: 16, 16>} : memref<16x16xbf16, "dram">, memref<16x16xbf16, "spad">
    scf.for %j = %c0 to %c64 step %c16 {
      %lw = tile.alloc {buffers = 2 : i64} : memref<16x16xbf16, "spad">
      %acc = tile.alloc {buffers = 2 : i64} : memref<16x16xf32, "acc">
      %o = tile.alloc {buffers = 2 : i64} : memref<16x16xf32, "spad">
      tile.dma %w[%c0, %j], %lw[%c0, %c0] {shape = array<i64: 16, 16>} : memref<16x64xbf16, "dram">, memref<16x16xbf16, "spad">
      tile.matmul %lx[%c0, %c0], %lw[%c0, %c0], %acc[%c0, %c0] {m = 16 : i64, k = 16 : i64, n = 16 : i64} : memref<16x16xbf16, "spad">, memref<16x16xbf16, "spad">, memref<16x16xf32, "acc">
      scf.for %c = %c0 to %c16 step %c1 {
        tile.vector "relu" %o[%c0, %c], %acc[%c0, %c] {rows = 16 : i64, cols = 1 : i64} : memref<16x16xf32, "spad">, memref<16x16xf32, "acc">
      }
      tile.dma %o[%c0, %c0], %y[%c0, %j] {shape = array<i64: 16, 16>} : memref<16x16xf32, "spad">, memref<16x64xf32, "dram">
    }
    func.return
  }
}

// Prologue: the weight tiles of iterations 0 and 1, then iteration 0's matmul (accumulator
// half 0), which signals "computed".
// CHECK:      dma.load dram=r0+0x200, local=r0+0x800, {{.*}} signal=[[FULL:s[0-9]+]]
// CHECK:      dma.load dram=r0+0x220, local=r0+0xa00, {{.*}} signal=[[FULL]]
// CHECK-NEXT: mx.loadw w=r0+0x800, {{.*}} wait=[[FULL]]
// CHECK:      mx.matmul act=r0+0xc00, acc=r0+0x2000000, {{.*}} accum=0, {{.*}} signal=[[COMPUTED:s[0-9]+]]
// No relu before the loop: iteration 0's epilogue waits for iteration 1's matmul.
// CHECK-NOT:  vec.relu
// Loop (iterations 1 and 2 per trip): loads(t+1), the matmul of t, the epilogue of t-1.
// CHECK:      loop count=r0+1, body=22
// CHECK-NEXT:   dma.load dram=r1+0x240, local=r0+0x800, {{.*}} signal=[[FULL]]
// CHECK-NEXT:   mx.loadw w=r0+0xa00, {{.*}} wait=[[FULL]]
// CHECK-NEXT:   mx.matmul act=r0+0xc00, acc=r0+0x2000400, {{.*}} signal=[[COMPUTED]]
// CHECK-NEXT:   vec.relu dst=r0+0x0, a=r0+0x2000000, {{.*}} wait=[[COMPUTED]]
// CHECK:        dma.store dram=r3+0xa00, local=r0+0x0,
// CHECK-NEXT:   dma.load dram=r1+0x260, local=r0+0xa00, {{.*}} signal=[[FULL]]
// CHECK-NEXT:   mx.loadw w=r0+0x800, {{.*}} wait=[[FULL]]
// CHECK-NEXT:   mx.matmul act=r0+0xc00, acc=r0+0x2000000, {{.*}} signal=[[COMPUTED]]
// CHECK-NEXT:   vec.relu dst=r0+0x400, a=r0+0x2000400, {{.*}} wait=[[COMPUTED]]
// CHECK:        dma.store dram=r3+0xa40, local=r0+0x400,
// Tail: the matmul of iteration 3, then the epilogues of iterations 2 and 3.
// CHECK:      mx.matmul act=r0+0xc00, acc=r0+0x2000400, {{.*}} signal=[[COMPUTED]]
// CHECK-NEXT: vec.relu dst=r0+0x0, a=r0+0x2000000, {{.*}} wait=[[COMPUTED]]
// CHECK:      dma.store dram=r0+0xa80, local=r0+0x0,
// CHECK-NEXT: vec.relu dst=r0+0x400, a=r0+0x2000400, {{.*}} wait=[[COMPUTED]]
// CHECK:      dma.store dram=r0+0xac0, local=r0+0x400,
// CHECK-NEXT: halt
