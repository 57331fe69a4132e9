"""Causal attention with fully masked key tiles skipped: the key-tile loop's upper bound is affine
in the query-tile loop (`scf.for %j = %c0 to %q0 + TQ + offset step %TKV`), which tile-to-npu
lowers to one hardware loop whose trip count is an address register plus an immediate
(codegen.emit_affine_for). Checked: the tile IR has that loop, the program runs bit-identically
to the tile interpreter with the simulator's race checker on, the outputs match the graph
interpreter, and the array executed only the visited score tiles' MACs."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import arith, scf

from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.npu import ProgramOp
from infer.dialects.npu_attrs import layout_from_module
from infer.dialects.weights import WeightStore, attach_weights, weights_of
from infer.passes import tiling_cost
from infer.passes.testing import apply_pass, run_entry
from infer.target.sim import Simulator

CTX = make_context()


def attention_ir(Hq: int, Hkv: int, Sq: int, Skv: int, D: int) -> str:
    q, kv = f"tensor<1x{Hq}x{Sq}x{D}xf32>", f"tensor<1x{Hkv}x{Skv}x{D}xf32>"
    return f"""func.func @main(%q: {q}, %k: {kv}, %v: {kv}) -> {q} {{
  %a = graph.attention %q, %k, %v {{causal = true}} : ({q}, {kv}, {kv}) -> {q}
  func.return %a : {q}
}}"""


@pytest.mark.parametrize("shape,tiles", [((2, 1, 64, 64, 16), (16, 8)),  # prefill, GQA 2/1
                                         ((1, 1, 32, 64, 16), (16, 8))],  # 32 keys before the queries
                         ids=["prefill64", "kvcache32x64"])
def test_triangular_causal_attention_bit_identical(shape, tiles):
    Hq, Hkv, Sq, Skv, D = shape
    TQ, TKV = tiles
    module = parse_ir(CTX, attention_ir(*shape), "att.mlir")
    verify_module(module)
    attach_weights(module, WeightStore())
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((1, Hq, Sq, D)).astype(np.float32),
              rng.standard_normal((1, Hkv, Skv, D)).astype(np.float32),
              rng.standard_normal((1, Hkv, Skv, D)).astype(np.float32)]
    graph_ref = run_entry(module, inputs)[0]
    apply_pass(f'graph-prepare-tiling,graph-to-tile{{target=edge precision=bf16 overrides="kernel0={TQ}x{TKV}"}},'
               "tile-plan-memory{target=edge}", module)
    affine_bound = [loop for loop in module.walk() if isinstance(loop, scf.ForOp)
                    and not isinstance(loop.ub.owner, arith.ConstantOp)]
    assert len(affine_bound) == 1  # the key loop of the query-tile loop
    tile_ref = run_entry(module, inputs)[0]
    apply_pass("tile-to-npu", module)
    verify_module(module)
    prog = next(o for o in module.walk() if isinstance(o, ProgramOp)).to_program()
    layout = layout_from_module(module)
    dram = layout.dram_image(inputs, weights_of(module))
    counters = Simulator("edge").run(prog, dram, check_races=True)
    y = layout.read_outputs(dram)[0]
    assert y.tobytes() == tile_ref.tobytes()  # bit-identical to the tile interpreter
    np.testing.assert_allclose(y, graph_ref, rtol=5e-2, atol=5e-2)
    # the MACs of the visited score tiles only: q.K^T and P.V, D columns each
    visited = tiling_cost.triangular_score_tiles(Sq, Skv, TQ, TKV, Skv - Sq)
    assert visited is not None and visited < (Sq // TQ) * (Skv // TKV)
    assert counters.macs == Hq * visited * TQ * TKV * 2 * D
