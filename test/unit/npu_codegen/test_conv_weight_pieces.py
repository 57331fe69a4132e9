"""A conv weight block loaded once for its tile (one channel step: hoisted, or the only step of
a tile emitted once) is DMA'd in pieces of consecutive rows (conv.py `HOISTED_WEIGHT_PIECES`,
channels orientation), so the first taps' matmuls wait for their own rows only. A strided 3x3
256->256 conv at 14x14 on server: one DMA of the 1.2 MB block held the first matmul until all
of it arrived. Same bits (tile interpreter = simulator, race checker on), fewer cycles."""

from __future__ import annotations

import numpy as np

from infer.dialects import tile as t
from infer.dialects.ir_io import make_context, parse_ir
from infer.passes.graph_to_tile import conv
from infer.passes.testing import apply_pass

from helpers.graph_programs import strided_constant_conv
from helpers.tile_programs import npu_matches_tile

C, H, O = 256, 14, 256
TEXT = strided_constant_conv(C, H, O)


def run(x: np.ndarray, pieces: int, monkeypatch) -> tuple[np.ndarray, int, int]:
    """-> (output, cycles, weight DMAs in the tile IR)."""
    monkeypatch.setattr(conv, "HOISTED_WEIGHT_PIECES", pieces)
    module = parse_ir(make_context(), TEXT, "conv.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16},tile-plan-memory{target=server}",
               module)
    weight_dmas = sum(1 for op in module.walk() if isinstance(op, t.DmaOp)
                      and isinstance(t.root_buffer(op.src).owner, t.WeightOp))
    (y,), counters = npu_matches_tile(module, [x], "server")
    monkeypatch.undo()
    return y, counters.cycles, weight_dmas


def test_hoisted_weight_block_in_pieces(monkeypatch):
    x = np.random.default_rng(3).standard_normal((1, C, H, H)).astype(np.float32)
    y, cycles, dmas = run(x, conv.HOISTED_WEIGHT_PIECES, monkeypatch)
    y_one, cycles_one, dmas_one = run(x, 1, monkeypatch)
    assert dmas == conv.HOISTED_WEIGHT_PIECES * dmas_one, (dmas, dmas_one)
    assert y.tobytes() == y_one.tobytes()
    assert cycles < 0.95 * cycles_one, (cycles, cycles_one)
