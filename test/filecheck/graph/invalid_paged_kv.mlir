// RUN: infer-opt %s --split-input-file --verify-diagnostics

// Verifier messages of the graph dialect's paged KV ops (kv_cache_write, paged_attention):
// shapes, i32 metadata, the block size. One split-input-file chunk per case.

// kv_cache_write cache rank.
func.func @f(%c: tensor<64xf32>, %r: tensor<2x16xf32>, %s: tensor<2xi32>) {
  // expected-error @+1 {{the cache [S, W] must have rank 2, got shape 64}}
  %0 = graph.kv_cache_write %c, %r, %s : (tensor<64xf32>, tensor<2x16xf32>, tensor<2xi32>) -> tensor<64xf32>
  func.return
}

// -----

// kv_cache_write row width.
func.func @f(%c: tensor<64x16xf32>, %r: tensor<2x8xf32>, %s: tensor<2xi32>) {
  // expected-error @+1 {{rows 2x8 must have the cache's row width 16}}
  %0 = graph.kv_cache_write %c, %r, %s : (tensor<64x16xf32>, tensor<2x8xf32>, tensor<2xi32>) -> tensor<64x16xf32>
  func.return
}

// -----

// kv_cache_write slot count.
func.func @f(%c: tensor<64x16xf32>, %r: tensor<2x16xf32>, %s: tensor<3xi32>) {
  // expected-error @+1 {{2 rows but 3 slots}}
  %0 = graph.kv_cache_write %c, %r, %s : (tensor<64x16xf32>, tensor<2x16xf32>, tensor<3xi32>) -> tensor<64x16xf32>
  func.return
}

// -----

// kv_cache_write slots must be i32.
func.func @f(%c: tensor<64x16xf32>, %r: tensor<2x16xf32>, %s: tensor<2xi64>) {
  // expected-error @+1 {{the slots must be i32, got i64}}
  %0 = graph.kv_cache_write %c, %r, %s : (tensor<64x16xf32>, tensor<2x16xf32>, tensor<2xi64>) -> tensor<64x16xf32>
  func.return
}

// -----

// kv_cache_write element types.
func.func @f(%c: tensor<64x16xf32>, %r: tensor<2x16xbf16>, %s: tensor<2xi32>) {
  // expected-error @+1 {{operands must share one element type, got f32, bf16}}
  %0 = graph.kv_cache_write %c, %r, %s : (tensor<64x16xf32>, tensor<2x16xbf16>, tensor<2xi32>) -> tensor<64x16xf32>
  func.return
}

// -----

// paged_attention block size not a power of two.
func.func @f(%q: tensor<2x4x1x8xf32>, %k: tensor<48x16xf32>, %v: tensor<48x16xf32>, %bt: tensor<2x4xi32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{block_size must be a power of two, got 12}}
  %0 = graph.paged_attention %q, %k, %v, %bt, %n {block_size = 12 : i64} : (tensor<2x4x1x8xf32>, tensor<48x16xf32>, tensor<48x16xf32>, tensor<2x4xi32>, tensor<2xi32>) -> tensor<2x4x1x8xf32>
  func.return
}

// -----

// paged_attention pool not whole blocks.
func.func @f(%q: tensor<2x4x1x8xf32>, %k: tensor<40x16xf32>, %v: tensor<40x16xf32>, %bt: tensor<2x4xi32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{the caches' 40 rows are not a whole number of 16-row blocks}}
  %0 = graph.paged_attention %q, %k, %v, %bt, %n {block_size = 16 : i64} : (tensor<2x4x1x8xf32>, tensor<40x16xf32>, tensor<40x16xf32>, tensor<2x4xi32>, tensor<2xi32>) -> tensor<2x4x1x8xf32>
  func.return
}

// -----

// paged_attention key width vs head dim.
func.func @f(%q: tensor<2x4x1x8xf32>, %k: tensor<64x12xf32>, %v: tensor<64x16xf32>, %bt: tensor<2x4xi32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{the key cache width 12 is not a multiple of the query head dim 8}}
  %0 = graph.paged_attention %q, %k, %v, %bt, %n {block_size = 16 : i64} : (tensor<2x4x1x8xf32>, tensor<64x12xf32>, tensor<64x16xf32>, tensor<2x4xi32>, tensor<2xi32>) -> tensor<2x4x1x8xf32>
  func.return
}

// -----

// paged_attention grouped heads.
func.func @f(%q: tensor<2x3x1x8xf32>, %k: tensor<64x16xf32>, %v: tensor<64x16xf32>, %bt: tensor<2x4xi32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{query heads (3) must be a multiple of key/value heads (2 = 16 / 8)}}
  %0 = graph.paged_attention %q, %k, %v, %bt, %n {block_size = 16 : i64} : (tensor<2x3x1x8xf32>, tensor<64x16xf32>, tensor<64x16xf32>, tensor<2x4xi32>, tensor<2xi32>) -> tensor<2x3x1x8xf32>
  func.return
}

// -----

// paged_attention block table dtype.
func.func @f(%q: tensor<2x4x1x8xf32>, %k: tensor<64x16xf32>, %v: tensor<64x16xf32>, %bt: tensor<2x4xi64>, %n: tensor<2xi32>) {
  // expected-error @+1 {{the block tables [B, MB] must be i32, got i64}}
  %0 = graph.paged_attention %q, %k, %v, %bt, %n {block_size = 16 : i64} : (tensor<2x4x1x8xf32>, tensor<64x16xf32>, tensor<64x16xf32>, tensor<2x4xi64>, tensor<2xi32>) -> tensor<2x4x1x8xf32>
  func.return
}

// -----

// paged_attention batch of the metadata.
func.func @f(%q: tensor<2x4x1x8xf32>, %k: tensor<64x16xf32>, %v: tensor<64x16xf32>, %bt: tensor<2x4xi32>, %n: tensor<3xi32>) {
  // expected-error @+1 {{block tables (2 rows) and context lengths (3) must have the query's batch 2}}
  %0 = graph.paged_attention %q, %k, %v, %bt, %n {block_size = 16 : i64} : (tensor<2x4x1x8xf32>, tensor<64x16xf32>, tensor<64x16xf32>, tensor<2x4xi32>, tensor<3xi32>) -> tensor<2x4x1x8xf32>
  func.return
}

// -----

// paged_attention caches differ in rows.
func.func @f(%q: tensor<2x4x1x8xf32>, %k: tensor<64x16xf32>, %v: tensor<32x16xf32>, %bt: tensor<2x4xi32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{the key cache has 64 rows but the value cache 32}}
  %0 = graph.paged_attention %q, %k, %v, %bt, %n {block_size = 16 : i64} : (tensor<2x4x1x8xf32>, tensor<64x16xf32>, tensor<32x16xf32>, tensor<2x4xi32>, tensor<2xi32>) -> tensor<2x4x1x8xf32>
  func.return
}

// -----

// paged_attention result head dim.
func.func @f(%q: tensor<2x4x1x8xf32>, %k: tensor<64x16xf32>, %v: tensor<64x32xf32>, %bt: tensor<2x4xi32>, %n: tensor<2xi32>) {
  // expected-error @+1 {{result #0 has shape 2x4x1x8 but the operands and attributes give 2x4x1x16}}
  %0 = graph.paged_attention %q, %k, %v, %bt, %n {block_size = 16 : i64} : (tensor<2x4x1x8xf32>, tensor<64x16xf32>, tensor<64x32xf32>, tensor<2x4xi32>, tensor<2xi32>) -> tensor<2x4x1x8xf32>
  func.return
}
