"""A padded stride-1 conv's window placed row by row straight from the input the kernel before
kept on chip (graph_to_tile/windows.py `WindowLoader._place_kept_rows`), server bf16: a
ResNet-50 bottleneck's 1x1 64->64 at 56x56 keeps its output whole, and the 3x3 64->64 after it
builds its padded window from that tile. The staging path copied every row into a staging tile
and then into the window's padded rows, two vector passes ahead of the first im2col copy; now
one copy per input row. The same bits (the simulator bit for bit the tile interpreter, race
checker on), close to the graph interpreter, fewer cycles (measured: 15,913 against 16,324;
ResNet-50 server 361,692 -> 359,225)."""

from __future__ import annotations

import numpy as np

from infer.dialects import tile as t
from infer.passes.graph_to_tile import windows
from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import conv_chain, parse_with_weights
from helpers.tile_programs import npu_matches_tile


def block() -> tuple[str, dict[str, np.ndarray]]:
    """x [1, 64, 56, 56] -> 1x1 64->64, relu -> 3x3 64->64 padding 1, relu -> 1x1 64->64."""
    x = "tensor<1x64x56x56xf32>"
    convs = [("a", 1, "%in"), ("b", 3, "%ra"), ("c", 1, "%rb")]
    lines = [f'func.func @main(%in: {x} {{graph.name = "x"}}) -> ({x} {{graph.name = "y"}}) {{']
    rng = np.random.default_rng(51)
    weights = {}
    for name, k, src in convs:
        w, b = f"tensor<64x64x{k}x{k}xf32>", "tensor<64xf32>"
        pad = " {padding = array<i64: 1, 1, 1, 1>}" if k == 3 else ""
        lines += [f"  %w{name} = graph.weight @w{name} : {w}", f"  %b{name} = graph.weight @b{name} : {b}",
                  f"  %c{name} = graph.conv2d {src}, %w{name}, %b{name}{pad} : ({x}, {w}, {b}) -> {x}"]
        if name != "c":
            lines.append(f"  %r{name} = graph.relu %c{name} : ({x}) -> {x}")
        weights[f"w{name}"] = (rng.standard_normal((64, 64, k, k)) / np.sqrt(64 * k * k)).astype(np.float32)
        weights[f"b{name}"] = (rng.standard_normal(64) * 0.1).astype(np.float32)
    lines += [f"  func.return %cc : {x}", "}"]
    return "\n".join(lines), weights


def run(x: np.ndarray) -> tuple[np.ndarray, int, int]:
    """-> (output, cycles, vector ops copying one input row of the kept [64, 3136] tile)."""
    module = parse_with_weights(*block(), "block.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}", module)
    row_copies = sum(1 for op in module.walk() if isinstance(op, t.VectorOp) and op.a.type.get_shape() == (64, 3136)
                     and op.cols.value.data == 56)
    apply_pass("tile-plan-memory{target=server}", module)
    (y,), counters = npu_matches_tile(module, [x], "server")
    return y, counters.cycles, row_copies


def test_padded_window_rows_placed_from_the_kept_input(monkeypatch):
    x = np.random.default_rng(52).standard_normal((1, 64, 56, 56)).astype(np.float32)
    reference = run_entry(parse_with_weights(*block(), "block.mlir"), [x])[0]
    y, cycles, row_copies = run(x)
    monkeypatch.setattr(windows, "places_rows_from_kept", lambda p, pixel_major: False)
    y_staged, cycles_staged, row_copies_staged = run(x)
    # one copy per input row, in a loop of 56 (one op in the IR), against none
    assert row_copies == 1 and row_copies_staged == 0, (row_copies, row_copies_staged)
    assert y.tobytes() == y_staged.tobytes()
    np.testing.assert_allclose(y, reference, rtol=0, atol=0.02 * float(np.abs(reference).max()))
    assert cycles < cycles_staged, (cycles, cycles_staged)


def test_the_3x3_convs_rows_rounded_between_its_last_chunks_matmuls(monkeypatch):
    """The 3x3 conv's im2col (576 rows of taps and 3 of its bias: 5 chunks, copied and
    multiplied by column groups) rounds its relu's output rows between its last chunk's matmuls
    (conv.py `ConvKernel.rows_rounded_in_products`) instead of in one op after them: one per
    output row. The same bits, fewer cycles (measured: 15,913 against 16,459)."""
    from infer.passes.graph_to_tile.conv import ConvKernel

    x = np.random.default_rng(53).standard_normal((1, 64, 56, 56)).astype(np.float32)

    def rounding_ops() -> int:
        module = parse_with_weights(*block(), "block.mlir")
        apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}", module)
        return sum(1 for op in module.walk() if isinstance(op, t.VectorOp) and op.op.data == "relu"
                   and t.space_of(op.a) == "acc")

    y, cycles, _ = run(x)
    rows = rounding_ops()
    monkeypatch.setattr(ConvKernel, "rows_rounded_in_products", lambda self, to, toh: None)
    y_whole, cycles_whole, _ = run(x)
    assert rows == 56 and rounding_ops() == 1, rows
    assert y.tobytes() == y_whole.tobytes()
    assert cycles < cycles_whole, (cycles, cycles_whole)



def test_a_1x1_convs_bias_and_relu_between_its_matmuls(monkeypatch):
    """A 1x1 conv's one tile (64 -> 64 at 56x56, one channel step, its input kept on chip by
    the 1x1 conv before: ResNet-50's after the max pool) adds its bias and applies its relu
    into the compact bf16 output by column groups between its matmuls
    (`ConvKernel.rows_rounded_in_products`: "add_relu", one op per group of whole output rows:
    no padded-width columns), not in one op after them. The same bits, fewer cycles (measured:
    15,995 against 16,527)."""
    from infer.passes.graph_to_tile.conv import ConvKernel

    x = np.random.default_rng(54).standard_normal((1, 64, 56, 56)).astype(np.float32)
    text, weights = conv_chain(64, 56, [1, 1, 3])

    def run_chain() -> tuple[np.ndarray, int, int]:
        module = parse_with_weights(text, weights, "chain.mlir")
        apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}", module)
        ops = sum(1 for op in module.walk() if isinstance(op, t.VectorOp) and op.op.data == "add_relu"
                  and t.space_of(op.a) == "acc" and op.a.type.get_shape() == (64, 3136))
        apply_pass("tile-plan-memory{target=server}", module)
        (y,), counters = npu_matches_tile(module, [x], "server")
        return y, counters.cycles, ops

    y, cycles, ops = run_chain()
    original = ConvKernel.rows_rounded_in_products
    monkeypatch.setattr(ConvKernel, "rows_rounded_in_products",
                        lambda self, to, toh: original(self, to, toh) if len(self.taps) > 1 else None)
    y_whole, cycles_whole, ops_whole = run_chain()
    assert ops >= 3 and ops_whole == 1, (ops, ops_whole)
    assert y.tobytes() == y_whole.tobytes()
    reference = run_entry(parse_with_weights(text, weights, "chain.mlir"), [x])[0]
    np.testing.assert_allclose(y, reference, rtol=0, atol=0.02 * float(np.abs(reference).max()))
    assert cycles < cycles_whole, (cycles, cycles_whole)
