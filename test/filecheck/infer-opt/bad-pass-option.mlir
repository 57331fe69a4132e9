// RUN: not infer-opt %s -p 'graph-constant-fold{max-elements=many}' 2>&1 | filecheck %s --check-prefix=TYPE
// RUN: not infer-opt %s -p 'graph-constant-fold{max-elemnts=4}' 2>&1 | filecheck %s --check-prefix=NAME
// RUN: not infer-opt %s -p 'graph-canonicalize{ignore-signed-zeros=maybe}' 2>&1 | filecheck %s --check-prefix=BOOL
// RUN: not infer-opt %s -p 'graph-dce{aggressive=true}' 2>&1 | filecheck %s --check-prefix=NONE
// RUN: not infer-opt %s -p 'graph-constant-fold{max-elements=-1}' 2>&1 | filecheck %s --check-prefix=RANGE

// Pass options are checked before the input is read: a value of the wrong
// type and an unknown option name are one line naming the option and listing
// the valid ones. A value out of range is checked by the pass when it runs.

// TYPE-NOT: {{Traceback|internal error}}
// TYPE: infer-opt: error: pass 'graph-constant-fold': option 'max-elements' expects <int>, got 'many'; the options of 'graph-constant-fold' are: max-elements=<int> (default 16777216), inline-limit=<int> (default 16) (infer-opt --help-pass graph-constant-fold)
// TYPE-NOT: {{Traceback|internal error}}
// NAME-NOT: {{Traceback|internal error}}
// NAME: infer-opt: error: pass 'graph-constant-fold' has no option 'max-elemnts' (did you mean 'max-elements'?); the options of 'graph-constant-fold' are: max-elements=<int> (default 16777216), inline-limit=<int> (default 16)
// NAME-NOT: {{Traceback|internal error}}
// BOOL-NOT: {{Traceback|internal error}}
// BOOL: infer-opt: error: pass 'graph-canonicalize': option 'ignore-signed-zeros' expects <bool>, got 'maybe'; the options of 'graph-canonicalize' are: ignore-signed-zeros=<bool> (default false)
// BOOL-NOT: {{Traceback|internal error}}
// NONE: infer-opt: error: pass 'graph-dce' has no option 'aggressive'; 'graph-dce' takes no options
// RANGE-NOT: {{Traceback|internal error}}
// RANGE: bad-pass-option.mlir: error: graph-constant-fold: max-elements (-1) and inline-limit (16) must be >= 0
// RANGE-NOT: {{Traceback|internal error}}

func.func @f() {
  func.return
}
