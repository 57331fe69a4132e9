"""Graph interpreter: elementwise, cast, structure, reductions, gather, API.

Tolerances: see the table in helpers/interpreter_cases.py (f64 1e-10/1e-12,
f32 1e-5/1e-5, f16 2e-3/2e-3, bf16 1.6e-2/1.6e-2, integers and i1 exact).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from xdsl.dialects.builtin import StringAttr, TensorType

from infer.dialects import graph as g
from infer.dialects.dtypes import from_numpy_dtype, parse_element_type
from infer.dialects.graph import bool_attr, f64_attr, i64_array, i64_attr
from infer.dialects.graph_interpreter import InterpreterError, erf, evaluate_op, run_module
from infer.dialects.weights import WeightStore, attach_weights

from helpers.interpreter_cases import (
    BF16,
    F16,
    F32,
    F64,
    FLOAT_DTYPES,
    check,
    parse,
    randn,
    run_op,
    single_op_module,
    to_torch,
)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# --------------------------------------------------------------------------
# Unary
# --------------------------------------------------------------------------

# op class -> (torch reference on f32/f64, input domain)
UNARY = {
    g.NegOp: (torch.neg, "any"),
    g.AbsOp: (torch.abs, "any"),
    g.SignOp: (torch.sign, "any"),
    g.ExpOp: (torch.exp, "any"),
    g.LogOp: (torch.log, "positive"),
    g.SqrtOp: (torch.sqrt, "positive"),
    g.RsqrtOp: (torch.rsqrt, "positive"),
    g.ReciprocalOp: (torch.reciprocal, "positive"),
    g.TanhOp: (torch.tanh, "any"),
    g.SigmoidOp: (torch.sigmoid, "wide"),
    g.ErfOp: (torch.erf, "any"),
    g.SinOp: (torch.sin, "any"),
    g.CosOp: (torch.cos, "any"),
    g.FloorOp: (torch.floor, "halves"),
    g.CeilOp: (torch.ceil, "halves"),
    g.RoundOp: (torch.round, "halves"),
    g.ReluOp: (torch.relu, "any"),
    g.SiluOp: (F.silu, "wide"),
    g.SoftplusOp: (F.softplus, "any"),
}


def _unary_input(rng, domain: str, dtype) -> np.ndarray:
    if domain == "positive":
        x = rng.uniform(0.1, 5.0, (3, 17))
    elif domain == "halves":
        x = rng.integers(-8, 8, (3, 17)) / 2.0  # exact ties: round half to even
    elif domain == "wide":
        x = rng.uniform(-40, 40, (3, 17))
    else:
        x = rng.standard_normal((3, 17)) * 2
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
@pytest.mark.parametrize("op_cls", list(UNARY), ids=lambda c: c.name)
def test_unary_float(op_cls, dtype, rng):
    ref_fn, domain = UNARY[op_cls]
    x = _unary_input(rng, domain, dtype)
    got = run_op(op_cls, [x])
    check(got, ref_fn(to_torch(x)), dtype)


def test_round_half_to_even_exact():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5], np.float32)
    np.testing.assert_array_equal(run_op(g.RoundOp, [x]), [-2, -2, -0, 0, 2, 2, 4])


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate, dtype, rng):
    x = randn(rng, (4, 33), dtype, scale=3)
    got = run_op(g.GeluOp, [x], {"approximate": StringAttr(approximate)})
    check(got, F.gelu(to_torch(x), approximate=approximate), dtype)


def test_gelu_default_is_exact(rng):
    x = randn(rng, (64,), F64, scale=3)
    got = run_op(g.GeluOp, [x])
    check(got, F.gelu(to_torch(x)), F64)


def test_erf_accuracy():
    x = np.linspace(-7, 7, 20001)
    ref = np.array([math.erf(v) for v in x])
    assert np.max(np.abs(erf(x) - ref)) < 1e-15
    special = erf(np.array([0.0, -0.0, np.inf, -np.inf, np.nan]))
    np.testing.assert_array_equal(special[:4], [0.0, -0.0, 1.0, -1.0])
    assert np.signbit(special[1]) and np.isnan(special[4])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_parametric_activations(dtype, rng):
    x = randn(rng, (5, 11), dtype, scale=3)
    t = to_torch(x)
    check(run_op(g.LeakyReluOp, [x], {"alpha": f64_attr(0.2)}), F.leaky_relu(t, 0.2), dtype)
    check(run_op(g.LeakyReluOp, [x]), F.leaky_relu(t, 0.01), dtype)  # default alpha
    check(run_op(g.EluOp, [x], {"alpha": f64_attr(0.7)}), F.elu(t, 0.7), dtype)
    check(run_op(g.EluOp, [x]), F.elu(t), dtype)
    hs = run_op(g.HardSigmoidOp, [x], {"alpha": f64_attr(1 / 6), "beta": f64_attr(0.5)})
    check(hs, F.hardsigmoid(t), dtype)
    check(run_op(g.HardSigmoidOp, [x]), torch.clamp(0.2 * t + 0.5, 0, 1), dtype)
    check(run_op(g.ClipOp, [x], {"min": f64_attr(0.0), "max": f64_attr(6.0)}), F.relu6(t), dtype)
    check(run_op(g.ClipOp, [x], {"max": f64_attr(0.5)}), torch.clamp(t, max=0.5), dtype)
    check(run_op(g.ClipOp, [x], {"min": f64_attr(-0.25)}), torch.clamp(t, min=-0.25), dtype)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64], ids=str)
def test_integer_unary(dtype, rng):
    info = np.iinfo(dtype)
    x = np.concatenate([rng.integers(-100, 100, 20), [0, info.max, info.min]]).astype(dtype)
    check(run_op(g.NegOp, [x]), -x, dtype)  # INT_MIN wraps to itself
    check(run_op(g.AbsOp, [x]), np.abs(x), dtype)
    check(run_op(g.SignOp, [x]), np.sign(x), dtype)
    check(run_op(g.ReluOp, [x]), np.maximum(x, 0), dtype)
    clipped = run_op(g.ClipOp, [x], {"min": f64_attr(-3.5), "max": f64_attr(7.5)})
    check(clipped, np.clip(x, -3, 7), dtype)
    assert run_op(g.NegOp, [x])[-1] == info.min


def test_not():
    x = np.array([[True, False], [False, True]])
    check(run_op(g.NotOp, [x]), ~x, np.bool_)


def test_special_values_f32():
    x = np.array([0.0, -1.0, np.inf, -np.inf, np.nan], np.float32)
    log = run_op(g.LogOp, [x])
    assert log[0] == -np.inf and np.isnan(log[1]) and log[2] == np.inf and np.isnan(log[4])
    check(run_op(g.SigmoidOp, [x])[:4], [0.5, 1 / (1 + np.e), 1.0, 0.0], F32)
    relu = run_op(g.ReluOp, [x])
    assert np.isnan(relu[4]) and relu[3] == 0


# --------------------------------------------------------------------------
# Binary
# --------------------------------------------------------------------------

BINARY_FLOAT = {
    g.AddOp: torch.add,
    g.SubOp: torch.sub,
    g.MulOp: torch.mul,
    g.DivOp: torch.div,
    g.PowOp: torch.pow,
    g.MaximumOp: torch.maximum,
    g.MinimumOp: torch.minimum,
    g.ModOp: torch.remainder,
}

COMPARE = {
    g.EqualOp: torch.eq,
    g.LessOp: torch.lt,
    g.LessEqualOp: torch.le,
    g.GreaterOp: torch.gt,
    g.GreaterEqualOp: torch.ge,
}


@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
@pytest.mark.parametrize("op_cls", list(BINARY_FLOAT), ids=lambda c: c.name)
def test_binary_float_broadcast(op_cls, dtype, rng):
    a = randn(rng, (2, 1, 5), dtype, scale=3)
    b = randn(rng, (3, 1), dtype, scale=3)
    if op_cls is g.PowOp:
        a = np.abs(a) + np.asarray(0.5, dtype)
    if op_cls in (g.DivOp, g.ModOp):
        b = np.where(np.abs(b) < 0.5, np.asarray(1.5, dtype), b).astype(dtype)
    got = run_op(op_cls, [a, b])
    ref = BINARY_FLOAT[op_cls](to_torch(a), to_torch(b))
    check(got, ref, dtype, shape=(2, 3, 5))


@pytest.mark.parametrize("dtype", [F32, BF16, np.int32, np.uint8], ids=str)
@pytest.mark.parametrize("op_cls", list(COMPARE), ids=lambda c: c.name)
def test_compare(op_cls, dtype, rng):
    a = rng.integers(0, 4, (4, 6)).astype(dtype)
    b = rng.integers(0, 4, (6,)).astype(dtype)
    got = run_op(op_cls, [a, b])
    check(got, COMPARE[op_cls](to_torch(a), to_torch(b)), np.bool_)


def test_integer_div_truncates_and_mod_floors():
    a = np.array([7, -7, 7, -7, 0, 5, -1], np.int32)
    b = np.array([2, 2, -2, -2, 3, 7, 3], np.int32)
    div = run_op(g.DivOp, [a, b])
    mod = run_op(g.ModOp, [a, b])
    check(div, torch.div(to_torch(a), to_torch(b), rounding_mode="trunc"), np.int32)
    check(div, [3, -3, -3, 3, 0, 0, 0], np.int32)
    check(mod, torch.remainder(to_torch(a), to_torch(b)), np.int32)
    check(mod, [1, 1, -1, -1, 0, 5, 2], np.int32)


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint8], ids=str)
def test_integer_arith_wraps(dtype, rng):
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, 3, 100], dtype)
    b = np.array([1, 1, 2, 3], dtype)
    check(run_op(g.AddOp, [a, b]), a + b, dtype)  # numpy arrays wrap too
    check(run_op(g.AddOp, [a, b])[0:1], [info.min], dtype)
    check(run_op(g.SubOp, [a, b]), a - b, dtype)
    check(run_op(g.MulOp, [a, b]), a * b, dtype)
    check(run_op(g.MaximumOp, [a, b]), np.maximum(a, b), dtype)
    check(run_op(g.MinimumOp, [a, b]), np.minimum(a, b), dtype)
    check(run_op(g.DivOp, [a, b]), torch.div(torch.from_numpy(a), torch.from_numpy(b), rounding_mode="trunc"), dtype)


def test_integer_pow():
    a = np.array([2, -3, 5, 1, -1, -1, 4, 0], np.int64)
    b = np.array([10, 3, 0, -4, -3, -2, -1, 2], np.int64)
    check(run_op(g.PowOp, [a, b]), [1024, -27, 1, 1, -1, 1, 0, 0], np.int64)


@pytest.mark.parametrize("op_cls", [g.DivOp, g.ModOp])
def test_integer_division_by_zero_is_an_error(op_cls):
    a = np.array([1, 2], np.int32)
    b = np.array([1, 0], np.int32)
    module, op = single_op_module(op_cls, [a, b])
    with pytest.raises(InterpreterError, match="division by zero"):
        run_module(module, [a, b])
    with pytest.raises(InterpreterError, match="division by zero"):
        evaluate_op(op, [a, b])


def test_float_division_by_zero_is_ieee():
    a = np.array([1.0, -1.0, 0.0], np.float32)
    b = np.zeros(3, np.float32)
    got = run_op(g.DivOp, [a, b])
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])


def test_logical_ops():
    a = np.array([[True, True, False, False]])
    b = np.array([[True], [False]])
    check(run_op(g.AndOp, [a, b]), a & b, np.bool_, (2, 4))
    check(run_op(g.OrOp, [a, b]), a | b, np.bool_, (2, 4))
    check(run_op(g.XorOp, [a, b]), a ^ b, np.bool_, (2, 4))


@pytest.mark.parametrize("dtype", [F32, BF16, np.int64], ids=str)
def test_where_broadcasts_all_three(dtype, rng):
    c = rng.integers(0, 2, (3, 1, 4)).astype(bool)
    x = rng.integers(-5, 5, (2, 4)).astype(dtype)
    y = rng.integers(-5, 5, (3, 2, 1)).astype(dtype)
    got = run_op(g.WhereOp, [c, x, y])
    check(got, torch.where(torch.from_numpy(c), to_torch(x), to_torch(y)), dtype, (3, 2, 4))


# --------------------------------------------------------------------------
# Cast
# --------------------------------------------------------------------------


def _cast(x: np.ndarray, to: np.dtype) -> np.ndarray:
    out = TensorType(from_numpy_dtype(to), x.shape)
    return run_op(g.CastOp, [x], result_types=[out])


def test_cast_float_to_int_truncates():
    x = np.array([-2.7, -0.5, 0.5, 2.7, 3.0, -3.0], np.float32)
    check(_cast(x, np.int32), [-2, 0, 0, 2, 3, -3], np.int32)
    check(_cast(x.astype(BF16), np.int64), torch.from_numpy(x).to(torch.bfloat16).to(torch.int64), np.int64)
    check(_cast(np.array([2.9, 255.9], np.float16), np.uint8), [2, 255], np.uint8)


def test_cast_to_bool_is_nonzero():
    check(_cast(np.array([0.0, -0.0, 0.1, -3.0, np.nan], np.float32), np.bool_), [0, 0, 1, 1, 1], np.bool_)
    check(_cast(np.array([0, 2, -1], np.int8), np.bool_), [0, 1, 1], np.bool_)
    check(_cast(np.array([True, False]), np.float32), [1.0, 0.0], F32)
    check(_cast(np.array([True, False]), np.int32), [1, 0], np.int32)


def test_cast_float_rounding_matches_torch(rng):
    x = randn(rng, (257,), F32, scale=100)
    for dtype, tdt in ((BF16, torch.bfloat16), (F16, torch.float16)):
        got = _cast(x, dtype)
        ref = torch.from_numpy(x).to(tdt).to(torch.float32).numpy()
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.astype(np.float32), ref)  # exact rounding
    check(_cast(x.astype(BF16), F32), x.astype(BF16).astype(np.float32), F32)
    ints = rng.integers(-(2**20), 2**20, 100).astype(np.int32)
    got = _cast(ints, BF16)
    np.testing.assert_array_equal(got.astype(np.float32), torch.from_numpy(ints).to(torch.bfloat16).float().numpy())


def test_cast_int_to_int_wraps():
    check(_cast(np.array([300, -1, 127], np.int32), np.int8), [44, -1, 127], np.int8)
    check(_cast(np.array([-1], np.int32), np.uint8), [255], np.uint8)


# --------------------------------------------------------------------------
# Gather
# --------------------------------------------------------------------------


@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32], ids=str)
def test_gather_embedding_negative_indices(idx_dtype, rng):
    table = randn(rng, (10, 4), F32)
    idx = np.array([[0, 9, -1], [-10, 3, 3]], idx_dtype)
    got = run_op(g.GatherOp, [table, idx])
    ref = F.embedding(torch.from_numpy(np.where(idx < 0, idx + 10, idx).astype(np.int64)), to_torch(table))
    check(got, ref, F32, (2, 3, 4))


def test_gather_inner_axis(rng):
    x = rng.integers(-50, 50, (2, 5, 3)).astype(np.int32)
    idx = np.array([4, -5, 2], np.int64)
    got = run_op(g.GatherOp, [x, idx], {"axis": i64_attr(-2)})
    check(got, x[:, [4, 0, 2], :], np.int32, (2, 3, 3))
    idx2 = np.array([[1], [2]], np.int64)
    check(run_op(g.GatherOp, [x, idx2], {"axis": i64_attr(2)}), np.take(x, idx2, axis=2), np.int32, (2, 5, 2, 1))


@pytest.mark.parametrize("bad", [10, -11])
def test_gather_out_of_range_is_an_error(bad):
    table = np.zeros((10, 4), np.float32)
    idx = np.array([0, bad], np.int64)
    module, op = single_op_module(g.GatherOp, [table, idx])
    with pytest.raises(InterpreterError, match=rf"index {bad} is out of range for axis 0 of size 10"):
        run_module(module, [table, idx])
    with pytest.raises(InterpreterError, match="out of range"):
        evaluate_op(op, [table, idx])


# --------------------------------------------------------------------------
# Structure
# --------------------------------------------------------------------------


def test_reshape_and_transpose(rng):
    x = randn(rng, (2, 3, 4), F32)
    got = run_op(g.ReshapeOp, [x], result_types=[TensorType(parse_element_type("f32"), [4, 6])])
    check(got, x.reshape(4, 6), F32)
    t = run_op(g.TransposeOp, [x], {"perm": i64_array([2, 0, 1])})
    check(t, np.transpose(x, (2, 0, 1)), F32)
    assert t.flags.c_contiguous


def test_concat(rng):
    xs = [rng.integers(0, 9, (2, n, 3)).astype(np.int16) for n in (1, 4, 2)]
    check(run_op(g.ConcatOp, xs, {"axis": i64_attr(-2)}), np.concatenate(xs, axis=1), np.int16, (2, 7, 3))
    one = [randn(rng, (3,), BF16)]
    check(run_op(g.ConcatOp, one, {"axis": i64_attr(0)}), one[0].astype(np.float32), BF16)


def _slice(x, starts, ends, steps):
    return run_op(
        g.SliceOp, [x], {"starts": i64_array(starts), "ends": i64_array(ends), "steps": i64_array(steps)}
    )


def test_slice_positive_and_negative_steps(rng):
    x = np.arange(5 * 6 * 4, dtype=np.int32).reshape(5, 6, 4)
    check(_slice(x, [1, 0, 0], [4, 6, 4], [2, 1, 3]), x[1:4:2, :, ::3], np.int32, (2, 6, 2))
    # full reversal: end = -1 means "past index 0"
    check(_slice(x, [4, 5, 3], [-1, -1, -1], [-1, -2, -1]), x[::-1, ::-2, ::-1], np.int32, (5, 3, 4))
    check(_slice(x, [3, 5, 2], [0, 1, 2], [-2, -3, -1]), x[3:0:-2, 5:1:-3, 2:2:-1], np.int32, (2, 2, 0))
    y = randn(rng, (7,), BF16)
    check(_slice(y, [6], [-1], [-3]), y[::-3].astype(np.float32), BF16, (3,))


def test_broadcast(rng):
    x = randn(rng, (3, 1), F16)
    got = run_op(g.BroadcastOp, [x], result_types=[TensorType(parse_element_type("f16"), [2, 3, 5])])
    check(got, np.broadcast_to(x, (2, 3, 5)).astype(np.float32), F16)


def test_pad(rng):
    x = randn(rng, (2, 3), F32)
    got = run_op(g.PadOp, [x], {"pads": i64_array([1, 0, 2, 3]), "value": f64_attr(-1.5)})
    check(got, F.pad(to_torch(x), (0, 3, 1, 2), value=-1.5), F32, (5, 6))
    xi = np.arange(4, dtype=np.int8).reshape(2, 2)
    check(run_op(g.PadOp, [xi], {"pads": i64_array([0, 1, 1, 0])}), np.pad(xi, ((0, 1), (1, 0))), np.int8)
    check(run_op(g.PadOp, [xi], {"pads": i64_array([1, 1, 1, 1]), "value": f64_attr(7.0)}),
          np.pad(xi, 1, constant_values=7), np.int8)


# --------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------

TORCH_REDUCE = {
    g.ReduceSumOp: torch.sum,
    g.ReduceMeanOp: torch.mean,
    g.ReduceMaxOp: torch.amax,
    g.ReduceMinOp: torch.amin,
}


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@pytest.mark.parametrize("axes,keep", [([], True), ([], False), ([1], True), ([-1, 0], False), ([1, 2], True)])
@pytest.mark.parametrize("op_cls", [g.ReduceSumOp, g.ReduceMeanOp, g.ReduceMaxOp, g.ReduceMinOp, g.ReduceProdOp], ids=lambda c: c.name)
def test_reduce(op_cls, axes, keep, dtype, rng):
    x = (rng.uniform(0.5, 1.5, (3, 4, 5)) * rng.choice([-1, 1], (3, 4, 5))).astype(dtype)
    got = run_op(op_cls, [x], {"axes": i64_array(axes), "keepdims": bool_attr(keep)})
    dims = tuple(a % 3 for a in axes) or (0, 1, 2)
    xs = x.astype(np.float64)
    ref = {
        g.ReduceSumOp: np.sum, g.ReduceMeanOp: np.mean, g.ReduceMaxOp: np.max,
        g.ReduceMinOp: np.min, g.ReduceProdOp: np.prod,
    }[op_cls](xs, axis=dims, keepdims=keep)
    if op_cls in TORCH_REDUCE:  # numpy reference agrees with torch
        torch_ref = TORCH_REDUCE[op_cls](torch.from_numpy(xs), dim=dims, keepdim=keep).numpy()
        np.testing.assert_allclose(ref, torch_ref)
    check(got, ref, dtype)


def test_reduce_integers_exact():
    x = np.array([[1, -2, 3], [4, 5, -7]], np.int32)
    check(run_op(g.ReduceSumOp, [x], {"axes": i64_array([1])}), [[2], [2]], np.int32)
    check(run_op(g.ReduceProdOp, [x], {"keepdims": bool_attr(False)}), np.prod(x), np.int32, ())
    check(run_op(g.ReduceMaxOp, [x], {"axes": i64_array([0]), "keepdims": bool_attr(False)}), [4, 5, 3], np.int32)
    check(run_op(g.ReduceMeanOp, [x], {"axes": i64_array([1])}), [[0], [0]], np.int32)  # 2/3 truncated
    check(run_op(g.ReduceMeanOp, [np.array([-7, 0], np.int32)]), [-3], np.int32)  # toward zero


@pytest.mark.parametrize("op_cls,fn", [(g.ArgmaxOp, np.argmax), (g.ArgminOp, np.argmin)])
@pytest.mark.parametrize("keep", [True, False])
def test_arg_reduce_first_occurrence(op_cls, fn, keep):
    x = np.array([[1.0, 3.0, 3.0, -1.0], [-1.0, -1.0, 2.0, 2.0]], np.float32)
    got = run_op(op_cls, [x], {"axes": i64_array([1]), "keepdims": bool_attr(keep)})
    expected = {g.ArgmaxOp: [1, 2], g.ArgminOp: [3, 0]}[op_cls]
    check(got, np.array(expected).reshape((2, 1) if keep else (2,)), np.int64)
    tref = (torch.argmax if op_cls is g.ArgmaxOp else torch.argmin)(torch.from_numpy(x), dim=1, keepdim=keep)
    check(got, tref, np.int64)
    got0 = run_op(op_cls, [x], {"axes": i64_array([-2]), "keepdims": bool_attr(keep)})
    check(got0, fn(x, axis=0, keepdims=keep), np.int64)


@pytest.mark.parametrize("largest", [True, False])
def test_top_k_is_the_stable_sort_with_nan_above_every_number(largest):
    """Equal values in index order (torch's stable sort), -inf and +inf among them, NaN first
    among the largest and last among the smallest (torch's order); along axis 0 too."""
    x = np.array([[1, 3, 3, 2, np.nan, 3, 0, -np.inf],
                  [5, -1, 5, 5, 2, -np.inf, np.inf, -np.inf],
                  [0, -0.0, 0, 1, 1, -2, -2, np.nan]], np.float32)
    attrs = {"k": i64_attr(5), "largest": bool_attr(largest)}
    got = run_op(g.TopKOp, [x], attrs)
    want = torch.sort(torch.from_numpy(x), dim=1, descending=largest, stable=True).indices[:, :5]
    check(got, want, np.int64)
    got0 = run_op(g.TopKOp, [x], {**attrs, "k": i64_attr(2), "axis": i64_attr(0)})
    check(got0, torch.sort(torch.from_numpy(x), dim=0, descending=largest, stable=True).indices[:2], np.int64)
    ints = np.array([[3, 1, 3, -7], [0, 0, 2, 2]], np.int32)  # integers keep their order exactly
    check(run_op(g.TopKOp, [ints], {**attrs, "k": i64_attr(3)}),
          torch.sort(torch.from_numpy(ints), dim=1, descending=largest, stable=True).indices[:, :3], np.int64)


# --------------------------------------------------------------------------
# Constants and weights
# --------------------------------------------------------------------------

PROGRAM = """
func.func @main(%x: tensor<2x3xf32> {graph.name = "x"}, %y: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>) {
  %c = graph.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %0 = graph.add %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = graph.mul %0, %c : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %2 = graph.greater %1, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
  func.return %1, %2 : tensor<2x3xf32>, tensor<2x3xi1>
}
"""


def test_program_and_named_inputs(rng):
    module = parse(PROGRAM)
    x, y = randn(rng, (2, 3)), randn(rng, (3,))
    expected = (x + y) * np.array([1, 2, 3], np.float32)
    by_position = run_module(module, [x, y])
    by_name = run_module(module, {"x": x, "arg1": y})
    for out in (by_position, by_name):
        check(out[0], expected, F32)
        check(out[1], expected > x, np.bool_)


def test_input_validation_errors(rng):
    module = parse(PROGRAM)
    x, y = randn(rng, (2, 3)), randn(rng, (3,))
    with pytest.raises(InterpreterError, match=r"expected 2 input\(s\) \(x, arg1\), got 1"):
        run_module(module, [x])
    with pytest.raises(InterpreterError, match=r"input 'arg1' \(#1\): expected dtype float32 \(f32\), got float64"):
        run_module(module, [x, y.astype(np.float64)])
    with pytest.raises(InterpreterError, match=r"input 'x' \(#0\): expected shape 2x3, got 3x2"):
        run_module(module, {"x": x.T.copy(), "arg1": y})
    with pytest.raises(InterpreterError, match=r"missing input\(s\) 'arg1'"):
        run_module(module, {"x": x})
    with pytest.raises(InterpreterError, match=r"unknown input name\(s\) 'z'"):
        run_module(module, {"x": x, "arg1": y, "z": y})
    with pytest.raises(InterpreterError, match=r"no function @forward .*@main"):
        run_module(module, [x, y], entry="forward")


def test_constants_of_every_kind():
    module = parse("""
    func.func @main() -> (tensor<2xbf16>, tensor<3xi1>, tensor<2x2xi8>, tensor<2x3xf32>, tensor<ui8>) {
      %0 = graph.constant dense<[1.5, -2.0]> : tensor<2xbf16>
      %1 = graph.constant dense<[true, false, true]> : tensor<3xi1>
      %2 = graph.constant dense<[[1, -2], [3, -128]]> : tensor<2x2xi8>
      %3 = graph.constant dense<0.25> : tensor<2x3xf32>
      %4 = graph.constant dense<200> : tensor<ui8>
      func.return %0, %1, %2, %3, %4 : tensor<2xbf16>, tensor<3xi1>, tensor<2x2xi8>, tensor<2x3xf32>, tensor<ui8>
    }
    """)
    a, b, c, d, e = run_module(module, [])
    check(a, [1.5, -2.0], BF16)
    check(b, [True, False, True], np.bool_)
    check(c, [[1, -2], [3, -128]], np.int8)
    check(d, np.full((2, 3), 0.25), F32)
    check(e, np.array(200), np.uint8, ())


WEIGHT_PROGRAM = """
func.func @main(%x: tensor<2x4xf32>) -> tensor<2x3xf32> {
  %w = graph.weight @fc.weight : tensor<3x4xf32>
  %b = graph.weight @fc.bias : tensor<3xf32>
  %0 = graph.linear %x, %w, %b : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}
"""


def test_weights_from_store_and_file(rng, tmp_path):
    module = parse(WEIGHT_PROGRAM)
    x, w, b = randn(rng, (2, 4)), randn(rng, (3, 4)), randn(rng, (3,))
    store = WeightStore()
    store.set("fc.weight", w)
    store.set("fc.bias", b)
    ref = F.linear(to_torch(x), to_torch(w), to_torch(b))
    check(run_module(module, [x], weights=store)[0], ref, F32)
    # default: the module's own store, here backed by a safetensors file
    path = tmp_path / "w.safetensors"
    store.save(path, ["fc.weight", "fc.bias"])
    attach_weights(module, WeightStore(path))
    check(run_module(module, [x])[0], ref, F32)


def test_weight_errors(rng):
    module = parse(WEIGHT_PROGRAM)
    x = randn(rng, (2, 4))
    store = WeightStore()
    store.set("fc.weight", randn(rng, (3, 4)))
    with pytest.raises(InterpreterError, match="weight 'fc.bias' not found"):
        run_module(module, [x], weights=store)
    store.set("fc.bias", randn(rng, (4,)))
    with pytest.raises(InterpreterError, match=r"graph.weight @fc.bias: the store holds float32 4, but the op declares float32 3 \(f32\) \[at %b = graph.weight in @main\]$"):
        run_module(module, [x], weights=store)


def test_func_call_between_functions(rng):
    module = parse("""
    func.func @block(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = graph.silu %x : (tensor<4xf32>) -> tensor<4xf32>
      func.return %0 : tensor<4xf32>
    }
    func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = func.call @block(%x) : (tensor<4xf32>) -> tensor<4xf32>
      %1 = func.call @block(%0) : (tensor<4xf32>) -> tensor<4xf32>
      func.return %1 : tensor<4xf32>
    }
    """)
    x = randn(rng, (4,))
    check(run_module(module, [x])[0], F.silu(F.silu(to_torch(x))), F32)
    check(run_module(module, [x], entry="block")[0], F.silu(to_torch(x)), F32)


def test_evaluate_op_checks_operands_and_exact_result_dtype(rng):
    a, b = randn(rng, (2, 3), F16), randn(rng, (3,), F16)
    module, op = single_op_module(g.MulOp, [a, b])
    (out,) = evaluate_op(op, [a, b])
    assert out.dtype == F16 and out.shape == (2, 3)
    np.testing.assert_array_equal(out, (a.astype(np.float32) * b.astype(np.float32)).astype(F16))
    with pytest.raises(InterpreterError, match=r"operand #1 expects dtype float16 \(f16\), got float32"):
        evaluate_op(op, [a, b.astype(np.float32)])
    with pytest.raises(InterpreterError, match="expected 2 operand value"):
        evaluate_op(op, [a])
    with pytest.raises(InterpreterError, match="operand #0 expects shape 2x3, got 3x2"):
        evaluate_op(op, [a.T, b])


def test_scalar_results_are_arrays():
    x = np.array(3.0, np.float32)
    out = run_op(g.ExpOp, [x])
    assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == F32
    s = run_op(g.ReduceSumOp, [np.ones((2, 2), np.int32)], {"keepdims": bool_attr(False)})
    assert isinstance(s, np.ndarray) and s.shape == () and s == 4


def test_every_graph_op_has_a_kernel():
    from infer.dialects.graph_interpreter import GraphFunctions

    registered = {t for t, _ in GraphFunctions._impls()}
    assert set(g.Graph.operations) <= registered
