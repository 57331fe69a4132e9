func.func @main() {
  %a = tile.alloc : memref<16x16xf32, "acc">
  func.return
}
