// Not a test (lit skips Inputs/): an error with a note. Both accumulator tiles
// are live in the same loop and do not fit the edge accumulator together: the
// planner's error names the one that ends past the capacity, and a note the
// other one live at the same time.
func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  scf.for %i = %c0 to %c2 step %c1 {
    // expected-note @+1 {{live at the same time: acc buffer of 40960 bytes at [0, 40960)}}
    %a = tile.alloc {buffers = 2 : i64} : memref<80x64xf32, "acc">
    // expected-error @+1 {{'tile.alloc' op does not fit: acc buffer of 40960 bytes (2 buffers)}}
    %b = tile.alloc {buffers = 2 : i64} : memref<80x64xf32, "acc">
    tile.fill %a[%c0, %c0] {rows = 80 : i64, cols = 64 : i64, value = 0.0 : f32} : memref<80x64xf32, "acc">
    tile.fill %b[%c0, %c0] {rows = 80 : i64, cols = 64 : i64, value = 0.0 : f32} : memref<80x64xf32, "acc">
  }
  func.return
}
