"""Elementwise graph ops as vector-unit instruction sequences on [rows, cols] tiles: the table
`RULES` (graph op type -> `Rule`) that elementwise.py applies to every output tile.

Every tensor is held as f32 values (storage.py), so one sequence serves every element type its
rule lists. A rule's `emit(seq, op, dst, operands, temps)` writes `dst` from the operands
(tiles at the origin, or for operand 1 of a binary op also a row, a column or an immediate:
the vector unit's bmodes); `tiles` names the operand positions that must be full tiles (the
caller broadcasts the others), `temps` / `int_temps` the single-buffered [rows, cols] f32 /
i32 scratch tiles it uses, and `cost` its vector ops per element (the cost model's estimate).

Exactness (documented, checked against the reference interpreter by the tests):

* one vector op: relu, neg, abs, exp, log, sqrt, rsqrt, reciprocal, tanh, sigmoid, silu, add,
  sub, mul, max, min, and the comparisons (`eq`, `lt`, `le`; gt/ge swap the operands);
* i1 logic on 0/1 values: and = mul, or = max, xor = |a - b|, not = 1 - x (exact);
* rounding: the vector unit's f32 -> i32 conversion rounds half to even (saturating beyond
  2^31), so round = rint for |x| < 2^23 and x itself beyond (already integral), selected as
  c*r + (1-c)*x with c in {0, 1} (exact: one term is +-0); floor = rint - (rint > x); ceil =
  -floor(-x); sign = (x > 0) - (x < 0);
* select c*x + (1-c)*y is exact for finite values; a branch that is +-inf (masks) is selected
  with min/max against +-inf instead (where);
* div: floats a * (1/b) (<= 1 ulp); integers truncate toward zero exactly (|q| from
  rint(|a| * (1/|b|)), corrected by the remainder's sign, then signed); mod (floor, sign of
  the divisor): a - b*trunc(a/b), plus b where the remainder and b differ in sign;
* pow: compile-time exponents 2, 3, +-0.5, +-1 exactly as products/roots; others
  exp(b * ln|a|) (~1e-6 relative), negated for a < 0 and odd integer b; integer results rounded;
* erf and erf-GELU: one instruction each (`vec.erf`, `vec.gelu_erf`: the float64 value rounded
  once to f32); tanh-GELU is `vec.gelu`;
* softplus: max(x, 0) + ln(1 + e^-|x|);
* casts: see `emit_cast`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import bf16, f32, i32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import dense_to_numpy, element_name_of
from infer.passes.graph_to_tile import storage
from infer.passes.graph_to_tile.builder import Emitter

Operand = tuple[str, object]  # (bmode, local buffer) or ("imm", float)
ORIGIN = (0, 0)
EXACT_INTEGRAL = float(1 << 23)  # f32 values at least this large are integers
POW_EXPONENTS = (2.0, 0.5, 1.0, -1.0, -0.5, 3.0)  # compile-time exponents pow lowers exactly
INT_RANGES = {"i8": (-(1 << 7), 1 << 8), "ui8": (0, 1 << 8), "i16": (-(1 << 15), 1 << 16), "ui16": (0, 1 << 16)}
"""Integer types narrower than the exact f32 range: (lowest value, number of values)."""


class Seq:
    """Vector instructions on [rows, cols] tiles at the origin."""

    def __init__(self, em: Emitter, rows: int, cols: int):
        self.em, self.rows, self.cols = em, rows, cols

    def v(self, name: str, dst: SSAValue, a: SSAValue, b: Operand | None = None) -> None:
        """dst = name(a[, b]); b is (bmode, buffer) or ("imm", value)."""
        em, z, r, c = self.em, ORIGIN, self.rows, self.cols
        if b is None:
            em.vec(name, dst, z, a, z, r, c)
        elif b[0] == "imm":
            em.vec(name, dst, z, a, z, r, c, bmode="imm", imm=float(b[1]))  # type: ignore[arg-type]
        else:
            em.vec(name, dst, z, a, z, r, c, b[1], z, bmode=b[0])  # type: ignore[arg-type]

    def imm(self, name: str, dst: SSAValue, a: SSAValue, value: float) -> None:
        self.v(name, dst, a, ("imm", value))

    def tile(self, name: str, dst: SSAValue, a: SSAValue, b: SSAValue) -> None:
        self.v(name, dst, a, ("tile", b))

    def fill(self, dst: SSAValue, value: float) -> None:
        self.em.fill(dst, ORIGIN, self.rows, self.cols, value)

    def one_minus(self, dst: SSAValue, a: SSAValue) -> None:
        """dst = 1 - a."""
        self.imm("mul", dst, a, -1.0)
        self.imm("add", dst, dst, 1.0)

    def select(self, dst: SSAValue, c: SSAValue, x: SSAValue, y: SSAValue, scratch: SSAValue) -> None:
        """dst = c ? x : y for c in {0, 1}, as mask(x, c) + mask(y, c == 0): exact for every x
        and y (the lane not taken is -0, addition's identity, whatever that branch holds there:
        inf, NaN). scratch must differ from c, x and y; dst may be any of them."""
        self.imm("eq", scratch, c, 0.0)
        self.tile("mask", scratch, y, scratch)
        self.tile("mask", dst, x, c)
        self.tile("add", dst, dst, scratch)

    def rint(self, dst: SSAValue, x: SSAValue, as_int: SSAValue) -> None:
        """dst = x rounded half to even, for |x| < 2^31 (the f32 -> i32 conversion)."""
        self.v("copy", as_int, x)
        self.v("copy", dst, as_int)

    def floor(self, dst: SSAValue, x: SSAValue, temps: Sequence[SSAValue], as_int: SSAValue,
              small: bool = False) -> None:
        """dst = floor(x); temps: 3 scratch tiles (2 when `small`: |x| < 2^23 is known). dst
        may be x."""
        r, c = temps[0], temps[1]
        self.rint(r, x, as_int)
        self.tile("lt", c, x, r)  # rint rounded up
        self.tile("sub", r, r, c)
        if small:
            self.v("copy", dst, r)
            return
        self.v("abs", c, x)
        self.imm("lt", c, c, EXACT_INTEGRAL)  # beyond: x is integral (or inf, NaN)
        self.select(dst, c, r, x, temps[2])


Emit = Callable[[Seq, Operation, SSAValue, list[Operand], list[SSAValue], list[SSAValue]], None]


@dataclass(frozen=True)
class Rule:
    """How one elementwise op type lowers (see the module docstring)."""

    emit: Emit
    types: frozenset[str] = storage.FLOATS
    operand_types: frozenset[str] = frozenset()
    tiles: tuple[int, ...] | Callable[[Operation], tuple[int, ...]] = (0,)
    temps: int | Callable[[Operation], int] = 0
    int_temps: int | Callable[[Operation], int] = 0
    b_temps: int | Callable[[Operation], int] = 0
    cost: int | Callable[[Operation], int] = 1
    commutative: bool = False
    vector_op: str | None = None  # its cost is the config's cost of this vector op

    def tile_operands(self, op: Operation) -> tuple[int, ...]:
        return self.tiles(op) if callable(self.tiles) else self.tiles

    def temp_count(self, op: Operation) -> tuple[int, int, int]:
        """[rows, cols] f32 scratch tiles, int scratch tiles, and (double-buffered) scratch
        buffers shaped like operand 1 (a tile, row or column; none for an immediate)."""
        def count(x: int | Callable[[Operation], int]) -> int:
            return x(op) if callable(x) else x
        return count(self.temps), count(self.int_temps), count(self.b_temps)


def _tile(operand: Operand) -> SSAValue:
    kind, x = operand
    assert kind == "tile", f"operand must be a tile, got {kind}"
    return x  # type: ignore[return-value]


def _one(name: str) -> Emit:
    """One vector op: dst = name(a[, b])."""
    def emit(s: Seq, op, dst, xs, temps, ints) -> None:
        s.v(name, dst, _tile(xs[0]), xs[1] if len(xs) > 1 else None)
    return emit


def _single(name: str, **kw) -> Rule:
    """The rule of a graph op that is the vector op `name`."""
    return Rule(_one(name), vector_op=name, **kw)


def _swapped(name: str) -> Emit:
    """dst = name(b, a): gt/ge as lt/le with the operands swapped (operand 1 is the tile)."""
    def emit(s: Seq, op, dst, xs, temps, ints) -> None:
        s.v(name, dst, _tile(xs[1]), xs[0])
    return emit


# -- unary sequences ------------------------------------------------------------------------------


def activation_instruction(op: Operation) -> str | None:
    """The vector instruction that computes the unary activation `op` in one pass (f32 in, the
    destination's type out), or None when `op` is not one of those (`ONE_INSTRUCTION_ACTIVATIONS`,
    gelu). A product applies such an activation to its activations as it stages them
    (graph-fuse-activation-prologue, gemm.py)."""
    if isinstance(op, g.GeluOp):
        return "gelu" if op.approximate.data == "tanh" else "gelu_erf"
    return ONE_INSTRUCTION_ACTIVATIONS.get(type(op))


ONE_INSTRUCTION_ACTIVATIONS: dict[type[Operation], str] = {
    g.ReluOp: "relu", g.SiluOp: "silu", g.SigmoidOp: "sigmoid", g.TanhOp: "tanh",
}


def _gelu(s: Seq, op, dst, xs, temps, ints) -> None:
    s.v("gelu" if op.approximate.data == "tanh" else "gelu_erf", dst, _tile(xs[0]))


TWO_PI_HIGH = 6.28125  # 2 pi = TWO_PI_HIGH + TWO_PI_LOW; k * TWO_PI_HIGH is exact for |k| < 2^15
TWO_PI_LOW = 2 * math.pi - TWO_PI_HIGH
SINE_TAYLOR = (1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800)  # z^1, z^3, ..., z^11


def _sine_or_cosine(s: Seq, dst: SSAValue, x: SSAValue, temps: Sequence[SSAValue], as_int: SSAValue,
                    cosine: bool) -> None:
    """dst = sin(x) or cos(x): y = x - 2 pi rint(x / 2 pi) in [-pi, pi] (Cody-Waite, two-part
    2 pi), then sin(y) = sign(y) S(pi/2 - |pi/2 - |y||), cos(y) = S(pi/2 - |y|) with S the
    Taylor polynomial of degree 11 on [-pi/2, pi/2] (|err| < 6e-8, odd: S(0) = 0 exactly)."""
    y, z, z2, p = temps[:4]
    s.imm("mul", z, x, 1 / (2 * math.pi))
    s.rint(z, z, as_int)  # k
    s.imm("mul", y, z, -TWO_PI_HIGH)
    s.tile("add", y, y, x)
    s.imm("mul", z, z, -TWO_PI_LOW)
    s.tile("add", y, y, z)  # y = x - 2 pi k
    s.v("abs", z, y)
    s.imm("mul", z, z, -1.0)
    s.imm("add", z, z, math.pi / 2)  # pi/2 - |y|
    if not cosine:
        s.v("abs", z, z)
        s.imm("mul", z, z, -1.0)
        s.imm("add", z, z, math.pi / 2)
    s.tile("mul", z2, z, z)
    s.imm("mul", p, z2, SINE_TAYLOR[5])
    for coef in reversed(SINE_TAYLOR[:5]):
        s.imm("add", p, p, coef)
        if coef != SINE_TAYLOR[0]:
            s.tile("mul", p, p, z2)
    s.tile("mul", dst, p, z)
    if not cosine:  # the sign of y: dst - 2 (y < 0) dst
        s.imm("lt", z, y, 0.0)
        s.tile("mul", z, z, dst)
        s.imm("mul", z, z, 2.0)
        s.tile("sub", dst, dst, z)


def _sin(s: Seq, op, dst, xs, temps, ints) -> None:
    _sine_or_cosine(s, dst, _tile(xs[0]), temps, ints[0], cosine=False)


def _cos(s: Seq, op, dst, xs, temps, ints) -> None:
    _sine_or_cosine(s, dst, _tile(xs[0]), temps, ints[0], cosine=True)


def _clip(s: Seq, op, dst, xs, temps, ints) -> None:
    src = _tile(xs[0])
    if op.min is not None:
        s.imm("max", dst, src, op.min.value.data)
        src = dst
    if op.max is not None:
        s.imm("min", dst, src, op.max.value.data)
        src = dst
    if src is not dst:
        s.v("copy", dst, src)


def _leaky_relu(s: Seq, op, dst, xs, temps, ints) -> None:
    x, (negative,) = _tile(xs[0]), temps
    s.imm("min", negative, x, 0.0)
    s.imm("mul", negative, negative, op.alpha.value.data)
    s.v("relu", dst, x)
    s.tile("add", dst, dst, negative)


def _elu(s: Seq, op, dst, xs, temps, ints) -> None:
    x, (negative,) = _tile(xs[0]), temps
    s.imm("min", negative, x, 0.0)
    s.v("exp", negative, negative)
    s.imm("add", negative, negative, -1.0)
    s.imm("mul", negative, negative, op.alpha.value.data)
    s.v("relu", dst, x)
    s.tile("add", dst, dst, negative)


def _hard_sigmoid(s: Seq, op, dst, xs, temps, ints) -> None:
    s.imm("mul", dst, _tile(xs[0]), op.alpha.value.data)
    s.imm("add", dst, dst, op.beta.value.data)
    s.imm("max", dst, dst, 0.0)
    s.imm("min", dst, dst, 1.0)


def _floor(s: Seq, op, dst, xs, temps, ints) -> None:
    s.floor(dst, _tile(xs[0]), temps, ints[0])


def _ceil(s: Seq, op, dst, xs, temps, ints) -> None:
    negated = temps[3]
    s.v("neg", negated, _tile(xs[0]))
    s.floor(dst, negated, temps[:3], ints[0])
    s.v("neg", dst, dst)


def _round(s: Seq, op, dst, xs, temps, ints) -> None:
    x = _tile(xs[0])
    r, c, scratch = temps
    s.rint(r, x, ints[0])
    s.v("abs", c, x)
    s.imm("lt", c, c, EXACT_INTEGRAL)
    s.select(dst, c, r, x, scratch)


def _sign(s: Seq, op, dst, xs, temps, ints) -> None:
    x, (negative,) = _tile(xs[0]), temps
    s.v("neg", dst, x)
    s.imm("lt", dst, dst, 0.0)  # x > 0
    s.imm("lt", negative, x, 0.0)
    s.tile("sub", dst, dst, negative)


def _softplus(s: Seq, op, dst, xs, temps, ints) -> None:
    x, (t,) = _tile(xs[0]), temps
    s.v("abs", t, x)
    s.v("neg", t, t)
    s.v("exp", t, t)
    s.imm("add", t, t, 1.0)
    s.v("log", t, t)  # ln(1 + e^-|x|)
    s.v("relu", dst, x)
    s.tile("add", dst, dst, t)


def _not(s: Seq, op, dst, xs, temps, ints) -> None:
    s.imm("eq", dst, _tile(xs[0]), 0.0)  # 1 - x on 0/1; x == 0 for numbers, as the reference


# -- casts ------------------------------------------------------------------------------------------


def cast_kind(op: Operation) -> str:
    """What a cast does to f32-held values: "copy" (the same value), "bf16" (round to bf16),
    "trunc" (float -> integer: toward zero), "wrap" (integer -> a narrower integer type:
    modulo its range), "trunc+wrap" (float -> a narrow integer type), "bool" (x != 0)."""
    src, dst = element_name_of(op.operands[0]), element_name_of(op.results[0])
    float_src = src in storage.FLOATS or src == "f64"
    if dst == "i1":
        return "copy" if src == "i1" else "bool"
    if dst == "bf16" and src in ("f32", "f16", "f64"):
        return "bf16"
    if dst in storage.INTEGERS and float_src:
        return "trunc+wrap" if dst in INT_RANGES else "trunc"
    if dst in INT_RANGES and src in storage.INTEGERS:
        lo, n = INT_RANGES[dst]
        src_range = INT_RANGES.get(src)
        if src_range is None or src_range[0] < lo or src_range[0] + src_range[1] > lo + n:
            return "wrap"
    return "copy"


_CAST_TEMPS = {"copy": (0, 0), "bool": (0, 0), "bf16": (0, 1), "trunc": (4, 1), "wrap": (3, 1), "trunc+wrap": (4, 1)}


def _cast(s: Seq, op, dst, xs, temps, ints) -> None:
    """copy: the f32 value is the value of the result type (float -> float keeps the f32 value,
    f16 rounds at the output: storage.py; int/bool -> float; widening ints); bf16: round to
    nearest even through a bf16 tile; trunc: toward zero, floor(|x|) with the sign of x; wrap:
    x - n floor((x - lo) / n) into the type's n values from lo (exact: n is a power of two);
    bool: 1 - (x == 0)."""
    x = _tile(xs[0])
    kind = cast_kind(op)
    if kind == "copy":
        s.v("copy", dst, x)
    elif kind == "bool":
        s.imm("eq", dst, x, 0.0)
        s.one_minus(dst, dst)
    elif kind == "bf16":
        s.v("copy", ints[0], x)  # a bf16 tile
        s.v("copy", dst, ints[0])
    else:
        if kind.startswith("trunc"):
            magnitude = temps[3]
            s.v("abs", magnitude, x)
            s.floor(dst, magnitude, temps[:3], ints[0])
            negative = temps[0]
            s.imm("lt", negative, x, 0.0)  # the sign: dst - 2 (x < 0) dst
            s.tile("mul", negative, negative, dst)
            s.imm("mul", negative, negative, 2.0)
            s.tile("sub", dst, dst, negative)
            x = dst
        if kind.endswith("wrap"):
            lo, n = INT_RANGES[element_name_of(op.results[0])]
            q = temps[2]
            s.imm("add", q, x, -float(lo))
            s.imm("mul", q, q, 1.0 / n)
            s.floor(q, q, temps[:2], ints[0], small=True)
            s.imm("mul", q, q, -float(n))
            s.tile("add", dst, x, q)


def _cast_int_temp_type(op: Operation):
    return bf16 if cast_kind(op) == "bf16" else i32


# -- binary sequences -------------------------------------------------------------------------------


def _div(s: Seq, op, dst, xs, temps, ints) -> None:
    a, b = _tile(xs[0]), xs[1]
    if element_name_of(op.results[0]) in storage.INTEGERS:
        _int_div(s, dst, a, _tile(b), temps, ints[0], floor_mod=False)
    elif b[0] == "imm":
        s.imm("mul", dst, a, 1.0 / float(b[1]))  # type: ignore[arg-type]
    else:  # temps[0] has b's shape (Rule.b_temps)
        rows, cols = {"tile": (s.rows, s.cols), "row": (1, s.cols), "col": (s.rows, 1)}[b[0]]
        s.em.vec("recip", temps[0], ORIGIN, b[1], ORIGIN, rows, cols)  # type: ignore[arg-type]
        s.v("mul", dst, a, (b[0], temps[0]))


def _int_div(s: Seq, dst: SSAValue, a: SSAValue, b: SSAValue, temps: Sequence[SSAValue], as_int: SSAValue,
             floor_mod: bool) -> None:
    """dst = trunc(a / b) for integer values; floor_mod: a mod b with the sign of b."""
    abs_a, abs_b, q, t = temps[:4]
    s.v("abs", abs_a, a)
    s.v("abs", abs_b, b)
    s.v("recip", q, abs_b)
    s.tile("mul", q, q, abs_a)
    s.rint(q, q, as_int)  # |a| / |b| to within one
    s.tile("mul", t, q, abs_b)
    s.tile("sub", t, abs_a, t)  # the remainder of |a| for q
    s.imm("lt", dst, t, 0.0)
    s.tile("sub", q, q, dst)  # one too many
    s.tile("le", dst, abs_b, t)
    s.tile("add", q, q, dst)  # one too few
    s.imm("lt", abs_a, a, 0.0)  # negative iff exactly one operand is
    s.imm("lt", abs_b, b, 0.0)
    s.tile("sub", abs_a, abs_a, abs_b)
    s.v("abs", abs_a, abs_a)
    s.tile("mul", abs_a, abs_a, q)
    s.imm("mul", abs_a, abs_a, 2.0)
    s.tile("sub", q, q, abs_a)  # trunc(a / b)
    if not floor_mod:
        s.v("copy", dst, q)
        return
    s.tile("mul", q, q, b)
    s.tile("sub", dst, a, q)  # a - b trunc(a / b): the sign of a
    s.tile("mul", t, dst, b)
    s.imm("lt", t, t, 0.0)  # remainder and divisor differ in sign: add the divisor
    s.tile("mul", t, t, b)
    s.tile("add", dst, dst, t)


def _mod(s: Seq, op, dst, xs, temps, ints) -> None:
    a, b = _tile(xs[0]), _tile(xs[1])
    if element_name_of(op.results[0]) in storage.INTEGERS:
        _int_div(s, dst, a, b, temps, ints[0], floor_mod=True)
        return
    q = temps[3]  # floats: a - b floor(a / b)
    s.v("recip", q, b)
    s.tile("mul", q, q, a)
    s.floor(q, q, temps[:3], ints[0])
    s.tile("mul", q, q, b)
    s.tile("sub", dst, a, q)


def _pow(s: Seq, op, dst, xs, temps, ints) -> None:
    a, b = _tile(xs[0]), xs[1]
    if b[0] == "imm" and float(b[1]) in POW_EXPONENTS:  # type: ignore[arg-type]
        e = float(b[1])  # type: ignore[arg-type]
        if e == 2.0:
            s.tile("mul", dst, a, a)
        elif e == 3.0:
            s.tile("mul", dst, a, a)
            s.tile("mul", dst, dst, a)
        elif e == 0.5:
            s.v("sqrt", dst, a)
        elif e == -0.5:
            s.v("rsqrt", dst, a)
        elif e == -1.0:
            s.v("recip", dst, a)
        else:
            s.v("copy", dst, a)
        return
    t, odd = temps[0], temps[1]
    s.v("abs", t, a)
    s.v("log", t, t)
    s.v("mul", t, t, b)
    s.v("exp", dst, t)  # |a|^b
    if b[0] == "imm":
        value = float(b[1])  # type: ignore[arg-type]
        if not (value.is_integer() and int(value) % 2):
            _round_if_integer(s, op, dst, ints[0])
            return
        s.imm("lt", t, a, 0.0)  # odd exponent: negative for a < 0
    else:
        s.fill(odd, 0.0)
        s.v("add", odd, odd, b)  # b on the tile
        s.imm("mul", t, odd, 0.5)
        s.floor(t, t, temps[2:5], ints[0])
        s.imm("mul", t, t, -2.0)
        s.tile("add", odd, odd, t)
        s.imm("eq", odd, odd, 1.0)  # b is an odd integer
        s.imm("lt", t, a, 0.0)
        s.tile("mul", t, t, odd)
    s.tile("mul", t, t, dst)
    s.imm("mul", t, t, 2.0)
    s.tile("sub", dst, dst, t)
    _round_if_integer(s, op, dst, ints[0])


def _round_if_integer(s: Seq, op: Operation, dst: SSAValue, as_int: SSAValue) -> None:
    if element_name_of(op.results[0]) in storage.INTEGERS:
        s.rint(dst, dst, as_int)


def _pow_exponent(op: Operation) -> float | None:
    """The compile-time scalar exponent of a pow, or None (its owner must be a constant)."""
    owner = op.operands[1].owner
    if isinstance(owner, g.ConstantOp):
        array = dense_to_numpy(owner.value)
        if array.size == 1:
            return float(array.reshape(()))
    return None


def _pow_temps(op: Operation) -> int:
    return 0 if _pow_exponent(op) in POW_EXPONENTS else 5


def _xor(s: Seq, op, dst, xs, temps, ints) -> None:
    s.v("sub", dst, _tile(xs[0]), xs[1])
    s.v("abs", dst, dst)


NUMBERS, HELD, BOOL = storage.NUMBERS, storage.HELD, storage.BOOL
ORDERED = storage.NUMBERS | storage.BOOL  # comparisons read any held value; write i1

RULES: dict[type[Operation], Rule] = {
    # one vector op
    **{op_type: _single(name) for op_type, name in (
        (g.ExpOp, "exp"), (g.LogOp, "log"), (g.SqrtOp, "sqrt"), (g.RsqrtOp, "rsqrt"),
        (g.ReciprocalOp, "recip"), (g.TanhOp, "tanh"), (g.SigmoidOp, "sigmoid"), (g.SiluOp, "silu"))},
    **{op_type: _single(name, types=NUMBERS) for op_type, name in (
        (g.ReluOp, "relu"), (g.NegOp, "neg"), (g.AbsOp, "abs"))},
    g.AddOp: _single("add", types=NUMBERS, commutative=True),
    g.SubOp: _single("sub", types=NUMBERS),
    g.MulOp: _single("mul", types=NUMBERS, commutative=True),
    g.MaximumOp: _single("max", types=NUMBERS | BOOL, commutative=True),
    g.MinimumOp: _single("min", types=NUMBERS | BOOL, commutative=True),
    # comparisons and logic on 0/1
    g.EqualOp: _single("eq", types=BOOL, operand_types=ORDERED, commutative=True),
    g.LessOp: _single("lt", types=BOOL, operand_types=ORDERED),
    g.LessEqualOp: _single("le", types=BOOL, operand_types=ORDERED),
    g.GreaterOp: Rule(_swapped("lt"), types=BOOL, operand_types=ORDERED, tiles=(1,), vector_op="lt"),
    g.GreaterEqualOp: Rule(_swapped("le"), types=BOOL, operand_types=ORDERED, tiles=(1,), vector_op="le"),
    g.AndOp: _single("mul", types=BOOL, commutative=True),
    g.OrOp: _single("max", types=BOOL, commutative=True),
    g.XorOp: Rule(_xor, types=BOOL, commutative=True, cost=2),
    g.NotOp: Rule(_not, types=BOOL, operand_types=BOOL | NUMBERS, vector_op="eq"),
    g.ErfOp: _single("erf"),
    g.GeluOp: Rule(_gelu, cost=4),  # one instruction, vec.gelu (tanh) or vec.gelu_erf
    # sequences (the first four: the cost model's old estimate, one add)
    g.ClipOp: Rule(_clip, types=NUMBERS, vector_op="add"),
    g.LeakyReluOp: Rule(_leaky_relu, temps=1, vector_op="add"),
    g.EluOp: Rule(_elu, temps=1, vector_op="add"),
    g.HardSigmoidOp: Rule(_hard_sigmoid, vector_op="add"),
    g.SoftplusOp: Rule(_softplus, temps=1, cost=8),
    g.SinOp: Rule(_sin, temps=4, int_temps=1, cost=26),
    g.CosOp: Rule(_cos, temps=4, int_temps=1, cost=22),
    g.FloorOp: Rule(_floor, temps=3, int_temps=1, cost=12),
    g.CeilOp: Rule(_ceil, temps=4, int_temps=1, cost=14),
    g.RoundOp: Rule(_round, temps=3, int_temps=1, cost=9),
    g.SignOp: Rule(_sign, types=NUMBERS, temps=1, cost=4),
    g.CastOp: Rule(_cast, types=HELD | {"f64"}, temps=lambda op: _CAST_TEMPS[cast_kind(op)][0],
                   int_temps=lambda op: _CAST_TEMPS[cast_kind(op)][1], cost=10),
    g.DivOp: Rule(_div, types=NUMBERS, tiles=lambda op: (0, 1) if _is_int(op) else (0,),
                  temps=lambda op: 4 if _is_int(op) else 0, int_temps=lambda op: 1 if _is_int(op) else 0,
                  b_temps=lambda op: 0 if _is_int(op) else 1, cost=lambda op: 20 if _is_int(op) else 1),
    g.ModOp: Rule(_mod, types=NUMBERS, tiles=(0, 1), temps=4, int_temps=1, cost=30),
    g.PowOp: Rule(_pow, types=NUMBERS, temps=_pow_temps, int_temps=1,
                  cost=lambda op: 1 if _pow_exponent(op) in POW_EXPONENTS else 20),
}
"""Graph op type -> its vector sequence (see the module docstring)."""


def _is_int(op: Operation) -> bool:
    return element_name_of(op.results[0]) in storage.INTEGERS


def int_temp_type(op: Operation):
    """The element type of op's `int_temps` scratch tiles (i32 for the f32 -> i32 rounding, bf16
    for the bf16 cast)."""
    return _cast_int_temp_type(op) if isinstance(op, g.CastOp) else i32


__all__ = ["ORIGIN", "Operand", "RULES", "Rule", "Seq", "cast_kind", "int_temp_type"]
