// RUN: infer-opt < %s | filecheck %s
// RUN: infer-opt - < %s | filecheck %s
// RUN: cat %s | infer-opt -p graph-canonicalize | filecheck %s --check-prefix=CANON

// Input comes from stdin when no file (or "-") is given, as with mlir-opt.

// CHECK: graph.neg
// CANON-NOT: graph.neg
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = graph.neg %x : (tensor<3xf32>) -> tensor<3xf32>
  %1 = graph.neg %0 : (tensor<3xf32>) -> tensor<3xf32>
  func.return %1 : tensor<3xf32>
}
