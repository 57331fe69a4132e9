// RUN: infer-opt %s --split-input-file --verify-diagnostics

// Verifier messages of graph.kernel and graph.yield. One split-input-file chunk
// per case; the expected-error annotation is the message the verifier gives at the op below it.

// -----

// Unknown kind.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unknown kernel kind "fancy" (expected one of "matmul", "conv", "norm", "softmax", "attention", "pool", "elementwise")}}
  %r = graph.kernel "fancy" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    graph.yield %a : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}

// -----

// Block arguments must match the operands.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{the body's arguments must match the operands: got (tensor<4xf16>), operands are (tensor<4xf32>)}}
  %r = graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf16>):
    %e = graph.cast %a : (tensor<4xf16>) -> tensor<4xf32>
    graph.yield %e : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}

// -----

// One block argument per operand.
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{the body's arguments must match the operands: got (tensor<4xf32>), operands are (tensor<4xf32>, tensor<4xf32>)}}
  %r = graph.kernel "elementwise" (%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %e = graph.exp %a : (tensor<4xf32>) -> tensor<4xf32>
    graph.yield %e : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}

// -----

// Yielded types must be the results.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @+1 {{graph.yield returns (tensor<4xf32>) but the kernel's results are (tensor<4xf16>)}}
  %r = graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> tensor<4xf16> {
  ^bb0(%a: tensor<4xf32>):
    %e = graph.exp %a : (tensor<4xf32>) -> tensor<4xf32>
    graph.yield %e : tensor<4xf32>
  }
  func.return %r : tensor<4xf16>
}

// -----

// The body must end with graph.yield.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'graph.kernel' op the body must end with graph.yield}}
  %r = graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %e = graph.exp %a : (tensor<4xf32>) -> tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}

// -----

// At least one result.
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{a kernel must have at least one result}}
  graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> () {
  ^bb0(%a: tensor<4xf32>):
    graph.yield
  }
  func.return
}

// -----

// A matmul kernel needs its anchor.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{a "matmul" kernel must hold exactly one anchor op (graph.matmul or graph.linear or graph.matmul_integer or graph.linear_integer), found none}}
  %r = graph.kernel "matmul" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %e = graph.relu %a : (tensor<4xf32>) -> tensor<4xf32>
    graph.yield %e : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}

// -----

// Exactly one anchor.
func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{a "matmul" kernel must hold exactly one anchor op (graph.matmul or graph.linear or graph.matmul_integer or graph.linear_integer), found graph.matmul, graph.matmul}}
  %r = graph.kernel "matmul" (%x) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>):
    %m = graph.matmul %a, %a : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %n = graph.matmul %m, %a : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    graph.yield %n : tensor<4x4xf32>
  }
  func.return %r : tensor<4x4xf32>
}

// -----

// The anchor must be of the kernel's kind.
func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{a "norm" kernel must hold exactly one anchor op (graph.layer_norm or graph.rms_norm), found graph.softmax}}
  %r = graph.kernel "norm" (%x) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>):
    %s = graph.softmax %a : (tensor<4x4xf32>) -> tensor<4x4xf32>
    graph.yield %s : tensor<4x4xf32>
  }
  func.return %r : tensor<4x4xf32>
}

// -----

// An elementwise kernel has no anchor.
func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{an "elementwise" kernel holds no anchor op, found graph.softmax}}
  %r = graph.kernel "elementwise" (%x) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>):
    %s = graph.softmax %a : (tensor<4x4xf32>) -> tensor<4x4xf32>
    graph.yield %s : tensor<4x4xf32>
  }
  func.return %r : tensor<4x4xf32>
}

// -----

// Only the anchor, elementwise ops and constants.
func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{graph.transpose cannot be part of a kernel (only its anchor, elementwise ops and graph.constant)}}
  %r = graph.kernel "elementwise" (%x) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>):
    %t = graph.transpose %a {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    graph.yield %t : tensor<4x4xf32>
  }
  func.return %r : tensor<4x4xf32>
}

// -----

// The region is isolated from above.
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{Operation using value defined out of its IsolatedFromAbove parent: AddOp(%s = graph.add %a, %y}}
  %r = graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %s = graph.add %a, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    graph.yield %s : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}

// -----

// graph.yield only terminates a graph.kernel.
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'graph.yield' expects parent op 'graph.kernel'}}
  graph.yield %x : tensor<4xf32>
}

// -----

// graph.yield is the last op.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'graph.kernel' op the body must end with graph.yield}}
  %r = graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    graph.yield %a : tensor<4xf32>
    %e = graph.exp %a : (tensor<4xf32>) -> tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}

// -----

// A single block.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{Region 'body' at position 0 expected a single block, but got 2 blocks}}
  %r = graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    graph.yield %a : tensor<4xf32>
  ^bb1(%b: tensor<4xf32>):
    graph.yield %b : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}

// -----

// A "matmul" kernel's norm epilogue normalises the last dim of the value just before it.
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %g: tensor<4x16xf32>) -> tensor<2x4x16xf32> {
  // expected-error @+1 {{'graph.kernel' op a "matmul" kernel's norm epilogue must normalise the last dim of the value just before it and be the kernel's result (after that value, if it is a result too)}}
  %r = graph.kernel "matmul" (%x, %w, %g) : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<4x16xf32>) -> tensor<2x4x16xf32> {
  ^bb0(%a: tensor<2x4x8xf32>, %wa: tensor<16x8xf32>, %ga: tensor<4x16xf32>):
    %h = graph.linear %a, %wa : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %n = graph.rms_norm %h, %ga {axis = -2 : i64} : (tensor<2x4x16xf32>, tensor<4x16xf32>) -> tensor<2x4x16xf32>
    graph.yield %n : tensor<2x4x16xf32>
  }
  func.return %r : tensor<2x4x16xf32>
}

// -----

// A norm elsewhere in a "matmul" kernel is a second anchor.
func.func @f(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %g: tensor<16xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'graph.kernel' op a "matmul" kernel must hold exactly one anchor op (graph.matmul or graph.linear or graph.matmul_integer or graph.linear_integer), found graph.linear, graph.rms_norm}}
  %r = graph.kernel "matmul" (%x, %w, %g) : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32> {
  ^bb0(%a: tensor<4x8xf32>, %wa: tensor<16x8xf32>, %ga: tensor<16xf32>):
    %h = graph.linear %a, %wa : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
    %n = graph.rms_norm %h, %ga : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
    %e = graph.exp %n : (tensor<4x16xf32>) -> tensor<4x16xf32>
    graph.yield %e : tensor<4x16xf32>
  }
  func.return %r : tensor<4x16xf32>
}
