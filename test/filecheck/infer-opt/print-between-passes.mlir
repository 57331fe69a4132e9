// RUN: infer-opt %s -p 'graph-fold-double-transpose{erase-dead=false},graph-dce' --print-between-passes 2>&1 | filecheck %s

// --print-between-passes shows the IR after each pass but the last (whose
// result is the output); pass options apply to their own pass only.

func.func @cancel(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %1 = graph.transpose %0 {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  func.return %1 : tensor<2x3xf32>
}

// CHECK:      IR after graph-fold-double-transpose:
// CHECK-NEXT: builtin.module {
// CHECK-NEXT:   func.func @cancel(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
// CHECK-NEXT:     %0 = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:     func.return %x : tensor<2x3xf32>
// CHECK-NEXT:   }
// CHECK-NEXT: }
// CHECK-NOT:  IR after
// CHECK:      builtin.module {
// CHECK-NEXT:   func.func @cancel(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
// CHECK-NEXT:     func.return %x : tensor<2x3xf32>
// CHECK-NEXT:   }
// CHECK-NEXT: }
