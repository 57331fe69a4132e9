// RUN: not infer-opt %s 2>&1 | filecheck %s

// The input ends in the middle of a type: a parse error at the end of the
// file, with its line and column.

// CHECK-NOT: {{Traceback|internal error|builtin.module}}
// CHECK: {{^}}{{.*}}truncated.mlir:[[# @LINE + 4]]:{{[0-9]+}}: error: {{.+}}
// CHECK-NOT: {{Traceback|internal error|builtin.module}}

func.func @f(%x: tensor<2xf32>) {
  %0 = graph.relu %x : (tensor<2xf32>) -> tensor<2x