// RUN: infer-opt %s -p graph-fold-double-transpose | filecheck %s
// RUN: infer-opt %s -p 'graph-fold-double-transpose{erase-dead=false}' | filecheck %s --check-prefix=KEEP

// The worked example of docs/writing-a-pass.md. A pair of transposes that
// cancels disappears; a pair that does not becomes one transpose; the inner
// transpose is erased once unused, unless erase-dead=false.

func.func @cancel(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0 = graph.transpose %x {perm = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %1 = graph.transpose %0 {perm = array<i64: 2, 0, 1>} : (tensor<3x4x2xf32>) -> tensor<2x3x4xf32>
  func.return %1 : tensor<2x3x4xf32>
}

func.func @compose(%x: tensor<2x3x4xf32>) -> tensor<4x3x2xf32> {
  %0 = graph.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %1 = graph.transpose %0 {perm = array<i64: 2, 0, 1>} : (tensor<3x2x4xf32>) -> tensor<4x3x2xf32>
  func.return %1 : tensor<4x3x2xf32>
}

func.func @three(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %1 = graph.transpose %0 {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %2 = graph.transpose %1 {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %2 : tensor<3x2xf32>
}

// CHECK-LABEL: func.func @cancel(
// CHECK-NEXT:    func.return %x : tensor<2x3x4xf32>
// CHECK-LABEL: func.func @compose(
// CHECK-NEXT:    %0 = graph.transpose %x {perm = array<i64: 2, 1, 0>} : (tensor<2x3x4xf32>) -> tensor<4x3x2xf32>
// CHECK-NEXT:    func.return %0 : tensor<4x3x2xf32>
// CHECK-LABEL: func.func @three(
// CHECK-NEXT:    %0 = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:    func.return %0 : tensor<3x2xf32>

// KEEP-LABEL: func.func @cancel(
// KEEP-NEXT:    %0 = graph.transpose %x {perm = array<i64: 1, 2, 0>}
// KEEP-NEXT:    func.return %x : tensor<2x3x4xf32>
