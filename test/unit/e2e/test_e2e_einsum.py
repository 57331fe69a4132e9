"""Attention written with ONNX Einsum (scores, softmax, weighted values with the heads moved)
compiled for both configs: Einsum imports as transposes, reshapes and batched matmuls
(frontend/einsum.py) that the compiler tiles; the simulated outputs agree with onnxruntime and
the fast simulation modes with the race-checked reference run bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import infer
from helpers.sim_modes import assert_sim_modes_agree

onnxruntime = pytest.importorskip("onnxruntime")


def _attention(path):
    import onnx

    nodes = [helper.make_node("Einsum", ["q", "k"], ["s"], equation="bhqd,bhkd->bhqk", name="scores"),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
             helper.make_node("Einsum", ["p", "v"], ["o"], equation="bhqk,bhkd->bqhd", name="values")]
    shape = [2, 4, 16, 32]
    graph = helper.make_graph(nodes, "attention",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"],
                              [helper.make_tensor_value_info("o", TensorProto.FLOAT, [2, 16, 4, 32])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("target", ["edge", "server"])
def test_einsum_attention_agrees_with_onnxruntime(tmp_path, target):
    path = _attention(tmp_path / "attention.onnx")
    rng = np.random.default_rng(2)
    feeds = {n: rng.standard_normal((2, 4, 16, 32)).astype(np.float32) for n in "qkv"}
    (expected,) = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    exe = infer.compile(str(path), target=target)
    inputs = [feeds[n] for n in exe.input_names]
    ys = exe.run(inputs, check_races=True)
    np.testing.assert_allclose(ys[0], expected, rtol=1e-4, atol=1e-4)
    assert_sim_modes_agree(exe, inputs, ys)
