"""graph.kv_cache_write and graph.paged_attention on the reference interpreter, against a
plain numpy paged attention written here (a loop per sequence, head and query row, in
float64): random block tables, different context lengths, decode (Sq = 1) and causal
prefill chunks (Sq > 1), grouped-query heads, and the run-time errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infer.dialects import graph as g
from infer.dialects.graph import f64_attr, i64_attr
from infer.dialects.graph_interpreter import InterpreterError

from helpers.interpreter_cases import BF16, F32, check, randn, run_op


def reference_paged_attention(q, k_cache, v_cache, tables, lens, block_size, scale=None):
    """Token t of sequence b is row tables[b, t // BS] * BS + t % BS; query row i is the
    token at n - Sq + i and sees the tokens 0 .. n - Sq + i; head h reads KV head h // G."""
    q, k_cache, v_cache = (a.astype(np.float64) for a in (q, k_cache, v_cache))
    batch, hq, sq, d = q.shape
    hkv = k_cache.shape[1] // d
    dv = v_cache.shape[1] // hkv
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = np.zeros((batch, hq, sq, dv))
    for b in range(batch):
        n = int(lens[b])
        for h in range(hq):
            kv = h // (hq // hkv)
            for i in range(sq):
                last = n - sq + i
                if last < 0:
                    continue
                scores, values = [], []
                for t in range(last + 1):
                    row = int(tables[b, t // block_size]) * block_size + t % block_size
                    key = k_cache[row, kv * d : (kv + 1) * d]
                    scores.append(float(q[b, h, i] @ key) * scale)
                    values.append(v_cache[row, kv * dv : (kv + 1) * dv])
                w = np.exp(np.array(scores) - max(scores))
                out[b, h, i] = (w / w.sum()) @ np.array(values)
    return out


def random_tables(rng, batch, max_blocks, num_blocks):
    """Each sequence owns distinct random blocks of the pool (like a block manager would)."""
    perm = rng.permutation(num_blocks)[: batch * max_blocks]
    return perm.reshape(batch, max_blocks).astype(np.int32)


CASES = [
    # (batch, hq, hkv, sq, d, dv, block_size, max_blocks, num_blocks, context lengths)
    pytest.param(3, 4, 2, 1, 8, 8, 4, 5, 16, [1, 7, 20], id="decode-gqa"),
    pytest.param(4, 6, 3, 1, 16, 8, 8, 3, 12, [24, 8, 9, 3], id="decode-dv-differs"),
    pytest.param(2, 2, 2, 5, 8, 8, 4, 4, 9, [5, 13], id="chunk-start0-and-8"),
    pytest.param(2, 8, 2, 6, 8, 16, 2, 8, 20, [16, 11], id="chunk-gqa"),
    pytest.param(2, 2, 1, 3, 4, 4, 4, 2, 4, [2, 0], id="rows-without-keys"),
]


@pytest.mark.parametrize("batch,hq,hkv,sq,d,dv,bs,mb,nb,lens", CASES)
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
def test_paged_attention_matches_numpy(batch, hq, hkv, sq, d, dv, bs, mb, nb, lens, dtype):
    rng = np.random.default_rng(len(lens) * 100 + sq)
    q = randn(rng, (batch, hq, sq, d), dtype)
    k_cache = randn(rng, (nb * bs, hkv * d), dtype)
    v_cache = randn(rng, (nb * bs, hkv * dv), dtype)
    tables = random_tables(rng, batch, mb, nb)
    lens = np.array(lens, dtype=np.int32)
    for b, n in enumerate(lens):  # entries past the used blocks are never read
        tables[b, -(-int(n) // bs) :] = -1
    got = run_op(
        g.PagedAttentionOp, [q, k_cache, v_cache, tables, lens], {"block_size": i64_attr(bs)}
    )
    ref = reference_paged_attention(q, k_cache, v_cache, tables, lens, bs)
    check(got, ref, dtype)


def test_paged_attention_explicit_scale():
    rng = np.random.default_rng(5)
    q = randn(rng, (1, 2, 2, 8))
    k_cache, v_cache = randn(rng, (16, 8)), randn(rng, (16, 8))
    tables, lens = np.array([[3, 1, 0]], np.int32), np.array([9], np.int32)
    props = {"block_size": i64_attr(4), "scale": f64_attr(0.3)}
    got = run_op(g.PagedAttentionOp, [q, k_cache, v_cache, tables, lens], props)
    check(got, reference_paged_attention(q, k_cache, v_cache, tables, lens, 4, scale=0.3), F32)


def test_paged_attention_equals_dense_causal_attention():
    """Gathering each sequence's tokens into a dense [Hkv, n, D] and running graph.attention
    (causal) gives the same values: the paged op is attention over a scattered cache."""
    rng = np.random.default_rng(9)
    bs, n, sq = 4, 10, 3
    q = randn(rng, (1, 4, sq, 8))
    k_cache, v_cache = randn(rng, (32, 16)), randn(rng, (32, 16))
    tables, lens = np.array([[6, 2, 7]], np.int32), np.array([n], np.int32)
    paged = run_op(g.PagedAttentionOp, [q, k_cache, v_cache, tables, lens], {"block_size": i64_attr(bs)})
    rows = [int(tables[0, t // bs]) * bs + t % bs for t in range(n)]
    k = np.ascontiguousarray(k_cache[rows].reshape(n, 2, 8).transpose(1, 0, 2))[None]
    v = np.ascontiguousarray(v_cache[rows].reshape(n, 2, 8).transpose(1, 0, 2))[None]
    dense = run_op(g.AttentionOp, [q, k, v], {"causal": g.bool_attr(True)})
    np.testing.assert_allclose(paged, dense, rtol=1e-6, atol=1e-6)


def test_kv_cache_write_scatters_rows():
    rng = np.random.default_rng(3)
    cache = randn(rng, (16, 6), BF16)
    rows = randn(rng, (3, 6), BF16)
    slots = np.array([9, 0, 15], np.int32)
    got = run_op(g.KvCacheWriteOp, [cache, rows, slots])
    expected = cache.copy()
    for i, s in enumerate(slots):
        expected[s] = rows[i]
    assert got.dtype == BF16
    np.testing.assert_array_equal(got, expected)


def test_kv_cache_write_then_paged_decode():
    """One decode step as the frontend builds it: append the new token's K/V rows at their
    slots, then attend over the pool that includes them."""
    rng = np.random.default_rng(21)
    bs, nb, d = 4, 8, 8
    k_cache, v_cache = randn(rng, (nb * bs, d)), randn(rng, (nb * bs, d))
    tables = np.array([[5, 1], [2, 7]], np.int32)
    lens = np.array([6, 3], np.int32)  # the new token is the last of each
    slots = np.array([tables[b, (n - 1) // bs] * bs + (n - 1) % bs for b, n in enumerate(lens)], np.int32)
    k_new, v_new = randn(rng, (2, d)), randn(rng, (2, d))
    k1 = run_op(g.KvCacheWriteOp, [k_cache, k_new, slots])
    v1 = run_op(g.KvCacheWriteOp, [v_cache, v_new, slots])
    q = randn(rng, (2, 1, 1, d))
    got = run_op(g.PagedAttentionOp, [q, k1, v1, tables, lens], {"block_size": i64_attr(bs)})
    check(got, reference_paged_attention(q, k1, v1, tables, lens, bs), F32)
    assert not np.allclose(got, run_op(g.PagedAttentionOp, [q, k_cache, v_cache, tables, lens],
                                       {"block_size": i64_attr(bs)}))


@pytest.mark.parametrize(
    "slots,message",
    [([16], "slot 16 is out of range for a cache of 16 rows"), ([-1], "slot -1 is out of range")],
)
def test_kv_cache_write_bad_slot(slots, message):
    cache, rows = np.zeros((16, 4), np.float32), np.ones((1, 4), np.float32)
    with pytest.raises(InterpreterError, match=message):
        run_op(g.KvCacheWriteOp, [cache, rows, np.array(slots, np.int32)])


@pytest.mark.parametrize(
    "tables,lens,message",
    [
        ([[0, 1]], [9], r"context length 9 of sequence 0 is outside 0 \.\. 8"),
        ([[0, 1]], [-1], r"context length -1 of sequence 0 is outside"),
        ([[0, 4]], [5], r"sequence 0 uses block 4, outside the pool's 0 \.\. 3"),
    ],
)
def test_paged_attention_bad_metadata(tables, lens, message):
    q = np.ones((1, 1, 1, 4), np.float32)
    cache = np.ones((16, 4), np.float32)
    with pytest.raises(InterpreterError, match=message):
        run_op(g.PagedAttentionOp, [q, cache, cache, np.array(tables, np.int32), np.array(lens, np.int32)],
               {"block_size": i64_attr(4)})
