// RUN: not infer-opt %s -p 'graph-constant-fold{max-elements=many}' 2>&1 | filecheck %s --check-prefix=TYPE
// RUN: not infer-opt %s -p 'graph-constant-fold{max-elemnts=4}' 2>&1 | filecheck %s --check-prefix=NAME
// RUN: not infer-opt %s -p 'graph-canonicalize{ignore-signed-zeros=maybe}' 2>&1 | filecheck %s --check-prefix=BOOL
// RUN: not infer-opt %s -p 'graph-constant-fold{max-elements=-1}' 2>&1 | filecheck %s --check-prefix=RANGE

// Pass options are checked before the input is read: a value of the wrong
// type, an unknown option name, and a value out of range (checked by the pass).

// TYPE-NOT: {{Traceback|internal error}}
// TYPE: infer-opt: error: Incompatible types: given ('many',), expected <class 'int'>
// TYPE-NOT: {{Traceback|internal error}}
// NAME-NOT: {{Traceback|internal error}}
// NAME: infer-opt: error: Provided arguments ["max_elemnts"] not found in expected arguments ["max_elements", "inline_limit"]
// NAME-NOT: {{Traceback|internal error}}
// BOOL-NOT: {{Traceback|internal error}}
// BOOL: infer-opt: error:
// BOOL-NOT: {{Traceback|internal error}}
// RANGE-NOT: {{Traceback|internal error}}
// RANGE: error: graph-constant-fold: max-elements (-1) and inline-limit (16) must be >= 0
// RANGE-NOT: {{Traceback|internal error}}

func.func @f() {
  func.return
}
