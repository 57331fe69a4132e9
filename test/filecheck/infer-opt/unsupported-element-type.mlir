// RUN: infer-opt %s --split-input-file --verify-diagnostics
// RUN: not infer-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=LOC

// Element types the graph level has no semantics for are rejected by every op.

func.func @f(%x: tensor<2xf32>) -> tensor<2xindex> {
  // LOC: unsupported-element-type.mlir:[[# @LINE + 2]]:3: error: 'graph.cast' op result #0 has element type index
  // expected-error @+1 {{result #0 has element type index, which the graph level does not support (supported: f64, f32, f16, bf16, i1, i8}}
  %0 = graph.cast %x : (tensor<2xf32>) -> tensor<2xindex>
  func.return %0 : tensor<2xindex>
}

// -----

func.func @g(%x: tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>> {
  // expected-error @+1 {{operand #0 has element type complex<f32>, which the graph level does not support}}
  %0 = graph.neg %x : (tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>>
  func.return %0 : tensor<2xcomplex<f32>>
}
