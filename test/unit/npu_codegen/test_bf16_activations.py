"""Activations held as bf16 in DRAM (passes/graph_to_tile/storage.py
`read_only_as_bf16_activations`, `LoweringContext.narrow_output_buffer`): in bf16 precision a
tensor that only feeds linears as their activations (an rms_norm's output, a GEMM's epilogue
output) is stored as bf16 by its producer and read as bf16 by its consumers, which round it to
bf16 anyway: the same bits as the f32 buffers, half the DRAM bytes, bit-identical to the tile
interpreter with the race checker on."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects import tile as t
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_to_tile import storage, windows
from infer.passes.testing import apply_pass, run_entry
from helpers.tile_programs import npu_matches_tile

CTX = make_context()
M, D, H = 64, 128, 256

TEXT = f"""
func.func @main(%x: tensor<{M}x{D}xf32> {{graph.name = "x"}}) -> (tensor<{M}x{D}xf32> {{graph.name = "y"}}) {{
  %s = graph.weight @s : tensor<{D}xf32>
  %n = graph.rms_norm %x, %s {{axis = -1 : i64, epsilon = 1.0e-05 : f64}} : (tensor<{M}x{D}xf32>, tensor<{D}xf32>) -> tensor<{M}x{D}xf32>
  %w1 = graph.weight @w1 : tensor<{H}x{D}xf32>
  %h = graph.linear %n, %w1 : (tensor<{M}x{D}xf32>, tensor<{H}x{D}xf32>) -> tensor<{M}x{H}xf32>
  %g = graph.silu %h : (tensor<{M}x{H}xf32>) -> tensor<{M}x{H}xf32>
  %w2 = graph.weight @w2 : tensor<{D}x{H}xf32>
  %o = graph.linear %g, %w2 : (tensor<{M}x{H}xf32>, tensor<{D}x{H}xf32>) -> tensor<{M}x{D}xf32>
  %y = graph.add %o, %x : (tensor<{M}x{D}xf32>, tensor<{M}x{D}xf32>) -> tensor<{M}x{D}xf32>
  func.return %y : tensor<{M}x{D}xf32>
}}
"""


def compile_and_run(target: str, precision: str = "bf16"):
    """(output, simulated cycles, DRAM bytes moved, element types of the local DRAM buffers)."""
    module = parse_ir(CTX, TEXT, "mlp.mlir")
    verify_module(module)
    rng = np.random.default_rng(7)
    store = WeightStore()
    store.set("s", (1 + 0.1 * rng.standard_normal(D)).astype(np.float32))
    store.set("w1", (rng.standard_normal((H, D)) * 0.1).astype(np.float32))
    store.set("w2", (rng.standard_normal((D, H)) * 0.1).astype(np.float32))
    attach_weights(module, store)
    x = rng.standard_normal((M, D)).astype(np.float32)
    graph_ref = run_entry(module, [x])[0]
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision={precision}}},"
               f"tile-plan-memory{{target={target}}}", module)
    dram = [str(a.buffer.type.element_type) for a in module.walk()
            if isinstance(a, t.AllocOp) and t.space_of(a.buffer) == "dram"]
    (y,), counters = npu_matches_tile(module, [x], target)
    np.testing.assert_allclose(y, graph_ref, rtol=0.05, atol=0.05)
    return y, counters.cycles, counters.dram_read_bytes + counters.dram_write_bytes, dram


def test_norm_and_gemm_outputs_feeding_linears_are_bf16_with_the_same_bits(monkeypatch):
    y, cycles, moved, dram = compile_and_run("edge")
    assert dram.count("bf16") == 2, dram  # the rms_norm output and the silu(h) epilogue output
    monkeypatch.setattr(storage, "read_only_as_bf16_activations", lambda value: False)
    y_f32, cycles_f32, moved_f32, dram_f32 = compile_and_run("edge")
    assert "bf16" not in dram_f32
    assert y.tobytes() == y_f32.tobytes()
    # each narrowed tensor is written at half the bytes (reads save less where a bf16 row of a
    # k step is shorter than a DRAM burst)
    assert moved_f32 - moved >= (M * D + M * H) * 2, (moved, moved_f32)
    assert cycles < cycles_f32, (cycles, cycles_f32)


@pytest.mark.parametrize("target, precision", [("edge", "fp32"), ("server", "bf16")])
def test_f32_activations_in_fp32_and_on_latency_bound_targets(target, precision):
    """fp32 precision reads both bf16 parts of every activation; on server (DRAM latency, not
    bandwidth, is short) the halved bytes of a linear's input bought nothing (only tensors that
    convs alone read are narrowed there)."""
    _, _, _, dram = compile_and_run(target, precision=precision)
    assert "bf16" not in dram


# a ResNet bottleneck: 1x1 -> relu -> 3x3 (padded; `stride`) -> relu -> 1x1, + a shortcut (the
# input itself, or a strided 1x1 conv of it) and relu. The two inner activations only feed
# convs (bf16 in DRAM); the block's input feeds the residual add as well (f32) unless a strided
# shortcut conv reads it (then every consumer is a conv).
C, WIDTH, HW = 32, 16, 14
# the kernels' tiles pinned (TO x TOH.OW x TC, those the cost model picks for the f32 buffers): a
# narrowed input changes the cost model's byte counts and so may change the tiling, and another
# tile shape may round a sum differently
TILES = {1: "kernel0=16x14x32,kernel1=16x196x16,kernel2=32x28x16",
         2: "kernel0=16x14x32,kernel1=16x49x16,kernel2=32x7x32,kernel3=32x14x16"}


def bottleneck_text(stride: int) -> str:
    out = HW // stride
    x, y = f"tensor<1x{C}x{HW}x{HW}xf32>", f"tensor<1x{C}x{out}x{out}xf32>"
    a, b = f"tensor<1x{WIDTH}x{HW}x{HW}xf32>", f"tensor<1x{WIDTH}x{out}x{out}xf32>"
    pads = "padding = array<i64: 1, 1, 1, 1>"
    shortcut = "%x"
    if stride > 1:
        shortcut = "%d"
    text = f"""
func.func @main(%x: {x} {{graph.name = "x"}}) -> ({y} {{graph.name = "y"}}) {{
  %w1 = graph.weight @w1 : tensor<{WIDTH}x{C}x1x1xf32>
  %b1 = graph.weight @b1 : tensor<{WIDTH}xf32>
  %c1 = graph.conv2d %x, %w1, %b1 : ({x}, tensor<{WIDTH}x{C}x1x1xf32>, tensor<{WIDTH}xf32>) -> {a}
  %r1 = graph.relu %c1 : ({a}) -> {a}
  %w2 = graph.weight @w2 : tensor<{WIDTH}x{WIDTH}x3x3xf32>
  %b2 = graph.weight @b2 : tensor<{WIDTH}xf32>
  %c2 = graph.conv2d %r1, %w2, %b2 {{stride = array<i64: {stride}, {stride}>, {pads}}} : ({a}, tensor<{WIDTH}x{WIDTH}x3x3xf32>, tensor<{WIDTH}xf32>) -> {b}
  %r2 = graph.relu %c2 : ({b}) -> {b}
  %w3 = graph.weight @w3 : tensor<{C}x{WIDTH}x1x1xf32>
  %b3 = graph.weight @b3 : tensor<{C}xf32>
  %c3 = graph.conv2d %r2, %w3, %b3 : ({b}, tensor<{C}x{WIDTH}x1x1xf32>, tensor<{C}xf32>) -> {y}
"""
    if stride > 1:
        text += f"""  %wd = graph.weight @wd : tensor<{C}x{C}x1x1xf32>
  %d = graph.conv2d %x, %wd {{stride = array<i64: {stride}, {stride}>}} : ({x}, tensor<{C}x{C}x1x1xf32>) -> {y}
"""
    return text + f"""  %s = graph.add %c3, {shortcut} : ({y}, {y}) -> {y}
  %y = graph.relu %s : ({y}) -> {y}
  func.return %y : {y}
}}
"""


def compile_bottleneck(stride: int, target: str = "edge", stats: dict[str, int] | None = None,
                       tiles: str | None = None):
    """(output, simulated cycles, DRAM bytes moved, (shape, element type) of the local DRAM
    buffers); `tiles`: overrides instead of TILES[stride]; `stats` gets the number of bf16 ->
    bf16 `tile.vector` copies ("copies") and of scratchpad allocs ("spad allocs")."""
    module = parse_ir(CTX, bottleneck_text(stride), "bottleneck.mlir")
    verify_module(module)
    rng = np.random.default_rng(3)
    store = WeightStore()
    for name, shape in (("w1", (WIDTH, C, 1, 1)), ("w2", (WIDTH, WIDTH, 3, 3)), ("w3", (C, WIDTH, 1, 1)),
                        ("wd", (C, C, 1, 1)), ("b1", (WIDTH,)), ("b2", (WIDTH,)), ("b3", (C,))):
        store.set(name, (rng.standard_normal(shape) * 0.2).astype(np.float32))
    attach_weights(module, store)
    x = rng.standard_normal((1, C, HW, HW)).astype(np.float32)
    graph_ref = run_entry(module, [x])[0]
    apply_pass(f'graph-prepare-tiling,graph-to-tile{{target={target} precision=bf16 overrides="{tiles or TILES[stride]}"}},'
               f"tile-plan-memory{{target={target}}}", module)
    dram = [(tuple(a.buffer.type.get_shape()), str(a.buffer.type.element_type)) for a in module.walk()
            if isinstance(a, t.AllocOp) and t.space_of(a.buffer) == "dram"]
    if stats is not None:
        stats["copies"] = sum(1 for o in module.walk() if isinstance(o, t.VectorOp) and o.op.data == "copy"
                              and str(o.dst.type.element_type) == str(o.a.type.element_type) == "bf16")
        stats["spad allocs"] = sum(1 for a in module.walk() if isinstance(a, t.AllocOp) and t.space_of(a.buffer) == "spad")
    (y,), counters = npu_matches_tile(module, [x], target)
    np.testing.assert_allclose(y, graph_ref, rtol=0.05, atol=0.05)
    return y, counters.cycles, counters.dram_read_bytes + counters.dram_write_bytes, dram


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("stride", [1, 2])
def test_conv_activations_feeding_convs_are_bf16_with_the_same_bits(monkeypatch, stride, target):
    """The inner activations of a bottleneck (1x1 -> 3x3 -> 1x1) are stored and read as bf16,
    on server too (its convs only: storage.CONV_ACTIVATION_OPERAND); with a strided shortcut
    conv the block's input too is read only by convs, but it is a model input (no producer
    narrows it). The 3x3 conv's input is padded: its planes (or its windows padded on chip)
    are built from the bf16 rows."""
    out = HW // stride
    inner = [((1, WIDTH, HW, HW), "bf16"), ((1, WIDTH, out, out), "bf16")]
    y, cycles, moved, dram = compile_bottleneck(stride, target)
    assert all(b in dram for b in inner), dram
    monkeypatch.setattr(storage, "read_only_as_bf16_activations", lambda value, *readers: False)
    y_f32, cycles_f32, moved_f32, dram_f32 = compile_bottleneck(stride, target)
    assert not any(b in dram_f32 for b in inner), dram_f32
    assert y.tobytes() == y_f32.tobytes()
    # the two inner activations written (and, on edge, read at least once) at half their bytes;
    # on server the convs after them read them on chip, f32 or bf16 (conv outputs kept whole,
    # the 3x3/2's rows copied from the kept tile since the forty-sixth session)
    accesses = 2 if target == "edge" else 1
    assert moved_f32 - moved >= (WIDTH * HW * HW + WIDTH * out * out) * 2 * accesses, (moved, moved_f32)
    if target == "edge":  # (DRAM bandwidth bounds its kernels)
        assert cycles < cycles_f32, (cycles, cycles_f32)
    else:
        # on server both kinds of activations are handed to the next conv on chip (conv
        # outputs kept whole, bf16 or f32): stride 1 7,395 against 8,934 cycles, stride 2
        # 10,643 against 10,624 (thirty-sixth session)
        assert cycles <= cycles_f32 * 1.01, (cycles, cycles_f32)


def test_1x1_conv_windows_of_bf16_activations_load_in_place(monkeypatch):
    """The bottleneck's last 1x1 conv reads the 3x3's bf16 output, an unpadded stride-1 input
    already in the windows' element type: its channel-major windows are the input rows DMA'd
    in place (windows.loads_in_place), with no staging tile and no copy into the window; the
    bits are those of the staged path. (Its tiles pinned to the channel-major "pixels"
    orientation: TO=32 x TOH=7, two row tiles.)"""
    tiles = "kernel0=16x14x32,kernel1=16x196x16,kernel2=32x98x16"
    in_place: dict[str, int] = {}
    y, _, _, _ = compile_bottleneck(1, stats=in_place, tiles=tiles)
    monkeypatch.setattr(windows, "loads_in_place", lambda p, pixel_major, same_type: False)
    staged: dict[str, int] = {}
    y_staged, _, _, _ = compile_bottleneck(1, stats=staged, tiles=tiles)
    assert y.tobytes() == y_staged.tobytes()
    # the window copy and the staging tile are gone
    assert (in_place["copies"], in_place["spad allocs"]) == (staged["copies"] - 1, staged["spad allocs"] - 1), \
        (in_place, staged)


# a ResNet stem: conv 7x7/2 -> relu -> max pool 3x3/2 -> two 1x1 convs (as a bottleneck's first
# conv and its shortcut conv read it), their sum
STEM_C, STEM_O, STEM_HW = 3, 16, 32


def stem_text() -> str:
    x = f"tensor<1x{STEM_C}x{STEM_HW}x{STEM_HW}xf32>"
    s, q = STEM_HW // 2, STEM_HW // 4
    a, p = f"tensor<1x{STEM_O}x{s}x{s}xf32>", f"tensor<1x{STEM_O}x{q}x{q}xf32>"
    y = f"tensor<1x{2 * STEM_O}x{q}x{q}xf32>"
    return f"""
func.func @main(%x: {x} {{graph.name = "x"}}) -> ({y} {{graph.name = "y"}}) {{
  %w0 = graph.weight @w0 : tensor<{STEM_O}x{STEM_C}x7x7xf32>
  %c0 = graph.conv2d %x, %w0 {{stride = array<i64: 2, 2>, padding = array<i64: 3, 3, 3, 3>}} : ({x}, tensor<{STEM_O}x{STEM_C}x7x7xf32>) -> {a}
  %r0 = graph.relu %c0 : ({a}) -> {a}
  %p = graph.max_pool2d %r0 {{kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>}} : ({a}) -> {p}
  %w1 = graph.weight @w1 : tensor<{2 * STEM_O}x{STEM_O}x1x1xf32>
  %c1 = graph.conv2d %p, %w1 : ({p}, tensor<{2 * STEM_O}x{STEM_O}x1x1xf32>) -> {y}
  %w2 = graph.weight @w2 : tensor<{2 * STEM_O}x{STEM_O}x1x1xf32>
  %c2 = graph.conv2d %p, %w2 : ({p}, tensor<{2 * STEM_O}x{STEM_O}x1x1xf32>) -> {y}
  %y = graph.add %c1, %c2 : ({y}, {y}) -> {y}
  func.return %y : {y}
}}
"""


def compile_stem(pool_tiles: str = ""):
    """`pool_tiles`: an override of the max pool's tiles (it then takes the planes path);
    (output, simulated cycles, DRAM bytes moved, (shape, element type) of the local DRAM buffers)."""
    module = parse_ir(CTX, stem_text(), "stem.mlir")
    verify_module(module)
    rng = np.random.default_rng(11)
    store = WeightStore()
    for name, shape in (("w0", (STEM_O, STEM_C, 7, 7)), ("w1", (2 * STEM_O, STEM_O, 1, 1)),
                        ("w2", (2 * STEM_O, STEM_O, 1, 1))):
        store.set(name, (rng.standard_normal(shape) * 0.2).astype(np.float32))
    attach_weights(module, store)
    x = rng.standard_normal((1, STEM_C, STEM_HW, STEM_HW)).astype(np.float32)
    graph_ref = run_entry(module, [x])[0]
    # the conv tiles pinned: a narrowed input or output changes the cost model's byte counts
    apply_pass('graph-prepare-tiling,graph-to-tile{target=edge precision=bf16 '
               f'overrides="kernel0=16x16x3,kernel2=32x64x16,kernel3=32x64x16{pool_tiles}"}},'
               'tile-plan-memory{target=edge}', module)
    dram = [(tuple(a.buffer.type.get_shape()), str(a.buffer.type.element_type)) for a in module.walk()
            if isinstance(a, t.AllocOp) and t.space_of(a.buffer) == "dram"]
    (y,), counters = npu_matches_tile(module, [x], "edge")
    np.testing.assert_allclose(y, graph_ref, rtol=0.05, atol=0.05)
    return y, counters.cycles, counters.dram_read_bytes + counters.dram_write_bytes, dram


@pytest.mark.parametrize("pool_tiles", ["", ",kernel1=16x4"])
def test_max_pool_between_convs_reads_and_writes_bf16_with_the_same_bits(monkeypatch, pool_tiles):
    """bf16 rounding commutes with max (storage.ROUNDING_COMMUTES): the stem conv's output,
    read only by the max pool whose result only convs read, is held as bf16, and so is the
    pool's result (pooling.lower_max_pool_windows rounds it into a compact tile); the convs
    round their windows to bf16 anyway, so the bits are those of the f32 buffers. The pool's
    planes path (its tiles overridden) reads the bf16 input and writes an f32 result."""
    s, q = STEM_HW // 2, STEM_HW // 4
    narrowed = [((1, STEM_O, s, s), "bf16"), ((1, STEM_O, q, q), "bf16")]
    if pool_tiles:
        narrowed.pop()
    y, cycles, moved, dram = compile_stem(pool_tiles)
    assert all(b in dram for b in narrowed), dram
    with monkeypatch.context() as m:  # the stem conv's output is narrowed through the pool only
        m.setattr(storage, "ROUNDING_COMMUTES", {})
        assert narrowed[0] not in compile_stem(pool_tiles)[3]
    monkeypatch.setattr(storage, "read_only_as_bf16_activations", lambda value: False)
    y_f32, cycles_f32, moved_f32, dram_f32 = compile_stem(pool_tiles)
    assert not any(b in dram_f32 for b in narrowed), dram_f32
    assert y.tobytes() == y_f32.tobytes()
    # the conv output written and read (and the pool's result written and read twice), at half the bytes
    assert moved_f32 - moved >= (STEM_O * s * s * 2 + (0 if pool_tiles else STEM_O * q * q * 3)) * 2, \
        (moved, moved_f32)
    if not pool_tiles:  # (the planes path pays the stem's bf16 store copy and saves less)
        assert cycles < cycles_f32, (cycles, cycles_f32)
