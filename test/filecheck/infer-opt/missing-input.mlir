// RUN: not infer-opt %t.does-not-exist.mlir 2>&1 | filecheck %s

// CHECK-NOT: {{Traceback|internal error}}
// CHECK: error: {{.*}}does-not-exist.mlir
// CHECK-NOT: {{Traceback|internal error}}
