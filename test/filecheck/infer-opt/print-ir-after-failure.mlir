// RUN: not infer-opt %s -p 'graph-optimize{require-static=true}' --print-ir-after-failure 2>&1 | filecheck %s
// RUN: not infer-opt %s -p 'graph-optimize{require-static=true}' 2>&1 | filecheck %s --check-prefix=PLAIN

// --print-ir-after-failure (mlir-opt's --mlir-print-ir-after-failure) prints the
// module as the failing pass left it, on stderr, before the error: here
// graph-canonicalize (the first stage of graph-optimize) has removed the
// transpose pair and graph-shape-inference has refined %z's type and the
// function's result type before it fails on %e, which stays dynamic.

func.func @main(%x: tensor<?x3xf32>, %y: tensor<2x3xf32>) -> (tensor<?x3xf32>, tensor<?x2xf32>) {
  %t = graph.transpose %y {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %u = graph.transpose %t {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %e = graph.exp %x : (tensor<?x3xf32>) -> tensor<?x3xf32>
  %z = graph.transpose %u {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<?x2xf32>
  func.return %e, %z : tensor<?x3xf32>, tensor<?x2xf32>
}

// CHECK:      // IR after the failure of graph-shape-inference (in graph-optimize):
// CHECK-NEXT: builtin.module {
// CHECK-NEXT:   func.func @main(%x: tensor<?x3xf32>, %y: tensor<2x3xf32>) -> (tensor<?x3xf32>, tensor<3x2xf32>) {
// CHECK-NEXT:     %e = graph.exp %x : (tensor<?x3xf32>) -> tensor<?x3xf32>
// CHECK-NEXT:     %z = graph.transpose %y {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:     func.return %e, %z : tensor<?x3xf32>, tensor<3x2xf32>
// CHECK-NEXT:   }
// CHECK-NEXT: }
// CHECK-NEXT: print-ir-after-failure.mlir:13:3: error: 'graph.exp' op result #0 still has a dynamic shape tensor<?x3xf32> after shape inference

// PLAIN-NOT: builtin.module
// PLAIN:     print-ir-after-failure.mlir:13:3: error: 'graph.exp' op result #0 still has a dynamic shape
// PLAIN-NOT: builtin.module
