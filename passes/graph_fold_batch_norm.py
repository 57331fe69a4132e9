"""`graph-fold-batch-norm`: fold inference batch norm into the conv or linear before it.

    y = batch_norm(conv2d(x, W, b), gamma, beta, mean, var)
      = conv2d(x, W * s, (b - mean) * s + beta)      with s = gamma / sqrt(var + eps)

per output channel (W's dim 0). The same holds for `linear` followed by a
BatchNorm1d over its features (a rank-2 `[N, out]` result, so batch norm's
channel dim 1 is the linear's output feature), also through a reshape that only
merges the linear's leading dims (`[B, T, out] -> [B.T, out]`: LeViT's
`batch_norm(linear(x).flatten(0, 1))`), which then reshapes the folded linear.
The folded weight and bias are computed in float64, rounded once to the
weight's element type and added to the module's weight store
(`weights_of(module).add`, names derived from the original weight:
`conv.weight` -> `conv.weight.bn_folded` and `conv.bias.bn_folded`); they are
written out with the module like constant-folded weights.

Folded only when every operand that changes is known at compile time: W, b (if
any) and the four batch norm parameters are `graph.constant` or `graph.weight`
values, and the conv/linear result has no other user. Anything else (a batch
norm on an activation, on a conv whose output is also used elsewhere, with
parameters computed at run time) is left alone. The result is not bit-identical
to the unfolded graph: folding changes the rounding (|difference| ~ 1e-6
relative for f32).

Options:
  erase-dead: erase the old weights, constants and parameters that the fold
    leaves without users (default true; weights stay in the backing file).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from infer.dialects import graph as g
from infer.dialects.weight_refs import constant_value
from infer.dialects.weights import WeightStore, weights_of


def _folded_names(weight: SSAValue, bias: SSAValue | None, kind: str) -> tuple[str, str]:
    """Store names for the folded weight and bias, derived from the originals."""
    w_base = weight.owner.weight_key if isinstance(weight.owner, g.WeightOp) else f"{kind}.weight"
    if bias is not None and isinstance(bias.owner, g.WeightOp):
        b_base = bias.owner.weight_key
    elif w_base.endswith(".weight"):
        b_base = w_base.removesuffix(".weight") + ".bias"
    else:
        b_base = w_base + ".bias"
    return f"{w_base}.bn_folded", f"{b_base}.bn_folded"


@dataclass
class FoldBatchNorm(RewritePattern):
    store: WeightStore
    erase_dead: bool = True

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.BatchNormOp, rewriter: PatternRewriter, /):
        producer = op.input.owner
        merged = _merged_linear(op.input)  # reshape(linear [.., out]) -> [N, out]
        if merged is not None:
            producer = merged.input.owner
        is_conv = isinstance(producer, g.Conv2dOp)
        is_linear_2d = isinstance(producer, g.LinearOp) and (merged is not None or len(op.input.type.get_shape()) == 2)  # type: ignore[attr-defined]
        if not (is_conv or is_linear_2d):
            return
        if not op.input.has_one_use() or (merged is not None and not merged.input.has_one_use()):
            return
        params = [constant_value(v, self.store) for v in (op.scale, op.bias, op.mean, op.var)]
        weight = constant_value(producer.weight, self.store)
        bias = None if producer.bias is None else constant_value(producer.bias, self.store)
        if any(p is None for p in params) or weight is None or (producer.bias is not None and bias is None):
            return
        gamma, beta, mean, var = (np.asarray(p, np.float64) for p in params)
        scale = gamma / np.sqrt(var + op.epsilon.value.data)
        w64 = weight.astype(np.float64) * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
        b0 = np.zeros_like(mean) if bias is None else bias.astype(np.float64)
        b64 = (b0 - mean) * scale + beta

        w_type, b_type = producer.weight.type, op.bias.type
        assert isinstance(w_type, TensorType) and isinstance(b_type, TensorType)
        w_name, b_name = _folded_names(producer.weight, producer.bias, producer.name.split(".", 1)[1])
        new_w = g.WeightOp(self.store.add(w_name, w64.astype(weight.dtype)), w_type)
        new_b = g.WeightOp(self.store.add(b_name, b64.astype(weight.dtype)), b_type)
        new_w.output.name_hint = producer.weight.name_hint
        new_b.output.name_hint = producer.bias.name_hint if producer.bias is not None else "bias"
        new = producer.create(
            operands=[producer.input, new_w.output, new_b.output],
            result_types=[producer.results[0].type if merged is not None else op.output.type],
            properties=dict(producer.properties),
            attributes=dict(producer.attributes),
        )
        dead = [v.owner for v in (*producer.operands[1:], op.scale, op.bias, op.mean, op.var)]
        if merged is not None:
            reshaped = g.ReshapeOp(new.results[0], op.output.type.get_shape())  # type: ignore[attr-defined]
            rewriter.replace(op, [new_w, new_b, new, reshaped], [reshaped.output])
            rewriter.erase(merged)
        else:
            rewriter.replace(op, [new_w, new_b, new], [new.results[0]])
        rewriter.erase(producer)
        if self.erase_dead:
            for d in dict.fromkeys(dead):
                if isinstance(d, Operation) and d.parent is not None and not any(r.uses for r in d.results):
                    rewriter.erase(d)


def _merged_linear(value: SSAValue) -> g.ReshapeOp | None:
    """The reshape making `value` when it merges a linear's leading dims into one: [.., out]
    -> [N, out], so a batch norm's channel dim 1 is the linear's output feature."""
    reshape = value.owner
    if not isinstance(reshape, g.ReshapeOp) or not isinstance(reshape.input.owner, g.LinearOp):
        return None
    src, dst = reshape.input.type.get_shape(), value.type.get_shape()  # type: ignore[attr-defined]
    if len(dst) != 2 or len(src) < 2 or src[-1] != dst[1]:
        return None
    return reshape


@dataclass(frozen=True)
class GraphFoldBatchNormPass(ModulePass):
    """Fold batch norms with constant parameters into the conv2d/linear before them."""

    name = "graph-fold-batch-norm"

    erase_dead: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pattern = FoldBatchNorm(weights_of(op), erase_dead=self.erase_dead)
        PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(op)
