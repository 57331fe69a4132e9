"""One-tile GEMM results kept on chip for the next kernels (passes/graph_to_tile/gemm.py,
`LoweringContext.keep_on_chip`): a GEMM whose whole result is one local tile records it, and a
GEMM after it reading all of that result copies the tile instead of loading it back from DRAM
(a load that waited for the store and a DRAM latency of its own). The program stays
bit-identical to the tile interpreter with the race checker on, computes the same bits as with
the kept results turned off, and is faster."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects import tile as t
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_to_tile import gemm
from infer.passes.testing import apply_pass, run_entry
from helpers.tile_programs import npu_matches_tile

CTX = make_context()


def mlp(M: int, K: int, N1: int, N2: int) -> tuple[str, dict[str, np.ndarray]]:
    """x [M, K] -> linear (bias) -> relu -> linear (bias): the second reads the first's result."""
    text = f"""
func.func @main(%x: tensor<{M}x{K}xf32> {{graph.name = "x"}}) -> (tensor<{M}x{N2}xf32> {{graph.name = "y"}}) {{
  %w1 = graph.weight @w1 : tensor<{N1}x{K}xf32>
  %b1 = graph.weight @b1 : tensor<{N1}xf32>
  %h = graph.linear %x, %w1, %b1 : (tensor<{M}x{K}xf32>, tensor<{N1}x{K}xf32>, tensor<{N1}xf32>) -> tensor<{M}x{N1}xf32>
  %r = graph.relu %h : (tensor<{M}x{N1}xf32>) -> tensor<{M}x{N1}xf32>
  %w2 = graph.weight @w2 : tensor<{N2}x{N1}xf32>
  %b2 = graph.weight @b2 : tensor<{N2}xf32>
  %y = graph.linear %r, %w2, %b2 : (tensor<{M}x{N1}xf32>, tensor<{N2}x{N1}xf32>, tensor<{N2}xf32>) -> tensor<{M}x{N2}xf32>
  func.return %y : tensor<{M}x{N2}xf32>
}}
"""
    rng = np.random.default_rng(3)
    weights = {"w1": (rng.standard_normal((N1, K)) * 0.1).astype(np.float32),
               "b1": rng.standard_normal(N1).astype(np.float32),
               "w2": (rng.standard_normal((N2, N1)) * 0.1).astype(np.float32),
               "b2": rng.standard_normal(N2).astype(np.float32)}
    return text, weights


def _root(value):
    while isinstance(value.owner, t.ViewOp):
        value = value.owner.operands[0]
    return value


def compile_and_run(text: str, weights: dict[str, np.ndarray], target: str, precision: str, x: np.ndarray):
    """graph -> tile (interpreted) -> npu (simulated, race checker on): bit-identical outputs.
    Returns (output, simulated cycles, how many DMAs read an intermediate DRAM buffer)."""
    module = parse_ir(CTX, text, "mlp.mlir")
    verify_module(module)
    store = WeightStore()
    for name, value in weights.items():
        store.set(name, value)
    attach_weights(module, store)
    graph_ref = run_entry(module, [x])[0]
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision={precision}}},"
               f"tile-plan-memory{{target={target}}}", module)
    intermediates = {a.buffer for a in module.walk() if isinstance(a, t.AllocOp) and t.space_of(a.buffer) == "dram"}
    reloads = sum(1 for op in module.walk() if isinstance(op, t.DmaOp) and _root(op.src) in intermediates)
    (y,), counters = npu_matches_tile(module, [x], target)
    tolerance = 0.05 if precision == "bf16" else 1e-4
    np.testing.assert_allclose(y, graph_ref, rtol=tolerance, atol=tolerance)
    return y, counters.cycles, reloads


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_second_gemm_reads_the_first_result_on_chip(monkeypatch, precision):
    """server, 128x256 -> 256 -> 256: both GEMMs are one tile; the second copies the first's
    result tile (bf16: straight into its operand tile; fp32: through its staging tile, since the
    split overwrites its source) and loads nothing the first stored. Turned off (no kernel may read
    a kept result), the second loads it back from DRAM: the same bits, more cycles."""
    text, weights = mlp(128, 256, 256, 256)
    x = np.random.default_rng(4).standard_normal((128, 256)).astype(np.float32)
    y, cycles, reloads = compile_and_run(text, weights, "server", precision, x)
    assert reloads == 0
    monkeypatch.setattr(gemm, "KEPT_RESULT_READERS", 0)
    y_off, cycles_off, reloads_off = compile_and_run(text, weights, "server", precision, x)
    assert reloads_off >= 1
    assert y.tobytes() == y_off.tobytes()
    assert cycles < cycles_off, (cycles, cycles_off)


def test_tiled_result_is_loaded_from_dram():
    """edge, 64x128 -> 512 -> 256: the first result does not fit one local tile, so nothing is
    kept and the second GEMM loads its activations from DRAM (still bit-identical)."""
    text, weights = mlp(64, 128, 512, 256)
    x = np.random.default_rng(5).standard_normal((64, 128)).astype(np.float32)
    _, _, reloads = compile_and_run(text, weights, "edge", "bf16", x)
    assert reloads >= 1
