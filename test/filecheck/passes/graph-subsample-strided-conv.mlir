// RUN: infer-opt %s -p graph-subsample-strided-conv | filecheck %s

// A strided 1x1 convolution becomes a strided slice (paid once) and a stride-1 1x1
// convolution; padded or larger-kernel strided convolutions stay as they are.

// CHECK-LABEL: func.func @pointwise
// CHECK-NEXT:    %[[S:.*]] = graph.slice %x {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 1, 8, 7, 7>, steps = array<i64: 1, 1, 2, 2>} : (tensor<1x8x8x8xf32>) -> tensor<1x8x4x4xf32>
// CHECK-NEXT:    %[[C:.*]] = graph.conv2d %[[S]], %w, %b : (tensor<1x8x4x4xf32>, tensor<16x8x1x1xf32>, tensor<16xf32>) -> tensor<1x16x4x4xf32>
// CHECK-NEXT:    func.return %[[C]]
func.func @pointwise(%x: tensor<1x8x8x8xf32>, %w: tensor<16x8x1x1xf32>, %b: tensor<16xf32>) -> tensor<1x16x4x4xf32> {
  %y = graph.conv2d %x, %w, %b {stride = array<i64: 2, 2>} : (tensor<1x8x8x8xf32>, tensor<16x8x1x1xf32>, tensor<16xf32>) -> tensor<1x16x4x4xf32>
  func.return %y : tensor<1x16x4x4xf32>
}

// CHECK-LABEL: func.func @three_by_three
// CHECK-NOT:     graph.slice
// CHECK:         graph.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>, stride = array<i64: 2, 2>}
func.func @three_by_three(%x: tensor<1x8x8x8xf32>, %w: tensor<16x8x3x3xf32>) -> tensor<1x16x4x4xf32> {
  %y = graph.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>, stride = array<i64: 2, 2>} : (tensor<1x8x8x8xf32>, tensor<16x8x3x3xf32>) -> tensor<1x16x4x4xf32>
  func.return %y : tensor<1x16x4x4xf32>
}

// CHECK-LABEL: func.func @padded_pointwise
// CHECK-NOT:     graph.slice
func.func @padded_pointwise(%x: tensor<1x8x8x8xf32>, %w: tensor<16x8x1x1xf32>) -> tensor<1x16x5x5xf32> {
  %y = graph.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>, stride = array<i64: 2, 2>} : (tensor<1x8x8x8xf32>, tensor<16x8x1x1xf32>) -> tensor<1x16x5x5xf32>
  func.return %y : tensor<1x16x5x5xf32>
}

// CHECK-LABEL: func.func @uneven
// CHECK-NEXT:    graph.slice %x {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 2, 4, 7, 10>, steps = array<i64: 1, 1, 3, 3>} : (tensor<2x4x9x11xf32>) -> tensor<2x4x3x4xf32>
func.func @uneven(%x: tensor<2x4x9x11xf32>, %w: tensor<6x4x1x1xf32>) -> tensor<2x6x3x4xf32> {
  %y = graph.conv2d %x, %w {stride = array<i64: 3, 3>} : (tensor<2x4x9x11xf32>, tensor<6x4x1x1xf32>) -> tensor<2x6x3x4xf32>
  func.return %y : tensor<2x6x3x4xf32>
}
