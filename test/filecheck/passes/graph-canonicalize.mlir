// RUN: infer-opt %s -p graph-canonicalize | filecheck %s

// graph-canonicalize on data movement, matmul and reductions: each rewrite
// replaces an op by an existing value of the same type, or by one simpler op.
// A slice with a negative step, a transpose that moves batch dimensions into a
// matmul and a real reduction are left alone.

func.func @transpose_pair_identity(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0 = graph.transpose %x {perm = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %1 = graph.transpose %0 {perm = array<i64: 2, 0, 1>} : (tensor<3x4x2xf32>) -> tensor<2x3x4xf32>
  func.return %1 : tensor<2x3x4xf32>
}

func.func @transpose_pair_composed(%x: tensor<2x3x4xf32>) -> tensor<4x3x2xf32> {
  %0 = graph.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %1 = graph.transpose %0 {perm = array<i64: 2, 0, 1>} : (tensor<3x2x4xf32>) -> tensor<4x3x2xf32>
  func.return %1 : tensor<4x3x2xf32>
}

func.func @transpose_identity(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.transpose %x {perm = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

func.func @transpose_inner_kept(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<3x2xf32>) {
  %0 = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %1 = graph.transpose %0 {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  func.return %1, %0 : tensor<2x3xf32>, tensor<3x2xf32>
}

func.func @reshape_chain(%x: tensor<2x3x4xf32>) -> (tensor<4x6xf32>, tensor<2x3x4xf32>) {
  %0 = graph.reshape %x : (tensor<2x3x4xf32>) -> tensor<24xf32>
  %1 = graph.reshape %0 : (tensor<24xf32>) -> tensor<4x6xf32>
  %2 = graph.reshape %1 : (tensor<4x6xf32>) -> tensor<2x3x4xf32>
  %3 = graph.reshape %x : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  func.return %1, %3 : tensor<4x6xf32>, tensor<2x3x4xf32>
}

func.func @broadcast(%x: tensor<3x1xf32>) -> (tensor<3x1xf32>, tensor<2x3x5xf32>) {
  %0 = graph.broadcast %x : (tensor<3x1xf32>) -> tensor<3x1xf32>
  %1 = graph.broadcast %x : (tensor<3x1xf32>) -> tensor<3x5xf32>
  %2 = graph.broadcast %1 : (tensor<3x5xf32>) -> tensor<2x3x5xf32>
  func.return %0, %2 : tensor<3x1xf32>, tensor<2x3x5xf32>
}

func.func @cast(%x: tensor<4xi32>) -> (tensor<4xi32>, tensor<4xf32>) {
  %0 = graph.cast %x : (tensor<4xi32>) -> tensor<4xi32>
  %1 = graph.cast %x : (tensor<4xi32>) -> tensor<4xf32>
  func.return %0, %1 : tensor<4xi32>, tensor<4xf32>
}

func.func @slice(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x2xf32>) {
  %0 = graph.slice %x {starts = array<i64: 0, 0>, ends = array<i64: 2, 3>, steps = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = graph.slice %x {starts = array<i64: 0, 2>, ends = array<i64: 2, -1>, steps = array<i64: 1, -1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = graph.slice %x {starts = array<i64: 0, 1>, ends = array<i64: 2, 3>, steps = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  func.return %0, %1, %2 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x2xf32>
}

func.func @concat_pad(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = graph.concat %x {axis = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = graph.pad %0 {pads = array<i64: 0, 0, 0, 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %0, %1 : tensor<2x3xf32>, tensor<2x3xf32>
}

func.func @matmul_transpose(%a: tensor<2x4x3xf32>, %b: tensor<5x4xf32>) -> tensor<2x3x5xf32> {
  %0 = graph.transpose %a {perm = array<i64: 0, 2, 1>} : (tensor<2x4x3xf32>) -> tensor<2x3x4xf32>
  %1 = graph.transpose %b {perm = array<i64: 1, 0>} : (tensor<5x4xf32>) -> tensor<4x5xf32>
  %2 = graph.matmul %0, %1 : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  func.return %2 : tensor<2x3x5xf32>
}

func.func @matmul_transpose_batch_dims(%a: tensor<4x2x3xf32>, %b: tensor<2x4x5xf32>) -> tensor<2x3x5xf32> {
  %0 = graph.transpose %a {perm = array<i64: 1, 2, 0>} : (tensor<4x2x3xf32>) -> tensor<2x3x4xf32>
  %1 = graph.matmul %0, %b : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
  func.return %1 : tensor<2x3x5xf32>
}

func.func @reduce(%x: tensor<2x1x3xf32>) -> (tensor<2x1x3xf32>, tensor<2x3xf32>, tensor<1x1x3xf32>) {
  %0 = graph.reduce_sum %x {axes = array<i64: 1>} : (tensor<2x1x3xf32>) -> tensor<2x1x3xf32>
  %1 = graph.reduce_max %x {axes = array<i64: 1>, keepdims = false} : (tensor<2x1x3xf32>) -> tensor<2x3xf32>
  %2 = graph.reduce_mean %x {axes = array<i64: 0, 1>} : (tensor<2x1x3xf32>) -> tensor<1x1x3xf32>
  func.return %0, %1, %2 : tensor<2x1x3xf32>, tensor<2x3xf32>, tensor<1x1x3xf32>
}

// CHECK-LABEL: func.func @transpose_pair_identity(
// CHECK-NEXT:    func.return %x : tensor<2x3x4xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @transpose_pair_composed(
// CHECK-NEXT:    %0 = graph.transpose %x {perm = array<i64: 2, 1, 0>} : (tensor<2x3x4xf32>) -> tensor<4x3x2xf32>
// CHECK-NEXT:    func.return %0 : tensor<4x3x2xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @transpose_identity(
// CHECK-NEXT:    func.return %x : tensor<2x3xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @transpose_inner_kept(
// CHECK-NEXT:    %0 = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:    func.return %x, %0 : tensor<2x3xf32>, tensor<3x2xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @reshape_chain(
// CHECK-NEXT:    %0 = graph.reshape %x : (tensor<2x3x4xf32>) -> tensor<4x6xf32>
// CHECK-NEXT:    func.return %0, %x : tensor<4x6xf32>, tensor<2x3x4xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @broadcast(
// CHECK-NEXT:    %0 = graph.broadcast %x : (tensor<3x1xf32>) -> tensor<2x3x5xf32>
// CHECK-NEXT:    func.return %x, %0 : tensor<3x1xf32>, tensor<2x3x5xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @cast(
// CHECK-NEXT:    %0 = graph.cast %x : (tensor<4xi32>) -> tensor<4xf32>
// CHECK-NEXT:    func.return %x, %0 : tensor<4xi32>, tensor<4xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @slice(
// CHECK-NEXT:    %0 = graph.slice %x {starts = array<i64: 0, 2>, ends = array<i64: 2, -1>, steps = array<i64: 1, -1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %1 = graph.slice %x {starts = array<i64: 0, 1>, ends = array<i64: 2, 3>, steps = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
// CHECK-NEXT:    func.return %x, %0, %1 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x2xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @concat_pad(
// CHECK-NEXT:    func.return %x, %x : tensor<2x3xf32>, tensor<2x3xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @matmul_transpose(
// CHECK-NEXT:    %0 = graph.matmul %a, %b {transpose_a = true, transpose_b = true} : (tensor<2x4x3xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>
// CHECK-NEXT:    func.return %0 : tensor<2x3x5xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @matmul_transpose_batch_dims(
// CHECK-NEXT:    %0 = graph.transpose %a {perm = array<i64: 1, 2, 0>} : (tensor<4x2x3xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT:    %1 = graph.matmul %0, %b : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
// CHECK-NEXT:    func.return %1 : tensor<2x3x5xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @reduce(
// CHECK-NEXT:    %0 = graph.reshape %x : (tensor<2x1x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %1 = graph.reduce_mean %x {axes = array<i64: 0, 1>} : (tensor<2x1x3xf32>) -> tensor<1x1x3xf32>
// CHECK-NEXT:    func.return %x, %0, %1 : tensor<2x1x3xf32>, tensor<2x3xf32>, tensor<1x1x3xf32>
// CHECK-NEXT:  }
