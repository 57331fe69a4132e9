// RUN: infer-opt %s -p graph-lower-runtime-conv | filecheck %s

// A convolution whose weight is a function argument becomes strided slices of the padded
// input (one per kernel tap, in the weight's (kh, kw) order), their concat, and one matmul of
// the weight as [G, O/G, C/G KH KW] with the columns as [G, C/G KH KW, N OH OW]; a
// convolution of a compile-time weight stays as it is.

// CHECK-LABEL: func.func @runtime_weight
// CHECK-NEXT:    %[[P:.*]] = graph.pad %x {pads = array<i64: 0, 0, 1, 0, 0, 0, 1, 0>} : (tensor<1x4x5x6xf32>) -> tensor<1x4x7x6xf32>
// CHECK-NEXT:    %[[T0:.*]] = graph.slice %[[P]] {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 1, 4, 5, 5>, steps = array<i64: 1, 1, 2, 2>} : (tensor<1x4x7x6xf32>) -> tensor<1x4x3x3xf32>
// CHECK:         graph.slice %[[P]] {starts = array<i64: 0, 0, 2, 1>, ends = array<i64: 1, 4, 7, 6>, steps = array<i64: 1, 1, 2, 2>}
// CHECK-NOT:     graph.slice
// CHECK:         %[[COLS:.*]] = graph.concat {{.*}} {axis = 2 : i64} : ({{.*}}) -> tensor<1x4x6x9xf32>
// CHECK:         graph.transpose {{.*}} {perm = array<i64: 1, 2, 0, 3>} : (tensor<1x2x12x9xf32>) -> tensor<2x12x1x9xf32>
// CHECK:         %[[W:.*]] = graph.reshape %w : (tensor<6x2x3x2xf32>) -> tensor<2x3x12xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.matmul %[[W]], %{{.*}} : (tensor<2x3x12xf32>, tensor<2x12x9xf32>) -> tensor<2x3x9xf32>
// CHECK:         graph.add %{{.*}}, %{{.*}} : (tensor<1x6x3x3xf32>, tensor<1x6x1x1xf32>) -> tensor<1x6x3x3xf32>
// CHECK-NOT:     graph.conv2d
func.func @runtime_weight(%x: tensor<1x4x5x6xf32>, %w: tensor<6x2x3x2xf32>, %b: tensor<6xf32>) -> tensor<1x6x3x3xf32> {
  %y = graph.conv2d %x, %w, %b {stride = array<i64: 2, 2>, padding = array<i64: 1, 0, 1, 0>, groups = 2 : i64} : (tensor<1x4x5x6xf32>, tensor<6x2x3x2xf32>, tensor<6xf32>) -> tensor<1x6x3x3xf32>
  func.return %y : tensor<1x6x3x3xf32>
}

// CHECK-LABEL: func.func @compile_time_weight
// CHECK-NOT:     graph.matmul
// CHECK:         graph.conv2d %x, %w
func.func @compile_time_weight(%x: tensor<1x4x5x6xf32>) -> tensor<1x6x3x4xf32> {
  %w = graph.constant dense<0.5> : tensor<6x4x3x3xf32>
  %y = graph.conv2d %x, %w : (tensor<1x4x5x6xf32>, tensor<6x4x3x3xf32>) -> tensor<1x6x3x4xf32>
  func.return %y : tensor<1x6x3x4xf32>
}
