// RUN: infer-opt %s -p 'graph-quantize{calibration="%S/Inputs/graph-quantize.calib.json"}' | filecheck %s --check-prefix=QDQ
// RUN: infer-opt %s -p 'graph-quantize{calibration="%S/Inputs/graph-quantize.calib.json"},graph-quantize-kernels' | filecheck %s --check-prefix=INT
// RUN: infer-opt %s -p 'graph-quantize{calibration="%S/Inputs/graph-quantize.calib.json"},graph-quantize-kernels{reciprocal-quantize=false}' | filecheck %s --check-prefix=DIV
// RUN: infer-opt %s -p 'graph-quantize{calibration="%S/Inputs/graph-quantize.calib.json" exclude=conv2d_1},graph-quantize-kernels' | filecheck %s --check-prefix=EXCL
// RUN: not infer-opt %s -p 'graph-quantize{calibration="%S/Inputs/graph-quantize.calib.json" exclude=conv2d_9}' 2>&1 | filecheck %s --check-prefix=BADEXCL
// RUN: not infer-opt %s -p 'graph-quantize' 2>&1 | filecheck %s --check-prefix=NOTABLE

// A conv -> relu -> conv -> pool -> linear model: graph-quantize rewrites the operands of
// each conv2d / linear (int8 activations with the calibrated symmetric scale threshold / 127,
// int8 weights per output channel, int32 biases); graph-quantize-kernels turns each layer
// into an integer kernel: conv2d_0 feeds conv2d_1 through a relu, so it requantizes to int8
// (relu on the int32 accumulator); conv2d_1 feeds a float op (pooling) and dequantizes;
// the pooled float value is requantized (by 1 / scale) for the linear layer.

func.func @main(%x: tensor<1x1x4x4xf32> {graph.name = "x"}) -> (tensor<1x2xf32> {graph.name = "y"}) {
  %w0 = graph.constant dense<[[[[1.0, -0.5], [0.25, 0.0]]], [[[0.5, 0.5], [-1.0, 0.0]]]]> : tensor<2x1x2x2xf32>
  %b0 = graph.constant dense<[0.1, -0.2]> : tensor<2xf32>
  %c0 = graph.conv2d %x, %w0, %b0 {padding = array<i64: 0, 0, 1, 1>} : (tensor<1x1x4x4xf32>, tensor<2x1x2x2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %r0 = graph.relu %c0 : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %w1 = graph.constant dense<[[[[2.0]], [[-1.0]]], [[[0.5]], [[0.25]]]]> : tensor<2x2x1x1xf32>
  %c1 = graph.conv2d %r0, %w1 : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.global_avg_pool %c1 : (tensor<1x2x4x4xf32>) -> tensor<1x2x1x1xf32>
  %f = graph.reshape %p : (tensor<1x2x1x1xf32>) -> tensor<1x2xf32>
  %w2 = graph.constant dense<[[1.0, 2.0], [-3.0, 0.5]]> : tensor<2x2xf32>
  %y = graph.linear %f, %w2 : (tensor<1x2xf32>, tensor<2x2xf32>) -> tensor<1x2xf32>
  func.return %y : tensor<1x2xf32>
}

// QDQ:      %x_scale = graph.constant dense<1.000000e-02> : tensor<f32>
// QDQ-NEXT: %x_q = graph.quantize_linear %x, %x_scale : (tensor<1x1x4x4xf32>, tensor<f32>) -> tensor<1x1x4x4xi8>
// QDQ-NEXT: %x_dq = graph.dequantize_linear %x_q, %x_scale : (tensor<1x1x4x4xi8>, tensor<f32>) -> tensor<1x1x4x4xf32>
// QDQ-NEXT: %[[W0:.*]] = graph.constant dense<{{\[\[\[\[}}127, -64], [32, 0]]], {{\[\[\[}}64, 64], [-127, 0]]]]> : tensor<2x1x2x2xi8>
// QDQ-NEXT: %[[S0:.*]] = graph.constant dense<0.00787401572> : tensor<2xf32>
// QDQ-NEXT: %w0_dq = graph.dequantize_linear %[[W0]], %[[S0]] {axis = 0 : i64} : (tensor<2x1x2x2xi8>, tensor<2xf32>) -> tensor<2x1x2x2xf32>
// QDQ-NEXT: %[[B0:.*]] = graph.constant dense<[1270, -2540]> : tensor<2xi32>
// QDQ-NEXT: %[[BS:.*]] = graph.constant dense<7.87401586e-05> : tensor<2xf32>
// QDQ-NEXT: %b0_dq = graph.dequantize_linear %[[B0]], %[[BS]] {axis = 0 : i64} : (tensor<2xi32>, tensor<2xf32>) -> tensor<2xf32>
// QDQ-NEXT: %c0 = graph.conv2d %x_dq, %w0_dq, %b0_dq {graph.name = "conv2d_0", padding = array<i64: 0, 0, 1, 1>}
// QDQ:      %r0_scale = graph.constant dense<2.000000e-02> : tensor<f32>
// QDQ-NEXT: %r0_q = graph.quantize_linear %r0, %r0_scale
// QDQ:      %c1 = graph.conv2d %r0_dq, %w1_dq {graph.name = "conv2d_1"}
// QDQ:      %f_q = graph.quantize_linear %f
// QDQ:      %y = graph.linear %f_dq, %w2_dq {graph.name = "linear_0"}

// INT-LABEL: func.func @main
// INT:       %[[INV:.*]] = graph.constant dense<1.000000e+02> : tensor<1xf32>
// INT-NEXT:  %x_q = graph.requantize %x, %[[INV]] : (tensor<1x1x4x4xf32>, tensor<1xf32>) -> tensor<1x1x4x4xi8>
// INT:       %c0_acc = graph.conv2d_integer %x_q, %{{.*}}, %{{.*}} {padding = array<i64: 0, 0, 1, 1>} : (tensor<1x1x4x4xi8>, tensor<2x1x2x2xi8>, tensor<2xi32>) -> tensor<1x2x4x4xi32>
// 0.01 * (1 / 127) / 0.02:
// INT-NEXT:  %[[M:.*]] = graph.constant dense<0.00393700786> : tensor<1xf32>
// INT-NEXT:  %[[RELU:.*]] = graph.relu %c0_acc : (tensor<1x2x4x4xi32>) -> tensor<1x2x4x4xi32>
// INT-NEXT:  %r0_q = graph.requantize %[[RELU]], %[[M]] {graph.name = "conv2d_0"} : (tensor<1x2x4x4xi32>, tensor<1xf32>) -> tensor<1x2x4x4xi8>
// INT:       %c1_acc = graph.conv2d_integer %r0_q, %{{.*}} : (tensor<1x2x4x4xi8>, tensor<2x2x1x1xi8>) -> tensor<1x2x4x4xi32>
// INT-NEXT:  %[[S1:.*]] = graph.constant dense<[0.000314960635, 7.87401586e-05]> : tensor<2xf32>
// INT-NEXT:  %c1 = graph.dequantize_linear %c1_acc, %[[S1]] {graph.name = "conv2d_1", axis = 1 : i64} : (tensor<1x2x4x4xi32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
// INT-NEXT:  %p = graph.global_avg_pool %c1
// INT:       %f_q = graph.requantize %f, %{{.*}} : (tensor<1x2xf32>, tensor<1xf32>) -> tensor<1x2xi8>
// INT:       %y_acc = graph.linear_integer %f_q, %{{.*}} : (tensor<1x2xi8>, tensor<2x2xi8>) -> tensor<1x2xi32>
// INT:       %y = graph.dequantize_linear %y_acc, %{{.*}} {graph.name = "linear_0", axis = 1 : i64}
// INT-NEXT:  func.return %y : tensor<1x2xf32>
// INT-NOT:   graph.quantize_linear
// INT-NOT:   graph.conv2d %

// DIV: %x_q = graph.quantize_linear %x
// DIV: %f_q = graph.quantize_linear %f

// EXCL: %c0_acc = graph.conv2d_integer
// EXCL: %c0 = graph.dequantize_linear %c0_acc, %{{.*}} {graph.name = "conv2d_0"}
// EXCL: %r0 = graph.relu %c0 : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
// EXCL: %c1 = graph.conv2d %r0, %w1 {graph.name = "conv2d_1"}
// EXCL: graph.linear_integer

// BADEXCL: error: graph-quantize: exclude names no quantizable layer: conv2d_9 (layers: conv2d_0, conv2d_1, linear_0)
// NOTABLE: error: graph-quantize: give the calibration table: graph-quantize{calibration=FILE.json}
