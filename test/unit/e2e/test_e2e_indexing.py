"""Runtime-indexed ops compiled for both configs (frontend/indexing.py): a KV cache written at
runtime positions with TensorScatter (circular), ScatterND rows, ScatterElements with a max
reduction, GatherND with a batch dim, and an integer CumSum; the outputs equal onnxruntime's
exactly, and the fast simulation modes agree with the race-checked reference run bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import infer
from helpers.sim_modes import assert_sim_modes_agree

onnxruntime = pytest.importorskip("onnxruntime")


def _model(path):
    import onnx

    nodes = [helper.make_node("TensorScatter", ["cache", "new", "pos"], ["cache_out"], mode="circular", name="kv"),
             helper.make_node("ScatterND", ["table", "rows", "row_values"], ["table_out"], name="rows"),
             helper.make_node("ScatterElements", ["scores", "cls", "votes"], ["scores_out"], axis=1,
                              reduction="max", name="vote"),
             helper.make_node("GatherND", ["table", "picks"], ["picked"], batch_dims=1, name="pick"),
             helper.make_node("CumSum", ["counts", "axis"], ["running"], reverse=1, name="running")]
    f, i = TensorProto.FLOAT, TensorProto.INT64
    inputs = [helper.make_tensor_value_info("cache", f, [2, 4, 16, 8]), helper.make_tensor_value_info("new", f, [2, 4, 3, 8]),
              helper.make_tensor_value_info("pos", i, [2]), helper.make_tensor_value_info("table", f, [10, 12]),
              helper.make_tensor_value_info("rows", i, [3, 1]), helper.make_tensor_value_info("row_values", f, [3, 12]),
              helper.make_tensor_value_info("scores", f, [5, 7]), helper.make_tensor_value_info("cls", i, [5, 4]),
              helper.make_tensor_value_info("votes", f, [5, 4]), helper.make_tensor_value_info("picks", i, [10, 2, 1]),
              helper.make_tensor_value_info("counts", TensorProto.INT32, [3, 9])]
    outputs = [helper.make_tensor_value_info("cache_out", f, [2, 4, 16, 8]),
               helper.make_tensor_value_info("table_out", f, [10, 12]),
               helper.make_tensor_value_info("scores_out", f, [5, 7]),
               helper.make_tensor_value_info("picked", f, [10, 2]),
               helper.make_tensor_value_info("running", TensorProto.INT32, [3, 9])]
    axis = onnx.numpy_helper.from_array(np.array(1, np.int64), "axis")
    onnx.save(helper.make_model(helper.make_graph(nodes, "indexing", inputs, outputs, initializer=[axis]),
                                opset_imports=[helper.make_opsetid("", 24)]), str(path))
    return path


@pytest.mark.parametrize("target", ["edge", "server"])
def test_indexing_ops_agree_with_onnxruntime(tmp_path, target):
    path = _model(tmp_path / "indexing.onnx")
    rng = np.random.default_rng(3)
    feeds = {"cache": rng.standard_normal((2, 4, 16, 8)).astype(np.float32),
             "new": rng.standard_normal((2, 4, 3, 8)).astype(np.float32),
             "pos": np.array([5, 14], np.int64),  # 14, 15, 0: wraps around
             "table": rng.standard_normal((10, 12)).astype(np.float32),
             "rows": np.array([[7], [-1], [2]], np.int64),
             "row_values": rng.standard_normal((3, 12)).astype(np.float32),
             "scores": rng.standard_normal((5, 7)).astype(np.float32),
             "cls": rng.integers(0, 7, (5, 4)).astype(np.int64),
             "votes": rng.standard_normal((5, 4)).astype(np.float32),
             "picks": rng.integers(-12, 12, (10, 2, 1)).astype(np.int64),
             "counts": rng.integers(-50, 50, (3, 9)).astype(np.int32)}
    expected = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    exe = infer.compile(str(path), target=target)
    inputs = [feeds[n] for n in exe.input_names]
    ys = exe.run(inputs, check_races=True)
    for y, want in zip(ys, expected):
        np.testing.assert_array_equal(y, want)
    assert_sim_modes_agree(exe, inputs, ys)
