// RUN: not infer-opt %s -p graph-constant-fold 2>&1 | filecheck %s
// RUN: infer-opt %s | filecheck %s --check-prefix=LAZY

// The weight file is opened when a weight is first read: folding needs the
// value and reports the graph.weight op; printing alone does not read it.

builtin.module attributes {graph.weights = "no-such-file.safetensors"} {
  func.func @f() -> tensor<2xf32> {
    // CHECK-NOT: {{Traceback|internal error}}
    // CHECK: {{^}}{{.*}}missing-weights.mlir:[[# @LINE + 1]]:5: error: 'graph.weight' op weight file '{{.*}}no-such-file.safetensors' does not exist
    %w = graph.weight @w : tensor<2xf32>
    %0 = graph.neg %w : (tensor<2xf32>) -> tensor<2xf32>
    func.return %0 : tensor<2xf32>
  }
}

// LAZY: %w = graph.weight @w : tensor<2xf32>
