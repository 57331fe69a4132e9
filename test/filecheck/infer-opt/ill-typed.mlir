// RUN: not infer-opt %s 2>&1 | filecheck %s

// An op whose declared result type disagrees with shape inference: one line
// naming the file, line and column of the op, exit status 1, no module printed.

// CHECK-NOT: {{Traceback|internal error|builtin.module}}
func.func @f(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // CHECK: {{^}}{{.*}}ill-typed.mlir:[[# @LINE + 1]]:3: error: 'graph.relu' op result #0 has shape 3x2 but the operands and attributes give 2x3{{$}}
  %0 = graph.relu %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
  func.return %0 : tensor<3x2xf32>
}
// CHECK-NOT: {{Traceback|internal error|builtin.module}}
