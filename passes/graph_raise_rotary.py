"""`graph-raise-rotary`: rotary position embedding written out as arithmetic becomes one
`graph.rotary`.

torch.onnx writes Hugging Face's `apply_rotary_pos_emb` (`q * cos + rotate_half(q) * sin`,
rotate_half(q) = cat(-q[..., D/2:], q[..., :D/2])) as two slices, a neg, a concat, two muls and an
add: a data-movement kernel per slice and concat and an elementwise kernel, for q and for k of
every layer (a tiny Llama through ONNX, server: 18 such kernels of 74), where the torch.export
import (frontend/torch_handlers.py `_match_rotary`) gives one `graph.rotary` per operand.

Matched from the `concat`, any operand order of the commutative ops, every op between the
slices and the result used only there:
- rot = concat(neg(x[..., D/2:]), x[..., :D/2]) along the last axis (slices of unit step, the
  whole of the other dims);
- the result: x * cos + rot * sin, cos and sin float, of one shape that broadcasts to x's and
  has the last dim D (graph.rotary's [..., S, D] angles, not interleaved).
GPT-J's and CodeGen's rotate_every_two (pairs (x[2i], x[2i+1]) rotated): x * cos +
reshape(concat(reshape(-x[..., 1::2]), reshape(x[..., ::2])) on a new last axis of 2) * sin, cos
and sin per feature -> graph.rotary {interleaved} (the pairs' interleaving copy was a DMA per
element: GPT-J's helper-sweep config 214 K cycles on server against GPT-Neo's 27 K).
Partial rotary (the first R < D features rotated: GPT-NeoX, Phi, StableLM, GPT-J), written as
concat(rotary(x[..., :R]), x[..., R:]) on the last axis (after the above, or as the torch.export
import gives it), becomes one graph.rotary of x with the R-wide cos and sin.

Numerics: `rounding` (graph.rotary's reference evaluates the same products and sum).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
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
from xdsl.utils.exceptions import VerifyException

from infer.dialects import graph as g
from infer.dialects.dtypes import element_type_of, is_float, shape_of


def _only_user(value: SSAValue) -> Operation | None:
    return next(iter(value.uses)).operation if value.has_one_use() else None


def _last_axis_slice(value: SSAValue) -> tuple[SSAValue, int, int, int] | None:
    """(x, start, end, step) for value = x[..., start:end:step] (end clamped to the dim; every
    other dim whole), else None."""
    op = value.owner
    if not isinstance(op, g.SliceOp):
        return None
    shape = shape_of(op.input.type)
    starts, ends, steps = (list(a.get_values()) for a in (op.starts, op.ends, op.steps))
    if not all(s == 0 and e == n and t == 1 for s, e, t, n in zip(starts[:-1], ends[:-1], steps[:-1], shape[:-1],
                                                                  strict=True)):
        return None
    return op.input, starts[-1], min(ends[-1], shape[-1]), steps[-1]


def _features(value: SSAValue, start: int, end: int) -> SSAValue | None:
    """x for value = x[..., start:end] (unit step)."""
    sliced = _last_axis_slice(value)
    return sliced[0] if sliced is not None and sliced[1:] == (start, end, 1) else None


def _half(value: SSAValue, first: bool) -> SSAValue | None:
    """x for value = x[..., :D/2] (first) or x[..., D/2:] (not first)."""
    sliced = _last_axis_slice(value)
    if sliced is None or shape_of(sliced[0].type)[-1] % 2:
        return None
    d = shape_of(sliced[0].type)[-1]
    return _features(value, 0, d // 2) if first else _features(value, d // 2, d)


@dataclass
class RaiseRotary(RewritePattern):
    """x * cos + rotate_half(x) * sin -> graph.rotary (module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ConcatOp, rewriter: PatternRewriter, /):
        if len(op.operands) != 2 or op.axis.value.data not in (-1, len(shape_of(op.results[0].type)) - 1):
            return
        neg, low = op.operands
        if not isinstance(neg.owner, g.NegOp) or not neg.has_one_use() or not low.has_one_use():
            return
        x = _half(neg.owner.input, first=False)
        if x is None or not neg.owner.input.has_one_use() or _half(low, first=True) is not x:
            return
        if not is_float(element_type_of(x.type)) or op.results[0].type != x.type:
            return
        _raise(x, op.results[0], False, rewriter)


def _raise(x: SSAValue, rot: SSAValue, interleaved: bool, rewriter: PatternRewriter) -> None:
    """x * cos + rot * sin (either order of each op) -> graph.rotary(x, cos, sin)."""
    rot_product = _only_user(rot)
    if not isinstance(rot_product, g.MulOp):
        return
    sin = rot_product.rhs if rot_product.lhs is rot else rot_product.lhs
    total = _only_user(rot_product.results[0])
    if not isinstance(total, g.AddOp) or total.results[0].type != x.type:
        return
    x_product = (total.rhs if total.lhs is rot_product.results[0] else total.lhs).owner
    if not isinstance(x_product, g.MulOp) or not x_product.results[0].has_one_use():
        return
    if x_product.lhs is x:
        cos = x_product.rhs
    elif x_product.rhs is x:
        cos = x_product.lhs
    else:
        return
    if shape_of(cos.type) != shape_of(sin.type) or shape_of(cos.type)[-1:] != shape_of(x.type)[-1:]:
        return
    try:  # graph.rotary's own checks: cos/sin of x's element type, broadcasting as [..., S, D]
        rotary = g.RotaryOp.inferred([x, cos, sin], {"interleaved": g.bool_attr(interleaved)})
        if rotary.results[0].type != x.type:
            raise VerifyException("another result type")
    except VerifyException:
        return
    rotary.results[0].name_hint = total.results[0].name_hint
    rewriter.replace(total, rotary)


def _pairs(value: SSAValue, start: int) -> SSAValue | None:
    """x for value = x[..., start::2] reshaped to [..., D/2, 1] (GPT-J's stacked halves of the pairs)."""
    reshape = value.owner
    if not isinstance(reshape, g.ReshapeOp) or not value.has_one_use() or not reshape.input.has_one_use():
        return None
    sliced = reshape.input
    if isinstance(sliced.owner, g.NegOp) and start == 1:
        sliced = sliced.owner.input
        if not sliced.has_one_use():
            return None
    elif start == 1:
        return None
    found = _last_axis_slice(sliced)
    if found is None:
        return None
    x, first, end, step = found
    shape = shape_of(x.type)
    if shape[-1] % 2 or first != start or step != 2 or end < shape[-1] - 1:
        return None
    if tuple(shape_of(value.type)) != (*shape[:-1], shape[-1] // 2, 1):
        return None
    return x


@dataclass
class RaiseInterleavedRotary(RewritePattern):
    """GPT-J's rotate_every_two: x * cos + flatten(stack(-x[..., 1::2], x[..., ::2])) * sin ->
    graph.rotary {interleaved} (cos and sin per feature: each pair's angle twice)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ConcatOp, rewriter: PatternRewriter, /):
        shape = shape_of(op.results[0].type)
        if len(op.operands) != 2 or not shape or shape[-1] != 2 or op.axis.value.data not in (-1, len(shape) - 1):
            return
        odd, even = op.operands
        x = _pairs(odd, 1)
        if x is None or _pairs(even, 0) is not x or not is_float(element_type_of(x.type)):
            return
        flatten = _only_user(op.results[0])
        if not isinstance(flatten, g.ReshapeOp) or flatten.results[0].type != x.type:
            return
        _raise(x, flatten.results[0], True, rewriter)


@dataclass
class JoinPartialRotary(RewritePattern):
    """concat(rotary(x[..., :R], cos, sin), x[..., R:]) -> rotary(x, cos, sin): partial rotary
    (GPT-NeoX, Phi, StableLM rotate the first R of D features), graph.rotary's own meaning when
    cos is R wide."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ConcatOp, rewriter: PatternRewriter, /):
        if len(op.operands) != 2 or op.axis.value.data not in (-1, len(shape_of(op.results[0].type)) - 1):
            return
        rotated, rest = op.operands
        rotary = rotated.owner
        if not isinstance(rotary, g.RotaryOp) or not rotated.has_one_use():
            return
        r = shape_of(rotary.input.type)[-1]
        x = _features(rotary.input, 0, r)
        if x is None or not rotary.input.has_one_use() or not rest.has_one_use() or \
                _features(rest, r, shape_of(x.type)[-1]) is not x or op.results[0].type != x.type:
            return
        joined = g.RotaryOp.create(operands=[x, rotary.cos, rotary.sin], result_types=[x.type],
                                   properties=dict(rotary.properties))
        joined.results[0].name_hint = op.results[0].name_hint
        rewriter.replace(op, joined)


@dataclass(frozen=True)
class GraphRaiseRotaryPass(ModulePass):
    """Replace rotary embeddings written out as arithmetic by graph.rotary, then remove what
    they leave unused."""

    name = "graph-raise-rotary"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([RaiseRotary(), RaiseInterleavedRotary(), JoinPartialRotary()]), apply_recursively=True,
                             post_walk_func=region_dce).rewrite_module(op)
