// RUN: python -c "print('func.func @f() {' + '\"test.op\"() ({' * 5000 + '})' * 5000 + ' func.return }')" > %t.mlir
// RUN: not infer-opt %t.mlir 2>&1 | filecheck %s
// RUN: python -c "print('func.func @f() -> tensor<1xf32> {\n  %%0 = graph.constant dense<' + '[' * 5000 + '1.0' + ']' * 5000 + '> : tensor<1xf32>\n  func.return %%0 : tensor<1xf32>\n}')" > %t.attr.mlir
// RUN: not infer-opt %t.attr.mlir 2>&1 | filecheck %s

// Input nesting deeper than the parser's recursion allows (regions, then
// attributes) is a one-line error, not a RecursionError traceback.

// CHECK-NOT: {{Traceback|internal error}}
// CHECK: error: the input nests regions or attributes too deeply for the parser
// CHECK-NOT: {{Traceback|internal error}}
