"""graph-to-tile preserves what modules compute: graph interpreter (before) vs
tile interpreter (after), on random inputs, for both targets and precisions.

Tolerances: precision=fp32 (3-pass bf16 emulation) within rtol = atol = 1e-4;
precision=bf16 (matmul inputs rounded to bf16, fp32 accumulation) within
rtol = atol = 5e-2 (bf16 has 8 mantissa bits: ~4e-3 relative per input).
"""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects.ir_io import IRError, make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_to_tile import GraphToTilePass
from infer.passes.testing import check_pass_preserves_semantics

CTX = make_context()
TOL = {"fp32": 1e-4, "bf16": 5e-2}


def module(text: str, weights: dict[str, np.ndarray] | None = None):
    m = parse_ir(CTX, text, "test.mlir")
    verify_module(m)
    store = WeightStore()
    for k, v in (weights or {}).items():
        store.set(k, v.astype(np.float32))
    attach_weights(m, store)
    return m


def check(m, target: str, precision: str, **kw):
    tol = TOL[precision]
    r = check_pass_preserves_semantics(m, GraphToTilePass(target=target, precision=precision),
                                       rtol=tol, atol=tol, **kw)
    return max(float(np.max(np.abs(a - b))) for A, B in zip(r.after, r.before) for a, b in zip(A, B))


RNG = np.random.default_rng(0)

MLP = """
func.func @main(%x: tensor<2x37x48xf32> {graph.name = "x"}) -> (tensor<2x37x10xf32> {graph.name = "y"}) {
  %w1 = graph.weight @fc1.weight : tensor<72x48xf32>
  %b1 = graph.weight @fc1.bias : tensor<72xf32>
  %w2 = graph.weight @fc2.weight : tensor<10x72xf32>
  %h = graph.linear %x, %w1, %b1 : (tensor<2x37x48xf32>, tensor<72x48xf32>, tensor<72xf32>) -> tensor<2x37x72xf32>
  %g = graph.gelu %h : (tensor<2x37x72xf32>) -> tensor<2x37x72xf32>
  %y = graph.linear %g, %w2 : (tensor<2x37x72xf32>, tensor<10x72xf32>) -> tensor<2x37x10xf32>
  %half = graph.constant dense<0.5> : tensor<f32>
  %y2 = graph.mul %y, %half : (tensor<2x37x10xf32>, tensor<f32>) -> tensor<2x37x10xf32>
  %t = graph.tanh %y2 : (tensor<2x37x10xf32>) -> tensor<2x37x10xf32>
  func.return %t : tensor<2x37x10xf32>
}
"""
MLP_W = {"fc1.weight": RNG.standard_normal((72, 48)) * 0.2, "fc1.bias": RNG.standard_normal(72),
         "fc2.weight": RNG.standard_normal((10, 72)) * 0.2}

BMM = """
func.func @main(%a: tensor<3x20x40xf32>, %b: tensor<3x33x40xf32>, %r: tensor<3x20x33xf32>, %c: tensor<33xf32>) -> tensor<3x20x33xf32> {
  %s = graph.matmul %a, %b {transpose_b = true} : (tensor<3x20x40xf32>, tensor<3x33x40xf32>) -> tensor<3x20x33xf32>
  %t = graph.add %s, %r : (tensor<3x20x33xf32>, tensor<3x20x33xf32>) -> tensor<3x20x33xf32>
  %u = graph.sub %t, %c : (tensor<3x20x33xf32>, tensor<33xf32>) -> tensor<3x20x33xf32>
  %v = graph.sigmoid %u : (tensor<3x20x33xf32>) -> tensor<3x20x33xf32>
  func.return %v : tensor<3x20x33xf32>
}
"""

ELEMENTWISE = """
func.func @main(%x: tensor<2x3x5x7xf32>, %s: tensor<1x3x1x1xf32>, %row: tensor<7xf32>) -> (tensor<2x3x5x7xf32>, tensor<2x3x5x7xf32>) {
  %a = graph.mul %x, %s : (tensor<2x3x5x7xf32>, tensor<1x3x1x1xf32>) -> tensor<2x3x5x7xf32>
  %b = graph.add %a, %row : (tensor<2x3x5x7xf32>, tensor<7xf32>) -> tensor<2x3x5x7xf32>
  %c = graph.silu %b : (tensor<2x3x5x7xf32>) -> tensor<2x3x5x7xf32>
  %d = graph.leaky_relu %x {alpha = 0.1 : f64} : (tensor<2x3x5x7xf32>) -> tensor<2x3x5x7xf32>
  %two = graph.constant dense<2.0> : tensor<f32>
  %e = graph.div %d, %two : (tensor<2x3x5x7xf32>, tensor<f32>) -> tensor<2x3x5x7xf32>
  %f = graph.clip %e {min = -0.1 : f64, max = 0.6 : f64} : (tensor<2x3x5x7xf32>) -> tensor<2x3x5x7xf32>
  func.return %c, %f : tensor<2x3x5x7xf32>, tensor<2x3x5x7xf32>
}
"""


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_mlp(target, precision):
    check(module(MLP, MLP_W), target, precision)


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_batched_matmul_transpose_b_epilogue(target, precision):
    check(module(BMM), target, precision)


@pytest.mark.parametrize("target", ["edge", "server"])
def test_elementwise_broadcasting(target):
    check(module(ELEMENTWISE), target, "fp32")


def test_fp32_emulation_is_tight():
    err = check(module(MLP, MLP_W), "edge", "fp32")
    assert err < 2e-5


def test_unsupported_op_is_located_error():
    m = module("""
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = graph.sin %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
""")
    with pytest.raises(IRError, match=r"test.mlir:3:\d+: error: 'graph.sin' op graph-to-tile"):
        GraphToTilePass().apply(CTX, m)


def test_tiling_differs_between_targets():
    logs = {}
    for target in ("edge", "server"):
        m = module(MLP, MLP_W)
        from infer.passes import graph_to_tile as g2t

        c = g2t.Ctx(g2t.load_config(target), "fp32", {}, False, m)
        from xdsl.dialects import func

        fn = next(o for o in m.ops if isinstance(o, func.FuncOp))
        g2t.FunctionLowering(c, fn).run()
        logs[target] = [line for line in c.log if "tiles" in line]
    assert logs["edge"] != logs["server"]


def test_override_applies():
    m = module(MLP, MLP_W)
    GraphToTilePass(overrides="kernel0=16x16x16").apply(CTX, m)
    text = str(m)
    assert "memref<16x16xbf16, \"spad\">" in text
