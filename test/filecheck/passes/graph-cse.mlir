// RUN: infer-opt %s -p graph-cse | filecheck %s
// RUN: infer-opt %s -p graph-cse --verify-each-numerically -o /dev/null

// Work an exporter repeats per layer is done once: the attention-mask bias of every layer of a
// BERT exported by torch.onnx (the same where of the same mask and constants), and the same
// weight read twice. Ops that differ in an operand or a property stay.

func.func @main(%mask: tensor<1x1x4x4xi1>, %s1: tensor<1x2x4x4xf32>, %s2: tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) {
  %zero = graph.constant dense<0.0> : tensor<1xf32>
  %ninf = graph.constant dense<-3.0e+38> : tensor<1xf32>
  %bias1 = graph.where %mask, %zero, %ninf : (tensor<1x1x4x4xi1>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x1x4x4xf32>
  %z1 = graph.add %s1, %bias1 : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %zero2 = graph.constant dense<0.0> : tensor<1xf32>
  %ninf2 = graph.constant dense<-3.0e+38> : tensor<1xf32>
  %bias2 = graph.where %mask, %zero2, %ninf2 : (tensor<1x1x4x4xi1>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x1x4x4xf32>
  %z2 = graph.add %s2, %bias2 : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %other = graph.softmax %z2 {axis = 2 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %last = graph.softmax %z2 {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  func.return %z1, %other, %last : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
}

// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    %zero = graph.constant dense<0.000000e+00> : tensor<1xf32>
// CHECK-NEXT:    %ninf = graph.constant dense<-3.000000e+38> : tensor<1xf32>
// CHECK-NEXT:    %bias1 = graph.where %mask, %zero, %ninf
// CHECK-NEXT:    %z1 = graph.add %s1, %bias1
// CHECK-NEXT:    %z2 = graph.add %s2, %bias1
// CHECK-NEXT:    %other = graph.softmax %z2 {axis = 2 : i64}
// CHECK-NEXT:    %last = graph.softmax %z2 {axis = 3 : i64}
// CHECK-NEXT:    func.return %z1, %other, %last
