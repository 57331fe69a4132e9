"""The head-split and head-merge transposes around attention folded into the flash kernel
(passes/graph_to_tile/head_layout.py): q, k and v are read from, and the result written to,
the sequence-major [B, S, H, D] layout, and the transposes emit no kernel. Checked on both
configs with batch 2 and GQA: the program runs bit-identically to the tile interpreter with the
simulator's race checker on and matches the graph interpreter; a transpose with another use
is still copied."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.tile_programs import npu_matches_tile
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.testing import apply_pass, run_entry

CTX = make_context()
B, S, HQ, HKV, D = 2, 48, 4, 2, 16


def block_ir(extra_use: bool) -> str:
    """x_q [B, S, Hq*D], x_k / x_v [B, S, Hkv*D] -> heads -> attention -> [B, S, Hq*D]; with
    `extra_use` the transposed q is also a result (so that transpose must be copied)."""
    q, kv = f"tensor<{B}x{S}x{HQ * D}xf32>", f"tensor<{B}x{S}x{HKV * D}xf32>"
    q4, kv4 = f"tensor<{B}x{S}x{HQ}x{D}xf32>", f"tensor<{B}x{S}x{HKV}x{D}xf32>"
    qh, kvh = f"tensor<{B}x{HQ}x{S}x{D}xf32>", f"tensor<{B}x{HKV}x{S}x{D}xf32>"
    perm = "{perm = array<i64: 0, 2, 1, 3>}"
    results = f"{q}, {qh}" if extra_use else q
    returned = f"%o, %qt : {q}, {qh}" if extra_use else f"%o : {q}"
    return f"""func.func @main(%xq: {q}, %xk: {kv}, %xv: {kv}) -> ({results}) {{
  %q4 = graph.reshape %xq : ({q}) -> {q4}
  %k4 = graph.reshape %xk : ({kv}) -> {kv4}
  %v4 = graph.reshape %xv : ({kv}) -> {kv4}
  %qt = graph.transpose %q4 {perm} : ({q4}) -> {qh}
  %kt = graph.transpose %k4 {perm} : ({kv4}) -> {kvh}
  %vt = graph.transpose %v4 {perm} : ({kv4}) -> {kvh}
  %a = graph.attention %qt, %kt, %vt : ({qh}, {kvh}, {kvh}) -> {qh}
  %at = graph.transpose %a {perm} : ({qh}) -> {q4}
  %o = graph.reshape %at : ({q4}) -> {q}
  func.return {returned}
}}"""


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
