// RUN: infer-opt %s --split-input-file -p graph-canonicalize | filecheck %s
// RUN: not infer-opt %S/Inputs/split-with-error.mlir --split-input-file -p graph-canonicalize 2>&1 | filecheck %s --check-prefix=ERR
// RUN: not infer-opt %S/Inputs/split-with-error.mlir --split-input-file -p graph-canonicalize 2>/dev/null | filecheck %s --check-prefix=OUT
// RUN: not infer-opt %S/Inputs/split-with-error.mlir 2>&1 | filecheck %s --check-prefix=WHOLE

// As in mlir-opt, --split-input-file processes each chunk as a module of its
// own and joins the outputs with the separator. A chunk that fails reports its
// error (with its line in the whole file) and prints nothing; the chunks after
// it still run, and the exit status is 1. Without the flag the file is one
// module: the separator is a comment.

func.func @a(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = graph.neg %x : (tensor<2xf32>) -> tensor<2xf32>
  %1 = graph.neg %0 : (tensor<2xf32>) -> tensor<2xf32>
  func.return %1 : tensor<2xf32>
}

// -----

func.func @b(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = graph.relu %x : (tensor<2xf32>) -> tensor<2xf32>
  %1 = graph.relu %0 : (tensor<2xf32>) -> tensor<2xf32>
  func.return %1 : tensor<2xf32>
}

// CHECK:      func.func @a(%x: tensor<2xf32>) -> tensor<2xf32> {
// CHECK-NEXT:   func.return %x : tensor<2xf32>
// CHECK:      {{^}}// {{-----$}}
// CHECK-NEXT: builtin.module {
// CHECK-NEXT:   func.func @b(%x: tensor<2xf32>) -> tensor<2xf32> {
// CHECK-NEXT:     %0 = graph.relu %x : (tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:     func.return %0 : tensor<2xf32>

// ERR:      func.func @ok()
// ERR-NOT:  {{Traceback|internal error}}
// ERR:      split-with-error.mlir:9:3: error: 'graph.relu' op result #0 has shape 3 but the operands and attributes give 2
// ERR-NOT:  {{Traceback|internal error}}
// ERR:      func.func @after(%x: tensor<2xf32>) -> tensor<2xf32> {
// ERR-NEXT:   func.return %x : tensor<2xf32>

// OUT:      builtin.module {
// OUT-NEXT:   func.func @ok() {
// OUT:      {{^}}// {{-----$}}
// OUT-NEXT: {{^}}// {{-----$}}
// OUT-NEXT: builtin.module {
// OUT-NEXT:   func.func @after(

// WHOLE:     split-with-error.mlir:9:3: error: 'graph.relu' op result #0 has shape 3
// WHOLE-NOT: func.func
