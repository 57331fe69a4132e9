"""Dependencies by column blocks (tile-to-npu's tracker, docs/codegen.md "Synchronisation"):
an access to a box of rows (a tile's columns [c0, c1) of every row) conflicts only with accesses
that share a byte with it, not with every access inside its rows' range; a consumer of a loop is
ordered after the earliest later instruction of that engine; a producer with both signals
taken hands a third consumer to a later instruction instead of a relay (a front-end nop held
until it completes); a double-buffered loop's first iteration goes before the hardware loop;
and a one-tile GEMM's last k step runs its products as two column loops; accesses stepped alike
by one loop are compared iteration against iteration. Together: in a BERT
FFN on the server config (MiniLM's shape) the down projection's first k step, which reads the
up projection's first 256 columns through its bias and GELU prologue, no longer waits for the
up projection's last product, and the matrix unit streams from one kernel into the next."""

from __future__ import annotations

import numpy as np

from infer.dialects.npu import ProgramOp
from infer.dialects.npu_attrs import layout_from_module, ops_from_module
from infer.dialects.weights import weights_of
from infer.passes.testing import apply_pass, run_entry
from infer.passes.tile_to_npu.dependencies import overlapping
from infer.target.sim import Simulator

from helpers.graph_programs import o_norm_ffn, parse_with_weights


def brute_force(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    def members(low: int, high: int, pitch: int, width: int) -> set[int]:
        return {x for x in range(low, high) if not pitch or (x - low) % pitch < width}
    return bool(members(*a) & members(*b))


def test_boxes_overlap_exactly_when_they_share_a_byte():
    rng = np.random.default_rng(3)
    checked = boxed = 0
    for _ in range(3000):
        pitch = int(rng.choice([0, 16, 24, 64]))
        boxes = []
        for _side in range(2):
            p = pitch if rng.random() < 0.85 else int(rng.choice([0, 32]))
            width = int(rng.integers(1, p + 1)) if p else 0
            rows = int(rng.integers(1, 6))
            low = int(rng.integers(0, 160))
            high = low + ((rows - 1) * p + width if p else int(rng.integers(1, 120)))
            boxes.append((low, high, p, width))
        a, b = boxes
        assert overlapping(*a, *b) == overlapping(*b, *a)
        if a[2] and a[2] == b[2]:
            assert overlapping(*a, *b) == brute_force(a, b), (a, b)
            boxed += 1
        else:  # (different pitches: the ranges, never fewer conflicts than there are)
            assert overlapping(*a, *b) == (a[0] < b[1] and b[0] < a[1])
            assert overlapping(*a, *b) or not brute_force(a, b)
        checked += 1
    assert boxed > 1000


def stepped_access(rng, loop, step: int):
    """A random access stepped by `loop` as selection.py describes one: (Access, its bytes in
    iteration 0 as (low, high, pitch, width)). A box of rows whose columns over the iterations
    stay within a row keeps a pitch (its width widened by the loop's span); otherwise the hull."""
    from types import SimpleNamespace

    from infer.passes.tile_to_npu.dependencies import Access

    pitch = int(rng.choice([0, 64, 96]))
    low0 = int(rng.integers(0, 200))
    span = step * (loop.count - 1)
    if pitch:
        width, rows = int(rng.integers(1, 40)), int(rng.integers(2, 5))
        high0 = low0 + (rows - 1) * pitch + width
        boxed = width + abs(span) < pitch
    else:
        width, high0, boxed = 0, low0 + int(rng.integers(1, 120)), False
    low, high = low0 + min(0, span), high0 + max(0, span)
    access = Access(low, high, "local", True, SimpleNamespace(sequence=0), None,
                    pitch if boxed else 0, width + abs(span) if boxed else 0, ((loop, step),))
    return access, (low0, high0, pitch if pitch else 0, width)


def test_accesses_stepped_alike_are_apart_only_when_no_iterations_meet():
    """`apart_in_every_iteration` (an earlier access in a loop body against a later one, in the
    same and every later iteration) and the boxed path of `apart_across_iterations` (a later
    iteration's consumer against an earlier one's producer) never call apart two accesses that
    share a byte in iterations they compare (brute force over the iterations), and find
    accesses apart where they are."""
    from infer.passes.tile_to_npu.dependencies import apart_across_iterations, apart_in_every_iteration
    from infer.passes.tile_to_npu.program_tree import HardwareLoop

    def bytes_at(box: tuple[int, int, int, int], shift: int) -> set[int]:
        low, high, pitch, width = box
        return {x + shift for x in range(low, high) if not pitch or (x - low) % pitch < width}

    rng = np.random.default_rng(7)
    apart = {"same": 0, "carried": 0}
    for _ in range(1500):
        loop = HardwareLoop(int(rng.integers(2, 6)), 1)
        step = int(rng.choice([-48, -16, 16, 24, 48, 200]))
        (a, a0), (b, b0) = stepped_access(rng, loop, step), stepped_access(rng, loop, step)
        meet_same = any(bytes_at(a0, i * step) & bytes_at(b0, (i + k) * step)
                        for i in range(loop.count) for k in range(loop.count - i))
        if apart_in_every_iteration(a, b):
            assert not meet_same, (a0, b0, step, loop.count)
            apart["same"] += 1
        meet_carried = any(bytes_at(a0, i * step) & bytes_at(b0, (i + k) * step)
                           for i in range(loop.count) for k in range(1, loop.count - i))
        if apart_across_iterations(loop, a, b):
            assert not meet_carried, (a0, b0, step, loop.count)
            apart["carried"] += 1
    assert apart["same"] > 100 and apart["carried"] > 100, apart


def ffn_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(12)
    return [rng.standard_normal((128, 384)).astype(np.float32) for _ in range(2)]


def ffn_on_server():
    """The BERT FFN (o projection + residual + layer norm, up projection, GELU moved into the
    down projection's prologue, down projection) on server in bf16: (outputs, cycles, the
    matrix unit's (start, pc) events, the op markers)."""
    module = parse_with_weights(*o_norm_ffn(), "o_ffn.mlir")
    apply_pass("graph-prepare-tiling,graph-fuse-activation-prologue{target=server},"
               "graph-to-tile{target=server precision=bf16},tile-plan-memory{target=server}", module)
    inputs = ffn_inputs()
    tile_ref = run_entry(module, inputs)
    apply_pass("tile-to-npu", module)
    program_op = next(o for o in module.walk() if isinstance(o, ProgramOp))
    prog = program_op.to_program()
    layout = layout_from_module(module)
    dram = layout.dram_image(inputs, weights_of(module))
    counters = Simulator("server").run(prog, dram, check_races=True, trace=True)
    outs = layout.read_outputs(dram)
    assert [o.tobytes() for o in outs] == [r.tobytes() for r in tile_ref]  # the tile interpreter's bits
    matmuls = sorted((start, pc) for _engine, name, start, _dur, pc in counters.events if name == "mx.matmul")
    return outs, counters.cycles, matmuls, [(o["start"], o["end"]) for o in ops_from_module(module)]


def test_the_down_projection_streams_right_after_the_up_projection(monkeypatch):
    from infer.passes.graph_to_tile import gemm

    outs, cycles, matmuls, markers = ffn_on_server()
    graph_ref = run_entry(parse_with_weights(*o_norm_ffn(), "o_ffn.mlir"), ffn_inputs())
    np.testing.assert_allclose(outs[0], graph_ref[0], rtol=5e-2, atol=5e-2)
    kernel_of = {pc: i for i, (start, end) in enumerate(markers) for pc in range(start, end)}
    down = kernel_of[matmuls[-1][1]]
    up = max(kernel_of[pc] for _, pc in matmuls if kernel_of[pc] < down)
    last_up = max(start for start, pc in matmuls if kernel_of[pc] == up)
    first_down = min(start for start, pc in matmuls if kernel_of[pc] == down)
    assert first_down == last_up + 128, (last_up, first_down)  # (m = 128 rows: the array never idles)
    monkeypatch.setattr(gemm, "SPLIT_LAST_PRODUCTS", False)
    outs1, cycles1, _, _ = ffn_on_server()
    assert outs1[0].tobytes() == outs[0].tobytes()
    assert cycles < cycles1, (cycles, cycles1)
