"""A bf16-held conv output: the epilogue's last op writes the compact bf16 tile the conv stores
(conv_store.py `_last_whole_tile_write`) instead of an fp32 tile that a vector copy then rounds: one
vector pass fewer per tile, the same bits (one rounding at the destination either way). A padded
conv's tiles have padded-width rows (Wq > OW): there a pointwise last op writes the valid columns
only, over [rows, Wq] and [rows, OW] views (`_last_pointwise_write`). The
fused op waits for the accumulator's last matmul on the vector engine and takes the store
tile's free token at the front end (dependencies.py `DependencyTracker.wait`), so the front end
is not held until the products drain."""

from __future__ import annotations

import numpy as np

from infer.dialects import tile as t
from infer.passes.graph_to_tile import conv, conv_store
from infer.passes.testing import apply_pass

import pytest

from helpers.graph_programs import conv_chain, parse_with_weights, pointwise_conv_chain
from helpers.tile_programs import npu_matches_tile

C, M, O, HW = 256, 1024, 256, 14


def run(x: np.ndarray, fused: bool, monkeypatch) -> tuple[np.ndarray, int, list[t.VectorOp]]:
    """-> (output, cycles, the vector ops writing a bf16 tile in the tile IR). The first conv's
    output is stored from a compact tile of its own, not kept whole on chip (a copy rounds the
    tiles there: `conv_store._store_bf16_from_kept`)."""
    monkeypatch.setattr(conv.ConvKernel, "output_kept_whole", lambda self, footprint: None)
    if not fused:
        monkeypatch.setattr(conv_store, "_last_whole_tile_write", lambda *args: None)
    text, weights = pointwise_conv_chain(C, M, O, HW)
    module = parse_with_weights(text, weights, "chain.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16},tile-plan-memory{target=server}",
               module)
    to_bf16 = [op for op in module.walk() if isinstance(op, t.VectorOp)
               and str(op.dst.type.get_element_type()) == "bf16"]
    (y,), counters = npu_matches_tile(module, [x], "server")
    monkeypatch.undo()
    return y, counters.cycles, to_bf16


def test_relu_writes_the_bf16_store_tile(monkeypatch):
    x = np.random.default_rng(1).standard_normal((1, C, HW, HW)).astype(np.float32)
    y, cycles, to_bf16 = run(x, True, monkeypatch)
    y_copied, cycles_copied, to_bf16_copied = run(x, False, monkeypatch)
    assert y.tobytes() == y_copied.tobytes()
    # the first conv's tiles: the relu writes the bf16 tile, no copy after it
    assert {op.op.data for op in to_bf16_copied} >= {"copy"}
    assert "relu" in {op.op.data for op in to_bf16}
    assert len([op for op in to_bf16 if op.op.data == "copy"]) < len([op for op in to_bf16_copied if op.op.data == "copy"])
    assert cycles <= cycles_copied, (cycles, cycles_copied)


@pytest.mark.parametrize("target", ["edge", "server"])
def test_padded_convs_relu_writes_the_valid_columns_of_the_store_tile(target, monkeypatch):
    """A 3x3 conv (padding 1, 64 channels at 14x14: tiles of 16-wide rows, 14 valid) + relu, read
    by a 1x1 conv: its relu writes the bf16 store tile's 14 valid columns of each row itself,
    where the copy that dropped the padded-width columns came after it. Same bits, no more cycles
    (edge: the same tiles, one vector pass fewer; server: the one tile's epilogue shorter, its
    relu by rows between its last im2col chunk's matmuls, conv.py `rows_rounded_in_products`)."""
    def compile_run(fused: bool) -> tuple[np.ndarray, int, list[str]]:
        if not fused:
            monkeypatch.setattr(conv_store, "_last_pointwise_write", lambda *args: None)
            # (server's one tile of 4 im2col chunks rounds its rows between the last chunk's
            # matmuls, a relu per row writing the valid columns itself: not that either)
            monkeypatch.setattr(conv.ConvKernel, "rows_rounded_in_products", lambda self, to, toh: None)
        text, weights = conv_chain(64, 14, [3, 1])
        module = parse_with_weights(text, weights, "chain.mlir")
        apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision=bf16}},"
                   f"tile-plan-memory{{target={target}}}", module)
        # the ops writing a bf16 tile that a DMA stores to DRAM (the store tiles)
        stored = {t.root_buffer(op.src) for op in module.walk() if isinstance(op, t.DmaOp)
                  and t.space_of(op.src) == "spad" and t.space_of(op.dst) == "dram"}
        narrow = [op.op.data for op in module.walk() if isinstance(op, t.VectorOp)
                  and str(op.dst.type.get_element_type()) == "bf16" and t.root_buffer(op.dst) in stored]
        x = np.random.default_rng(2).standard_normal((1, 64, 14, 14)).astype(np.float32)
        (y,), counters = npu_matches_tile(module, [x], target)
        monkeypatch.undo()
        return y, counters.cycles, narrow

    y, cycles, narrow = compile_run(True)
    y_copied, cycles_copied, narrow_copied = compile_run(False)
    assert y.tobytes() == y_copied.tobytes()
    assert "relu" in narrow and "copy" not in narrow, narrow
    assert "copy" in narrow_copied and "relu" not in narrow_copied, narrow_copied
    assert cycles <= cycles_copied, (cycles, cycles_copied)
