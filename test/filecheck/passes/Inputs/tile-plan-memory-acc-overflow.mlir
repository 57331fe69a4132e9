// Two double-buffered 20 KiB accumulator tiles of one loop nest: 80 KiB > the
// 64 KiB edge accumulator. No tile.target: the pass option names the target.
func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  scf.for %i = %c0 to %c2 step %c1 {
    %a = tile.alloc {buffers = 2 : i64} : memref<80x64xf32, "acc">
    %b = tile.alloc {buffers = 2 : i64} : memref<80x64xf32, "acc">
    tile.fill %a[%c0, %c0] {rows = 80 : i64, cols = 64 : i64, value = 0.0 : f32} : memref<80x64xf32, "acc">
    tile.fill %b[%c0, %c0] {rows = 80 : i64, cols = 64 : i64, value = 0.0 : f32} : memref<80x64xf32, "acc">
  }
  func.return
}
