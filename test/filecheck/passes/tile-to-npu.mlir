// RUN: infer-opt %s -p tile-plan-memory,tile-to-npu -t npu-asm | filecheck %s
// RUN: infer-opt %s -p tile-plan-memory,tile-to-npu | filecheck %s --check-prefix=LAYOUT
// RUN: infer-opt %s -p tile-plan-memory,tile-to-npu -t npu-bin | filecheck %s --check-prefix=BIN

// A double-buffered k-loop matmul with a relu epilogue: y = relu(x @ w), x 32x64 bf16,
// w 64x16 bf16, k chunks of 16 DMAed into a double-buffered scratchpad tile (the loop body
// is emitted once per half), a "free" semaphore per
// half pre-loaded before its first use, RAW/WAR pairs between the DMA, matrix and vector engines.

builtin.module attributes {tile.target = "edge"} {
  func.func @main(%x: memref<32x128xbf16, "dram"> {graph.name = "x"}, %w: memref<128x16xbf16, "dram"> {graph.name = "w"}, %y: memref<32x16xf32, "dram"> {graph.name = "y", tile.output}) {
    %c0 = arith.constant 0 : index
    %c16 = arith.constant 16 : index
    %c128 = arith.constant 128 : index
    %lx = tile.alloc : memref<32x128xbf16, "spad">
    %acc = tile.alloc : memref<32x16xf32, "acc">
    %o = tile.alloc : memref<32x16xf32, "spad">
    tile.dma %x[%c0, %c0], %lx[%c0, %c0] {shape = array<i64: 32, 128>} : memref<32x128xbf16, "dram">, memref<32x128xbf16, "spad">
    tile.fill %acc[%c0, %c0] {rows = 32 : i64, cols = 16 : i64, value = 0.0 : f32} : memref<32x16xf32, "acc">
    scf.for %k = %c0 to %c128 step %c16 {
      %lw = tile.alloc {buffers = 2 : i64} : memref<16x16xbf16, "spad">
      tile.dma %w[%k, %c0], %lw[%c0, %c0] {shape = array<i64: 16, 16>} : memref<128x16xbf16, "dram">, memref<16x16xbf16, "spad">
      tile.matmul %lx[%c0, %k], %lw[%c0, %c0], %acc[%c0, %c0] {m = 32 : i64, k = 16 : i64, n = 16 : i64, accumulate = true} : memref<32x128xbf16, "spad">, memref<16x16xbf16, "spad">, memref<32x16xf32, "acc">
    }
    tile.vector "relu" %o[%c0, %c0], %acc[%c0, %c0] {rows = 32 : i64, cols = 16 : i64} : memref<32x16xf32, "spad">, memref<32x16xf32, "acc">
    tile.dma %o[%c0, %c0], %y[%c0, %c0] {shape = array<i64: 32, 16>} : memref<32x16xf32, "spad">, memref<32x16xf32, "dram">
    func.return
  }
}



// Software pipelining: the w chunk of iteration t+1 is DMAed before iteration t's matmul
// (prologue: chunk 0; loop: chunks 2j+1, 2j+2; epilogue: chunk 7); each load signals the
// loop's "full" semaphore, the loadw that first reads its half waits for it.
// Semaphores are allocated by live range: each "free" semaphore gets its idle token from a
// `nop signal` just before the first top-level item using it.
// CHECK:      dma.load dram=r0+0x0, local=r0+0x0, n0=8192, n1=1, n2=1, {{.*}} signal=[[LX:s[0-9]+]]
// CHECK-NEXT: vec.mul dst=r0+0x2000000, {{.*}} dt=fp32, at=int8, bt=int8, bmode=imm, imm=0.0, signal=[[VM:s[0-9]+]]
// CHECK-NEXT: nop signal=[[FREE0:s[0-9]+]]
// CHECK-NEXT: dma.load dram=r0+0x2000, local=r0+0x2000, n0=512, {{.*}} wait=[[FREE0]], signal=[[FULL:s[0-9]+]]
// CHECK-NEXT: nop signal=[[FREE1:s[0-9]+]]
// CHECK-NEXT: nop wait=[[VM]]
// CHECK-NEXT: nop wait=[[LX]]
// CHECK-NEXT: loop count=r0+3, body=8
// CHECK-NEXT:   dma.load dram=[[RW:r[0-9]+]]+0x2200, local=r0+0x2200, n0=512, {{.*}} wait=[[FREE1]], signal=[[FULL]]
// CHECK-NEXT:   mx.loadw w=r0+0x2000, k=16, n=16, stride=32, dtype=bf16, wait=[[FULL]], signal=[[FREE0]]
// CHECK-NEXT:   mx.matmul act=[[RA:r[0-9]+]]+0x0, acc=r0+0x2000000, m=32, astride=256, cstride=64, dtype=bf16, accum=1
// CHECK-NEXT:   dma.load dram=[[RW]]+0x2400, local=r0+0x2000, {{.*}} wait=[[FREE0]], signal=[[FULL]]
// CHECK-NEXT:   mx.loadw w=r0+0x2200, {{.*}} wait=[[FULL]], signal=[[FREE1]]
// CHECK-NEXT:   mx.matmul act=[[RA]]+0x20, {{.*}} accum=1
// CHECK-NEXT:   addi rd=[[RW]], rs=[[RW]], imm=1024
// CHECK-NEXT:   addi rd=[[RA]], rs=[[RA]], imm=64
// CHECK-NEXT: addi rd=[[RW]], rs=[[RW]], imm=-3072
// CHECK-NEXT: addi rd=[[RA]], rs=[[RA]], imm=-192
// CHECK-NEXT: dma.load dram=r0+0x2e00, local=r0+0x2200, {{.*}} wait=[[FREE1]], signal=[[FULL]]
// CHECK-NEXT: mx.loadw w=r0+0x2000, {{.*}} wait=[[FULL]], signal=[[FREE0]]
// CHECK-NEXT: mx.matmul act=r0+0xc0,
// CHECK-NEXT: mx.loadw w=r0+0x2200, {{.*}} wait=[[FULL]], signal=[[FREE1]]
// CHECK-NEXT: mx.matmul act=r0+0xe0, {{.*}} signal=[[MV:s[0-9]+]]
// CHECK-NEXT: vec.relu dst=r0+0x0, a=r0+0x2000000, rows=32, cols=16, {{.*}} wait=[[MV]], signal=[[VS:s[0-9]+]]
// CHECK-NEXT: dma.store dram=r0+0x3000, local=r0+0x0, n0=2048, n1=1, n2=1, {{.*}} wait=[[VS]]
// CHECK-NEXT: halt

// LAYOUT:      npu.layout = {version = 1 : i64, target = "edge", entry = "main", alignment = 64 : i64, dram_bytes = 14336 : i64,
// LAYOUT-SAME: args = [{index = 0 : i64, name = "x", output = false, offset = 0 : i64, bytes = 8192 : i64, shape = array<i64: 32, 128>, dtype = "bf16"},
// LAYOUT-SAME: {index = 2 : i64, name = "y", output = true, offset = 12288 : i64, bytes = 2048 : i64, shape = array<i64: 32, 16>, dtype = "f32"}],
// LAYOUT:      npu.ops = [{name = "kernel0", kind = "matmul", start = 0 : i64, end = 28 : i64,
// LAYOUT-SAME: values = [{output = 0 : i64, offset = 12288 : i64, shape = array<i64: 32, 16>, dtype = "f32"}]}]
// LAYOUT:      npu.program {
// LAYOUT:        npu.halt
// BIN: {{^[0-9a-f]{64}$}}
