"""infer.passes.testing: the before/after semantics check, at graph and tile level
and across a level change (graph in, tile out)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination

from infer.dialects import graph as g
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_canonicalize import GraphCanonicalizePass
from infer.passes.graph_dce import GraphDCEPass
from infer.passes.testing import check_pass_preserves_semantics, random_inputs

CTX = make_context()

GRAPH = """
func.func @main(%x: tensor<3x5xf32>) -> tensor<3x5xf32> {
  %w = graph.weight @b : tensor<3x5xf32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %y = graph.mul %x, %one : (tensor<3x5xf32>, tensor<f32>) -> tensor<3x5xf32>
  %z = graph.add %y, %w : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  %r = graph.relu %z : (tensor<3x5xf32>) -> tensor<3x5xf32>
  %dead = graph.exp %r : (tensor<3x5xf32>) -> tensor<3x5xf32>
  func.return %r : tensor<3x5xf32>
}
"""

TILE = """
builtin.module attributes {{tile.target = "edge"}} {{
func.func @main(%x: memref<3x5xf32, "dram">, %y: memref<3x5xf32, "dram"> {{tile.output}}) {{
  %c0 = arith.constant 0 : index
  %c0b = arith.constant 0 : index
  %b = tile.weight @b : memref<3x5xf32, "dram">
  %t = tile.alloc : memref<3x5xf32, "spad">
  %u = tile.alloc : memref<3x5xf32, "spad">
  %h = tile.alloc : memref<3x5xbf16, "spad">
  tile.dma %x[%c0, %c0], %t[%c0, %c0] {{shape = array<i64: 3, 5>}} : memref<3x5xf32, "dram">, memref<3x5xf32, "spad">
  tile.dma %b[%c0b, %c0b], %u[%c0, %c0] {{shape = array<i64: 3, 5>}} : memref<3x5xf32, "dram">, memref<3x5xf32, "spad">
  tile.vector "add" %t[%c0, %c0], %t[%c0, %c0], %u[%c0, %c0] {{rows = 3 : i64, cols = 5 : i64, bmode = "tile"}} : memref<3x5xf32, "spad">, memref<3x5xf32, "spad">, memref<3x5xf32, "spad">
  {ROUND}
  tile.vector "relu" %t[%c0, %c0], %t[%c0, %c0] {{rows = 3 : i64, cols = 5 : i64}} : memref<3x5xf32, "spad">, memref<3x5xf32, "spad">
  tile.dma %t[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: 3, 5>}} : memref<3x5xf32, "spad">, memref<3x5xf32, "dram">
  func.return
}}
}}
"""

# a lowering that goes through bf16: only close to the f32 graph
ROUND_BF16 = """tile.vector "copy" %h[%c0, %c0], %t[%c0, %c0] {rows = 3 : i64, cols = 5 : i64} : memref<3x5xbf16, "spad">, memref<3x5xf32, "spad">
  tile.vector "copy" %t[%c0, %c0], %h[%c0, %c0] {rows = 3 : i64, cols = 5 : i64} : memref<3x5xf32, "spad">, memref<3x5xbf16, "spad">"""


def _store() -> WeightStore:
    store = WeightStore()
    store.set("b", np.random.default_rng(5).standard_normal((3, 5)).astype(np.float32))
    return store


def _graph_module() -> ModuleOp:
    module = parse_ir(CTX, GRAPH, "graph.mlir")
    verify_module(module)
    attach_weights(module, _store())
    return module


def _tile_text(round_bf16: bool = False) -> str:
    return TILE.format(ROUND=ROUND_BF16 if round_bf16 else "")


def _replace_body(module: ModuleOp, text: str) -> None:
    new = parse_ir(CTX, text, "lowered.mlir")
    for op in list(module.body.block.ops):
        module.body.block.erase_op(op)
    for op in list(new.body.block.ops):
        op.detach()
        module.body.block.add_op(op)
    module.attributes["tile.target"] = StringAttr("edge")


def test_graph_passes_by_instance_list_and_spec() -> None:
    module = _graph_module()
    before_text = str(module)
    res = check_pass_preserves_semantics(module, [GraphCanonicalizePass(), GraphDCEPass()], seeds=(0, 1, 2))
    assert len(res.before) == len(res.after) == len(res.inputs) == 3
    assert not any(isinstance(op, g.ExpOp | g.MulOp) for op in res.module.walk())
    assert str(module) == before_text  # the original is untouched
    res = check_pass_preserves_semantics(module, "graph-canonicalize,graph-dce")
    assert not any(isinstance(op, g.ExpOp) for op in res.module.walk())
    np.testing.assert_array_equal(res.after[0][0], np.maximum(res.inputs[0][0] + _store().get("b"), 0))


def test_wrong_pass_is_caught() -> None:
    def break_it(ctx, module: ModuleOp) -> None:
        for op in module.walk():
            if isinstance(op, g.ReluOp):
                op.attributes["x"] = StringAttr("y")  # harmless
            if isinstance(op, g.AddOp):
                op.operands[1] = op.operands[0]

    with pytest.raises(AssertionError, match="output #0 changed by the pass"):
        check_pass_preserves_semantics(_graph_module(), break_it)


def test_tile_level_module() -> None:
    module = parse_ir(CTX, _tile_text(), "tile.mlir")
    verify_module(module)
    attach_weights(module, _store())
    assert [x.shape for x in random_inputs(module, 0)] == [(3, 5)]  # outputs are not inputs
    res = check_pass_preserves_semantics(module, CommonSubexpressionElimination())
    assert sum(1 for op in res.module.walk() if op.name == "arith.constant") == 1


def test_level_change_graph_to_tile() -> None:
    module = _graph_module()
    res = check_pass_preserves_semantics(module, lambda ctx, m: _replace_body(m, _tile_text()))
    assert any(op.name == "tile.vector" for op in res.module.walk())
    # through bf16: not bit-exact, but within bf16's precision
    lower = lambda ctx, m: _replace_body(m, _tile_text(round_bf16=True))  # noqa: E731
    with pytest.raises(AssertionError, match="changed by the pass"):
        check_pass_preserves_semantics(module, lower)
    check_pass_preserves_semantics(module, lower, rtol=2**-8, atol=1e-6)


def test_explicit_inputs_and_output_mismatch() -> None:
    module = _graph_module()
    x = np.full((3, 5), 2.0, np.float32)
    res = check_pass_preserves_semantics(module, GraphDCEPass(), inputs=[[x]])
    np.testing.assert_array_equal(res.before[0][0], np.maximum(x + _store().get("b"), 0))

    def two_outputs(ctx, m: ModuleOp) -> None:
        _replace_body(m, _tile_text().replace(
            '%y: memref<3x5xf32, "dram"> {tile.output}',
            '%y: memref<3x5xf32, "dram"> {tile.output}, %y2: memref<3x5xf32, "dram"> {tile.output}'))

    with pytest.raises(AssertionError, match="1 outputs before the pass, 2 after"):
        check_pass_preserves_semantics(module, two_outputs)
