"""A conv of several taps and one channel step has its first tap's product overwrite the
accumulator (graph_to_tile/conv.py `ConvKernel.FIRST_TAP_OVERWRITES`, `over_taps`' `first`)
instead of zeroing it first: a 3x3 conv at 28x28 between two 1x1 convs (no im2col; 128
channels as ResNet-50's on server, 64 on edge, where 128 take several channel steps). No fill of the accumulator, the same bits as with the fill (the simulator bit for
bit the tile interpreter, race checker on), close to the graph interpreter, fewer cycles
(measured: server 13,587 against 13,801; edge 189,920 against 199,675)."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects import tile as t
from infer.passes.graph_to_tile.conv import ConvKernel
from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import conv_chain, parse_with_weights
from helpers.tile_programs import npu_matches_tile


def run(target: str, x: np.ndarray) -> tuple[np.ndarray, int, int]:
    """-> (output, cycles, fills of an accumulator)."""
    module = parse_with_weights(*conv_chain(x.shape[1], x.shape[2], [1, 3, 1]), "chain.mlir")
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision=bf16}}", module)
    fills = sum(1 for op in module.walk() if isinstance(op, t.FillOp) and t.space_of(op.dst) == "acc")
    apply_pass(f"tile-plan-memory{{target={target}}}", module)
    (y,), counters = npu_matches_tile(module, [x], target)
    return y, counters.cycles, fills


# (edge's 3x3 128 -> 128 at 28x28 takes several channel steps: 64 channels there)
@pytest.mark.parametrize("target, channels", [("server", 128), ("edge", 64)])
def test_the_first_tap_overwrites_the_accumulator(target, channels, monkeypatch):
    x = np.random.default_rng(61).standard_normal((1, channels, 28, 28)).astype(np.float32)
    reference = run_entry(parse_with_weights(*conv_chain(channels, 28, [1, 3, 1]), "chain.mlir"), [x])[0]
    y, cycles, fills = run(target, x)
    monkeypatch.setattr(ConvKernel, "FIRST_TAP_OVERWRITES", False)
    y_zeroed, cycles_zeroed, fills_zeroed = run(target, x)
    assert fills == 0 and fills_zeroed >= 1, (fills, fills_zeroed)
    assert y.tobytes() == y_zeroed.tobytes()
    np.testing.assert_allclose(y, reference, rtol=0, atol=0.02 * float(np.abs(reference).max()))
    assert cycles < cycles_zeroed, (cycles, cycles_zeroed)
