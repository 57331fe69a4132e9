// RUN: infer-opt %s -p tile-plan-memory | filecheck %s
// RUN: infer-opt %s -p tile-plan-memory | infer-opt -p tile-plan-memory | filecheck %s
// RUN: infer-opt %s -p 'tile-plan-memory{print-plan=true}' -o /dev/null 2>&1 | filecheck %s --check-prefix=PLAN
// RUN: infer-opt %s -p 'tile-plan-memory{target=edge alignment=4096}' | filecheck %s --check-prefix=ALIGN
// RUN: not infer-opt %s -p 'tile-plan-memory{target=server}' 2>&1 | filecheck %s --check-prefix=CONFLICT

// tile-plan-memory gives every tile.alloc an offset and the module the sizes of
// its DRAM regions. Intermediates t1..t4 live (first touch .. last touch, whole
// loops): t1 [A, D] (the residual), t2 [B, C], t3 [C, D], t4 [D, E]. The peak is
// t1 + t2 + t3 = 32768 bytes during C and the arena reaches it: t4 reuses t2's
// bytes. Local buffers of one loop nest never share bytes, different nests do;
// buffers = 2 reserves two copies; offsets respect the element size.

builtin.module attributes {tile.target = "edge"} {
  func.func @main(%x: memref<64x64xbf16, "dram">, %out: memref<64x64xbf16, "dram">) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c16 = arith.constant 16 : index
    %c64 = arith.constant 64 : index
    %w1 = tile.weight @w1 : memref<64x64xbf16, "dram">
    %w2 = tile.weight @w2 : memref<3x3xbf16, "dram">
    %w1b = tile.weight @w1 : memref<64x64xbf16, "dram">
    %w3 = tile.weight @w3 : memref<16xi8, "dram">
    %t1 = tile.alloc : memref<64x64xbf16, "dram">
    %t2 = tile.alloc : memref<64x128xbf16, "dram">
    %t3 = tile.alloc : memref<64x64xbf16, "dram">
    %t4 = tile.alloc : memref<64x64xbf16, "dram">
    %t2v = tile.view %t2 : memref<64x128xbf16, "dram"> -> memref<128x64xbf16, "dram">
    // A: x -> t1
    scf.for %i = %c0 to %c64 step %c16 {
      %sa = tile.alloc {buffers = 2 : i64} : memref<16x64xbf16, "spad">
      tile.dma %x[%i, %c0], %sa[%c0, %c0] {shape = array<i64: 16, 64>} : memref<64x64xbf16, "dram">, memref<16x64xbf16, "spad">
      tile.dma %sa[%c0, %c0], %t1[%i, %c0] {shape = array<i64: 16, 64>} : memref<16x64xbf16, "spad">, memref<64x64xbf16, "dram">
    }
    // B: t1 -> t2 (written through the view)
    scf.for %i = %c0 to %c64 step %c16 {
      %sb = tile.alloc {buffers = 2 : i64} : memref<16x64xbf16, "spad">
      tile.dma %t1[%i, %c0], %sb[%c0, %c0] {shape = array<i64: 16, 64>} : memref<64x64xbf16, "dram">, memref<16x64xbf16, "spad">
      tile.dma %sb[%c0, %c0], %t2v[%i, %c0] {shape = array<i64: 16, 64>} : memref<16x64xbf16, "spad">, memref<128x64xbf16, "dram">
    }
    // C: t2 -> t3
    scf.for %i = %c0 to %c64 step %c16 {
      %sc = tile.alloc {buffers = 2 : i64} : memref<16x64xbf16, "spad">
      tile.dma %t2[%i, %c0], %sc[%c0, %c0] {shape = array<i64: 16, 64>} : memref<64x128xbf16, "dram">, memref<16x64xbf16, "spad">
      tile.dma %sc[%c0, %c0], %t3[%i, %c0] {shape = array<i64: 16, 64>} : memref<16x64xbf16, "spad">, memref<64x64xbf16, "dram">
    }
    // D: t4 = t3 + t1 (the residual t1 lives across B and C)
    scf.for %i = %c0 to %c64 step %c16 {
      %sd1 = tile.alloc {buffers = 2 : i64} : memref<16x64xbf16, "spad">
      %sd2 = tile.alloc {buffers = 2 : i64} : memref<16x64xbf16, "spad">
      tile.dma %t3[%i, %c0], %sd1[%c0, %c0] {shape = array<i64: 16, 64>} : memref<64x64xbf16, "dram">, memref<16x64xbf16, "spad">
      tile.dma %t1[%i, %c0], %sd2[%c0, %c0] {shape = array<i64: 16, 64>} : memref<64x64xbf16, "dram">, memref<16x64xbf16, "spad">
      tile.vector "add" %sd1[%c0, %c0], %sd1[%c0, %c0], %sd2[%c0, %c0] {rows = 16 : i64, cols = 64 : i64, bmode = "tile"} : memref<16x64xbf16, "spad">, memref<16x64xbf16, "spad">, memref<16x64xbf16, "spad">
      tile.dma %sd1[%c0, %c0], %t4[%i, %c0] {shape = array<i64: 16, 64>} : memref<16x64xbf16, "spad">, memref<64x64xbf16, "dram">
    }
    // E: t4 -> out, with element-size alignment in spad and acc
    scf.for %i = %c0 to %c64 step %c16 {
      %q = tile.alloc : memref<7x7xi8, "spad">
      %f = tile.alloc : memref<2x2xf32, "spad">
      %se = tile.alloc : memref<16x64xbf16, "spad">
      %a1 = tile.alloc : memref<3x5xf32, "acc">
      %a2 = tile.alloc {buffers = 2 : i64} : memref<16x16xf32, "acc">
      tile.fill %q[%c0, %c0] {rows = 7 : i64, cols = 7 : i64, value = 0.0 : f32} : memref<7x7xi8, "spad">
      tile.fill %f[%c0, %c0] {rows = 2 : i64, cols = 2 : i64, value = 0.0 : f32} : memref<2x2xf32, "spad">
      tile.fill %a1[%c0, %c0] {rows = 3 : i64, cols = 5 : i64, value = 0.0 : f32} : memref<3x5xf32, "acc">
      tile.fill %a2[%c0, %c0] {rows = 16 : i64, cols = 16 : i64, value = 0.0 : f32} : memref<16x16xf32, "acc">
      tile.dma %t4[%i, %c0], %se[%c0, %c0] {shape = array<i64: 16, 64>} : memref<64x64xbf16, "dram">, memref<16x64xbf16, "spad">
      tile.dma %se[%c0, %c0], %out[%i, %c0] {shape = array<i64: 16, 64>} : memref<16x64xbf16, "spad">, memref<64x64xbf16, "dram">
    }
    func.return
  }
}

// CHECK:      builtin.module attributes {tile.target = "edge", tile.arena_bytes = 32768 : i64, tile.weights_bytes = 8320 : i64, tile.spad_bytes = 8192 : i64, tile.acc_bytes = 2108 : i64} {
// Weights: first-use order, 64-byte (dram.burst_bytes) aligned; @w1 read twice shares its offset.
// CHECK:        %w1 = tile.weight @w1 {tile.offset = 0 : i64} : memref<64x64xbf16, "dram">
// CHECK-NEXT:   %w2 = tile.weight @w2 {tile.offset = 8192 : i64} : memref<3x3xbf16, "dram">
// CHECK-NEXT:   %w1b = tile.weight @w1 {tile.offset = 0 : i64} : memref<64x64xbf16, "dram">
// CHECK-NEXT:   %w3 = tile.weight @w3 {tile.offset = 8256 : i64} : memref<16xi8, "dram">
// The arena: t4 reuses t2 (dead after C); t1 and t3 are live with both.
// CHECK-NEXT:   %t1 = tile.alloc {offset = 16384 : i64} : memref<64x64xbf16, "dram">
// CHECK-NEXT:   %t2 = tile.alloc {offset = 0 : i64} : memref<64x128xbf16, "dram">
// CHECK-NEXT:   %t3 = tile.alloc {offset = 24576 : i64} : memref<64x64xbf16, "dram">
// CHECK-NEXT:   %t4 = tile.alloc {offset = 0 : i64} : memref<64x64xbf16, "dram">
// Loops A, B, C: one double-buffered 2048-byte tile each, all at 0 (different nests).
// CHECK:        %sa = tile.alloc {buffers = 2 : i64, offset = 0 : i64} : memref<16x64xbf16, "spad">
// CHECK:        %sb = tile.alloc {buffers = 2 : i64, offset = 0 : i64} : memref<16x64xbf16, "spad">
// CHECK:        %sc = tile.alloc {buffers = 2 : i64, offset = 0 : i64} : memref<16x64xbf16, "spad">
// Loop D: two double-buffered tiles, the second after both copies of the first.
// CHECK:        %sd1 = tile.alloc {buffers = 2 : i64, offset = 0 : i64} : memref<16x64xbf16, "spad">
// CHECK-NEXT:   %sd2 = tile.alloc {buffers = 2 : i64, offset = 4096 : i64} : memref<16x64xbf16, "spad">
// Loop E: 49 i8 bytes at 2048, the f32 tile after them at 2100 (a multiple of 4, not 2097);
// in the accumulator the 2 x 1024-byte tile first, then 60 bytes at 2048.
// CHECK:        %q = tile.alloc {offset = 2048 : i64} : memref<7x7xi8, "spad">
// CHECK-NEXT:   %f = tile.alloc {offset = 2100 : i64} : memref<2x2xf32, "spad">
// CHECK-NEXT:   %se = tile.alloc {offset = 0 : i64} : memref<16x64xbf16, "spad">
// CHECK-NEXT:   %a1 = tile.alloc {offset = 2048 : i64} : memref<3x5xf32, "acc">
// CHECK-NEXT:   %a2 = tile.alloc {buffers = 2 : i64, offset = 0 : i64} : memref<16x16xf32, "acc">

// PLAN:      tile-plan-memory:
// PLAN-NEXT:   func  buffer  space    offset  size   live      location
// PLAN-NEXT:         @w1     weights  0       8192   -         {{.*}}tile-plan-memory.mlir:21:5
// PLAN-NEXT:         @w2     weights  8192    18     -
// PLAN-NEXT:         @w3     weights  8256    16     -
// PLAN-NEXT:   main  %t1     dram     16384   8192   [14, 36]
// PLAN-NEXT:   main  %t2     dram     0       16384  [19, 28]
// PLAN-NEXT:   main  %t3     dram     24576   8192   [24, 36]
// PLAN-NEXT:   main  %t4     dram     0       8192   [29, 49]
// PLAN-NEXT:   main  %sa     spad     0       4096   [14, 18]
// PLAN:        main  %a2     acc      0       2048   [37, 49]
// PLAN-NEXT:   dram arena 32768 bytes, weights 8320 bytes, spad 8192/262144 bytes, acc 2108/65536 bytes

// alignment=4096: DRAM offsets and region sizes in 4 KiB steps, local ones too.
// ALIGN:      tile.arena_bytes = 32768 : i64, tile.weights_bytes = 16384 : i64, tile.spad_bytes = 8208 : i64
// ALIGN:      %w3 = tile.weight @w3 {tile.offset = 12288 : i64}
// ALIGN:      %q = tile.alloc {offset = 4096 : i64} : memref<7x7xi8, "spad">

// CONFLICT: tile-plan-memory.mlir:{{[0-9]+}}:{{[0-9]+}}: error: tile-plan-memory: target=server but the module is for tile.target = "edge"
