// RUN: infer-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Verifier messages of graph.kernel and graph.yield. One split-input-file chunk
// per case; each CHECK is the message the verifier gives, first in the output.

// -----

// Unknown kind.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = graph.kernel "fancy" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    graph.yield %a : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}
// CHECK: unknown kernel kind "fancy" (expected one of "matmul", "conv", "norm", "softmax", "attention", "pool", "elementwise")
// CHECK-NEXT: "builtin.module"() ({

// -----

// Block arguments must match the operands.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf16>):
    %e = graph.cast %a : (tensor<4xf16>) -> tensor<4xf32>
    graph.yield %e : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}
// CHECK: the body's arguments must match the operands: got (tensor<4xf16>), operands are (tensor<4xf32>)
// CHECK-NEXT: "builtin.module"() ({

// -----

// One block argument per operand.
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %r = graph.kernel "elementwise" (%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %e = graph.exp %a : (tensor<4xf32>) -> tensor<4xf32>
    graph.yield %e : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}
// CHECK: the body's arguments must match the operands: got (tensor<4xf32>), operands are (tensor<4xf32>, tensor<4xf32>)
// CHECK-NEXT: "builtin.module"() ({

// -----

// Yielded types must be the results.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf16> {
  %r = graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> tensor<4xf16> {
  ^bb0(%a: tensor<4xf32>):
    %e = graph.exp %a : (tensor<4xf32>) -> tensor<4xf32>
    graph.yield %e : tensor<4xf32>
  }
  func.return %r : tensor<4xf16>
}
// CHECK: graph.yield returns (tensor<4xf32>) but the kernel's results are (tensor<4xf16>)
// CHECK-NEXT: "builtin.module"() ({

// -----

// The body must end with graph.yield.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %e = graph.exp %a : (tensor<4xf32>) -> tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}
// (a parse error: the region gets no implicit terminator, so no module is printed)
// CHECK: Operation graph.exp terminates block in single-block region but is not a terminator
// CHECK-NEXT: // -{{-+}}

// -----

// At least one result.
func.func @f(%x: tensor<4xf32>) {
  graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> () {
  ^bb0(%a: tensor<4xf32>):
    graph.yield
  }
  func.return
}
// CHECK: a kernel must have at least one result
// CHECK-NEXT: "builtin.module"() ({

// -----

// A matmul kernel needs its anchor.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = graph.kernel "matmul" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %e = graph.relu %a : (tensor<4xf32>) -> tensor<4xf32>
    graph.yield %e : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}
// CHECK: a "matmul" kernel must hold exactly one anchor op (graph.matmul or graph.linear), found none
// CHECK-NEXT: "builtin.module"() ({

// -----

// Exactly one anchor.
func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = graph.kernel "matmul" (%x) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>):
    %m = graph.matmul %a, %a : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %n = graph.matmul %m, %a : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    graph.yield %n : tensor<4x4xf32>
  }
  func.return %r : tensor<4x4xf32>
}
// CHECK: a "matmul" kernel must hold exactly one anchor op (graph.matmul or graph.linear), found graph.matmul, graph.matmul
// CHECK-NEXT: "builtin.module"() ({

// -----

// The anchor must be of the kernel's kind.
func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = graph.kernel "norm" (%x) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>):
    %s = graph.softmax %a : (tensor<4x4xf32>) -> tensor<4x4xf32>
    graph.yield %s : tensor<4x4xf32>
  }
  func.return %r : tensor<4x4xf32>
}
// CHECK: a "norm" kernel must hold exactly one anchor op (graph.layer_norm or graph.rms_norm), found graph.softmax
// CHECK-NEXT: "builtin.module"() ({

// -----

// An elementwise kernel has no anchor.
func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = graph.kernel "elementwise" (%x) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>):
    %s = graph.softmax %a : (tensor<4x4xf32>) -> tensor<4x4xf32>
    graph.yield %s : tensor<4x4xf32>
  }
  func.return %r : tensor<4x4xf32>
}
// CHECK: an "elementwise" kernel holds no anchor op, found graph.softmax
// CHECK-NEXT: "builtin.module"() ({

// -----

// Only the anchor, elementwise ops and constants.
func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = graph.kernel "elementwise" (%x) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>):
    %t = graph.transpose %a {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    graph.yield %t : tensor<4x4xf32>
  }
  func.return %r : tensor<4x4xf32>
}
// CHECK: graph.transpose cannot be part of a kernel (only its anchor, elementwise ops and graph.constant)
// CHECK-NEXT: "builtin.module"() ({

// -----

// The region is isolated from above.
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %r = graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %s = graph.add %a, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    graph.yield %s : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}
// CHECK: Operation using value defined out of its IsolatedFromAbove parent: AddOp(%s = graph.add %a, %y
// CHECK-NEXT: "builtin.module"() ({

// -----

// graph.yield only terminates a graph.kernel.
func.func @f(%x: tensor<4xf32>) {
  graph.yield %x : tensor<4xf32>
}
// CHECK: 'graph.yield' expects parent op 'graph.kernel'
// CHECK-NEXT: "builtin.module"() ({

// -----

// graph.yield is the last op.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    graph.yield %a : tensor<4xf32>
    %e = graph.exp %a : (tensor<4xf32>) -> tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}
// CHECK: 'graph.yield' must be the last operation in its parent block
// CHECK-NEXT: "builtin.module"() ({

// -----

// A single block.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = graph.kernel "elementwise" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    graph.yield %a : tensor<4xf32>
  ^bb1(%b: tensor<4xf32>):
    graph.yield %b : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}
// CHECK: Region 'body' at position 0 expected a single block, but got 2 blocks
// CHECK-NEXT: "builtin.module"() ({
