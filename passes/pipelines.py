"""Named pipelines: passes that run a fixed sequence of passes.

`graph-optimize` = graph-canonicalize, graph-constant-fold, graph-dce,
graph-shape-inference, so `infer-opt -p graph-optimize` is the same as
`infer-opt -p graph-canonicalize,graph-constant-fold,graph-dce,graph-shape-inference`
(with the options below forwarded to the pass that owns them).
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
