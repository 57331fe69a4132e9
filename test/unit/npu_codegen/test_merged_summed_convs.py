"""Two convs summed, merged over their stacked inputs (graph-merge-summed-convs, part of
graph-prepare-tiling with a target; copies.lower_concat on chip), server bf16: ResNet-50's first
bottleneck shape at 28x28, whose expanding 1x1 conv (64 -> 256, of the 3x3 conv's output) and
downsampling shortcut (64 -> 256, of the block's input) each fill half of the 128-row array.
Merged, one 128-channel conv fills it; its stacked input is built on chip from the two kept
tiles and read in place. Close to the graph interpreter of the unmerged model, the simulator bit
for bit the tile interpreter (race checker on), fewer cycles (measured: 8,546 against 10,913);
on edge (16 rows: 4 passes each way) nothing is merged."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.passes import graph_merge_summed_convs
from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import parse_with_weights
from helpers.tile_programs import npu_matches_tile


def first_bottleneck() -> tuple[str, dict[str, np.ndarray]]:
    """x [1, 64, 28, 28] -> 1x1 64->64, relu (p, the block's input, kept on chip as a pool's
    output is in ResNet-50) -> 3x3 64->64, relu (a); relu(1x1 64->256 of a + 1x1 64->256 of
    p)."""
    x, w = "tensor<1x64x28x28xf32>", "tensor<1x256x28x28xf32>"
    rng = np.random.default_rng(41)
    weights = {"w0": (rng.standard_normal((64, 64, 1, 1)) / 8).astype(np.float32),
               "b0": (rng.standard_normal(64) * 0.1).astype(np.float32),
               "w3": (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32),
               "b3": (rng.standard_normal(64) * 0.1).astype(np.float32),
               "we": (rng.standard_normal((256, 64, 1, 1)) / 8).astype(np.float32),
               "be": (rng.standard_normal(256) * 0.1).astype(np.float32),
               "wd": (rng.standard_normal((256, 64, 1, 1)) / 8).astype(np.float32),
               "bd": (rng.standard_normal(256) * 0.1).astype(np.float32)}
    text = f"""func.func @main(%x: {x} {{graph.name = "x"}}) -> ({w} {{graph.name = "y"}}) {{
  %w0 = graph.weight @w0 : tensor<64x64x1x1xf32>
  %b0 = graph.weight @b0 : tensor<64xf32>
  %c0 = graph.conv2d %x, %w0, %b0 : ({x}, tensor<64x64x1x1xf32>, tensor<64xf32>) -> {x}
  %p = graph.relu %c0 : ({x}) -> {x}
  %w3 = graph.weight @w3 : tensor<64x64x3x3xf32>
  %b3 = graph.weight @b3 : tensor<64xf32>
  %c3 = graph.conv2d %p, %w3, %b3 {{padding = array<i64: 1, 1, 1, 1>}} : ({x}, tensor<64x64x3x3xf32>, tensor<64xf32>) -> {x}
  %a = graph.relu %c3 : ({x}) -> {x}
  %we = graph.weight @we : tensor<256x64x1x1xf32>
  %be = graph.weight @be : tensor<256xf32>
  %ce = graph.conv2d %a, %we, %be : ({x}, tensor<256x64x1x1xf32>, tensor<256xf32>) -> {w}
  %wd = graph.weight @wd : tensor<256x64x1x1xf32>
  %bd = graph.weight @bd : tensor<256xf32>
  %cd = graph.conv2d %p, %wd, %bd : ({x}, tensor<256x64x1x1xf32>, tensor<256xf32>) -> {w}
  %s = graph.add %ce, %cd : ({w}, {w}) -> {w}
  %y = graph.relu %s : ({w}) -> {w}
  func.return %y : {w}
}}"""
    return text, weights


def run(x: np.ndarray, target: str) -> tuple[np.ndarray, int, list[str]]:
    """-> (output, cycles, the graph ops left after graph-prepare-tiling, by name)."""
    module = parse_with_weights(*first_bottleneck(), "block.mlir")
    apply_pass(f"graph-prepare-tiling{{target={target}}}", module)
    ops = [op.name for op in module.walk() if isinstance(op, (g.ConcatOp, g.Conv2dOp))]
    apply_pass(f"graph-to-tile{{target={target} precision=bf16}},tile-plan-memory{{target={target}}}", module)
    stacked = [op for op in module.walk() if isinstance(op, t.AllocOp) and t.space_of(op.buffer) == "spad"
               and op.buffer.type.get_shape() == (128, 784)]
    (y,), counters = npu_matches_tile(module, [x], target)
    return y, counters.cycles, ops + ["stacked on chip"] * len(stacked)


def test_summed_convs_merged_into_one_that_fills_the_array(monkeypatch):
    x = np.random.default_rng(42).standard_normal((1, 64, 28, 28)).astype(np.float32)
    reference = run_entry(parse_with_weights(*first_bottleneck(), "block.mlir"), [x])[0]
    y, cycles, ops = run(x, "server")
    monkeypatch.setattr(graph_merge_summed_convs, "saves_passes", lambda ca, cb, rows: False)
    y_apart, cycles_apart, ops_apart = run(x, "server")
    assert ops == ["graph.conv2d", "graph.conv2d", "graph.concat", "graph.conv2d", "stacked on chip"], ops
    assert ops_apart == ["graph.conv2d"] * 4, ops_apart
    scale = float(np.abs(reference).max())
    np.testing.assert_allclose(y, reference, rtol=0, atol=0.02 * scale)
    np.testing.assert_allclose(y, y_apart, rtol=0, atol=0.02 * scale)
    assert cycles < cycles_apart, (cycles, cycles_apart)


@pytest.mark.parametrize("ca, cb, rows, saves", [(64, 64, 128, True), (128, 256, 128, False),
                                                 (64, 64, 16, False), (8, 8, 16, True), (100, 20, 128, True)])
def test_merging_where_it_saves_array_passes(ca, cb, rows, saves):
    assert graph_merge_summed_convs.saves_passes(ca, cb, rows) is saves


def test_nothing_merged_on_edge():
    module = parse_with_weights(*first_bottleneck(), "block.mlir")
    apply_pass("graph-prepare-tiling{target=edge}", module)
    assert [op.name for op in module.walk() if isinstance(op, (g.ConcatOp, g.Conv2dOp))] == ["graph.conv2d"] * 4
