// Not a test (lit skips Inputs/): the second chunk has an ill-typed op on line 9.
func.func @ok() {
  func.return
}

// -----

func.func @bad(%x: tensor<2xf32>) {
  %0 = graph.relu %x : (tensor<2xf32>) -> tensor<3xf32>
  func.return
}
