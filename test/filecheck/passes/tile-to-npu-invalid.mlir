// RUN: not infer-opt %s --split-input-file -p tile-plan-memory,tile-to-npu 2>&1 | filecheck %s

// An index that is not an affine function of loop induction variables (i * i) is an error
// naming the op.

builtin.module attributes {tile.target = "edge"} {
  func.func @main(%x: memref<64x16xf32, "dram">, %y: memref<64x16xf32, "dram"> {tile.output}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %t = tile.alloc : memref<4x16xf32, "spad">
    scf.for %i = %c0 to %c4 step %c1 {
      %sq = arith.muli %i, %i : index
      tile.dma %x[%sq, %c0], %t[%c0, %c0] {shape = array<i64: 4, 16>} : memref<64x16xf32, "dram">, memref<4x16xf32, "spad">
      tile.dma %t[%c0, %c0], %y[%sq, %c0] {shape = array<i64: 4, 16>} : memref<4x16xf32, "spad">, memref<64x16xf32, "dram">
    }
    func.return
  }
}

// CHECK: tile-to-npu-invalid.mlir:13:{{[0-9]+}}: error: 'arith.muli' op tile-to-npu: index operand is not an affine function of loop induction variables

// -----

// The one scf.if tile-to-npu lowers is a first-iteration guard (`iv != lower bound` of an
// enclosing scf.for): any other condition is an error naming the op.

builtin.module attributes {tile.target = "edge"} {
  func.func @main(%x: memref<64x16xf32, "dram">, %y: memref<64x16xf32, "dram"> {tile.output}) {
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c64 = arith.constant 64 : index
    %t = tile.alloc : memref<4x16xf32, "spad">
    scf.for %i = %c0 to %c64 step %c4 {
      tile.dma %x[%i, %c0], %t[%c0, %c0] {shape = array<i64: 4, 16>} : memref<64x16xf32, "dram">, memref<4x16xf32, "spad">
      %second = arith.cmpi eq, %i, %c4 : index
      scf.if %second {
        tile.dma %t[%c0, %c0], %y[%i, %c0] {shape = array<i64: 4, 16>} : memref<4x16xf32, "spad">, memref<64x16xf32, "dram">
      }
    }
    func.return
  }
}

// CHECK: tile-to-npu-invalid.mlir:{{[0-9]+}}:7: error: 'scf.if' op tile-to-npu: scf.if is supported only on `iv != lower bound` of an enclosing scf.for
