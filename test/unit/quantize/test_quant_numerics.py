"""The quantization ops on the reference interpreter against onnxruntime's int8 kernels:
QuantizeLinear / DequantizeLinear (round half to even, saturation, per tensor and per axis,
int8 and uint8), ConvInteger and MatMulInteger (exact int32), and QLinearConv /
QLinearMatMul as the integer kernel plus `graph.requantize` (float32 multiplier (sx * sw) / sy)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import IntegerAttr, TensorType, f32, i8, i32, i64, IntegerType, Signedness

from infer.dialects import graph as g
from infer.dialects.dtypes import from_numpy_dtype
from infer.dialects.graph import i64_array
from infer.dialects.graph_interpreter import evaluate_op

UI8 = IntegerType(8, Signedness.UNSIGNED)


def _ort(nodes, inputs: dict[str, np.ndarray], initializers: dict[str, np.ndarray], out_type: int):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


def _value(array: np.ndarray):
    """A graph.constant holding `array` (the operand of the op under test)."""
    from infer.dialects.dtypes import dense_attr

    return g.ConstantOp(dense_attr(np.asarray(array))).output


def _tensor(shape, dtype) -> TensorType:
    return TensorType(from_numpy_dtype(np.dtype(dtype)), list(shape))


def _eval(op, *arrays):
    return evaluate_op(op, [np.asarray(a) for a in arrays])[0]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_dequantize_linear_match_onnxruntime(dtype, per_axis) -> None:
    rng = np.random.default_rng(3)
    scale = (rng.random(6) * 0.05 + 0.01).astype(np.float32) if per_axis else np.array(np.float32(0.05))
    zp = rng.integers(-20, 20, 6).astype(dtype) + (100 if dtype == np.uint8 else 0) if per_axis else np.array(dtype(3))
    zp = np.asarray(zp).astype(dtype)
    # ties (k + 0.5 steps), saturation far outside the range, NaN-free random values
    x = np.concatenate([rng.standard_normal((20, 6)) * 4,
                        (np.arange(-60, 60).reshape(20, 6) + 0.5) * np.broadcast_to(scale, (20, 6)),
                        np.full((1, 6), 1e6), np.full((1, 6), -1e6)]).astype(np.float32)
    attrs = {"axis": 1} if per_axis else {}
    want = _ort([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], **attrs)], {"x": x}, {"s": scale, "z": zp},
                helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    props = {"axis": IntegerAttr(1, i64)} if per_axis else {}
    q_op = g.QuantizeLinearOp.create(operands=[_value(x), _value(scale), _value(zp)],
                                     result_types=[_tensor(x.shape, dtype)], properties=props)
    got = _eval(q_op, x, scale, zp)
    np.testing.assert_array_equal(got, want)
    assert (got == np.iinfo(dtype).max).any() and (got == np.iinfo(dtype).min).any()  # saturation was exercised

    want_dq = _ort([helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **attrs)], {"q": want}, {"s": scale, "z": zp},
                   TensorProto.FLOAT)
    dq_op = g.DequantizeLinearOp.create(operands=[_value(want), _value(scale), _value(zp)],
                                        result_types=[_tensor(x.shape, np.float32)], properties=props)
    np.testing.assert_array_equal(_eval(dq_op, want, scale, zp), want_dq)


def test_integer_conv_and_matmul_match_onnxruntime() -> None:
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, (2, 4, 7, 7)).astype(np.uint8)
    w = rng.integers(-128, 128, (6, 2, 3, 3)).astype(np.int8)
    want = _ort([helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 0, 2, 1], strides=[2, 1], group=2)],
                {"x": x}, {"w": w, "xz": np.array(np.uint8(131))}, TensorProto.INT32)
    op = g.Conv2dIntegerOp.create(
        operands=[_value(x), _value(w)], result_types=[_tensor(want.shape, np.int32)],
        properties={"padding": i64_array([1, 0, 2, 1]), "stride": i64_array([2, 1]), "groups": IntegerAttr(2, i64),
                    "input_zero_point": IntegerAttr(131, i64)})
    op.verify()
    np.testing.assert_array_equal(_eval(op, x, w), want)

    a = rng.integers(0, 256, (3, 5, 64)).astype(np.uint8)
    b = rng.integers(0, 256, (64, 9)).astype(np.uint8)
    want = _ort([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], {"a": a},
                {"b": b, "az": np.array(np.uint8(7)), "bz": np.array(np.uint8(200))}, TensorProto.INT32)
    op = g.MatmulIntegerOp.create(operands=[_value(a), _value(b)], result_types=[_tensor(want.shape, np.int32)],
                                  properties={"lhs_zero_point": IntegerAttr(7, i64), "rhs_zero_point": IntegerAttr(200, i64)})
    op.verify()
    np.testing.assert_array_equal(_eval(op, a, b), want)


def test_qlinear_kernels_are_integer_kernel_plus_requantize() -> None:
    """QLinearConv (per-channel weights, uint8 activations with zero points) = conv2d_integer
    with an int32 bias, then requantize by (x_scale * w_scale) / y_scale: bit-exact."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (1, 8, 9, 9)).astype(np.uint8)
    # 7-bit weights: onnxruntime's AVX2 int8 kernels saturate pairs of 8-bit products in int16
    # (helpers.onnxruntime_quant.REDUCED_RANGE); the reference must be exact on every machine
    w = rng.integers(-64, 64, (16, 8, 3, 3)).astype(np.int8)
    b = rng.integers(-5000, 5000, 16).astype(np.int32)
    xs, ys = np.float32(0.0173), np.float32(0.0456)  # (half the 8-bit weights' output scale)
    ws = (rng.random(16) * 0.01 + 0.001).astype(np.float32)
    inits = {"xs": np.array(xs), "xz": np.array(np.uint8(7)), "w": w, "ws": ws, "wz": np.zeros(16, np.int8),
             "ys": np.array(ys), "yz": np.array(np.uint8(5)), "b": b}
    want = _ort([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=[1, 1, 1, 1])],
                {"x": x}, inits, TensorProto.UINT8)
    conv = g.Conv2dIntegerOp.create(operands=[_value(x), _value(w), _value(b)],
                                    result_types=[TensorType(i32, [1, 16, 9, 9])],
                                    properties={"padding": i64_array([1, 1, 1, 1]), "input_zero_point": IntegerAttr(7, i64)})
    acc = _eval(conv, x, w, b)
    multiplier = (xs * ws / ys).astype(np.float32)
    requant = g.RequantizeOp.create(operands=[_value(acc), _value(multiplier)], result_types=[TensorType(UI8, [1, 16, 9, 9])],
                                    properties={"axis": IntegerAttr(1, i64), "zero_point": IntegerAttr(5, i64)})
    requant.verify()
    got = _eval(requant, acc, multiplier)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got)) > 50  # a real spread of output codes, saturation included
    assert (got == 255).any() and (got == 0).any()

    a = rng.integers(-128, 128, (4, 32)).astype(np.int8)
    bw = rng.integers(-64, 64, (32, 10)).astype(np.int8)  # (7-bit weights: above)
    as_, bs, ys = np.float32(0.031), np.float32(0.0071), np.float32(0.113)
    want = _ort([helper.make_node("QLinearMatMul", ["a", "as", "az", "bw", "bs", "bz", "ys", "yz"], ["y"])], {"a": a},
                {"as": np.array(as_), "az": np.array(np.int8(-3)), "bw": bw, "bs": np.array(bs), "bz": np.array(np.int8(0)),
                 "ys": np.array(ys), "yz": np.array(np.int8(1))}, TensorProto.INT8)
    mm = g.MatmulIntegerOp.create(operands=[_value(a), _value(bw)], result_types=[TensorType(i32, [4, 10])],
                                  properties={"lhs_zero_point": IntegerAttr(-3, i64)})
    acc = _eval(mm, a, bw)
    m = np.array(np.float32(as_ * bs / ys))
    requant = g.RequantizeOp.create(operands=[_value(acc), _value(m)], result_types=[TensorType(i8, [4, 10])],
                                    properties={"zero_point": IntegerAttr(1, i64)})
    np.testing.assert_array_equal(_eval(requant, acc, m), want)


def test_requantize_is_the_npu_requant_instruction() -> None:
    """graph.requantize with zero point 0 computes what the simulator's vec.requant stores:
    rint(fp32(a) * b) saturated to int8 (the simulator's own conversion, target/sim.py)."""
    from infer.target.sim import VECTOR_FUNCTIONS, store_converted

    rng = np.random.default_rng(6)
    acc = np.concatenate([rng.integers(-2**31, 2**31 - 1, 200), rng.integers(-3000, 3000, 800),
                          [2**31 - 1, -2**31, 0, 127, -128]]).astype(np.int32).reshape(1, -1)
    m = (rng.random(acc.shape[1]) * 0.05).astype(np.float32)
    hw = np.zeros(acc.shape, np.int8)
    store_converted(hw, VECTOR_FUNCTIONS["requant"](acc.astype(np.float32), m[None, :]), 0)
    op = g.RequantizeOp.create(operands=[_value(acc), _value(m)], result_types=[TensorType(i8, list(acc.shape))],
                               properties={"axis": IntegerAttr(1, i64)})
    np.testing.assert_array_equal(_eval(op, acc, m), hw)


def test_quantize_nan_and_infinity() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0], np.float32)
    op = g.QuantizeLinearOp.create(operands=[_value(x), _value(np.array(np.float32(0.1))), _value(np.array(np.int8(-5)))],
                                   result_types=[TensorType(i8, [4])])
    np.testing.assert_array_equal(_eval(op, x, np.float32(0.1), np.int8(-5)), [-5, 127, -128, -5])


_ = f32
