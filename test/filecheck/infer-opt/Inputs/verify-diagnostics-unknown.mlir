// Not a test (lit skips Inputs/): a pass option the pass refuses when it runs is
// an error without a location.
// expected-error @unknown {{graph-constant-fold: max-elements (-1) and inline-limit (16) must be >= 0}}
func.func @f() {
  func.return
}
