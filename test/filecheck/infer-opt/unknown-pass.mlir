// RUN: not infer-opt %s -p graph-canonicalise 2>&1 | filecheck %s
// RUN: not infer-opt %s -p graph-dce,no-such-pass 2>&1 | filecheck %s --check-prefix=SECOND

// CHECK-NOT: {{Traceback|internal error}}
// CHECK: infer-opt: error: unknown pass 'graph-canonicalise' (did you mean 'graph-canonicalize'?); `infer-opt --list-passes` lists them
// CHECK-NOT: {{Traceback|internal error}}
// SECOND-NOT: {{Traceback|internal error}}
// SECOND: infer-opt: error: unknown pass 'no-such-pass'
// SECOND-NOT: {{Traceback|internal error}}

func.func @f() {
  func.return
}
