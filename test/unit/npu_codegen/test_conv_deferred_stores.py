"""A conv's row tiles stored by the next row tile's channel steps (issue 14 item 4,
`conv.ConvKernel.defers_stores`): the DRAM serves transfers in the order they are issued, so one
store DMA per output tile, issued after the tile's epilogue, held the next tile's window loads
behind its whole transfer. Each tile's output is written to one staging buffer and its rows go
out a slice per channel step of the next tile (`scf.if` on the row loop's first iteration,
which tile-to-npu peels), the last tile's after the loop. The products and epilogues are the
same: bit-identical to one store per tile, tile interpreter = simulator with the race checker
on."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import scf

from infer.dialects import tile as t
from infer.passes.graph_to_tile.conv import ConvKernel
from infer.passes.testing import apply_pass, run_entry
from helpers.graph_programs import parse_with_weights, pointwise_conv
from helpers.tile_programs import npu_matches_tile

C, H, O = 256, 28, 128


def compile_conv(tiles: str, precision: str, monkeypatch, deferred: bool):
    """(output, cycles, store DMAs in the tile IR, scf.ifs in it) of the 1x1 conv on edge."""
    if not deferred:
        monkeypatch.setattr(ConvKernel, "defers_stores", lambda self: False)
    text, weights = pointwise_conv(C, H, O, seed=3)
    module = parse_with_weights(text, weights, "conv.mlir")
    x = np.random.default_rng(4).standard_normal((1, C, H, H)).astype(np.float32)
    graph_ref = run_entry(module, [x])[0]
    apply_pass(f'graph-prepare-tiling,graph-to-tile{{target=edge precision={precision} overrides="kernel0={tiles}"}},'
               "tile-plan-memory{target=edge}", module)
    stores = [o for o in module.walk() if isinstance(o, t.DmaOp) and t.space_of(o.dst) == "dram"]
    ifs = [o for o in module.walk() if isinstance(o, scf.IfOp)]
    (y,), counters = npu_matches_tile(module, [x], "edge")
    np.testing.assert_allclose(y, graph_ref, rtol=0.05, atol=0.05)
    monkeypatch.undo()
    return y, counters.cycles, len(stores), len(ifs)


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_row_tiles_stored_by_the_next_tiles_steps(precision, monkeypatch):
    """128 output channels of 2 rows, 16 channel steps of 16: 14 row tiles in one loop, each
    step storing 8 rows of the tile before; the same bits as a store per tile, fewer cycles."""
    y1, cycles1, stores1, ifs1 = compile_conv("128x56x16", precision, monkeypatch, deferred=False)
    y2, cycles2, stores2, ifs2 = compile_conv("128x56x16", precision, monkeypatch, deferred=True)
    assert (stores1, ifs1) == (1, 0)
    assert (stores2, ifs2) == (2, 1)  # a slice in the steps (after the first tile), the last tile after the loop
    assert y1.tobytes() == y2.tobytes()
    assert cycles2 < cycles1, (cycles2, cycles1)


def test_a_dram_bound_conv_keeps_one_store_per_tile(monkeypatch):
    """64 output channels per tile: a step's window rows and its slice (3.5 + 0.9 KB) take the
    DRAM longer than its matmuls (224 or 256 cycles: 3.5 or 4 KB): the slices would queue the
    next loads."""
    _, _, stores, ifs = compile_conv("64x56x16", "bf16", monkeypatch, deferred=True)
    assert (stores, ifs) == (1, 0)
