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


def two_convs(kind: str) -> tuple[str, dict[str, np.ndarray], tuple[int, ...]]:
    """ResNet-50's stage-4 convs whose loops load nothing ahead (server bf16): the weights of
    the second conv are requested whole by the first (prefetch_hoist.py). "residual": x [2048,
    7, 7] -> 1x1 2048->512, relu -> 1x1 512->2048, + x, relu (its loop's only load is the
    residual tile, which only the epilogue reads); "downsample": x [1024, 14, 14] -> 1x1
    1024->1024, relu -> 1x1 1024->2048 at stride 2 (its loop loads nothing)."""
    C, HW, mid, O, stride = (2048, 7, 512, 2048, 1) if kind == "residual" else (1024, 14, 1024, 2048, 2)
    OHW = HW // stride
    x, m, y = f"tensor<1x{C}x{HW}x{HW}xf32>", f"tensor<1x{mid}x{HW}x{HW}xf32>", f"tensor<1x{O}x{OHW}x{OHW}xf32>"
    tail = ("  %s = graph.add %c1, %in : ({y}, {y}) -> {y}\n  %out = graph.relu %s : ({y}) -> {y}"
            if kind == "residual" else "  %out = graph.relu %c1 : ({y}) -> {y}").format(y=y)
    text = f"""func.func @main(%in: {x} {{graph.name = "x"}}) -> ({y} {{graph.name = "y"}}) {{
  %w0 = graph.weight @w0 : tensor<{mid}x{C}x1x1xf32>
  %b0 = graph.weight @b0 : tensor<{mid}xf32>
  %c0 = graph.conv2d %in, %w0, %b0 : ({x}, tensor<{mid}x{C}x1x1xf32>, tensor<{mid}xf32>) -> {m}
  %r0 = graph.relu %c0 : ({m}) -> {m}
  %w1 = graph.weight @w1 : tensor<{O}x{mid}x1x1xf32>
  %b1 = graph.weight @b1 : tensor<{O}xf32>
  %c1 = graph.conv2d %r0, %w1, %b1 {{stride = array<i64: {stride}, {stride}>}} : ({m}, tensor<{O}x{mid}x1x1xf32>, tensor<{O}xf32>) -> {y}
{tail}
  func.return %out : {y}
}}"""
    rng = np.random.default_rng(23)
    weights = {"w0": (rng.standard_normal((mid, C, 1, 1)) / np.sqrt(C)).astype(np.float32),
               "b0": (rng.standard_normal(mid) * 0.1).astype(np.float32),
               "w1": (rng.standard_normal((O, mid, 1, 1)) / np.sqrt(mid)).astype(np.float32),
               "b1": (rng.standard_normal(O) * 0.1).astype(np.float32)}
    return text, weights, (1, C, HW, HW)


@pytest.mark.parametrize("kind", ["residual", "downsample"])
def test_long_epilogue_deferred_in_a_loop_that_loads_nothing_ahead(monkeypatch, kind):
    """The loop of output-channel tiles loads nothing ahead (the residual tile, read only by
    the epilogue, goes with it), and its epilogue, 49 column adds of the transposition back, is
    still issued behind the next tile's matmuls (`rotation._plan_pipelining`). Measured
    (server bf16): residual 12,208 against 13,305 cycles, downsample 23,807 against 26,341."""
    calls: list = []
    original = rotation.deferrable_epilogue

    def record(loop, plan, loads, preparation):
        found = original(loop, plan, loads, preparation)
        calls.append((list(loads), list(preparation), found))
        return found

    monkeypatch.setattr(rotation, "deferrable_epilogue", record)
    text, weights, shape = two_convs(kind)
    x = np.random.default_rng(24).standard_normal(shape).astype(np.float32)
    reference = run_entry(parse_with_weights(text, weights, "convs.mlir"), [x])[0]

    def run():
        module = parse_with_weights(text, weights, "convs.mlir")
        apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16},"
                   "tile-plan-memory{target=server}", module)
        (y,), counters = npu_matches_tile(module, [x], "server")
        return y, counters.cycles

    y, cycles = run()
    nothing_ahead = [found for loads, preparation, found in calls if not loads and not preparation and found]
    assert nothing_ahead and max(found.vector_ops for found in nothing_ahead) >= 49, calls
    # before: a loop that loads nothing ahead was not pipelined, and one whose residual tile
    # went ahead kept its epilogue in its iteration
    monkeypatch.setattr(rotation, "deferrable_epilogue",
                        lambda loop, plan, loads, preparation: (original(loop, plan, loads, preparation)
                                                                if loads or preparation else None))
    y_before, cycles_before = run()
    assert y.tobytes() == y_before.tobytes()
    np.testing.assert_allclose(y, reference, rtol=0, atol=0.02 * float(np.abs(reference).max()))
    assert cycles < 0.95 * cycles_before, (cycles, cycles_before)
