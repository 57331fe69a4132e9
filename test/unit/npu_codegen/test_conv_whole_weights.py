"""A conv's whole weight block per output tile (issue 14, `tiling_cost.ConvTiles.whole_weights`):
with output-channel tiles outside and several channel steps, the tile's [TO, taps.Cg] block is
DMA'd once per output tile and each step reads its columns, instead of a step's block per row
tile and step. The products are the same operands in the same order: bit-identical to the
per-step blocks, tile interpreter = simulator with the race checker on, fewer weight DMAs and
DRAM bytes."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects import tile as t
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_to_tile import context, conv
from infer.passes.testing import apply_pass, run_entry
from helpers.tile_programs import npu_matches_tile

CTX = make_context()
C, H, O = 64, 16, 32


def conv_text(k: int) -> str:
    x, w, y = f"tensor<1x{C}x{H}x{H}xf32>", f"tensor<{O}x{C}x{k}x{k}xf32>", f"tensor<1x{O}x{H}x{H}xf32>"
    pad = (k - 1) // 2
    return f"""func.func @main(%x: {x} {{graph.name = "x"}}) -> ({y} {{graph.name = "y"}}) {{
  %w = graph.weight @w : {w}
  %b = graph.weight @b : tensor<{O}xf32>
  %c = graph.conv2d %x, %w, %b {{padding = array<i64: {pad}, {pad}, {pad}, {pad}>}} : ({x}, {w}, tensor<{O}xf32>) -> {y}
  %r = graph.relu %c : ({y}) -> {y}
  func.return %r : {y}
}}"""


def compile_conv(k: int, tiles: str, monkeypatch):
    """(output, cycles, DRAM bytes moved, weight DMAs in the tile IR, the chosen tiles' text)."""
    module = parse_ir(CTX, conv_text(k), "conv.mlir")
    verify_module(module)
    rng = np.random.default_rng(4)
    store = WeightStore()
    store.set("w", (rng.standard_normal((O, C, k, k)) * 0.1).astype(np.float32))
    store.set("b", rng.standard_normal(O).astype(np.float32))
    attach_weights(module, store)
    x = rng.standard_normal((1, C, H, H)).astype(np.float32)
    graph_ref = run_entry(module, [x])[0]
    log: list[str] = []
    monkeypatch.setattr(context.LoweringContext, "debug", lambda self, text: log.append(text))
    apply_pass(f'graph-prepare-tiling,graph-to-tile{{target=edge precision=bf16 overrides="kernel0={tiles}"}},'
               "tile-plan-memory{target=edge}", module)
    weights = {op.buffer for op in module.walk() if isinstance(op, t.WeightOp)}
    weight_dmas = sum(1 for op in module.walk() if isinstance(op, t.DmaOp) and op.src in weights)
    (y,), counters = npu_matches_tile(module, [x], "edge")
    np.testing.assert_allclose(y, graph_ref, rtol=0.05, atol=0.05)
    chosen = next(line for line in log if "tiles" in line)
    return y, counters.cycles, counters.dram_read_bytes + counters.dram_write_bytes, weight_dmas, chosen


@pytest.mark.parametrize("k, tiles", [(1, f"{O}x{2 * H}x16"), (3, f"{O}x{2 * H}x16")])
def test_whole_weight_block_per_output_tile_same_bits(k, tiles, monkeypatch):
    """Eight row tiles of two rows, four channel steps of 16: the whole block is loaded once
    instead of a block per step in each of the 8 row tiles."""
    y, cycles, moved, dmas, chosen = compile_conv(k, tiles, monkeypatch)
    assert "whole-weights" in chosen, chosen
    # the same tiles (orientation, loop order) with a block per step
    monkeypatch.setattr(conv.ConvKernel, "_whole_block", lambda self: None)
    y_steps, cycles_steps, moved_steps, dmas_steps, chosen_steps = compile_conv(k, tiles, monkeypatch)
    assert chosen_steps == chosen
    assert y.tobytes() == y_steps.tobytes()
    assert dmas == dmas_steps  # (static: one DMA op, per output tile or in the step loop)
    # the weights read once instead of once per row tile (8)
    assert moved_steps - moved >= 7 * O * C * k * k * 2, (moved, moved_steps)
    assert cycles < cycles_steps, (cycles, cycles_steps)
