// RUN: infer-opt %s | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | infer-opt | filecheck %s

// tile.gather_rows (embedding lookup with runtime indices): i32 and i64 indices,
// local and DRAM destinations, a column origin in the table, a scratchpad table;
// roundtripped through the custom and the generic format.

builtin.module attributes {tile.target = "edge"} {
  func.func @gather(%table: memref<100x64xf32, "dram">, %ids: memref<12xi32, "dram">, %ids64: memref<5xi64, "dram">, %out: memref<12x64xf32, "dram"> {tile.output}) {
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %s = tile.alloc {buffers = 2 : i64} : memref<8x32xf32, "spad">
    tile.gather_rows %table[%c4], %ids[%c4], %s[%c0, %c0] {rows = 8 : i64, cols = 32 : i64} : memref<100x64xf32, "dram">, memref<12xi32, "dram">, memref<8x32xf32, "spad">
    tile.gather_rows %table[%c0], %ids64[%c0], %out[%c0, %c0] {rows = 5 : i64, cols = 64 : i64} : memref<100x64xf32, "dram">, memref<5xi64, "dram">, memref<12x64xf32, "dram">
    %local = tile.alloc : memref<100x64xf32, "spad">
    tile.gather_rows %local[%c0], %ids[%c0], %s[%c0, %c0] {rows = 8 : i64, cols = 32 : i64} : memref<100x64xf32, "spad">, memref<12xi32, "dram">, memref<8x32xf32, "spad">
    func.return
  }
}

// CHECK:      %s = tile.alloc {buffers = 2 : i64} : memref<8x32xf32, "spad">
// CHECK-NEXT: tile.gather_rows %table[%c4], %ids[%c4], %s[%c0, %c0] {rows = 8 : i64, cols = 32 : i64} : memref<100x64xf32, "dram">, memref<12xi32, "dram">, memref<8x32xf32, "spad">
// CHECK-NEXT: tile.gather_rows %table[%c0], %ids64[%c0], %out[%c0, %c0] {rows = 5 : i64, cols = 64 : i64} : memref<100x64xf32, "dram">, memref<5xi64, "dram">, memref<12x64xf32, "dram">
// CHECK-NEXT: %local = tile.alloc : memref<100x64xf32, "spad">
// CHECK-NEXT: tile.gather_rows %local[%c0], %ids[%c0], %s[%c0, %c0] {rows = 8 : i64, cols = 32 : i64} : memref<100x64xf32, "spad">, memref<12xi32, "dram">, memref<8x32xf32, "spad">
