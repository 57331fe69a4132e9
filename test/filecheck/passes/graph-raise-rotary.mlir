// RUN: infer-opt %s -p graph-raise-rotary | filecheck %s
// RUN: infer-opt %s -p graph-raise-rotary --verify-each-numerically --verify-numerics-entry onnx_llama -o /dev/null
// RUN: infer-opt %s -p graph-raise-rotary --verify-each-numerically --verify-numerics-entry partial -o /dev/null
// RUN: infer-opt %s -p graph-raise-rotary --verify-each-numerically --verify-numerics-entry interleaved -o /dev/null

// Rotary position embedding written out as arithmetic becomes one graph.rotary.

// torch.onnx's apply_rotary_pos_emb: q * cos + cat(-q[..., 4:], q[..., :4]) * sin
func.func @onnx_llama(%q: tensor<1x2x5x8xf32>, %cos: tensor<1x1x5x8xf32>, %sin: tensor<1x1x5x8xf32>) -> tensor<1x2x5x8xf32> {
  %a = graph.mul %q, %cos : (tensor<1x2x5x8xf32>, tensor<1x1x5x8xf32>) -> tensor<1x2x5x8xf32>
  %lo = graph.slice %q {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 1, 2, 5, 4>, steps = array<i64: 1, 1, 1, 1>} : (tensor<1x2x5x8xf32>) -> tensor<1x2x5x4xf32>
  %hi = graph.slice %q {starts = array<i64: 0, 0, 0, 4>, ends = array<i64: 1, 2, 5, 8>, steps = array<i64: 1, 1, 1, 1>} : (tensor<1x2x5x8xf32>) -> tensor<1x2x5x4xf32>
  %nh = graph.neg %hi : (tensor<1x2x5x4xf32>) -> tensor<1x2x5x4xf32>
  %rot = graph.concat %nh, %lo {axis = 3 : i64} : (tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x5x8xf32>
  %b = graph.mul %rot, %sin : (tensor<1x2x5x8xf32>, tensor<1x1x5x8xf32>) -> tensor<1x2x5x8xf32>
  %y = graph.add %a, %b : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32>
  func.return %y : tensor<1x2x5x8xf32>
}
// CHECK-LABEL: func.func @onnx_llama(
// CHECK-NEXT:    %y = graph.rotary %q, %cos, %sin : (tensor<1x2x5x8xf32>, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32>) -> tensor<1x2x5x8xf32>
// CHECK-NEXT:    func.return %y

// not rotate_half: the halves are not negated
func.func @no_neg(%q: tensor<1x2x5x8xf32>, %cos: tensor<1x1x5x8xf32>, %sin: tensor<1x1x5x8xf32>) -> tensor<1x2x5x8xf32> {
  %a = graph.mul %q, %cos : (tensor<1x2x5x8xf32>, tensor<1x1x5x8xf32>) -> tensor<1x2x5x8xf32>
  %lo = graph.slice %q {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 1, 2, 5, 4>, steps = array<i64: 1, 1, 1, 1>} : (tensor<1x2x5x8xf32>) -> tensor<1x2x5x4xf32>
  %hi = graph.slice %q {starts = array<i64: 0, 0, 0, 4>, ends = array<i64: 1, 2, 5, 8>, steps = array<i64: 1, 1, 1, 1>} : (tensor<1x2x5x8xf32>) -> tensor<1x2x5x4xf32>
  %rot = graph.concat %hi, %lo {axis = 3 : i64} : (tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x5x8xf32>
  %b = graph.mul %rot, %sin : (tensor<1x2x5x8xf32>, tensor<1x1x5x8xf32>) -> tensor<1x2x5x8xf32>
  %y = graph.add %a, %b : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32>
  func.return %y : tensor<1x2x5x8xf32>
}
// CHECK-LABEL: func.func @no_neg(
// CHECK-NOT:     graph.rotary
// CHECK:         func.return

// partial rotary (GPT-NeoX, Phi): the first 4 of 8 features rotated, the rest joined back
func.func @partial(%q: tensor<1x2x5x8xf32>, %cos: tensor<1x1x5x4xf32>, %sin: tensor<1x1x5x4xf32>) -> tensor<1x2x5x8xf32> {
  %r = graph.slice %q {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 1, 2, 5, 4>, steps = array<i64: 1, 1, 1, 1>} : (tensor<1x2x5x8xf32>) -> tensor<1x2x5x4xf32>
  %pass = graph.slice %q {starts = array<i64: 0, 0, 0, 4>, ends = array<i64: 1, 2, 5, 8>, steps = array<i64: 1, 1, 1, 1>} : (tensor<1x2x5x8xf32>) -> tensor<1x2x5x4xf32>
  %a = graph.mul %r, %cos : (tensor<1x2x5x4xf32>, tensor<1x1x5x4xf32>) -> tensor<1x2x5x4xf32>
  %lo = graph.slice %r {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 1, 2, 5, 2>, steps = array<i64: 1, 1, 1, 1>} : (tensor<1x2x5x4xf32>) -> tensor<1x2x5x2xf32>
  %hi = graph.slice %r {starts = array<i64: 0, 0, 0, 2>, ends = array<i64: 1, 2, 5, 4>, steps = array<i64: 1, 1, 1, 1>} : (tensor<1x2x5x4xf32>) -> tensor<1x2x5x2xf32>
  %nh = graph.neg %hi : (tensor<1x2x5x2xf32>) -> tensor<1x2x5x2xf32>
  %rot = graph.concat %nh, %lo {axis = 3 : i64} : (tensor<1x2x5x2xf32>, tensor<1x2x5x2xf32>) -> tensor<1x2x5x4xf32>
  %b = graph.mul %rot, %sin : (tensor<1x2x5x4xf32>, tensor<1x1x5x4xf32>) -> tensor<1x2x5x4xf32>
  %e = graph.add %a, %b : (tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x5x4xf32>
  %y = graph.concat %e, %pass {axis = -1 : i64} : (tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x5x8xf32>
  func.return %y : tensor<1x2x5x8xf32>
}
// CHECK-LABEL: func.func @partial(
// CHECK-NEXT:    %y = graph.rotary %q, %cos, %sin : (tensor<1x2x5x8xf32>, tensor<1x1x5x4xf32>, tensor<1x1x5x4xf32>) -> tensor<1x2x5x8xf32>
// CHECK-NEXT:    func.return %y

// GPT-J's rotate_every_two: the pairs' halves stacked on a new last axis and flattened
func.func @interleaved(%q: tensor<1x5x2x8xf32>, %cos: tensor<1x5x1x8xf32>, %sin: tensor<1x5x1x8xf32>) -> tensor<1x5x2x8xf32> {
  %a = graph.mul %q, %cos : (tensor<1x5x2x8xf32>, tensor<1x5x1x8xf32>) -> tensor<1x5x2x8xf32>
  %even = graph.slice %q {starts = array<i64: 0, 0, 0, 0>, ends = array<i64: 1, 5, 2, 8>, steps = array<i64: 1, 1, 1, 2>} : (tensor<1x5x2x8xf32>) -> tensor<1x5x2x4xf32>
  %odd = graph.slice %q {starts = array<i64: 0, 0, 0, 1>, ends = array<i64: 1, 5, 2, 8>, steps = array<i64: 1, 1, 1, 2>} : (tensor<1x5x2x8xf32>) -> tensor<1x5x2x4xf32>
  %nodd = graph.neg %odd : (tensor<1x5x2x4xf32>) -> tensor<1x5x2x4xf32>
  %n5 = graph.reshape %nodd : (tensor<1x5x2x4xf32>) -> tensor<1x5x2x4x1xf32>
  %e5 = graph.reshape %even : (tensor<1x5x2x4xf32>) -> tensor<1x5x2x4x1xf32>
  %stacked = graph.concat %n5, %e5 {axis = 4 : i64} : (tensor<1x5x2x4x1xf32>, tensor<1x5x2x4x1xf32>) -> tensor<1x5x2x4x2xf32>
  %rot = graph.reshape %stacked : (tensor<1x5x2x4x2xf32>) -> tensor<1x5x2x8xf32>
  %b = graph.mul %rot, %sin : (tensor<1x5x2x8xf32>, tensor<1x5x1x8xf32>) -> tensor<1x5x2x8xf32>
  %y = graph.add %a, %b : (tensor<1x5x2x8xf32>, tensor<1x5x2x8xf32>) -> tensor<1x5x2x8xf32>
  func.return %y : tensor<1x5x2x8xf32>
}
// CHECK-LABEL: func.func @interleaved(
// CHECK-NEXT:    %y = graph.rotary %q, %cos, %sin {interleaved = true} : (tensor<1x5x2x8xf32>, tensor<1x5x1x8xf32>, tensor<1x5x1x8xf32>) -> tensor<1x5x2x8xf32>
// CHECK-NEXT:    func.return %y
