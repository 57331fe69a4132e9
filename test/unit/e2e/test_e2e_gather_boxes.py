"""Gathers of compile-time indices on an inner axis (torch.export's torch.roll in Swin's shifted
windows, nearest-neighbour upsampling, reversals) run as a few strided box copies on the
simulator (gather.index_boxes) instead of one box copy per index; copies are exact, so the
outputs equal numpy's take bit for bit, with the race checker on."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import infer
from infer.passes.graph_to_tile.gather import index_boxes

PATTERNS = {
    "roll": [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 0, 1, 2],
    "reversal": list(range(13, -1, -1)),
    "nearest_x2": [i // 2 for i in range(28)],
    "nearest_x3": [i // 3 for i in range(42)],
    "repeats": [0, 0, 0, 5, 5, 9, 9, 9, 9],
    "irregular": [7, 2, 11, 2, 0, 13],
    "long": [i % 14 for i in range(70)],
}


def _model(path):
    import onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 14, 6])
    nodes, outputs, inits = [], [], []
    for name, idx in PATTERNS.items():
        inits.append(numpy_helper.from_array(np.array(idx, np.int64), f"{name}_idx"))
        nodes.append(helper.make_node("Gather", ["x", f"{name}_idx"], [name], axis=1))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, len(idx), 6]))
    graph = helper.make_graph(nodes, "gathers", [x], outputs, initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def test_index_boxes_are_few():
    counts = {name: len(index_boxes(np.array(idx))) for name, idx in PATTERNS.items()}
    assert counts == {"roll": 2, "reversal": 1, "nearest_x2": 2, "nearest_x3": 3, "repeats": 3,
                      "irregular": 3, "long": 5}


@pytest.mark.parametrize("target", ["edge", "server"])
def test_compile_time_gathers_match_numpy(tmp_path, target):
    x = np.random.default_rng(0).standard_normal((2, 14, 6)).astype(np.float32)
    exe = infer.compile(str(_model(tmp_path / "gathers.onnx")), target=target)
    got = exe.run([x], check_races=True)
    for (name, idx), out in zip(PATTERNS.items(), got, strict=True):
        np.testing.assert_array_equal(out, np.take(x, idx, axis=1), err_msg=name)
