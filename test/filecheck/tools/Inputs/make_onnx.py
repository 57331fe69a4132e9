"""Writes the small ONNX models the tools lit tests import (argv[1] = output folder)."""

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = Path(sys.argv[1])
rng = np.random.default_rng(0)
w1 = numpy_helper.from_array(rng.standard_normal((4, 32)).astype(np.float32), "w1")
w2 = numpy_helper.from_array(rng.standard_normal((32, 3)).astype(np.float32), "w2")


def mlp(batch):
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2"),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        [w1, w2],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


onnx.save(mlp(2), str(out / "mlp.onnx"))
onnx.save(mlp("batch"), str(out / "dynamic.onnx"))
data = (out / "mlp.onnx").read_bytes()
(out / "truncated.onnx").write_bytes(data[: len(data) // 2])
