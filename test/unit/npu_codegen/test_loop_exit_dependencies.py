"""A consumer after a loop whose producer is in it (tile-to-npu's dependencies.py): a 1x1 conv
of four output blocks (a software-pipelined loop of 4 trips: one hardware iteration holding
blocks 0 and 1, blocks 2 and 3 after it) feeding a 1x1 conv whose first window reads block 0.

* `runs_once`: leaving a hardware loop of one iteration is no exit (its producer signals once),
  so the window's load waits for block 0's store itself, not for a later store standing in for
  it (and no loop-carried drain ends the one iteration);
* `EARLIEST_LATER_PRODUCER`: where a later store does stand in for a store in a loop, the
  earliest one after the loop (block 2's), not the last (block 3's).

Either rule alone and both together: the same bits as without them (tile interpreter =
simulator with the race checker on) and fewer cycles."""

from __future__ import annotations

import numpy as np
import pytest

from infer.passes.graph_to_tile import conv
from infer.passes.testing import apply_pass
from infer.passes.tile_to_npu import dependencies

from helpers.graph_programs import parse_with_weights, pointwise_conv_chain
from helpers.tile_programs import npu_matches_tile

C, M, O, HW = 256, 1024, 256, 14
CHAIN, WEIGHTS = pointwise_conv_chain(C, M, O, HW)


def run(x: np.ndarray, once: bool, earliest: bool, monkeypatch) -> tuple[np.ndarray, int]:
    """-> (the simulated output, cycles) with either rule turned off. The first conv's output
    is not kept on chip (`ConvKernel.output_kept_whole`): the second conv loads it, the
    dependency these rules are about."""
    monkeypatch.setattr(conv.ConvKernel, "output_kept_whole", lambda self, footprint: None)
    if not once:
        monkeypatch.setattr(dependencies, "runs_once", lambda loop: False)
    if not earliest:
        monkeypatch.setattr(dependencies, "EARLIEST_LATER_PRODUCER", frozenset({"matrix"}))
    module = parse_with_weights(CHAIN, WEIGHTS, "chain.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16},"
               "tile-plan-memory{target=server}", module)
    (y,), counters = npu_matches_tile(module, [x], "server")
    monkeypatch.undo()
    return y, counters.cycles


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((1, C, HW, HW)).astype(np.float32)


@pytest.mark.parametrize("once,earliest", [(True, False), (False, True), (True, True)],
                         ids=["runs-once", "earliest-store", "both"])
def test_each_rule_alone_and_both(once, earliest, image, monkeypatch):
    y, cycles = run(image, once, earliest, monkeypatch)
    y_before, cycles_before = run(image, False, False, monkeypatch)
    assert y.tobytes() == y_before.tobytes()
    assert cycles < 0.95 * cycles_before, (cycles, cycles_before)
