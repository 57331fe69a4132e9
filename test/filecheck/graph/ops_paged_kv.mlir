// RUN: infer-opt %s | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | infer-opt | filecheck %s

// Paged KV cache: a write of token rows at slots, and paged attention (decode Sq = 1 with
// grouped-query heads; a prefill chunk Sq = 4 with an explicit scale and a wider value head).

func.func @paged(%kc: tensor<64x16xf32>, %vc: tensor<64x16xf32>, %rows: tensor<2x16xf32>, %slots: tensor<2xi32>, %q: tensor<2x4x1x8xf32>, %bt: tensor<2x4xi32>, %n: tensor<2xi32>) {
  %0 = graph.kv_cache_write %kc, %rows, %slots : (tensor<64x16xf32>, tensor<2x16xf32>, tensor<2xi32>) -> tensor<64x16xf32>
  %1 = graph.paged_attention %q, %0, %vc, %bt, %n {block_size = 16 : i64} : (tensor<2x4x1x8xf32>, tensor<64x16xf32>, tensor<64x16xf32>, tensor<2x4xi32>, tensor<2xi32>) -> tensor<2x4x1x8xf32>
  func.return
}

func.func @chunk(%q: tensor<1x2x4x8xbf16>, %kc: tensor<32x8xbf16>, %vc: tensor<32x16xbf16>, %bt: tensor<1x8xi32>, %n: tensor<1xi32>) {
  %0 = graph.paged_attention %q, %kc, %vc, %bt, %n {block_size = 4 : i64, scale = 0.5 : f64} : (tensor<1x2x4x8xbf16>, tensor<32x8xbf16>, tensor<32x16xbf16>, tensor<1x8xi32>, tensor<1xi32>) -> tensor<1x2x4x16xbf16>
  func.return
}

// CHECK:      builtin.module {
// CHECK-NEXT: func.func @paged(%kc: tensor<64x16xf32>, %vc: tensor<64x16xf32>, %rows: tensor<2x16xf32>, %slots: tensor<2xi32>, %q: tensor<2x4x1x8xf32>, %bt: tensor<2x4xi32>, %n: tensor<2xi32>) {
// CHECK-NEXT: %0 = graph.kv_cache_write %kc, %rows, %slots : (tensor<64x16xf32>, tensor<2x16xf32>, tensor<2xi32>) -> tensor<64x16xf32>
// CHECK-NEXT: %1 = graph.paged_attention %q, %0, %vc, %bt, %n {block_size = 16 : i64} : (tensor<2x4x1x8xf32>, tensor<64x16xf32>, tensor<64x16xf32>, tensor<2x4xi32>, tensor<2xi32>) -> tensor<2x4x1x8xf32>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: func.func @chunk(%q: tensor<1x2x4x8xbf16>, %kc: tensor<32x8xbf16>, %vc: tensor<32x16xbf16>, %bt: tensor<1x8xi32>, %n: tensor<1xi32>) {
// CHECK-NEXT: %0 = graph.paged_attention %q, %kc, %vc, %bt, %n {block_size = 4 : i64, scale = 5.000000e-01 : f64} : (tensor<1x2x4x8xbf16>, tensor<32x8xbf16>, tensor<32x16xbf16>, tensor<1x8xi32>, tensor<1xi32>) -> tensor<1x2x4x16xbf16>
// CHECK-NEXT: func.return
// CHECK-NEXT: }
// CHECK-NEXT: }
