// RUN: infer-opt %s -p graph-fuse | filecheck %s
// RUN: infer-opt %s -p 'graph-fuse{max-epilogue=1}' | filecheck %s --check-prefix=ONE
// RUN: infer-opt %s -p 'graph-fuse{kinds=conv,pool}' | filecheck %s --check-prefix=KINDS
// RUN: infer-opt %s -p graph-fuse,graph-fuse | filecheck %s
// RUN: not infer-opt %s -p 'graph-fuse{kinds=fancy}' 2>&1 | filecheck %s --check-prefix=BAD

// Anchors (linear, matmul, conv2d, norms, softmax, attention, pooling) take the
// chain of elementwise ops after them into one graph.kernel; elementwise chains
// without an anchor form "elementwise" kernels. Weights and constants stay
// outside and are passed in.

// linear + bias add + gelu; the second linear's result has two users, so its
// epilogue stops there and those users form an elementwise kernel.
func.func @mlp(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %w2: tensor<6x16xf32>) -> tensor<4x6xf32> {
  %b = graph.constant dense<0.5> : tensor<16xf32>
  %h = graph.linear %x, %w : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %hb = graph.add %h, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %g = graph.gelu %hb : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = graph.linear %g, %w2 : (tensor<4x16xf32>, tensor<6x16xf32>) -> tensor<4x6xf32>
  %e = graph.exp %y : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %s = graph.mul %e, %y : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  func.return %s : tensor<4x6xf32>
}

// CHECK-LABEL: func.func @mlp(
// CHECK-NEXT:    %b = graph.constant dense<5.000000e-01> : tensor<16xf32>
// CHECK-NEXT:    %g = graph.kernel "matmul" (%x, %w, %b) : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32> {
// CHECK-NEXT:    ^bb0(%x_1: tensor<4x8xf32>, %w_1: tensor<16x8xf32>, %b_1: tensor<16xf32>):
// CHECK-NEXT:      %h = graph.linear %x_1, %w_1 : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:      %hb = graph.add %h, %b_1 : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:      %g_1 = graph.gelu %hb : (tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:      graph.yield %g_1 : tensor<4x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %y = graph.kernel "matmul" (%g, %w2) : (tensor<4x16xf32>, tensor<6x16xf32>) -> tensor<4x6xf32> {
// CHECK-NEXT:    ^bb0(%g_1: tensor<4x16xf32>, %w2_1: tensor<6x16xf32>):
// CHECK-NEXT:      %y_1 = graph.linear %g_1, %w2_1 : (tensor<4x16xf32>, tensor<6x16xf32>) -> tensor<4x6xf32>
// CHECK-NEXT:      graph.yield %y_1 : tensor<4x6xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %s = graph.kernel "elementwise" (%y) : (tensor<4x6xf32>) -> tensor<4x6xf32> {
// CHECK-NEXT:    ^bb0(%y_1: tensor<4x6xf32>):
// CHECK-NEXT:      %e = graph.exp %y_1 : (tensor<4x6xf32>) -> tensor<4x6xf32>
// CHECK-NEXT:      %s_1 = graph.mul %e, %y_1 : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
// CHECK-NEXT:      graph.yield %s_1 : tensor<4x6xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %s : tensor<4x6xf32>

// ONE-LABEL: func.func @mlp(
// ONE:           %hb = graph.kernel "matmul" (%x, %w, %b)
// ONE:             graph.yield %hb_1
// ONE:           %g = graph.kernel "elementwise" (%hb)
// ONE-NEXT:      ^bb0(%hb_1: tensor<4x16xf32>):
// ONE-NEXT:        %g_1 = graph.gelu %hb_1
// ONE-NEXT:        graph.yield %g_1
// ONE:           %y = graph.kernel "matmul" (%g, %w2)

// KINDS-LABEL: func.func @mlp(
// KINDS-NEXT:    %b = graph.constant
// KINDS-NEXT:    %h = graph.linear %x, %w
// KINDS-NEXT:    %hb = graph.add %h, %b
// KINDS-NEXT:    %g = graph.gelu %hb
// KINDS-NEXT:    %y = graph.linear %g, %w2
// KINDS-NEXT:    %e = graph.exp %y
// KINDS-NEXT:    %s = graph.mul %e, %y
// KINDS-NEXT:    func.return %s

// conv + residual add of an external tensor + relu joins the conv's kernel;
// a pool kernel takes its epilogue; the reshape stays outside.
func.func @conv(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x3x3xf32>, %skip: tensor<1x4x6x6xf32>) -> tensor<1x4xf32> {
  %c = graph.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  %a = graph.add %c, %skip : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  %r = graph.relu %a : (tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  %p = graph.global_avg_pool %r : (tensor<1x4x6x6xf32>) -> tensor<1x4x1x1xf32>
  %h = graph.constant dense<2.0> : tensor<f32>
  %ps = graph.mul %p, %h : (tensor<1x4x1x1xf32>, tensor<f32>) -> tensor<1x4x1x1xf32>
  %f = graph.reshape %ps : (tensor<1x4x1x1xf32>) -> tensor<1x4xf32>
  func.return %f : tensor<1x4xf32>
}

// CHECK-LABEL: func.func @conv(
// CHECK-NEXT:    %r = graph.kernel "conv" (%x, %w, %skip) : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32> {
// CHECK-NEXT:    ^bb0(%x_1: tensor<1x4x6x6xf32>, %w_1: tensor<4x4x3x3xf32>, %skip_1: tensor<1x4x6x6xf32>):
// CHECK-NEXT:      %c = graph.conv2d %x_1, %w_1 {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
// CHECK-NEXT:      %a = graph.add %c, %skip_1 : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
// CHECK-NEXT:      %r_1 = graph.relu %a : (tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
// CHECK-NEXT:      graph.yield %r_1 : tensor<1x4x6x6xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %h = graph.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT:    %ps = graph.kernel "pool" (%r, %h) : (tensor<1x4x6x6xf32>, tensor<f32>) -> tensor<1x4x1x1xf32> {
// CHECK-NEXT:    ^bb0(%r_1: tensor<1x4x6x6xf32>, %h_1: tensor<f32>):
// CHECK-NEXT:      %p = graph.global_avg_pool %r_1 : (tensor<1x4x6x6xf32>) -> tensor<1x4x1x1xf32>
// CHECK-NEXT:      %ps_1 = graph.mul %p, %h_1 : (tensor<1x4x1x1xf32>, tensor<f32>) -> tensor<1x4x1x1xf32>
// CHECK-NEXT:      graph.yield %ps_1 : tensor<1x4x1x1xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %f = graph.reshape %ps : (tensor<1x4x1x1xf32>) -> tensor<1x4xf32>
// CHECK-NEXT:    func.return %f : tensor<1x4xf32>

// KINDS-LABEL: func.func @conv(
// KINDS-NEXT:    %r = graph.kernel "conv" (%x, %w, %skip)
// KINDS:         %ps = graph.kernel "pool" (%r, %h)

// SwiGLU: mul(silu(gate), up) joins the gate's kernel, with the up kernel's
// result as an operand. An op that would broadcast the chain value up to a
// bigger shape (the add of %big) ends the chain; the rms_norm result has
// two users, so its kernel is the norm alone.
func.func @swiglu(%x: tensor<2x8xf32>, %s: tensor<8xf32>, %wg: tensor<16x8xf32>, %wu: tensor<16x8xf32>, %big: tensor<3x2x16xf32>) -> tensor<3x2x16xf32> {
  %n = graph.rms_norm %x, %s : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %g = graph.linear %n, %wg : (tensor<2x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>
  %u = graph.linear %n, %wu : (tensor<2x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>
  %a = graph.silu %g : (tensor<2x16xf32>) -> tensor<2x16xf32>
  %m = graph.mul %a, %u : (tensor<2x16xf32>, tensor<2x16xf32>) -> tensor<2x16xf32>
  %o = graph.add %m, %big : (tensor<2x16xf32>, tensor<3x2x16xf32>) -> tensor<3x2x16xf32>
  func.return %o : tensor<3x2x16xf32>
}

// CHECK-LABEL: func.func @swiglu(
// CHECK-NEXT:    %n = graph.kernel "norm" (%x, %s) : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32> {
// CHECK-NEXT:    ^bb0(%x_1: tensor<2x8xf32>, %s_1: tensor<8xf32>):
// CHECK-NEXT:      %n_1 = graph.rms_norm %x_1, %s_1 : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT:      graph.yield %n_1 : tensor<2x8xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %u = graph.kernel "matmul" (%n, %wu) : (tensor<2x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32> {
// CHECK-NEXT:    ^bb0(%n_1: tensor<2x8xf32>, %wu_1: tensor<16x8xf32>):
// CHECK-NEXT:      %u_1 = graph.linear %n_1, %wu_1 : (tensor<2x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>
// CHECK-NEXT:      graph.yield %u_1 : tensor<2x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %m = graph.kernel "matmul" (%n, %wg, %u) : (tensor<2x8xf32>, tensor<16x8xf32>, tensor<2x16xf32>) -> tensor<2x16xf32> {
// CHECK-NEXT:    ^bb0(%n_1: tensor<2x8xf32>, %wg_1: tensor<16x8xf32>, %u_1: tensor<2x16xf32>):
// CHECK-NEXT:      %g = graph.linear %n_1, %wg_1 : (tensor<2x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>
// CHECK-NEXT:      %a = graph.silu %g : (tensor<2x16xf32>) -> tensor<2x16xf32>
// CHECK-NEXT:      %m_1 = graph.mul %a, %u_1 : (tensor<2x16xf32>, tensor<2x16xf32>) -> tensor<2x16xf32>
// CHECK-NEXT:      graph.yield %m_1 : tensor<2x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %o = graph.kernel "elementwise" (%m, %big) : (tensor<2x16xf32>, tensor<3x2x16xf32>) -> tensor<3x2x16xf32> {
// CHECK-NEXT:    ^bb0(%m_1: tensor<2x16xf32>, %big_1: tensor<3x2x16xf32>):
// CHECK-NEXT:      %o_1 = graph.add %m_1, %big_1 : (tensor<2x16xf32>, tensor<3x2x16xf32>) -> tensor<3x2x16xf32>
// CHECK-NEXT:      graph.yield %o_1 : tensor<3x2x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %o : tensor<3x2x16xf32>

// Attention and softmax anchors; max-epilogue caps an elementwise chain
// (with max-epilogue=1, one op per kernel).
func.func @attention(%q: tensor<1x2x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) {
  %o = graph.attention %q, %k, %v {causal = true} : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x2x4x8xf32>
  %sm = graph.softmax %q : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %n1 = graph.neg %q : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %n2 = graph.exp %n1 : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  func.return %o, %n2 : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func.func @attention(
// CHECK-NEXT:    %o = graph.kernel "attention" (%q, %k, %v) : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x2x4x8xf32> {
// CHECK-NEXT:    ^bb0(%q_1: tensor<1x2x4x8xf32>, %k_1: tensor<1x1x4x8xf32>, %v_1: tensor<1x1x4x8xf32>):
// CHECK-NEXT:      %o_1 = graph.attention %q_1, %k_1, %v_1 {causal = true} : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NEXT:      graph.yield %o_1 : tensor<1x2x4x8xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %sm = graph.kernel "softmax" (%q) : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
// CHECK-NEXT:    ^bb0(%q_1: tensor<1x2x4x8xf32>):
// CHECK-NEXT:      %sm_1 = graph.softmax %q_1 : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NEXT:      graph.yield %sm_1 : tensor<1x2x4x8xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %n2 = graph.kernel "elementwise" (%q) : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
// CHECK-NEXT:    ^bb0(%q_1: tensor<1x2x4x8xf32>):
// CHECK-NEXT:      %n1 = graph.neg %q_1 : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NEXT:      %n2_1 = graph.exp %n1 : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NEXT:      graph.yield %n2_1 : tensor<1x2x4x8xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %o, %n2 : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>

// ONE-LABEL: func.func @attention(
// ONE:           %n1 = graph.kernel "elementwise" (%q)
// ONE-NEXT:      ^bb0(%q_1: tensor<1x2x4x8xf32>):
// ONE-NEXT:        %n1_1 = graph.neg %q_1
// ONE-NEXT:        graph.yield %n1_1
// ONE-NEXT:      }
// ONE-NEXT:      %n2 = graph.kernel "elementwise" (%n1)
// ONE-NEXT:      ^bb0(%n1_1: tensor<1x2x4x8xf32>):
// ONE-NEXT:        %n2_1 = graph.exp %n1_1
// ONE-NEXT:        graph.yield %n2_1

// BAD-NOT: Traceback
// BAD: graph-fuse: kinds must be among matmul, conv, norm, softmax, attention, pool, elementwise (got fancy)
// BAD-NOT: Traceback
