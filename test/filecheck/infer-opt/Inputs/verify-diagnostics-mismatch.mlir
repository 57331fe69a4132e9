// Not a test (lit skips Inputs/): every way annotations and diagnostics can disagree.
func.func @not_produced(%x: tensor<2xf32>) {
  // expected-error @+1 {{this error does not happen}}
  %0 = graph.relu %x : (tensor<2xf32>) -> tensor<2xf32>
  func.return
}

// -----

func.func @unexpected(%x: tensor<2xf32>) {
  %0 = graph.relu %x : (tensor<2xf32>) -> tensor<3xf32>
  func.return
}

// -----

func.func @wrong_text(%x: tensor<2xf32>) {
  // expected-error @+1 {{has shape 4}}
  %0 = graph.relu %x : (tensor<2xf32>) -> tensor<3xf32>
  func.return
}

// -----

func.func @wrong_line(%x: tensor<2xf32>) {
  // expected-error @+2 {{has shape 3 but the operands and attributes give 2}}
  %0 = graph.relu %x : (tensor<2xf32>) -> tensor<3xf32>
  func.return
}

// -----

func.func @wrong_kind(%x: tensor<2xf32>) {
  // expected-warning @+1 {{has shape 3 but the operands and attributes give 2}}
  %0 = graph.relu %x : (tensor<2xf32>) -> tensor<3xf32>
  func.return
}
