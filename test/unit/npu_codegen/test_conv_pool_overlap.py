"""Issue 14's overlap of a conv's first operands with its matmuls, and max pooling over on-chip
windows, compiled and simulated bit-identically to the tile interpreter (race checker on):
an im2col deeper than the array built chunk by chunk (server 3x3 with 64 channels: 576 rows
in 5 chunks, the partial one first), weights loaded per kernel row (3x3 convs without im2col),
a 3x3/2 max pool of an odd width, padded (its edge row tiles run on their own), its taps as
row maxima then column maxima."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects import tile as t
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.passes.graph_to_tile.conv import im2col_chunks
from infer.passes.testing import apply_pass
from infer.passes.tile_to_npu.common import root_buffer
from helpers.tile_programs import npu_matches_tile

CTX = make_context()


def conv_text(C: int, H: int, O: int) -> str:
    x, w, y = f"tensor<1x{C}x{H}x{H}xf32>", f"tensor<{O}x{C}x3x3xf32>", f"tensor<1x{O}x{H}x{H}xf32>"
    return f"""func.func @main(%x: {x}) -> {y} {{
  %w = graph.constant dense<0.01> : {w}
  %b = graph.constant dense<0.5> : tensor<{O}xf32>
  %c = graph.conv2d %x, %w, %b {{padding = array<i64: 1, 1, 1, 1>}} : ({x}, {w}, tensor<{O}xf32>) -> {y}
  %r = graph.relu %c : ({y}) -> {y}
  func.return %r : {y}
}}"""


POOL = """func.func @main(%x: tensor<1x8x15x15xf32>) -> tensor<1x8x8x8xf32> {
  %r = graph.max_pool2d %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>} : (tensor<1x8x15x15xf32>) -> tensor<1x8x8x8xf32>
  func.return %r : tensor<1x8x8x8xf32>
}"""


def compile_and_compare(text: str, target: str, x: np.ndarray, capsys) -> str:
    """graph -> tile (reference run) -> npu (simulated with the race checker): bit-identical;
    returns the debug-tiling log."""
    module = parse_ir(CTX, text, "m.mlir")
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision=bf16 debug-tiling=true}},"
               f"tile-plan-memory{{target={target}}}", module)
    log = capsys.readouterr().err
    npu_matches_tile(module, [x], target)
    return log


def test_im2col_chunks_cover_the_depth_once() -> None:
    for taps, tc, rows in ((9, 64, 128), (49, 3, 128), (9, 16, 128), (9, 48, 128), (25, 5, 16)):
        chunks = im2col_chunks(taps, tc, rows)
        assert chunks[0][1] == (taps * tc) % rows or rows  # the partial chunk first
        assert [c[0] for c in chunks] == [0] + [sum(c[1] for c in chunks[:i]) for i in range(1, len(chunks))]
        assert sum(c[1] for c in chunks) == taps * tc and all(c[1] <= rows for c in chunks)
        assert [c[2] for c in chunks[1:]] == [c[3] for c in chunks[:-1]] and chunks[-1][3] == taps
        for k0, k, t_lo, t_hi in chunks:  # every row of a chunk is copied by then
            assert t_hi * tc >= k0 + k and (t_lo == 0 or t_lo * tc <= k0 + k)


def test_server_conv_im2col_in_chunks(capsys) -> None:
    x = np.random.default_rng(0).standard_normal((1, 64, 12, 12)).astype(np.float32)
    log = compile_and_compare(conv_text(64, 12, 64), "server", x, capsys)
    assert "TC=64" in log and "im2col" in log  # 9 taps x 64 channels: 576 rows in 5 chunks


@pytest.mark.parametrize("target", ["edge", "server"])
def test_conv_weights_per_kernel_row(target, capsys) -> None:
    x = np.random.default_rng(1).standard_normal((1, 128, 8, 8)).astype(np.float32)
    log = compile_and_compare(conv_text(128, 8, 128), target, x, capsys)
    assert "conv2d" in log and "im2col" not in log  # no im2col: one weight buffer per kernel row


@pytest.mark.parametrize("target", ["edge", "server"])
def test_max_pool_on_chip_windows(target, capsys) -> None:
    x = np.random.default_rng(2).standard_normal((1, 8, 15, 15)).astype(np.float32)
    log = compile_and_compare(POOL, target, x, capsys)
    assert "on chip" in log


def compile_pool(target: str, x: np.ndarray):
    """(output, cycles, vector ops by name) of POOL on on-chip windows, simulated bit-identically
    to the tile interpreter with the race checker on."""
    module = parse_ir(CTX, POOL, "pool.mlir")
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision=bf16}},"
               f"tile-plan-memory{{target={target}}}", module)
    ops: dict[str, int] = {}
    for o in module.walk():
        if isinstance(o, t.VectorOp):
            ops[o.op.data] = ops.get(o.op.data, 0) + 1
    assert not [o for o in module.walk() if isinstance(o, t.FillOp)
                and any(isinstance(u, t.VectorOp) and u.op.data == "max" for u in root_buffer(o.dst).uses)]
    (y,), counters = npu_matches_tile(module, [x], target)
    return y, counters.cycles, ops


@pytest.mark.parametrize("target", ["edge", "server"])
def test_max_pool_windows_row_then_column_maxima(target, monkeypatch) -> None:
    """The on-chip windows' 3x3/2 taps as a row max per row phase (2 `max` each, over the plane
    rows its kernel rows read) and a column max of the three kernel rows' row maxima (2 `max`):
    6 per tile where the looped taps took a copy of the first tap's window and 8 `max`. The
    same values (the max pool's, the padding ignored, equal to numpy's) and the same bits as
    the looped taps, in fewer cycles; no result tile is filled with NEG_INF first."""
    from infer.passes.graph_to_tile import pooling

    x = np.random.default_rng(3).standard_normal((1, 8, 15, 15)).astype(np.float32)
    y, cycles, ops = compile_pool(target, x)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 2), (1, 2)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    np.testing.assert_array_equal(y, windows.max(axis=(-1, -2)))
    monkeypatch.setattr(pooling, "SEPARABLE_MAX_KERNEL", 0)  # the looped taps
    y_taps, cycles_taps, ops_taps = compile_pool(target, x)
    assert y.tobytes() == y_taps.tobytes()
    # straight-line: 6 max per emitted tile (the looped taps: a copy and a loop nest of them)
    assert ops["max"] > 0 and ops["max"] % 6 == 0 and ops["copy"] < ops_taps["copy"], (ops, ops_taps)
    assert cycles < cycles_taps, (cycles, cycles_taps)


def test_conv_steps_issue_window_and_weights_early(capsys, monkeypatch) -> None:
    """Edge 3x3 conv over planes prepared in DRAM, in channel steps: each step's window and
    weight block are DMA'd straight into the operands of its first matmul, and both are issued
    one step early (rotation.pipelinable_loads: a matmul may be the first consumer of several
    early loads). Bit-identical with the race checker; faster than with only the first of the
    two loads early (the weight block's round trip in series with every step)."""
    from infer.passes.tile_to_npu import rotation

    text = conv_text(128, 14, 128)
    x = np.random.default_rng(3).standard_normal((1, 128, 14, 14)).astype(np.float32)

    def run() -> tuple[str, int]:
        module = parse_ir(CTX, text, "m.mlir")
        apply_pass('graph-prepare-tiling,graph-to-tile{target=edge precision=bf16 debug-tiling=true '
                   'overrides="kernel0=32x196x32"},tile-plan-memory{target=edge}', module)
        log = capsys.readouterr().err
        _, counters = npu_matches_tile(module, [x], "edge")
        return log, counters.cycles

    log, cycles = run()
    assert "TC=32" in log and "on-chip-padding" not in log, log  # 4 steps reading prepared planes
    monkeypatch.setattr(rotation, "SHARED_FIRST_CONSUMERS", ())
    _, cycles_one_early = run()
    assert cycles < cycles_one_early, (cycles, cycles_one_early)


STEM = """func.func @main(%x: tensor<1x3x128x128xf32>) -> tensor<1x64x64x64xf32> {
  %w = graph.constant dense<0.02> : tensor<64x3x7x7xf32>
  %c = graph.conv2d %x, %w {stride = array<i64: 2, 2>, padding = array<i64: 3, 3, 3, 3>} : (tensor<1x3x128x128xf32>, tensor<64x3x7x7xf32>) -> tensor<1x64x64x64xf32>
  func.return %c : tensor<1x64x64x64xf32>
}"""


def test_server_stem_copies_its_second_im2col_chunk_between_the_first_chunks_matmuls(capsys,
                                                                                     monkeypatch) -> None:
    """A ResNet-style 7x7/2 stem with 3 channels on server: its 147-deep im2col is two chunks
    (19 rows, then 128 rows of 43 taps). The second chunk's 43 tap copies, more than the vector
    queue holds, go in groups between column groups of the first chunk's matmuls (conv.py
    `chunked_im2col_products`), so the array need not wait for all of them after the first
    chunk. Bit-identical to the tile interpreter with the race checker on, the same bits as
    with the copies after the first chunk's matmuls, fewer cycles."""
    from infer.passes.graph_to_tile import conv

    x = np.random.default_rng(4).standard_normal((1, 3, 128, 128)).astype(np.float32)

    def run() -> tuple[np.ndarray, int, int]:
        """(output, cycles, how many runs of matmul ops the kernel's top level has)."""
        module = parse_ir(CTX, STEM, "stem.mlir")
        apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16 debug-tiling=true},"
                   "tile-plan-memory{target=server}", module)
        assert "im2col" in capsys.readouterr().err
        body = next(o for o in module.walk() if isinstance(o, t.AllocOp)).parent_block()
        kinds = [any(isinstance(i, t.MatmulOp) for i in o.walk()) for o in body.ops
                 if any(isinstance(i, t.MatmulOp) for i in o.walk())
                 or (isinstance(o, t.VectorOp) and o.op.data == "copy")]
        runs = sum(1 for j, m in enumerate(kinds) if m and (j == 0 or not kinds[j - 1]))
        (y,), counters = npu_matches_tile(module, [x], "server")
        return y, counters.cycles, runs

    y, cycles, runs = run()
    monkeypatch.setattr(conv.ConvKernel, "interleaves_copies", lambda self, tq, chunk: False)
    y_after, cycles_after, runs_after = run()
    assert runs_after == 2 and runs > 2, (runs, runs_after)  # one per chunk; more when interleaved
    assert y.tobytes() == y_after.tobytes()
    assert cycles < cycles_after, (cycles, cycles_after)
