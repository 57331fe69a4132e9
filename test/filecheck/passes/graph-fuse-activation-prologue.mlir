// RUN: infer-opt %s -p 'graph-fuse,graph-fuse-activation-prologue{target=server}' | filecheck %s
// RUN: infer-opt %s -p 'graph-fuse,graph-fuse-activation-prologue{target=server},graph-fuse-activation-prologue{target=server}' | filecheck %s
// RUN: infer-opt %s -p 'graph-fuse,graph-fuse-activation-prologue{target=edge}' | filecheck %s --check-prefix=EDGE
// RUN: not infer-opt %s -p 'graph-fuse-activation-prologue{target=nowhere}' 2>&1 | filecheck %s --check-prefix=BAD

// On a latency-bound target (server) an activation last in a product's kernel moves into the
// product that reads it, in front of its anchor: the producer yields the activation's input.

func.func @ffn(%x: tensor<4x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<4x8xf32> {
  %b = graph.constant dense<0.5> : tensor<16xf32>
  %h = graph.linear %x, %w1 : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %hb = graph.add %h, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %g = graph.gelu %hb : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = graph.linear %g, %w2 : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %r = graph.add %y, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %r : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @ffn(
// CHECK:         %hb = graph.kernel "matmul" (%x, %w1, %b) : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32> {
// CHECK-NEXT:    ^bb0(%x_1: tensor<4x8xf32>, %w1_1: tensor<16x8xf32>, %b_1: tensor<16xf32>):
// CHECK-NEXT:      %h = graph.linear %x_1, %w1_1
// CHECK-NEXT:      %hb_1 = graph.add %h, %b_1
// CHECK-NEXT:      graph.yield %hb_1 : tensor<4x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %r = graph.kernel "matmul" (%hb, %w2, %x) : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT:    ^bb0(%hb_1: tensor<4x16xf32>, %w2_1: tensor<8x16xf32>, %x_1: tensor<4x8xf32>):
// CHECK-NEXT:      %g = graph.gelu %hb_1 : (tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:      %y = graph.linear %g, %w2_1
// CHECK-NEXT:      %r_1 = graph.add %y, %x_1
// CHECK-NEXT:      graph.yield %r_1 : tensor<4x8xf32>
// CHECK-NEXT:    }

// EDGE-LABEL: func.func @ffn(
// EDGE:            %g_1 = graph.gelu %hb
// EDGE-NEXT:       graph.yield %g_1
// EDGE-NOT:        graph.gelu

// The bias of the producer's linear (a kernel input read by nothing else) moves with the
// activation: added to the consumer's block argument before it, the linear left without it.
func.func @ffn_bias(%x: tensor<4x8xf32>, %w1: tensor<16x8xf32>, %b1: tensor<16xf32>, %w2: tensor<8x16xf32>) -> tensor<4x8xf32> {
  %h = graph.linear %x, %w1, %b1 : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %g = graph.gelu %h : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = graph.linear %g, %w2 : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @ffn_bias(
// CHECK:         %h = graph.kernel "matmul" (%x, %w1, %b1)
// CHECK-NEXT:    ^bb0(%x_1: tensor<4x8xf32>, %w1_1: tensor<16x8xf32>, %b1_1: tensor<16xf32>):
// CHECK-NEXT:      %h_1 = graph.linear %x_1, %w1_1 : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:      graph.yield %h_1
// CHECK:         %y = graph.kernel "matmul" (%h, %w2, %b1) : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT:    ^bb0(%h_1: tensor<4x16xf32>, %w2_1: tensor<8x16xf32>, %b1_1: tensor<16xf32>):
// CHECK-NEXT:      %[[SUM:.*]] = graph.add %h_1, %b1_1 : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:      %g = graph.gelu %[[SUM]]
// CHECK-NEXT:      %y_1 = graph.linear %g, %w2_1
// CHECK-NEXT:      graph.yield %y_1

// EDGE-LABEL: func.func @ffn_bias(
// EDGE:            %g_1 = graph.gelu %h
// EDGE-NEXT:       graph.yield %g_1

// The activation stays where its result has another user, where the reader takes it as
// something else than its activations, or where the activation's input is the kernel's input.
func.func @stays(%x: tensor<4x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> (tensor<4x8xf32>, tensor<4x16xf32>) {
  %h = graph.linear %x, %w1 : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %g = graph.relu %h : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = graph.linear %g, %w2 : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  func.return %y, %g : tensor<4x8xf32>, tensor<4x16xf32>
}

// CHECK-LABEL: func.func @stays(
// CHECK:           %g_1 = graph.relu %h
// CHECK-NEXT:      graph.yield %g_1
// CHECK:         graph.kernel "matmul" (%g, %w2)
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      graph.linear

// BAD: error: graph-fuse-activation-prologue: target 'nowhere':
