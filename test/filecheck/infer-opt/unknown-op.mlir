// RUN: not infer-opt %s 2>&1 | filecheck %s

// CHECK-NOT: {{Traceback|internal error|builtin.module}}
func.func @f(%x: tensor<2xf32>) {
  // CHECK: {{^}}{{.*}}unknown-op.mlir:[[# @LINE + 1]]:{{[0-9]+}}: error: Operation graph.frobnicate is not registered
  %0 = graph.frobnicate %x : (tensor<2xf32>) -> tensor<2xf32>
  func.return
}
// CHECK-NOT: {{Traceback|internal error|builtin.module}}
