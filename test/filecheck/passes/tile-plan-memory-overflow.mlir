// RUN: not infer-opt %s -p tile-plan-memory 2>&1 | filecheck %s
// RUN: not infer-opt %S/Inputs/tile-plan-memory-acc-overflow.mlir -p 'tile-plan-memory{target=edge}' 2>&1 | filecheck %s --check-prefix=ACC
// RUN: infer-opt %S/Inputs/tile-plan-memory-acc-overflow.mlir -p 'tile-plan-memory{target=server}' | filecheck %s --check-prefix=SERVER
// RUN: not infer-opt %S/Inputs/tile-plan-memory-no-target.mlir -p tile-plan-memory 2>&1 | filecheck %s --check-prefix=NOTARGET

// Each buffer fits the 256 KiB edge scratchpad on its own (the alloc verifier
// accepts them), but both are live in the same loop nest: the planner names the
// alloc that ends past the capacity.

builtin.module attributes {tile.target = "edge"} {
  func.func @main(%x: memref<128x640xbf16, "dram">) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    scf.for %i = %c0 to %c2 step %c1 {
      %a = tile.alloc : memref<128x640xbf16, "spad">
      %b = tile.alloc : memref<128x640xbf16, "spad">
      tile.dma %x[%c0, %c0], %a[%c0, %c0] {shape = array<i64: 128, 640>} : memref<128x640xbf16, "dram">, memref<128x640xbf16, "spad">
      tile.dma %x[%c0, %c0], %b[%c0, %c0] {shape = array<i64: 128, 640>} : memref<128x640xbf16, "dram">, memref<128x640xbf16, "spad">
    }
    func.return
  }
}

// CHECK:     tile-plan-memory-overflow.mlir:17:7: error: 'tile.alloc' op does not fit: spad buffer of 163840 bytes would need bytes [163840, 327680) but the scratchpad of target 'edge' holds 262144 bytes (327680 bytes of scratchpad buffers are live at the same time)
// CHECK-NOT: Traceback

// ACC:       tile-plan-memory-acc-overflow.mlir:9:5: error: 'tile.alloc' op does not fit: acc buffer of 40960 bytes (2 buffers) would need bytes [40960, 81920) but the accumulator of target 'edge' holds 65536 bytes (81920 bytes of accumulator buffers are live at the same time)

// SERVER:    tile.target = "server"
// SERVER:    %a = tile.alloc {buffers = 2 : i64, offset = 0 : i64}
// SERVER:    %b = tile.alloc {buffers = 2 : i64, offset = 40960 : i64}

// NOTARGET:  tile-plan-memory-no-target.mlir:1:1: error: tile-plan-memory: no target: pass target=edge|server|<config.toml> or set the module attribute tile.target
