// RUN: infer-opt %s --split-input-file --verify-diagnostics

// Verifier messages of tile.gather_rows, one split-input-file chunk per case.

// float indices
builtin.module attributes {tile.target = "edge"} {
  func.func @f(%t: memref<10x8xf32, "dram">, %i: memref<4xf32, "dram">, %o: memref<4x8xf32, "dram">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{the indices must be i32 or i64, got f32}}
    tile.gather_rows %t[%c0], %i[%c0], %o[%c0, %c0] {rows = 4 : i64, cols = 8 : i64} : memref<10x8xf32, "dram">, memref<4xf32, "dram">, memref<4x8xf32, "dram">
    func.return
  }
}

// -----

// table in the accumulator
builtin.module attributes {tile.target = "edge"} {
  func.func @f(%t: memref<10x8xf32, "acc">, %i: memref<4xi32, "dram">, %o: memref<4x8xf32, "spad">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{the table must be in dram or spad, got a acc memref}}
    tile.gather_rows %t[%c0], %i[%c0], %o[%c0, %c0] {rows = 4 : i64, cols = 8 : i64} : memref<10x8xf32, "acc">, memref<4xi32, "dram">, memref<4x8xf32, "spad">
    func.return
  }
}

// -----

// a scratchpad table gathered into DRAM
builtin.module attributes {tile.target = "edge"} {
  func.func @f(%t: memref<10x8xf32, "spad">, %i: memref<4xi32, "dram">, %o: memref<4x8xf32, "dram">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{a scratchpad table needs a local dst (its rows are vector copies)}}
    tile.gather_rows %t[%c0], %i[%c0], %o[%c0, %c0] {rows = 4 : i64, cols = 8 : i64} : memref<10x8xf32, "spad">, memref<4xi32, "dram">, memref<4x8xf32, "dram">
    func.return
  }
}

// -----

// more rows than indices
builtin.module attributes {tile.target = "edge"} {
  func.func @f(%t: memref<10x8xf32, "dram">, %i: memref<4xi32, "dram">, %o: memref<8x8xf32, "spad">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{rows = 5 must be in 1..4 (the number of indices)}}
    tile.gather_rows %t[%c0], %i[%c0], %o[%c0, %c0] {rows = 5 : i64, cols = 8 : i64} : memref<10x8xf32, "dram">, memref<4xi32, "dram">, memref<8x8xf32, "spad">
    func.return
  }
}

// -----

// element types differ
builtin.module attributes {tile.target = "edge"} {
  func.func @f(%t: memref<10x8xf32, "dram">, %i: memref<4xi32, "dram">, %o: memref<4x8xbf16, "spad">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{dst and table element types differ (bf16 vs f32)}}
    tile.gather_rows %t[%c0], %i[%c0], %o[%c0, %c0] {rows = 4 : i64, cols = 8 : i64} : memref<10x8xf32, "dram">, memref<4xi32, "dram">, memref<4x8xbf16, "spad">
    func.return
  }
}

// -----

// cols wider than the table
builtin.module attributes {tile.target = "edge"} {
  func.func @f(%t: memref<10x8xf32, "dram">, %i: memref<4xi32, "dram">, %o: memref<4x16xf32, "spad">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{cols = 16 must be in 1..8 (the table's columns)}}
    tile.gather_rows %t[%c0], %i[%c0], %o[%c0, %c0] {rows = 4 : i64, cols = 16 : i64} : memref<10x8xf32, "dram">, memref<4xi32, "dram">, memref<4x16xf32, "spad">
    func.return
  }
}
