// RUN: rm -rf %t && mkdir -p %t && cp %s %t/m.mlir
// RUN: env PYTHONPATH=%S/Inputs/plugin infer-opt %s -p 'graph-name-layers{prefix="blk"}' | filecheck %s
// RUN: env PYTHONPATH=%S/Inputs/plugin infer-opt --list-passes | filecheck %s --check-prefix=LIST
// RUN: env PYTHONPATH=%S/Inputs/plugin python -c "from infer.passes import infer_passes; cls = infer_passes()['graph-name-layers'](); print(cls.__module__, cls.name)" | filecheck %s --check-prefix=PY
// RUN: env PYTHONPATH=%S/Inputs/plugin infer compile %t/m.mlir --graph-passes 'graph-name-layers{prefix="blk"}' -o %t/m.npu 2>&1 | filecheck %s --check-prefix=COMPILE
// RUN: infer run %t/m.npu --check | filecheck %s --check-prefix=CHECKED
// RUN: not infer-opt %s -p graph-name-layers 2>&1 | filecheck %s --check-prefix=ABSENT
// RUN: not env PYTHONPATH=%S/Inputs/broken-plugin infer-opt %s -p graph-broken 2>&1 | filecheck %s --check-prefix=BROKEN
// RUN: env PYTHONPATH=%S/Inputs/broken-plugin infer-opt %s -p graph-dce | filecheck %s --check-prefix=LAZY
// RUN: not env PYTHONPATH=%S/Inputs/clashing-plugin:%S/Inputs/plugin infer-opt %s 2>&1 | filecheck %s --check-prefix=CLASH

// A pass written outside the tree: Inputs/plugin holds an installed distribution
// (its .dist-info declares the entry point `graph-name-layers =
// infer_layer_names:NameLayersPass` in the group `infer.passes`; it is the
// example of docs/writing-a-pass.md). With it on the path, every tool finds the
// pass by name: infer-opt (and its pass list), infer.passes.infer_passes(), and
// `infer compile --graph-passes` (through compile-npu), whose artifact's
// per-layer check then shows the names the pass gave. A plugin that cannot be
// imported fails when its pass is used (and only then); one that takes the name
// of another pass is refused.

func.func @main(%x: tensor<4x16xf32> {graph.name = "x"}) -> (tensor<4x8xf32> {graph.name = "y"}) {
  %w = graph.constant dense<0.25> : tensor<8x16xf32>
  %b = graph.constant dense<0.5> : tensor<8xf32>
  %h = graph.linear %x, %w, %b : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r = graph.relu %h : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %w2 = graph.constant dense<-0.125> : tensor<8x8xf32>
  %y = graph.linear %r, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK: %h = graph.linear %x, %w, %b {graph.name = "blk0"}
// CHECK: %r = graph.relu %h {graph.name = "blk1"}
// CHECK: %y = graph.linear %r, %w2 {graph.name = "blk2"}

// LIST:      passes from plugins (entry point group 'infer.passes'
// LIST-NEXT:   graph-name-layers
// LIST-NEXT:       Name the unnamed graph ops of each function: <prefix>0, <prefix>1, ... in order.
// LIST-NEXT:       prefix=<string> (default "layer"): The start of every name.
// LIST-NEXT:       (from the distribution 'infer-layer-names')

// PY: infer_layer_names graph-name-layers

// COMPILE:      importing {{.*}}m.mlir
// COMPILE-NEXT: pass graph-name-layers
// COMPILE-NEXT: pass graph-defer-paged-query
// COMPILE-NEXT: pass graph-prepare-tiling
// COMPILE:      wrote {{.*}}m.npu

// CHECKED:      layer {{ +}}kernel   kind
// CHECKED-NEXT: blk1 {{ +}}kernel0  matmul
// CHECKED-NEXT: blk2 {{ +}}kernel1  matmul
// CHECKED:      y: cosine {{.*}} OK

// ABSENT: infer-opt: error: unknown pass 'graph-name-layers'

// BROKEN: infer-opt: error: pass plugin 'graph-broken' (entry point 'graph-broken = infer_broken_missing_module:BrokenPass' of distribution 'infer-broken') cannot be loaded: ModuleNotFoundError: No module named 'infer_broken_missing_module'

// LAZY: func.func @main

// CLASH: infer-opt: error: pass plugin 'graph-dce' of distribution 'infer-clash' (infer_layer_names:NameLayersPass) has the name of infer's own pass (infer.passes.graph_dce:GraphDCEPass); rename one of them
