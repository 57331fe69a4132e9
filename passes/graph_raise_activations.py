"""`graph-raise-activations`: activations written out as their formulas become one op.

Exporters that have no op for an activation write it as elementwise arithmetic. As several
ops they are several vector passes, and a kernel of their own: graph-fuse grows a product's or
conv's epilogue into a user of a value only when all the value's uses are in that one op, and
these formulas read x in two. As one op they are one activation the epilogue applies.

- GELU: torch.onnx at opset < 20 writes `nn.GELU()` as

      y = (x * (erf(x / 1.41421354) + 1)) * 0.5

  and Hugging Face's and other hand-written GELUs give the same product in another order
  (`0.5 * x * (1 + erf(x * 0.70710678))`) -> `graph.gelu` (`vec.gelu_erf` on the NPU). The tanh
  form (`0.5 * x * (1 + tanh(0.7978846 * (x + 0.044715 * x ** 3)))`, GPT-2's `gelu_new`) ->
  `graph.gelu {approximate = "tanh"}`.
- SiLU (swish): torch.onnx writes `nn.SiLU()` as `x * sigmoid(x)` -> `graph.silu`
  (torchvision's EfficientNet-B0 through ONNX, 64x64 on server: 49 `mul+sigmoid` kernels).

GELU is matched from the `erf` (or `tanh`) up and down, with any operand order of the
commutative ops:
- the argument: x / c or x * (1 / c) with c = sqrt(2) (erf), or k * (x + a * x ** 3)
  with k = sqrt(2 / pi), a = 0.044715 and the cube as `pow(x, 3)`, `x * x * x` or
  `x * (x * x)` (tanh); constants within 1e-6 relative of those values;
- then f + 1, and the product of x, f + 1 and 0.5 in any association:
  ((x * (f + 1)) * 0.5), ((x * 0.5) * (f + 1)), (x * ((f + 1) * 0.5)).
Every op between the erf/tanh and the final product must have no other user
(the ops before it are left to graph-dce when they have none); the element type
is float and all shapes are x's (the scalar constants broadcast).

SiLU is matched from the `sigmoid`: its only user multiplies it by the sigmoid's own
argument (either operand order).

Numerics: `rounding`, as graph-fold-batch-norm: the reference interpreter
evaluates graph.gelu and graph.silu as one function rather than several rounded
steps (about one f32 ulp of difference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
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
from infer.dialects.dtypes import element_type_of, is_float, shape_of
from infer.dialects.graph_canonicalization import splat_value

SQRT2 = math.sqrt(2.0)
TANH_SCALE = math.sqrt(2.0 / math.pi)
TANH_CUBIC = 0.044715


def _is(value: SSAValue, want: float) -> bool:
    """value is a constant whose elements all equal `want` within 1e-6 relative."""
    v = splat_value(value)
    return isinstance(v, float) and math.isclose(v, want, rel_tol=1e-6)


def _other(op: Operation, value: SSAValue) -> SSAValue | None:
    """The operand of binary op `op` that is not `value` (None if neither is)."""
    lhs, rhs = op.operands
    if lhs is value:
        return rhs
    return lhs if rhs is value else None


def _constant_operand(op: Operation, want: float) -> SSAValue | None:
    """The non-constant operand of binary `op` whose other operand is the constant `want`."""
    lhs, rhs = op.operands
    if _is(rhs, want):
        return lhs
    return rhs if _is(lhs, want) else None


def _only_user(value: SSAValue, kind: type[Operation]) -> Operation | None:
    """The single user of `value`, if it is a `kind` op."""
    if not value.has_one_use():
        return None
    user = next(iter(value.uses)).operation
    return user if isinstance(user, kind) else None


def _erf_argument(op: g.ErfOp) -> SSAValue | None:
    """x of erf(x / sqrt(2)) or erf(x * (1 / sqrt(2)))."""
    arg = op.input.owner
    if isinstance(arg, g.DivOp) and _is(arg.rhs, SQRT2):
        return arg.lhs
    if isinstance(arg, g.MulOp):
        return _constant_operand(arg, 1 / SQRT2)
    return None


def _is_cube_of(value: SSAValue, x: SSAValue) -> bool:
    """value is x ** 3, x * x * x or x * (x * x)."""
    op = value.owner
    if isinstance(op, g.PowOp):
        return op.lhs is x and _is(op.rhs, 3.0)
    if not isinstance(op, g.MulOp):
        return False
    if op.lhs is x and op.rhs is x:
        return False
    square = _other(op, x)
    return square is not None and isinstance(square.owner, g.MulOp) and \
        square.owner.lhs is x and square.owner.rhs is x


def _tanh_argument(op: g.TanhOp) -> SSAValue | None:
    """x of tanh(sqrt(2/pi) * (x + 0.044715 * x ** 3))."""
    scaled = op.input.owner
    if not isinstance(scaled, g.MulOp):
        return None
    inner = _constant_operand(scaled, TANH_SCALE)
    if inner is None or not isinstance(inner.owner, g.AddOp):
        return None
    for x, cubic in ((inner.owner.lhs, inner.owner.rhs), (inner.owner.rhs, inner.owner.lhs)):
        if isinstance(cubic.owner, g.MulOp):
            cube = _constant_operand(cubic.owner, TANH_CUBIC)
            if cube is not None and _is_cube_of(cube, x):
                return x
    return None


def _gelu_product(f: SSAValue, x: SSAValue) -> Operation | None:
    """The op whose result is x * (f + 1) * 0.5 in one of the associations the module
    docstring lists, with every intermediate used once; None if there is none."""
    plus_one = _only_user(f, g.AddOp)
    if plus_one is None or _other(plus_one, f) is None or not _is(_other(plus_one, f), 1.0):
        return None
    a = plus_one.results[0]
    first = _only_user(a, g.MulOp)
    if first is None:
        return None
    other = _other(first, a)
    if other is x:  # (x * (f + 1)) * 0.5
        last = _only_user(first.results[0], g.MulOp)
        if last is not None and _constant_operand(last, 0.5) is first.results[0]:
            return last
        return None
    if other is not None and isinstance(other.owner, g.MulOp) and _constant_operand(other.owner, 0.5) is x:
        return first  # (x * 0.5) * (f + 1)
    if other is not None and _is(other, 0.5):  # x * ((f + 1) * 0.5)
        last = _only_user(first.results[0], g.MulOp)
        if last is not None and _other(last, first.results[0]) is x:
            return last
    return None


@dataclass
class RaiseGelu(RewritePattern):
    """erf or tanh GELU formula -> graph.gelu (see the module docstring)."""

    def _raise(self, core: Operation, x: SSAValue | None, approximate: str, rewriter: PatternRewriter) -> None:
        if x is None or not is_float(element_type_of(x.type)):
            return
        last = _gelu_product(core.results[0], x)
        if last is None or shape_of(last.results[0].type) != shape_of(x.type) or \
                last.results[0].type != x.type:
            return
        rewriter.replace(last, g.GeluOp.build(operands=[x], result_types=[x.type],
                                              properties={"approximate": StringAttr(approximate)}))

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ErfOp | g.TanhOp, rewriter: PatternRewriter, /):
        if isinstance(op, g.ErfOp):
            self._raise(op, _erf_argument(op), "none", rewriter)
        else:
            self._raise(op, _tanh_argument(op), "tanh", rewriter)


@dataclass
class RaiseSilu(RewritePattern):
    """x * sigmoid(x) -> graph.silu."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.SigmoidOp, rewriter: PatternRewriter, /):
        product = _only_user(op.results[0], g.MulOp)
        x = op.input
        if product is None or _other(product, op.results[0]) is not x or product.results[0].type != x.type:
            return
        rewriter.replace(product, g.SiluOp.build(operands=[x], result_types=[x.type]))


@dataclass(frozen=True)
class GraphRaiseActivationsPass(ModulePass):
    """Replace GELU formulas (erf or tanh form) by graph.gelu and x * sigmoid(x) by
    graph.silu, then remove what they leave unused."""

    name = "graph-raise-activations"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([RaiseGelu(), RaiseSilu()]), apply_recursively=False,
                             post_walk_func=region_dce).rewrite_module(op)
