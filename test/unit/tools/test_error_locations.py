"""Errors below the graph level name the op they came from: the ONNX importer gives each graph
op its node's label as location (NameLoc), graph-to-tile passes a graph op's location to every
tile op it lowers to, so a lowering error at any level names the layer (issue 16, item 2)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from infer.dialects import tile as t
from infer.dialects.ir_io import describe_location, make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_to_tile import GraphToTilePass
from infer.tools.driver import compile as compile_model

CTX = make_context()


def test_tile_ops_carry_the_location_of_their_graph_op():
    text = """func.func @main(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %r = graph.relu %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %s = graph.softmax %r {axis = 1 : i64} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return %s : tensor<8x16xf32>
}"""
    m = parse_ir(CTX, text, "model.mlir")
    verify_module(m)
    attach_weights(m, WeightStore())
    GraphToTilePass().apply(CTX, m)
    where = {describe_location(op) for op in m.walk() if isinstance(op, t.DmaOp | t.VectorOp)}
    assert where == {"model.mlir:2:3", "model.mlir:3:3"}, where


def _model(path, second: str):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="act1"), helper.make_node(second, ["h"], ["y"], name="layer7")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def test_onnx_node_name_in_a_lowering_error(tmp_path):
    """A bitwise op (the vector unit has none: not lowered)."""
    x = helper.make_tensor_value_info("x", TensorProto.INT32, [2, 8])
    w = helper.make_tensor_value_info("w", TensorProto.INT32, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [2, 8])
    nodes = [helper.make_node("Abs", ["x"], ["h"], name="act1"), helper.make_node("BitwiseAnd", ["h", "w"], ["y"], name="layer7")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x, w], [y]), opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(Exception, match=r"m\.onnx: BitwiseAnd node 'layer7': error: 'graph\.bitwise_and' op graph-to-tile"):
        compile_model(str(tmp_path / "m.onnx"))


def test_onnx_model_with_located_ops_still_compiles(tmp_path):
    path = _model(tmp_path / "m.onnx", "Sigmoid")
    x = np.linspace(-3, 3, 16, dtype=np.float32).reshape(2, 8)
    (y,) = compile_model(str(path)).run([x])
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-6, atol=1e-6)
