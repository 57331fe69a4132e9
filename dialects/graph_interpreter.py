"""Reference interpreter for the `graph` dialect: the golden model.

Every graph op is evaluated with vectorized numpy on `np.ndarray` values; the
semantics are exactly those stated in the op docstrings of
`infer.dialects.graph`. The interpreter never imports torch or onnx.

Public API
- `evaluate_op(op, inputs, weights=None)`: evaluate one graph op on operand
  arrays (constant folding, tests).
- `run_module(module, inputs, entry="main", weights=None)`: run a function of
  a module on the xDSL interpreter (`GraphFunctions` + xDSL's `FuncFunctions`
  for func.func / func.return / func.call).
- `graph.kernel` runs its body on its operands (in `run_module` with the xDSL
  interpreter's `run_ssacfg_region`, in `evaluate_op` op by op); `graph.yield`
  returns its operands. A kernel computes exactly what its ops compute unfused.
- `ConstantCache`: values that depend only on weights and constants, kept
  across runs (`run_module(..., constant_cache=)`), e.g. by a text generator.
- `InterpreterError`: bad inputs, out-of-range gather indices, integer division
  by zero, missing weights, ...

Numerics
- Results always have exactly the element type (numpy dtype from
  `infer.dialects.dtypes.to_numpy_dtype`) and the static shape of the op's
  result type.
- float16 and bfloat16 ops are computed in float32 and the result is rounded
  (round-to-nearest-even) back to the result type once per op. float32 ops are
  computed in float32 (matmul, conv, norms, ...), float64 in float64. `erf`
  (and exact `gelu`) is evaluated in float64 with W. J. Cody's rational
  approximations (|error| < 1e-15; `infer.target.special`, which the vector unit's
  `erf` / `gelu_erf` instructions share) and rounded to the compute type.
- Integer arithmetic wraps around (two's complement); `div` truncates toward
  zero, `mod` is floor modulo (sign of the divisor); an integer division or
  modulo by zero is an `InterpreterError`. An integer `pow` with a negative
  exponent is the truncated real result (1 for base 1, +-1 for base -1, else 0).
  Integer `reduce_mean` truncates toward zero.
- i1 arithmetic is modulo 2 (add/sub = xor, mul = and); neg/abs/relu of i1 are
  the identity.
- Float -> int `cast` truncates toward zero (NaN / out-of-range values are
  unspecified); anything -> i1 is `x != 0`; int -> int wraps. f64 -> bf16 rounds
  via f32 (as PyTorch and ml_dtypes do); every other float cast rounds once.
- The storage-only types (8- and 4-bit floats, 4- and 2-bit integers, as ml_dtypes arrays)
  are cast as `graph.cast` states: to an 8-bit float with `saturate`, clipped to its finite
  range first; f8E8M0FNU by the exponent rounded per `round_mode`.
- Bitwise ops work on the two's complement bits; shifts by >= the bit width (or a
  negative amount) give 0 (-1 for a negative signed value shifted right).
- `clip` of an integer tensor uses ceil(min) and floor(max); integer
  `avg_pool2d` is an `InterpreterError`.
- `attention`: a query row whose keys are all masked out (by the mask and/or
  causality) produces zeros (as PyTorch's math SDPA backend does), not NaN.
- Floating-point exceptions (overflow, division by zero, invalid) produce IEEE
  results (inf / NaN) silently.
- Quantization ops and integer kernels compute what `infer.dialects.linear_quant`
  states (ONNX QuantizeLinear/DequantizeLinear, the NPU's requant, exact integer
  accumulation saturated to int32; docs/quantization.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import as_strided
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DictionaryAttr,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    ReturnedValues,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.ir import Operation
from xdsl.traits import SymbolTable

from infer.dialects import graph as g
from infer.dialects import linear_quant as lq
from infer.dialects.block_quant import dequantize_blocks
from infer.dialects.dtypes import dense_to_numpy, element_type_name, format_shape, to_numpy_dtype
from infer.dialects.weight_refs import stored_weight, weight_store_for
from infer.dialects.weights import WeightStore, WeightStoreError
from infer.target.special import erf

__all__ = [
    "ConstantCache",
    "InterpreterError",
    "GraphFunctions",
    "evaluate_op",
    "run_module",
    "erf",
    "INPUT_NAME_ATTR",
]

INPUT_NAME_ATTR = "graph.name"
"""Function argument attribute naming an input for `run_module(inputs={...})`."""


class InterpreterError(Exception):
    """The graph interpreter cannot evaluate a program on the given inputs."""


# --------------------------------------------------------------------------
# dtype helpers
# --------------------------------------------------------------------------

_LOW_PRECISION = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
_F32 = np.dtype(np.float32)


def _is_float_dtype(dt: np.dtype) -> bool:
    return dt in _LOW_PRECISION or np.issubdtype(dt, np.floating)


def _upcast(x: np.ndarray) -> np.ndarray:
    """Upcast f16/bf16 to the f32 compute type; other dtypes unchanged."""
    return x.astype(_F32) if x.dtype in _LOW_PRECISION else x


def _result_type(op: Operation, i: int = 0) -> TensorType:
    t = op.results[i].type
    if not isinstance(t, TensorType):
        raise InterpreterError(f"{op.name}: result #{i} is not a tensor (type {t})")
    return t


def _out_dtype(op: Operation, i: int = 0) -> np.dtype:
    t = _result_type(op, i)
    try:
        return to_numpy_dtype(t.get_element_type())
    except ValueError as e:
        raise InterpreterError(f"{op.name}: {e}") from None


def _shape_matches(actual: Sequence[int], declared: Sequence[int]) -> bool:
    return len(actual) == len(declared) and all(d < 0 or d == a for a, d in zip(actual, declared))


def _finish(op: Operation, values: Sequence[Any]) -> list[np.ndarray]:
    """Round each value to its result element type and check its shape."""
    if len(values) != len(op.results):
        raise InterpreterError(
            f"{op.name}: produced {len(values)} values for {len(op.results)} results"
        )
    out: list[np.ndarray] = []
    for i, v in enumerate(values):
        dt = _out_dtype(op, i)
        arr = np.asarray(v)
        if arr.dtype != dt:
            if arr.dtype in _LOW_PRECISION and not _is_float_dtype(dt):
                arr = arr.astype(_F32)
            arr = arr.astype(dt)
        declared = _result_type(op, i).get_shape()
        if not _shape_matches(arr.shape, declared):
            raise InterpreterError(
                f"{op.name}: result #{i} evaluates to shape {format_shape(arr.shape)} but its type "
                f"declares {format_shape(declared)}"
            )
        out.append(arr)
    return out


def _scalar(x: np.ndarray, value: float) -> Any:
    """A float attribute as a scalar of x's dtype (so f32 math stays f32)."""
    return x.dtype.type(value)


def _float_of(attr: Any) -> float:
    return float(attr.value.data)


def _int_of(attr: Any) -> int:
    return int(attr.value.data)


def _bool_of(attr: Any) -> bool:
    return bool(attr.value.data)


# --------------------------------------------------------------------------
# Kernels: op class -> function(op, inputs, env) -> value or list of values
# --------------------------------------------------------------------------


class ConstantCache:
    """Values that depend only on weights and constants, kept across runs of one
    unchanged module (`run_module(..., constant_cache=cache)`): weights read from
    the store, dequantized weights, casts of weights, ... Ops that compute the
    same op on the same weights share one value, also across the module's
    functions (the dequantization of a weight in @prefill and in @decode)."""

    def __init__(self) -> None:
        self._keys: dict[Operation, tuple] = {}
        self._values: dict[tuple, tuple[np.ndarray, ...]] = {}

    def key(self, op: Operation) -> tuple | None:
        """The op's identity by value, or None if it depends on a function argument.
        Ops run in order, so an op is a function of weights and constants alone
        exactly when every operand comes from an op that already has a key."""
        found = self._keys.get(op)
        if found is not None:
            return found or None  # () marks an op that depends on an argument
        if isinstance(op, g.WeightOp):
            key: tuple = ("weight", op.weight_key, op.output.type)
        elif isinstance(op, g.ConstantOp):
            key = ("constant", op)
        else:
            operands = []
            for v in op.operands:
                owner_key = self._keys.get(v.owner) if isinstance(v.owner, Operation) else None
                if not owner_key:
                    self._keys[op] = ()
                    return None
                operands.append((owner_key, v.index))
            key = (op.name, tuple(op.properties.items()), tuple(operands), tuple(r.type for r in op.results))
        self._keys[op] = key
        return key

    def get(self, key: tuple) -> tuple[np.ndarray, ...] | None:
        return self._values.get(key)

    def put(self, key: tuple, values: tuple[np.ndarray, ...]) -> None:
        self._values[key] = values

    def __contains__(self, op: Operation) -> bool:
        key = self._keys.get(op)
        return bool(key) and key in self._values

    def __len__(self) -> int:
        return len(self._values)


class _Env:
    """What a kernel may need beyond its operands (the weight store), and the
    optional cache of values that depend only on weights and constants."""

    def __init__(self, weights: WeightStore | None, module: ModuleOp | None,
                 constant_cache: ConstantCache | None = None):
        self._weights = weights
        self._module = module
        self.constant_cache = constant_cache

    def weights(self, op: Operation) -> WeightStore:
        if self._weights is None:
            try:
                self._weights = weight_store_for(op, self._module)
            except WeightStoreError as e:
                raise InterpreterError(f"{op.name}: {e}") from None
        return self._weights


Kernel = Callable[[Any, list[np.ndarray], _Env], Any]
_KERNELS: dict[type[Operation], Kernel] = {}


def _kernel(*op_types: type[Operation]) -> Callable[[Kernel], Kernel]:
    def register(fn: Kernel) -> Kernel:
        for t in op_types:
            _KERNELS[t] = fn
        return fn

    return register


# -- constants and weights ---------------------------------------------------


@_kernel(g.ConstantOp)
def _constant(op: g.ConstantOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    try:
        return dense_to_numpy(op.value)
    except ValueError as e:
        raise InterpreterError(str(e)) from None


@_kernel(g.WeightOp)
def _weight(op: g.WeightOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    try:
        return stored_weight(op, env.weights(op))
    except (WeightStoreError, ValueError) as e:
        raise InterpreterError(f"{op.name} @{op.weight_key}: {e}") from None


@_kernel(g.DequantizeBlocksOp)
def _dequantize_blocks(op: g.DequantizeBlocksOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    # float32 values as llama.cpp computes them, rounded once to an f16/bf16 result
    # (here, inside the kernel's IEEE error state: a large scale overflows f16 to inf)
    return dequantize_blocks(xs[0], op.format_name).astype(_out_dtype(op))


# -- elementwise unary -----------------------------------------------------------


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    one = _scalar(x, 1.0)
    return np.where(x >= 0, one / (one + e), e / (one + e))


def _erf_like(x: np.ndarray) -> np.ndarray:
    return erf(x).astype(x.dtype)


def _gelu_exact(x: np.ndarray) -> np.ndarray:
    e = erf(x.astype(np.float64) * (1.0 / math.sqrt(2.0))).astype(x.dtype)
    half, one = _scalar(x, 0.5), _scalar(x, 1.0)
    return half * x * (one + e)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = _scalar(x, math.sqrt(2.0 / math.pi))
    k = _scalar(x, 0.044715)
    half, one = _scalar(x, 0.5), _scalar(x, 1.0)
    return half * x * (one + np.tanh(c * (x + k * x * x * x)))


_FLOAT_UNARY: dict[type[Operation], Callable[[np.ndarray], np.ndarray]] = {
    g.ExpOp: np.exp,
    g.LogOp: np.log,
    g.SqrtOp: np.sqrt,
    g.RsqrtOp: lambda x: _scalar(x, 1.0) / np.sqrt(x),
    g.ReciprocalOp: lambda x: _scalar(x, 1.0) / x,
    g.TanhOp: np.tanh,
    g.SigmoidOp: _sigmoid,
    g.ErfOp: _erf_like,
    g.SinOp: np.sin,
    g.CosOp: np.cos,
    g.FloorOp: np.floor,
    g.CeilOp: np.ceil,
    g.RoundOp: np.rint,
    g.SiluOp: lambda x: x * _sigmoid(x),
    g.SoftplusOp: lambda x: np.logaddexp(_scalar(x, 0.0), x),
}


def _float_unary(fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    def kernel(op: Operation, xs: list[np.ndarray], env: _Env) -> np.ndarray:
        x = xs[0]
        if not _is_float_dtype(x.dtype):
            raise InterpreterError(f"{op.name}: needs a floating-point operand, got {x.dtype}")
        return fn(_upcast(x))

    return kernel


for _cls, _fn in _FLOAT_UNARY.items():
    _KERNELS[_cls] = _float_unary(_fn)


@_kernel(g.NegOp)
def _neg(op: Operation, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = xs[0]
    return x if x.dtype == np.bool_ else np.negative(_upcast(x))


@_kernel(g.AbsOp)
def _abs(op: Operation, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = xs[0]
    return x if x.dtype == np.bool_ else np.abs(_upcast(x))


@_kernel(g.SignOp)
def _sign(op: Operation, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = xs[0]
    return x if x.dtype == np.bool_ else np.sign(_upcast(x))


@_kernel(g.ReluOp)
def _relu(op: Operation, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    if x.dtype == np.bool_:
        return x
    return np.maximum(x, x.dtype.type(0))


@_kernel(g.NotOp)
def _not(op: Operation, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = xs[0]
    return np.logical_not(x) if x.dtype == np.bool_ else (x == 0)


@_kernel(g.BitwiseNotOp)
def _bitwise_not(op: Operation, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    return np.invert(xs[0])


@_kernel(g.GeluOp)
def _gelu(op: g.GeluOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    return _gelu_tanh(x) if op.approximate.data == "tanh" else _gelu_exact(x)


@_kernel(g.ClipOp)
def _clip(op: g.ClipOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    lo = _float_of(op.min) if op.min is not None else None
    hi = _float_of(op.max) if op.max is not None else None
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


@_kernel(g.LeakyReluOp)
def _leaky_relu(op: g.LeakyReluOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    return np.where(x >= 0, x, _scalar(x, _float_of(op.alpha)) * x)


@_kernel(g.EluOp)
def _elu(op: g.EluOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    return np.where(x > 0, x, _scalar(x, _float_of(op.alpha)) * np.expm1(x))


@_kernel(g.HardSigmoidOp)
def _hard_sigmoid(op: g.HardSigmoidOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    y = _scalar(x, _float_of(op.alpha)) * x + _scalar(x, _float_of(op.beta))
    return np.clip(y, _scalar(x, 0.0), _scalar(x, 1.0))


# -- elementwise binary ------------------------------------------------------------


def _check_nonzero_divisor(op: Operation, y: np.ndarray) -> None:
    if np.any(y == 0):
        raise InterpreterError(f"{op.name}: integer division by zero")


def _int_div(op: Operation, x: np.ndarray, y: np.ndarray) -> np.ndarray:
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
    x, y = _upcast(x), _upcast(y)
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
            return _int_div(op, x, y)
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


@_kernel(*_BINARY_OPS)
def _binary_kernel(op: Operation, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    return _binary(op, xs[0], xs[1])


@_kernel(g.WhereOp)
def _where(op: g.WhereOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    c, x, y = xs
    return np.where(c.astype(np.bool_, copy=False), x, y)


_NARROW_FLOATS = tuple(np.dtype(getattr(ml_dtypes, n)) for n in (
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn"))
_NARROW_INTS = tuple(np.dtype(getattr(ml_dtypes, n)) for n in ("int4", "uint4", "int2", "uint2"))


def _widen_storage(x: np.ndarray) -> np.ndarray:
    """A storage-only value (8/4-bit floats, 4/2-bit integers) in the type its values are
    computed in: f32 or i64 (exact for every value of these types)."""
    if x.dtype in _NARROW_FLOATS:
        return x.astype(_F32)
    if x.dtype in _NARROW_INTS:
        return x.astype(np.int64)
    return x


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """f32 -> f8E8M0FNU (a power of two 2^(e - 127), e = 0..254; 0xff is NaN): the
    exponent of |x| rounded by `round_mode` on the significand ("up": any fraction rounds
    up, "down": truncates, "nearest": half to even on the biased exponent); NaN, inf and
    (without `saturate`) exponents past 254 give NaN, with `saturate` 2^127; values below
    2^-127 give 2^-127."""
    bits = np.asarray(x, _F32).view(np.uint32)
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


@_kernel(g.CastOp)
def _cast(op: g.CastOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _widen_storage(xs[0])
    dt = _out_dtype(op)
    if dt == np.dtype(ml_dtypes.float8_e8m0fnu):
        return _to_e8m0(_upcast(x).astype(_F32), _bool_of(op.saturate), op.round_mode.data)
    if dt in _NARROW_FLOATS:
        x = _upcast(x).astype(_F32) if _is_float_dtype(x.dtype) else x.astype(np.float64).astype(_F32)
        if _bool_of(op.saturate) and dt != np.dtype(ml_dtypes.float4_e2m1fn):
            info = ml_dtypes.finfo(dt)
            x = np.clip(x, _F32.type(info.min), _F32.type(info.max))
        return x.astype(dt)
    if dt in _NARROW_INTS:
        if _is_float_dtype(x.dtype):
            # Out-of-range values are undefined in ONNX; its reference casts with ml_dtypes, so
            # this does too (ml_dtypes 0.6 wraps them, 0.7 gives 0 and warns).
            with np.errstate(invalid="ignore"):
                return np.trunc(_upcast(x)).astype(dt)
        return x.astype(np.int64).astype(dt)
    if dt == np.bool_:
        return x != 0
    if _is_float_dtype(x.dtype) and not _is_float_dtype(dt):
        return np.trunc(_upcast(x)).astype(dt)
    if x.dtype in _LOW_PRECISION or dt in _LOW_PRECISION:
        if x.dtype == np.bool_ or np.issubdtype(x.dtype, np.integer):
            # int -> bf16/f16: round the exact value once (via f64, exact up to 2^53)
            return x.astype(np.float64).astype(dt)
    return x.astype(dt)


# -- linear algebra ------------------------------------------------------------------


@_kernel(g.MatmulOp)
def _matmul(op: g.MatmulOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    a, b = _upcast(xs[0]), _upcast(xs[1])
    if _bool_of(op.transpose_a):
        a = np.swapaxes(a, -1, -2)
    if _bool_of(op.transpose_b):
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


@_kernel(g.LinearOp)
def _linear(op: g.LinearOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x, w = _upcast(xs[0]), _upcast(xs[1])
    # one 2-D product: numpy runs a stacked [..., S, K] @ [K, N] without BLAS
    # (100x slower for the one-row products of a decode step)
    y = np.matmul(x.reshape(-1, x.shape[-1]), w.T).reshape(*x.shape[:-1], w.shape[0])
    if len(xs) > 2:
        y = y + _upcast(xs[2])
    return y


# -- convolution and pooling -------------------------------------------------------------


def _windows(
    x: np.ndarray, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int],
    out_hw: Sequence[int],
) -> np.ndarray:
    """View [N, C, OH, OW, KH, KW] of the (already padded) NCHW array x."""
    n, c, _, _ = x.shape
    sn, sc, sh, sw = x.strides
    return as_strided(
        x,
        shape=(n, c, out_hw[0], out_hw[1], kernel[0], kernel[1]),
        strides=(sn, sc, sh * stride[0], sw * stride[1], sh * dilation[0], sw * dilation[1]),
        writeable=False,
    )


def _window_attrs(op: Any) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    return g.i64_values(op.stride), g.i64_values(op.padding), g.i64_values(op.dilation)


@_kernel(g.Conv2dOp)
def _conv2d(op: g.Conv2dOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x, w = _upcast(xs[0]), _upcast(xs[1])
    stride, pad, dil = _window_attrs(op)
    groups = _int_of(op.groups)
    n, c, _, _ = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    oh = (xp.shape[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    win = _windows(xp, (kh, kw), stride, dil, (oh, ow))  # N C OH OW KH KW
    og = o // groups
    win = win.reshape(n, groups, cg, oh, ow, kh, kw)
    # columns [G, N*OH*OW, Cg*KH*KW] (one copy), weights [G, Cg*KH*KW, Og]
    cols = win.transpose(1, 0, 3, 4, 2, 5, 6).reshape(groups, n * oh * ow, cg * kh * kw)
    wm = w.reshape(groups, og, cg * kh * kw).transpose(0, 2, 1)
    y = np.matmul(cols, wm)  # G, N*OH*OW, Og
    y = y.reshape(groups, n, oh, ow, og).transpose(1, 0, 4, 2, 3).reshape(n, o, oh, ow)
    if len(xs) > 2:
        y = y + _upcast(xs[2]).reshape(1, o, 1, 1)
    return np.ascontiguousarray(y)


def _pool_geometry(op: Any, h: int, w: int) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Output size and the padding [t, l, b, r] that makes every window lie in
    the padded array (ceil mode can need extra bottom/right padding)."""
    kernel = g.i64_values(op.kernel)
    stride, pad, dil = _window_attrs(op)
    ceil = _bool_of(op.ceil_mode)
    out = tuple(
        g._window_out(op.name, size, kernel[i], stride[i], pad[i], pad[i + 2], dil[i], ceil)
        for i, size in enumerate((h, w))
    )
    full = []
    for i, size in enumerate((h, w)):
        needed = (out[i] - 1) * stride[i] + dil[i] * (kernel[i] - 1) + 1
        full.append(max(pad[i + 2], needed - size - pad[i]))
    return (out[0], out[1]), (pad[0], pad[1], full[0], full[1])


@_kernel(g.MaxPool2dOp)
def _max_pool(op: g.MaxPool2dOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    _, _, h, w = x.shape
    out, (t, l, b, r) = _pool_geometry(op, h, w)
    if _is_float_dtype(x.dtype):
        low = -np.inf
    elif x.dtype == np.bool_:
        low = False
    else:
        low = np.iinfo(x.dtype).min
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=low)
    stride, _, dil = _window_attrs(op)
    win = _windows(xp, g.i64_values(op.kernel), stride, dil, out)
    return win.max(axis=(4, 5))


def _avg_divisor(size: int, out: int, k: int, s: int, pad_lo: int, pad_hi: int, include_pad: bool) -> np.ndarray:
    start = np.arange(out) * s - pad_lo
    end = np.minimum(start + k, size + pad_hi)
    if include_pad:
        return (end - start).astype(np.int64)
    return (np.minimum(end, size) - np.maximum(start, 0)).astype(np.int64)


@_kernel(g.AvgPool2dOp)
def _avg_pool(op: g.AvgPool2dOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    if not _is_float_dtype(x.dtype):
        raise InterpreterError(f"{op.name}: average pooling needs a floating-point input")
    _, _, h, w = x.shape
    out, (t, l, b, r) = _pool_geometry(op, h, w)
    kernel = g.i64_values(op.kernel)
    stride, pad, dil = _window_attrs(op)
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    win = _windows(xp, kernel, stride, dil, out)
    total = win.sum(axis=(4, 5), dtype=x.dtype)
    inc = _bool_of(op.count_include_pad)
    dh = _avg_divisor(h, out[0], kernel[0], stride[0], pad[0], pad[2], inc)
    dw = _avg_divisor(w, out[1], kernel[1], stride[1], pad[1], pad[3], inc)
    div = (dh[:, None] * dw[None, :]).astype(x.dtype)
    return total / div


@_kernel(g.GlobalAvgPoolOp)
def _global_avg(op: Operation, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    axes = tuple(range(2, x.ndim))
    if np.issubdtype(x.dtype, np.integer) or x.dtype == np.bool_:
        return _int_mean(op, x, axes)
    return np.mean(x, axis=axes, keepdims=True, dtype=x.dtype)


@_kernel(g.GlobalMaxPoolOp)
def _global_max(op: Operation, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    return np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


# -- normalization ---------------------------------------------------------------------


@_kernel(g.BatchNormOp)
def _batch_norm(op: g.BatchNormOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x, scale, bias, mean, var = (_upcast(a) for a in xs)
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    eps = _scalar(x, _float_of(op.epsilon))
    inv = scale / np.sqrt(var + eps)
    return (x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)


@_kernel(g.LayerNormOp)
def _layer_norm(op: g.LayerNormOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    axis = g.normalize_axis(op.name, _int_of(op.axis), x.ndim)
    axes = tuple(range(axis, x.ndim))
    mean = np.mean(x, axis=axes, keepdims=True, dtype=x.dtype)
    d = x - mean
    var = np.mean(d * d, axis=axes, keepdims=True, dtype=x.dtype)
    y = d / np.sqrt(var + _scalar(x, _float_of(op.epsilon))) * _upcast(xs[1])
    if len(xs) > 2:
        y = y + _upcast(xs[2])
    return y


@_kernel(g.RmsNormOp)
def _rms_norm(op: g.RmsNormOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    axis = g.normalize_axis(op.name, _int_of(op.axis), x.ndim)
    axes = tuple(range(axis, x.ndim))
    ms = np.mean(x * x, axis=axes, keepdims=True, dtype=x.dtype)
    return x / np.sqrt(ms + _scalar(x, _float_of(op.epsilon))) * _upcast(xs[1])


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, x.dtype.type(0))
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


@_kernel(g.SoftmaxOp)
def _softmax_kernel(op: g.SoftmaxOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    return _softmax(x, g.normalize_axis(op.name, _int_of(op.axis), x.ndim))


@_kernel(g.LogSoftmaxOp)
def _log_softmax(op: g.LogSoftmaxOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    axis = g.normalize_axis(op.name, _int_of(op.axis), x.ndim)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, x.dtype.type(0))
    s = x - m
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


# -- transformer ops -------------------------------------------------------------------------


@_kernel(g.AttentionOp)
def _attention(op: g.AttentionOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    q, k, v = _upcast(xs[0]), _upcast(xs[1]), _upcast(xs[2])
    b, hq, sq, d = q.shape
    _, hkv, skv, _ = k.shape
    dv = v.shape[-1]
    group = hq // hkv
    scale = _float_of(op.scale) if op.scale is not None else 1.0 / math.sqrt(d)
    # query head h reads kv head h // group: fold the group into the rows so
    # every kv head does one plain matmul ([G*Sq, D] @ [D, Skv])
    qg = q.reshape(b, hkv, group * sq, d)
    scores = np.matmul(qg, np.swapaxes(k, -1, -2)) * _scalar(q, scale)
    scores = scores.reshape(b, hq, sq, skv)
    allowed = None
    if len(xs) > 3:
        mask = xs[3]
        if mask.dtype == np.bool_:
            allowed = np.broadcast_to(mask, scores.shape)
        else:
            scores = scores + _upcast(mask)
    if _bool_of(op.causal):
        causal = np.arange(skv)[None, :] <= np.arange(sq)[:, None] + (skv - sq)
        allowed = causal if allowed is None else (allowed & causal)
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    m = np.max(scores, axis=-1, keepdims=True)
    dead = ~np.isfinite(m) & (m < 0)  # every key masked out (or -inf scores)
    m = np.where(dead, q.dtype.type(0), m)
    e = np.exp(scores - m)
    s = np.sum(e, axis=-1, keepdims=True)
    p = np.where(dead, q.dtype.type(0), e / np.where(dead, q.dtype.type(1), s))
    out = np.matmul(p.reshape(b, hkv, group * sq, skv), v)
    return out.reshape(b, hq, sq, dv)


@_kernel(g.RotaryOp)
def _rotary(op: g.RotaryOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x, cos, sin = _upcast(xs[0]), _upcast(xs[1]), _upcast(xs[2])
    r = cos.shape[-1]
    xr, rest = x[..., :r], x[..., r:]
    if _bool_of(op.interleaved):
        rot = np.empty_like(xr)
        rot[..., 0::2] = -xr[..., 1::2]
        rot[..., 1::2] = xr[..., 0::2]
    else:
        half = r // 2
        rot = np.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
    y = xr * cos + rot * sin
    y = np.broadcast_to(y, (*x.shape[:-1], r))
    return np.concatenate([y, rest], axis=-1) if rest.shape[-1] else y


@_kernel(g.GatherOp)
def _gather(op: g.GatherOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x, idx = xs
    axis = g.normalize_axis(op.name, _int_of(op.axis), x.ndim)
    dim = x.shape[axis]
    idx = idx.astype(np.int64) if idx.dtype != np.uint64 else idx
    if idx.size:
        lo, hi = idx.min(), idx.max()
        if lo < -dim or hi >= dim:
            bad = idx[(idx < -dim) | (idx >= dim)].ravel()[0]
            raise InterpreterError(
                f"{op.name}: index {int(bad)} is out of range for axis {axis} of size {dim} "
                f"(valid: {-dim} .. {dim - 1})"
            )
    if np.issubdtype(idx.dtype, np.signedinteger):
        idx = np.where(idx < 0, idx + dim, idx)
    return np.take(x, idx, axis=axis)


@_kernel(g.KvCacheWriteOp)
def _kv_cache_write(op: g.KvCacheWriteOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    cache, rows, slots = xs
    size = cache.shape[0]
    bad = (slots < 0) | (slots >= size)
    if bad.any():
        raise InterpreterError(
            f"{op.name}: slot {int(slots[bad][0])} is out of range for a cache of {size} rows "
            f"(valid: 0 .. {size - 1})"
        )
    out = cache.copy()
    out[slots.astype(np.int64)] = rows
    return out


def paged_token_rows(block_table: np.ndarray, n: int, block_size: int) -> np.ndarray:
    """The pool rows of tokens 0 .. n-1 of one sequence (block_table[t // BS] * BS + t % BS)."""
    t = np.arange(n, dtype=np.int64)
    return block_table[t // block_size].astype(np.int64) * block_size + t % block_size


@_kernel(g.PagedAttentionOp)
def _paged_attention(op: g.PagedAttentionOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    q, k_cache, v_cache = _upcast(xs[0]), _upcast(xs[1]), _upcast(xs[2])
    tables, lens = xs[3], xs[4]
    b, hq, sq, d, hkv, dv, mb = op.geometry()
    bs = op.block_size_value
    blocks = k_cache.shape[0] // bs
    group = hq // hkv
    scale = q.dtype.type(_float_of(op.scale) if op.scale is not None else 1.0 / math.sqrt(d))
    out = np.zeros((b, hq, sq, dv), dtype=q.dtype)
    for seq in range(b):
        n = int(lens[seq])
        if n < 0 or n > mb * bs:
            raise InterpreterError(
                f"{op.name}: context length {n} of sequence {seq} is outside 0 .. {mb * bs} "
                f"({mb} blocks of {bs} tokens)"
            )
        used = tables[seq, : -(-n // bs)]
        if ((used < 0) | (used >= blocks)).any():
            bad = int(used[(used < 0) | (used >= blocks)][0])
            raise InterpreterError(
                f"{op.name}: sequence {seq} uses block {bad}, outside the pool's 0 .. {blocks - 1}"
            )
        rows = paged_token_rows(tables[seq], n, bs)
        k = k_cache[rows].reshape(n, hkv, d).transpose(1, 0, 2)  # [Hkv, n, D]
        v = v_cache[rows].reshape(n, hkv, dv).transpose(1, 0, 2)
        qg = q[seq].reshape(hkv, group * sq, d)
        scores = (np.matmul(qg, np.swapaxes(k, -1, -2)) * scale).reshape(hkv, group, sq, n)
        position = n - sq + np.arange(sq)
        allowed = np.arange(n)[None, :] <= position[:, None]  # [Sq, n]
        scores = np.where(allowed, scores, -np.inf)
        live = position >= 0  # a query row with at least one key
        m = np.max(scores, axis=-1, keepdims=True, initial=-np.inf)
        m = np.where(live[:, None], m, q.dtype.type(0))
        e = np.exp(scores - m)
        p = e / np.where(live[:, None], np.sum(e, axis=-1, keepdims=True), q.dtype.type(1))
        o = np.matmul(p.reshape(hkv, group * sq, n), v).reshape(hq, sq, dv)
        out[seq] = np.where(live[:, None], o, q.dtype.type(0))
    return out


# -- structure ------------------------------------------------------------------------------------


@_kernel(g.ReshapeOp)
def _reshape(op: g.ReshapeOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    shape = _result_type(op).get_shape()
    if math.prod(shape) != xs[0].size:
        raise InterpreterError(
            f"{op.name}: cannot reshape {format_shape(xs[0].shape)} ({xs[0].size} elements) to {format_shape(shape)}"
        )
    return xs[0].reshape(shape)


@_kernel(g.TransposeOp)
def _transpose(op: g.TransposeOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(xs[0], g.i64_values(op.perm)))


@_kernel(g.ConcatOp)
def _concat(op: g.ConcatOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    axis = g.normalize_axis(op.name, _int_of(op.axis), xs[0].ndim)
    return np.concatenate(xs, axis=axis)


@_kernel(g.SliceOp)
def _slice(op: g.SliceOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    index = tuple(
        slice(s, e if e >= 0 else None, st)
        for s, e, st in zip(g.i64_values(op.starts), g.i64_values(op.ends), g.i64_values(op.steps), strict=True)
    )
    return np.ascontiguousarray(xs[0][index])


@_kernel(g.BroadcastOp)
def _broadcast(op: g.BroadcastOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    shape = _result_type(op).get_shape()
    try:
        return np.broadcast_to(xs[0], shape)
    except ValueError:
        raise InterpreterError(f"{op.name}: cannot broadcast {format_shape(xs[0].shape)} to {format_shape(shape)}") from None


@_kernel(g.PadOp)
def _pad(op: g.PadOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = xs[0]
    pads = g.i64_values(op.pads)
    n = x.ndim
    value = _float_of(op.value)
    if x.dtype == np.bool_:
        fill: Any = value != 0
    elif _is_float_dtype(x.dtype):
        fill = x.dtype.type(value)
    else:
        fill = int(value)
    return np.pad(x, [(pads[i], pads[i + n]) for i in range(n)], constant_values=fill)


# -- reductions --------------------------------------------------------------------------------------


def _reduce_axes(op: g.ReduceOp) -> tuple[int, ...]:
    return op.reduced_axes()


def _int_mean(op: Operation, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    count = math.prod(x.shape[a] for a in axes)
    if count == 0:
        raise InterpreterError(f"{op.name}: mean over zero elements")
    s = np.sum(x, axis=axes, keepdims=True, dtype=np.int64 if x.dtype != np.uint64 else np.uint64)
    q = _int_div(op, s, np.asarray(count, dtype=s.dtype))
    return q


@_kernel(g.ReduceSumOp, g.ReduceMeanOp, g.ReduceMaxOp, g.ReduceMinOp, g.ReduceProdOp)
def _reduce(op: g.ReduceOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    axes = _reduce_axes(op)
    keep = _bool_of(op.keepdims)
    is_int = x.dtype == np.bool_ or np.issubdtype(x.dtype, np.integer)
    acc = x.dtype
    try:
        match op:
            case g.ReduceSumOp():
                y = np.sum(x, axis=axes, keepdims=True, dtype=acc)
            case g.ReduceProdOp():
                y = np.prod(x, axis=axes, keepdims=True, dtype=acc)
            case g.ReduceMaxOp():
                y = np.max(x, axis=axes, keepdims=True)
            case g.ReduceMinOp():
                y = np.min(x, axis=axes, keepdims=True)
            case g.ReduceMeanOp() if is_int:
                y = _int_mean(op, x, axes)
            case _:
                y = np.mean(x, axis=axes, keepdims=True, dtype=x.dtype)
    except ValueError as e:  # max/min over an empty axis
        raise InterpreterError(f"{op.name}: {e}") from None
    if not keep:
        y = y.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes))
    return y


@_kernel(g.ArgmaxOp, g.ArgminOp)
def _arg_reduce(op: g.ArgReduceOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    x = _upcast(xs[0])
    (axis,) = _reduce_axes(op)
    if x.shape[axis] == 0:
        raise InterpreterError(f"{op.name}: arg-reduction over an empty axis")
    fn = np.argmax if isinstance(op, g.ArgmaxOp) else np.argmin
    return fn(x, axis=axis, keepdims=_bool_of(op.keepdims)).astype(np.int64)


# -- quantization (numerics: infer.dialects.linear_quant) --------------------------------------------


def _opt_axis(op: Any) -> int | None:
    """The normalized `axis` of a quantization op, None when per tensor."""
    if op.axis is None:
        return None
    return _int_of(op.axis) % max(len(_result_type(op).get_shape()), 1)


@_kernel(g.QuantizeLinearOp)
def _quantize_linear(op: g.QuantizeLinearOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    zero_point = xs[2] if len(xs) > 2 else None
    return lq.quantize_linear(xs[0], xs[1], zero_point, _opt_axis(op), _out_dtype(op))


@_kernel(g.DequantizeLinearOp)
def _dequantize_linear(op: g.DequantizeLinearOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    zero_point = xs[2] if len(xs) > 2 else None
    return lq.dequantize_linear(xs[0], xs[1], zero_point, _opt_axis(op), _out_dtype(op))


@_kernel(g.RequantizeOp)
def _requantize(op: g.RequantizeOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    return lq.requantize(xs[0], xs[1], _int_of(op.zero_point), _opt_axis(op), _out_dtype(op))


@_kernel(g.Conv2dIntegerOp)
def _conv2d_integer(op: g.Conv2dIntegerOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    stride, pad, dil = _window_attrs(op)
    bias = xs[2] if len(xs) > 2 else None
    return lq.conv2d_integer(xs[0], xs[1], bias, _int_of(op.input_zero_point), _int_of(op.weight_zero_point),
                             stride, pad, dil, _int_of(op.groups))


@_kernel(g.LinearIntegerOp)
def _linear_integer(op: g.LinearIntegerOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    bias = xs[2] if len(xs) > 2 else None
    return lq.linear_integer(xs[0], xs[1], bias, _int_of(op.input_zero_point), _int_of(op.weight_zero_point))


@_kernel(g.MatmulIntegerOp)
def _matmul_integer(op: g.MatmulIntegerOp, xs: list[np.ndarray], env: _Env) -> np.ndarray:
    return lq.matmul_integer(xs[0], xs[1], _int_of(op.lhs_zero_point), _int_of(op.rhs_zero_point),
                             _bool_of(op.transpose_a), _bool_of(op.transpose_b))


# -- fusion groups ---------------------------------------------------------------------------------


@_kernel(g.KernelOp)
def _kernel_region(op: g.KernelOp, xs: list[np.ndarray], env: _Env) -> list[np.ndarray]:
    """Run the body on the operands, op by op (as the xDSL interpreter does in run_module)."""
    values: dict[Any, np.ndarray] = dict(zip(op.body.block.args, xs, strict=True))
    for inner in op.body.block.ops:
        args = [values[v] for v in inner.operands]
        if isinstance(inner, g.YieldOp):
            return args
        for result, value in zip(inner.results, _evaluate(inner, args, env), strict=True):
            values[result] = value
    raise InterpreterError(f"{op.name}: the body does not end with graph.yield")


@_kernel(g.YieldOp)
def _yield(op: g.YieldOp, xs: list[np.ndarray], env: _Env) -> list[np.ndarray]:
    raise InterpreterError(f"{op.name} is evaluated as the terminator of its graph.kernel")


# --------------------------------------------------------------------------
# Single-op evaluation
# --------------------------------------------------------------------------


def _check_operands(op: Operation, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    if len(inputs) != len(op.operands):
        raise InterpreterError(
            f"{op.name}: expected {len(op.operands)} operand value(s), got {len(inputs)}"
        )
    arrays = []
    for i, (value, x) in enumerate(zip(op.operands, inputs)):
        arr = np.asarray(x)
        t = value.type
        if isinstance(t, TensorType):
            dt = to_numpy_dtype(t.get_element_type())
            if arr.dtype != dt:
                raise InterpreterError(
                    f"{op.name}: operand #{i} expects dtype {dt} "
                    f"({element_type_name(t.get_element_type())}), got {arr.dtype}"
                )
            if not _shape_matches(arr.shape, t.get_shape()):
                raise InterpreterError(
                    f"{op.name}: operand #{i} expects shape {format_shape(t.get_shape())}, got {format_shape(arr.shape)}"
                )
        arrays.append(arr)
    return arrays


def _evaluate(op: Operation, inputs: list[np.ndarray], env: _Env) -> list[np.ndarray]:
    kernel = _KERNELS.get(type(op))
    if kernel is None:
        raise InterpreterError(f"no graph interpreter kernel for op {op.name}")
    try:
        with np.errstate(all="ignore"):
            value = kernel(op, inputs, env)
    except InterpreterError:
        raise
    except Exception as e:  # a kernel bug or an unsupported corner: still an interpreter error
        raise InterpreterError(f"{op.name}: {type(e).__name__}: {e}") from e
    return _finish(op, value if isinstance(value, list) else [value])


def evaluate_op(
    op: Operation, inputs: Sequence[np.ndarray], weights: WeightStore | None = None
) -> list[np.ndarray]:
    """Evaluate one graph op on operand arrays; returns one array per result, with
    exactly the result's dtype and shape. `weights` serves `graph.weight` (default:
    the weight store of the module enclosing `op`)."""
    arrays = _check_operands(op, inputs)
    return _evaluate(op, arrays, _Env(weights, None))


# --------------------------------------------------------------------------
# xDSL interpreter functions
# --------------------------------------------------------------------------


class _GraphFunctionsBase(InterpreterFunctions):
    """Evaluates graph ops on numpy arrays; holds the weight store."""

    def __init__(self, weights: WeightStore | None = None, module: ModuleOp | None = None,
                 constant_cache: ConstantCache | None = None):
        self.env = _Env(weights, module, constant_cache)


def _describe(op: Operation) -> str:
    """`%name = graph.op in @function` for error messages."""
    names = [f"%{r.name_hint}" for r in op.results if r.name_hint]
    where = ""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, func.FuncOp):
        parent = parent.parent_op()
    if isinstance(parent, func.FuncOp):
        where = f" in @{parent.sym_name.data}"
    return (", ".join(names) + " = " if names else "") + op.name + where


def _make_impl(op_type: type[Operation]) -> Any:
    def run(self: _GraphFunctionsBase, interpreter: Interpreter, op: Operation, args: tuple[Any, ...]):
        cache = self.env.constant_cache
        key = cache.key(op) if cache is not None else None
        if key is not None and (hit := cache.get(key)) is not None:  # type: ignore[union-attr]
            return hit
        try:
            values = tuple(_evaluate(op, [np.asarray(a) for a in args], self.env))
        except InterpreterError as e:
            raise InterpreterError(f"{e} [at {_describe(op)}]") from None
        if key is not None:
            cache.put(key, values)  # type: ignore[union-attr]
        return values

    run.__name__ = f"run_{op_type.name.split('.', 1)[1]}"
    return impl(op_type)(run)


@impl(g.KernelOp)
def _run_kernel(self: _GraphFunctionsBase, interpreter: Interpreter, op: g.KernelOp, args: tuple[Any, ...]):
    values = interpreter.run_ssacfg_region(op.body, args, op.name)
    try:
        return tuple(_finish(op, [np.asarray(v) for v in values]))
    except InterpreterError as e:
        raise InterpreterError(f"{e} [at {_describe(op)}]") from None


@impl_terminator(g.YieldOp)
def _run_yield(self: _GraphFunctionsBase, interpreter: Interpreter, op: g.YieldOp, args: tuple[Any, ...]):
    return ReturnedValues(args), ()


_REGION_IMPLS = {g.KernelOp: _run_kernel, g.YieldOp: _run_yield}

GraphFunctions = register_impls(
    type(
        "GraphFunctions",
        (_GraphFunctionsBase,),
        {
            "__doc__": "xDSL interpreter functions for every graph op (one @impl per op; "
            "graph.kernel runs its body with run_ssacfg_region, graph.yield returns its operands).",
            **{
                f"run_{t.name.split('.', 1)[1]}": _REGION_IMPLS.get(t) or _make_impl(t)
                for t in _KERNELS
            },
        },
    )
)

_missing = [t.name for t in g.Graph.operations if t not in _KERNELS]
assert not _missing, f"graph ops without an interpreter kernel: {_missing}"


# --------------------------------------------------------------------------
# Module execution
# --------------------------------------------------------------------------


def _arg_names(fn: func.FuncOp) -> list[str]:
    names = [f"arg{i}" for i in range(len(fn.function_type.inputs.data))]
    if fn.arg_attrs is not None:
        for i, attrs in enumerate(fn.arg_attrs.data):
            if isinstance(attrs, DictionaryAttr):
                name = attrs.data.get(INPUT_NAME_ATTR)
                if isinstance(name, StringAttr):
                    names[i] = name.data
    return names


def _find_entry(module: ModuleOp, entry: str) -> func.FuncOp:
    fn = SymbolTable.lookup_symbol(module, entry)
    if not isinstance(fn, func.FuncOp):
        available = [op.sym_name.data for op in module.ops if isinstance(op, func.FuncOp)]
        raise InterpreterError(
            f"no function @{entry} in the module (functions: "
            + (", ".join("@" + a for a in available) or "none")
            + ")"
        )
    if not fn.body.blocks:
        raise InterpreterError(f"function @{entry} is only a declaration")
    return fn


def _bind_inputs(
    fn: func.FuncOp, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    types = list(fn.function_type.inputs.data)
    names = _arg_names(fn)
    fname = fn.sym_name.data
    if isinstance(inputs, Mapping):
        unknown = [k for k in inputs if k not in names]
        if unknown:
            raise InterpreterError(
                f"@{fname}: unknown input name(s) {', '.join(map(repr, unknown))} "
                f"(inputs: {', '.join(names) or 'none'})"
            )
        missing = [n for n in names if n not in inputs]
        if missing:
            raise InterpreterError(
                f"@{fname}: missing input(s) {', '.join(map(repr, missing))} "
                f"(inputs: {', '.join(names)})"
            )
        values = [inputs[n] for n in names]
    else:
        values = list(inputs)
        if len(values) != len(types):
            raise InterpreterError(
                f"@{fname}: expected {len(types)} input(s) ({', '.join(names) or 'none'}), "
                f"got {len(values)}"
            )
    arrays = []
    for i, (name, t, v) in enumerate(zip(names, types, values)):
        arr = np.asarray(v)
        if isinstance(t, TensorType):
            dt = to_numpy_dtype(t.get_element_type())
            ename = element_type_name(t.get_element_type())
            if arr.dtype != dt:
                raise InterpreterError(
                    f"@{fname}: input '{name}' (#{i}): expected dtype {dt} ({ename}), got {arr.dtype}"
                )
            if not _shape_matches(arr.shape, t.get_shape()):
                raise InterpreterError(
                    f"@{fname}: input '{name}' (#{i}): expected shape {format_shape(t.get_shape())}, "
                    f"got {format_shape(arr.shape)}"
                )
        arrays.append(arr)
    return arrays


def innermost_interpreter_error(e: BaseException | None) -> InterpreterError | None:
    """The InterpreterError a failure inside xDSL's interpreter wraps, if any."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, InterpreterError):
            return e
        e = e.__cause__ or e.__context__
    return None


class _TopLevelOps(Interpreter.Listener):
    """Reports every op of one function body (not the ops nested in its kernels) once run."""

    def __init__(self, fn: func.FuncOp, on_op: Callable[[int, Operation, list[np.ndarray]], None]):
        self.index = {op: i for i, op in enumerate(fn.body.block.ops)}
        self.on_op = on_op

    def did_interpret_op(self, op: Operation, results: tuple[Any, ...]) -> None:
        i = self.index.get(op)
        if i is not None:
            self.on_op(i, op, [np.asarray(r) for r in results])


def run_module(
    module: ModuleOp,
    inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray],
    entry: str = "main",
    weights: WeightStore | None = None,
    *,
    on_op: Callable[[int, Operation, list[np.ndarray]], None] | None = None,
    constant_cache: ConstantCache | None = None,
) -> list[np.ndarray]:
    """Run function `entry` of `module` on `inputs` (by position, or by name: the
    argument attribute `graph.name`, else "arg0", "arg1", ...). Returns the
    function's results as numpy arrays. `weights` defaults to `weights_of(module)`.

    `on_op(index, op, results)` (optional) is called after each op of the function body
    runs (index = the op's position in the body; a `graph.kernel` counts as one op, its
    region's ops are not reported): intermediate values by op, e.g. for a per-layer
    comparison. The callback decides what to keep.

    `constant_cache` (optional): a `ConstantCache` the caller keeps across runs of
    the same, unchanged module. Values that depend only on weights and constants (weights
    read from the store, dequantized weights, folded constants) are computed on
    the first run and reused by the next ones; a text generator that runs
    @decode once per token passes one. Results are the same with or without it."""
    # (imported here: importing any xdsl.interpreters module imports all of them, the RISC-V
    # dialects included, ~0.3 s of every process that only constant-folds or compiles)
    from xdsl.interpreters.func import FuncFunctions

    fn = _find_entry(module, entry)
    arrays = _bind_inputs(fn, inputs)
    interpreter = Interpreter(module, listeners=(_TopLevelOps(fn, on_op),) if on_op is not None else ())
    interpreter.register_implementations(GraphFunctions(weights, module, constant_cache))
    interpreter.register_implementations(FuncFunctions())
    try:
        results = interpreter.call_op(fn, tuple(arrays))
    except Exception as e:
        inner = innermost_interpreter_error(e)
        if inner is not None:
            # a fresh exception: xDSL attaches the whole printed module as a note
            raise InterpreterError(str(inner)) from None
        raise InterpreterError(f"@{entry}: {type(e).__name__}: {e}") from e
    outs = []
    result_types = list(fn.function_type.outputs.data)
    for i, (r, t) in enumerate(zip(results, result_types)):
        arr = np.asarray(r)
        if isinstance(t, TensorType):
            dt = to_numpy_dtype(t.get_element_type())
            if arr.dtype != dt or not _shape_matches(arr.shape, t.get_shape()):
                raise InterpreterError(
                    f"@{entry}: result #{i} is {arr.dtype} {format_shape(arr.shape)} but the function "
                    f"returns {dt} {format_shape(t.get_shape())}"
                )
        outs.append(arr)
    return outs
