"""A conv's relu computed by the add before it (`vec.add_relu`, graph_to_tile/conv.py
`fuses_relu`): a relu that is the whole epilogue by the bias add, and the relu of a residual add
by that add, whose tile the bias add then writes out of place (read in place, the accumulator's
last reader would signal one consumer more than an instruction can: conv_store.py). One vector
pass fewer per output tile on the in-order vector unit, with the bits of the add into an fp32
tile and the relu of it: the same output as the unfused lowering, the simulator bit for bit the
tile interpreter (race checker on), no more cycles."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects import tile as t
from infer.passes.graph_to_tile import conv
from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import parse_with_weights
from helpers.tile_programs import npu_matches_tile

C, M, HW = 256, 64, 14


def bottleneck() -> tuple[str, dict[str, np.ndarray]]:
    """x -> 1x1 conv (bias) -> relu -> 1x1 conv (bias) -> + x -> relu, random weights."""
    x, h = f"tensor<1x{C}x{HW}x{HW}xf32>", f"tensor<1x{M}x{HW}x{HW}xf32>"
    text = f"""func.func @main(%x: {x} {{graph.name = "x"}}) -> ({x} {{graph.name = "y"}}) {{
  %w1 = graph.weight @w1 : tensor<{M}x{C}x1x1xf32>
  %b1 = graph.weight @b1 : tensor<{M}xf32>
  %c1 = graph.conv2d %x, %w1, %b1 : ({x}, tensor<{M}x{C}x1x1xf32>, tensor<{M}xf32>) -> {h}
  %r1 = graph.relu %c1 : ({h}) -> {h}
  %w2 = graph.weight @w2 : tensor<{C}x{M}x1x1xf32>
  %b2 = graph.weight @b2 : tensor<{C}xf32>
  %c2 = graph.conv2d %r1, %w2, %b2 : ({h}, tensor<{C}x{M}x1x1xf32>, tensor<{C}xf32>) -> {x}
  %s = graph.add %c2, %x : ({x}, {x}) -> {x}
  %r2 = graph.relu %s : ({x}) -> {x}
  func.return %r2 : {x}
}}"""
    rng = np.random.default_rng(5)
    weights = {"w1": (rng.standard_normal((M, C, 1, 1)) / np.sqrt(C)).astype(np.float32),
               "b1": (rng.standard_normal(M) * 0.1).astype(np.float32),
               "w2": (rng.standard_normal((C, M, 1, 1)) / np.sqrt(M)).astype(np.float32),
               "b2": (rng.standard_normal(C) * 0.1).astype(np.float32)}
    return text, weights


def run(x: np.ndarray, target: str, precision: str, fused: bool, monkeypatch
        ) -> tuple[np.ndarray, int, list[str]]:
    """-> (output, cycles, the names of the tile IR's vector ops)."""
    if not fused:
        monkeypatch.setattr(conv, "fuses_relu", lambda *args: False)
    module = parse_with_weights(*bottleneck(), "bottleneck.mlir")
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision={precision}}},"
               f"tile-plan-memory{{target={target}}}", module)
    ops = [op.op.data for op in module.walk() if isinstance(op, t.VectorOp)]
    (y,), counters = npu_matches_tile(module, [x], target)
    monkeypatch.undo()
    return y, counters.cycles, ops


@pytest.mark.parametrize("target, precision", [("server", "bf16"), ("edge", "bf16"), ("server", "fp32")])
def test_the_relus_of_a_bottleneck_are_computed_by_their_adds(target, precision, monkeypatch):
    x = np.random.default_rng(6).standard_normal((1, C, HW, HW)).astype(np.float32)
    y, cycles, ops = run(x, target, precision, True, monkeypatch)
    y_apart, cycles_apart, ops_apart = run(x, target, precision, False, monkeypatch)
    assert "relu" not in ops and "add_relu" in ops, sorted(set(ops))
    assert "add_relu" not in ops_apart and "relu" in ops_apart
    assert ops.count("add_relu") == ops_apart.count("relu")  # every relu fused
    assert y.tobytes() == y_apart.tobytes()
    reference = run_entry(parse_with_weights(*bottleneck(), "bottleneck.mlir"), [x])[0]
    tolerance = 0.02 if precision == "bf16" else 1e-5
    np.testing.assert_allclose(y, reference, rtol=0, atol=tolerance * float(np.abs(reference).max()))
    assert cycles < cycles_apart, (cycles, cycles_apart)
