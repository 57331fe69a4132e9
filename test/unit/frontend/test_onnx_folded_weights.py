"""ONNX DequantizeLinear of initializers the integer kernels do not take (FP8, int4/uint4,
int16, blocked scales): folded to float32 weights at import, checked against onnx's reference
evaluator and, compiled, against numpy; run-time inputs of those types are one error."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import infer
from infer.dialects.graph_interpreter import run_module
from infer.frontend import ModelImportError
from infer.frontend.onnx_import import import_onnx

RNG = np.random.default_rng(11)


def _model(q, scale, zero_point=None, nodes_after=("Identity",), **attrs):
    import onnx

    inits = [numpy_helper.from_array(q, "q"), numpy_helper.from_array(scale, "s")]
    inputs = ["q", "s"]
    if zero_point is not None:
        inits.append(numpy_helper.from_array(zero_point, "z"))
        inputs.append("z")
    nodes = [helper.make_node("DequantizeLinear", inputs, ["w"], **attrs)]
    if nodes_after == ("Identity",):
        nodes.append(helper.make_node("Identity", ["w"], ["y"]))
        graph_inputs, out_shape = [], list(q.shape)
    else:
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["y"]))
        graph_inputs, out_shape = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, q.shape[0]])], [3, q.shape[1]]
    graph = helper.make_graph(nodes, "g", graph_inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              initializer=inits)
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


CASES = [
    ("fp8 e4m3 per tensor", lambda: (RNG.standard_normal((48, 8)).astype(ml_dtypes.float8_e4m3fn),
                                     np.array(0.25, np.float32), None, {})),
    ("fp8 e5m2 per axis", lambda: (RNG.standard_normal((48, 8)).astype(ml_dtypes.float8_e5m2),
                                   (RNG.random(8) + 0.5).astype(np.float32), None, {"axis": 1})),
    ("int4 blocks of 16 with zero points", lambda: (RNG.integers(-8, 8, (48, 8)).astype(ml_dtypes.int4),
                                                    (RNG.random((3, 8)) + 0.1).astype(np.float32),
                                                    RNG.integers(-2, 3, (3, 8)).astype(ml_dtypes.int4),
                                                    {"axis": 0, "block_size": 16})),
    ("uint4 ragged blocks of 20", lambda: (RNG.integers(0, 16, (48, 8)).astype(ml_dtypes.uint4),
                                           (RNG.random((3, 8)) + 0.1).astype(np.float32),
                                           np.full((3, 8), 8, ml_dtypes.uint4), {"axis": 0, "block_size": 20})),
    ("int8 blocks along the columns", lambda: (RNG.integers(-100, 100, (48, 8)).astype(np.int8),
                                               (RNG.random((48, 2)) + 0.1).astype(np.float32), None,
                                               {"axis": 1, "block_size": 4})),
]


@pytest.mark.parametrize("make", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_dequantized_initializers_are_folded_as_onnx_defines(make):
    from onnx.reference import ReferenceEvaluator

    q, scale, zero_point, attrs = make()
    model = _model(q, scale, zero_point, **attrs)
    module = import_onnx(model)
    assert "graph.dequantize" not in str(module)
    (got,) = run_module(module, {})
    (want,) = ReferenceEvaluator(model).run(None, {})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", ["edge", "server"])
def test_an_int4_weight_only_matmul_compiles(target):
    q = RNG.integers(-8, 8, (64, 8)).astype(ml_dtypes.int4)
    scale = (RNG.random((2, 8)) + 0.1).astype(np.float32)
    model = _model(q, scale, None, nodes_after=("MatMul",), axis=0, block_size=32)
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    weight = q.astype(np.float64) * np.repeat(scale, 32, axis=0)
    (y,) = infer.compile(model, target=target).run([x])
    np.testing.assert_allclose(y, x.astype(np.float64) @ weight, rtol=1e-4, atol=1e-3)


def test_a_run_time_fp8_input_is_one_error():
    import onnx

    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["x", "s"], ["y"], name="dq")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[numpy_helper.from_array(np.array(0.5, np.float32), "s")])
    model = onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    with pytest.raises(ModelImportError, match=r"DequantizeLinear node 'dq': the input is float8_e4m3fn, which is "
                                               r"supported for initializers only"):
        import_onnx(model)


def test_a_blocked_scale_of_the_wrong_shape_is_one_error():
    q = RNG.integers(-8, 8, (48, 8)).astype(ml_dtypes.int4)
    model = _model(q, np.ones((2, 8), np.float32), axis=0, block_size=16)
    with pytest.raises(ModelImportError, match=r"a blocked scale \(block_size 16 on axis 0\) must have shape \[3, 8\], got \[2, 8\]"):
        import_onnx(model)
