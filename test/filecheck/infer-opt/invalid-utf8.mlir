// RUN: not infer-opt %S/Inputs/invalid-utf8.mlir 2>&1 | filecheck %s

// A file that is not UTF-8 is reported with the line of the first bad byte.

// CHECK-NOT: {{Traceback|internal error}}
// CHECK: {{^}}{{.*}}Inputs/invalid-utf8.mlir:3: error: input is not valid UTF-8 (byte 0xe9)
// CHECK-NOT: {{Traceback|internal error}}
