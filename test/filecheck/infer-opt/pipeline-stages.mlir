// RUN: infer-opt %s -p graph-prepare-tiling --print-between-passes | filecheck %s
// RUN: infer-opt %s -p 'graph-prepare-tiling,graph-dce' --time-passes -o /dev/null 2>&1 | filecheck %s --check-prefix=TIME

// Named pipelines are run stage by stage (their passes(), nested pipelines
// expanded, the order of flatten()), so --print-between-passes prints the IR
// after every stage, naming the pipelines it belongs to, and --time-passes
// reports every stage under its pipeline (on stderr, at the end).

func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %c = graph.constant dense<2.0> : tensor<f32>
  %d = graph.constant dense<3.0> : tensor<f32>
  %s = graph.add %c, %d : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %t = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %u = graph.transpose %t {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %m = graph.mul %u, %s : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %r = graph.relu %m : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %r : tensor<2x3xf32>
}

// The transposes cancel in graph-canonicalize, the constants fold in
// graph-constant-fold; the last stages (graph-fuse, graph-fuse-norm-prologue) leave the
// output.
// CHECK:      IR after graph-canonicalize (in graph-prepare-tiling > graph-optimize):
// CHECK-NOT:  graph.transpose
// CHECK:      %s = graph.add %c, %d
// CHECK:      IR after graph-constant-fold (in graph-prepare-tiling > graph-optimize):
// CHECK-NOT:  graph.add
// CHECK:      %s = graph.constant dense<5.000000e+00> : tensor<f32>
// CHECK:      IR after graph-dce (in graph-prepare-tiling > graph-optimize):
// CHECK:      IR after graph-shape-inference (in graph-prepare-tiling > graph-optimize):
// CHECK:      IR after graph-cse (in graph-prepare-tiling):
// CHECK:      IR after graph-lower-runtime-conv (in graph-prepare-tiling):
// CHECK:      IR after graph-raise-activations (in graph-prepare-tiling):
// CHECK:      IR after graph-raise-rms-norm (in graph-prepare-tiling):
// CHECK:      IR after graph-raise-rotary (in graph-prepare-tiling):
// CHECK:      IR after graph-raise-attention (in graph-prepare-tiling):
// CHECK:      IR after graph-raise-linear (in graph-prepare-tiling):
// CHECK:      IR after graph-fold-batch-norm (in graph-prepare-tiling):
// CHECK:      IR after graph-dce (in graph-prepare-tiling):
// CHECK:      IR after graph-fuse (in graph-prepare-tiling):
// CHECK-NOT:  IR after
// CHECK:      %r = graph.kernel "elementwise" (%x, %s)

// TIME:      ... Pass execution timing report ...
// TIME:      Total Execution Time: {{[0-9.]+}} seconds
// TIME:      ----Wall Time----  ----Name----
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}  parse
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}  graph-prepare-tiling
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}    graph-optimize
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}      graph-canonicalize
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}      graph-constant-fold
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}      graph-dce
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}      graph-shape-inference
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}    graph-cse
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}    graph-lower-runtime-conv
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}    graph-raise-activations
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}    graph-raise-rms-norm
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}    graph-raise-rotary
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}    graph-raise-attention
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}    graph-raise-linear
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}    graph-fold-batch-norm
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}    graph-merge-summed-convs
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}    graph-dce
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}    graph-fuse
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}    graph-fuse-norm-prologue
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}  graph-dce
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}  verify
// TIME-NEXT: {{ +[0-9.]+ \( *[0-9.]+%\)}}  output
// TIME-NEXT: {{ +[0-9.]+ \(100.0%\)}}  Total
