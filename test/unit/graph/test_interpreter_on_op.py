"""`run_module(..., on_op=...)`: intermediate values by top-level op (a graph.kernel counts
as one op; its region's ops are not reported); results unchanged."""

from __future__ import annotations

import numpy as np

from infer.dialects.graph_interpreter import run_module

from helpers.interpreter_cases import parse

IR = """
func.func @main(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>) -> tensor<4x16xf32> {
  %n = graph.neg %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %r = graph.kernel "matmul" (%n, %w) : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32> {
  ^bb0(%a: tensor<4x8xf32>, %wa: tensor<16x8xf32>):
    %y = graph.linear %a, %wa : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
    %z = graph.relu %y : (tensor<4x16xf32>) -> tensor<4x16xf32>
    graph.yield %z : tensor<4x16xf32>
  }
  %s = graph.mul %r, %r : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  func.return %s : tensor<4x16xf32>
}
"""


def test_on_op_reports_top_level_ops_in_order():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    module = parse(IR)
    seen = []
    (out,) = run_module(module, [x, w], on_op=lambda i, op, res: seen.append((i, op.name, res)))
    assert [(i, n) for i, n, _ in seen] == [(0, "graph.neg"), (1, "graph.kernel"), (2, "graph.mul"),
                                            (3, "func.return")]
    np.testing.assert_array_equal(seen[0][2][0], -x)
    kernel = np.maximum(-x @ w.T, 0)
    np.testing.assert_allclose(seen[1][2][0], kernel, rtol=1e-6)
    assert seen[3][2] == []
    (plain,) = run_module(parse(IR), [x, w])
    np.testing.assert_array_equal(out, plain)
    np.testing.assert_array_equal(out, seen[2][2][0])
