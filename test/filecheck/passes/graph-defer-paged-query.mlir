// RUN: infer-opt %s -p 'graph-defer-paged-query{target=server}' | filecheck %s
// RUN: infer-opt %s -p 'graph-defer-paged-query{target=server},graph-defer-paged-query{target=server}' | filecheck %s
// RUN: infer-opt %s -p graph-defer-paged-query | filecheck %s --check-prefix=EDGE

// On the server config a decode step's query projection (and the views and rotary that only
// make the query) moves after the key and value projections, before the key's rotary: the cache
// appends, which the attention's gathers wait for, are lowered first. A prefill chunk (4 query
// rows) is left. On edge (the default target) nothing moves.

func.func @decode(%x: tensor<1x32xf32>, %c: tensor<1x1x1x8xf32>, %kc: tensor<64x8xf32>, %vc: tensor<64x8xf32>, %slots: tensor<1xi32>, %bt: tensor<1x4xi32>, %n: tensor<1xi32>) -> tensor<1x2x1x8xf32> {
  %wq = graph.weight @wq : tensor<16x32xf32>
  %wk = graph.weight @wk : tensor<8x32xf32>
  %wv = graph.weight @wv : tensor<8x32xf32>
  %q = graph.linear %x, %wq : (tensor<1x32xf32>, tensor<16x32xf32>) -> tensor<1x16xf32>
  %q4 = graph.reshape %q : (tensor<1x16xf32>) -> tensor<1x2x1x8xf32>
  %k = graph.linear %x, %wk : (tensor<1x32xf32>, tensor<8x32xf32>) -> tensor<1x8xf32>
  %k4 = graph.reshape %k : (tensor<1x8xf32>) -> tensor<1x1x1x8xf32>
  %v = graph.linear %x, %wv : (tensor<1x32xf32>, tensor<8x32xf32>) -> tensor<1x8xf32>
  %qr = graph.rotary %q4, %c, %c : (tensor<1x2x1x8xf32>, tensor<1x1x1x8xf32>, tensor<1x1x1x8xf32>) -> tensor<1x2x1x8xf32>
  %kr = graph.rotary %k4, %c, %c : (tensor<1x1x1x8xf32>, tensor<1x1x1x8xf32>, tensor<1x1x1x8xf32>) -> tensor<1x1x1x8xf32>
  %krows = graph.reshape %kr : (tensor<1x1x1x8xf32>) -> tensor<1x8xf32>
  %kc2 = graph.kv_cache_write %kc, %krows, %slots : (tensor<64x8xf32>, tensor<1x8xf32>, tensor<1xi32>) -> tensor<64x8xf32>
  %vc2 = graph.kv_cache_write %vc, %v, %slots : (tensor<64x8xf32>, tensor<1x8xf32>, tensor<1xi32>) -> tensor<64x8xf32>
  %o = graph.paged_attention %qr, %kc2, %vc2, %bt, %n {block_size = 16 : i64} : (tensor<1x2x1x8xf32>, tensor<64x8xf32>, tensor<64x8xf32>, tensor<1x4xi32>, tensor<1xi32>) -> tensor<1x2x1x8xf32>
  func.return %o : tensor<1x2x1x8xf32>
}

// CHECK-LABEL: func.func @decode(
// CHECK:         %k = graph.linear %x, %wk
// CHECK-NEXT:    %k4 = graph.reshape %k
// CHECK-NEXT:    %v = graph.linear %x, %wv
// CHECK-NEXT:    %wq = graph.weight @wq
// CHECK-NEXT:    %q = graph.linear %x, %wq
// CHECK-NEXT:    %q4 = graph.reshape %q
// CHECK-NEXT:    %qr = graph.rotary %q4, %c, %c
// CHECK-NEXT:    %kr = graph.rotary %k4, %c, %c
// CHECK:         %o = graph.paged_attention %qr, %kc2, %vc2, %bt, %n

func.func @chunk(%x: tensor<4x32xf32>, %kc: tensor<64x8xf32>, %vc: tensor<64x8xf32>, %bt: tensor<1x4xi32>, %n: tensor<1xi32>) -> tensor<1x2x4x8xf32> {
  %wq = graph.weight @wq : tensor<16x32xf32>
  %wk = graph.weight @wk : tensor<8x32xf32>
  %q = graph.linear %x, %wq : (tensor<4x32xf32>, tensor<16x32xf32>) -> tensor<4x16xf32>
  %q4 = graph.reshape %q : (tensor<4x16xf32>) -> tensor<1x2x4x8xf32>
  %k = graph.linear %x, %wk : (tensor<4x32xf32>, tensor<8x32xf32>) -> tensor<4x8xf32>
  %o = graph.paged_attention %q4, %kc, %vc, %bt, %n {block_size = 16 : i64} : (tensor<1x2x4x8xf32>, tensor<64x8xf32>, tensor<64x8xf32>, tensor<1x4xi32>, tensor<1xi32>) -> tensor<1x2x4x8xf32>
  func.return %o : tensor<1x2x4x8xf32>
}

// EDGE-LABEL: func.func @decode(
// EDGE:         %q = graph.linear %x, %wq
// EDGE-NEXT:    %q4 = graph.reshape %q
// EDGE-NEXT:    %k = graph.linear %x, %wk

// CHECK-LABEL: func.func @chunk(
// CHECK:         %q = graph.linear %x, %wq
// CHECK-NEXT:    %q4 = graph.reshape %q
// CHECK-NEXT:    %k = graph.linear %x, %wk
