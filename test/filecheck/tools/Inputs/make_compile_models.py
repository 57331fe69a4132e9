"""Writes the ONNX models the compile/run lit test compiles (argv[1] = output folder):
mlp.onnx, a 2-layer perceptron with biases (x[4x16] -> y[4x10])."""

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = Path(sys.argv[1])
rng = np.random.default_rng(0)
inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), n)
         for n, s in (("w1", (16, 32)), ("b1", (32,)), ("w2", (32, 10)), ("b2", (10,)))]
nodes = [
    helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
    helper.make_node("Add", ["h", "b1"], ["h1"], name="bias1"),
    helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
    helper.make_node("MatMul", ["h2", "w2"], ["o"], name="fc2"),
    helper.make_node("Add", ["o", "b2"], ["y"], name="bias2"),
]
graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])], inits)
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(out / "mlp.onnx"))
