"""Named pipelines: passes that run a fixed sequence of passes.

`graph-optimize` = graph-canonicalize, graph-constant-fold, graph-dce,
graph-shape-inference, so `infer-opt -p graph-optimize` is the same as
`infer-opt -p graph-canonicalize,graph-constant-fold,graph-dce,graph-shape-inference`
(with the options below forwarded to the pass that owns them).

`graph-prepare-tiling` = graph-optimize, graph-fold-batch-norm, graph-dce,
graph-fuse: the graph-level half of the compiler, leaving fused `graph.kernel`
groups for graph -> tile lowering.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from infer.passes.graph_canonicalize import GraphCanonicalizePass
from infer.passes.graph_constant_fold import (
    DEFAULT_INLINE_LIMIT,
    DEFAULT_MAX_ELEMENTS,
    GraphConstantFoldPass,
)
from infer.passes.graph_dce import GraphDCEPass
from infer.passes.graph_fold_batch_norm import GraphFoldBatchNormPass
from infer.passes.graph_fuse import ALL_KINDS, DEFAULT_MAX_EPILOGUE, GraphFusePass
from infer.passes.graph_shape_inference import GraphShapeInferencePass


@dataclass(frozen=True)
class GraphOptimizePass(ModulePass):
    """The graph-level cleanup pipeline.

    Options (forwarded):
      ignore-signed-zeros -> graph-canonicalize
      max-elements, inline-limit -> graph-constant-fold
      require-static -> graph-shape-inference
    """

    name = "graph-optimize"

    ignore_signed_zeros: bool = False
    max_elements: int = DEFAULT_MAX_ELEMENTS
    inline_limit: int = DEFAULT_INLINE_LIMIT
    require_static: bool = False

    def passes(self) -> tuple[ModulePass, ...]:
        return (
            GraphCanonicalizePass(ignore_signed_zeros=self.ignore_signed_zeros),
            GraphConstantFoldPass(max_elements=self.max_elements, inline_limit=self.inline_limit),
            GraphDCEPass(),
            GraphShapeInferencePass(require_static=self.require_static),
        )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for p in self.passes():
            p.apply(ctx, op)


@dataclass(frozen=True)
class GraphPrepareTilingPass(ModulePass):
    """Cleanup, batch-norm folding and fusion: what runs before graph -> tile.

    Options (forwarded): max-elements -> graph-constant-fold; erase-dead ->
    graph-fold-batch-norm; max-epilogue, kinds -> graph-fuse. Constant folding and
    shape inference run before fusion, so kernels never wrap constant work and
    their block arguments have final types.
    """

    name = "graph-prepare-tiling"

    max_elements: int = DEFAULT_MAX_ELEMENTS
    erase_dead: bool = True
    max_epilogue: int = DEFAULT_MAX_EPILOGUE
    kinds: tuple[str, ...] = ALL_KINDS

    def passes(self) -> tuple[ModulePass, ...]:
        return (
            GraphOptimizePass(max_elements=self.max_elements),
            GraphFoldBatchNormPass(erase_dead=self.erase_dead),
            GraphDCEPass(),
            GraphFusePass(max_epilogue=self.max_epilogue, kinds=self.kinds),
        )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for p in self.passes():
            p.apply(ctx, op)
