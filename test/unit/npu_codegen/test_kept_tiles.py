"""One-tile results of elementwise kernels and reductions kept on chip (elementwise.py
`KEPT_TILE_READERS`, reductions.py) on the server config: a sentence embedding's mean pooling and
L2 normalisation (mul by the mask, sums over the sequence, clamp, divide, squares, sum, sqrt,
divide), ten small kernels whose every boundary was a DRAM round trip. The next kernels read
the kept tiles in place: no loads of those results, bit-identical to the tile interpreter with the
race checker on and to the program that loads them, close to the graph interpreter, and fewer
cycles."""

from __future__ import annotations

import numpy as np

from infer.dialects import tile as t
from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import parse_with_weights
from helpers.tile_programs import npu_matches_tile

S, H = 128, 384
POOLING = f"""
func.func @main(%h: tensor<1x{S}x{H}xf32> {{graph.name = "h"}}, %m: tensor<1x{S}x1xf32> {{graph.name = "m"}}) -> (tensor<1x{H}xf32> {{graph.name = "e"}}) {{
  %p = graph.mul %h, %m : (tensor<1x{S}x{H}xf32>, tensor<1x{S}x1xf32>) -> tensor<1x{S}x{H}xf32>
  %s = graph.reduce_sum %p {{axes = array<i64: 1>, keepdims = false}} : (tensor<1x{S}x{H}xf32>) -> tensor<1x{H}xf32>
  %c = graph.reduce_sum %m {{axes = array<i64: 1>, keepdims = false}} : (tensor<1x{S}x1xf32>) -> tensor<1x1xf32>
  %eps = graph.constant dense<1.0e-9> : tensor<1xf32>
  %cc = graph.maximum %c, %eps : (tensor<1x1xf32>, tensor<1xf32>) -> tensor<1x1xf32>
  %mean = graph.div %s, %cc : (tensor<1x{H}xf32>, tensor<1x1xf32>) -> tensor<1x{H}xf32>
  %sq = graph.mul %mean, %mean : (tensor<1x{H}xf32>, tensor<1x{H}xf32>) -> tensor<1x{H}xf32>
  %n2 = graph.reduce_sum %sq {{axes = array<i64: 1>}} : (tensor<1x{H}xf32>) -> tensor<1x1xf32>
  %n = graph.sqrt %n2 : (tensor<1x1xf32>) -> tensor<1x1xf32>
  %e = graph.div %mean, %n : (tensor<1x{H}xf32>, tensor<1x1xf32>) -> tensor<1x{H}xf32>
  func.return %e : tensor<1x{H}xf32>
}}
"""


def run(inputs, keep: bool, monkeypatch) -> tuple[np.ndarray, int, int]:
    """-> (the simulated output, cycles, DMA loads from DRAM buffers in the tile IR)."""
    from infer.passes.graph_to_tile import context

    if not keep:  # every kept tile refused: each kernel loads its operands from DRAM
        monkeypatch.setattr(context.LoweringContext, "on_chip_as", lambda self, dram, shape: None)
    module = parse_with_weights(POOLING, {}, "pooling.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=fp32},tile-plan-memory{target=server}", module)
    loads = sum(1 for op in module.walk() if isinstance(op, t.DmaOp) and t.space_of(op.src) == "dram")
    (y,), counters = npu_matches_tile(module, inputs, "server")
    monkeypatch.undo()
    return y, counters.cycles, loads


def test_kept_tiles_read_in_place(monkeypatch):
    rng = np.random.default_rng(6)
    h = rng.standard_normal((1, S, H)).astype(np.float32)
    m = (rng.random((1, S, 1)) < 0.8).astype(np.float32)
    graph_ref = run_entry(parse_with_weights(POOLING, {}, "pooling.mlir"), [h, m])[0]
    y, cycles, loads = run([h, m], True, monkeypatch)
    y_loaded, cycles_loaded, loads_loaded = run([h, m], False, monkeypatch)
    np.testing.assert_allclose(y, graph_ref, rtol=1e-5, atol=1e-6)
    assert y.tobytes() == y_loaded.tobytes()
    assert loads < loads_loaded, (loads, loads_loaded)
    assert cycles < 0.8 * cycles_loaded, (cycles, cycles_loaded)
