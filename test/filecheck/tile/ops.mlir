// RUN: infer-opt %s | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// Every tile op in the custom format, with every optional part (alloc offset and
// buffers, dma src_steps (0: a broadcast load), matmul accumulate and transpose_rhs, vector b operand in each bmode and
// imm, reductions, requant), roundtripped through the custom and the generic
// format. The module is verified against the edge target (tile.target).

builtin.module attributes {tile.target = "edge"} {
  func.func @ops(%x: memref<2x9x9xbf16, "dram">, %y: memref<8x16xf32, "dram"> {tile.output}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %w = tile.weight @layer.0.weight : memref<16x16xbf16, "dram">
    %wi = tile.weight @q : memref<16x16xi8, "dram">
    %l = tile.alloc : memref<2x4x4xbf16, "spad">
    %r = tile.alloc {buffers = 2 : i64, offset = 4096 : i64} : memref<16x16xbf16, "spad">
    %a = tile.alloc {offset = 0 : i64} : memref<8x16xf32, "acc">
    %d = tile.alloc {offset = 1024 : i64} : memref<64x64xf32, "dram">
    %v = tile.view %l : memref<2x4x4xbf16, "spad"> -> memref<2x16xbf16, "spad">
    tile.dma %x[%c0, %c1, %c1], %l[%c0, %c0, %c0] {shape = array<i64: 2, 4, 4>, src_steps = array<i64: 1, 2, 2>} : memref<2x9x9xbf16, "dram">, memref<2x4x4xbf16, "spad">
    tile.dma %x[%c0, %c1, %c1], %l[%c0, %c0, %c0] {shape = array<i64: 2, 4, 4>, src_steps = array<i64: 0, 1, 2>} : memref<2x9x9xbf16, "dram">, memref<2x4x4xbf16, "spad">
    tile.dma %w[%c0, %c0], %r[%c0, %c0] {shape = array<i64: 16, 16>} : memref<16x16xbf16, "dram">, memref<16x16xbf16, "spad">
    tile.matmul %v[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 2 : i64, k = 16 : i64, n = 16 : i64} : memref<2x16xbf16, "spad">, memref<16x16xbf16, "spad">, memref<8x16xf32, "acc">
    tile.matmul %v[%c0, %c0], %r[%c0, %c0], %a[%c1, %c0] {m = 1 : i64, k = 16 : i64, n = 8 : i64, accumulate = true} : memref<2x16xbf16, "spad">, memref<16x16xbf16, "spad">, memref<8x16xf32, "acc">
    tile.matmul %v[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 2 : i64, k = 16 : i64, n = 8 : i64, accumulate = true, transpose_rhs = true} : memref<2x16xbf16, "spad">, memref<16x16xbf16, "spad">, memref<8x16xf32, "acc">
    tile.fill %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64, value = 0.0 : f32} : memref<8x16xf32, "acc">
    tile.vector "relu" %a[%c0, %c0], %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
    tile.vector "add" %a[%c0, %c0], %a[%c0, %c0], %a[%c1, %c0] {rows = 7 : i64, cols = 16 : i64, bmode = "tile"} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
    tile.vector "mul" %a[%c0, %c0], %a[%c0, %c0], %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64, bmode = "row"} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
    tile.vector "sub" %a[%c0, %c1], %a[%c0, %c1], %a[%c0, %c0] {rows = 8 : i64, cols = 15 : i64, bmode = "col"} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
    tile.vector "max" %a[%c0, %c0], %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64, bmode = "imm", imm = -1.5 : f32} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
    tile.vector "rsum" %a[%c0, %c0], %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
    tile.vector "rdot" %a[%c0, %c0], %a[%c0, %c0], %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64, bmode = "row"} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
    %q = tile.alloc : memref<8x16xi8, "spad">
    tile.vector "requant" %q[%c0, %c0], %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64, bmode = "imm", imm = 0.125 : f32} : memref<8x16xi8, "spad">, memref<8x16xf32, "acc">
    tile.dma %a[%c0, %c0], %y[%c0, %c0] {shape = array<i64: 8, 16>} : memref<8x16xf32, "acc">, memref<8x16xf32, "dram">
    func.return
  }
}

// CHECK:      builtin.module attributes {tile.target = "edge"} {
// CHECK-NEXT:   func.func @ops(%x: memref<2x9x9xbf16, "dram">, %y: memref<8x16xf32, "dram"> {tile.output}) {
// CHECK-NEXT:     %c0 = arith.constant 0 : index
// CHECK-NEXT:     %c1 = arith.constant 1 : index
// CHECK-NEXT:     %w = tile.weight @layer.0.weight : memref<16x16xbf16, "dram">
// CHECK-NEXT:     %wi = tile.weight @q : memref<16x16xi8, "dram">
// CHECK-NEXT:     %l = tile.alloc : memref<2x4x4xbf16, "spad">
// CHECK-NEXT:     %r = tile.alloc {buffers = 2 : i64, offset = 4096 : i64} : memref<16x16xbf16, "spad">
// CHECK-NEXT:     %a = tile.alloc {offset = 0 : i64} : memref<8x16xf32, "acc">
// CHECK-NEXT:     %d = tile.alloc {offset = 1024 : i64} : memref<64x64xf32, "dram">
// CHECK-NEXT:     %v = tile.view %l : memref<2x4x4xbf16, "spad"> -> memref<2x16xbf16, "spad">
// CHECK-NEXT:     tile.dma %x[%c0, %c1, %c1], %l[%c0, %c0, %c0] {shape = array<i64: 2, 4, 4>, src_steps = array<i64: 1, 2, 2>} : memref<2x9x9xbf16, "dram">, memref<2x4x4xbf16, "spad">
// CHECK-NEXT:     tile.dma %x[%c0, %c1, %c1], %l[%c0, %c0, %c0] {shape = array<i64: 2, 4, 4>, src_steps = array<i64: 0, 1, 2>} : memref<2x9x9xbf16, "dram">, memref<2x4x4xbf16, "spad">
// CHECK-NEXT:     tile.dma %w[%c0, %c0], %r[%c0, %c0] {shape = array<i64: 16, 16>} : memref<16x16xbf16, "dram">, memref<16x16xbf16, "spad">
// CHECK-NEXT:     tile.matmul %v[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 2 : i64, k = 16 : i64, n = 16 : i64} : memref<2x16xbf16, "spad">, memref<16x16xbf16, "spad">, memref<8x16xf32, "acc">
// CHECK-NEXT:     tile.matmul %v[%c0, %c0], %r[%c0, %c0], %a[%c1, %c0] {m = 1 : i64, k = 16 : i64, n = 8 : i64, accumulate = true} : memref<2x16xbf16, "spad">, memref<16x16xbf16, "spad">, memref<8x16xf32, "acc">
// CHECK-NEXT:     tile.matmul %v[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 2 : i64, k = 16 : i64, n = 8 : i64, accumulate = true, transpose_rhs = true} : memref<2x16xbf16, "spad">, memref<16x16xbf16, "spad">, memref<8x16xf32, "acc">
// CHECK-NEXT:     tile.fill %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64, value = 0.000000e+00 : f32} : memref<8x16xf32, "acc">
// CHECK-NEXT:     tile.vector "relu" %a[%c0, %c0], %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
// CHECK-NEXT:     tile.vector "add" %a[%c0, %c0], %a[%c0, %c0], %a[%c1, %c0] {rows = 7 : i64, cols = 16 : i64, bmode = "tile"} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
// CHECK-NEXT:     tile.vector "mul" %a[%c0, %c0], %a[%c0, %c0], %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64, bmode = "row"} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
// CHECK-NEXT:     tile.vector "sub" %a[%c0, %c1], %a[%c0, %c1], %a[%c0, %c0] {rows = 8 : i64, cols = 15 : i64, bmode = "col"} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
// CHECK-NEXT:     tile.vector "max" %a[%c0, %c0], %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64, bmode = "imm", imm = -1.500000e+00 : f32} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
// CHECK-NEXT:     tile.vector "rsum" %a[%c0, %c0], %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
// CHECK-NEXT:     tile.vector "rdot" %a[%c0, %c0], %a[%c0, %c0], %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64, bmode = "row"} : memref<8x16xf32, "acc">, memref<8x16xf32, "acc">, memref<8x16xf32, "acc">
// CHECK-NEXT:     %q = tile.alloc : memref<8x16xi8, "spad">
// CHECK-NEXT:     tile.vector "requant" %q[%c0, %c0], %a[%c0, %c0] {rows = 8 : i64, cols = 16 : i64, bmode = "imm", imm = 1.250000e-01 : f32} : memref<8x16xi8, "spad">, memref<8x16xf32, "acc">
// CHECK-NEXT:     tile.dma %a[%c0, %c0], %y[%c0, %c0] {shape = array<i64: 8, 16>} : memref<8x16xf32, "acc">, memref<8x16xf32, "dram">
// CHECK-NEXT:     func.return
// CHECK-NEXT:   }
// CHECK-NEXT: }

// The generic form of the tile ops (properties, operand segments, defaults).
// GENERIC:      %w = "tile.weight"() <{name = @layer.0.weight}> : () -> memref<16x16xbf16, "dram">
// GENERIC-NEXT: %wi = "tile.weight"() <{name = @q}> : () -> memref<16x16xi8, "dram">
// GENERIC-NEXT: %l = "tile.alloc"() <{buffers = 1 : i64}> : () -> memref<2x4x4xbf16, "spad">
// GENERIC-NEXT: %r = "tile.alloc"() <{buffers = 2 : i64, offset = 4096 : i64}> : () -> memref<16x16xbf16, "spad">
// GENERIC-NEXT: %a = "tile.alloc"() <{offset = 0 : i64, buffers = 1 : i64}> : () -> memref<8x16xf32, "acc">
// GENERIC-NEXT: %d = "tile.alloc"() <{offset = 1024 : i64, buffers = 1 : i64}> : () -> memref<64x64xf32, "dram">
// GENERIC-NEXT: %v = "tile.view"(%l) : (memref<2x4x4xbf16, "spad">) -> memref<2x16xbf16, "spad">
// GENERIC-NEXT: "tile.dma"(%x, %c0, %c1, %c1, %l, %c0, %c0, %c0) <{shape = array<i64: 2, 4, 4>, src_steps = array<i64: 1, 2, 2>, operandSegmentSizes = array<i32: 1, 3, 1, 3>}> : (memref<2x9x9xbf16, "dram">, index, index, index, memref<2x4x4xbf16, "spad">, index, index, index) -> ()
// GENERIC-NEXT: "tile.dma"(%x, %c0, %c1, %c1, %l, %c0, %c0, %c0) <{shape = array<i64: 2, 4, 4>, src_steps = array<i64: 0, 1, 2>, operandSegmentSizes = array<i32: 1, 3, 1, 3>}> : (memref<2x9x9xbf16, "dram">, index, index, index, memref<2x4x4xbf16, "spad">, index, index, index) -> ()
// GENERIC-NEXT: "tile.dma"(%w, %c0, %c0, %r, %c0, %c0) <{shape = array<i64: 16, 16>, operandSegmentSizes = array<i32: 1, 2, 1, 2>}> : (memref<16x16xbf16, "dram">, index, index, memref<16x16xbf16, "spad">, index, index) -> ()
// GENERIC-NEXT: "tile.matmul"(%v, %c0, %c0, %r, %c0, %c0, %a, %c0, %c0) <{m = 2 : i64, k = 16 : i64, n = 16 : i64, operandSegmentSizes = array<i32: 1, 2, 1, 2, 1, 2>, accumulate = false, transpose_rhs = false}> : (memref<2x16xbf16, "spad">, index, index, memref<16x16xbf16, "spad">, index, index, memref<8x16xf32, "acc">, index, index) -> ()
// GENERIC-NEXT: "tile.matmul"(%v, %c0, %c0, %r, %c0, %c0, %a, %c1, %c0) <{m = 1 : i64, k = 16 : i64, n = 8 : i64, accumulate = true, operandSegmentSizes = array<i32: 1, 2, 1, 2, 1, 2>, transpose_rhs = false}> : (memref<2x16xbf16, "spad">, index, index, memref<16x16xbf16, "spad">, index, index, memref<8x16xf32, "acc">, index, index) -> ()
// GENERIC-NEXT: "tile.matmul"(%v, %c0, %c0, %r, %c0, %c0, %a, %c0, %c0) <{m = 2 : i64, k = 16 : i64, n = 8 : i64, accumulate = true, transpose_rhs = true, operandSegmentSizes = array<i32: 1, 2, 1, 2, 1, 2>}> : (memref<2x16xbf16, "spad">, index, index, memref<16x16xbf16, "spad">, index, index, memref<8x16xf32, "acc">, index, index) -> ()
// GENERIC-NEXT: "tile.fill"(%a, %c0, %c0) <{rows = 8 : i64, cols = 16 : i64, value = 0.000000e+00 : f32}> : (memref<8x16xf32, "acc">, index, index) -> ()
// GENERIC-NEXT: "tile.vector"(%a, %c0, %c0, %a, %c0, %c0) <{op = "relu", rows = 8 : i64, cols = 16 : i64, operandSegmentSizes = array<i32: 1, 2, 1, 2, 0, 0>}> : (memref<8x16xf32, "acc">, index, index, memref<8x16xf32, "acc">, index, index) -> ()
// GENERIC-NEXT: "tile.vector"(%a, %c0, %c0, %a, %c0, %c0, %a, %c1, %c0) <{op = "add", rows = 7 : i64, cols = 16 : i64, bmode = "tile", operandSegmentSizes = array<i32: 1, 2, 1, 2, 1, 2>}> : (memref<8x16xf32, "acc">, index, index, memref<8x16xf32, "acc">, index, index, memref<8x16xf32, "acc">, index, index) -> ()
// GENERIC-NEXT: "tile.vector"(%a, %c0, %c0, %a, %c0, %c0, %a, %c0, %c0) <{op = "mul", rows = 8 : i64, cols = 16 : i64, bmode = "row", operandSegmentSizes = array<i32: 1, 2, 1, 2, 1, 2>}> : (memref<8x16xf32, "acc">, index, index, memref<8x16xf32, "acc">, index, index, memref<8x16xf32, "acc">, index, index) -> ()
// GENERIC-NEXT: "tile.vector"(%a, %c0, %c1, %a, %c0, %c1, %a, %c0, %c0) <{op = "sub", rows = 8 : i64, cols = 15 : i64, bmode = "col", operandSegmentSizes = array<i32: 1, 2, 1, 2, 1, 2>}> : (memref<8x16xf32, "acc">, index, index, memref<8x16xf32, "acc">, index, index, memref<8x16xf32, "acc">, index, index) -> ()
// GENERIC-NEXT: "tile.vector"(%a, %c0, %c0, %a, %c0, %c0) <{op = "max", rows = 8 : i64, cols = 16 : i64, bmode = "imm", imm = -1.500000e+00 : f32, operandSegmentSizes = array<i32: 1, 2, 1, 2, 0, 0>}> : (memref<8x16xf32, "acc">, index, index, memref<8x16xf32, "acc">, index, index) -> ()
// GENERIC-NEXT: "tile.vector"(%a, %c0, %c0, %a, %c0, %c0) <{op = "rsum", rows = 8 : i64, cols = 16 : i64, operandSegmentSizes = array<i32: 1, 2, 1, 2, 0, 0>}> : (memref<8x16xf32, "acc">, index, index, memref<8x16xf32, "acc">, index, index) -> ()
// GENERIC-NEXT: "tile.vector"(%a, %c0, %c0, %a, %c0, %c0, %a, %c0, %c0) <{op = "rdot", rows = 8 : i64, cols = 16 : i64, bmode = "row", operandSegmentSizes = array<i32: 1, 2, 1, 2, 1, 2>}> : (memref<8x16xf32, "acc">, index, index, memref<8x16xf32, "acc">, index, index, memref<8x16xf32, "acc">, index, index) -> ()
// GENERIC-NEXT: %q = "tile.alloc"() <{buffers = 1 : i64}> : () -> memref<8x16xi8, "spad">
// GENERIC-NEXT: "tile.vector"(%q, %c0, %c0, %a, %c0, %c0) <{op = "requant", rows = 8 : i64, cols = 16 : i64, bmode = "imm", imm = 1.250000e-01 : f32, operandSegmentSizes = array<i32: 1, 2, 1, 2, 0, 0>}> : (memref<8x16xi8, "spad">, index, index, memref<8x16xf32, "acc">, index, index) -> ()
// GENERIC-NEXT: "tile.dma"(%a, %c0, %c0, %y, %c0, %c0) <{shape = array<i64: 8, 16>, operandSegmentSizes = array<i32: 1, 2, 1, 2>}> : (memref<8x16xf32, "acc">, index, index, memref<8x16xf32, "dram">, index, index) -> ()
