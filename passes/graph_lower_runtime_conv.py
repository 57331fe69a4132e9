"""`graph-lower-runtime-conv`: a convolution whose weight is computed at run time (a graph input,
or ops of one) becomes the im2col product the matrix unit runs with both operands at run time:

    conv2d(x, w, b) {stride, padding, dilation, groups}
      ->  cols = concat over the KH x KW taps of strided slices of pad(x)    [N, C, K, P]
          y    = matmul(w as [G, O/G, C/G K], cols as [G, C/G K, N P])        [G, O/G, N P]
          y as [N, O, OH, OW] (+ b)

The taps are in the weight's (kh, kw) order and the channels before them, as the weight's
[O, C/G, KH, KW] layout flattens, so each output is the same sum of products (another order
of additions than conv2d's). graph-to-tile tiles convolutions against their packed
compile-time weights only ("needs a compile-time weight"); a weight that depends only on
weights and constants stays a conv2d, so models with constant weights are unchanged. The
graph grows by one slice per kernel tap (a 3x3 kernel: 9), the work by the im2col copy: meant
for the convolutions whose filters arrive with the input (dynamic filters, ONNX tests that feed
the weight), not for a model's layers.

Part of graph-prepare-tiling (after constant folding, which turns weight-only computations into
weights first).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of


def depends_on_arguments(value: SSAValue) -> bool:
    """Whether value is computed from a function argument (is not known at compile time)."""
    seen: set[SSAValue] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        owner = v.owner
        if isinstance(owner, Block):
            return True
        stack.extend(owner.operands)
    return False


class _Emit:
    """Graph ops inserted before one op, their result types inferred."""

    def __init__(self, rewriter: PatternRewriter):
        self.rewriter = rewriter

    def __call__(self, op_type: type[g.GraphOp], operands: list[SSAValue], **properties) -> SSAValue:
        op = op_type.inferred(operands, properties)
        self.rewriter.insert(op)
        return op.results[0]

    def reshape(self, x: SSAValue, shape: list[int]) -> SSAValue:
        op = g.ReshapeOp(x, shape)
        self.rewriter.insert(op)
        return op.output


@dataclass
class RuntimeWeightConvToMatmul(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.Conv2dOp, rewriter: PatternRewriter, /):
        if not depends_on_arguments(op.weight):
            return
        xs, ws = shape_of(op.input), shape_of(op.weight)
        N, C, H, W = xs
        O, Cg, KH, KW = ws
        OH, OW = shape_of(op.output)[2:]
        if min(N, C, H, W, O, OH, OW) < 0:  # dynamic shapes: leave it
            return
        G = op.groups.value.data
        sh, sw = g.i64_values(op.stride)
        dh, dw = g.i64_values(op.dilation)
        pt, pl, pb, pr = g.i64_values(op.padding)
        emit = _Emit(rewriter)
        x = op.input
        if pt or pl or pb or pr:
            x = emit(g.PadOp, [x], pads=g.i64_array([0, 0, pt, pl, 0, 0, pb, pr]))
        P, K = OH * OW, KH * KW
        taps = []
        for i in range(KH):
            for j in range(KW):
                tap = emit(g.SliceOp, [x], starts=g.i64_array([0, 0, i * dh, j * dw]),
                           ends=g.i64_array([N, C, i * dh + (OH - 1) * sh + 1, j * dw + (OW - 1) * sw + 1]),
                           steps=g.i64_array([1, 1, sh, sw]))
                taps.append(emit.reshape(tap, [N, C, 1, P]))
        cols = emit(g.ConcatOp, taps, axis=g.i64_attr(2)) if K > 1 else taps[0]  # [N, C, K, P]
        cols = emit.reshape(cols, [N, G, Cg * K, P])
        cols = emit(g.TransposeOp, [cols], perm=g.i64_array([1, 2, 0, 3]))  # [G, Cg K, N, P]
        cols = emit.reshape(cols, [G, Cg * K, N * P])
        w = emit.reshape(op.weight, [G, O // G, Cg * K])
        y = emit(g.MatmulOp, [w, cols])  # [G, O/G, N P]
        y = emit.reshape(y, [G, O // G, N, P])
        y = emit(g.TransposeOp, [y], perm=g.i64_array([2, 0, 1, 3]))  # [N, G, O/G, P]
        y = emit.reshape(y, [N, O, OH, OW])
        if op.bias is not None:
            y = emit(g.AddOp, [y, emit.reshape(op.bias, [1, O, 1, 1])])
        rewriter.replace(op, [], [y])


@dataclass(frozen=True)
class GraphLowerRuntimeConvPass(ModulePass):
    """Convolutions with run-time weights -> im2col slices and a matmul."""

    name = "graph-lower-runtime-conv"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(RuntimeWeightConvToMatmul()).rewrite_module(op)
