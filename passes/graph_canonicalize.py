"""`graph-canonicalize`: local simplifications of graph ops, applied to a fixpoint.

The patterns live with the dialect (`infer.dialects.graph_canonicalization`,
where each is documented); this pass applies them with its options.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import GreedyRewritePatternApplier, PatternRewriteWalker
from xdsl.transforms.dead_code_elimination import region_dce

from infer.dialects.graph_canonicalization import (  # noqa: F401  (re-exported for pass users)
    graph_canonicalization_patterns,
    patterns_for,
)


@dataclass(frozen=True)
class GraphCanonicalizePass(ModulePass):
    """Apply the graph canonicalization patterns to a fixpoint, then remove dead ops
    (as upstream `canonicalize` does).

    Options:
      ignore-signed-zeros: also fold float x + 0.0 and x - (-0.0) to x, which may
        turn a -0.0 into +0.0 (default false: only bit-exact rewrites).
    """

    name = "graph-canonicalize"

    ignore_signed_zeros: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        applier = GreedyRewritePatternApplier(
            graph_canonicalization_patterns(self.ignore_signed_zeros), ctx=ctx
        )
        PatternRewriteWalker(applier, post_walk_func=region_dce).rewrite_module(op)

