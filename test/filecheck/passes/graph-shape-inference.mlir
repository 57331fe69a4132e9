// RUN: infer-opt %s -p graph-shape-inference | filecheck %s
// RUN: not infer-opt %s -p 'graph-shape-inference{require-static=true}' 2>&1 | filecheck %s --check-prefix=STATIC

// graph-shape-inference replaces `?` result dimensions by the sizes the
// operands give, through the function, into its result types and into the
// results of calls to it. A `?` that comes from a `?` argument stays, and a
// declared static size is kept.

func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> tensor<?x?xf32> {
  %t = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<?x2xf32>
  %s = graph.reduce_sum %t {axes = array<i64: 1>} : (tensor<?x2xf32>) -> tensor<?x?xf32>
  %a = graph.add %s, %y : (tensor<?x?xf32>, tensor<3xf32>) -> tensor<?x?xf32>
  func.return %a : tensor<?x?xf32>
}

func.func @main(%x: tensor<2x3xf32>, %y: tensor<3xf32>, %d: tensor<?x4xf32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %0 = func.call @f(%x, %y) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<?x?xf32>
  %1 = graph.exp %0 : (tensor<?x?xf32>) -> tensor<?x?xf32>
  %2 = graph.relu %d : (tensor<?x4xf32>) -> tensor<?x?xf32>
  func.return %1, %2 : tensor<?x?xf32>, tensor<?x?xf32>
}

// CHECK-LABEL: func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> tensor<3x3xf32> {
// CHECK-NEXT:    %t = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:    %s = graph.reduce_sum %t {axes = array<i64: 1>} : (tensor<3x2xf32>) -> tensor<3x1xf32>
// CHECK-NEXT:    %a = graph.add %s, %y : (tensor<3x1xf32>, tensor<3xf32>) -> tensor<3x3xf32>
// CHECK-NEXT:    func.return %a : tensor<3x3xf32>
// CHECK-LABEL: func.func @main(%x: tensor<2x3xf32>, %y: tensor<3xf32>, %d: tensor<?x4xf32>) -> (tensor<3x3xf32>, tensor<?x4xf32>) {
// CHECK-NEXT:    %0 = func.call @f(%x, %y) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3x3xf32>
// CHECK-NEXT:    %1 = graph.exp %0 : (tensor<3x3xf32>) -> tensor<3x3xf32>
// CHECK-NEXT:    %2 = graph.relu %d : (tensor<?x4xf32>) -> tensor<?x4xf32>
// CHECK-NEXT:    func.return %1, %2 : tensor<3x3xf32>, tensor<?x4xf32>

// STATIC: {{^}}{{.*}}graph-shape-inference.mlir:19:{{[0-9]+}}: error: 'graph.relu' op result #0 still has a dynamic shape tensor<?x4xf32> after shape inference
