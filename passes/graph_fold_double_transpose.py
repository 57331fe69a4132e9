"""`graph-fold-double-transpose`: the worked example of docs/writing-a-pass.md.

transpose(transpose(x, p1), p2) is x with its dimensions permuted by p1, then
by p2: one transpose by q[i] = p1[p2[i]], or nothing when q is the identity.
(`graph-canonicalize` has the same rewrite among all the others; this pass
applies only this one.)

Options:
  erase-dead: erase the inner transpose when the rewrite leaves it without
    users (default true).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from infer.dialects import graph as g


@dataclass
class FoldDoubleTranspose(RewritePattern):
    erase_dead: bool = True

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.TransposeOp, rewriter: PatternRewriter, /):
        inner = op.input.owner
        if not isinstance(inner, g.TransposeOp):
            return
        p1 = [int(v) for v in inner.perm.get_values()]
        p2 = [int(v) for v in op.perm.get_values()]
        q = [p1[i] for i in p2]
        if q == sorted(q) and inner.input.type == op.output.type:
            # x's dimensions come back in order: use x itself.
            rewriter.replace(op, [], [inner.input])
        else:
            new = g.TransposeOp.create(
                operands=[inner.input],
                result_types=[op.output.type],
                properties={"perm": g.i64_array(q)},
            )
            rewriter.replace(op, new)
        if self.erase_dead and not inner.output.uses:
            rewriter.erase(inner)


@dataclass(frozen=True)
class GraphFoldDoubleTransposePass(ModulePass):
    """Fold each pair of transposes into one transpose, or none."""

    name = "graph-fold-double-transpose"

    erase_dead: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pattern = FoldDoubleTranspose(erase_dead=self.erase_dead)
        PatternRewriteWalker(pattern).rewrite_module(op)
