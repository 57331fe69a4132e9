"""Deferred epilogue (tile-to-npu, `rotation.deferrable_epilogue`, docs/codegen.md): in a
software-pipelined loop whose ops after the last matmul (bias, activation, the transposition
back to [C, H.W], the store) are more vector instructions than the vector queue holds, iteration
t's epilogue is issued after iteration t+1's matmuls, so the in-order front end no longer waits
in it for the array to drain before it dispatches the next matmuls. The program stays
bit-identical to the tile interpreter with the race checker on, and is faster than with the
epilogue left in its iteration; an epilogue the vector queue holds stays where it is."""

from __future__ import annotations

import numpy as np
import pytest

from infer.passes.testing import apply_pass, run_entry
from infer.passes.tile_to_npu import rotation
from helpers.graph_programs import parse_with_weights, pointwise_conv
from helpers.tile_programs import npu_matches_tile


def compile_and_run(C: int, HW: int, O: int, precision: str, x: np.ndarray):
    """graph -> tile (interpreted) -> npu on server (simulated, race checker on): bit-identical
    outputs, close to the graph interpreter's. Returns (output, simulated cycles)."""
    module = parse_with_weights(*pointwise_conv(C, HW, O, seed=3, scale=0.05), "conv.mlir")
    graph_ref = run_entry(module, [x])[0]
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target=server precision={precision}}},"
               "tile-plan-memory{target=server}", module)
    (y,), counters = npu_matches_tile(module, [x], "server")
    tolerance = 0.05 if precision == "bf16" else 1e-3
    np.testing.assert_allclose(y, graph_ref, rtol=tolerance, atol=tolerance)
    return y, counters.cycles


def recording(monkeypatch) -> list:
    planned: list = []
    original = rotation.deferrable_epilogue

    def record(loop, plan, loads, preparation):
        found = original(loop, plan, loads, preparation)
        planned.append(found)
        return found

    monkeypatch.setattr(rotation, "deferrable_epilogue", record)
    return planned


@pytest.mark.parametrize("C, HW, O, precision, share", [
    # 7x7 in the "channels" orientation: four 512-channel output tiles, each epilogue 49
    # column adds into [C, H.W] and a relu (measured: 6,448 against 7,186 cycles)
    (512, 7, 2048, "bf16", 0.92),
    # fp32 (three bf16 passes) 1x1 256->1024 at 14x14 (measured: 12,568 against 17,765)
    (256, 14, 1024, "fp32", 0.80),
])
def test_long_epilogue_runs_behind_the_next_tiles_matmuls(monkeypatch, C, HW, O, precision, share):
    planned = recording(monkeypatch)
    x = np.random.default_rng(4).standard_normal((1, C, HW, HW)).astype(np.float32)
    y, cycles = compile_and_run(C, HW, O, precision, x)
    deferred = [p for p in planned if p is not None]
    assert deferred and max(p.vector_ops for p in deferred) > 8, planned  # server vector queue: 8
    monkeypatch.setattr(rotation, "deferrable_epilogue", lambda loop, plan, loads, preparation: None)
    y_off, cycles_off = compile_and_run(C, HW, O, precision, x)
    assert y.tobytes() == y_off.tobytes()
    assert cycles < share * cycles_off, (cycles, cycles_off)


def test_epilogue_the_vector_queue_holds_stays_in_its_iteration(monkeypatch):
    """1x1 256->128 at 56x56 on server: the epilogue adds the bias and applies the relu
    (one vector op, `add_relu`). The plan accepts it (the
    accumulator rotates on the loop and only matmuls touch it before), but deferred it would
    start late and hold the accumulator half the iteration after next needs (measured +2.8 %
    cycles), so it is emitted in its iteration: the same program as without the plan."""
    planned = recording(monkeypatch)
    x = np.random.default_rng(5).standard_normal((1, 256, 56, 56)).astype(np.float32)
    y, cycles = compile_and_run(256, 56, 128, "bf16", x)
    deferred = [p for p in planned if p is not None]
    assert len(deferred) == 1 and deferred[0].vector_ops == 1, planned
    assert [a.buffer.type.memory_space.data for a in deferred[0].computed] == ["acc"]
    monkeypatch.setattr(rotation, "deferrable_epilogue", lambda loop, plan, loads, preparation: None)
    y_off, cycles_off = compile_and_run(256, 56, 128, "bf16", x)
    assert y.tobytes() == y_off.tobytes() and cycles == cycles_off
