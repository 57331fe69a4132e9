// Not a test (lit skips Inputs/): an IR file with an invalid UTF-8 byte on line 3.
func.func @f() {
  // café
  func.return
}
