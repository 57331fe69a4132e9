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
from infer.passes.graph_to_tile import storage
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
    bandwidth, is short) the halved bytes bought nothing."""
    _, _, _, dram = compile_and_run(target, precision=precision)
    assert "bf16" not in dram
