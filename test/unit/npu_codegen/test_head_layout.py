"""The head-split and head-merge transposes around attention folded into the flash kernel
(passes/graph_to_tile/head_layout.py): q, k and v are read from, and the result written to,
the sequence-major [B, S, H, D] layout, and the transposes emit no kernel. Checked on both
configs with batch 2 and GQA: the program runs bit-identically to the tile interpreter with the
simulator's race checker on and matches the graph interpreter; a transpose with another use
is still copied."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.graph_programs import head_split_attention
from helpers.tile_programs import npu_matches_tile
from infer.dialects import tile as t
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.testing import apply_pass, run_entry
from infer.passes.tile_to_npu.common import root_buffer

CTX = make_context()
B, S, HQ, HKV, D = 2, 48, 4, 2, 16


def block_ir(extra_use: bool) -> str:
    """x_q [B, S, Hq*D], x_k / x_v [B, S, Hkv*D] -> heads -> attention -> [B, S, Hq*D]; with
    `extra_use` the transposed q is also a result (so that transpose must be copied)."""
    return head_split_attention(B, S, HQ, HKV, D, return_q_heads=extra_use)


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("extra_use", [False, True], ids=["folded", "q_also_returned"])
def test_head_transposes_folded_into_attention(target, extra_use, capsys):
    module = parse_ir(CTX, block_ir(extra_use), "block.mlir")
    verify_module(module)
    attach_weights(module, WeightStore())
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((B, S, HQ * D)).astype(np.float32),
              rng.standard_normal((B, S, HKV * D)).astype(np.float32),
              rng.standard_normal((B, S, HKV * D)).astype(np.float32)]
    graph_ref = run_entry(module, inputs)
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision=bf16 debug-tiling=true}},"
               f"tile-plan-memory{{target={target}}}", module)
    log = capsys.readouterr().err
    # folded: no transpose kernel; with q also returned, exactly that one is copied
    assert log.count(": transpose ") == (1 if extra_use else 0), log
    outs, _ = npu_matches_tile(module, inputs, target)  # bit-identical to the tile interpreter
    for y, g_ref in zip(outs, graph_ref, strict=True):
        np.testing.assert_allclose(y, g_ref, rtol=3e-2, atol=3e-2)


def rotary_ir(with_projection: bool) -> str:
    """x [1, S, H*D] (-> linear with `with_projection`) -> heads [1, H, S, D] -> rotary (cos/sin
    [S, D] shared by every head, half layout) -> attention of the rotated heads."""
    H, Dh, Sr = 4, 16, 64
    x, x4, heads = f"tensor<1x{Sr}x{H * Dh}xf32>", f"tensor<1x{Sr}x{H}x{Dh}xf32>", f"tensor<1x{H}x{Sr}x{Dh}xf32>"
    cs, w = f"tensor<{Sr}x{Dh}xf32>", f"tensor<{H * Dh}x{H * Dh}xf32>"
    perm = "{perm = array<i64: 0, 2, 1, 3>}"
    project = (f"""  %w = graph.weight @w : {w}
  %p = graph.linear %x, %w : ({x}, {w}) -> {x}
""" if with_projection else "")
    source = "%p" if with_projection else "%x"
    return f"""func.func @main(%x: {x}, %cos: {cs}, %sin: {cs}) -> ({heads}) {{
{project}  %q4 = graph.reshape {source} : ({x}) -> {x4}
  %qt = graph.transpose %q4 {perm} : ({x4}) -> {heads}
  %qr = graph.rotary %qt, %cos, %sin : ({heads}, {cs}, {cs}) -> {heads}
  %a = graph.attention %qr, %qr, %qr : ({heads}, {heads}, {heads}) -> {heads}
  func.return %a : {heads}
}}"""


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("source", ["input", "projection", "projection_not_kept"])
def test_rotary_reads_the_head_split_source(target, source, capsys, monkeypatch):
    """A prefill's head split read by a rotary emits no transpose kernel: the rotary reads each
    head's position tiles as strided boxes of the sequence-major source (a function input, or a
    projection's result), or, after a one-tile projection, in place in the tile the projection
    left on chip (no DMA reads its result back; `projection_not_kept`: with the kept results
    off, it does). The program runs bit-identically to the tile interpreter (race checker on)
    and matches the graph interpreter."""
    from infer.passes.graph_to_tile import gemm

    with_projection = source != "input"
    if source == "projection_not_kept":
        monkeypatch.setattr(gemm, "KEPT_RESULT_READERS", 0)
    module = parse_ir(CTX, rotary_ir(with_projection), "rotary.mlir")
    verify_module(module)
    rng = np.random.default_rng(4)
    store = WeightStore()
    if with_projection:
        store.set("w", (rng.standard_normal((64, 64)) * 0.1).astype(np.float32))
    attach_weights(module, store)
    angles = np.arange(64)[:, None] * (1.0 / 100.0 ** (np.arange(8) / 8))[None, :]
    inputs = [rng.standard_normal((1, 64, 64)).astype(np.float32),
              np.cos(np.concatenate([angles, angles], 1)).astype(np.float32),
              np.sin(np.concatenate([angles, angles], 1)).astype(np.float32)]
    graph_ref = run_entry(module, inputs)
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision=bf16 debug-tiling=true}},"
               f"tile-plan-memory{{target={target}}}", module)
    log = capsys.readouterr().err
    assert ": transpose " not in log, log
    if with_projection:  # the projection's result (the first DRAM buffer graph-to-tile makes)
        projected = next(a.buffer for a in module.walk() if isinstance(a, t.AllocOp) and t.space_of(a.buffer) == "dram")
        reloads = sum(1 for op in module.walk() if isinstance(op, t.DmaOp) and root_buffer(op.src) is projected)
        assert (reloads == 0) == (source == "projection"), reloads
    outs, _ = npu_matches_tile(module, inputs, target)
    np.testing.assert_allclose(outs[0], graph_ref[0], rtol=3e-2, atol=3e-2)
