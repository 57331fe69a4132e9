"""graph-to-tile: integer model inputs at the function boundary (docs/tiling.md,
"Integer model inputs"). i64 arguments become i32 DRAM memrefs with
`tile.host_dtype = "i64"`; int -> f32 casts are vector copies int32 -> fp32; int -> i1
casts used as attention masks become additive f32 masks (0 / -1e30). Graph interpreter
(before) vs tile interpreter (after)."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_to_tile import GraphToTilePass

CTX = make_context()
TOL = {"fp32": 1e-4, "bf16": 5e-2}
RNG = np.random.default_rng(3)


def module(text: str):
    m = parse_ir(CTX, text, "test.mlir")
    verify_module(m)
    attach_weights(m, WeightStore())
    return m


def check(m, target: str, precision: str, inputs):
    """Graph interpreter on the i64 inputs vs tile interpreter on them narrowed to i32
    (what the runtime places in DRAM for `tile.host_dtype = "i64"` arguments)."""
    from infer.passes.testing import run_entry

    tol = TOL[precision]
    before = m.clone()
    GraphToTilePass(target=target, precision=precision).apply(CTX, m)
    refs = run_entry(before, list(inputs))
    outs = run_entry(m, [a.astype(np.int32) if a.dtype == np.int64 else a for a in inputs])
    for y, r in zip(outs, refs, strict=True):
        np.testing.assert_allclose(y, r, rtol=tol, atol=tol)
    return m


MEAN_POOL = """func.func @main(%x: tensor<2x7x5xf32>, %mask: tensor<2x7xi64>) -> (tensor<2x7x5xf32>, tensor<2x7xf32>) {
  %f = graph.cast %mask : (tensor<2x7xi64>) -> tensor<2x7xf32>
  %r = graph.reshape %f : (tensor<2x7xf32>) -> tensor<2x7x1xf32>
  %y = graph.mul %x, %r : (tensor<2x7x5xf32>, tensor<2x7x1xf32>) -> tensor<2x7x5xf32>
  func.return %y, %f : tensor<2x7x5xf32>, tensor<2x7xf32>
}
"""


@pytest.mark.parametrize("target", ["edge", "server"])
def test_i64_cast_to_f32(target):
    m = module(MEAN_POOL)
    mask = np.array([[1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, -3, 70000]], np.int64)
    r = check(m, target, "fp32", [RNG.standard_normal((2, 7, 5)).astype(np.float32), mask])
    text = str(r)
    assert 'memref<2x7xi32, "dram"> {graph.name = "mask", tile.host_dtype = "i64"}' in text.replace(
        "%mask: ", "").replace("%1: ", "") or 'tile.host_dtype = "i64"' in text
    assert "xi64" not in text


ATTN = """func.func @main(%q: tensor<2x2x6x8xf32>, %k: tensor<2x2x9x8xf32>, %v: tensor<2x2x9x8xf32>, %mask: tensor<2x9xi64>) -> tensor<2x2x6x8xf32> {
  %b = graph.cast %mask : (tensor<2x9xi64>) -> tensor<2x9xi1>
  %m = graph.reshape %b : (tensor<2x9xi1>) -> tensor<2x1x1x9xi1>
  %o = graph.attention %q, %k, %v, %m : (tensor<2x2x6x8xf32>, tensor<2x2x9x8xf32>, tensor<2x2x9x8xf32>, tensor<2x1x1x9xi1>) -> tensor<2x2x6x8xf32>
  func.return %o : tensor<2x2x6x8xf32>
}
"""


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_i64_attention_mask(target, precision):
    m = module(ATTN)
    mask = np.array([[1, 1, 1, 1, 1, 0, 0, 0, 0], [1, 0, 2, 1, 1, 1, 1, 1, -1]], np.int64)
    qkv = [RNG.standard_normal(s).astype(np.float32) for s in ((2, 2, 6, 8), (2, 2, 9, 8), (2, 2, 9, 8))]
    r = check(m, target, precision, [*qkv, mask])
    assert 'tile.host_dtype = "i64"' in str(r)
