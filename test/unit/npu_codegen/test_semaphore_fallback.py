"""An attention kernel lowered again with fewer heads interleaved when tile-to-npu cannot fit it
in the semaphores (`tile.semaphore_fallback`, tools/driver.py) on the server config: a GQA group
of 8 query heads per KV head (16/2) with a per-head mask, whose 8 interleaved slots need 20 of
server's 16 semaphores at every degrade level (12 with 4 heads). The
compile driver lowers it again with 4 heads: the program is the one the override gives, and it
runs bit for bit as that program with the race checker on, close to the graph interpreter.
Running the passes by hand, tile-to-npu's error names the override."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.dialects.ir_io import LoweringError
from infer.dialects.npu import ProgramOp
from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import parse_with_weights

HQ, HKV, S, D = 16, 2, 32, 32


def gqa_with_head_masks() -> tuple[str, dict[str, np.ndarray]]:
    q, kv, mask = f"tensor<1x{HQ}x{S}x{D}xf32>", f"tensor<1x{HKV}x{S}x{D}xf32>", f"tensor<1x{HQ}x{S}x{S}xi1>"
    text = f"""func.func @main(%q: {q}, %k: {kv}, %v: {kv}) -> {q} {{
  %m = graph.weight @m : {mask}
  %a = graph.attention %q, %k, %v, %m : ({q}, {kv}, {kv}, {mask}) -> {q}
  func.return %a : {q}
}}"""
    keep = np.random.default_rng(0).random((1, HQ, S, S)) > 0.3
    keep[..., 0] = True  # (every query row attends to at least one key)
    return text, {"m": keep}


def inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal(shape).astype(np.float32) for shape in ((1, HQ, S, D), (1, HKV, S, D), (1, HKV, S, D))]


def test_driver_lowers_the_attention_again_with_fewer_heads():
    messages: list[str] = []
    exe = infer.compile(infer.Model(parse_with_weights(*gqa_with_head_masks())), target="server", precision="bf16",
                        progress=messages.append)
    assert "out of semaphores: lowering again with kernel0=32x32x4" in messages
    (y,) = exe.run(inputs(), check_races=True)
    graph_ref = run_entry(parse_with_weights(*gqa_with_head_masks()), inputs())[0]
    np.testing.assert_allclose(y, graph_ref, rtol=5e-2, atol=5e-2)
    # the program compile-npu gives with that override
    module = parse_with_weights(*gqa_with_head_masks())
    apply_pass('compile-npu{target=server precision=bf16 overrides="kernel0=32x32x4"}', module)
    program = next(op for op in module.walk() if isinstance(op, ProgramOp)).to_program()
    assert program.to_bytes() == exe.program.to_bytes()


def test_tile_to_npu_names_the_fallback_override():
    module = parse_with_weights(*gqa_with_head_masks())
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16},tile-plan-memory{target=server}",
               module)
    with pytest.raises(LoweringError, match=r'out of semaphores .*graph-to-tile\{overrides="kernel0=32x32x4"\}'):
        apply_pass("tile-to-npu", module)
