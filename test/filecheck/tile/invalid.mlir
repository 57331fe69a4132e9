// RUN: rm -rf %t && mkdir -p %t
// RUN: sed -e 's/^name = "edge"/name = "int8only"/' -e 's/^dtypes = \[.*\]/dtypes = ["int8"]/' -e '/^bf16 = /d' %S/../../../target/edge.toml > %t/int8only.toml
// RUN: cd %t && infer-opt %s --split-input-file --verify-diagnostics

// Every verifier message of the tile dialect, one split-input-file chunk per
// case; the expected-error annotation is the message the verifier gives at the op
// below it. Modules name
// their target with tile.target (edge: 16x16 array, 256 KiB scratchpad, 64 KiB
// accumulator); one chunk uses a TOML config written by the RUN line above.

// unknown target
builtin.module attributes {tile.target = "nosuch"} {
  // expected-error @+1 {{module attribute tile.target = "nosuch": unknown hardware config 'nosuch'}}
  %a = tile.alloc : memref<4x4xf32, "spad">
}

// -----

// target without a bf16 matrix unit (a TOML path, made by the RUN line)
builtin.module attributes {tile.target = "int8only.toml"} {
  %c0 = arith.constant 0 : index
  %l = tile.alloc : memref<4x4xbf16, "spad">
  %a = tile.alloc : memref<4x4xf32, "acc">
  // expected-error @+1 {{target 'int8only' has no bf16 matrix unit}}
  tile.matmul %l[%c0, %c0], %l[%c0, %c0], %a[%c0, %c0] {m = 4 : i64, k = 4 : i64, n = 4 : i64} : memref<4x4xbf16, "spad">, memref<4x4xbf16, "spad">, memref<4x4xf32, "acc">
}

// -----

// alloc in an unknown memory space
builtin.module attributes {tile.target = "edge"} {
  // expected-error @+1 {{a tile.alloc must be in dram or spad or acc, got a l2 memref}}
  %a = tile.alloc : memref<4x4xf32, "l2">
}

// -----

// buffers
builtin.module attributes {tile.target = "edge"} {
  // expected-error @+1 {{buffers must be 1 or 2 (double buffering), got 3}}
  %a = tile.alloc {buffers = 3 : i64} : memref<4x4xf32, "spad">
}

// -----

// acc dtype
builtin.module attributes {tile.target = "edge"} {
  // expected-error @+1 {{accumulator buffers hold f32 or i32, got bf16}}
  %a = tile.alloc : memref<4x4xbf16, "acc">
}

// -----

// negative offset
builtin.module attributes {tile.target = "edge"} {
  // expected-error @+1 {{offset must be >= 0, got -4}}
  %a = tile.alloc {offset = -4 : i64} : memref<4x4xf32, "spad">
}

// -----

// spad larger than edge's 256 KiB scratchpad (2 buffers of 128 KiB + 4 bytes)
builtin.module attributes {tile.target = "edge"} {
  // expected-error @+1 {{spad buffer of 262144 bytes at offset 4 does not fit the 262144-byte spad of target 'edge'}}
  %a = tile.alloc {buffers = 2 : i64, offset = 4 : i64} : memref<256x128xf32, "spad">
}

// -----

// acc larger than edge's 64 KiB accumulator
builtin.module attributes {tile.target = "edge"} {
  // expected-error @+1 {{acc buffer of 66048 bytes at offset 0 does not fit the 65536-byte acc of target 'edge'}}
  %a = tile.alloc : memref<128x129xf32, "acc">
}

// -----

// weight outside DRAM
builtin.module attributes {tile.target = "edge"} {
  // expected-error @+1 {{a weight must be in dram, got a spad memref}}
  %w = tile.weight @w : memref<4x4xbf16, "spad">
}

// -----

// view changes space
builtin.module attributes {tile.target = "edge"} {
  %a = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{a view cannot change the memory space}}
  %v = tile.view %a : memref<4x4xf32, "spad"> -> memref<16xf32, "acc">
}

// -----

// view changes dtype
builtin.module attributes {tile.target = "edge"} {
  %a = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{a view cannot change the element type}}
  %v = tile.view %a : memref<4x4xf32, "spad"> -> memref<16xi32, "spad">
}

// -----

// view changes size
builtin.module attributes {tile.target = "edge"} {
  %a = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{a view must keep the element count: 16 vs 15}}
  %v = tile.view %a : memref<4x4xf32, "spad"> -> memref<15xf32, "spad">
}

// -----

// dma local to local
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<4x4xf32, "spad">
  %d = tile.alloc : memref<4x4xf32, "acc">
  // expected-error @+1 {{a DMA moves data between DRAM and a local memory, got spad -> acc}}
  tile.dma %s[%c0, %c0], %d[%c0, %c0] {shape = array<i64: 4, 4>} : memref<4x4xf32, "spad">, memref<4x4xf32, "acc">
}

// -----

// dma dram to dram
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<4x4xf32, "dram">
  %d = tile.alloc : memref<4x4xf32, "dram">
  // expected-error @+1 {{a DMA moves data between DRAM and a local memory, got dram -> dram}}
  tile.dma %s[%c0, %c0], %d[%c0, %c0] {shape = array<i64: 4, 4>} : memref<4x4xf32, "dram">, memref<4x4xf32, "dram">
}

// -----

// dma dtype
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<4x4xf32, "dram">
  %d = tile.alloc : memref<4x4xi32, "spad">
  // expected-error @+1 {{a DMA copies bytes: element types differ (f32 vs i32)}}
  tile.dma %s[%c0, %c0], %d[%c0, %c0] {shape = array<i64: 4, 4>} : memref<4x4xf32, "dram">, memref<4x4xi32, "spad">
}

// -----

// dma box rank
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<2x2x2x2xf32, "dram">
  %d = tile.alloc : memref<2x2x2x2xf32, "spad">
  // expected-error @+1 {{a DMA box has 1 to 3 dimensions, got 4}}
  tile.dma %s[%c0, %c0, %c0, %c0], %d[%c0, %c0, %c0, %c0] {shape = array<i64: 2, 2, 2, 2>} : memref<2x2x2x2xf32, "dram">, memref<2x2x2x2xf32, "spad">
}

// -----

// dma steps: 0 (a broadcast) for a load only
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<4x4xf32, "spad">
  %d = tile.alloc : memref<4x4xf32, "dram">
  // expected-error @+1 {{src_steps must be 2 positive integers (0 for a load only), got [1, 0]}}
  tile.dma %s[%c0, %c0], %d[%c0, %c0] {shape = array<i64: 4, 4>, src_steps = array<i64: 1, 0>} : memref<4x4xf32, "spad">, memref<4x4xf32, "dram">
}

// -----

// dma steps of a load
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<4x4xf32, "dram">
  %d = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{src_steps must be 2 non-negative integers, got [1, -1]}}
  tile.dma %s[%c0, %c0], %d[%c0, %c0] {shape = array<i64: 4, 4>, src_steps = array<i64: 1, -1>} : memref<4x4xf32, "dram">, memref<4x4xf32, "spad">
}

// -----

// dma indices
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<4x4xf32, "dram">
  %d = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{the source has rank 2 but is indexed with 1 indices}}
  tile.dma %s[%c0], %d[%c0, %c0] {shape = array<i64: 4, 4>} : memref<4x4xf32, "dram">, memref<4x4xf32, "spad">
}

// -----

// dma box vs memref rank
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<4x4x4xf32, "dram">
  %d = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{the source: the tile has 2 dims but the memref has rank 3}}
  tile.dma %s[%c0, %c0, %c0], %d[%c0, %c0] {shape = array<i64: 4, 4>} : memref<4x4x4xf32, "dram">, memref<4x4xf32, "spad">
}

// -----

// dma strided source extent
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<4x8xf32, "dram">
  %d = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{the source: tile extent 10 in dim 1 must be in 1..8 (the buffer's size)}}
  tile.dma %s[%c0, %c0], %d[%c0, %c0] {shape = array<i64: 4, 4>, src_steps = array<i64: 1, 3>} : memref<4x8xf32, "dram">, memref<4x4xf32, "spad">
}

// -----

// dma destination extent
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<8x8xf32, "dram">
  %d = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{the destination: tile extent 8 in dim 0 must be in 1..4 (the buffer's size)}}
  tile.dma %s[%c0, %c0], %d[%c0, %c0] {shape = array<i64: 8, 4>} : memref<8x8xf32, "dram">, memref<4x4xf32, "spad">
}

// -----

// matmul lhs space
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %l = tile.alloc : memref<4x4xbf16, "dram">
  %r = tile.alloc : memref<4x4xbf16, "spad">
  %a = tile.alloc : memref<4x4xf32, "acc">
  // expected-error @+1 {{lhs must be in spad, got a dram memref}}
  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 4 : i64, k = 4 : i64, n = 4 : i64} : memref<4x4xbf16, "dram">, memref<4x4xbf16, "spad">, memref<4x4xf32, "acc">
}

// -----

// matmul rhs space
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %l = tile.alloc : memref<4x4xbf16, "spad">
  %r = tile.alloc : memref<4x4xf32, "acc">
  %a = tile.alloc : memref<4x4xf32, "acc">
  // expected-error @+1 {{rhs (the weight tile) must be in spad, got a acc memref}}
  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 4 : i64, k = 4 : i64, n = 4 : i64} : memref<4x4xbf16, "spad">, memref<4x4xf32, "acc">, memref<4x4xf32, "acc">
}

// -----

// matmul acc space
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %l = tile.alloc : memref<4x4xbf16, "spad">
  %r = tile.alloc : memref<4x4xbf16, "spad">
  %a = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{acc must be in acc, got a spad memref}}
  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 4 : i64, k = 4 : i64, n = 4 : i64} : memref<4x4xbf16, "spad">, memref<4x4xbf16, "spad">, memref<4x4xf32, "spad">
}

// -----

// matmul rank
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %l = tile.alloc : memref<4x4x1xbf16, "spad">
  %r = tile.alloc : memref<4x4xbf16, "spad">
  %a = tile.alloc : memref<4x4xf32, "acc">
  // expected-error @+1 {{lhs must be a 2-D memref, got rank 3}}
  tile.matmul %l[%c0, %c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 4 : i64, k = 4 : i64, n = 4 : i64} : memref<4x4x1xbf16, "spad">, memref<4x4xbf16, "spad">, memref<4x4xf32, "acc">
}

// -----

// matmul input dtypes
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %l = tile.alloc : memref<4x4xbf16, "spad">
  %r = tile.alloc : memref<4x4xi8, "spad">
  %a = tile.alloc : memref<4x4xf32, "acc">
  // expected-error @+1 {{lhs and rhs must both be bf16 or both i8, got bf16 and i8}}
  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 4 : i64, k = 4 : i64, n = 4 : i64} : memref<4x4xbf16, "spad">, memref<4x4xi8, "spad">, memref<4x4xf32, "acc">
}

// -----

// matmul f32 inputs
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %l = tile.alloc : memref<4x4xf32, "spad">
  %r = tile.alloc : memref<4x4xf32, "spad">
  %a = tile.alloc : memref<4x4xf32, "acc">
  // expected-error @+1 {{lhs and rhs must both be bf16 or both i8, got f32 and f32}}
  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 4 : i64, k = 4 : i64, n = 4 : i64} : memref<4x4xf32, "spad">, memref<4x4xf32, "spad">, memref<4x4xf32, "acc">
}

// -----

// matmul acc dtype
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %l = tile.alloc : memref<4x4xi8, "spad">
  %r = tile.alloc : memref<4x4xi8, "spad">
  %a = tile.alloc : memref<4x4xf32, "acc">
  // expected-error @+1 {{i8 products accumulate in i32, got f32}}
  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 4 : i64, k = 4 : i64, n = 4 : i64} : memref<4x4xi8, "spad">, memref<4x4xi8, "spad">, memref<4x4xf32, "acc">
}

// -----

// matmul box
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %l = tile.alloc : memref<4x4xbf16, "spad">
  %r = tile.alloc : memref<4x4xbf16, "spad">
  %a = tile.alloc : memref<4x4xf32, "acc">
  // expected-error @+1 {{lhs: tile extent 8 in dim 0 must be in 1..4 (the buffer's size)}}
  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 8 : i64, k = 4 : i64, n = 4 : i64} : memref<4x4xbf16, "spad">, memref<4x4xbf16, "spad">, memref<4x4xf32, "acc">
}

// -----

// weight tile bigger than edge's 16x16 array
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %l = tile.alloc : memref<4x32xbf16, "spad">
  %r = tile.alloc : memref<32x16xbf16, "spad">
  %a = tile.alloc : memref<4x16xf32, "acc">
  // expected-error @+1 {{the weight tile 32x16 exceeds the 16x16 array of target 'edge'}}
  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 4 : i64, k = 32 : i64, n = 16 : i64} : memref<4x32xbf16, "spad">, memref<32x16xbf16, "spad">, memref<4x16xf32, "acc">
}

// -----

// unknown vector op
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{unknown vector op 'foo' (the vector unit has: add, sub,}}
  tile.vector "foo" %d[%c0, %c0], %x[%c0, %c0] {rows = 4 : i64, cols = 4 : i64} : memref<4x4xf32, "spad">, memref<4x4xf32, "spad">
}

// -----

// vector in dram
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "dram">
  %x = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{dst must be in spad or acc, got a dram memref}}
  tile.vector "relu" %d[%c0, %c0], %x[%c0, %c0] {rows = 4 : i64, cols = 4 : i64} : memref<4x4xf32, "dram">, memref<4x4xf32, "spad">
}

// -----

// vector rank
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4x1xf32, "spad">
  // expected-error @+1 {{a must be a 2-D memref, got rank 3}}
  tile.vector "relu" %d[%c0, %c0], %x[%c0, %c0] {rows = 4 : i64, cols = 4 : i64} : memref<4x4xf32, "spad">, memref<4x4x1xf32, "spad">
}

// -----

// vector dtype
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4xf16, "spad">
  // expected-error @+1 {{a: the vector unit reads f32, bf16, i8, i32, got f16}}
  tile.vector "relu" %d[%c0, %c0], %x[%c0, %c0] {rows = 4 : i64, cols = 4 : i64} : memref<4x4xf32, "spad">, memref<4x4xf16, "spad">
}

// -----

// vector box
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{a: tile extent 5 in dim 1 must be in 1..4 (the buffer's size)}}
  tile.vector "relu" %d[%c0, %c0], %x[%c0, %c0] {rows = 4 : i64, cols = 5 : i64} : memref<4x4xf32, "spad">, memref<4x4xf32, "spad">
}

// -----

// reduction writes a column
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{dst has rank 2 but is indexed with 1 indices}}
  tile.vector "rsum" %d[%c0], %x[%c0, %c0] {rows = 4 : i64, cols = 4 : i64} : memref<4x4xf32, "spad">, memref<4x4xf32, "spad">
}

// -----

// missing bmode
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4xf32, "spad">
  %b = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{binary op 'add' needs bmode = tile, row, col or imm}}
  tile.vector "add" %d[%c0, %c0], %x[%c0, %c0], %b[%c0, %c0] {rows = 4 : i64, cols = 4 : i64} : memref<4x4xf32, "spad">, memref<4x4xf32, "spad">, memref<4x4xf32, "spad">
}

// -----

// rdot reads b like a binary op (and writes a column like rsum)
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x1xf32, "spad">
  %x = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{binary op 'rdot' needs bmode = tile, row, col or imm}}
  tile.vector "rdot" %d[%c0, %c0], %x[%c0, %c0] {rows = 4 : i64, cols = 4 : i64} : memref<4x1xf32, "spad">, memref<4x4xf32, "spad">
}

// -----

// bad bmode
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4xf32, "spad">
  %b = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{binary op 'add' needs bmode = tile, row, col or imm}}
  tile.vector "add" %d[%c0, %c0], %x[%c0, %c0], %b[%c0, %c0] {rows = 4 : i64, cols = 4 : i64, bmode = "diag"} : memref<4x4xf32, "spad">, memref<4x4xf32, "spad">, memref<4x4xf32, "spad">
}

// -----

// imm with b
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4xf32, "spad">
  %b = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{bmode = imm takes the `imm` attribute and no b operand}}
  tile.vector "add" %d[%c0, %c0], %x[%c0, %c0], %b[%c0, %c0] {rows = 4 : i64, cols = 4 : i64, bmode = "imm", imm = 1.0 : f32} : memref<4x4xf32, "spad">, memref<4x4xf32, "spad">, memref<4x4xf32, "spad">
}

// -----

// imm without imm
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{bmode = imm takes the `imm` attribute and no b operand}}
  tile.vector "add" %d[%c0, %c0], %x[%c0, %c0] {rows = 4 : i64, cols = 4 : i64, bmode = "imm"} : memref<4x4xf32, "spad">, memref<4x4xf32, "spad">
}

// -----

// tile bmode without b
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{bmode = tile needs one b operand}}
  tile.vector "mul" %d[%c0, %c0], %x[%c0, %c0] {rows = 4 : i64, cols = 4 : i64, bmode = "tile"} : memref<4x4xf32, "spad">, memref<4x4xf32, "spad">
}

// -----

// row bmode: b is 1 x cols
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4xf32, "spad">
  %b = tile.alloc : memref<1x3xf32, "spad">
  // expected-error @+1 {{b: tile extent 4 in dim 1 must be in 1..3 (the buffer's size)}}
  tile.vector "mul" %d[%c0, %c0], %x[%c0, %c0], %b[%c0, %c0] {rows = 4 : i64, cols = 4 : i64, bmode = "row"} : memref<4x4xf32, "spad">, memref<4x4xf32, "spad">, memref<1x3xf32, "spad">
}

// -----

// unary with bmode
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{'relu' takes no b operand or bmode}}
  tile.vector "relu" %d[%c0, %c0], %x[%c0, %c0] {rows = 4 : i64, cols = 4 : i64, bmode = "tile"} : memref<4x4xf32, "spad">, memref<4x4xf32, "spad">
}

// -----

// unary with b
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4xf32, "spad">
  %b = tile.alloc : memref<4x4xf32, "spad">
  // expected-error @+1 {{'exp' takes no b operand or bmode}}
  tile.vector "exp" %d[%c0, %c0], %x[%c0, %c0], %b[%c0, %c0] {rows = 4 : i64, cols = 4 : i64} : memref<4x4xf32, "spad">, memref<4x4xf32, "spad">, memref<4x4xf32, "spad">
}

// -----

// requant writes i8
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "spad">
  %x = tile.alloc : memref<4x4xi32, "acc">
  // expected-error @+1 {{requant writes i8}}
  tile.vector "requant" %d[%c0, %c0], %x[%c0, %c0] {rows = 4 : i64, cols = 4 : i64, bmode = "imm", imm = 0.5 : f32} : memref<4x4xf32, "spad">, memref<4x4xi32, "acc">
}

// -----

// fill in dram
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x4xf32, "dram">
  // expected-error @+1 {{dst must be in spad or acc, got a dram memref}}
  tile.fill %d[%c0, %c0] {rows = 4 : i64, cols = 4 : i64, value = 0.0 : f32} : memref<4x4xf32, "dram">
}

// -----

// fill rank
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<16xf32, "spad">
  // expected-error @+1 {{dst must be a 2-D memref}}
  tile.fill %d[%c0] {rows = 4 : i64, cols = 4 : i64, value = 0.0 : f32} : memref<16xf32, "spad">
}

// -----

// fill box
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %d = tile.alloc : memref<4x2xf32, "spad">
  // expected-error @+1 {{dst: tile extent 4 in dim 1 must be in 1..2 (the buffer's size)}}
  tile.fill %d[%c0, %c0] {rows = 4 : i64, cols = 4 : i64, value = 0.0 : f32} : memref<4x2xf32, "spad">
}

// -----

module attributes {tile.target = "edge"} {
  func.func @requant_tile_mode(%a: memref<4x4xi32, "acc">, %s: memref<4x4xf32, "spad">, %d: memref<4x4xi8, "spad">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{requant needs bmode = row (per-column scales) or imm}}
    tile.vector "requant" %d[%c0, %c0], %a[%c0, %c0], %s[%c0, %c0] {rows = 4 : i64, cols = 4 : i64, bmode = "tile"} : memref<4x4xi8, "spad">, memref<4x4xi32, "acc">, memref<4x4xf32, "spad">
    func.return
  }
}

// -----

module attributes {tile.target = "edge"} {
  func.func @stray_imm(%a: memref<4x4xf32, "spad">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{the `imm` attribute is only used with bmode = imm}}
    tile.vector "relu" %a[%c0, %c0], %a[%c0, %c0] {rows = 4 : i64, cols = 4 : i64, imm = 1.0 : f32} : memref<4x4xf32, "spad">, memref<4x4xf32, "spad">
    func.return
  }
}

// -----

module attributes {tile.target = "edge"} {
  func.func @fill_f16(%a: memref<4x4xf16, "spad">) {
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{dst: the vector unit writes f32, bf16, i8, i32, got f16}}
    tile.fill %a[%c0, %c0] {rows = 4 : i64, cols = 4 : i64, value = 0.0 : f32} : memref<4x4xf16, "spad">
    func.return
  }
}

// -----

// a transposed rhs is an n x k box: 8 x 16 from a 16x8 tile (its k x n box would fit)
builtin.module attributes {tile.target = "edge"} {
  %c0 = arith.constant 0 : index
  %l = tile.alloc : memref<2x16xbf16, "spad">
  %r = tile.alloc : memref<16x8xbf16, "spad">
  %a = tile.alloc : memref<2x8xf32, "acc">
  // expected-error @+1 {{rhs: tile extent 16 in dim 1 must be in 1..8}}
  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 2 : i64, k = 16 : i64, n = 8 : i64, transpose_rhs = true} : memref<2x16xbf16, "spad">, memref<16x8xbf16, "spad">, memref<2x8xf32, "acc">
}
