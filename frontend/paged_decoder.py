"""Paged-KV decoder functions (docs/paged-kv.md): a chunked prefill and a batched decode step
over KV-cache pools of fixed-size blocks, for the decoders of hf_import.py (Llama family, GPT-2)
and gguf_import.py.

    module = import_model(path, kv_cache="paged", chunk=32, batch=4, max_len=256, block_size=16)

Two functions in one module, sharing the weights (and the pools: same names, shapes, dtypes):

    @prefill_chunk(input_ids: i32[1, C], positions: i32[1, C], slots: i32[C],
                   block_tables: i32[1, MB], context_lens: i32[1], k_0, v_0, ..., k_{L-1}, v_{L-1})
        -> (logits f32[1, C, V], k_0, v_0, ...)
    @decode(input_ids: i32[B, 1], positions: i32[B, 1], slots: i32[B], block_tables: i32[B, MB],
            context_lens: i32[B], k_0, v_0, ...) -> (logits f32[B, 1, V], k_0, v_0, ...)

Each pool k_i / v_i is `[NB * BS, Hkv * D]` in the compute dtype: one row per token slot (all
KV heads of the token), a block = BS consecutive rows; NB = `num_blocks`, BS = `block_size`
(a power of two), MB = ceil(max_len / BS) blocks per sequence at most. Per layer the new
keys/values are written with `graph.kv_cache_write(pool, rows, slots)` and attention reads
them with `graph.paged_attention(q, k_pool', v_pool', block_tables, context_lens)`; the
function returns the written pools, so a compiled program updates them in place (the results
are tied to the pool arguments). The host computes `slots` (block_table[t // BS] * BS +
t % BS for the token at position t) and `context_lens` (tokens in the cache after this call,
the new ones included: the queries are the last C (prefill) or 1 (decode) of them).

RoPE (Llama) reads cos/sin rows of a table computed at import for positions [0, max_len)
(`graph.gather` at the runtime positions: the same float32 values as the dense functions'
angles); GPT-2 gathers its learned position embeddings at the positions.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from infer.dialects import graph as g
from infer.frontend.model import ModelImportError

DEFAULT_BLOCK_SIZE = 16
DEFAULT_CHUNK = 32
PAGED_FUNCTIONS = ("prefill_chunk", "decode")
PAGED_ATTR = "infer.paged_kv"
"""Module attribute of a paged import: {block_size, num_blocks, max_len, chunk, batch}; the
compile driver keeps it in the artifact's meta (`paged_kv`) for the device executor."""


class PagedContext:
    """What a paged function's layers share: batch b, queries per sequence s, the runtime
    positions [b, s], slots [b * s], block tables and context lengths."""

    paged = True

    def __init__(self, e, batch: int, seq: int, max_blocks: int, block_size: int):
        self.batch, self.seq, self.block_size = batch, seq, block_size
        self.positions = e.input("positions", (batch, seq), np.int32)
        self.slots = e.input("slots", (batch * seq,), np.int32)
        self.block_tables = e.input("block_tables", (batch, max_blocks), np.int32)
        self.context_lens = e.input("context_lens", (batch,), np.int32)


def paged_geometry(max_len: int, block_size: int, num_blocks: int | None, batch: int, chunk: int) -> tuple[int, int]:
    """(MB blocks per sequence, NB blocks in the pool), checked. The default pool holds `batch`
    full sequences plus the blocks a padded prefill chunk or an idle decode row writes to (the
    executor's scratch blocks, generation/device_executor.py)."""
    if block_size < 1 or block_size & (block_size - 1):
        raise ModelImportError(f"block_size must be a power of two, got {block_size}")
    if chunk < 1:
        raise ModelImportError(f"chunk must be >= 1, got {chunk}")
    # a padded last prefill chunk has queries up to the next multiple of the chunk: the tables cover them
    max_blocks = math.ceil(math.ceil(max_len / chunk) * chunk / block_size)
    scratch = math.ceil(max(chunk, batch) / block_size)
    if num_blocks is None:
        num_blocks = batch * max_blocks + scratch
    if num_blocks < 1 + scratch:
        raise ModelImportError(f"num_blocks {num_blocks} is too small: a pool needs at least {1 + scratch} blocks of "
                               f"{block_size} tokens (one for a sequence, {scratch} for padding rows)")
    return max_blocks, num_blocks


def build_paged(importer, batch: int, chunk: int, max_len: int, block_size: int, num_blocks: int | None) -> ModuleOp:
    """The @prefill_chunk and @decode functions of `importer` (a hf_import._DecoderImporter)."""
    from infer.dialects.npu_attrs import json_to_attr
    from infer.frontend.hf_import import _combine

    max_blocks, num_blocks = paged_geometry(max_len, block_size, num_blocks, batch, chunk)
    funcs = [(name, _paged_function(importer, b, s, max_len, max_blocks, num_blocks, block_size))
             for name, b, s in (("prefill_chunk", 1, chunk), ("decode", batch, 1))]
    module = _combine(funcs, importer.ckpt.store)
    module.attributes[PAGED_ATTR] = json_to_attr({"block_size": block_size, "num_blocks": num_blocks,
                                                  "max_len": max_len, "chunk": chunk, "batch": batch})
    return module


def _paged_function(imp, batch: int, seq: int, max_len: int, max_blocks: int, num_blocks: int,
                    block_size: int) -> ModuleOp:
    e = imp.emitter()
    ids = e.input("input_ids", (batch, seq), np.int32)
    ctx = PagedContext(e, batch, seq, max_blocks, block_size)
    ctx.max_len = max_len
    width = imp.n_kv_heads * imp.head_dim
    pools = [e.input(n, (num_blocks * block_size, width), imp.dtype) for n in imp.cache_names()]
    x = imp.embed(e, ids, ctx)
    written = []
    for i in range(imp.n_layers):
        x, k, v = imp.block(e, i, x, ctx, pools[2 * i], pools[2 * i + 1])
        written += [k, v]
    logits = imp.head(e, x)
    return e.finish([logits, *written], ["logits", *imp.cache_names()])


def attend_paged(e, q, k, v, ctx: PagedContext, k_pool, v_pool, scale: float | None):
    """q: [b, Hq, s, D]; k, v: [b, Hkv, s, D] (k rotated). Writes the new rows into the pools
    at ctx.slots and attends over each sequence's blocks: (out [b, Hq, s, D], k_pool', v_pool')."""
    from infer.dialects.dtypes import shape_of

    b, hkv, s, d = shape_of(k)

    def rows(x):  # [b, Hkv, s, D] -> [b * s, Hkv * D]: one row per token, its heads side by side
        return e.reshape(e.transpose(x, [0, 2, 1, 3]), (b * s, hkv * d))

    k_pool = e.op(g.KvCacheWriteOp, [k_pool, rows(k), ctx.slots])
    v_pool = e.op(g.KvCacheWriteOp, [v_pool, rows(v), ctx.slots])
    props = {"block_size": g.i64_attr(ctx.block_size)}
    if scale is not None:
        props["scale"] = g.f64_attr(scale)
    out = e.op(g.PagedAttentionOp, [q, k_pool, v_pool, ctx.block_tables, ctx.context_lens], **props)
    return out, k_pool, v_pool


def rope_table(inv_freq: np.ndarray, rows: int, interleaved: bool, scaling: float, dtype) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin [rows, R] for positions 0 .. rows-1, computed as the dense functions compute
    them (float32 position x inv_freq, laid out for the q/k rows, times the attention scaling)."""
    pos = np.arange(rows, dtype=np.int64).astype(dtype).reshape(rows, 1)
    ang = (pos * inv_freq.astype(dtype)).astype(dtype)
    ang = np.repeat(ang, 2, axis=-1) if interleaved else np.concatenate([ang, ang], axis=-1)
    cos, sin = np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)
    if scaling != 1.0:
        s = np.asarray(scaling, dtype)
        cos, sin = (cos * s).astype(dtype), (sin * s).astype(dtype)
    return cos, sin


__all__ = ["DEFAULT_BLOCK_SIZE", "DEFAULT_CHUNK", "PAGED_ATTR", "PAGED_FUNCTIONS", "PagedContext", "attend_paged", "build_paged",
           "paged_geometry", "rope_table"]
