"""Every kernel class fits edge's local memories at model sizes (issue 6).

The tiling cost model budgets every local buffer a kernel's loop nest keeps live
(double-buffered operand tiles, epilogue operands and temporaries, accumulators,
padding/window buffers, attention's score and statistics tiles) against the
scratchpad (256 KiB) and accumulator (64 KiB) of `edge`; graph-to-tile checks the
sum of each nest's allocs and `tile-plan-memory` (part of `lower-to-tile`) must
place them. Shapes: ResNet-50 layers, a BERT-base layer, Llama-style GQA attention.
Compile only (no interpretation: these are full-size layers).
"""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects.ir_io import IRError, make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_to_tile import GraphToTilePass
from infer.passes.pipelines import LowerToTilePass
from infer.target.hw import load_config

CTX = make_context()
PREC = pytest.mark.parametrize("precision", ["fp32", "bf16"])
EDGE = load_config("edge")


def T(*dims: int) -> str:
    return "tensor<" + "x".join(map(str, dims)) + "xf32>"


def module(text: str, weights: dict[str, tuple[int, ...]]):
    m = parse_ir(CTX, text, "fit.mlir")
    verify_module(m)
    store = WeightStore()
    rng = np.random.default_rng(0)
    for k, shape in weights.items():
        w = rng.standard_normal(shape) * 0.05
        store.set(k, (np.abs(w) + 0.5 if k.endswith(".v") else w).astype(np.float32))  # variances > 0
    attach_weights(m, store)
    return m


def compile_edge(text: str, weights: dict[str, tuple[int, ...]], precision: str):
    m = module(text, weights)
    LowerToTilePass(target="edge", precision=precision).apply(CTX, m)  # includes tile-plan-memory
    verify_module(m)
    spad, acc = m.attributes["tile.spad_bytes"].value.data, m.attributes["tile.acc_bytes"].value.data
    assert 0 < spad <= EDGE.memory.scratchpad_bytes
    assert acc <= EDGE.memory.accumulator_bytes
    assert "graph." not in str(m).replace("graph.name", "").replace("graph.weights", "")
    return m


def weights_of_text(text: str) -> dict[str, tuple[int, ...]]:
    import re

    out = {}
    for name, dims in re.findall(r"graph\.weight @([\w.]+) : tensor<([0-9x]+)xf32>", text):
        out[name] = tuple(int(d) for d in dims.split("x"))
    return out


def run(body: str, args: str, results: str, precision: str):
    text = f"func.func @main({args}) -> ({results}) {{\n{body}\n}}\n"
    return compile_edge(text, weights_of_text(text), precision)


# ---------------------------------------------------------------------------- ResNet-50


@PREC
def test_resnet_stem_conv7x7_bn_relu_maxpool(precision):
    x, y, p = T(1, 3, 224, 224), T(1, 64, 112, 112), T(1, 64, 56, 56)
    run(f"""
  %w = graph.weight @stem.w : {T(64, 3, 7, 7)}
  %s = graph.weight @bn.s : {T(64)}
  %b = graph.weight @bn.b : {T(64)}
  %m = graph.weight @bn.m : {T(64)}
  %v = graph.weight @bn.v : {T(64)}
  %c = graph.conv2d %x, %w {{stride = array<i64: 2, 2>, padding = array<i64: 3, 3, 3, 3>}} : ({x}, {T(64, 3, 7, 7)}) -> {y}
  %n = graph.batch_norm %c, %s, %b, %m, %v : ({y}, {T(64)}, {T(64)}, {T(64)}, {T(64)}) -> {y}
  %r = graph.relu %n : ({y}) -> {y}
  %o = graph.max_pool2d %r {{kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>}} : ({y}) -> {p}
  func.return %o : {p}""", f"%x: {x}", p, precision)


@PREC
def test_resnet_3x3_conv_56x56_residual(precision):
    x = T(1, 64, 56, 56)
    run(f"""
  %w = graph.weight @c.w : {T(64, 64, 3, 3)}
  %b = graph.weight @c.b : {T(64)}
  %c = graph.conv2d %x, %w, %b {{padding = array<i64: 1, 1, 1, 1>}} : ({x}, {T(64, 64, 3, 3)}, {T(64)}) -> {x}
  %a = graph.add %c, %x : ({x}, {x}) -> {x}
  %r = graph.relu %a : ({x}) -> {x}
  func.return %r : {x}""", f"%x: {x}", x, precision)


@PREC
def test_resnet_3x3_conv_7x7x512_and_head(precision):
    x, f, pooled = T(1, 512, 7, 7), T(1, 2048), T(1, 2048, 1, 1)
    run(f"""
  %w = graph.weight @c.w : {T(512, 512, 3, 3)}
  %c = graph.conv2d %x, %w {{padding = array<i64: 1, 1, 1, 1>}} : ({x}, {T(512, 512, 3, 3)}) -> {x}
  %r = graph.relu %c : ({x}) -> {x}
  %w2 = graph.weight @up.w : {T(2048, 512, 1, 1)}
  %u = graph.conv2d %r, %w2 : ({x}, {T(2048, 512, 1, 1)}) -> {T(1, 2048, 7, 7)}
  %g = graph.global_avg_pool %u : ({T(1, 2048, 7, 7)}) -> {pooled}
  %a = graph.avg_pool2d %u {{kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>}} : ({T(1, 2048, 7, 7)}) -> {T(1, 2048, 7, 7)}
  %fl = graph.reshape %g : ({pooled}) -> {f}
  %fw = graph.weight @fc.w : {T(1000, 2048)}
  %fb = graph.weight @fc.b : {T(1000)}
  %l = graph.linear %fl, %fw, %fb : ({f}, {T(1000, 2048)}, {T(1000)}) -> {T(1, 1000)}
  func.return %l, %a : {T(1, 1000)}, {T(1, 2048, 7, 7)}""", f"%x: {x}", f"{T(1, 1000)}, {T(1, 2048, 7, 7)}",
        precision)


@PREC
def test_resnet_1x1_conv_1024_to_2048_stride2(precision):
    x, y = T(1, 1024, 14, 14), T(1, 2048, 7, 7)
    run(f"""
  %w = graph.weight @d.w : {T(2048, 1024, 1, 1)}
  %c = graph.conv2d %x, %w {{stride = array<i64: 2, 2>}} : ({x}, {T(2048, 1024, 1, 1)}) -> {y}
  %r = graph.relu %c : ({y}) -> {y}
  func.return %r : {y}""", f"%x: {x}", y, precision)


# ---------------------------------------------------------------------------- BERT-base


@PREC
def test_bert_base_layer(precision):
    S, H, NH, HD, F = 128, 768, 12, 64, 3072
    x, heads, th, mlp = T(1, S, H), T(1, S, NH, HD), T(1, NH, S, HD), T(1, S, F)
    proj = "\n".join(f"""
  %w{n} = graph.weight @{n}.w : {T(H, H)}
  %b{n} = graph.weight @{n}.b : {T(H)}
  %{n} = graph.linear %x, %w{n}, %b{n} : ({x}, {T(H, H)}, {T(H)}) -> {x}
  %{n}4 = graph.reshape %{n} : ({x}) -> {heads}
  %{n}t = graph.transpose %{n}4 {{perm = array<i64: 0, 2, 1, 3>}} : ({heads}) -> {th}""" for n in "qkv")
    run(f"""{proj}
  %a = graph.attention %qt, %kt, %vt, %mask : ({th}, {th}, {th}, {T(1, 1, 1, S)}) -> {th}
  %at = graph.transpose %a {{perm = array<i64: 0, 2, 1, 3>}} : ({th}) -> {heads}
  %a3 = graph.reshape %at : ({heads}) -> {x}
  %wo = graph.weight @o.w : {T(H, H)}
  %bo = graph.weight @o.b : {T(H)}
  %o = graph.linear %a3, %wo, %bo : ({x}, {T(H, H)}, {T(H)}) -> {x}
  %r1 = graph.add %o, %x : ({x}, {x}) -> {x}
  %g1 = graph.weight @ln1.g : {T(H)}
  %e1 = graph.weight @ln1.b : {T(H)}
  %h1 = graph.layer_norm %r1, %g1, %e1 : ({x}, {T(H)}, {T(H)}) -> {x}
  %w1 = graph.weight @fc1.w : {T(F, H)}
  %b1 = graph.weight @fc1.b : {T(F)}
  %f1 = graph.linear %h1, %w1, %b1 : ({x}, {T(F, H)}, {T(F)}) -> {mlp}
  %ge = graph.gelu %f1 : ({mlp}) -> {mlp}
  %w2 = graph.weight @fc2.w : {T(H, F)}
  %b2 = graph.weight @fc2.b : {T(H)}
  %f2 = graph.linear %ge, %w2, %b2 : ({mlp}, {T(H, F)}, {T(H)}) -> {x}
  %r2 = graph.add %f2, %h1 : ({x}, {x}) -> {x}
  %g2 = graph.weight @ln2.g : {T(H)}
  %e2 = graph.weight @ln2.b : {T(H)}
  %h2 = graph.layer_norm %r2, %g2, %e2 : ({x}, {T(H)}, {T(H)}) -> {x}
  func.return %h2 : {x}""", f"%x: {x}, %mask: {T(1, 1, 1, S)}", x, precision)


@PREC
def test_bert_scores_softmax_and_gelu_mlp(precision):
    """The unfused pieces: q·kᵀ as a runtime-operand matmul, softmax over [12, 128, 128],
    erf-GELU on [128, 3072] with a broadcast row operand, reductions."""
    q, s, m = T(12, 128, 64), T(12, 128, 128), T(128, 3072)
    run(f"""
  %sc = graph.matmul %q, %k {{transpose_b = true}} : ({q}, {q}, ) -> {s}
  %sm = graph.softmax %sc : ({s}) -> {s}
  %p = graph.matmul %sm, %k : ({s}, {q}) -> {q}
  %y = graph.add %x, %row : ({m}, {T(3072)}) -> {m}
  %g = graph.gelu %y : ({m}) -> {m}
  %d = graph.div %g, %x : ({m}, {m}) -> {m}
  %rm = graph.reduce_mean %d {{axes = array<i64: -1>}} : ({m}) -> {T(128, 1)}
  %r3 = graph.reshape %d : ({m}) -> {T(128, 48, 64)}
  %rs = graph.reduce_max %r3 {{axes = array<i64: 1>}} : ({T(128, 48, 64)}) -> {T(128, 1, 64)}
  func.return %p, %rm, %rs : {q}, {T(128, 1)}, {T(128, 1, 64)}""".replace(", )", ")"),
        f"%q: {q}, %k: {q}, %x: {m}, %row: {T(3072)}", f"{q}, {T(128, 1)}, {T(128, 1, 64)}", precision)


# ---------------------------------------------------------------------------- Llama-ish


@PREC
@pytest.mark.parametrize("hd", [64, 128])
def test_llama_gqa_causal_attention_rotary(precision, hd):
    S, HQ, HKV = 256, 8, 2
    q, kv, cs = T(1, HQ, S, hd), T(1, HKV, S, hd), T(S, hd)
    run(f"""
  %qr = graph.rotary %q, %cos, %sin : ({q}, {cs}, {cs}) -> {q}
  %kr = graph.rotary %k, %cos, %sin : ({kv}, {cs}, {cs}) -> {kv}
  %a = graph.attention %qr, %kr, %v {{causal = true}} : ({q}, {kv}, {kv}) -> {q}
  func.return %a : {q}""", f"%q: {q}, %k: {kv}, %v: {kv}, %cos: {cs}, %sin: {cs}", q, precision)


@PREC
def test_llama_mlp_rms_norm_embedding(precision):
    S, H, F, V = 128, 2048, 5632, 4096
    x, f = T(1, S, H), T(1, S, F)
    run(f"""
  %tab = graph.weight @emb : {T(V, H)}
  %e = graph.gather %tab, %ids {{axis = 0 : i64}} : ({T(V, H)}, tensor<1x{S}xi32>) -> {x}
  %g = graph.weight @norm.g : {T(H)}
  %n = graph.rms_norm %e, %g : ({x}, {T(H)}) -> {x}
  %wg = graph.weight @gate.w : {T(F, H)}
  %wu = graph.weight @up.w : {T(F, H)}
  %wd = graph.weight @down.w : {T(H, F)}
  %gt = graph.linear %n, %wg : ({x}, {T(F, H)}) -> {f}
  %sg = graph.silu %gt : ({f}) -> {f}
  %up = graph.linear %n, %wu : ({x}, {T(F, H)}) -> {f}
  %pr = graph.mul %sg, %up : ({f}, {f}) -> {f}
  %dn = graph.linear %pr, %wd : ({f}, {T(H, F)}) -> {x}
  %r = graph.add %dn, %e : ({x}, {x}) -> {x}
  func.return %r : {x}""", f"%ids: tensor<1x{S}xi32>", x, precision)


# ---------------------------------------------------------------------------- data movement, casts


@PREC
def test_data_movement_and_casts_large(precision):
    a, wide = T(4, 96, 3072), T(2, 3, 70000)
    run(f"""
  %t = graph.transpose %a {{perm = array<i64: 0, 2, 1>}} : ({a}) -> {T(4, 3072, 96)}
  %w = graph.transpose %b {{perm = array<i64: 1, 0, 2>}} : ({wide}) -> {T(3, 2, 70000)}
  %c = graph.concat %a, %a {{axis = 2 : i64}} : ({a}, {a}) -> {T(4, 96, 6144)}
  %s = graph.slice %c {{starts = array<i64: 0, 1, 7>, ends = array<i64: 4, 96, 6144>, steps = array<i64: 1, 2, 3>}} : ({T(4, 96, 6144)}) -> {T(4, 48, 2046)}
  %p = graph.pad %a {{pads = array<i64: 0, 1, 2, 0, 1, 2>}} : ({a}) -> {T(4, 98, 3076)}
  %bc = graph.broadcast %r : ({T(1, 1, 3072)}) -> {a}
  %h = graph.cast %a : ({a}) -> tensor<4x96x3072xbf16>
  %hf = graph.cast %h : (tensor<4x96x3072xbf16>) -> {a}
  %i = graph.cast %a : ({a}) -> tensor<4x96x3072xi32>
  %if = graph.cast %i : (tensor<4x96x3072xi32>) -> {a}
  func.return %t, %w, %s, %p, %bc, %hf, %if : {T(4, 3072, 96)}, {T(3, 2, 70000)}, {T(4, 48, 2046)}, {T(4, 98, 3076)}, {a}, {a}, {a}""",
        f"%a: {a}, %b: {wide}, %r: {T(1, 1, 3072)}",
        f"{T(4, 3072, 96)}, {T(3, 2, 70000)}, {T(4, 48, 2046)}, {T(4, 98, 3076)}, {a}, {a}, {a}", precision)


# ---------------------------------------------------------------------------- the check itself


def test_oversized_override_is_a_located_error_naming_the_kernel():
    x = T(256, 512)
    text = f"""func.func @main(%x: {x}) -> {T(256, 384)} {{
  %w = graph.weight @w : {T(384, 512)}
  %y = graph.linear %x, %w : ({x}, {T(384, 512)}) -> {T(256, 384)}
  func.return %y : {T(256, 384)}
}}
"""
    m = module(text, {"w": (384, 512)})
    with pytest.raises(IRError, match=r"fit.mlir:3:\d+: error: 'graph.linear' op graph-to-tile: kernel0: the local "
                       r"buffers of its loop nest need \d+ bytes of scratchpad but target 'edge' holds 262144 "
                       r"bytes \(the chosen tiles do not fit.*largest: 1048576 B memref<256x512xf32, \"spad\"> x2"):
        GraphToTilePass(target="edge", overrides="kernel0=256x384x512").apply(CTX, m)
