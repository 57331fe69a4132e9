// RUN: infer-opt %s -p tile-plan-memory,tile-to-npu -t npu-asm | filecheck %s
// RUN: infer-opt %s -p tile-plan-memory,tile-to-npu --verify-each-numerically -o /dev/null

// A first-iteration guard (`scf.if %i != %lower`, graph-to-tile's Emitter.after_first): each
// iteration stores the rows the iteration before loaded. The loop peels its first iteration,
// which has no store; every copy in the hardware loop (and the peeled last one) stores. The
// tile interpreter runs the scf.if as written: the same y (= x) as the simulator.

builtin.module attributes {tile.target = "edge"} {
  func.func @main(%x: memref<64x16xf32, "dram">, %y: memref<64x16xf32, "dram"> {tile.output}) {
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c60 = arith.constant 60 : index
    %c64 = arith.constant 64 : index
    %t = tile.alloc : memref<4x16xf32, "spad">
    scf.for %i = %c0 to %c64 step %c4 {
      %later = arith.cmpi ne, %i, %c0 : index
      scf.if %later {
        %prev = arith.subi %i, %c4 : index
        tile.dma %t[%c0, %c0], %y[%prev, %c0] {shape = array<i64: 4, 16>} : memref<4x16xf32, "spad">, memref<64x16xf32, "dram">
      }
      tile.dma %x[%i, %c0], %t[%c0, %c0] {shape = array<i64: 4, 16>} : memref<64x16xf32, "dram">, memref<4x16xf32, "spad">
    }
    tile.dma %t[%c0, %c0], %y[%c60, %c0] {shape = array<i64: 4, 16>} : memref<4x16xf32, "spad">, memref<64x16xf32, "dram">
    func.return
  }
}

// the first iteration: its load only
// CHECK:      dma.load dram=r0+0x0, local=r0+0x0
// CHECK-NOT:  dma.store
// CHECK:      loop count=r0+14
// CHECK-NEXT:   dma.store dram=r1+0x1000, local=r0+0x0
// CHECK-NEXT:   dma.load dram=r1+0x100, local=r0+0x0
// the last iteration (peeled), then the store after the loop
// CHECK:      dma.store dram=r0+0x1e00, local=r0+0x0
// CHECK-NEXT: dma.load dram=r0+0xf00, local=r0+0x0
// CHECK-NEXT: dma.store dram=r0+0x1f00, local=r0+0x0
// CHECK-NEXT: halt
