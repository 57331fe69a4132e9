// RUN: infer-opt %s | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | infer-opt | filecheck %s

// Data movement (reshape, transpose, concat, slice with positive and negative
// steps, broadcast, pad), reductions and top-k in their custom form. The defaults
// (reductions: axes = [] meaning all, keepdims = true; top_k: axis = -1, largest = true) are not printed.

func.func @shape(%x: tensor<2x3x4xf32>, %y: tensor<2x5x4xf32>, %s: tensor<3x1xi8>) {
  %0 = graph.reshape %x : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %1 = graph.reshape %x : (tensor<2x3x4xf32>) -> tensor<24xf32>
  %2 = graph.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %3 = graph.concat %x, %y, %x {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x5x4xf32>, tensor<2x3x4xf32>) -> tensor<2x11x4xf32>
  %4 = graph.concat %x {axis = -1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %5 = graph.slice %x {starts = array<i64: 0, 1, 0>, ends = array<i64: 2, 3, 4>, steps = array<i64: 1, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x2x2xf32>
  %6 = graph.slice %x {starts = array<i64: 1, 2, 3>, ends = array<i64: -1, -1, 0>, steps = array<i64: -1, -2, -1>} : (tensor<2x3x4xf32>) -> tensor<2x2x3xf32>
  %7 = graph.broadcast %s : (tensor<3x1xi8>) -> tensor<2x3x5xi8>
  %8 = graph.pad %x {pads = array<i64: 0, 1, 2, 0, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<2x4x7xf32>
  %9 = graph.pad %s {pads = array<i64: 1, 0, 1, 0>, value = -1.0 : f64} : (tensor<3x1xi8>) -> tensor<5x1xi8>
  func.return
}

func.func @reduce(%x: tensor<2x3x4xf32>, %i: tensor<5x6xi32>) {
  %0 = graph.reduce_sum %x : (tensor<2x3x4xf32>) -> tensor<1x1x1xf32>
  %1 = graph.reduce_sum %x {axes = array<i64: 1>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
  %2 = graph.reduce_mean %x {axes = array<i64: -1, 0>} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
  %3 = graph.reduce_max %i {axes = array<i64: 0>} : (tensor<5x6xi32>) -> tensor<1x6xi32>
  %4 = graph.reduce_min %i {keepdims = false} : (tensor<5x6xi32>) -> tensor<i32>
  %5 = graph.reduce_prod %x {axes = array<i64: 2>} : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
  %6 = graph.argmax %x {axes = array<i64: 1>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2x4xi64>
  %7 = graph.argmin %i {axes = array<i64: -1>} : (tensor<5x6xi32>) -> tensor<5x1xi64>
  %8 = graph.top_k %x {k = 2 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x2xi64>
  %9 = graph.top_k %i {k = 5 : i64, axis = 0 : i64, largest = false} : (tensor<5x6xi32>) -> tensor<5x6xi64>
  func.return
}

// CHECK:      builtin.module {
// CHECK-NEXT: func.func @shape(%x: tensor<2x3x4xf32>, %y: tensor<2x5x4xf32>, %s: tensor<3x1xi8>) {
// CHECK-NEXT: %0 = graph.reshape %x : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
// CHECK-NEXT: %1 = graph.reshape %x : (tensor<2x3x4xf32>) -> tensor<24xf32>
// CHECK-NEXT: %2 = graph.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK-NEXT: %3 = graph.concat %x, %y, %x {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x5x4xf32>, tensor<2x3x4xf32>) -> tensor<2x11x4xf32>
// CHECK-NEXT: %4 = graph.concat %x {axis = -1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: %5 = graph.slice %x {starts = array<i64: 0, 1, 0>, ends = array<i64: 2, 3, 4>, steps = array<i64: 1, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x2x2xf32>
// CHECK-NEXT: %6 = graph.slice %x {starts = array<i64: 1, 2, 3>, ends = array<i64: -1, -1, 0>, steps = array<i64: -1, -2, -1>} : (tensor<2x3x4xf32>) -> tensor<2x2x3xf32>
// CHECK-NEXT: %7 = graph.broadcast %s : (tensor<3x1xi8>) -> tensor<2x3x5xi8>
// CHECK-NEXT: %8 = graph.pad %x {pads = array<i64: 0, 1, 2, 0, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<2x4x7xf32>
// CHECK-NEXT: %9 = graph.pad %s {pads = array<i64: 1, 0, 1, 0>, value = -1.000000e+00 : f64} : (tensor<3x1xi8>) -> tensor<5x1xi8>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: func.func @reduce(%x: tensor<2x3x4xf32>, %i: tensor<5x6xi32>) {
// CHECK-NEXT: %0 = graph.reduce_sum %x : (tensor<2x3x4xf32>) -> tensor<1x1x1xf32>
// CHECK-NEXT: %1 = graph.reduce_sum %x {axes = array<i64: 1>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT: %2 = graph.reduce_mean %x {axes = array<i64: -1, 0>} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
// CHECK-NEXT: %3 = graph.reduce_max %i {axes = array<i64: 0>} : (tensor<5x6xi32>) -> tensor<1x6xi32>
// CHECK-NEXT: %4 = graph.reduce_min %i {keepdims = false} : (tensor<5x6xi32>) -> tensor<i32>
// CHECK-NEXT: %5 = graph.reduce_prod %x {axes = array<i64: 2>} : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
// CHECK-NEXT: %6 = graph.argmax %x {axes = array<i64: 1>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2x4xi64>
// CHECK-NEXT: %7 = graph.argmin %i {axes = array<i64: -1>} : (tensor<5x6xi32>) -> tensor<5x1xi64>
// CHECK-NEXT: %8 = graph.top_k %x {k = 2 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x2xi64>
// CHECK-NEXT: %9 = graph.top_k %i {k = 5 : i64, axis = 0 : i64, largest = false} : (tensor<5x6xi32>) -> tensor<5x6xi64>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: }
