"""A conv's whole bf16 output kept on chip for the next kernels (conv_store.store_output_tile,
`LoweringContext.keep_on_chip`; issue 14 item 4): on a latency-bound target (server) a conv whose
one output tile is its whole output records the tile, and the convs after it read it instead
of loading it back from DRAM, a load that waited for the store and a DRAM latency of its own:
a 1x1 conv with one window reads the tile in place as that window (conv.py
`ConvKernel.window_on_chip`), a conv building its windows on chip copies its input rows from it
(windows.WindowLoader's `kept`), a depthwise conv on the vector unit too (depthwise.py). The programs are bit-identical to the tile interpreter with the
race checker on, compute the same bits as with the kept outputs turned off, and are faster.
Edge keeps none (its scratchpad is small and its DRAM's bandwidth, not its latency, bounds
its kernels)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import f32

from infer.dialects import tile as t
from infer.passes.graph_to_tile import conv_store
from helpers.graph_programs import conv_chain
from helpers.kept_programs import compile_and_run, kept_against_off


def image(C: int, HW: int) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((1, C, HW, HW)).astype(np.float32)


@pytest.mark.parametrize("kernels", [[3, 1], [1, 3], [1, 3, 1]], ids=["3x3-then-1x1", "1x1-then-3x3", "1x1-3x3-1x1"])
def test_next_conv_reads_the_output_on_chip(monkeypatch, kernels):
    """server, 64 channels at 14x14 (every conv one tile): no DMA reads an intermediate back; with
    the kept outputs off (no later kernel may read one) each is loaded from DRAM: the same bits,
    more cycles."""
    text, weights = conv_chain(64, 14, kernels)
    kept_against_off(monkeypatch, text, weights, image(64, 14), conv_store, "KEPT_CONV_OUTPUT_READERS", 0)


def test_output_of_several_channel_tiles_is_kept_whole(monkeypatch):
    """server, a 1x1 conv of 256 channels at 14x14 in four output-channel tiles of every row
    (overridden), then a 1x1 conv: each tile's epilogue writes its rows of one [256, 196] bf16
    buffer and its store reads them from there (conv.py `ConvKernel.output_kept_whole`); the
    second conv reads the buffer in place (nothing is loaded back). Without the buffer the
    second conv loads the output from DRAM: the same bits, more cycles. The epilogue of tile
    j + 1 and the store of tile j touch different rows of the buffer in every iteration of the
    tile loop, so they overlap (tile-to-npu's `apart_across_iterations`)."""
    from infer.passes.graph_to_tile import conv

    text, weights = conv_chain(256, 14, [1, 1])
    kept_against_off(monkeypatch, text, weights, image(256, 14), conv.ConvKernel, "output_kept_whole",
                     lambda self, footprint: None, overrides="kernel0=64x196x256")


def test_tiles_of_a_whole_kept_output_overlap_their_stores(monkeypatch):
    """The same chain in eight tiles of 32 channels: tile j + 1's epilogue writes rows of the kept buffer that tile j's store
    does not read, in every iteration of the tile loop (both stepped by it by the tile's rows):
    tile-to-npu's loop-carried check lets it start before that store completes. Taken as
    conflicting (the check off), each tile's epilogue waits for the store before it: the same
    bits, more cycles."""
    from infer.passes.tile_to_npu import dependencies

    text, weights = conv_chain(256, 14, [1, 1])
    x = image(256, 14)
    y, cycles, _ = compile_and_run(text, weights, "server", "bf16", x, "kernel0=32x196x256")
    monkeypatch.setattr(dependencies, "apart_across_iterations", lambda *args: False)
    y_serial, cycles_serial, _ = compile_and_run(text, weights, "server", "bf16", x, "kernel0=32x196x256")
    assert y.tobytes() == y_serial.tobytes()
    assert cycles < cycles_serial, (cycles, cycles_serial)


def test_depthwise_conv_on_the_vector_unit_reads_and_keeps_on_chip(monkeypatch):
    """server, 96 channels at 14x14: 1x1 -> depthwise 3x3 (on the vector unit: its taps are
    `mul`s by a weight column, no matmul) -> 1x1. The depthwise conv copies its input rows
    from the first conv's kept output and keeps its own for the last: nothing is loaded back;
    the same bits as with the kept outputs off, fewer cycles."""
    from infer.passes.testing import apply_pass
    from helpers.graph_programs import parse_with_weights

    text, weights = conv_chain(96, 14, [1, "dw3", 1])
    module = parse_with_weights(text, weights, "chain.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}", module)
    taps = [op for op in module.walk() if isinstance(op, t.VectorOp) and op.op.data == "mul"
            and op.bmode is not None and op.bmode.data == "col"]
    assert taps and sum(isinstance(op, t.MatmulOp) for op in module.walk()) > 0
    kept_against_off(monkeypatch, text, weights, image(96, 14), conv_store, "KEPT_CONV_OUTPUT_READERS", 0)


def test_pointwise_conv_reads_the_kept_tile_as_its_window():
    """The 1x1 conv after a 3x3 one: its matmuls read the 3x3's kept output tile itself (no
    window of its own is loaded or copied), the tile the 3x3 stores its output from."""
    from infer.passes.testing import apply_pass
    from helpers.graph_programs import parse_with_weights

    text, weights = conv_chain(64, 14, [3, 1])
    module = parse_with_weights(text, weights, "chain.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}", module)
    stored_from = {op.src for op in module.walk() if isinstance(op, t.DmaOp) and not op.is_load
                   and t.space_of(op.src) == "spad"}
    matmul_operands = {t.root_buffer(v) for op in module.walk() if isinstance(op, t.MatmulOp) for v in op.operands}
    assert any(t.root_buffer(s) in matmul_operands for s in stored_from)


def test_edge_keeps_no_conv_output():
    """edge: the second conv loads the first's output from DRAM, as before (bit-identical)."""
    text, weights = conv_chain(64, 14, [3, 1])
    _, _, reloads = compile_and_run(text, weights, "edge", "bf16", image(64, 14))
    assert reloads >= 1


def test_kernels_up_to_the_last_reader_leave_room_for_a_kept_output(monkeypatch):
    """A kept conv output stays live to its last reader, so the kernels named up to the last
    one that may read it (two names on) are sized for the scratchpad less its bytes
    (`LoweringContext.memory_for_next_kernel`, `keep_on_chip(..., charged=True)`): server, four
    one-tile convs of 64 channels at 14x14, each keeping its [64, 196] bf16 output (one
    buffer: a one-tile nest's buffers rotate on no loop): the first kernel is sized for all 16 MiB, the second for that less one kept
    output, the third and fourth less two (the first's is no longer readable by the fourth)."""
    from infer.passes.graph_to_tile import context
    from infer.passes.testing import apply_pass
    from infer.target.hw import load_config
    from helpers.graph_programs import parse_with_weights

    sized: list[int] = []
    original = context.LoweringContext.memory_for_next_kernel

    def recording(self):
        original(self)
        sized.append(self.hw.memory.scratchpad_bytes)

    monkeypatch.setattr(context.LoweringContext, "memory_for_next_kernel", recording)
    text, weights = conv_chain(64, 14, [3, 1, 1, 1])
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}",
               parse_with_weights(text, weights, "chain.mlir"))
    capacity, kept = load_config("server").memory.scratchpad_bytes, 64 * 196 * 2
    assert sized == [capacity, capacity - kept, capacity - 2 * kept, capacity - 2 * kept]


def strided_after_pointwise(C: int, HW: int, k: int = 3, stride: tuple[int, int] = (1, 2), pad: int = 1,
                            groups: int = 1) -> tuple[str, dict[str, np.ndarray]]:
    """x [1, C, HW, HW] -> 1x1 conv -> relu -> kxk conv of `stride`, padding `pad`, `groups`
    (C: depthwise); (IR text, weights)."""
    OH, OW = ((HW + 2 * pad - k) // s + 1 for s in stride)
    x, w0, w1 = f"tensor<1x{C}x{HW}x{HW}xf32>", f"tensor<{C}x{C}x1x1xf32>", f"tensor<{C}x{C // groups}x{k}x{k}xf32>"
    y = f"tensor<1x{C}x{OH}x{OW}xf32>"
    text = f"""func.func @main(%x: {x} {{graph.name = "x"}}) -> ({y} {{graph.name = "y"}}) {{
  %w0 = graph.weight @w0 : {w0}
  %c0 = graph.conv2d %x, %w0 : ({x}, {w0}) -> {x}
  %r0 = graph.relu %c0 : ({x}) -> {x}
  %w1 = graph.weight @w1 : {w1}
  %c1 = graph.conv2d %r0, %w1 {{stride = array<i64: {stride[0]}, {stride[1]}>, padding = array<i64: {pad}, {pad}, {pad}, {pad}>, groups = {groups} : i64}} : ({x}, {w1}) -> {y}
  func.return %c1 : {y}
}}"""
    rng = np.random.default_rng(2)
    return text, {"w0": (rng.standard_normal((C, C, 1, 1)) * 0.2).astype(np.float32),
                  "w1": (rng.standard_normal((C, C // groups, k, k)) * 0.05).astype(np.float32)}


@pytest.mark.parametrize("HW, reloads", [(16, 0), (15, 1)], ids=["even-width", "odd-width"])
def test_column_strided_conv_after_a_kept_output(HW, reloads):
    """A 3x3 conv of stride (1, 2) after a one-tile 1x1 conv (server): with an even width its
    windows copy the kept rows (nothing reloaded); with an odd one the narrower column phase is
    DMA'd with element steps, so its input is loaded from DRAM (a kept tile would not do: this
    compiled into an assertion before `windows.copies_kept_rows`). Tile interpreter = simulator,
    close to the graph interpreter."""
    text, weights = strided_after_pointwise(32, HW)
    _, _, found = compile_and_run(text, weights, "server", "bf16", image(32, HW))
    assert (found == 0) if reloads == 0 else (found >= 1)


@pytest.mark.parametrize("C, HW, k, stride, pad, groups, overrides", [
    (64, 14, 3, 2, 1, 1, ""),  # ResNet-50's 3x3/2 (here 64 channels at 14x14)
    (48, 16, 3, 2, 1, 1, "kernel1=48x16x32"),  # a remainder channel step, a loop of row tiles
    (64, 14, 1, 2, 0, 1, ""),  # a 1x1/2 downsampling conv: one row phase
    (32, 12, 5, 2, 2, 1, "kernel1=32x12x32"),  # row tiles whose windows reach into the padding
    (32, 14, 3, 2, 1, 32, ""),  # depthwise 3x3/2 on the vector unit (depthwise.py)
    (32, 15, 3, 3, 1, 1, ""),  # stride 3: three row phases, a height the stride does not divide
], ids=["3x3", "3x3-row-tiles", "1x1", "5x5-row-tiles", "depthwise", "3x3-stride-3"])
def test_row_strided_conv_copies_its_rows_from_a_kept_output(monkeypatch, C, HW, k, stride, pad, groups, overrides):
    """A conv with a row stride after a one-tile 1x1 conv (server): each row phase's staging
    rows are copied from the kept output, one vector copy per window row (every stride-th input
    row), so nothing is loaded back from DRAM; with the kept outputs off the same bits, more
    cycles. Tile interpreter = simulator with the race checker on, close to the graph
    interpreter."""
    from infer.passes import tiling_cost

    if overrides:  # (windows built on chip: planes prepared in DRAM would read the DRAM copy)
        monkeypatch.setattr(tiling_cost, "_padding_choices", lambda s: (True,))
    text, weights = strided_after_pointwise(C, HW, k, (stride, stride), pad, groups)
    kept_against_off(monkeypatch, text, weights, image(C, HW), conv_store, "KEPT_CONV_OUTPUT_READERS", 0,
                     overrides=overrides)


def test_convs_read_only_kept_tiles_charged_to_the_kernels_before_them(monkeypatch):
    """A conv reading a kept tile keeps it live through its own nest, which may fill the
    scratchpad, so it reads only tiles kept `charged` (`windows.kept_window`): with the 3x3
    conv's output kept uncharged, the 1x1 conv after it loads it from DRAM."""
    from infer.passes.graph_to_tile import context

    keep = context.LoweringContext.keep_on_chip
    monkeypatch.setattr(context.LoweringContext, "keep_on_chip",
                        lambda self, dram, tile, next_kernels=None, charged=False: keep(self, dram, tile, next_kernels))
    text, weights = conv_chain(64, 14, [3, 1])
    _, _, reloads = compile_and_run(text, weights, "server", "bf16", image(64, 14))
    assert reloads >= 1


def pointwise_bottleneck(C: int, W: int, HW: int) -> tuple[str, dict[str, np.ndarray]]:
    """x [1, W, HW, HW] -> 1x1 conv to C channels -> relu (the trunk r) -> 1x1 conv to W ->
    relu -> 1x1 conv to C, plus r: a ResNet bottleneck's pointwise convs, whose trunk is read
    by a conv and by a residual add, so it is held as f32 (IR text, weights)."""
    wide, narrow = f"tensor<1x{C}x{HW}x{HW}xf32>", f"tensor<1x{W}x{HW}x{HW}xf32>"
    shapes = [(W, C, "%x", narrow, wide), (C, W, "%r0", wide, narrow), (W, C, "%r1", narrow, wide)]
    lines = [f'func.func @main(%x: {narrow} {{graph.name = "x"}}) -> ({wide} {{graph.name = "y"}}) {{']
    rng = np.random.default_rng(3)
    weights = {}
    for i, (cin, cout, src, ti, to) in enumerate(shapes):
        w, b = f"tensor<{cout}x{cin}x1x1xf32>", f"tensor<{cout}xf32>"
        lines += [f"  %w{i} = graph.weight @w{i} : {w}", f"  %b{i} = graph.weight @b{i} : {b}",
                  f"  %c{i} = graph.conv2d {src}, %w{i}, %b{i} : ({ti}, {w}, {b}) -> {to}"]
        if i < 2:
            lines.append(f"  %r{i} = graph.relu %c{i} : ({to}) -> {to}")
        weights[f"w{i}"] = (rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32)
        weights[f"b{i}"] = (rng.standard_normal(cout) * 0.1).astype(np.float32)
    lines += [f"  %s = graph.add %c2, %r0 : ({wide}, {wide}) -> {wide}", f"  func.return %s : {wide}", "}"]
    return "\n".join(lines), weights


def test_f32_trunk_is_kept_whole_and_rounded_into_windows_ahead(monkeypatch):
    """server, a bottleneck's pointwise convs at 28x28 (512 <-> 128 channels): the trunk, f32
    (a residual add reads it too), is the first conv's output of four channel tiles, kept whole
    on chip in f32 (`ConvKernel.output_kept_whole`; each tile's relu writes its rows there). The
    second conv rounds its windows straight from it (windows.WindowLoader's `rounds_kept`), one
    row tile ahead of the matmuls (tile-to-npu's pipelined preparation without loads), and loads
    nothing of it back. Against the outputs not kept: the same bits, fewer cycles, fewer DMAs
    of intermediates. Against the preparation not pipelined: the same bits, fewer cycles (the
    vector unit would round each row tile's window after the epilogue of the tile before).
    Measured: 14,798 cycles; 17,902 with the outputs not kept; 17,318 without the pipelined
    preparation (19,561 before the third conv's residual tiles were copied out of the kept trunk
    instead of loaded: `elementwise._kept_operand`)."""
    from infer.passes.graph_to_tile import conv
    from infer.passes.testing import apply_pass
    from infer.passes.tile_to_npu import rotation
    from helpers.graph_programs import parse_with_weights

    # (the relus apart from the bias adds: with the second conv's computed by its bias add,
    # `add_relu`, the cost model ranks one tile of its 28 rows first, which has no row tile to
    # prepare ahead; 17.1 K cycles against 16.7 K)
    monkeypatch.setattr(conv, "fuses_relu", lambda *args: False)
    text, weights = pointwise_bottleneck(512, 128, 28)
    module = parse_with_weights(text, weights, "bottleneck.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}", module)
    kept = [a for a in module.walk() if isinstance(a, t.AllocOp) and t.space_of(a.buffer) == "spad"
            and a.buffer.type.get_shape() == (512, 784) and a.buffer.type.element_type == f32]
    assert len(kept) == 1
    x = np.random.default_rng(1).standard_normal((1, 128, 28, 28)).astype(np.float32)
    y, cycles, reloads = compile_and_run(text, weights, "server", "bf16", x)
    monkeypatch.setattr(rotation, "constant_bounds", lambda loop: False)
    y_serial, cycles_serial, _ = compile_and_run(text, weights, "server", "bf16", x)
    monkeypatch.undo()
    monkeypatch.setattr(conv, "fuses_relu", lambda *args: False)
    monkeypatch.setattr(conv.ConvKernel, "output_kept_whole", lambda self, footprint: None)
    y_off, cycles_off, reloads_off = compile_and_run(text, weights, "server", "bf16", x)
    assert y.tobytes() == y_serial.tobytes() == y_off.tobytes()
    assert reloads < reloads_off
    assert cycles < min(cycles_off, cycles_serial), (cycles, cycles_off, cycles_serial)
