// RUN: infer-opt %s -p graph-optimize | filecheck %s
// RUN: infer-opt %s -p graph-canonicalize,graph-constant-fold,graph-dce | filecheck %s
// RUN: infer-opt %s -p 'graph-optimize{max-elements=2 ignore-signed-zeros=true}' | filecheck %s --check-prefix=OPTS

// graph-optimize runs graph-canonicalize, graph-constant-fold, graph-dce and
// graph-shape-inference; it gives what the passes give one after another, and
// forwards its options (max-elements to the folder, ignore-signed-zeros to the
// canonicalizer).

func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %w = graph.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %wt = graph.transpose %w {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %wtt = graph.transpose %wt {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %z = graph.constant dense<0.0> : tensor<f32>
  %s = graph.neg %wtt : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %a = graph.add %x, %s : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %b = graph.add %a, %z : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %unused = graph.exp %b : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %r = graph.relu %b : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %r2 = graph.relu %r : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %r2 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    %z = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %s = graph.constant dense<{{\[\[}}-1.000000e+00, -2.000000e+00, -3.000000e+00], [-4.000000e+00, -5.000000e+00, -6.000000e+00]]> : tensor<2x3xf32>
// CHECK-NEXT:    %a = graph.add %x, %s : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %b = graph.add %a, %z : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %r = graph.relu %b : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    func.return %r : tensor<2x3xf32>

// OPTS-LABEL: func.func @main(
// OPTS-NEXT:    %w = graph.constant
// OPTS-NEXT:    %s = graph.neg %w : (tensor<2x3xf32>) -> tensor<2x3xf32>
// OPTS-NEXT:    %a = graph.add %x, %s : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// OPTS-NEXT:    %r = graph.relu %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
// OPTS-NEXT:    func.return %r : tensor<2x3xf32>
