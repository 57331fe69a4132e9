"""A ConvNeXt block's MLP as torch.onnx writes it: MatMul + Add on channels-last [1, H, W, C]
activations and GELU as its erf formula (Div, Erf, Add, Mul, Mul). Through ONNX it compiles to
what the same layers give through torch.export (graph.linear and graph.gelu): the formula is
raised to graph.gelu (graph-raise-activations), MatMul + Add to graph.linear
(graph-raise-linear), and a graph.matmul of the batched rows against one weight takes them as one
[H.W, C] operand. Before, the GELU was a kernel of five vector ops and each MatMul 8 batches of
8-row products (torchvision's ConvNeXt-T at 64x64 on server: 677,847 cycles through ONNX against
396,088 through torch.export; equal now)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import infer
from infer.dialects import graph as g
from infer.dialects.ir_io import make_context
from infer.passes.graph_to_tile import GraphToTilePass
from infer.passes.pipelines import GraphOptimizePass, GraphPrepareTilingPass, LowerToTilePass

onnxruntime = pytest.importorskip("onnxruntime")

H, W, C, F = 8, 8, 32, 96


def _mlp(path, gelu_formula: bool = True):
    import onnx

    rng = np.random.default_rng(4)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, H, W, C])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, H, W, C])
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("w1", rng.standard_normal((C, F)) / np.sqrt(C)), ("b1", rng.standard_normal(F) * 0.1),
        ("w2", rng.standard_normal((F, C)) / np.sqrt(F)), ("b2", rng.standard_normal(C) * 0.1),
        ("sqrt2", np.array(np.sqrt(2.0))), ("one", np.array(1.0)), ("half", np.array(0.5)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["p1"]), helper.make_node("Add", ["p1", "b1"], ["h"])]
    if gelu_formula:
        nodes += [helper.make_node("Div", ["h", "sqrt2"], ["s"]), helper.make_node("Erf", ["s"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["m"]),
                  helper.make_node("Mul", ["m", "half"], ["a"])]
    else:
        nodes += [helper.make_node("Gelu", ["h"], ["a"], domain="")]
    nodes += [helper.make_node("MatMul", ["a", "w2"], ["p2"]), helper.make_node("Add", ["p2", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [x], [y], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(path))
    return path


def test_the_gelu_formula_becomes_graph_gelu(tmp_path):
    module = infer.import_model(str(_mlp(tmp_path / "mlp.onnx"))).module
    GraphPrepareTilingPass().apply(make_context(), module)
    ops = [op for op in module.walk() if isinstance(op, g.GraphOp)]
    assert any(isinstance(op, g.GeluOp) and op.approximate.data == "none" for op in ops)
    assert not any(isinstance(op, g.ErfOp | g.DivOp) for op in ops), [op.name for op in ops]


@pytest.mark.parametrize("target", ["edge", "server"])
def test_channels_last_mlp_matches_onnxruntime_and_the_gelu_op(tmp_path, target, capfd):
    path = _mlp(tmp_path / "mlp.onnx")
    x = np.random.default_rng(0).standard_normal((1, H, W, C)).astype(np.float32)
    want = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    module = infer.import_model(str(path)).module
    capfd.readouterr()
    LowerToTilePass(target=target, debug_tiling=True).apply(make_context(), module)
    tiling = capfd.readouterr().err
    # both products take the 64 rows as one operand (no per-batch 8-row products)
    assert tiling.count(f"M={H * W} ") == 2 and "batch=" not in tiling, tiling
    # and so does a graph.matmul of the batched rows that is not raised to graph.linear
    module = infer.import_model(str(path)).module
    GraphOptimizePass().apply(make_context(), module)
    assert sum(isinstance(op, g.MatmulOp) for op in module.walk()) == 2
    capfd.readouterr()
    GraphToTilePass(target=target, debug_tiling=True).apply(make_context(), module)
    tiling = capfd.readouterr().err
    assert tiling.count(f"M={H * W} ") == 2 and "batch=" not in tiling, tiling
    exe = infer.compile(str(path), target=target)
    got = exe.run([x], check_races=True)[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
    # the same program as the model written with ONNX's own Gelu op (opset 20)
    op_exe = infer.compile(str(_mlp(tmp_path / "mlp_op.onnx", gelu_formula=False)), target=target)
    np.testing.assert_array_equal(op_exe.run([x])[0], got)
    assert op_exe.last_report.cycles == exe.last_report.cycles
