// RUN: not infer-opt %s -p graph-constant-fold 2>&1 | filecheck %s
// RUN: not infer-opt %s 2>&1 | filecheck %s --check-prefix=PRINT

// Folding needs the value and reports the graph.weight op; printing checks that
// every referenced weight exists before writing a module that could not be loaded.

builtin.module attributes {graph.weights = "no-such-file.safetensors"} {
  func.func @f() -> tensor<2xf32> {
    // CHECK-NOT: {{Traceback|internal error}}
    // CHECK: {{^}}{{.*}}missing-weights.mlir:[[# @LINE + 2]]:5: error: 'graph.weight' op weight file '{{.*}}no-such-file.safetensors' does not exist
    // PRINT: {{^}}{{.*}}missing-weights.mlir:[[# @LINE + 1]]:5: error: 'graph.weight' op weight file '{{.*}}no-such-file.safetensors' does not exist
    %w = graph.weight @w : tensor<2xf32>
    %0 = graph.neg %w : (tensor<2xf32>) -> tensor<2xf32>
    func.return %0 : tensor<2xf32>
  }
}
