"""Resident activations in the plain GEMM (passes/graph_to_tile/gemm.py): with several n tiles,
each m tile's activation rows are loaded and split once into the scratchpad and every n tile
reads them, with one whole-K weight tile per n tile whose product writes the accumulator (no
fill). Checked on MiniLM's FFN up projection shape on edge (x [128, 384] -> 1536, bias, GELU),
where the cost model takes it (in bf16: the fp32 emulation's compute-bound 3 passes gain
nothing from it there): bit-identical to the tile interpreter with the race checker on, close
to the graph interpreter, and faster than the streamed tiles the cost model chose first (the
override `TMxTNxTK` keeps those)."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.testing import apply_pass, run_entry

from helpers.tile_programs import npu_matches_tile

CTX = make_context()
K, N = 384, 1536


def ffn_up(M: int) -> tuple[str, dict[str, np.ndarray]]:
    text = f"""
func.func @main(%x: tensor<{M}x{K}xf32> {{graph.name = "x"}}) -> (tensor<{M}x{N}xf32> {{graph.name = "y"}}) {{
  %w = graph.weight @w : tensor<{N}x{K}xf32>
  %b = graph.weight @b : tensor<{N}xf32>
  %h = graph.linear %x, %w, %b : (tensor<{M}x{K}xf32>, tensor<{N}x{K}xf32>, tensor<{N}xf32>) -> tensor<{M}x{N}xf32>
  %y = graph.gelu %h : (tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32>
  func.return %y : tensor<{M}x{N}xf32>
}}
"""
    rng = np.random.default_rng(8)
    return text, {"w": (rng.standard_normal((N, K)) * 0.05).astype(np.float32),
                  "b": rng.standard_normal(N).astype(np.float32)}


def compile_and_run(precision: str, M: int, capsys, overrides: str = ""):
    """-> (output, graph interpreter's output, simulated cycles, debug-tiling log)."""
    text, weights = ffn_up(M)
    module = parse_ir(CTX, text, "ffn.mlir")
    verify_module(module)
    store = WeightStore()
    for name, value in weights.items():
        store.set(name, value)
    attach_weights(module, store)
    x = np.random.default_rng(9).standard_normal((M, K)).astype(np.float32)
    graph_ref = run_entry(module, [x])[0]
    extra = f' overrides="{overrides}"' if overrides else ""
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target=edge precision={precision} debug-tiling=true{extra}}},"
               f"tile-plan-memory{{target=edge}}", module)
    log = capsys.readouterr().err
    (y,), counters = npu_matches_tile(module, [x], "edge")
    return y, graph_ref, counters.cycles, log


@pytest.mark.parametrize("precision,M,tol", [("bf16", 128, 5e-2)])
def test_resident_activations_bit_identical_and_faster(precision, M, tol, capsys):
    y, graph_ref, cycles, log = compile_and_run(precision, M, capsys)
    assert "activations resident per m tile" in log, log
    np.testing.assert_allclose(y, graph_ref, rtol=tol, atol=tol)
    tiles = next(line for line in log.splitlines() if "tiles TMxTNxTK = " in line).split("TMxTNxTK = ")[1].split(":")[0]
    y_s, _, streamed, log_s = compile_and_run(precision, M, capsys, overrides=f"kernel0={tiles}")
    assert "activations resident" not in log_s
    np.testing.assert_allclose(y_s, graph_ref, rtol=tol, atol=tol)
    assert cycles < 0.9 * streamed, (cycles, streamed)
