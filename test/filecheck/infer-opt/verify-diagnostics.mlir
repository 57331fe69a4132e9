// RUN: infer-opt %s --split-input-file --verify-diagnostics -p 'graph-constant-fold,graph-shape-inference{require-static=true}' | filecheck %s
// RUN: infer-opt %S/Inputs/verify-diagnostics-notes.mlir --verify-diagnostics -p 'tile-plan-memory{target=edge}'
// RUN: infer-opt %S/Inputs/verify-diagnostics-unknown.mlir --verify-diagnostics -p 'graph-constant-fold{max-elements=-1}'
// RUN: not infer-opt %S/Inputs/verify-diagnostics-mismatch.mlir --split-input-file --verify-diagnostics 2>&1 | filecheck %s --check-prefix=MISMATCH

// --verify-diagnostics, as in mlir-opt: the diagnostics the input produces
// (parse and verifier errors, errors of the passes, the warnings and notes they
// emit) are matched against `expected-error` / `expected-warning` /
// `expected-note` annotations, which name the line by an offset (@+N, @-N),
// @above / @below (the nearest line that is not an annotation), the
// annotation's own line, or @unknown (no location). All matched: exit 0, and the
// chunks that succeed are printed as usual.

func.func @plus_one(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'graph.relu' op result #0 has shape 3x2 but the operands and attributes give 2x3}}
  %0 = graph.relu %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return
}

// -----

func.func @minus_one(%x: tensor<2x3xf32>) {
  %0 = graph.transpose %x {perm = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  func.return
  // expected-error @-2 {{perm [0, 0] is not a permutation of 0..1 (input rank 2)}}
}

// -----

func.func @above(%x: tensor<2xf32>) {
  %0 = graph.softmax %x {axis = 3 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  // expected-error @above {{axis 3 is out of range for a rank-1 operand}}
  func.return
}

// -----

func.func @below(%x: tensor<2xf32>) {
  // expected-error @below {{operands must be i1 tensors, got f32}}
  %0 = graph.and %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
  func.return
}

// -----

func.func @same_line(%x: tensor<2xf32>) {
  %0 = graph.neg %x : (tensor<2xf32>) -> tensor<3xf32> // expected-error {{has shape 3 but the operands and attributes give 2}}
  func.return
}

// -----

// A parse error.
func.func @parse(%x: tensor<2xf32>) {
  // expected-error @+1 {{Operation graph.frobnicate is not registered}}
  %0 = graph.frobnicate %x : (tensor<2xf32>) -> tensor<2xf32>
  func.return
}

// -----

// An error of a pass (graph-shape-inference{require-static=true}) and a warning
// of another (graph-constant-fold cannot fold an integer division by zero).
func.func @pass_diagnostics(%x: tensor<?x3xf32>) -> tensor<2xi32> {
  %a = graph.constant dense<[7, 8]> : tensor<2xi32>
  %z = graph.constant dense<0> : tensor<2xi32>
  // expected-warning @+1 {{not folded: integer division by zero}}
  %q = graph.div %a, %z : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
  // expected-error @+1 {{'graph.exp' op result #0 still has a dynamic shape tensor<?x3xf32> after shape inference}}
  %e = graph.exp %x : (tensor<?x3xf32>) -> tensor<?x3xf32>
  func.return %q : tensor<2xi32>
}

// -----

// A chunk without diagnostics is printed.
func.func @fine(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = graph.relu %x : (tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// CHECK:      func.func @fine(%x: tensor<2xf32>) -> tensor<2xf32> {
// CHECK-NEXT:   %0 = graph.relu %x

// Each disagreement is an error at the annotation or at the diagnostic, and the
// exit status is 1.
// MISMATCH-NOT: {{Traceback|internal error}}
// MISMATCH:     verify-diagnostics-mismatch.mlir:3:6: error: expected error "this error does not happen" was not produced at line 4
// MISMATCH:     verify-diagnostics-mismatch.mlir:11:3: error: unexpected error: 'graph.relu' op result #0 has shape 3 but the operands and attributes give 2
// MISMATCH:     verify-diagnostics-mismatch.mlir:19:3: error: unexpected error: 'graph.relu' op result #0 has shape 3
// MISMATCH:     verify-diagnostics-mismatch.mlir:18:6: error: expected error "has shape 4" was not produced at line 19
// MISMATCH:     verify-diagnostics-mismatch.mlir:27:3: error: unexpected error: 'graph.relu' op result #0 has shape 3
// MISMATCH:     verify-diagnostics-mismatch.mlir:26:6: error: expected error "has shape 3 but the operands and attributes give 2" was not produced at line 28
// MISMATCH:     verify-diagnostics-mismatch.mlir:34:6: error: 'error' diagnostic emitted when expecting a 'warning': 'graph.relu' op result #0 has shape 3
// MISMATCH-NOT: {{Traceback|internal error}}
