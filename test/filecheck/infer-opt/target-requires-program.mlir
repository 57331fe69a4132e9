// RUN: not infer-opt %s -t npu-asm 2>&1 | filecheck %s
// RUN: not infer-opt %s -t npu-bin -p graph-canonicalize 2>&1 | filecheck %s --check-prefix=BIN
// RUN: infer-opt %S/Inputs/npu-program.mlir -t npu-asm | filecheck %s --check-prefix=ASM

// A -t target refuses a module it cannot emit: npu-asm and npu-bin print
// npu.program ops, so graph-level IR (not lowered with compile-npu) is one
// error and exit status 1, not an empty output.

func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// CHECK-NOT: {{Traceback|internal error}}
// CHECK:     target-requires-program.mlir: error: -t npu-asm emits npu.program ops and this module has none (it holds func.func): lower it first, e.g. -p 'compile-npu{target=edge}' for graph-level IR or -p 'tile-to-npu' for planned tile-level IR
// CHECK-NOT: {{.+}}

// BIN:       target-requires-program.mlir: error: -t npu-bin emits npu.program ops and this module has none

// ASM:       li rd=r1, imm=5
// ASM-NEXT:  halt
