// RUN: infer-opt %s -p graph-dce | filecheck %s
// RUN: infer-opt %s -p dce | filecheck %s

// graph-dce is upstream dce under a graph name (every graph op, graph.weight
// included, is Pure): both runs must give the same result. Chains of unused
// ops disappear, so do unused weights and constants; functions stay.

builtin.module attributes {graph.weights = "unused.safetensors"} {
  func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %w = graph.weight @unused : tensor<3x3xf32>
    %c = graph.constant dense<1.0> : tensor<f32>
    %0 = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
    %1 = graph.add %0, %c : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
    %2 = graph.relu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %3 = graph.exp %2 : (tensor<2x3xf32>) -> tensor<2x3xf32>
    func.return %2 : tensor<2x3xf32>
  }

  func.func private @helper(%x: tensor<4xf32>) {
    %0 = graph.neg %x : (tensor<4xf32>) -> tensor<4xf32>
    func.return
  }
}

// CHECK:      builtin.module {
// CHECK-NEXT:   func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
// CHECK-NEXT:     %0 = graph.relu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:     func.return %0 : tensor<2x3xf32>
// CHECK-NEXT:   }
// CHECK-NEXT:   func.func private @helper(%x: tensor<4xf32>) {
// CHECK-NEXT:     func.return
// CHECK-NEXT:   }
// CHECK-NEXT: }
