// RUN: infer-opt %s -p 'compile-npu{target=edge}' --verify-each-numerically --time-passes -t npu-asm 2>&1 | filecheck %s --check-prefix=EDGE
// RUN: infer-opt %s -p 'compile-npu{target=server precision=bf16}' --verify-each-numerically -t npu-asm | filecheck %s --check-prefix=SERVER
// RUN: not env PYTHONPATH=%S/Inputs/numeric-bug-plugin infer-opt %s -p 'graph-canonicalize,test-relu-to-leaky,compile-npu{target=edge}' --verify-each-numerically 2>&1 | filecheck %s --check-prefix=GRAPH
// RUN: not env PYTHONPATH=%S/Inputs/numeric-bug-plugin infer-opt %s -p 'test-scale-constants{factor=1.001}' --verify-each-numerically 2>&1 | filecheck %s --check-prefix=SCALED
// RUN: env PYTHONPATH=%S/Inputs/numeric-bug-plugin infer-opt %s -p 'test-scale-constants{factor=1.001},lower-to-tile' --verify-each-numerically --verify-numerics-rounding-tol=1e-2 | filecheck %s --check-prefix=LOOSER
// RUN: not env PYTHONPATH=%S/Inputs/numeric-bug-plugin infer-opt %s -p 'lower-to-tile{target=server},test-tile-relu-to-abs,tile-to-npu' --verify-each-numerically --verify-numerics-seed=3 2>&1 | filecheck %s --check-prefix=TILE
// RUN: not env PYTHONPATH=%S/Inputs/numeric-bug-plugin infer-opt %s -p 'compile-npu{target=edge},test-npu-drop-wait' --verify-each-numerically 2>&1 | filecheck %s --check-prefix=NPU
// RUN: not infer-opt %s -p 'compile-npu{target=edge}' --verify-each-numerically --verify-numerics-fp32-tol=1e-9 2>&1 | filecheck %s --check-prefix=TIGHT
// RUN: not infer-opt %s -p 'compile-npu{target=edge precision=bf16}' --verify-each-numerically --verify-numerics-bf16-cosine=1 2>&1 | filecheck %s --check-prefix=COSINE
// RUN: not infer-opt %s -p graph-canonicalize --verify-each-numerically --verify-numerics-inputs %s 2>&1 | filecheck %s --check-prefix=NPZ

// --verify-each-numerically runs @main before the first pass and after every pass (each stage of a
// named pipeline) on the interpreter of its level - graph interpreter, tile interpreter, then the
// simulator for the npu program - with the same seeded inputs, and fails at the first pass whose
// results differ beyond its tolerance: bit-exact unless the pass declares otherwise, the e2e
// criteria of its precision across graph -> tile. Inputs/numeric-bug-plugin holds deliberately
// wrong passes (a test-only plugin, one per level), and one that declares it only rounds
// (test-scale-constants: held to --verify-numerics-rounding-tol, not to bit-exactness).

func.func @main(%x: tensor<4x16xf32> {graph.name = "x"}) -> (tensor<4x8xf32> {graph.name = "y"}) {
  %w = graph.constant dense<0.25> : tensor<8x16xf32>
  %b = graph.constant dense<0.5> : tensor<8xf32>
  %h = graph.linear %x, %w, %b : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r = graph.relu %h : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %t = graph.transpose %r {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %u = graph.transpose %t {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %w2 = graph.constant dense<-0.125> : tensor<8x8xf32>
  %y = graph.linear %u, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// EDGE:      halt
// EDGE:      Pass execution timing report
// EDGE:      tile-to-npu
// EDGE-NEXT: verify-numerics

// SERVER: halt

// GRAPH:      verify-each-numerically.mlir:[[# @LINE - 11]]:3: error: --verify-each-numerically: test-relu-to-leaky changed the results: output #0 'y' at [0, 0] is {{0\.0056428[0-9]*}} after it and 0 before (abs error 0.00564; tolerance: bit-exact; 8 of 32 elements differ)
// GRAPH-NEXT: note: on random inputs of seed 0; before the pass @main ran on the graph interpreter, after it on the graph interpreter
// GRAPH-NOT:  Traceback

// SCALED: verify-each-numerically.mlir:[[# @LINE - 15]]:3: error: --verify-each-numerically: test-scale-constants changed the results: output #0 'y' at [2, 0] is {{-2\.554219[0-9]*}} after it and {{-2\.549118[0-9]*}} before (abs error 0.0051 (0.002 of the output scale 2.55); tolerance: abs error <= 1e-05 x scale (fp32 rounding))

// LOOSER: tile.arena_bytes

// TILE:      error: --verify-each-numerically: test-tile-relu-to-abs changed the results: output #0 'y' at {{.*}} after it and {{.*}} before (abs error {{.*}}; tolerance: bit-exact; {{[0-9]+}} of 32 elements differ)
// TILE-NEXT: note: on random inputs of seed 3; before the pass @main ran on the tile interpreter, after it on the tile interpreter

// NPU: error: --verify-each-numerically: after test-npu-drop-wait, @main cannot run on the simulator: fault [race] at instruction {{[0-9]+}} {{.*}}(missing wait/signal)

// TIGHT:      verify-each-numerically.mlir:[[# @LINE - 32]]:1: error: --verify-each-numerically: graph-to-tile (in compile-npu) changed the results: output #0 'y' at [3, 0] is -0.735473633 after it and -0.735471964 before (abs error 1.67e-06 (6.55e-07 of the output scale 2.55); tolerance: abs error <= 1e-09 x scale (fp32 lowering))
// TIGHT-NEXT: note: on random inputs of seed 0; before the pass @main ran on the graph interpreter, after it on the tile interpreter

// COSINE: error: --verify-each-numerically: graph-to-tile (in compile-npu) changed the results: output #0 'y' at [{{[0-9]+}}, {{[0-9]+}}] is {{.*}} after it and {{.*}} before (abs error {{.*}}; tolerance: cosine >= 1 (bf16 lowering); cosine 0.9999{{[0-9]+}})
// COSINE-NEXT: note: on random inputs of seed 0; before the pass @main ran on the graph interpreter, after it on the tile interpreter

// A file that is not an .npz archive of named arrays is one error naming it and what it is not.
// NPZ: error: --verify-numerics-inputs: cannot read {{.*}}verify-each-numerically.mlir as .npz: not an .npz archive (an .npz file is a zip archive of .npy arrays
