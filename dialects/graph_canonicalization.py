"""Canonicalization patterns of the graph dialect (used by `graph-canonicalize`
and, through `HasCanonicalizationPatternsTrait`, by upstream `canonicalize`).

Every pattern rewrites an op into something that computes exactly the same
values under the reference interpreter (`infer.dialects.graph_interpreter`),
bit for bit, for every element type. A rewrite that is only exact up to the
sign of zero (`x + 0.0 -> x`: -0.0 + 0.0 is +0.0) runs only with
`ignore-signed-zeros=true`. An op is only replaced by an existing value of the
same type: a canonicalization never changes a type seen by the op's users.

Patterns (root op: rewrite)
- transpose: identity perm -> x; transpose(transpose(x)) -> one transpose or x
- reshape: to the input's type -> x; reshape(reshape(x)) -> reshape(x)
- broadcast: to the input's type -> x; broadcast(broadcast(x)) -> broadcast(x)
- cast: to the input's type -> x
- slice: full range with step 1 -> x
- concat: a single input -> x
- pad: all pads zero -> x
- add/sub: x + 0, 0 + x, x - 0 -> x (integers/bool; floats: x + (-0.0), x - (+0.0))
- mul/div/pow: x * 1, 1 * x, x / 1, x ** 1 -> x
- neg(neg(x)), not(not(x)) -> x
- relu, abs, sign, floor, ceil, round: f(f(x)) -> f(x); abs(neg(x)) -> abs(x)
- clip: no bounds -> x; clip(relu(x)), relu(clip(x)), clip(clip(x)) -> one clip
- where: constant condition -> the chosen operand; where(c, x, x) -> x
- matmul: a transpose of the last two dims of an operand -> transpose_a/b flag
- reduce_{sum,mean,max,min,prod}: over size-1 axes only -> x, or reshape(x)
  without keepdims

`patterns_for(op_type)` serves `HasCanonicalizationPatternsTrait`, so with the
trait attached to the graph ops the upstream `canonicalize` pass applies the
same (default-option) patterns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, FloatAttr
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from infer.dialects import graph as g
from infer.dialects.dtypes import dense_to_numpy, element_type_of, is_bool, is_float, shape_of

# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def splat_value(value: SSAValue) -> float | int | bool | None:
    """The single value of a `graph.constant` whose elements are all equal, else None."""
    op = value.owner
    if not isinstance(op, g.ConstantOp):
        return None
    attr = op.value
    if not isinstance(attr, DenseIntOrFPElementsAttr):
        return None
    array = dense_to_numpy(attr)
    if array.size == 0:
        return None
    first = array.reshape(-1)[0]
    if not np.all(array == first):
        return None
    return first.item()


def scalar_constant(value: SSAValue) -> float | None:
    """The value of a constant scalar-like operand (every element equal, at most one element
    per dim) as a float, else None (the raise passes' scales, epsilons and mask values)."""
    if any(d != 1 for d in shape_of(value.type)):
        return None
    v = splat_value(value)
    return float(v) if isinstance(v, float | int) and not isinstance(v, bool) else None


def _is_signed_zero(v: float, negative: bool) -> bool:
    return v == 0 and bool(np.signbit(v)) == negative


def _replace_with(rewriter: PatternRewriter, op: Operation, value: SSAValue) -> bool:
    """Replace `op`'s single result with `value` if that keeps the type; report success."""
    if op.results[0].type != value.type:
        return False
    rewriter.replace(op, [], [value])
    return True


# --------------------------------------------------------------------------
# Structure
# --------------------------------------------------------------------------


class FoldTransposeOfTranspose(RewritePattern):
    """transpose(transpose(x, p1), p2) -> transpose(x, p1 o p2), or x if that is
    the identity; a lone identity transpose -> x."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.TransposeOp, rewriter: PatternRewriter, /):
        perm = g.i64_values(op.perm)
        if perm == tuple(range(len(perm))):
            _replace_with(rewriter, op, op.input)
            return
        inner = op.input.owner
        if not isinstance(inner, g.TransposeOp):
            return
        inner_perm = g.i64_values(inner.perm)
        # Result dim i is inner dim perm[i], which is x's dim inner_perm[perm[i]].
        composed = tuple(inner_perm[p] for p in perm)
        if composed == tuple(range(len(composed))):
            _replace_with(rewriter, op, inner.input)
            return
        new = g.TransposeOp.create(
            operands=[inner.input],
            result_types=[op.output.type],
            properties={"perm": g.i64_array(composed)},
        )
        rewriter.replace(op, new)


class FoldReshape(RewritePattern):
    """reshape to the input's own type -> x; reshape(reshape(x)) -> reshape(x)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ReshapeOp, rewriter: PatternRewriter, /):
        if _replace_with(rewriter, op, op.input):
            return
        inner = op.input.owner
        if isinstance(inner, g.ReshapeOp):
            if not _replace_with(rewriter, op, inner.input):
                rewriter.replace(op, g.ReshapeOp(inner.input, shape_of(op.output)))


class FoldBroadcast(RewritePattern):
    """broadcast to the input's own type -> x; broadcast(broadcast(x)) -> broadcast(x)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.BroadcastOp, rewriter: PatternRewriter, /):
        if _replace_with(rewriter, op, op.input):
            return
        inner = op.input.owner
        if isinstance(inner, g.BroadcastOp):
            rewriter.replace(
                op, g.BroadcastOp.create(operands=[inner.input], result_types=[op.output.type])
            )


class FoldIdentityCast(RewritePattern):
    """cast to the input's own type -> x."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.CastOp, rewriter: PatternRewriter, /):
        _replace_with(rewriter, op, op.input)


class FoldFullSlice(RewritePattern):
    """A slice taking every element of every dimension in order -> x."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.SliceOp, rewriter: PatternRewriter, /):
        shape = shape_of(op.input)
        starts, ends, steps = g.i64_values(op.starts), g.i64_values(op.ends), g.i64_values(op.steps)
        if all(s == 0 and st == 1 and e == d for d, s, e, st in zip(shape, starts, ends, steps, strict=True)):
            _replace_with(rewriter, op, op.input)


class FoldSingleConcat(RewritePattern):
    """concat of one input -> the input."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ConcatOp, rewriter: PatternRewriter, /):
        if len(op.inputs) == 1:
            _replace_with(rewriter, op, op.inputs[0])


class FoldZeroPad(RewritePattern):
    """pad by zero everywhere -> x."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.PadOp, rewriter: PatternRewriter, /):
        if not any(g.i64_values(op.pads)):
            _replace_with(rewriter, op, op.input)


# --------------------------------------------------------------------------
# Elementwise arithmetic
# --------------------------------------------------------------------------


@dataclass
class FoldAddSubZero(RewritePattern):
    """x + 0, 0 + x, x - 0 -> x.

    For floats only the exact identities apply by default: x + (-0.0) and
    x - (+0.0). `ignore_signed_zeros` also folds x + (+0.0) and x - (-0.0),
    which turn -0.0 into +0.0."""

    ignore_signed_zeros: bool = False

    def _is_zero(self, value: SSAValue, *, negative: bool) -> bool:
        v = splat_value(value)
        if v is None or v != 0:
            return False
        if not is_float(element_type_of(value)) or self.ignore_signed_zeros:
            return True
        return _is_signed_zero(float(v), negative)

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.AddOp | g.SubOp, rewriter: PatternRewriter, /):
        if isinstance(op, g.AddOp):
            if self._is_zero(op.rhs, negative=True) and _replace_with(rewriter, op, op.lhs):
                return
            if self._is_zero(op.lhs, negative=True):
                _replace_with(rewriter, op, op.rhs)
        elif self._is_zero(op.rhs, negative=False):
            _replace_with(rewriter, op, op.lhs)


class FoldMulDivPowOne(RewritePattern):
    """x * 1, 1 * x, x / 1, x ** 1 -> x (exact for every element type)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.MulOp | g.DivOp | g.PowOp, rewriter: PatternRewriter, /):
        if splat_value(op.rhs) == 1 and _replace_with(rewriter, op, op.lhs):
            return
        if isinstance(op, g.MulOp) and splat_value(op.lhs) == 1:
            _replace_with(rewriter, op, op.rhs)


class FoldInvolution(RewritePattern):
    """neg(neg(x)) -> x, not(not(x)) -> x (i1 only for not: not of an integer is x == 0)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.NegOp | g.NotOp, rewriter: PatternRewriter, /):
        inner = op.input.owner
        if type(inner) is not type(op):
            return
        if isinstance(op, g.NotOp) and not is_bool(element_type_of(op.input)):
            return  # not of an integer is (x == 0): not an involution
        _replace_with(rewriter, op, inner.input)


_IDEMPOTENT = (g.ReluOp, g.AbsOp, g.SignOp, g.FloorOp, g.CeilOp, g.RoundOp)


class FoldIdempotent(RewritePattern):
    """f(f(x)) -> f(x) for relu, abs, sign, floor, ceil, round; abs(neg(x)) -> abs(x)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self,
        op: g.ReluOp | g.AbsOp | g.SignOp | g.FloorOp | g.CeilOp | g.RoundOp,
        rewriter: PatternRewriter,
        /,
    ):
        inner = op.input.owner
        if type(inner) is type(op):
            _replace_with(rewriter, op, op.input)
        elif isinstance(op, g.AbsOp) and isinstance(inner, g.NegOp):
            # |-x| == |x|, also for the wrapped INT_MIN.
            rewriter.replace(op, type(op)(inner.input))


# --------------------------------------------------------------------------
# Clip and relu
# --------------------------------------------------------------------------


def _bound(attr: FloatAttr | None) -> float | None:
    return None if attr is None else float(attr.value.data)


def _make_clip(x: SSAValue, lo: float | None, hi: float | None) -> g.ClipOp:
    props = {}
    if lo is not None:
        props["min"] = g.f64_attr(lo)
    if hi is not None:
        props["max"] = g.f64_attr(hi)
    return g.ClipOp(x, props)


class FoldClip(RewritePattern):
    """clip without bounds -> x; clip(relu(x), lo, hi) -> clip(x, max(lo, 0), hi);
    clip(clip(x, a, b), c, d) -> clip(x, max(a, c), min(b, d)) when that range is
    not empty (an empty range makes a constant; left alone)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ClipOp, rewriter: PatternRewriter, /):
        lo, hi = _bound(op.min), _bound(op.max)
        if lo is None and hi is None:
            _replace_with(rewriter, op, op.input)
            return
        inner = op.input.owner
        if isinstance(inner, g.ReluOp):
            new_lo = 0.0 if lo is None else max(lo, 0.0)
            if hi is None or new_lo <= hi:
                rewriter.replace(op, _make_clip(inner.input, new_lo, hi))
        elif isinstance(inner, g.ClipOp):
            a, b = _bound(inner.min), _bound(inner.max)
            new_lo = lo if a is None else a if lo is None else max(a, lo)
            new_hi = hi if b is None else b if hi is None else min(b, hi)
            if new_lo is None or new_hi is None or new_lo <= new_hi:
                rewriter.replace(op, _make_clip(inner.input, new_lo, new_hi))


class FoldReluOfClip(RewritePattern):
    """relu(clip(x, lo, hi)) -> clip(x, max(lo, 0), hi) when hi is absent or >= 0."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ReluOp, rewriter: PatternRewriter, /):
        inner = op.input.owner
        if not isinstance(inner, g.ClipOp):
            return
        lo, hi = _bound(inner.min), _bound(inner.max)
        new_lo = 0.0 if lo is None else max(lo, 0.0)
        if hi is None or new_lo <= hi:
            rewriter.replace(op, _make_clip(inner.input, new_lo, hi))


# --------------------------------------------------------------------------
# Selection, matmul, reductions
# --------------------------------------------------------------------------


class FoldWhere(RewritePattern):
    """where(true, x, y) -> x, where(false, x, y) -> y, where(c, x, x) -> x
    (when the chosen operand already has the result type)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.WhereOp, rewriter: PatternRewriter, /):
        if op.lhs is op.rhs and _replace_with(rewriter, op, op.lhs):
            return
        c = splat_value(op.condition)
        if c is None:
            return
        _replace_with(rewriter, op, op.lhs if c else op.rhs)


def _swaps_last_two(value: SSAValue) -> SSAValue | None:
    """x if `value` is transpose(x) swapping only the last two dimensions."""
    op = value.owner
    if not isinstance(op, g.TransposeOp):
        return None
    perm = g.i64_values(op.perm)
    n = len(perm)
    if n >= 2 and perm == (*range(n - 2), n - 1, n - 2):
        return op.input
    return None


class FoldTransposeIntoMatmul(RewritePattern):
    """matmul(transpose(a), b) -> matmul(a, b) {transpose_a = !transpose_a} when the
    transpose swaps only the last two dimensions; likewise for b."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.MatmulOp, rewriter: PatternRewriter, /):
        a, b = _swaps_last_two(op.lhs), _swaps_last_two(op.rhs)
        if a is None and b is None:
            return
        ta, tb = bool(op.transpose_a.value.data), bool(op.transpose_b.value.data)
        new = g.MatmulOp.create(
            operands=[a if a is not None else op.lhs, b if b is not None else op.rhs],
            result_types=[op.output.type],
            properties={
                "transpose_a": g.bool_attr(ta ^ (a is not None)),
                "transpose_b": g.bool_attr(tb ^ (b is not None)),
            },
        )
        rewriter.replace(op, new)


class FoldTrivialReduce(RewritePattern):
    """A sum/mean/max/min/prod over size-1 axes only -> x (keepdims) or a reshape
    of x dropping those axes."""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self,
        op: g.ReduceSumOp | g.ReduceMeanOp | g.ReduceMaxOp | g.ReduceMinOp | g.ReduceProdOp,
        rewriter: PatternRewriter,
        /,
    ):
        shape = shape_of(op.input)
        if not all(shape[a] == 1 for a in op.reduced_axes()):
            return
        if op.keepdims.value.data:
            _replace_with(rewriter, op, op.input)
        elif all(d >= 0 for d in shape_of(op.output)):
            rewriter.replace(op, g.ReshapeOp(op.input, shape_of(op.output)))


# --------------------------------------------------------------------------
# Pattern sets and the pass
# --------------------------------------------------------------------------


def graph_canonicalization_patterns(ignore_signed_zeros: bool = False) -> list[RewritePattern]:
    """Every graph canonicalization pattern, configured by the pass options."""
    return [
        FoldTransposeOfTranspose(),
        FoldReshape(),
        FoldBroadcast(),
        FoldIdentityCast(),
        FoldFullSlice(),
        FoldSingleConcat(),
        FoldZeroPad(),
        FoldAddSubZero(ignore_signed_zeros),
        FoldMulDivPowOne(),
        FoldInvolution(),
        FoldIdempotent(),
        FoldClip(),
        FoldReluOfClip(),
        FoldWhere(),
        FoldTransposeIntoMatmul(),
        FoldTrivialReduce(),
    ]


_ROOTS: dict[type[RewritePattern], tuple[type[Operation], ...]] = {
    FoldTransposeOfTranspose: (g.TransposeOp,),
    FoldReshape: (g.ReshapeOp,),
    FoldBroadcast: (g.BroadcastOp,),
    FoldIdentityCast: (g.CastOp,),
    FoldFullSlice: (g.SliceOp,),
    FoldSingleConcat: (g.ConcatOp,),
    FoldZeroPad: (g.PadOp,),
    FoldAddSubZero: (g.AddOp, g.SubOp),
    FoldMulDivPowOne: (g.MulOp, g.DivOp, g.PowOp),
    FoldInvolution: (g.NegOp, g.NotOp),
    FoldIdempotent: _IDEMPOTENT,
    FoldClip: (g.ClipOp,),
    FoldReluOfClip: (g.ReluOp,),
    FoldWhere: (g.WhereOp,),
    FoldTransposeIntoMatmul: (g.MatmulOp,),
    FoldTrivialReduce: (g.ReduceSumOp, g.ReduceMeanOp, g.ReduceMaxOp, g.ReduceMinOp, g.ReduceProdOp),
}


def patterns_for(op_type: type[Operation]) -> tuple[RewritePattern, ...]:
    """The default-option patterns rooted at `op_type` (for HasCanonicalizationPatternsTrait)."""
    return tuple(p for p in graph_canonicalization_patterns() if op_type in _ROOTS[type(p)])
