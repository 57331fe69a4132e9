"""A conv's output tiles sharing one accumulator tile (issue 14, `tiling_cost.ConvTiles.single_acc`):
where two accumulator tiles of a size do not fit the accumulator and one does, the tiles take
turns on one (a tile's matmuls wait for the tile before's epilogue), so larger tiles re-read the
input fewer times. The products and epilogues are the same operations in the same order as on
two accumulator tiles: bit-identical to them, tile interpreter = simulator with the race checker
on, in a nest without a tile loop and in one whose row loop runs the tiles (loop-carried
dependencies on the single buffers)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from infer.passes import tiling_cost
from infer.passes.graph_to_tile import context
from infer.passes.testing import apply_pass, run_entry
from infer.target.hw import load_config
from helpers.graph_programs import parse_with_weights, pointwise_conv
from helpers.tile_programs import npu_matches_tile

C, O = 64, 128


def compile_conv(H: int, tiles: str, target: str, monkeypatch):
    """(output, cycles, the chosen tiles' debug line) of the 1x1 conv at HxH with tiles forced."""
    text, weights = pointwise_conv(C, H, O, seed=7)
    module = parse_with_weights(text, weights, "conv.mlir")
    x = np.random.default_rng(8).standard_normal((1, C, H, H)).astype(np.float32)
    graph_ref = run_entry(module, [x])[0]
    log: list[str] = []
    monkeypatch.setattr(context.LoweringContext, "debug", lambda self, text: log.append(text))
    apply_pass(f'graph-prepare-tiling,graph-to-tile{{target={target} precision=bf16 overrides="kernel0={tiles}"}},'
               f"tile-plan-memory{{target={target}}}", module)
    (y,), counters = npu_matches_tile(module, [x], target)
    np.testing.assert_allclose(y, graph_ref, rtol=0.05, atol=0.05)
    return y, counters.cycles, next(line for line in log if "tiles" in line)


def test_single_accumulator_where_two_do_not_fit():
    """The ranking's fitting check: [128, 98] fp32 tiles (50 KB) fit edge's 64 KB accumulator
    once, not twice: taken with `single_acc`; [128, 56] tiles fit twice: left as they are."""
    hw = load_config("edge")
    spec = tiling_cost.ConvSpec(batch=1, groups=1, Og=O, Cg=1024, taps=1, OH=14, OW=14, Wq=14, H=14, W=14,
                                stride=1, halo_rows=0, prepared=False, planes=1, row_phases=1, copies=1,
                                passes=1, epi_cost=2, epi_tiles=0)
    big, (_, acc) = tiling_cost.fitting_buffers(hw, spec, tiling_cost.ConvTiles("channels", 128, 7, 32, "o"))
    assert big.single_acc and acc == 128 * 98 * 4
    small, (_, acc) = tiling_cost.fitting_buffers(hw, spec, tiling_cost.ConvTiles("channels", 128, 4, 32, "o"))
    assert not small.single_acc and acc == 2 * 128 * 56 * 4
    assert tiling_cost.even_row_splits(14) == [7] and tiling_cost.even_row_splits(56) == [28, 14, 7]
    assert tiling_cost.even_row_splits(7) == [] and tiling_cost.even_row_splits(32) == []


@pytest.mark.parametrize("H, tiles", [(14, "128x98x32"), (28, "128x196x32")])
def test_single_accumulator_same_bits_as_two(H, tiles, monkeypatch):
    """On server (a 512 KB accumulator both fit): the tiles forced onto one accumulator tile
    give the bits of the same tiles on two, and take at least as many cycles. 14x14: two row
    tiles of 7 rows (no tile loop); 28x28: four (a row loop of 4 trips, whose single buffers
    are loop-carried dependencies)."""
    y2, cycles2, chosen2 = compile_conv(H, tiles, "server", monkeypatch)
    assert "single-acc" not in chosen2, chosen2
    fitting = tiling_cost.fitting_buffers
    monkeypatch.setattr(tiling_cost, "fitting_buffers", lambda hw, s, T: fitting(
        hw, s, T) if T.single_acc else (replace(T, single_acc=True), tiling_cost.conv_buffers(s, replace(
            T, single_acc=True))))
    y1, cycles1, chosen1 = compile_conv(H, tiles, "server", monkeypatch)
    assert "single-acc" in chosen1, chosen1
    assert chosen1.split(" tiles ")[1].split(" (")[0].replace(" single-acc", "") == \
        chosen2.split(" tiles ")[1].split(" (")[0]
    assert y1.tobytes() == y2.tobytes()
    assert cycles1 >= cycles2, (cycles1, cycles2)


def test_single_accumulator_tiles_on_edge(monkeypatch):
    """On edge, 128 output channels of 7 rows (two tiles of [128, 98] fp32 do not fit its
    accumulator): one accumulator tile, and the input read twice (two output-channel tiles of
    the 256) instead of four times with 64-channel tiles of the whole map."""
    _, cycles, chosen = compile_conv(14, "128x98x32", "edge", monkeypatch)
    assert "single-acc" in chosen and "TO=128 TOH=7" in chosen, chosen


def test_two_trip_tile_loops_of_one_accumulator_are_hardware_loops():
    """A 2-trip loop is emitted twice (no loop level) only when a double buffer rotates on it;
    the output tiles of one accumulator tile rotate nothing there, so their 2-trip loops take
    a level, and a nest with tap and width loops below them is deeper than edge's 4 levels:
    infeasible (a 3x3 64->64 at 28x28, 2 x 2 output tiles of 14 rows: tile-to-npu refused
    "loop nest deeper than scalar.loop_depth" for the candidate the model had ranked first)."""
    from infer.passes.tiling_code import Loop, code_size

    def nest(hardware: bool):
        taps = Loop(3, [Loop(3, [Loop(26, [2])])])
        return [Loop(2, [Loop(2, [Loop(4, [taps])], hardware)], hardware)]

    assert code_size(nest(False), 4).feasible
    assert not code_size(nest(True), 4).feasible
