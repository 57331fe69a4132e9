"""Graph interpreter: matmul/linear, conv, pooling, normalization, softmax,
attention, rotary — against torch.

Tolerances: see the table in helpers/interpreter_cases.py (f64 1e-10/1e-12,
f32 1e-5/1e-5, f16 2e-3/2e-3, bf16 1.6e-2/1.6e-2, integers and i1 exact).
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from infer.dialects import graph as g
from infer.dialects.graph import bool_attr, f64_attr, i64_array, i64_attr
from infer.dialects.graph_interpreter import evaluate_op

from helpers.interpreter_cases import (
    F32,
    F64,
    FLOAT_DTYPES,
    check,
    randn,
    run_op,
    single_op_module,
    to_torch,
)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(4321)


# --------------------------------------------------------------------------
# Matmul / linear
# --------------------------------------------------------------------------

MATMUL_CASES = [
    # lhs shape, rhs shape, transpose_a, transpose_b
    ((3, 4), (4, 5), False, False),
    ((2, 1, 3, 4), (3, 4, 5), False, False),  # batch broadcasting
    ((4,), (4, 5), False, False),  # rank-1 lhs
    ((3, 4), (4,), False, False),  # rank-1 rhs
    ((4,), (4,), False, False),  # dot -> scalar
    ((2, 4, 3), (2, 5, 4), True, True),
    ((6, 3, 4), (5, 4), False, True),
    ((4, 3), (4, 5), True, False),
]


@pytest.mark.parametrize("dtype", [F32, *FLOAT_DTYPES[1:], F64], ids=str)
@pytest.mark.parametrize("case", MATMUL_CASES, ids=lambda c: f"{c[0]}x{c[1]}t{int(c[2])}{int(c[3])}")
def test_matmul(case, dtype, rng):
    sa, sb, ta, tb = case
    a, b = randn(rng, sa, dtype), randn(rng, sb, dtype)
    got = run_op(g.MatmulOp, [a, b], {"transpose_a": bool_attr(ta), "transpose_b": bool_attr(tb)})
    at, bt = to_torch(a), to_torch(b)
    ref = torch.matmul(at.transpose(-1, -2) if ta else at, bt.transpose(-1, -2) if tb else bt)
    check(got, ref, dtype)


def test_matmul_int_exact(rng):
    a = rng.integers(-100, 100, (2, 3, 7)).astype(np.int32)
    b = rng.integers(-100, 100, (7, 4)).astype(np.int32)
    check(run_op(g.MatmulOp, [a, b]), torch.from_numpy(a) @ torch.from_numpy(b), np.int32)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias, dtype, rng):
    x, w = randn(rng, (2, 3, 8), dtype), randn(rng, (5, 8), dtype)
    b = randn(rng, (5,), dtype)
    got = run_op(g.LinearOp, [x, w, b] if bias else [x, w])
    check(got, F.linear(to_torch(x), to_torch(w), to_torch(b) if bias else None), dtype)


# --------------------------------------------------------------------------
# Conv2d
# --------------------------------------------------------------------------

CONV_CASES = {
    # name: (input NCHW, weight OIHW, stride, padding [t, l, b, r], dilation, groups, bias)
    "3x3_pad1": ((2, 4, 9, 8), (6, 4, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, True),
    "grouped": ((1, 6, 7, 7), (4, 3, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 2, True),
    "depthwise": ((2, 5, 8, 8), (5, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 5, False),
    "depthwise_multiplier": ((1, 3, 6, 6), (6, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 3, True),
    "strided_dilated": ((1, 3, 13, 11), (4, 3, 3, 2), (2, 3), (2, 1, 2, 1), (2, 3), 1, True),
    "asymmetric_pad": ((1, 2, 7, 6), (3, 2, 3, 3), (2, 1), (0, 1, 2, 3), (1, 1), 1, False),
    "1x1_stride2": ((2, 8, 6, 6), (4, 8, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1, False),
    "7x7_stem": ((1, 3, 20, 20), (8, 3, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1, False),
}


def _conv_props(stride, padding, dilation, groups):
    return {
        "stride": i64_array(stride),
        "padding": i64_array(padding),
        "dilation": i64_array(dilation),
        "groups": i64_attr(groups),
    }


def _conv_ref(x, w, b, stride, padding, dilation, groups):
    t, l, bo, r = padding
    xt = F.pad(to_torch(x), (l, r, t, bo))  # asymmetric padding: pad explicitly
    return F.conv2d(xt, to_torch(w), to_torch(b) if b is not None else None, stride, 0, dilation, groups)


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv2d(name, rng):
    xs, ws, stride, padding, dilation, groups, bias = CONV_CASES[name]
    x, w = randn(rng, xs), randn(rng, ws)
    b = randn(rng, (ws[0],)) if bias else None
    got = run_op(g.Conv2dOp, [x, w] + ([b] if bias else []), _conv_props(stride, padding, dilation, groups))
    check(got, _conv_ref(x, w, b, stride, padding, dilation, groups), F32)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES[1:] + [F64], ids=str)
@pytest.mark.parametrize("name", ["3x3_pad1", "grouped", "strided_dilated"])
def test_conv2d_dtypes(name, dtype, rng):
    xs, ws, stride, padding, dilation, groups, bias = CONV_CASES[name]
    x, w, b = randn(rng, xs, dtype), randn(rng, ws, dtype, scale=0.3), randn(rng, (ws[0],), dtype)
    got = run_op(g.Conv2dOp, [x, w, b], _conv_props(stride, padding, dilation, groups))
    ref = _conv_ref(x, w, b, stride, padding, dilation, groups)
    check(got, ref, dtype)


def test_conv2d_resnet50_layers_are_fast(rng):
    layers = [
        # stem, a 3x3 bottleneck conv and a 1x1 expansion at 56x56
        ((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3)),
        ((1, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1)),
        ((1, 64, 56, 56), (256, 64, 1, 1), (1, 1), (0, 0, 0, 0)),
        ((1, 256, 14, 14), (256, 256, 3, 3), (1, 1), (1, 1, 1, 1)),
    ]
    for xs, ws, stride, padding in layers:
        x, w = randn(rng, xs), randn(rng, ws, scale=0.05)
        _, op = single_op_module(g.Conv2dOp, [x, w], _conv_props(stride, padding, (1, 1), 1))
        start = time.perf_counter()
        (got,) = evaluate_op(op, [x, w])
        elapsed = time.perf_counter() - start
        assert elapsed < 1.0, f"conv {xs} * {ws} took {elapsed:.2f}s"
        ref = F.conv2d(to_torch(x), to_torch(w), None, stride, padding[:2])
        np.testing.assert_allclose(got, ref.numpy(), rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------

POOL_CASES = [
    # input, kernel, stride, padding (symmetric), ceil_mode, dilation
    ((2, 3, 8, 8), (2, 2), (2, 2), (0, 0), False, (1, 1)),
    ((1, 4, 112, 112), (3, 3), (2, 2), (1, 1), False, (1, 1)),  # ResNet max pool
    ((1, 2, 7, 9), (3, 3), (2, 2), (1, 1), True, (1, 1)),
    ((1, 2, 6, 6), (3, 2), (2, 2), (0, 1), True, (1, 1)),
    ((1, 2, 10, 10), (3, 3), (3, 3), (1, 1), True, (1, 1)),
    ((1, 1, 5, 5), (2, 2), (2, 2), (1, 1), True, (1, 1)),  # last ceil window would start in padding
    ((1, 2, 11, 11), (3, 3), (2, 2), (1, 1), True, (2, 2)),  # dilated (max only)
]


def _pool_props(kernel, stride, pad, ceil_mode, dilation=(1, 1)):
    return {
        "kernel": i64_array(kernel),
        "stride": i64_array(stride),
        "padding": i64_array([pad[0], pad[1], pad[0], pad[1]]),
        "dilation": i64_array(dilation),
        "ceil_mode": bool_attr(ceil_mode),
    }


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_max_pool2d(case, dtype, rng):
    xs, kernel, stride, pad, ceil_mode, dilation = case
    x = randn(rng, xs, dtype) - np.asarray(3, dtype)  # mostly negative: padding must not win
    got = run_op(g.MaxPool2dOp, [x], _pool_props(kernel, stride, pad, ceil_mode, dilation))
    ref = F.max_pool2d(to_torch(x), kernel, stride, pad, dilation, ceil_mode=ceil_mode)
    check(got, ref, dtype)


@pytest.mark.parametrize("include_pad", [False, True])
@pytest.mark.parametrize("case", [c for c in POOL_CASES if c[5] == (1, 1)], ids=str)
def test_avg_pool2d(case, include_pad, rng):
    xs, kernel, stride, pad, ceil_mode, _ = case
    x = randn(rng, xs)
    props = _pool_props(kernel, stride, pad, ceil_mode)
    props["count_include_pad"] = bool_attr(include_pad)
    got = run_op(g.AvgPool2dOp, [x], props)
    ref = F.avg_pool2d(to_torch(x), kernel, stride, pad, ceil_mode=ceil_mode, count_include_pad=include_pad)
    check(got, ref, F32)


def _naive_pool(x, kernel, stride, pad, out_hw, kind, include_pad):
    """Direct loops: windows over the [t, l, b, r]-padded input; divisor per torch's rule."""
    n, c, h, w = x.shape
    t, l, b, r = pad
    out = np.zeros((n, c, *out_hw))
    for i, j in itertools.product(range(out_hw[0]), range(out_hw[1])):
        hs, ws = i * stride[0] - t, j * stride[1] - l
        he, we = min(hs + kernel[0], h + b), min(ws + kernel[1], w + r)
        count_padded = (he - hs) * (we - ws)
        h0, w0, h1, w1 = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
        win = x[:, :, h0:h1, w0:w1].astype(np.float64)
        if kind == "max":
            out[:, :, i, j] = win.max(axis=(2, 3))
        else:
            out[:, :, i, j] = win.sum(axis=(2, 3)) / (count_padded if include_pad else (h1 - h0) * (w1 - w0))
    return out


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("kind,include_pad", [("max", False), ("avg", False), ("avg", True)])
def test_pool_asymmetric_padding(kind, include_pad, ceil_mode, rng):
    x = randn(rng, (1, 2, 9, 8)) - 2
    kernel, stride, pad = (3, 4), (2, 3), (0, 2, 1, 1)
    props = {
        "kernel": i64_array(kernel), "stride": i64_array(stride), "padding": i64_array(pad),
        "ceil_mode": bool_attr(ceil_mode),
    }
    cls = g.MaxPool2dOp if kind == "max" else g.AvgPool2dOp
    if kind == "avg":
        props["count_include_pad"] = bool_attr(include_pad)
    got = run_op(cls, [x], props)
    check(got, _naive_pool(x, kernel, stride, pad, got.shape[2:], kind, include_pad), F32)


def test_max_pool_integers(rng):
    x = rng.integers(-128, 0, (1, 2, 5, 5)).astype(np.int8)
    got = run_op(g.MaxPool2dOp, [x], _pool_props((3, 3), (2, 2), (1, 1), True))
    ref = F.max_pool2d(torch.from_numpy(x.astype(np.float32)), 3, 2, 1, ceil_mode=True)
    check(got, ref.numpy().astype(np.int8), np.int8)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_global_pools(dtype, rng):
    x = randn(rng, (2, 3, 5, 7), dtype)
    t = to_torch(x)
    check(run_op(g.GlobalAvgPoolOp, [x]), t.mean(dim=(2, 3), keepdim=True), dtype)
    check(run_op(g.GlobalMaxPoolOp, [x]), t.amax(dim=(2, 3), keepdim=True), dtype)
    x3 = randn(rng, (2, 3, 4), dtype)
    check(run_op(g.GlobalAvgPoolOp, [x3]), to_torch(x3).mean(dim=2, keepdim=True), dtype)


# --------------------------------------------------------------------------
# Normalization and softmax
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(2, 4, 5, 3), (3, 4)])
def test_batch_norm(shape, dtype, rng):
    c = shape[1]
    x = randn(rng, shape, dtype)
    scale, bias, mean = randn(rng, (c,), dtype), randn(rng, (c,), dtype), randn(rng, (c,), dtype)
    var = rng.uniform(0.5, 2.0, (c,)).astype(dtype)
    got = run_op(g.BatchNormOp, [x, scale, bias, mean, var], {"epsilon": f64_attr(1e-3)})
    ref = F.batch_norm(to_torch(x), to_torch(mean), to_torch(var), to_torch(scale), to_torch(bias), False, 0.0, 1e-3)
    check(got, ref, dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("axis,bias", [(-1, True), (-1, False), (-2, True), (1, True)])
def test_layer_norm(axis, bias, dtype, rng):
    x = randn(rng, (2, 3, 6, 8), dtype, scale=2) + np.asarray(1.0, dtype)
    norm_shape = x.shape[axis % 4 :]
    scale, b = randn(rng, norm_shape, dtype), randn(rng, norm_shape, dtype)
    got = run_op(g.LayerNormOp, [x, scale, b] if bias else [x, scale], {"axis": i64_attr(axis), "epsilon": f64_attr(1e-6)})
    ref = F.layer_norm(to_torch(x), norm_shape, to_torch(scale), to_torch(b) if bias else None, 1e-6)
    check(got, ref, dtype)


def test_layer_norm_broadcast_scale(rng):
    x = randn(rng, (2, 3, 4))
    scale = randn(rng, (4,))
    got = run_op(g.LayerNormOp, [x, scale], {"axis": i64_attr(1)})
    ref = F.layer_norm(to_torch(x), (3, 4), torch.from_numpy(np.broadcast_to(scale, (3, 4)).copy()), None, 1e-5)
    check(got, ref, F32)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("axis", [-1, -2])
def test_rms_norm(axis, dtype, rng):
    x = randn(rng, (2, 5, 16), dtype, scale=3)
    norm_shape = x.shape[axis % 3 :]
    scale = randn(rng, norm_shape, dtype)
    got = run_op(g.RmsNormOp, [x, scale], {"axis": i64_attr(axis), "epsilon": f64_attr(1e-6)})
    check(got, F.rms_norm(to_torch(x), norm_shape, to_torch(scale), 1e-6), dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax_and_log_softmax(axis, dtype, rng):
    x = randn(rng, (3, 5, 7), dtype, scale=4)
    t = to_torch(x)
    check(run_op(g.SoftmaxOp, [x], {"axis": i64_attr(axis)}), F.softmax(t, dim=axis), dtype)
    check(run_op(g.LogSoftmaxOp, [x], {"axis": i64_attr(axis)}), F.log_softmax(t, dim=axis), dtype)


def test_softmax_stable_with_large_and_masked_values():
    x = np.array([[1000.0, 1000.0, -np.inf], [-1e4, 0.0, 1e4]], np.float32)
    t = torch.from_numpy(x)
    check(run_op(g.SoftmaxOp, [x]), F.softmax(t, dim=-1), F32)
    check(run_op(g.LogSoftmaxOp, [x]), F.log_softmax(t, dim=-1), F32)


# --------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------


def _end_aligned_causal(sq: int, skv: int) -> np.ndarray:
    return np.arange(skv)[None, :] <= np.arange(sq)[:, None] + (skv - sq)


def _sdpa(q, k, v, mask=None, scale=None):
    """torch reference: GQA via enable_gqa; causality passed as an explicit
    end-aligned boolean mask (torch's is_causal is top-left aligned)."""
    return F.scaled_dot_product_attention(
        to_torch(q), to_torch(k), to_torch(v),
        attn_mask=None if mask is None else (torch.from_numpy(mask) if mask.dtype == np.bool_ else to_torch(mask)),
        scale=scale, enable_gqa=q.shape[1] != k.shape[1],
    )


ATTN_CASES = {
    # name: (B, Hq, Hkv, Sq, Skv, D, Dv, causal)
    "mha": (2, 4, 4, 5, 5, 8, 8, False),
    "mha_causal": (1, 2, 2, 6, 6, 8, 8, True),
    "gqa": (2, 8, 2, 4, 7, 16, 16, False),
    "gqa_causal_prefill": (1, 6, 3, 5, 5, 8, 8, True),
    "decode_causal": (2, 4, 2, 1, 9, 8, 8, True),  # one new token, KV cache of 9
    "chunk_causal": (1, 4, 1, 3, 8, 8, 4, True),  # Sq < Skv, MQA, Dv != D
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(ATTN_CASES))
def test_attention(name, dtype, rng):
    b, hq, hkv, sq, skv, d, dv, causal = ATTN_CASES[name]
    q, k, v = randn(rng, (b, hq, sq, d), dtype), randn(rng, (b, hkv, skv, d), dtype), randn(rng, (b, hkv, skv, dv), dtype)
    got = run_op(g.AttentionOp, [q, k, v], {"causal": bool_attr(causal)})
    mask = _end_aligned_causal(sq, skv) if causal else None
    check(got, _sdpa(q, k, v, mask), dtype, (b, hq, sq, dv))


def test_attention_causal_alignment_explicit(rng):
    """The decode query (last position) sees every key; a top-left alignment would not."""
    q, k, v = randn(rng, (1, 1, 2, 4)), randn(rng, (1, 1, 5, 4)), randn(rng, (1, 1, 5, 4))
    got = run_op(g.AttentionOp, [q, k, v], {"causal": bool_attr(True)})
    scores = (q[0, 0] @ k[0, 0].T) / 2.0
    scores[0, 4] = -np.inf  # query 0 is position 3: sees keys 0..3
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    check(got[0, 0], p @ v[0, 0], F32)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_attention_masks_and_scale(dtype, rng):
    b, hq, hkv, sq, skv, d = 2, 4, 2, 3, 6, 8
    q, k, v = randn(rng, (b, hq, sq, d), dtype), randn(rng, (b, hkv, skv, d), dtype), randn(rng, (b, hkv, skv, d), dtype)
    # boolean padding mask broadcasting from [B, 1, 1, Skv]
    keep = np.ones((b, 1, 1, skv), bool)
    keep[0, ..., 4:] = False
    got = run_op(g.AttentionOp, [q, k, v, keep])
    check(got, _sdpa(q, k, v, keep), dtype)
    # additive mask [Sq, Skv] with a custom scale, plus causality
    add = randn(rng, (sq, skv), dtype)
    got = run_op(g.AttentionOp, [q, k, v, add], {"scale": f64_attr(0.3), "causal": bool_attr(True)})
    causal_add = np.where(_end_aligned_causal(sq, skv), add.astype(np.float32), -np.inf).astype(np.float32)
    check(got, _sdpa(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), causal_add, 0.3), dtype)


def test_attention_fully_masked_row_is_zero(rng):
    q, k, v = randn(rng, (1, 1, 2, 4)), randn(rng, (1, 1, 3, 4)), randn(rng, (1, 1, 3, 4))
    keep = np.array([[False, False, False], [True, False, True]])
    got = run_op(g.AttentionOp, [q, k, v, keep])
    assert not np.isnan(got).any()
    check(got[0, 0, 0], np.zeros(4), F32)
    check(got[0, 0, 1], _sdpa(q[:, :, 1:], k, v, keep[1:])[0, 0, 0], F32)


# --------------------------------------------------------------------------
# Rotary
# --------------------------------------------------------------------------


def _angles(s: int, r: int, interleaved: bool) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / (10000 ** (np.arange(0, r, 2) / r))
    freqs = np.outer(np.arange(s), inv)  # [S, R/2]
    emb = np.repeat(freqs, 2, axis=-1) if interleaved else np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def _rotate_every_two(x):
    return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rot_dim,cos_rank", [(16, 2), (8, 4), (4, 2)])  # full and partial rotary
def test_rotary(rot_dim, cos_rank, interleaved, dtype, rng):
    b, h, s, d = 2, 3, 5, 16
    x = randn(rng, (b, h, s, d), dtype)
    cos, sin = _angles(s, rot_dim, interleaved)
    if cos_rank == 4:
        cos, sin = np.broadcast_to(cos, (b, 1, s, rot_dim)).copy(), np.broadcast_to(sin, (b, 1, s, rot_dim)).copy()
    cos, sin = cos.astype(dtype), sin.astype(dtype)
    got = run_op(g.RotaryOp, [x, cos, sin], {"interleaved": bool_attr(interleaved)})
    xt, ct, st = to_torch(x), to_torch(cos), to_torch(sin)
    xr, rest = xt[..., :rot_dim], xt[..., rot_dim:]
    rot = _rotate_every_two(xr) if interleaved else _rotate_half(xr)
    ref = torch.cat([xr * ct + rot * st, rest], dim=-1)
    check(got, ref, dtype)
    np.testing.assert_array_equal(got[..., rot_dim:], x[..., rot_dim:])  # untouched tail


def test_rotary_interleaved_is_complex_rotation(rng):
    """GPT-J pairs (x[2i], x[2i+1]) rotate as the complex number x[2i] + i x[2i+1]."""
    x = randn(rng, (1, 4, 8))
    theta = np.outer(np.arange(4), 1.0 / (10000 ** (np.arange(0, 8, 2) / 8)))  # [S, R/2]
    cos = np.repeat(np.cos(theta), 2, axis=-1).astype(np.float32)
    sin = np.repeat(np.sin(theta), 2, axis=-1).astype(np.float32)
    got = run_op(g.RotaryOp, [x, cos, sin], {"interleaved": bool_attr(True)})
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * theta)
    check(got, np.stack([z.real, z.imag], axis=-1).reshape(x.shape), F32)
