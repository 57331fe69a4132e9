// RUN: not infer-opt %s -p 'graph-constant-fold{max-elements=1,inline-limit=1}' 2>&1 | filecheck %s
// RUN: not infer-opt %s -p 'graph-constant-fold{max-elements=1' 2>&1 | filecheck %s

// A malformed pipeline (options are separated by spaces, not commas; an
// unclosed brace) is a one-line error, not a traceback.

// CHECK-NOT: {{Traceback|internal error}}
// CHECK: infer-opt: error:
// CHECK-NOT: {{Traceback|internal error}}

func.func @f() {
  func.return
}
