"""`graph-merge-summed-convs{target=...}`: the sum of two convolutions of the same shape over
different inputs, each read only by that sum, is one convolution over the inputs stacked along
the channels:

    add(conv2d(a, Wa, ba), conv2d(b, Wb, bb))
      ->  conv2d(concat(a, b) {axis = 1}, concat(Wa, Wb) {axis = 1}, ba + bb)

Why: the array's depth (its rows: k of every matmul) holds a conv's input channels, so a conv
of fewer channels than the depth leaves the rest idle for every pixel it streams. ResNet-50's
first bottleneck adds two 1x1 convs of 64 channels (the expanding conv and the downsampling
shortcut): on server's 128-row array each fills half of it, and merged they fill it, one array
pass instead of two (the two 6,400-cycle convs become one). The stacked weights and summed
biases are computed here in float64 and rounded once, like graph-fold-batch-norm's.

Only where it saves array passes on the target (`target`: "edge", "server" or a TOML path;
none: the pass does nothing): ceil((Ca + Cb) / rows) < ceil(Ca / rows) + ceil(Cb / rows).
Where it does not (edge's 16 rows, the later stages' 256-1024 channels), the stacked input
would be a copy for nothing. Both convs must agree on everything but their input channels
(kernel, stride, padding, dilation, one group, output shape), read inputs of the same batch
and size, and have constant weights and biases. Part of graph-prepare-tiling (its `target`
option), after batch-norm folding (which makes the pattern: conv, batch norm, add) and before
fusion.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of
from infer.dialects.weight_refs import constant_value
from infer.dialects.weights import WeightStore, weights_of

#: the properties two convs must share to be merged (besides one group)
_SHARED = ("stride", "padding", "dilation")


def _mergeable(x: SSAValue) -> g.Conv2dOp | None:
    conv = x.owner
    if not isinstance(conv, g.Conv2dOp) or not x.has_one_use() or conv.groups.value.data != 1:
        return None
    return conv


def saves_passes(ca: int, cb: int, rows: int) -> bool:
    """Does a conv of ca + cb input channels take fewer array passes than one of ca and one of
    cb, on an array `rows` deep?"""
    def passes(c: int) -> int:
        return -(-c // rows)
    return passes(ca + cb) < passes(ca) + passes(cb)


@dataclass
class MergeSummedConvs(RewritePattern):
    store: WeightStore
    rows: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.AddOp, rewriter: PatternRewriter, /):
        first, second = (_mergeable(v) for v in op.operands)
        if first is None or second is None or first is second:
            return
        if any(first.properties.get(k) != second.properties.get(k) for k in _SHARED):
            return
        (n, ca, h, w), (nb, cb, hb, wb) = shape_of(first.input), shape_of(second.input)
        oa, _, kh, kw = shape_of(first.weight)
        if ((n, h, w) != (nb, hb, wb) or shape_of(second.weight)[2:] != (kh, kw)
                or shape_of(first.output) != shape_of(second.output) or shape_of(op.output) != shape_of(first.output)
                or not saves_passes(ca, cb, self.rows)):
            return
        weights = [constant_value(c.weight, self.store) for c in (first, second)]
        biases = [None if c.bias is None else constant_value(c.bias, self.store) for c in (first, second)]
        if any(v is None for v in weights) or any(c.bias is not None and b is None for c, b in zip((first, second), biases)):
            return
        dtype = weights[0].dtype  # type: ignore[union-attr]
        stacked = np.concatenate([np.asarray(v, np.float64) for v in weights], axis=1)  # type: ignore[arg-type]
        total = sum((np.asarray(b, np.float64) for b in biases if b is not None), np.zeros(oa, np.float64))
        key = first.weight.owner.weight_key if isinstance(first.weight.owner, g.WeightOp) else "conv.weight"
        base = key.removesuffix(".weight")
        elem = first.weight.type.get_element_type()  # type: ignore[attr-defined]
        new_w = g.WeightOp(self.store.add(f"{base}.weight.merged", stacked.astype(dtype)),
                           TensorType(elem, [oa, ca + cb, kh, kw]))
        new_b = g.WeightOp(self.store.add(f"{base}.bias.merged", total.astype(dtype)), TensorType(elem, [oa]))
        inputs = g.ConcatOp.inferred([first.input, second.input], {"axis": g.i64_attr(1)})
        new_w.output.name_hint, new_b.output.name_hint, inputs.results[0].name_hint = "w", "bias", "stacked"
        merged = g.Conv2dOp.create(operands=[inputs.output, new_w.output, new_b.output],
                                   result_types=[op.output.type], properties=dict(first.properties),
                                   attributes=dict(first.attributes))
        rewriter.replace(op, [new_w, new_b, inputs, merged], [merged.results[0]])
        for conv in (first, second):
            dead = [v.owner for v in conv.operands[1:]]
            rewriter.erase(conv)
            for d in dead:
                if d.parent is not None and not any(r.uses for r in d.results):
                    rewriter.erase(d)


@dataclass(frozen=True)
class GraphMergeSummedConvsPass(ModulePass):
    """The sum of two convs over different inputs as one conv over their stacked channels,
    where that saves array passes on the target.

    Options:
      target: the hardware config ("edge", "server" or a TOML path) whose array depth decides;
        "" (the default): the pass changes nothing.
    """

    name = "graph-merge-summed-convs"

    target: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not self.target:
            return
        from infer.target.hw import load_config

        rows = load_config(self.target).matrix.rows
        PatternRewriteWalker(MergeSummedConvs(weights_of(op), rows), apply_recursively=False).rewrite_module(op)
