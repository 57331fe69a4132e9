"""3-D pooling (a 2-D pool over (H, W), then one over D) and a 2-D average whose padding goes
beyond half its kernel (an explicit pad and a compile-time count ratio) compiled for both
configs: the outputs agree with onnxruntime, and the fast simulation modes with the
race-checked reference run bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import infer
from helpers.sim_modes import assert_sim_modes_agree

onnxruntime = pytest.importorskip("onnxruntime")


def _model(path):
    import onnx

    nodes = [helper.make_node("MaxPool", ["video"], ["max3d"], kernel_shape=[3, 2, 2], strides=[2, 2, 2],
                              dilations=[2, 1, 1], ceil_mode=1, name="max3d"),
             helper.make_node("AveragePool", ["video"], ["avg3d"], kernel_shape=[2, 3, 3], strides=[1, 2, 2],
                              pads=[1, 1, 1, 0, 1, 1], count_include_pad=0, name="avg3d"),
             helper.make_node("AveragePool", ["image"], ["avg_wide"], kernel_shape=[3, 3], pads=[2, 2, 2, 2],
                              count_include_pad=0, name="avg_wide")]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "pools", [helper.make_tensor_value_info("video", f, [1, 4, 8, 10, 12]),
                         helper.make_tensor_value_info("image", f, [2, 3, 9, 7])],
        [helper.make_tensor_value_info("max3d", f, [1, 4, 3, 5, 6]), helper.make_tensor_value_info("avg3d", f, [1, 4, 8, 5, 6]),
         helper.make_tensor_value_info("avg_wide", f, [2, 3, 11, 9])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), str(path))
    return path


@pytest.mark.parametrize("target", ["edge", "server"])
def test_3d_and_wide_padded_pools_agree_with_onnxruntime(tmp_path, target):
    path = _model(tmp_path / "pools.onnx")
    rng = np.random.default_rng(5)
    feeds = {"video": rng.standard_normal((1, 4, 8, 10, 12)).astype(np.float32),
             "image": rng.standard_normal((2, 3, 9, 7)).astype(np.float32)}
    expected = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    exe = infer.compile(str(path), target=target)
    inputs = [feeds[n] for n in exe.input_names]
    ys = exe.run(inputs, check_races=True)
    for y, want in zip(ys, expected):
        assert y.shape == want.shape
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    assert_sim_modes_agree(exe, inputs, ys)
