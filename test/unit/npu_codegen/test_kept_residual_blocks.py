"""A residual kept whole on chip, read block by block (graph_to_tile/elementwise.py
`_kept_operand`, `kept_block`), server bf16: ResNet-50's first stage-4 bottleneck, whose
downsampling conv (1x1/2 1024->2048) keeps its f32 output whole on chip, and whose expanding
conv (1x1 512->2048) adds that residual to each 512-channel output tile. Each tile's block of it
is copied out of the kept tile by one vector op instead of loaded from DRAM (where the load
waited for the downsampling conv's store and a DRAM latency of its own). The same bits (the
simulator bit for bit the tile interpreter, race checker on), close to the graph interpreter,
no load of the residual, fewer cycles (measured: 19,781 against 20,638)."""

from __future__ import annotations

import numpy as np

from xdsl.dialects.builtin import f32

from infer.dialects import tile as t
from infer.passes.graph_to_tile import elementwise
from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import parse_with_weights
from helpers.tile_programs import npu_matches_tile


def bottleneck() -> tuple[str, dict[str, np.ndarray]]:
    """x [1, 1024, 14, 14] -> 1x1/2 1024->512, relu (m); 1x1/2 1024->2048 (d, the residual);
    1x1 512->2048 of m, + d, relu."""
    x, m, y = "tensor<1x1024x14x14xf32>", "tensor<1x512x7x7xf32>", "tensor<1x2048x7x7xf32>"
    convs = [("m", 512, 1024, "%in", x, m, 2), ("d", 2048, 1024, "%in", x, y, 2), ("e", 2048, 512, "%rm", m, y, 1)]
    lines = [f'func.func @main(%in: {x} {{graph.name = "x"}}) -> ({y} {{graph.name = "y"}}) {{']
    rng = np.random.default_rng(31)
    weights = {}
    for name, cout, cin, src, ti, to, stride in convs:
        w, b = f"tensor<{cout}x{cin}x1x1xf32>", f"tensor<{cout}xf32>"
        lines += [f"  %w{name} = graph.weight @w{name} : {w}", f"  %b{name} = graph.weight @b{name} : {b}",
                  f"  %c{name} = graph.conv2d {src}, %w{name}, %b{name} {{stride = array<i64: {stride}, {stride}>}}"
                  f" : ({ti}, {w}, {b}) -> {to}"]
        if name == "m":
            lines.append(f"  %rm = graph.relu %cm : ({m}) -> {m}")
        weights[f"w{name}"] = (rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32)
        weights[f"b{name}"] = (rng.standard_normal(cout) * 0.1).astype(np.float32)
    lines += [f"  %s = graph.add %ce, %cd : ({y}, {y}) -> {y}", f"  %r = graph.relu %s : ({y}) -> {y}",
              f"  func.return %r : {y}", "}"]
    return "\n".join(lines), weights


def run(x: np.ndarray) -> tuple[np.ndarray, int, int]:
    """-> (output, cycles, loads into the [512, 49] f32 tiles of the residual)."""
    module = parse_with_weights(*bottleneck(), "bottleneck.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}", module)
    residual_loads = sum(1 for op in module.walk() if isinstance(op, t.DmaOp) and t.space_of(op.src) == "dram"
                         and op.dst.type.get_shape() == (512, 49))
    apply_pass("tile-plan-memory{target=server}", module)
    (y,), counters = npu_matches_tile(module, [x], "server")
    return y, counters.cycles, residual_loads


def test_residual_blocks_copied_out_of_the_kept_downsampling_output(monkeypatch):
    x = np.random.default_rng(32).standard_normal((1, 1024, 14, 14)).astype(np.float32)
    reference = run_entry(parse_with_weights(*bottleneck(), "bottleneck.mlir"), [x])[0]
    y, cycles, loads = run(x)
    monkeypatch.setattr(elementwise, "kept_block", lambda em, kept, frame: None)
    y_loaded, cycles_loaded, loads_loaded = run(x)
    assert loads == 0 and loads_loaded >= 1, (loads, loads_loaded)
    assert y.tobytes() == y_loaded.tobytes()
    np.testing.assert_allclose(y, reference, rtol=0, atol=0.02 * float(np.abs(reference).max()))
    assert cycles < cycles_loaded, (cycles, cycles_loaded)


def next_block() -> tuple[str, dict[str, np.ndarray]]:
    """x [1, 512, 7, 7] -> 1x1 512->2048, relu (t, the trunk: a residual add reads it, so f32)
    -> the next bottleneck: 1x1 2048->512, relu; 3x3 512->512, relu; 1x1 512->2048, + t, relu."""
    x, t_, m = "tensor<1x512x7x7xf32>", "tensor<1x2048x7x7xf32>", "tensor<1x512x7x7xf32>"
    convs = [("t", 2048, 512, 1, "%in", x, t_), ("a", 512, 2048, 1, "%rt", t_, m), ("b", 512, 512, 3, "%ra", m, m),
             ("c", 2048, 512, 1, "%rb", m, t_)]
    lines = [f'func.func @main(%in: {x} {{graph.name = "x"}}) -> ({t_} {{graph.name = "y"}}) {{']
    rng = np.random.default_rng(33)
    weights = {}
    for name, cout, cin, k, src, ti, to in convs:
        w, b = f"tensor<{cout}x{cin}x{k}x{k}xf32>", f"tensor<{cout}xf32>"
        pad = " {padding = array<i64: 1, 1, 1, 1>}" if k == 3 else ""
        lines += [f"  %w{name} = graph.weight @w{name} : {w}", f"  %b{name} = graph.weight @b{name} : {b}",
                  f"  %c{name} = graph.conv2d {src}, %w{name}, %b{name}{pad} : ({ti}, {w}, {b}) -> {to}"]
        if name != "c":
            lines.append(f"  %r{name} = graph.relu %c{name} : ({to}) -> {to}")
        weights[f"w{name}"] = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        weights[f"b{name}"] = (rng.standard_normal(cout) * 0.1).astype(np.float32)
    lines += [f"  %s = graph.add %cc, %rt : ({t_}, {t_}) -> {t_}", f"  %r = graph.relu %s : ({t_}) -> {t_}",
              f"  func.return %r : {t_}", "}"]
    return "\n".join(lines), weights


def test_small_trunk_kept_for_the_next_blocks_residual(monkeypatch):
    """The 7x7 stage's trunk (2048 x 49 f32, 392 KB: within 1/32 of server's scratchpad) stays
    on chip for the third kernel after it, the next block's expanding conv, whose residual
    blocks are then copied out of it (`ConvKernel.kept_output_readers`). Measured: 26,561
    against 27,420 cycles with the trunk kept for two kernels."""
    from infer.passes.graph_to_tile import conv

    x = np.random.default_rng(34).standard_normal((1, 512, 7, 7)).astype(np.float32)
    text, weights = next_block()
    reference = run_entry(parse_with_weights(text, weights, "block.mlir"), [x])[0]

    def run_block() -> tuple[np.ndarray, int, int]:
        module = parse_with_weights(text, weights, "block.mlir")
        apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}", module)
        loads = sum(1 for op in module.walk() if isinstance(op, t.DmaOp) and t.space_of(op.src) == "dram"
                    and t.space_of(op.dst) == "spad" and op.dst.type.get_shape() == (512, 49)
                    and op.dst.type.element_type == f32)
        apply_pass("tile-plan-memory{target=server}", module)
        (y,), counters = npu_matches_tile(module, [x], "server")
        return y, counters.cycles, loads

    y, cycles, loads = run_block()
    monkeypatch.setattr(conv.ConvKernel, "kept_output_readers", lambda self: conv.KEPT_CONV_OUTPUT_READERS)
    y_loaded, cycles_loaded, loads_loaded = run_block()
    assert loads == 0 and loads_loaded >= 1, (loads, loads_loaded)
    assert y.tobytes() == y_loaded.tobytes()
    np.testing.assert_allclose(y, reference, rtol=0, atol=0.02 * float(np.abs(reference).max()))
    assert cycles < cycles_loaded, (cycles, cycles_loaded)
