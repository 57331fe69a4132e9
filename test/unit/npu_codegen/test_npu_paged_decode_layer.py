"""A whole paged decode step of a tiny random Llama-style model, written by hand in graph IR:
embedding gather of i32 token ids, RMSNorm, q/k/v projections, rotary embedding at run-time
positions (cos/sin gathered from compile-time tables by the i32 positions), K/V written in
place into the pools, paged attention over each sequence's blocks, output projection,
residual, LM head. Graph interpreter vs simulator (races checked: conftest.py), both targets."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.npu import ProgramOp
from infer.dialects.npu_attrs import layout_from_module
from infer.dialects.weights import WeightStore, attach_weights, weights_of
from infer.passes.testing import apply_pass, run_entry
from infer.target.sim import Simulator

B, V, H, Hq, Hkv, D, BS, NB, MB, P = 2, 32, 16, 4, 2, 4, 4, 8, 3, 16  # P: rotary table rows


def decode_module():
    def ty(*shape, elem="f32"):
        return "tensor<" + "x".join(map(str, shape)) + f"x{elem}>"

    pool = ty(NB * BS, Hkv * D)
    text = f"""func.func @decode(%ids: {ty(B, 1, elem="i32")}, %pos: {ty(B, 1, elem="i32")}, %slots: {ty(B, elem="i32")}, %bt: {ty(B, MB, elem="i32")}, %n: {ty(B, elem="i32")}, %k0: {pool}, %v0: {pool}) -> ({ty(B, 1, V)}, {pool}, {pool}) {{
  %emb = graph.weight @embed : {ty(V, H)}
  %gn = graph.weight @norm : {ty(H)}
  %wq = graph.weight @wq : {ty(Hq * D, H)}
  %wk = graph.weight @wk : {ty(Hkv * D, H)}
  %wv = graph.weight @wv : {ty(Hkv * D, H)}
  %wo = graph.weight @wo : {ty(H, Hq * D)}
  %head = graph.weight @head : {ty(V, H)}
  %cos_t = graph.weight @cos : {ty(P, D)}
  %sin_t = graph.weight @sin : {ty(P, D)}
  %x = graph.gather %emb, %ids : ({ty(V, H)}, {ty(B, 1, elem="i32")}) -> {ty(B, 1, H)}
  %h = graph.rms_norm %x, %gn {{epsilon = 1.0e-5 : f64}} : ({ty(B, 1, H)}, {ty(H)}) -> {ty(B, 1, H)}
  %cos0 = graph.gather %cos_t, %pos : ({ty(P, D)}, {ty(B, 1, elem="i32")}) -> {ty(B, 1, D)}
  %sin0 = graph.gather %sin_t, %pos : ({ty(P, D)}, {ty(B, 1, elem="i32")}) -> {ty(B, 1, D)}
  %cos = graph.reshape %cos0 : ({ty(B, 1, D)}) -> {ty(B, 1, 1, D)}
  %sin = graph.reshape %sin0 : ({ty(B, 1, D)}) -> {ty(B, 1, 1, D)}
  %q0 = graph.linear %h, %wq : ({ty(B, 1, H)}, {ty(Hq * D, H)}) -> {ty(B, 1, Hq * D)}
  %q1 = graph.reshape %q0 : ({ty(B, 1, Hq * D)}) -> {ty(B, 1, Hq, D)}
  %q2 = graph.transpose %q1 {{perm = array<i64: 0, 2, 1, 3>}} : ({ty(B, 1, Hq, D)}) -> {ty(B, Hq, 1, D)}
  %q = graph.rotary %q2, %cos, %sin : ({ty(B, Hq, 1, D)}, {ty(B, 1, 1, D)}, {ty(B, 1, 1, D)}) -> {ty(B, Hq, 1, D)}
  %k0r = graph.linear %h, %wk : ({ty(B, 1, H)}, {ty(Hkv * D, H)}) -> {ty(B, 1, Hkv * D)}
  %k1r = graph.reshape %k0r : ({ty(B, 1, Hkv * D)}) -> {ty(B, 1, Hkv, D)}
  %k2r = graph.transpose %k1r {{perm = array<i64: 0, 2, 1, 3>}} : ({ty(B, 1, Hkv, D)}) -> {ty(B, Hkv, 1, D)}
  %k3r = graph.rotary %k2r, %cos, %sin : ({ty(B, Hkv, 1, D)}, {ty(B, 1, 1, D)}, {ty(B, 1, 1, D)}) -> {ty(B, Hkv, 1, D)}
  %k4r = graph.transpose %k3r {{perm = array<i64: 0, 2, 1, 3>}} : ({ty(B, Hkv, 1, D)}) -> {ty(B, 1, Hkv, D)}
  %krows = graph.reshape %k4r : ({ty(B, 1, Hkv, D)}) -> {ty(B, Hkv * D)}
  %v0r = graph.linear %h, %wv : ({ty(B, 1, H)}, {ty(Hkv * D, H)}) -> {ty(B, 1, Hkv * D)}
  %vrows = graph.reshape %v0r : ({ty(B, 1, Hkv * D)}) -> {ty(B, Hkv * D)}
  %k1 = graph.kv_cache_write %k0, %krows, %slots : ({pool}, {ty(B, Hkv * D)}, {ty(B, elem="i32")}) -> {pool}
  %v1 = graph.kv_cache_write %v0, %vrows, %slots : ({pool}, {ty(B, Hkv * D)}, {ty(B, elem="i32")}) -> {pool}
  %a = graph.paged_attention %q, %k1, %v1, %bt, %n {{block_size = {BS} : i64}} : ({ty(B, Hq, 1, D)}, {pool}, {pool}, {ty(B, MB, elem="i32")}, {ty(B, elem="i32")}) -> {ty(B, Hq, 1, D)}
  %a1 = graph.transpose %a {{perm = array<i64: 0, 2, 1, 3>}} : ({ty(B, Hq, 1, D)}) -> {ty(B, 1, Hq, D)}
  %a2 = graph.reshape %a1 : ({ty(B, 1, Hq, D)}) -> {ty(B, 1, Hq * D)}
  %o = graph.linear %a2, %wo : ({ty(B, 1, Hq * D)}, {ty(H, Hq * D)}) -> {ty(B, 1, H)}
  %r = graph.add %x, %o : ({ty(B, 1, H)}, {ty(B, 1, H)}) -> {ty(B, 1, H)}
  %logits = graph.linear %r, %head : ({ty(B, 1, H)}, {ty(V, H)}) -> {ty(B, 1, V)}
  func.return %logits, %k1, %v1 : {ty(B, 1, V)}, {pool}, {pool}
}}
"""
    module = parse_ir(make_context(), text, "decode.mlir")
    verify_module(module)
    rng = np.random.default_rng(7)
    store = WeightStore()
    for name, shape in (("embed", (V, H)), ("wq", (Hq * D, H)), ("wk", (Hkv * D, H)),
                        ("wv", (Hkv * D, H)), ("wo", (H, Hq * D)), ("head", (V, H))):
        store.set(name, (rng.standard_normal(shape) * 0.5).astype(np.float32))
    store.set("norm", (1 + 0.1 * rng.standard_normal(H)).astype(np.float32))
    angles = np.arange(P)[:, None] / 10000 ** (np.arange(D // 2) / (D // 2))
    angles = np.concatenate([angles, angles], axis=-1)
    store.set("cos", np.cos(angles).astype(np.float32))
    store.set("sin", np.sin(angles).astype(np.float32))
    attach_weights(module, store)
    return module


def decode_inputs(lens):
    """Sequence b has lens[b] tokens, its newest at position lens[b] - 1 (written this step)."""
    rng = np.random.default_rng(sum(lens))
    tables = rng.permutation(NB)[: B * MB].reshape(B, MB).astype(np.int32)
    lens = np.array(lens, np.int32)
    positions = (lens - 1).reshape(B, 1).astype(np.int32)
    slots = np.array([tables[b, (n - 1) // BS] * BS + (n - 1) % BS for b, n in enumerate(lens)], np.int32)
    ids = rng.integers(0, V, (B, 1)).astype(np.int32)
    pools = [rng.standard_normal((NB * BS, Hkv * D)).astype(np.float32) for _ in range(2)]
    return [ids, positions, slots, tables, lens, *pools]


@pytest.mark.parametrize("target", ["edge", "server"])
def test_tiny_paged_decode_step_on_simulator(target):
    module = decode_module()
    xs = decode_inputs([3, 11])
    reference = run_entry(module, xs, "decode")
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target}}},tile-plan-memory,tile-to-npu", module)
    verify_module(module)
    layout = layout_from_module(module)
    assert layout.aliases == {"output1": "arg5", "output2": "arg6"}
    program = next(o for o in module.walk() if isinstance(o, ProgramOp)).to_program()
    dram = layout.dram_image(xs, weights_of(module))
    Simulator(target).run(program, dram)
    for got, want in zip(layout.read_outputs(dram), reference, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
