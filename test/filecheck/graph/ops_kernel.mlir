// RUN: infer-opt %s | infer-opt | filecheck %s
// RUN: infer-opt %s --print-op-generic | infer-opt | filecheck %s

// graph.kernel (a fusion group: one anchor op and an elementwise epilogue, or
// an elementwise chain) and its terminator graph.yield in their custom form.

func.func @matmul(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %r = graph.kernel "matmul" (%x, %w, %b) : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32> {
  ^bb0(%a: tensor<4x8xf32>, %wa: tensor<16x8xf32>, %ba: tensor<16xf32>):
    %y = graph.linear %a, %wa, %ba : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
    %z = graph.gelu %y {approximate = "tanh"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
    graph.yield %z : tensor<4x16xf32>
  }
  func.return %r : tensor<4x16xf32>
}

// CHECK-LABEL: func.func @matmul(
// CHECK-NEXT:    %r = graph.kernel "matmul" (%x, %w, %b) : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32> {
// CHECK-NEXT:    ^bb0(%a: tensor<4x8xf32>, %wa: tensor<16x8xf32>, %ba: tensor<16xf32>):
// CHECK-NEXT:      %y = graph.linear %a, %wa, %ba : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:      %z = graph.gelu %y {approximate = "tanh"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:      graph.yield %z : tensor<4x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r : tensor<4x16xf32>

func.func @conv_residual(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x3x3xf32>, %skip: tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32> {
  %r = graph.kernel "conv" (%x, %w, %skip) : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32> {
  ^bb0(%a: tensor<1x4x6x6xf32>, %wa: tensor<4x4x3x3xf32>, %s: tensor<1x4x6x6xf32>):
    %c = graph.conv2d %a, %wa {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
    %sum = graph.add %s, %c : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
    %six = graph.constant dense<6.0> : tensor<f32>
    %m = graph.minimum %sum, %six : (tensor<1x4x6x6xf32>, tensor<f32>) -> tensor<1x4x6x6xf32>
    graph.yield %m : tensor<1x4x6x6xf32>
  }
  func.return %r : tensor<1x4x6x6xf32>
}

// CHECK-LABEL: func.func @conv_residual(
// CHECK-NEXT:    %r = graph.kernel "conv" (%x, %w, %skip) : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32> {
// CHECK-NEXT:    ^bb0(%a: tensor<1x4x6x6xf32>, %wa: tensor<4x4x3x3xf32>, %s: tensor<1x4x6x6xf32>):
// CHECK-NEXT:      %c = graph.conv2d %a, %wa {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
// CHECK-NEXT:      %sum = graph.add %s, %c : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
// CHECK-NEXT:      %six = graph.constant dense<6.000000e+00> : tensor<f32>
// CHECK-NEXT:      %m = graph.minimum %sum, %six : (tensor<1x4x6x6xf32>, tensor<f32>) -> tensor<1x4x6x6xf32>
// CHECK-NEXT:      graph.yield %m : tensor<1x4x6x6xf32>
// CHECK-NEXT:    }

// Two results; an elementwise kernel has no anchor.
func.func @elementwise(%x: tensor<8xf32>, %y: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf16>) {
  %r:2 = graph.kernel "elementwise" (%x, %y) : (tensor<8xf32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf16>) {
  ^bb0(%a: tensor<8xf32>, %b: tensor<8xf32>):
    %m = graph.mul %a, %b : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %s = graph.silu %m : (tensor<8xf32>) -> tensor<8xf32>
    %h = graph.cast %s : (tensor<8xf32>) -> tensor<8xf16>
    graph.yield %s, %h : tensor<8xf32>, tensor<8xf16>
  }
  func.return %r#0, %r#1 : tensor<8xf32>, tensor<8xf16>
}

// CHECK-LABEL: func.func @elementwise(
// CHECK-NEXT:    %r, %r_1 = graph.kernel "elementwise" (%x, %y) : (tensor<8xf32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf16>) {
// CHECK-NEXT:    ^bb0(%a: tensor<8xf32>, %b: tensor<8xf32>):
// CHECK-NEXT:      %m = graph.mul %a, %b : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT:      %s = graph.silu %m : (tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT:      %h = graph.cast %s : (tensor<8xf32>) -> tensor<8xf16>
// CHECK-NEXT:      graph.yield %s, %h : tensor<8xf32>, tensor<8xf16>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r, %r_1 : tensor<8xf32>, tensor<8xf16>

// Every other kind, with its anchor alone.
func.func @kinds(%x: tensor<1x2x4x8xf32>, %s: tensor<8xf32>) {
  %0 = graph.kernel "norm" (%x, %s) : (tensor<1x2x4x8xf32>, tensor<8xf32>) -> tensor<1x2x4x8xf32> {
  ^bb0(%a: tensor<1x2x4x8xf32>, %b: tensor<8xf32>):
    %n = graph.rms_norm %a, %b : (tensor<1x2x4x8xf32>, tensor<8xf32>) -> tensor<1x2x4x8xf32>
    graph.yield %n : tensor<1x2x4x8xf32>
  }
  %1 = graph.kernel "softmax" (%x) : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  ^bb0(%a: tensor<1x2x4x8xf32>):
    %n = graph.softmax %a : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
    graph.yield %n : tensor<1x2x4x8xf32>
  }
  %2 = graph.kernel "attention" (%x, %x, %x) : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  ^bb0(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>):
    %n = graph.attention %q, %k, %v {causal = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
    graph.yield %n : tensor<1x2x4x8xf32>
  }
  %3 = graph.kernel "pool" (%x) : (tensor<1x2x4x8xf32>) -> tensor<1x2x1x1xf32> {
  ^bb0(%a: tensor<1x2x4x8xf32>):
    %n = graph.global_avg_pool %a : (tensor<1x2x4x8xf32>) -> tensor<1x2x1x1xf32>
    graph.yield %n : tensor<1x2x1x1xf32>
  }
  func.return
}

// CHECK-LABEL: func.func @kinds(
// CHECK-NEXT:    %0 = graph.kernel "norm" (%x, %s) : (tensor<1x2x4x8xf32>, tensor<8xf32>) -> tensor<1x2x4x8xf32> {
// CHECK-NEXT:    ^bb0(%a: tensor<1x2x4x8xf32>, %b: tensor<8xf32>):
// CHECK-NEXT:      %n = graph.rms_norm %a, %b : (tensor<1x2x4x8xf32>, tensor<8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NEXT:      graph.yield %n : tensor<1x2x4x8xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %1 = graph.kernel "softmax" (%x) : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
// CHECK-NEXT:    ^bb0(%a: tensor<1x2x4x8xf32>):
// CHECK-NEXT:      %n = graph.softmax %a : (tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NEXT:      graph.yield %n : tensor<1x2x4x8xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %2 = graph.kernel "attention" (%x, %x, %x) : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
// CHECK-NEXT:    ^bb0(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>):
// CHECK-NEXT:      %n = graph.attention %q, %k, %v {causal = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NEXT:      graph.yield %n : tensor<1x2x4x8xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %3 = graph.kernel "pool" (%x) : (tensor<1x2x4x8xf32>) -> tensor<1x2x1x1xf32> {
// CHECK-NEXT:    ^bb0(%a: tensor<1x2x4x8xf32>):
// CHECK-NEXT:      %n = graph.global_avg_pool %a : (tensor<1x2x4x8xf32>) -> tensor<1x2x1x1xf32>
// CHECK-NEXT:      graph.yield %n : tensor<1x2x1x1xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return

// A "matmul" kernel's norm epilogue: a layer/rms norm over the last dim, last in the region
// (graph-fuse's post-LN o-projection + residual add -> LayerNorm).
func.func @norm_epilogue(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %r: tensor<4x16xf32>, %g: tensor<16xf32>) -> tensor<4x16xf32> {
  %y = graph.kernel "matmul" (%x, %w, %r, %g) : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32> {
  ^bb0(%a: tensor<4x8xf32>, %wa: tensor<16x8xf32>, %ra: tensor<4x16xf32>, %ga: tensor<16xf32>):
    %h = graph.linear %a, %wa : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
    %s = graph.add %h, %ra : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %n = graph.layer_norm %s, %ga : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
    graph.yield %n : tensor<4x16xf32>
  }
  func.return %y : tensor<4x16xf32>
}

// CHECK-LABEL: func.func @norm_epilogue(
// CHECK:           %s = graph.add %h, %ra
// CHECK-NEXT:      %n = graph.layer_norm %s, %ga
// CHECK-NEXT:      graph.yield %n : tensor<4x16xf32>
