// RUN: infer-opt %s -p canonicalize | filecheck %s

// The graph patterns are attached to the ops as canonicalization patterns, so
// xDSL's own `canonicalize` applies them too (as mlir-opt's would).

// CHECK-LABEL: func.func @double_transpose
// CHECK-NEXT:    func.return %x : tensor<4x8xf32>
func.func @double_transpose(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %t = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %u = graph.transpose %t {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  func.return %u : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @relu_relu
// CHECK-NEXT:    %{{.*}} = graph.relu %x
// CHECK-NEXT:    func.return
func.func @relu_relu(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  %b = graph.relu %a : (tensor<4xf32>) -> tensor<4xf32>
  func.return %b : tensor<4xf32>
}
