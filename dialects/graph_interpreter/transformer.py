"""Graph-interpreter kernels of the transformer ops: attention, rotary embedding, gather, the
contiguous KV-cache write and paged attention over a block table."""

from __future__ import annotations

import math

import numpy as np

from infer.dialects import graph as g
from infer.dialects.graph_interpreter.core import (
    bool_of,
    Env,
    float_of,
    int_of,
    InterpreterError,
    kernel_for,
    scalar,
    upcast,
)


# -- transformer ops -------------------------------------------------------------------------


@kernel_for(g.AttentionOp)
def _attention(op: g.AttentionOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    q, k, v = upcast(xs[0]), upcast(xs[1]), upcast(xs[2])
    b, hq, sq, d = q.shape
    _, hkv, skv, _ = k.shape
    dv = v.shape[-1]
    group = hq // hkv
    scale = float_of(op.scale) if op.scale is not None else 1.0 / math.sqrt(d)
    # query head h reads kv head h // group: fold the group into the rows so
    # every kv head does one plain matmul ([G*Sq, D] @ [D, Skv])
    qg = q.reshape(b, hkv, group * sq, d)
    scores = np.matmul(qg, np.swapaxes(k, -1, -2)) * scalar(q, scale)
    scores = scores.reshape(b, hq, sq, skv)
    allowed = None
    if len(xs) > 3:
        mask = xs[3]
        if mask.dtype == np.bool_:
            allowed = np.broadcast_to(mask, scores.shape)
        else:
            scores = scores + upcast(mask)
    if bool_of(op.causal):
        causal = np.arange(skv)[None, :] <= np.arange(sq)[:, None] + (skv - sq)
        allowed = causal if allowed is None else (allowed & causal)
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    m = np.max(scores, axis=-1, keepdims=True)
    dead = ~np.isfinite(m) & (m < 0)  # every key masked out (or -inf scores)
    m = np.where(dead, q.dtype.type(0), m)
    e = np.exp(scores - m)
    s = np.sum(e, axis=-1, keepdims=True)
    p = np.where(dead, q.dtype.type(0), e / np.where(dead, q.dtype.type(1), s))
    out = np.matmul(p.reshape(b, hkv, group * sq, skv), v)
    return out.reshape(b, hq, sq, dv)


@kernel_for(g.RotaryOp)
def _rotary(op: g.RotaryOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x, cos, sin = upcast(xs[0]), upcast(xs[1]), upcast(xs[2])
    r = cos.shape[-1]
    xr, rest = x[..., :r], x[..., r:]
    if bool_of(op.interleaved):
        rot = np.empty_like(xr)
        rot[..., 0::2] = -xr[..., 1::2]
        rot[..., 1::2] = xr[..., 0::2]
    else:
        half = r // 2
        rot = np.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
    y = xr * cos + rot * sin
    y = np.broadcast_to(y, (*x.shape[:-1], r))
    return np.concatenate([y, rest], axis=-1) if rest.shape[-1] else y


@kernel_for(g.GatherOp)
def _gather(op: g.GatherOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x, idx = xs
    axis = g.normalize_axis(op.name, int_of(op.axis), x.ndim)
    dim = x.shape[axis]
    idx = idx.astype(np.int64) if idx.dtype != np.uint64 else idx
    if idx.size:
        lo, hi = idx.min(), idx.max()
        if lo < -dim or hi >= dim:
            bad = idx[(idx < -dim) | (idx >= dim)].ravel()[0]
            raise InterpreterError(
                f"{op.name}: index {int(bad)} is out of range for axis {axis} of size {dim} "
                f"(valid: {-dim} .. {dim - 1})"
            )
    if np.issubdtype(idx.dtype, np.signedinteger):
        idx = np.where(idx < 0, idx + dim, idx)
    return np.take(x, idx, axis=axis)


@kernel_for(g.KvCacheWriteOp)
def _kv_cache_write(op: g.KvCacheWriteOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    cache, rows, slots = xs
    size = cache.shape[0]
    bad = (slots < 0) | (slots >= size)
    if bad.any():
        raise InterpreterError(
            f"{op.name}: slot {int(slots[bad][0])} is out of range for a cache of {size} rows "
            f"(valid: 0 .. {size - 1})"
        )
    out = cache.copy()
    out[slots.astype(np.int64)] = rows
    return out


def paged_token_rows(block_table: np.ndarray, n: int, block_size: int) -> np.ndarray:
    """The pool rows of tokens 0 .. n-1 of one sequence (block_table[t // BS] * BS + t % BS)."""
    t = np.arange(n, dtype=np.int64)
    return block_table[t // block_size].astype(np.int64) * block_size + t % block_size


@kernel_for(g.PagedAttentionOp)
def _paged_attention(op: g.PagedAttentionOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    q, k_cache, v_cache = upcast(xs[0]), upcast(xs[1]), upcast(xs[2])
    tables, lens = xs[3], xs[4]
    b, hq, sq, d, hkv, dv, mb = op.geometry()
    bs = op.block_size_value
    blocks = k_cache.shape[0] // bs
    group = hq // hkv
    scale = q.dtype.type(float_of(op.scale) if op.scale is not None else 1.0 / math.sqrt(d))
    out = np.zeros((b, hq, sq, dv), dtype=q.dtype)
    for seq in range(b):
        n = int(lens[seq])
        if n < 0 or n > mb * bs:
            raise InterpreterError(
                f"{op.name}: context length {n} of sequence {seq} is outside 0 .. {mb * bs} "
                f"({mb} blocks of {bs} tokens)"
            )
        used = tables[seq, : -(-n // bs)]
        if ((used < 0) | (used >= blocks)).any():
            bad = int(used[(used < 0) | (used >= blocks)][0])
            raise InterpreterError(
                f"{op.name}: sequence {seq} uses block {bad}, outside the pool's 0 .. {blocks - 1}"
            )
        rows = paged_token_rows(tables[seq], n, bs)
        k = k_cache[rows].reshape(n, hkv, d).transpose(1, 0, 2)  # [Hkv, n, D]
        v = v_cache[rows].reshape(n, hkv, dv).transpose(1, 0, 2)
        qg = q[seq].reshape(hkv, group * sq, d)
        scores = (np.matmul(qg, np.swapaxes(k, -1, -2)) * scale).reshape(hkv, group, sq, n)
        position = n - sq + np.arange(sq)
        allowed = np.arange(n)[None, :] <= position[:, None]  # [Sq, n]
        scores = np.where(allowed, scores, -np.inf)
        live = position >= 0  # a query row with at least one key
        m = np.max(scores, axis=-1, keepdims=True, initial=-np.inf)
        m = np.where(live[:, None], m, q.dtype.type(0))
        e = np.exp(scores - m)
        p = e / np.where(live[:, None], np.sum(e, axis=-1, keepdims=True), q.dtype.type(1))
        o = np.matmul(p.reshape(hkv, group * sq, n), v).reshape(hq, sq, dv)
        out[seq] = np.where(live[:, None], o, q.dtype.type(0))
    return out
