"""Graph-interpreter kernels of the elementwise ops: float unary functions, integer/bitwise
ops, binary arithmetic with numpy broadcasting, `where` and `cast` (the package docstring
states their numerics)."""

from __future__ import annotations

import math
from collections.abc import Callable

import ml_dtypes
import numpy as np
from xdsl.ir import Operation

from infer.dialects import graph as g
from infer.dialects.graph_interpreter.core import (
    F32,
    KERNELS,
    LOW_PRECISION,
    bool_of,
    Env,
    float_of,
    InterpreterError,
    is_float_dtype,
    Kernel,
    kernel_for,
    out_dtype,
    scalar,
    upcast,
)
from infer.target.special import erf


# -- elementwise unary -----------------------------------------------------------


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    one = scalar(x, 1.0)
    return np.where(x >= 0, one / (one + e), e / (one + e))


def _erf_like(x: np.ndarray) -> np.ndarray:
    return erf(x).astype(x.dtype)


def _gelu_exact(x: np.ndarray) -> np.ndarray:
    e = erf(x.astype(np.float64) * (1.0 / math.sqrt(2.0))).astype(x.dtype)
    half, one = scalar(x, 0.5), scalar(x, 1.0)
    return half * x * (one + e)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = scalar(x, math.sqrt(2.0 / math.pi))
    k = scalar(x, 0.044715)
    half, one = scalar(x, 0.5), scalar(x, 1.0)
    return half * x * (one + np.tanh(c * (x + k * x * x * x)))


_FLOAT_UNARY: dict[type[Operation], Callable[[np.ndarray], np.ndarray]] = {
    g.ExpOp: np.exp,
    g.LogOp: np.log,
    g.SqrtOp: np.sqrt,
    g.RsqrtOp: lambda x: scalar(x, 1.0) / np.sqrt(x),
    g.ReciprocalOp: lambda x: scalar(x, 1.0) / x,
    g.TanhOp: np.tanh,
    g.SigmoidOp: _sigmoid,
    g.ErfOp: _erf_like,
    g.SinOp: np.sin,
    g.CosOp: np.cos,
    g.FloorOp: np.floor,
    g.CeilOp: np.ceil,
    g.RoundOp: np.rint,
    g.SiluOp: lambda x: x * _sigmoid(x),
    g.SoftplusOp: lambda x: np.logaddexp(scalar(x, 0.0), x),
}


def _float_unary(fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    def kernel(op: Operation, xs: list[np.ndarray], env: Env) -> np.ndarray:
        x = xs[0]
        if not is_float_dtype(x.dtype):
            raise InterpreterError(f"{op.name}: needs a floating-point operand, got {x.dtype}")
        return fn(upcast(x))

    return kernel


for _cls, _fn in _FLOAT_UNARY.items():
    KERNELS[_cls] = _float_unary(_fn)


@kernel_for(g.NegOp)
def _neg(op: Operation, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = xs[0]
    return x if x.dtype == np.bool_ else np.negative(upcast(x))


@kernel_for(g.AbsOp)
def _abs(op: Operation, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = xs[0]
    return x if x.dtype == np.bool_ else np.abs(upcast(x))


@kernel_for(g.SignOp)
def _sign(op: Operation, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = xs[0]
    return x if x.dtype == np.bool_ else np.sign(upcast(x))


@kernel_for(g.ReluOp)
def _relu(op: Operation, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    if x.dtype == np.bool_:
        return x
    return np.maximum(x, x.dtype.type(0))


@kernel_for(g.NotOp)
def _not(op: Operation, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = xs[0]
    return np.logical_not(x) if x.dtype == np.bool_ else (x == 0)


@kernel_for(g.BitwiseNotOp)
def _bitwise_not(op: Operation, xs: list[np.ndarray], env: Env) -> np.ndarray:
    return np.invert(xs[0])


@kernel_for(g.GeluOp)
def _gelu(op: g.GeluOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    return _gelu_tanh(x) if op.approximate.data == "tanh" else _gelu_exact(x)


@kernel_for(g.ClipOp)
def _clip(op: g.ClipOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    lo = float_of(op.min) if op.min is not None else None
    hi = float_of(op.max) if op.max is not None else None
    if x.dtype == np.bool_:
        y = x.astype(np.float64)
        if lo is not None:
            y = np.maximum(y, lo)
        if hi is not None:
            y = np.minimum(y, hi)
        return y != 0
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        if lo is not None:
            lo = int(min(max(math.ceil(lo), info.min), info.max))
        if hi is not None:
            hi = int(max(min(math.floor(hi), info.max), info.min))
    out = x
    if lo is not None:
        out = np.where(out < x.dtype.type(lo), x.dtype.type(lo), out)
    if hi is not None:
        out = np.where(out > x.dtype.type(hi), x.dtype.type(hi), out)
    return out


@kernel_for(g.LeakyReluOp)
def _leaky_relu(op: g.LeakyReluOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    return np.where(x >= 0, x, scalar(x, float_of(op.alpha)) * x)


@kernel_for(g.EluOp)
def _elu(op: g.EluOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    return np.where(x > 0, x, scalar(x, float_of(op.alpha)) * np.expm1(x))


@kernel_for(g.HardSigmoidOp)
def _hard_sigmoid(op: g.HardSigmoidOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    y = scalar(x, float_of(op.alpha)) * x + scalar(x, float_of(op.beta))
    return np.clip(y, scalar(x, 0.0), scalar(x, 1.0))


# -- elementwise binary ------------------------------------------------------------


def _check_nonzero_divisor(op: Operation, y: np.ndarray) -> None:
    if np.any(y == 0):
        raise InterpreterError(f"{op.name}: integer division by zero")


def int_div(op: Operation, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    _check_nonzero_divisor(op, y)
    if np.issubdtype(np.result_type(x, y), np.unsignedinteger):
        return np.floor_divide(x, y)
    # x - fmod(x, y) is an exact multiple of y, so the floor division is exact
    return np.floor_divide(x - np.fmod(x, y), y)


def _int_pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if np.issubdtype(y.dtype, np.unsignedinteger):
        return np.power(x, y)
    x, y = np.broadcast_arrays(x, y)
    out = np.power(x, np.maximum(y, y.dtype.type(0)))
    neg = y < 0
    if np.any(neg):
        one = x.dtype.type(1)
        special = np.where(x == 1, one, np.where(x == -1, np.where(y % 2 == 0, one, -one), 0))
        out = np.where(neg, special, out).astype(x.dtype)
    return out


def _binary(op: Operation, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype != y.dtype:
        raise InterpreterError(f"{op.name}: operands have dtypes {x.dtype} and {y.dtype}")
    x, y = upcast(x), upcast(y)
    is_bool = x.dtype == np.bool_
    is_int = np.issubdtype(x.dtype, np.integer)
    match op:
        case g.AddOp() | g.SubOp() if is_bool:
            return np.logical_xor(x, y)
        case g.AddOp():
            return np.add(x, y)
        case g.SubOp():
            return np.subtract(x, y)
        case g.MulOp() if is_bool:
            return np.logical_and(x, y)
        case g.MulOp():
            return np.multiply(x, y)
        case g.DivOp() if is_bool:
            _check_nonzero_divisor(op, y)
            return x & y
        case g.DivOp() if is_int:
            return int_div(op, x, y)
        case g.DivOp():
            return np.divide(x, y)
        case g.PowOp() if is_bool:
            return x | ~y
        case g.PowOp() if is_int:
            return _int_pow(x, y)
        case g.PowOp():
            return np.power(x, y)
        case g.MaximumOp():
            return np.maximum(x, y)
        case g.MinimumOp():
            return np.minimum(x, y)
        case g.ModOp() if is_bool:
            _check_nonzero_divisor(op, y)
            return np.zeros(np.broadcast_shapes(x.shape, y.shape), dtype=np.bool_)
        case g.ModOp() if is_int:
            _check_nonzero_divisor(op, y)
            return np.mod(x, y)
        case g.ModOp():
            return np.mod(x, y)
        case g.EqualOp():
            return np.equal(x, y)
        case g.LessOp():
            return np.less(x, y)
        case g.LessEqualOp():
            return np.less_equal(x, y)
        case g.GreaterOp():
            return np.greater(x, y)
        case g.GreaterEqualOp():
            return np.greater_equal(x, y)
        case g.AndOp():
            return np.logical_and(x, y)
        case g.OrOp():
            return np.logical_or(x, y)
        case g.XorOp():
            return np.logical_xor(x, y)
        case g.BitwiseAndOp():
            return np.bitwise_and(x, y)
        case g.BitwiseOrOp():
            return np.bitwise_or(x, y)
        case g.BitwiseXorOp():
            return np.bitwise_xor(x, y)
        case g.ShiftLeftOp() | g.ShiftRightOp():
            return _shift(isinstance(op, g.ShiftLeftOp), x, y)
    raise InterpreterError(f"{op.name}: not a binary op")  # pragma: no cover


def _shift(left: bool, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x << y or x >> y (arithmetic for signed x); shifts by >= the bit width or < 0 give
    0 (or -1 for a negative signed x shifted right), not C's undefined behaviour."""
    x, y = np.broadcast_arrays(x, y)
    bits = x.dtype.itemsize * 8
    inside = (y >= 0) & (y < bits)
    amount = np.where(inside, y, 0).astype(x.dtype)
    shifted = np.left_shift(x, amount) if left else np.right_shift(x, amount)
    outside = np.zeros_like(x) if left or x.dtype.kind == "u" else np.where(x < 0, x.dtype.type(-1), x.dtype.type(0))
    return np.where(inside, shifted, outside)


_BINARY_OPS = (
    g.AddOp, g.SubOp, g.MulOp, g.DivOp, g.PowOp, g.MaximumOp, g.MinimumOp, g.ModOp,
    g.EqualOp, g.LessOp, g.LessEqualOp, g.GreaterOp, g.GreaterEqualOp,
    g.AndOp, g.OrOp, g.XorOp,
    g.BitwiseAndOp, g.BitwiseOrOp, g.BitwiseXorOp, g.ShiftLeftOp, g.ShiftRightOp,
)


@kernel_for(*_BINARY_OPS)
def _binary_kernel(op: Operation, xs: list[np.ndarray], env: Env) -> np.ndarray:
    return _binary(op, xs[0], xs[1])


@kernel_for(g.WhereOp)
def _where(op: g.WhereOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    c, x, y = xs
    return np.where(c.astype(np.bool_, copy=False), x, y)


_NARROW_FLOATS = tuple(np.dtype(getattr(ml_dtypes, n)) for n in (
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn"))
_NARROW_INTS = tuple(np.dtype(getattr(ml_dtypes, n)) for n in ("int4", "uint4", "int2", "uint2"))


def _widen_storage(x: np.ndarray) -> np.ndarray:
    """A storage-only value (8/4-bit floats, 4/2-bit integers) in the type its values are
    computed in: f32 or i64 (exact for every value of these types)."""
    if x.dtype in _NARROW_FLOATS:
        return x.astype(F32)
    if x.dtype in _NARROW_INTS:
        return x.astype(np.int64)
    return x


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """f32 -> f8E8M0FNU (a power of two 2^(e - 127), e = 0..254; 0xff is NaN): the
    exponent of |x| rounded by `round_mode` on the significand ("up": any fraction rounds
    up, "down": truncates, "nearest": half to even on the biased exponent); NaN, inf and
    (without `saturate`) exponents past 254 give NaN, with `saturate` 2^127; values below
    2^-127 give 2^-127."""
    bits = np.asarray(x, F32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.int64)
    fraction = bits & 0x7FFFFF
    if round_mode == "up":
        exponent = exponent + ((fraction > 0) & (exponent > 0) & (exponent < 0xFF))
    elif round_mode == "nearest":
        half = 0x400000
        up = (fraction > half) | ((fraction == half) & (exponent % 2 == 1))
        exponent = exponent + (up & (exponent > 0) & (exponent < 0xFF))
    special = ((bits >> 23) & 0xFF) == 0xFF
    over = exponent > 0xFE
    exponent = np.where(over, 0xFE if saturate else 0xFF, exponent)
    exponent = np.where(special, 0xFF, exponent)
    return exponent.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


@kernel_for(g.CastOp)
def _cast(op: g.CastOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = _widen_storage(xs[0])
    dt = out_dtype(op)
    if dt == np.dtype(ml_dtypes.float8_e8m0fnu):
        return _to_e8m0(upcast(x).astype(F32), bool_of(op.saturate), op.round_mode.data)
    if dt in _NARROW_FLOATS:
        x = upcast(x).astype(F32) if is_float_dtype(x.dtype) else x.astype(np.float64).astype(F32)
        if bool_of(op.saturate) and dt != np.dtype(ml_dtypes.float4_e2m1fn):
            info = ml_dtypes.finfo(dt)
            x = np.clip(x, F32.type(info.min), F32.type(info.max))
        return x.astype(dt)
    if dt in _NARROW_INTS:
        if is_float_dtype(x.dtype):
            # Out-of-range values are undefined in ONNX; its reference casts with ml_dtypes, so
            # this does too (ml_dtypes 0.6 wraps them, 0.7 gives 0 and warns).
            with np.errstate(invalid="ignore"):
                return np.trunc(upcast(x)).astype(dt)
        return x.astype(np.int64).astype(dt)
    if dt == np.bool_:
        return x != 0
    if is_float_dtype(x.dtype) and not is_float_dtype(dt):
        return np.trunc(upcast(x)).astype(dt)
    if x.dtype in LOW_PRECISION or dt in LOW_PRECISION:
        if x.dtype == np.bool_ or np.issubdtype(x.dtype, np.integer):
            # int -> bf16/f16: round the exact value once (via f64, exact up to 2^53)
            return x.astype(np.float64).astype(dt)
    return x.astype(dt)
