"""One-tile results of elementwise kernels, reductions and integer-input casts kept on chip
(context.py `KEPT_TILE_READERS`, `KEPT_TINY_BYTES`; elementwise.py, reductions.py,
integer_inputs.py) on the server config: a sentence embedding's mean pooling and L2
normalisation (the attention mask cast to f32, mul by the mask, sums over the sequence, clamp,
divide, squares, sum, sqrt, divide), small kernels whose every boundary was a DRAM round trip.
The next kernels read the kept tiles in place: no loads but of the function's arguments (the
mean row too, read by the fourth kernel after it: a tiny tile is kept for every later kernel),
bit-identical to the tile interpreter with the race checker on and to the program that loads
them, close to the graph interpreter, and fewer cycles."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.ir import BlockArgument

from infer.dialects import tile as t
from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import parse_with_weights
from helpers.tile_programs import npu_matches_tile

S, H = 128, 384
MASK_F32 = f"""%m: tensor<1x{S}x1xf32> {{graph.name = "m"}}"""
# (the mask as a model has it: int64 token flags, cast to f32 and given a trailing dimension)
MASK_I64 = f"""%mi: tensor<1x{S}xi64> {{graph.name = "m"}}"""
MASK_CAST = f"""
  %mf = graph.cast %mi : (tensor<1x{S}xi64>) -> tensor<1x{S}xf32>
  %m = graph.reshape %mf : (tensor<1x{S}xf32>) -> tensor<1x{S}x1xf32>"""
POOLING_BODY = f"""
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


def pooling(mask: str) -> str:
    """The pooling function with its mask argument as f32 or as int64 (cast in the graph)."""
    argument, prelude = (MASK_F32, "") if mask == "f32" else (MASK_I64, MASK_CAST)
    return (f"""
func.func @main(%h: tensor<1x{S}x{H}xf32> {{graph.name = "h"}}, {argument}) -> (tensor<1x{H}xf32> {{graph.name = "e"}}) {{"""
            + prelude + POOLING_BODY)


def run(source: str, inputs, keep: bool, monkeypatch) -> tuple[np.ndarray, int, int, int]:
    """-> (the simulated output, cycles, DMA loads from DRAM buffers in the tile IR, those of
    them that read an intermediate result rather than a function argument)."""
    from infer.passes.graph_to_tile import context

    if not keep:  # every kept tile refused: each kernel loads its operands from DRAM
        monkeypatch.setattr(context.LoweringContext, "on_chip_as", lambda self, dram, shape: None)
    module = parse_with_weights(source, {}, "pooling.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=fp32},tile-plan-memory{target=server}", module)
    loads = [op for op in module.walk() if isinstance(op, t.DmaOp) and t.space_of(op.src) == "dram"]
    intermediate = sum(1 for op in loads if not isinstance(t.root_buffer(op.src), BlockArgument))
    (y,), counters = npu_matches_tile(module, inputs, "server")
    monkeypatch.undo()
    return y, counters.cycles, len(loads), intermediate


@pytest.mark.parametrize("mask", ["f32", "i64"])
def test_kept_tiles_read_in_place(mask, monkeypatch):
    rng = np.random.default_rng(6)
    h = rng.standard_normal((1, S, H)).astype(np.float32)
    flags = rng.random((1, S)) < 0.8
    m = flags.astype(np.float32)[..., None] if mask == "f32" else flags.astype(np.int64)
    source = pooling(mask)
    graph_ref = run_entry(parse_with_weights(source, {}, "pooling.mlir"), [h, m])[0]
    # (the runtime hands an int64 input to the device as int32: tile.host_dtype)
    device_m = m.astype(np.int32) if mask == "i64" else m
    y, cycles, loads, intermediate = run(source, [h, device_m], True, monkeypatch)
    y_loaded, cycles_loaded, loads_loaded, _ = run(source, [h, device_m], False, monkeypatch)
    np.testing.assert_allclose(y, graph_ref, rtol=1e-5, atol=1e-6)
    assert y.tobytes() == y_loaded.tobytes()
    assert loads < loads_loaded, (loads, loads_loaded)
    assert intermediate == 0, intermediate  # only h and the mask come from DRAM
    assert cycles < 0.8 * cycles_loaded, (cycles, cycles_loaded)
