// RUN: infer-opt %s | filecheck %s
// An empty file (comments only) is an empty module, as in mlir-opt.

// CHECK: builtin.module {
// CHECK-NEXT: }
