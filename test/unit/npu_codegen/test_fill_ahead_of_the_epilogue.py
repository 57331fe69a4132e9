"""A conv's accumulator fill moved ahead of the kernel before's epilogue (graph-to-tile,
`prefetch_hoist._fill_after_the_prefetch`): on server a tap conv's one-step tile is zeroed
first, and the conv's first op-marker group is its weight prefetch alone (its output alloc
after the weight DMAs starts the next group), so the fill was not among the operand preparation
`_operand_preparation` moves. On the in-order vector unit it then waited behind the kernel
before's epilogue while the array idled. The program stays bit-identical to the tile
interpreter with the race checker on, and is faster than with the fill left in place. (A
one-step tap conv's first tap now overwrites its accumulator instead, conv.py
`ConvKernel.FIRST_TAP_OVERWRITES`: the fill is made here by turning that off, as a conv of
several channel steps still zeroes its accumulator.)"""

from __future__ import annotations

import numpy as np

from infer.dialects import tile as t
from infer.passes import tiling_cost
from infer.passes.graph_to_tile import prefetch_hoist
from infer.passes.graph_to_tile.conv import ConvKernel
from infer.passes.testing import apply_pass, run_entry
from helpers.graph_programs import conv_chain, parse_with_weights
from helpers.tile_programs import npu_matches_tile

C, HW = 256, 14


def compile_and_run(x: np.ndarray) -> tuple[np.ndarray, int, int]:
    """1x1 -> 3x3 -> 1x1 convs (bias, relu) at 14x14 on server in bf16: (output, simulated
    cycles, accumulator fills moved into the kernel before), the output bit-identical to the
    tile interpreter's and close to the graph interpreter's."""
    module = parse_with_weights(*conv_chain(C, HW, [1, 3, 1], seed=9), "chain.mlir")
    graph_ref = run_entry(module, [x])[0]
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16},"
               "tile-plan-memory{target=server}", module)
    moved = [op for op in module.walk() if isinstance(op, t.FillOp) and t.HOISTED_ATTR in op.attributes
             and t.space_of(op.dst) == "acc"]
    (y,), counters = npu_matches_tile(module, [x], "server")
    np.testing.assert_allclose(y, graph_ref, rtol=0.05, atol=0.05)  # bf16 products
    return y, counters.cycles, len(moved)


def pixels_only(monkeypatch) -> None:
    """Only "pixels" tilings for the convs: the 3x3 conv's weights are then its first op-marker
    group (the cost model now takes "channels" for it, since 3x3 windows share their padding
    columns: 210 streamed rows per tap instead of 224)."""
    rank = tiling_cost._rank_conv

    def pixels(hw, spec):
        ranked, rejected = rank(hw, spec)
        return [e for e in ranked if e.tiles.orientation == "pixels"], rejected
    monkeypatch.setattr(tiling_cost, "_rank_conv", pixels)


def test_tap_conv_fill_runs_before_the_kernel_befores_epilogue(monkeypatch):
    monkeypatch.setattr(ConvKernel, "FIRST_TAP_OVERWRITES", False)
    pixels_only(monkeypatch)
    x = np.random.default_rng(3).standard_normal((1, C, HW, HW)).astype(np.float32)
    y, cycles, moved = compile_and_run(x)
    assert moved == 1  # the 3x3's (the 1x1s' first products overwrite their accumulators)
    monkeypatch.setattr(prefetch_hoist, "_fill_after_the_prefetch", lambda *args: [])
    y_off, cycles_off, moved_off = compile_and_run(x)
    assert moved_off == 0
    assert y.tobytes() == y_off.tobytes()
    assert cycles < cycles_off, (cycles, cycles_off)  # (measured: 14,654 against 14,766)
