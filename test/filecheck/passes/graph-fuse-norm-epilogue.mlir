// RUN: infer-opt %s -p graph-fuse | filecheck %s
// RUN: infer-opt %s -p graph-fuse,graph-fuse | filecheck %s
// RUN: infer-opt %s -p 'graph-fuse{norm-epilogue=false}' | filecheck %s --check-prefix=OFF
// RUN: infer-opt %s -p 'graph-fuse{max-epilogue=0}' | filecheck %s --check-prefix=ZERO

// A layer/rms norm over the last dim of a float product's epilogue chain, the chain's only
// user, joins the "matmul" kernel as its last op (its norm epilogue): a post-LN transformer's
// o-projection + bias + residual add -> LayerNorm is one kernel. graph-to-tile normalises
// whole output rows there where its cost model finds it faster.

func.func @post_ln(%x: tensor<1x8x16xf32>, %r: tensor<1x8x32xf32>, %w: tensor<32x16xf32>) -> tensor<1x8x32xf32> {
  %b = graph.weight @b : tensor<32xf32>
  %g = graph.weight @g : tensor<32xf32>
  %be = graph.weight @be : tensor<32xf32>
  %h = graph.linear %x, %w, %b : (tensor<1x8x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<1x8x32xf32>
  %s = graph.add %h, %r : (tensor<1x8x32xf32>, tensor<1x8x32xf32>) -> tensor<1x8x32xf32>
  %y = graph.layer_norm %s, %g, %be {epsilon = 1.0e-12 : f64} : (tensor<1x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<1x8x32xf32>
  func.return %y : tensor<1x8x32xf32>
}

// CHECK-LABEL: func.func @post_ln(
// CHECK:         %y = graph.kernel "matmul" (%x, %w, %b, %r, %g, %be) : (tensor<1x8x16xf32>, tensor<32x16xf32>, tensor<32xf32>, tensor<1x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<1x8x32xf32> {
// CHECK-NEXT:    ^bb0(%x_1: tensor<1x8x16xf32>, %w_1: tensor<32x16xf32>, %b_1: tensor<32xf32>, %r_1: tensor<1x8x32xf32>, %g_1: tensor<32xf32>, %be_1: tensor<32xf32>):
// CHECK-NEXT:      %h = graph.linear %x_1, %w_1, %b_1
// CHECK-NEXT:      %s = graph.add %h, %r_1
// CHECK-NEXT:      %y_1 = graph.layer_norm %s, %g_1, %be_1 {epsilon = 1.000000e-12 : f64}
// CHECK-NEXT:      graph.yield %y_1 : tensor<1x8x32xf32>
// CHECK-NEXT:    }
// CHECK-NOT:     graph.kernel "norm"
// CHECK:         func.return %y

// OFF-LABEL: func.func @post_ln(
// OFF:           %s = graph.kernel "matmul"
// OFF-NOT:         graph.layer_norm
// OFF:           %y = graph.kernel "norm" (%s, %g, %be)

// ZERO-LABEL: func.func @post_ln(
// ZERO:          %h = graph.kernel "matmul"
// ZERO-NOT:        graph.layer_norm
// ZERO:          %y = graph.kernel "norm" (%s, %g, %be)

// An rms_norm right after a product (no elementwise chain between) joins it too.
func.func @rms(%x: tensor<4x16xf32>, %w: tensor<32x16xf32>) -> tensor<4x32xf32> {
  %g = graph.weight @g : tensor<32xf32>
  %h = graph.linear %x, %w : (tensor<4x16xf32>, tensor<32x16xf32>) -> tensor<4x32xf32>
  %y = graph.rms_norm %h, %g {epsilon = 1.0e-5 : f64} : (tensor<4x32xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  func.return %y : tensor<4x32xf32>
}

// CHECK-LABEL: func.func @rms(
// CHECK:         %y = graph.kernel "matmul" (%x, %w, %g)
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      %h = graph.linear
// CHECK-NEXT:      %y_1 = graph.rms_norm %h, %g_1
// CHECK-NEXT:      graph.yield %y_1

// A pre-norm block's residual sum, which the next residual add reads too: the kernel returns
// the sum and its norm.
func.func @pre_norm(%x: tensor<4x16xf32>, %r: tensor<4x32xf32>, %w: tensor<32x16xf32>, %w2: tensor<32x32xf32>) -> tensor<4x32xf32> {
  %g = graph.weight @g : tensor<32xf32>
  %h = graph.linear %x, %w : (tensor<4x16xf32>, tensor<32x16xf32>) -> tensor<4x32xf32>
  %s = graph.add %h, %r : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %n = graph.rms_norm %s, %g {epsilon = 1.0e-5 : f64} : (tensor<4x32xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  %f = graph.linear %n, %w2 : (tensor<4x32xf32>, tensor<32x32xf32>) -> tensor<4x32xf32>
  %y = graph.add %f, %s : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  func.return %y : tensor<4x32xf32>
}

// CHECK-LABEL: func.func @pre_norm(
// CHECK:         %s, %n = graph.kernel "matmul" (%x, %w, %r, %g) : (tensor<4x16xf32>, tensor<32x16xf32>, tensor<4x32xf32>, tensor<32xf32>) -> (tensor<4x32xf32>, tensor<4x32xf32>) {
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      %h = graph.linear
// CHECK-NEXT:      %s_1 = graph.add %h, %r_1
// CHECK-NEXT:      %n_1 = graph.rms_norm %s_1, %g_1
// CHECK-NEXT:      graph.yield %s_1, %n_1 : tensor<4x32xf32>, tensor<4x32xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %y = graph.kernel "matmul" (%n, %w2, %s)

// Not fused: the residual sum has a user before the norm (the kernel takes the norm's place),
// the norm spans more than the last dim, and a product on packed GGUF weights
// (graph-fuse-norm-prologue moves such norms into the products after them).
func.func @kept(%x: tensor<4x16xf32>, %r: tensor<4x32xf32>, %w: tensor<32x16xf32>, %x3: tensor<2x4x16xf32>, %xp: tensor<1x64xf32>) -> (tensor<4x32xf32>, tensor<4x32xf32>, tensor<2x4x32xf32>, tensor<1x64xf32>, tensor<4x32xf32>) {
  %g = graph.weight @g : tensor<32xf32>
  %g2 = graph.weight @g2 : tensor<4x32xf32>
  %h = graph.linear %x, %w : (tensor<4x16xf32>, tensor<32x16xf32>) -> tensor<4x32xf32>
  %s = graph.add %h, %r : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %e = graph.exp %s : (tensor<4x32xf32>) -> tensor<4x32xf32>
  %n = graph.rms_norm %s, %g {epsilon = 1.0e-5 : f64} : (tensor<4x32xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  %h3 = graph.linear %x3, %w : (tensor<2x4x16xf32>, tensor<32x16xf32>) -> tensor<2x4x32xf32>
  %n3 = graph.rms_norm %h3, %g2 {axis = -2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4x32xf32>, tensor<4x32xf32>) -> tensor<2x4x32xf32>
  %p = graph.weight @p : tensor<64x40xui8>
  %g4 = graph.weight @g4 : tensor<64xf32>
  %wp = graph.dequantize_blocks %p {format = "q4_1"} : (tensor<64x40xui8>) -> tensor<64x64xf32>
  %hp = graph.linear %xp, %wp : (tensor<1x64xf32>, tensor<64x64xf32>) -> tensor<1x64xf32>
  %np = graph.rms_norm %hp, %g4 {epsilon = 1.0e-5 : f64} : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
  func.return %n, %s, %n3, %np, %e : tensor<4x32xf32>, tensor<4x32xf32>, tensor<2x4x32xf32>, tensor<1x64xf32>, tensor<4x32xf32>
}

// CHECK-LABEL: func.func @kept(
// CHECK:         %s = graph.kernel "matmul"
// CHECK-NOT:       graph.rms_norm
// CHECK:         %e = graph.kernel "elementwise" (%s)
// CHECK:         %n = graph.kernel "norm" (%s, %g)
// CHECK:         %h3 = graph.kernel "matmul"
// CHECK-NOT:       graph.rms_norm
// CHECK:         %n3 = graph.kernel "norm" (%h3, %g2)
// CHECK:         %hp = graph.kernel "matmul"
// CHECK-NOT:       graph.rms_norm
// CHECK:         %np = graph.kernel "norm" (%hp, %g4)
