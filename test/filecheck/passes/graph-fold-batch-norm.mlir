// RUN: rm -rf %t && mkdir -p %t && cp %s %t/model.mlir
// RUN: cd %t && infer-opt model.mlir -p graph-fold-batch-norm -o out.mlir
// RUN: filecheck %s < %t/out.mlir
// RUN: python -c "import re, os, numpy as np; from safetensors.numpy import load_file; text = open('%t/out.mlir').read(); f = re.search(r'graph.weights = \"([^\"]+)\"', text).group(1); w = load_file(os.path.join('%t', f)); print(sorted(w)); print(w['conv2d.weight.bn_folded'].reshape(-1).tolist(), w['conv2d.bias.bn_folded'].tolist())" | filecheck %s --check-prefix=FILE
// RUN: cd %t && infer-opt model.mlir -p 'graph-fold-batch-norm{erase-dead=false}' | filecheck %s --check-prefix=KEEP

// conv2d (+ bias) / linear followed by a batch norm with constant parameters
// become one conv2d / linear with folded weights in the weight store.

// s = scale / sqrt(var + eps) = [1, 0.5]; W' = W * s; b' = (b - mean) * s + bias.
func.func @conv(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %w = graph.constant dense<[[[[1.0]], [[2.0]]], [[[3.0]], [[4.0]]]]> : tensor<2x2x1x1xf32>
  %c = graph.conv2d %x, %w : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x4x4xf32>
  %s = graph.constant dense<[2.0, 0.5]> : tensor<2xf32>
  %b = graph.constant dense<[1.0, -1.0]> : tensor<2xf32>
  %m = graph.constant dense<[0.5, 0.25]> : tensor<2xf32>
  %v = graph.constant dense<[4.0, 1.0]> : tensor<2xf32>
  %y = graph.batch_norm %c, %s, %b, %m, %v {epsilon = 0.0 : f64} : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  func.return %y : tensor<1x2x4x4xf32>
}

// CHECK-LABEL: func.func @conv(
// CHECK-NEXT:    %w = graph.weight @conv2d.weight.bn_folded : tensor<2x2x1x1xf32>
// CHECK-NEXT:    %bias = graph.weight @conv2d.bias.bn_folded : tensor<2xf32>
// CHECK-NEXT:    %y = graph.conv2d %x, %w, %bias : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
// CHECK-NEXT:    func.return %y : tensor<1x2x4x4xf32>

// FILE: ['conv2d.bias.bn_folded', 'conv2d.bias.bn_folded_1', 'conv2d.weight.bn_folded', 'conv2d.weight.bn_folded_1', 'linear.bias.bn_folded', 'linear.bias.bn_folded_1', 'linear.weight.bn_folded', 'linear.weight.bn_folded_1']
// FILE-NEXT: [1.0, 2.0, 1.5, 2.0] [0.5, -1.125]

// KEEP-LABEL: func.func @conv(
// KEEP-NEXT:    %w = graph.constant
// KEEP-NEXT:    %s = graph.constant
// KEEP-NEXT:    %b = graph.constant
// KEEP-NEXT:    %m = graph.constant
// KEEP-NEXT:    %v = graph.constant
// KEEP-NEXT:    %w_1 = graph.weight @conv2d.weight.bn_folded : tensor<2x2x1x1xf32>
// KEEP-NEXT:    %bias = graph.weight @conv2d.bias.bn_folded : tensor<2xf32>
// KEEP-NEXT:    %y = graph.conv2d %x, %w_1, %bias
// KEEP-NEXT:    func.return %y

// A conv with a bias and padding keeps its attributes; the bias is folded too.
func.func @conv_bias(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %w = graph.constant dense<1.0> : tensor<2x2x3x3xf32>
  %cb = graph.constant dense<[0.5, 1.5]> : tensor<2xf32>
  %c = graph.conv2d %x, %w, %cb {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %y = graph.batch_norm %c, %p, %p, %p, %p : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  func.return %y : tensor<1x2x4x4xf32>
}

// CHECK-LABEL: func.func @conv_bias(
// CHECK-NEXT:    %w = graph.weight @conv2d.weight.bn_folded_1 : tensor<2x2x3x3xf32>
// CHECK-NEXT:    %cb = graph.weight @conv2d.bias.bn_folded_1 : tensor<2xf32>
// CHECK-NEXT:    %y = graph.conv2d %x, %w, %cb {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
// CHECK-NEXT:    func.return %y : tensor<1x2x4x4xf32>

// linear [N, out] + BatchNorm1d over the features.
func.func @linear(%x: tensor<3x4xf32>) -> tensor<3x2xf32> {
  %w = graph.constant dense<[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]> : tensor<2x4xf32>
  %l = graph.linear %x, %w : (tensor<3x4xf32>, tensor<2x4xf32>) -> tensor<3x2xf32>
  %p = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %y = graph.batch_norm %l, %p, %p, %p, %p : (tensor<3x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<3x2xf32>
  func.return %y : tensor<3x2xf32>
}

// CHECK-LABEL: func.func @linear(
// CHECK-NEXT:    %w = graph.weight @linear.weight.bn_folded : tensor<2x4xf32>
// CHECK-NEXT:    %bias = graph.weight @linear.bias.bn_folded : tensor<2xf32>
// CHECK-NEXT:    %y = graph.linear %x, %w, %bias : (tensor<3x4xf32>, tensor<2x4xf32>, tensor<2xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:    func.return %y : tensor<3x2xf32>

// linear [B, T, out] flattened to [B.T, out] + BatchNorm1d (LeViT): folded into the linear,
// the reshape kept after it.
func.func @linear_flattened(%x: tensor<2x3x4xf32>) -> tensor<6x2xf32> {
  %w = graph.constant dense<[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]> : tensor<2x4xf32>
  %l = graph.linear %x, %w : (tensor<2x3x4xf32>, tensor<2x4xf32>) -> tensor<2x3x2xf32>
  %f = graph.reshape %l : (tensor<2x3x2xf32>) -> tensor<6x2xf32>
  %p = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %y = graph.batch_norm %f, %p, %p, %p, %p : (tensor<6x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<6x2xf32>
  func.return %y : tensor<6x2xf32>
}

// CHECK-LABEL: func.func @linear_flattened(
// CHECK-NEXT:    %w = graph.weight @linear.weight.bn_folded_1 : tensor<2x4xf32>
// CHECK-NEXT:    %bias = graph.weight @linear.bias.bn_folded_1 : tensor<2xf32>
// CHECK-NEXT:    %{{.*}} = graph.linear %x, %w, %bias : (tensor<2x3x4xf32>, tensor<2x4xf32>, tensor<2xf32>) -> tensor<2x3x2xf32>
// CHECK-NEXT:    %{{.*}} = graph.reshape %{{.*}} : (tensor<2x3x2xf32>) -> tensor<6x2xf32>
// CHECK-NEXT:    func.return

// Left alone: a reshape that does not keep the linear's features as the last dim, and one
// whose linear has another user.
func.func @keep_reshaped(%x: tensor<2x3x4xf32>) -> (tensor<3x4xf32>, tensor<6x2xf32>, tensor<2x3x2xf32>) {
  %w = graph.constant dense<1.0> : tensor<2x4xf32>
  %p = graph.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %q = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %l0 = graph.linear %x, %w : (tensor<2x3x4xf32>, tensor<2x4xf32>) -> tensor<2x3x2xf32>
  %f0 = graph.reshape %l0 : (tensor<2x3x2xf32>) -> tensor<3x4xf32>
  %y0 = graph.batch_norm %f0, %p, %p, %p, %p : (tensor<3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %l1 = graph.linear %x, %w : (tensor<2x3x4xf32>, tensor<2x4xf32>) -> tensor<2x3x2xf32>
  %f1 = graph.reshape %l1 : (tensor<2x3x2xf32>) -> tensor<6x2xf32>
  %y1 = graph.batch_norm %f1, %q, %q, %q, %q : (tensor<6x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<6x2xf32>
  func.return %y0, %y1, %l1 : tensor<3x4xf32>, tensor<6x2xf32>, tensor<2x3x2xf32>
}

// CHECK-LABEL: func.func @keep_reshaped(
// CHECK:         %y0 = graph.batch_norm %f0
// CHECK:         %y1 = graph.batch_norm %f1

// Left alone: parameters known only at run time, a conv result used twice, a
// weight that is an argument, a rank-3 linear (batch norm's dim 1 is not its
// feature dim), a batch norm on an activation.
func.func @keep(%x: tensor<1x2x4x4xf32>, %mean: tensor<2xf32>, %wa: tensor<2x2x1x1xf32>, %t: tensor<1x2x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x2xf32>, tensor<1x2x4x4xf32>) {
  %w = graph.constant dense<1.0> : tensor<2x2x1x1xf32>
  %p = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %c0 = graph.conv2d %x, %w : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x4x4xf32>
  %y0 = graph.batch_norm %c0, %p, %p, %mean, %p : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %c1 = graph.conv2d %x, %w : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x4x4xf32>
  %y1 = graph.batch_norm %c1, %p, %p, %p, %p : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %c2 = graph.conv2d %x, %wa : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x4x4xf32>
  %y2 = graph.batch_norm %c2, %p, %p, %p, %p : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %lw = graph.constant dense<1.0> : tensor<2x4xf32>
  %l = graph.linear %t, %lw : (tensor<1x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x2xf32>
  %y3 = graph.batch_norm %l, %p, %p, %p, %p : (tensor<1x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2xf32>
  %y4 = graph.batch_norm %x, %p, %p, %p, %p : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  func.return %y0, %y1, %c1, %y2, %y3, %y4 : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x2xf32>, tensor<1x2x4x4xf32>
}

// CHECK-LABEL: func.func @keep(
// CHECK-NEXT:    %w = graph.constant dense<1.000000e+00> : tensor<2x2x1x1xf32>
// CHECK-NEXT:    %p = graph.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK-NEXT:    %c0 = graph.conv2d %x, %w
// CHECK-NEXT:    %y0 = graph.batch_norm %c0, %p, %p, %mean, %p
// CHECK-NEXT:    %c1 = graph.conv2d %x, %w
// CHECK-NEXT:    %y1 = graph.batch_norm %c1, %p, %p, %p, %p
// CHECK-NEXT:    %c2 = graph.conv2d %x, %wa
// CHECK-NEXT:    %y2 = graph.batch_norm %c2, %p, %p, %p, %p
// CHECK-NEXT:    %lw = graph.constant dense<1.000000e+00> : tensor<2x4xf32>
// CHECK-NEXT:    %l = graph.linear %t, %lw
// CHECK-NEXT:    %y3 = graph.batch_norm %l, %p, %p, %p, %p
// CHECK-NEXT:    %y4 = graph.batch_norm %x, %p, %p, %p, %p
// CHECK-NEXT:    func.return
