// RUN: infer-opt %s --split-input-file --verify-diagnostics | filecheck %s

// `?` dimensions: allowed in op results (refined by graph-shape-inference),
// not in graph.weight types nor in reshape targets. The chunks that verify are
// printed (CHECK), the others give the expected errors.

func.func @f(%x: tensor<2x3xf32>) -> tensor<?x3xf32> {
  %0 = graph.exp %x : (tensor<2x3xf32>) -> tensor<?x3xf32>
  func.return %0 : tensor<?x3xf32>
}
// CHECK: %0 = graph.exp %x : (tensor<2x3xf32>) -> tensor<?x3xf32>

// -----

// a weight has a static shape
builtin.module attributes {graph.weights = "none.safetensors"} {
  func.func @f() {
    // expected-error @+1 {{a weight must have a static shape}}
    %0 = graph.weight @w : tensor<?x4xf32>
    func.return
  }
}

// -----

// reshape needs a static target shape
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{the result shape must be static, got ?}}
  %0 = graph.reshape %x : (tensor<2x3xf32>) -> tensor<?xf32>
  func.return
}

// -----

// a `?` result dimension must still agree with a static one elsewhere
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{result #0 has shape ?x3 but the operands and attributes give 3x2}}
  %0 = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<?x3xf32>
  func.return
}
