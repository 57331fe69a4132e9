"""Max pooling of stride 2 read in place (passes/graph_to_tile/pooling_strided.py): 3x3 windows
with padding 1 and 2x2 windows over even maps, their column and row maxima taken by strided
vector ops on the staged input rows (no phase planes). The same values as the graph interpreter,
bit for bit (max is exact; the -inf border, NaN and -inf inputs included), tile interpreter =
simulator with the race checker on, on both configs; the row tiles' loop, the first tile (the
border above it) and the last (rows past the input) all run; a bf16 activation between convs
pooled in bf16; on server the conv before's output kept on chip read in place and the result
kept for the conv after (no activation loaded back); other pools keep the windows path."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from infer.dialects import tile as t
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.passes.testing import apply_pass, run_entry
from infer.passes.tile_to_npu.common import root_buffer
from helpers.tile_programs import npu_matches_tile
from xdsl.dialects import scf
from xdsl.ir import BlockArgument

CTX = make_context()


def pool_text(C: int, H: int, k: int, pad: int, stride: int = 2) -> tuple[str, int]:
    OH = (H + 2 * pad - k) // stride + 1
    x, y = f"tensor<1x{C}x{H}x{H}xf32>", f"tensor<1x{C}x{OH}x{OH}xf32>"
    return f"""func.func @main(%x: {x}) -> {y} {{
  %r = graph.max_pool2d %x {{kernel = array<i64: {k}, {k}>, stride = array<i64: {stride}, {stride}>, padding = array<i64: {pad}, {pad}, {pad}, {pad}>}} : ({x}) -> {y}
  func.return %r : {y}
}}""", OH


def compile_and_run(text: str, target: str, x: np.ndarray, capsys) -> tuple[np.ndarray, np.ndarray, str, object]:
    """(graph interpreter's output, the simulator's, the debug-tiling log, the tile-level module)."""
    module = parse_ir(CTX, text, "m.mlir")
    verify_module(module)
    reference = run_entry(module, [x])[0]
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision=bf16 debug-tiling=true}},"
               f"tile-plan-memory{{target={target}}}", module)
    log = capsys.readouterr().err
    tile_module = module.clone()  # (npu_matches_tile lowers the module further)
    (y,), _ = npu_matches_tile(module, [x], target)
    return reference, y, log, tile_module


def awkward_input(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Normal values shifted below zero (a window's maximum is negative, so a border taken as 0
    would show), with -inf and NaN in places."""
    x = (np.random.default_rng(seed).standard_normal(shape) - 4.0).astype(np.float32)
    x[0, 0, 0, :3] = -np.inf
    if shape[1] > 1 and shape[2] > 5 and shape[3] > 7:
        x[0, 1, 5, 7] = np.nan
    x[0, 0, -1, -1] = 3.0  # the last row and column: inside the last window
    return x


@pytest.mark.parametrize("target, C, H, k, pad", [
    ("server", 16, 64, 3, 1),
    ("server", 64, 112, 3, 1),  # ResNet-50's: a loop of 5 row tiles between the first and the last
    ("edge", 8, 32, 3, 1),
    ("server", 8, 32, 2, 0),
    ("edge", 4, 48, 2, 0),
])
def test_strided_max_pool_matches_the_interpreter(target, C, H, k, pad, capsys) -> None:
    text, OH = pool_text(C, H, k, pad)
    x = awkward_input((1, C, H, H), seed=H + k)
    reference, y, log, _ = compile_and_run(text, target, x, capsys)
    assert "read in place" in log
    assert y.shape == (1, C, OH, OH)
    np.testing.assert_array_equal(y, reference)  # NaN where the reference has NaN
    assert np.isnan(y[0, 1]).sum() >= 1 and np.isfinite(y[0, 0]).all()


def test_the_row_tiles_loop(capsys) -> None:
    """ResNet-50's pool on server: its inner row tiles are one loop (the looped tiles' buffers
    rotate), and five vector ops per tile."""
    text, _ = pool_text(64, 112, 3, 1)
    x = awkward_input((1, 64, 112, 112), seed=5)
    _, _, _, module = compile_and_run(text, "server", x, capsys)
    loops = [op for op in module.walk() if isinstance(op, scf.ForOp)]
    assert loops, "no row-tile loop"
    body_maxes = [op for op in loops[-1].walk() if isinstance(op, t.VectorOp) and op.op.data == "max"]
    assert len(body_maxes) == 5


def test_bf16_activation_between_convs(capsys) -> None:
    """A pool between convs reads and writes bf16 activations (the conv's rounded output): the
    strided path stages bf16 rows and writes the bf16 result, close to the graph interpreter."""
    C, H, O = 16, 32, 16
    x_t, c_t, p_t = f"tensor<1x3x{H}x{H}xf32>", f"tensor<1x{C}x{H}x{H}xf32>", f"tensor<1x{C}x{H // 2}x{H // 2}xf32>"
    o_t = f"tensor<1x{O}x{H // 2}x{H // 2}xf32>"
    text = f"""func.func @main(%x: {x_t}) -> {o_t} {{
  %w = graph.constant dense<0.05> : tensor<{C}x3x3x3xf32>
  %c = graph.conv2d %x, %w {{padding = array<i64: 1, 1, 1, 1>}} : ({x_t}, tensor<{C}x3x3x3xf32>) -> {c_t}
  %r = graph.relu %c : ({c_t}) -> {c_t}
  %p = graph.max_pool2d %r {{kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>}} : ({c_t}) -> {p_t}
  %w2 = graph.constant dense<0.02> : tensor<{O}x{C}x1x1xf32>
  %o = graph.conv2d %p, %w2 : ({p_t}, tensor<{O}x{C}x1x1xf32>) -> {o_t}
  func.return %o : {o_t}
}}"""
    x = np.random.default_rng(3).standard_normal((1, 3, H, H)).astype(np.float32)
    for target in ("edge", "server"):
        reference, y, log, module = compile_and_run(text, target, x, capsys)
        assert "read in place" in log
        pool_maxes = [line for line in str(module).splitlines() if 'tile.vector "max"' in line]
        assert pool_maxes and all("bf16" in line for line in pool_maxes[:2]), "the column maxima do not read bf16 rows"
        np.testing.assert_allclose(y, reference, rtol=2e-2, atol=2e-2)


def rect_pool_text(N: int, C: int, H: int, W: int, k: int, pads: tuple[int, int, int, int]) -> str:
    OH, OW = H // 2, W // 2
    x, y = f"tensor<{N}x{C}x{H}x{W}xf32>", f"tensor<{N}x{C}x{OH}x{OW}xf32>"
    return f"""func.func @main(%x: {x}) -> {y} {{
  %r = graph.max_pool2d %x {{kernel = array<i64: {k}, {k}>, stride = array<i64: 2, 2>, padding = array<i64: {pads[0]}, {pads[1]}, {pads[2]}, {pads[3]}>}} : ({x}) -> {y}
  func.return %r : {y}
}}"""


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("N, C, H, W, k, pads", [
    (2, 6, 60, 20, 3, (1, 1, 0, 0)),  # 12 planes (a remainder channel tile), no bottom/right padding
    (1, 5, 22, 38, 3, (1, 1, 1, 1)),  # a short last row tile
    (3, 4, 26, 10, 2, (0, 0, 0, 0)),
    (1, 3, 2, 2, 3, (1, 1, 1, 1)),  # one output pixel: the border on every side but the input's
    (1, 1, 128, 2, 3, (1, 1, 1, 1)),  # one output column
])
def test_batches_rectangles_and_remainders(target, N, C, H, W, k, pads, capsys) -> None:
    x = awkward_input((N, C, H, W), seed=N * 100 + H)
    reference, y, log, _ = compile_and_run(rect_pool_text(N, C, H, W, k, pads), target, x, capsys)
    assert "read in place" in log
    np.testing.assert_array_equal(y, reference)


@pytest.mark.parametrize("k, pad", [(3, 1), (2, 0)])
def test_kept_input_read_in_place_on_server(k, pad, capsys) -> None:
    """Between two convs on server the conv before keeps its whole output on chip: the pool reads
    that tile in place (no DMA in) and keeps its result for the conv after it. Both convs are
    1x1 identities and the input bf16 values, below zero (a border taken as 0 would show), so
    the output is the pool of the input exactly: bit for bit against the graph interpreter."""
    C, H = 16, 32
    OH = H // 2
    x_t, p_t = f"tensor<1x{C}x{H}x{H}xf32>", f"tensor<1x{C}x{OH}x{OH}xf32>"
    w_t = f"tensor<{C}x{C}x1x1xf32>"
    eye = "[" + ", ".join("[" + ", ".join(f"[[{1.0 if i == j else 0.0}]]" for j in range(C)) + "]" for i in range(C)) + "]"
    text = f"""func.func @main(%x: {x_t}) -> {p_t} {{
  %w = graph.constant dense<{eye}> : {w_t}
  %c = graph.conv2d %x, %w : ({x_t}, {w_t}) -> {x_t}
  %p = graph.max_pool2d %c {{kernel = array<i64: {k}, {k}>, stride = array<i64: 2, 2>, padding = array<i64: {pad}, {pad}, {pad}, {pad}>}} : ({x_t}) -> {p_t}
  %o = graph.conv2d %p, %w : ({p_t}, {w_t}) -> {p_t}
  func.return %o : {p_t}
}}"""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((1, C, H, H)) - 4.0).astype(ml_dtypes.bfloat16).astype(np.float32)
    reference, y, log, module = compile_and_run(text, "server", x, capsys)
    assert "from the kept input" in log
    # nothing loads an activation back from DRAM: the DMAs in read the model's input and weights
    weights = {op.buffer for op in module.walk() if isinstance(op, t.WeightOp)}
    sources = {root_buffer(op.src) for op in module.walk() if isinstance(op, t.DmaOp) and t.space_of(op.src) == "dram"}
    assert sources and all(src in weights or isinstance(src, BlockArgument) for src in sources), sources
    np.testing.assert_array_equal(y, reference)


@pytest.mark.parametrize("H, k, pad, stride", [(15, 3, 1, 2), (32, 3, 0, 2), (32, 3, 1, 1)])
def test_other_pools_keep_the_windows_path(H, k, pad, stride, capsys) -> None:
    text, _ = pool_text(8, H, k, pad, stride)
    x = awkward_input((1, 8, H, H), seed=9)
    reference, y, log, _ = compile_and_run(text, "server", x, capsys)
    assert "read in place" not in log
    np.testing.assert_array_equal(y, reference)
