// RUN: infer-opt %s --split-input-file -p graph-canonicalize | filecheck %s
// RUN: not infer-opt %S/Inputs/split-with-error.mlir --split-input-file 2>&1 | filecheck %s --check-prefix=ERR

// Each chunk is a module of its own, printed with the separator between them.
// An error in a later chunk reports that chunk's line in the whole file.

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
// CHECK:      {{^}}// {{-----}}
// CHECK:      func.func @b(%x: tensor<2xf32>) -> tensor<2xf32> {
// CHECK-NEXT:   %0 = graph.relu %x : (tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:   func.return %0 : tensor<2xf32>

// ERR:      func.func @ok()
// ERR-NOT:  {{Traceback|internal error}}
// ERR:      split-with-error.mlir:9:3: error: 'graph.relu' op result #0 has shape 3 but the operands and attributes give 2
// ERR-NOT:  {{Traceback|internal error}}
