// RUN: rm -rf %t && mkdir -p %t && cp %s %t/model.mlir
// RUN: cd %t && infer-opt model.mlir -p 'graph-merge-summed-convs{target=edge}' -o out.mlir
// RUN: filecheck %s < %t/out.mlir
// RUN: python -c "import re, os, numpy as np; from safetensors.numpy import load_file; text = open('%t/out.mlir').read(); f = re.search(r'graph.weights = \"([^\"]+)\"', text).group(1); w = load_file(os.path.join('%t', f)); print(sorted(w)); print(w['conv.weight.merged'][1, :, 0, 0].tolist(), w['conv.bias.merged'].tolist())" | filecheck %s --check-prefix=FILE
// RUN: infer-opt %s -p graph-merge-summed-convs | filecheck %s --check-prefix=OFF

// Two convs of 8 input channels each, summed: on edge's 16-row array one array pass each, one
// pass for both merged over their stacked inputs (concat along the channels, weights stacked
// the same way, biases summed). Not where the merged conv takes as many passes (16 + 16
// channels: two either way), nor where the convs differ in more than their input channels (a
// kernel size), nor without a target.

// CHECK-LABEL: func.func @merged(
// CHECK-NEXT:    %w = graph.weight @conv.weight.merged : tensor<4x16x1x1xf32>
// CHECK-NEXT:    %bias = graph.weight @conv.bias.merged : tensor<4xf32>
// CHECK-NEXT:    %stacked = graph.concat %a, %b {axis = 1 : i64} : (tensor<1x8x4x4xf32>, tensor<1x8x4x4xf32>) -> tensor<1x16x4x4xf32>
// CHECK-NEXT:    %y = graph.conv2d %stacked, %w, %bias : (tensor<1x16x4x4xf32>, tensor<4x16x1x1xf32>, tensor<4xf32>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT:    func.return %y : tensor<1x4x4x4xf32>
func.func @merged(%a: tensor<1x8x4x4xf32>, %b: tensor<1x8x4x4xf32>) -> tensor<1x4x4x4xf32> {
  %wa = graph.constant dense<1.0> : tensor<4x8x1x1xf32>
  %ba = graph.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %wb = graph.constant dense<2.0> : tensor<4x8x1x1xf32>
  %bb = graph.constant dense<[0.5, 0.5, 0.5, 0.5]> : tensor<4xf32>
  %ca = graph.conv2d %a, %wa, %ba : (tensor<1x8x4x4xf32>, tensor<4x8x1x1xf32>, tensor<4xf32>) -> tensor<1x4x4x4xf32>
  %cb = graph.conv2d %b, %wb, %bb : (tensor<1x8x4x4xf32>, tensor<4x8x1x1xf32>, tensor<4xf32>) -> tensor<1x4x4x4xf32>
  %y = graph.add %ca, %cb : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %y : tensor<1x4x4x4xf32>
}

// FILE: ['conv.bias.merged', 'conv.weight.merged']
// FILE-NEXT: [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0] [1.5, 2.5, 3.5, 4.5]

// CHECK-LABEL: func.func @as_many_passes(
// CHECK-NOT:     graph.concat
// CHECK:         graph.add
func.func @as_many_passes(%a: tensor<1x16x4x4xf32>, %b: tensor<1x16x4x4xf32>) -> tensor<1x4x4x4xf32> {
  %wa = graph.constant dense<1.0> : tensor<4x16x1x1xf32>
  %wb = graph.constant dense<2.0> : tensor<4x16x1x1xf32>
  %ca = graph.conv2d %a, %wa : (tensor<1x16x4x4xf32>, tensor<4x16x1x1xf32>) -> tensor<1x4x4x4xf32>
  %cb = graph.conv2d %b, %wb : (tensor<1x16x4x4xf32>, tensor<4x16x1x1xf32>) -> tensor<1x4x4x4xf32>
  %y = graph.add %ca, %cb : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %y : tensor<1x4x4x4xf32>
}

// CHECK-LABEL: func.func @kernels_differ(
// CHECK-NOT:     graph.concat
// CHECK:         graph.add
func.func @kernels_differ(%a: tensor<1x8x4x4xf32>, %b: tensor<1x8x4x4xf32>) -> tensor<1x4x4x4xf32> {
  %wa = graph.constant dense<1.0> : tensor<4x8x1x1xf32>
  %wb = graph.constant dense<2.0> : tensor<4x8x3x3xf32>
  %ca = graph.conv2d %a, %wa : (tensor<1x8x4x4xf32>, tensor<4x8x1x1xf32>) -> tensor<1x4x4x4xf32>
  %cb = graph.conv2d %b, %wb {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x8x4x4xf32>, tensor<4x8x3x3xf32>) -> tensor<1x4x4x4xf32>
  %y = graph.add %ca, %cb : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %y : tensor<1x4x4x4xf32>
}

// OFF-LABEL: func.func @merged(
// OFF-NOT:     graph.concat
// OFF:         graph.add
