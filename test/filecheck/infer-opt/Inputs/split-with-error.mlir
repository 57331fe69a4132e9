// Not a test (lit skips Inputs/): three chunks, the second has an ill-typed op on line 9.
func.func @ok() {
  func.return
}

// -----

func.func @bad(%x: tensor<2xf32>) {
  %0 = graph.relu %x : (tensor<2xf32>) -> tensor<3xf32>
  func.return
}

// -----

func.func @after(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = graph.neg %x : (tensor<2xf32>) -> tensor<2xf32>
  %1 = graph.neg %0 : (tensor<2xf32>) -> tensor<2xf32>
  func.return %1 : tensor<2xf32>
}
