"""`graph-raise-rms-norm`: RMSNorm written out as arithmetic becomes one `graph.rms_norm`.

torch.onnx writes a Llama-family RMSNorm (`x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) +
eps) * weight`) as

    w * (x * (1 / sqrt(reduce_mean(pow(x, 2), [-1]) + eps)))

six kernels of vector work, several of them row reductions stored and reloaded, where the
torch.export import (frontend/torch_handlers.py `_match_rms`) and the Hugging Face import give one
`graph.rms_norm`, a norm graph-fuse-norm-prologue can fold into the next product (a tiny Llama
through ONNX, server: 74 kernels against 31 through torch.export).

Matched from the `reduce_mean` down, every op between it and the result used only there:
- m = reduce_mean(s, axes = [last], keepdims) with s = pow(x, 2) or x * x;
- v = m + eps (either order, eps a scalar constant >= 0);
- r = 1 / sqrt(v) written as div(1, sqrt(v)), reciprocal(sqrt(v)) or rsqrt(v), then n = x * r
  (either order); or n = x / sqrt(v);
- the result: n * w (either order) with w of shape [D] (D the last dim), or n itself (a unit
  scale, stored as a weight of ones).
x float, every shape x's but the row statistics [..., 1].

Numerics: `rounding`: graph.rms_norm is evaluated as one function (the interpreter's own
order of the same steps).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.transforms.dead_code_elimination import region_dce

from infer.dialects import graph as g
from infer.dialects.dtypes import element_type_of, is_float, numpy_dtype_of, shape_of
from infer.dialects.graph_canonicalization import scalar_constant
from infer.dialects.weights import WeightStore, weights_of


def _only_user(value: SSAValue) -> Operation | None:
    return next(iter(value.uses)).operation if value.has_one_use() else None


def _other(op: Operation, value: SSAValue) -> SSAValue | None:
    """The operand of binary `op` that is not `value` (None when both are)."""
    lhs, rhs = op.operands
    if lhs is value and rhs is not value:
        return rhs
    if rhs is value and lhs is not value:
        return lhs
    return None


def _squared(value: SSAValue) -> SSAValue | None:
    """x for pow(x, 2) or x * x."""
    op = value.owner
    if isinstance(op, g.PowOp) and scalar_constant(op.rhs) == 2.0:
        return op.lhs
    if isinstance(op, g.MulOp) and op.lhs is op.rhs:
        return op.lhs
    return None


def _normalized(x: SSAValue, v: SSAValue) -> Operation | None:
    """The op computing x / sqrt(v) from v = mean + eps (the forms of the module docstring)."""
    first = _only_user(v)
    if isinstance(first, g.RsqrtOp):
        r = first.results[0]
    elif isinstance(first, g.SqrtOp):
        s = first.results[0]
        user = _only_user(s)
        if isinstance(user, g.DivOp) and user.rhs is s and user.lhs is x:
            return user  # x / sqrt(v)
        if isinstance(user, g.DivOp) and user.rhs is s and scalar_constant(user.lhs) == 1.0:
            r = user.results[0]
        elif isinstance(user, g.ReciprocalOp):
            r = user.results[0]
        else:
            return None
    else:
        return None
    product = _only_user(r)
    if isinstance(product, g.MulOp) and _other(product, r) is x:
        return product
    return None


@dataclass
class RaiseRmsNorm(RewritePattern):
    """x / sqrt(mean(x^2) + eps) (* w) -> graph.rms_norm (module docstring)."""

    store: WeightStore

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ReduceMeanOp, rewriter: PatternRewriter, /):
        x = _squared(op.input)
        if x is None or not is_float(element_type_of(x.type)) or not op.input.has_one_use():
            return
        shape = shape_of(x.type)
        if not shape or list(op.axes.get_values()) not in ([len(shape) - 1], [-1]) or not op.keepdims.value.data:
            return
        add = _only_user(op.results[0])
        if not isinstance(add, g.AddOp):
            return
        eps = scalar_constant(_other(add, op.results[0]) or add.lhs)
        if eps is None or eps < 0 or shape_of(add.results[0].type) != shape_of(op.results[0].type):
            return
        normalized = _normalized(x, add.results[0])
        if normalized is None or normalized.results[0].type != x.type:
            return
        last, scale = normalized, None
        n = normalized.results[0]
        user = _only_user(n)
        if isinstance(user, g.MulOp) and (w := _other(user, n)) is not None and \
                tuple(shape_of(w.type)) == tuple(shape[-1:]) and element_type_of(w.type) == element_type_of(x.type) \
                and user.results[0].type == x.type:
            last, scale = user, w
        new_ops: list[Operation] = []
        if scale is None:  # a unit scale
            ones = np.ones(shape[-1:], numpy_dtype_of(x))
            weight = g.WeightOp(self.store.add("rms_norm.unit_scale", ones), TensorType(element_type_of(x.type), list(ones.shape)))
            weight.output.name_hint = "scale"
            new_ops.append(weight)
            scale = weight.output
        norm = g.RmsNormOp.create(operands=[x, scale], result_types=[x.type],
                                  properties={"epsilon": g.f64_attr(eps)})
        norm.results[0].name_hint = last.results[0].name_hint
        rewriter.replace(last, [*new_ops, norm])


@dataclass(frozen=True)
class GraphRaiseRmsNormPass(ModulePass):
    """Replace RMSNorm written out as arithmetic by graph.rms_norm, then remove what it leaves
    unused."""

    name = "graph-raise-rms-norm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([RaiseRmsNorm(weights_of(op))]), apply_recursively=False,
                             post_walk_func=region_dce).rewrite_module(op)
