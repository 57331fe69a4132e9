"""A classifier's head written in ONNX (a linear layer, softmax, TopK of 5) compiled for both
configs: the top-5 classes and their probabilities agree with onnxruntime, and the fast
simulation modes with the race-checked reference run bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import infer
from helpers.sim_modes import assert_sim_modes_agree

onnxruntime = pytest.importorskip("onnxruntime")


def _classifier(path, rng):
    import onnx

    w = (rng.standard_normal((100, 64)) * 0.3).astype(np.float32)
    b = rng.standard_normal(100).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["logits"], transB=1, name="fc"),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"),
             helper.make_node("TopK", ["probs", "k"], ["top_probs", "top_classes"], axis=-1, name="top5")]
    graph = helper.make_graph(
        nodes, "classifier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 64])],
        [helper.make_tensor_value_info("top_probs", TensorProto.FLOAT, [6, 5]),
         helper.make_tensor_value_info("top_classes", TensorProto.INT64, [6, 5])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
                     numpy_helper.from_array(np.array([5], np.int64), "k")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("target", ["edge", "server"])
def test_top5_of_a_classifier_agrees_with_onnxruntime(tmp_path, target):
    rng = np.random.default_rng(4)
    path = _classifier(tmp_path / "classifier.onnx", rng)
    x = rng.standard_normal((6, 64)).astype(np.float32)
    probs, classes = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    exe = infer.compile(str(path), target=target)
    ys = exe.run([x], check_races=True)
    np.testing.assert_array_equal(ys[1], classes)
    np.testing.assert_allclose(ys[0], probs, rtol=1e-4, atol=1e-6)
    assert_sim_modes_agree(exe, [x], ys)
