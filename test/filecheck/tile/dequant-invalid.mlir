// RUN: infer-opt %s --split-input-file --verify-diagnostics

// Verifier messages of tile.dequant, one split-input-file chunk per case.

// a block of 32 rows cut in half
builtin.module attributes {tile.target = "edge"} {
  func.func @f(%w: memref<48x16xf32, "spad">, %q: memref<24x16xui8, "spad">, %s: memref<2x16xf16, "spad">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{rows = 48 must be a positive multiple of the 32-element block (blocks = col)}}
    tile.dequant %w[%c0, %c0], %q[%c0, %c0], %s[%c0, %c0] {rows = 48 : i64, cols = 16 : i64, format = "q4_0", blocks = "col"} : memref<48x16xf32, "spad">, memref<24x16xui8, "spad">, memref<2x16xf16, "spad">
    func.return
  }
}

// -----

// q8_0 codes are signed bytes
builtin.module attributes {tile.target = "edge"} {
  func.func @f(%w: memref<1x32xf32, "spad">, %q: memref<1x32xui8, "spad">, %s: memref<1x1xf16, "spad">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{codes of q8_0 must be i8, got ui8}}
    tile.dequant %w[%c0, %c0], %q[%c0, %c0], %s[%c0, %c0] {rows = 1 : i64, cols = 32 : i64, format = "q8_0", blocks = "row"} : memref<1x32xf32, "spad">, memref<1x32xui8, "spad">, memref<1x1xf16, "spad">
    func.return
  }
}

// -----

// q4_1 needs a (d, m) pair per block: two f16 columns for one block
builtin.module attributes {tile.target = "edge"} {
  func.func @f(%w: memref<1x32xbf16, "spad">, %q: memref<1x16xui8, "spad">, %s: memref<1x1xf16, "spad">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{scales: tile extent 2 in dim 1 must be in 1..1 (the buffer's size)}}
    tile.dequant %w[%c0, %c0], %q[%c0, %c0], %s[%c0, %c0] {rows = 1 : i64, cols = 32 : i64, format = "q4_1", blocks = "row"} : memref<1x32xbf16, "spad">, memref<1x16xui8, "spad">, memref<1x1xf16, "spad">
    func.return
  }
}

// -----

// an unknown format
builtin.module attributes {tile.target = "edge"} {
  func.func @f(%w: memref<1x32xf32, "spad">, %q: memref<1x16xui8, "spad">, %s: memref<1x1xf16, "spad">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{unknown block format 'q4_k' (supported: q4_0, q4_1, q8_0)}}
    tile.dequant %w[%c0, %c0], %q[%c0, %c0], %s[%c0, %c0] {rows = 1 : i64, cols = 32 : i64, format = "q4_k", blocks = "row"} : memref<1x32xf32, "spad">, memref<1x16xui8, "spad">, memref<1x1xf16, "spad">
    func.return
  }
}

// -----

// the weights in DRAM: expansion is on chip
builtin.module attributes {tile.target = "edge"} {
  func.func @f(%w: memref<1x32xf32, "dram">, %q: memref<1x16xui8, "spad">, %s: memref<1x1xf16, "spad">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{dst must be in spad or acc, got a dram memref}}
    tile.dequant %w[%c0, %c0], %q[%c0, %c0], %s[%c0, %c0] {rows = 1 : i64, cols = 32 : i64, format = "q4_0", blocks = "row"} : memref<1x32xf32, "dram">, memref<1x16xui8, "spad">, memref<1x1xf16, "spad">
    func.return
  }
}
