"""Small ONNX models built with onnx.helper, shared by the runtime and e2e tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp_onnx(path, batch=4, d_in=16, hidden=32, d_out=10, seed=0):
    """Write a 2-layer MLP (MatMul, Add, Relu, MatMul, Add; random weights) to `path`."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), n)
             for n, s in (("w1", (d_in, hidden)), ("b1", (hidden,)), ("w2", (hidden, d_out)), ("b2", (d_out,)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, d_in])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, d_out])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path
