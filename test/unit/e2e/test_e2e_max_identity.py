"""Maxima start from -inf, max's identity: a row of -inf (an attention bias row whose mask
is all false) or of values below -1e30 reduces to itself, on both configs. With a finite
stand-in (-1e30) those rows reduced to -1e30, so a model's "row fully masked" test
(ReduceMax(bias) == -inf, then Where(..., 0, softmax)) never fired and gave NaN rows where
onnxruntime gives zeros."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import infer
from helpers.sim_modes import assert_sim_modes_agree

onnxruntime = pytest.importorskip("onnxruntime")


def _model(path):
    import onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 8])
    nodes = [
        helper.make_node("ReduceMax", ["x", "last"], ["row_max"], keepdims=1),
        helper.make_node("ReduceMin", ["x", "last"], ["row_min"], keepdims=1),
        helper.make_node("ReduceMax", ["x", "channels"], ["channel_max"], keepdims=1),
        helper.make_node("ArgMax", ["x"], ["arg_max"], axis=3, keepdims=1),
        helper.make_node("MaxPool", ["x"], ["pooled"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalMaxPool", ["x"], ["global_max"]),
    ]
    outputs = [helper.make_tensor_value_info(n, elem, shape) for n, elem, shape in (
        ("row_max", TensorProto.FLOAT, [1, 3, 6, 1]), ("row_min", TensorProto.FLOAT, [1, 3, 6, 1]),
        ("channel_max", TensorProto.FLOAT, [1, 1, 6, 8]), ("arg_max", TensorProto.INT64, [1, 3, 6, 1]),
        ("pooled", TensorProto.FLOAT, [1, 3, 3, 4]), ("global_max", TensorProto.FLOAT, [1, 3, 1, 1]))]
    graph = helper.make_graph(nodes, "maxima", [x], outputs, initializer=[
        numpy_helper.from_array(np.array([3], np.int64), "last"),
        numpy_helper.from_array(np.array([1], np.int64), "channels")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def _input() -> np.ndarray:
    x = np.random.default_rng(2).standard_normal((1, 3, 6, 8)).astype(np.float32)
    x[0, :, 0, :] = -np.inf  # whole rows of -inf in every channel
    x[0, 1, 2:4, :] = -3e38  # rows below the old stand-in
    x[0, 2, 4, 3] = -np.inf  # one -inf among numbers
    x[0, 0, 5, :] = np.inf  # and +inf rows for the minimum
    return x


@pytest.mark.parametrize("target", ["edge", "server"])
def test_maxima_of_rows_of_minus_infinity_are_minus_infinity(tmp_path, target):
    path = _model(tmp_path / "maxima.onnx")
    x = _input()
    want = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert np.isneginf(want[0][0, :, 0, 0]).all() and (want[0][0, 1, 2:4, 0] == np.float32(-3e38)).all()
    exe = infer.compile(str(path), target=target)
    got = exe.run([x], check_races=True)
    for name, g, w in zip(exe.output_names, got, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=name)
    assert_sim_modes_agree(exe, [x], got)
