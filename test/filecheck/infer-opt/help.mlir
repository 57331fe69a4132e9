// RUN: infer-opt --help | filecheck %s
// RUN: infer-opt --list-passes | filecheck %s --check-prefix=LIST
// RUN: infer-opt --help-pass graph-prepare-tiling | filecheck %s --check-prefix=PIPE
// RUN: infer-opt --help-pass tile-plan-memory --help-pass canonicalize | filecheck %s --check-prefix=ONE
// RUN: not infer-opt --help-pass graph-fusee 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: not infer-opt %s -p 'graph-fuse{max-epilog=2}' 2>&1 | filecheck %s --check-prefix=OPTION

// --help lists infer's own passes first, each with what it does and its options
// (type, default, description: read from the pass's dataclass fields and
// docstrings), then the named pipelines with their stages, the plugins, and
// only the number of upstream xDSL passes (--list-passes=all lists them).
// --help-pass NAME tells all about one pass; an option error lists the valid ones.

// CHECK:      usage: infer-opt
// CHECK:      --verify-diagnostics
// CHECK:      infer's passes (-p 'NAME{option=value ...}'
// CHECK-NEXT:   graph-canonicalize
// CHECK-NEXT:       Apply the graph canonicalization patterns
// CHECK:            ignore-signed-zeros=<bool> (default false): also fold float x + 0.0
// CHECK:        graph-constant-fold
// CHECK:            max-elements=<int> (default 16777216): do not fold a result with more elements
// CHECK:        graph-fuse
// CHECK:            kinds=<string,string,...> (default matmul,conv,norm,softmax,attention,pool,elementwise): the
// CHECK-NEXT:         kernel kinds to form
// CHECK:        tile-plan-memory
// CHECK:            print-plan=<bool> (default false): print the plan as a table on stderr.
// CHECK:      named pipelines
// CHECK:        graph-optimize
// CHECK-NEXT:       The graph-level cleanup pipeline.
// CHECK-NEXT:       runs: graph-canonicalize, graph-constant-fold, graph-dce, graph-shape-inference
// CHECK:            require-static=<bool> (default false): forwarded to graph-shape-inference: fail (naming the
// CHECK:        compile-npu
// CHECK:      passes from plugins (entry point group 'infer.passes'
// CHECK-NEXT:   (none installed)
// CHECK:      and {{[0-9]+}} upstream xDSL passes (canonicalize, cse, dce, ...): infer-opt --list-passes=all

// LIST:      infer's passes
// LIST-NEXT:   graph-canonicalize
// LIST:      named pipelines
// LIST:      upstream xDSL passes

// PIPE:      graph-prepare-tiling (infer named pipeline)
// PIPE:      options:
// PIPE:        max-epilogue=<int> (default 4)
// PIPE-NEXT:       forwarded to graph-fuse: most elementwise ops in one kernel
// PIPE:      runs (with the default options):
// PIPE-NEXT:   graph-optimize, graph-cse, graph-lower-runtime-conv, graph-raise-activations,
// PIPE-NEXT:     graph-raise-rms-norm, graph-raise-rotary, graph-raise-attention, graph-raise-linear,
// PIPE-NEXT:     graph-fold-batch-norm, graph-merge-summed-convs, graph-dce, graph-fuse, graph-fuse-norm-prologue
// PIPE:      stages, nested pipelines expanded:
// PIPE-NEXT:   graph-canonicalize, graph-constant-fold, graph-dce, graph-shape-inference, graph-cse,
// PIPE-NEXT:     graph-lower-runtime-conv, graph-raise-activations, graph-raise-rms-norm, graph-raise-rotary,
// PIPE-NEXT:     graph-raise-attention, graph-raise-linear, graph-fold-batch-norm, graph-merge-summed-convs,
// PIPE-NEXT:     graph-dce, graph-fuse, graph-fuse-norm-prologue

// ONE:      tile-plan-memory (infer pass)
// ONE:        alignment=<int> (default 0)
// ONE-NEXT:       byte alignment of DRAM offsets and sizes; 0: the target's DRAM burst.
// ONE:      description:
// ONE-NEXT:   `tile-plan-memory`: static memory planning of tile-level IR.
// ONE:      canonicalize (upstream xDSL pass)

// UNKNOWN: infer-opt: error: unknown pass 'graph-fusee' (did you mean 'graph-fuse'?)

// OPTION: infer-opt: error: pass 'graph-fuse' has no option 'max-epilog' (did you mean 'max-epilogue'?); the options of 'graph-fuse' are: max-epilogue=<int> (default 4), kinds=<string,string,...> (default matmul,conv,norm,softmax,attention,pool,elementwise), norm-epilogue=<bool> (default true) (infer-opt --help-pass graph-fuse)

func.func @f() {
  func.return
}
