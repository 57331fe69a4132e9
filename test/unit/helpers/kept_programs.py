"""Programs whose kernels keep results on chip for the next kernels
(`LoweringContext.keep_on_chip`), compiled, interpreted and simulated: test_kept_results.py
(GEMMs, attention), test_kept_conv_outputs.py (convs)."""

from __future__ import annotations

import numpy as np

from infer.dialects import tile as t
from infer.passes.testing import apply_pass, run_entry
from infer.passes.tile_to_npu.common import root_buffer
from helpers.graph_programs import parse_with_weights
from helpers.tile_programs import npu_matches_tile


def compile_and_run(text: str, weights: dict[str, np.ndarray], target: str, precision: str, x: np.ndarray,
                    overrides: str = ""):
    """graph -> tile (interpreted) -> npu (simulated, race checker on): bit-identical outputs.
    Returns (output, simulated cycles, how many DMAs read an intermediate DRAM buffer).
    `overrides`: graph-to-tile's tile overrides (docs/tiling.md, "Overrides")."""
    module = parse_with_weights(text, weights, "mlp.mlir")
    graph_ref = run_entry(module, [x])[0]
    forced = f' overrides="{overrides}"' if overrides else ""
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision={precision}{forced}}},"
               f"tile-plan-memory{{target={target}}}", module)
    intermediates = {a.buffer for a in module.walk() if isinstance(a, t.AllocOp) and t.space_of(a.buffer) == "dram"}
    reloads = sum(1 for op in module.walk() if isinstance(op, t.DmaOp) and root_buffer(op.src) in intermediates)
    (y,), counters = npu_matches_tile(module, [x], target)
    tolerance = 0.05 if precision == "bf16" else 1e-4
    np.testing.assert_allclose(y, graph_ref, rtol=tolerance, atol=tolerance)
    return y, counters.cycles, reloads


def kept_against_off(monkeypatch, text: str, weights: dict[str, np.ndarray], x: np.ndarray, owner: object,
                     switch: str, off_value: object, precision: str = "bf16", reloads_off: bool = True,
                     overrides: str = "") -> None:
    """Compiled as it is, no DMA reads an intermediate back; with `owner.switch` set to
    `off_value` (the on-chip path turned off) it does (`reloads_off`): the same bits, more
    cycles."""
    y, cycles, reloads = compile_and_run(text, weights, "server", precision, x, overrides)
    assert reloads == 0
    monkeypatch.setattr(owner, switch, off_value)
    y_off, cycles_off, reloads_when_off = compile_and_run(text, weights, "server", precision, x, overrides)
    assert (reloads_when_off >= 1) if reloads_off else (reloads_when_off == 0)
    assert y.tobytes() == y_off.tobytes()
    assert cycles < cycles_off, (cycles, cycles_off)
