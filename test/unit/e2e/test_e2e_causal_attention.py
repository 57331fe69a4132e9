"""Causal attention whose query and key dimensions are both tiled, end to end on edge.

The causal band column of a score tile is `j0 - q0 + const`: with a query-tile loop and a
key-tile loop both hardware loops it must be affine in both induction variables (tile-to-npu
cannot lower a clamp, i.e. `arith.select`). These models go through `infer.compile(...,
target="edge")` (compile-npu) and the simulator with its race checker, compared with the graph
interpreter. The tile sizes are checked from `debug-tiling` so the test keeps covering the
two-loop case if the cost model changes.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import infer
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.passes import infer_passes
from infer.passes.testing import apply_pass

pytestmark = pytest.mark.skipif("tile-to-npu" not in infer_passes(), reason="tile-to-npu is not registered")


def _t(*s: int) -> str:
    return f"tensor<{'x'.join(map(str, s))}xf32>"


def attention_ir(B: int, Hq: int, Hkv: int, Sq: int, Skv: int, D: int) -> str:
    q, kv = _t(B, Hq, Sq, D), _t(B, Hkv, Skv, D)
    return f"""func.func @main(%q: {q} {{graph.name = "q"}}, %k: {kv} {{graph.name = "k"}}, %v: {kv} {{graph.name = "v"}}) -> ({q} {{graph.name = "y"}}) {{
  %a = graph.attention %q, %k, %v {{causal = true}} : ({q}, {kv}, {kv}) -> {q}
  func.return %a : {q}
}}"""


def heads_ir(S: int, H: int, D: int) -> str:
    """Head split (reshape + transpose 0,2,1,3), causal attention, head merge: a transformer
    block's attention core on [1, S, H*D] activations."""
    x, x4, xh = _t(1, S, H * D), _t(1, S, H, D), _t(1, H, S, D)
    args = ", ".join(f'%{n}: {x} {{graph.name = "{n}"}}' for n in "qkv")
    lines = [f'func.func @main({args}) -> ({x} {{graph.name = "y"}}) {{']
    for n in "qkv":
        lines.append(f"  %{n}4 = graph.reshape %{n} : ({x}) -> {x4}")
        lines.append(f"  %{n}t = graph.transpose %{n}4 {{perm = array<i64: 0, 2, 1, 3>}} : ({x4}) -> {xh}")
    lines += [f"  %a = graph.attention %qt, %kt, %vt {{causal = true}} : ({xh}, {xh}, {xh}) -> {xh}",
              f"  %at = graph.transpose %a {{perm = array<i64: 0, 2, 1, 3>}} : ({xh}) -> {x4}",
              f"  %y = graph.reshape %at : ({x4}) -> {x}",
              f"  func.return %y : {x}", "}"]
    return "\n".join(lines)


def flash_tiles(text: str, target: str, capfd) -> tuple[int, int]:
    m = parse_ir(make_context(), text, "t.mlir")
    verify_module(m)
    capfd.readouterr()
    apply_pass(f"lower-to-tile{{target={target} debug-tiling=true}}", m)
    err = capfd.readouterr().err
    found = re.search(r"flash tiles TQxTKV = (\d+)x(\d+)", err)
    assert found, err
    return int(found.group(1)), int(found.group(2))


def run_and_compare(path, inputs, target: str, precision: str) -> None:
    exe = infer.compile(path, target=target, precision=precision)
    ys = exe.run(inputs, check_races=True)
    refs = infer.import_model(path).run(inputs)
    assert len(ys) == len(refs) == 1
    y, ref = np.asarray(ys[0], np.float64), np.asarray(refs[0], np.float64)
    assert y.shape == ref.shape and np.isfinite(y).all()
    if precision == "fp32":
        err = float(np.abs(y - ref).max()) / float(ref.max() - ref.min())
        assert err <= 1e-3, err
    else:
        cos = float(y.ravel() @ ref.ravel() / (np.linalg.norm(y) * np.linalg.norm(ref)))
        assert cos >= 0.999, cos


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("shape", [(1, 2, 2, 128, 128, 64),  # prefill: Sq = Skv
                                   (1, 4, 2, 192, 264, 32),  # KV cache (keys before the queries), GQA, key remainder
                                   (1, 1, 1, 200, 264, 32)],  # query and key remainder tiles
                         ids=["prefill128", "kvcache192x264", "kvcache200x264"])
def test_causal_attention_tiled_both_dims_edge(tmp_path, capfd, shape, precision):
    B, Hq, Hkv, Sq, Skv, D = shape
    text = attention_ir(*shape)
    TQ, TKV = flash_tiles(text, "edge", capfd)
    assert TQ < Sq and TKV < Skv, (TQ, TKV)  # both a query-tile and a key-tile loop
    path = tmp_path / "att.mlir"
    path.write_text(text)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((B, Hq, Sq, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    run_and_compare(path, [q, k, v], "edge", precision)


@pytest.mark.parametrize("target", ["edge", "server"])
def test_causal_attention_head_split_merge(tmp_path, capfd, target):
    S, H, D = 128, 4, 64
    text = heads_ir(S, H, D)
    TQ, TKV = flash_tiles(text, target, capfd)
    if target == "edge":
        assert TQ < S and TKV < S, (TQ, TKV)
    path = tmp_path / "heads.mlir"
    path.write_text(text)
    rng = np.random.default_rng(2)
    ins = [rng.standard_normal((1, S, H * D)).astype(np.float32) for _ in range(3)]
    run_and_compare(path, ins, target, "fp32")
