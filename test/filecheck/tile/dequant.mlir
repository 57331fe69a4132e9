// RUN: infer-opt %s | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | infer-opt | filecheck %s

// tile.dequant (vec.dequant at the tile level): a q4_1 k x n weight tile (blocks down the
// columns) to bf16 and a q8_0 row (blocks along the row) to f32; roundtripped through the
// custom and the generic format.

builtin.module attributes {tile.target = "edge"} {
  func.func @f() {
    %c0 = arith.constant 0 : index
    %c16 = arith.constant 16 : index
    %w = tile.alloc : memref<64x16xbf16, "spad">
    %q = tile.alloc : memref<64x16xui8, "spad">
    %s = tile.alloc : memref<4x32xf16, "spad">
    tile.dequant %w[%c0, %c0], %q[%c16, %c0], %s[%c0, %c0] {rows = 64 : i64, cols = 16 : i64, format = "q4_1", blocks = "col"} : memref<64x16xbf16, "spad">, memref<64x16xui8, "spad">, memref<4x32xf16, "spad">
    %e = tile.alloc : memref<1x64xf32, "spad">
    %eq = tile.alloc : memref<1x64xi8, "spad">
    %es = tile.alloc : memref<1x2xf16, "spad">
    tile.dequant %e[%c0, %c0], %eq[%c0, %c0], %es[%c0, %c0] {rows = 1 : i64, cols = 64 : i64, format = "q8_0", blocks = "row"} : memref<1x64xf32, "spad">, memref<1x64xi8, "spad">, memref<1x2xf16, "spad">
    func.return
  }
}

// CHECK:      tile.dequant %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}, %{{.*}}] {rows = 64 : i64, cols = 16 : i64, format = "q4_1", blocks = "col"} : memref<64x16xbf16, "spad">, memref<64x16xui8, "spad">, memref<4x32xf16, "spad">
// CHECK:      tile.dequant %{{.*}} {rows = 1 : i64, cols = 64 : i64, format = "q8_0", blocks = "row"} : memref<1x64xf32, "spad">, memref<1x64xi8, "spad">, memref<1x2xf16, "spad">
