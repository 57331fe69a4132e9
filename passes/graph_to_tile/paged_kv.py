"""Paged KV cache (docs/paged-kv.md): graph.kv_cache_write and graph.paged_attention.

The metadata (slots, block tables, context lengths) are i32 function arguments kept as raw
int32 in DRAM (integer_inputs.py), read by the front end's `ld` (tile.scatter_rows,
tile.gather_rows, tile.load_index); paged attention copies the block table and its block
counts to the scratchpad once per kernel and reads them with `lds` (a scratchpad latency
instead of a DRAM one per block).

* kv_cache_write: the cache is copied to the result's buffer, unless the write is in place (the
  driver ties a returned write of a cache argument to that argument: `tile.alias_of`), then the
  rows go through the scratchpad and `tile.scatter_rows` stores each at its slot (several
  slots: copied to the scratchpad first and read with `lds`).
* paged_attention, a flash-decoding kernel whose cost follows each sequence's actual length:
  a helper nest computes the blocks each sequence uses, ceil(n / BS), on the vector unit
  (exact in f32: ((n + BS - 1) / BS - (BS - 1) / (2 BS)) rounded half to even) into an i32
  DRAM buffer (copied, with the block table, to the scratchpad by each paged-attention kernel).
  Per sequence b (a static loop) the query rows of every head are loaded and
  scaled once; then a loop over the blocks j < ceil(n / BS) whose upper bound is
  `tile.load_index` of that buffer (a run-time trip count) gathers the K and V blocks (the pool
  viewed as [NB, BS * W]: one DMA per block, its address from the block table) and, for all KV
  heads at once:
    - scores S[r, s] = q_r . k_s on the vector unit (one `mul` and one `rsum` per query row
      and KV head: the pool is token-major, so q.K^T would need a transposed K tile, which the
      DMA cannot produce; the rsum column written with a unit stride is the score row);
    - the causal / tail mask from the run-time length: remaining = n - Sq + 1 + i - s - j BS
      (kept as an f32 row tile `base` that loses BS per block), keep = clamp(remaining, 0, 1),
      S += keep * 1e30 - 1e30;
    - the online softmax of attention.py (running max m, sum l, output O in the accumulator;
      P *= keep for chunks, so a query row without keys stays 0), O += P @ V on the matrix unit.
  Finally O / max(l, 1e-30) is stored (rows without keys: 0).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from xdsl.dialects.builtin import bf16, f32, i32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import element_name_of, shape_of
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import NEG_INF, LoweringContext, error
from infer.passes.graph_to_tile.copies import copy_dram
from infer.passes.graph_to_tile.matrix_unit import Bf16Tile, emit_tile_product, split_on_chip

MASK_BIAS = 1.0e30  # added (negated) to masked scores: finite, so no inf - inf


def metadata_buffer(ctx: LoweringContext, op: Operation, value: SSAValue, what: str) -> SSAValue:
    """The raw int32 DRAM buffer of an i32 metadata operand (a function argument)."""
    buffer = ctx.buffers.get(value)
    if buffer is None or element_name_of(buffer) != "i32":
        raise error(op, f"the {what} must be an i32 function argument (computed metadata is not "
                    "supported)")
    return buffer


def lower_kv_cache_write(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.KvCacheWriteOp)
    em = ctx.emitter
    S, W = shape_of(op.cache)
    N = shape_of(op.rows)[0]
    slots = metadata_buffer(ctx, op, op.slots, "slots")
    out = ctx.output_buffer(op.output)
    if op.output not in ctx.in_place:
        with ctx.stage(what="cache copy"):
            copy_dram(ctx, ctx.buffer(op.cache), out, (S, W))
    rows = em.view(ctx.buffer(op.rows), (N, W))
    TC = min(W, ctx.staging_tile_elements)
    TR = max(1, min(N, ctx.staging_tile_elements // TC))
    ctx.debug(f"[graph-to-tile] {ctx.kernel_name()}: kv_cache_write of {N} rows of {W} "
              f"({'in place' if op.output in ctx.in_place else 'into a copy'}): tile.scatter_rows "
              f"tiles {TR}x{TC}")
    staging = em.alloc((TR, TC), f32, "spad", 2)
    if N > 1:  # the slots in the scratchpad (one DMA): `lds` per row instead of a DRAM latency
        local_slots = em.alloc((N,), i32, "spad")
        em.dma(em.view(slots, (1, N)), [0, 0], em.view(local_slots, (1, N)), [0, 0], [1, N])
        slots = local_slots

    def tile(r0: Index, tr: int, c0: Index, tc: int) -> None:
        em.dma(rows, [r0, c0], staging, [0, 0], [tr, tc])
        em.scatter_rows(staging, [0, 0], slots, r0, out, c0, tr, tc)

    em.tiles(N, TR, lambda r0, tr: em.tiles(W, TC, lambda c0, tc: tile(r0, tr, c0, tc)))


def _single_bf16_tile(ctx: LoweringContext, rows: int, cols: int) -> Bf16Tile:
    """A matrix operand tile (bf16 hi, and lo for fp32 emulation), single-buffered: its uses sit
    in the run-time block loop, which is not double-buffered."""
    em = ctx.emitter
    lo = em.alloc((rows, cols), bf16, "spad") if ctx.bf16_copies == 2 else None
    return Bf16Tile(em.alloc((rows, cols), bf16, "spad"), lo)


class BlockSteps(NamedTuple):
    """i32 DRAM buffers [B] that drive each sequence's block loops (rest = max(ceil(n / BS) - 1,
    0) blocks after block 0)."""

    pairs: SSAValue  # rest // 2: steps of the two-buffer loop
    odd: SSAValue  # rest % 2: 1 when a last block follows the loop
    last: SSAValue  # the number of the sequence's last block, block_tables[b, rest]


def _block_steps(ctx: LoweringContext, name: str, lens: SSAValue, tables: SSAValue, batch: int, max_blocks: int,
                 block_size: int) -> BlockSteps:
    """The block loops' counts and the last block's number, computed on the vector unit in
    columns [B, 1] (exact in f32: lengths and block numbers stay far below 2^24): rest =
    round((n + BS - 1) / BS - (BS - 1) / (2 BS) - 1) clamped at 0 (the f32 -> i32 copy rounds
    half to even: the floor of ceil(n / BS) - 1), pairs = round(rest / 2 - 1/4), odd = rest -
    2 pairs, last = sum_j tables[b, j] * (j == rest) (a one-hot row)."""
    em = ctx.emitter
    B, MB = batch, max_blocks
    with ctx.stage(what="block steps per sequence"):
        out = [em.alloc((B,), i32, "dram") for _ in range(3)]
        col_i = em.alloc((B, 1), i32, "spad")
        rest = em.alloc((B, 1), f32, "spad")
        half = em.alloc((B, 1), f32, "spad")
        table_i = em.alloc((B, MB), i32, "spad")
        table_f = em.alloc((B, MB), f32, "spad")
        onehot = em.alloc((B, MB), f32, "spad")
        iota = ctx.weight(f"{name}.block_iota",
                          np.tile(np.arange(MB, dtype=np.float32), (B, 1)), f32)
        z = [0, 0]

        def store(src: SSAValue, buffer: SSAValue) -> None:  # f32 column -> i32 buffer
            em.vec("copy", col_i, z, src, z, B, 1)  # rounds half to even
            em.dma(col_i, z, em.view(buffer, (B, 1)), z, [B, 1])

        def rounded(col: SSAValue) -> None:  # col = round(col), through i32
            em.vec("copy", col_i, z, col, z, B, 1)
            em.vec("copy", col, z, col_i, z, B, 1)

        em.dma(em.view(lens, (B, 1)), z, col_i, z, [B, 1])
        em.dma(em.view(tables, (B, MB)), z, table_i, z, [B, MB])
        em.vec("copy", rest, z, col_i, z, B, 1)
        em.vec("add", rest, z, rest, z, B, 1, bmode="imm", imm=float(block_size - 1))
        em.vec("mul", rest, z, rest, z, B, 1, bmode="imm", imm=1.0 / block_size)
        em.vec("sub", rest, z, rest, z, B, 1, bmode="imm", imm=(block_size - 1) / (2.0 * block_size) + 1.0)
        em.vec("max", rest, z, rest, z, B, 1, bmode="imm", imm=0.0)  # n = 0: block 0 only
        rounded(rest)
        em.vec("mul", half, z, rest, z, B, 1, bmode="imm", imm=0.5)
        em.vec("sub", half, z, half, z, B, 1, bmode="imm", imm=0.25)
        rounded(half)
        store(half, out[0])
        em.vec("mul", half, z, half, z, B, 1, bmode="imm", imm=-2.0)
        em.vec("add", half, z, half, z, B, 1, rest, z, bmode="tile")
        store(half, out[1])
        # one-hot of column `rest` in each row: 1 - min(|j - rest|, 1)
        em.dma(iota, z, onehot, z, [B, MB])
        em.vec("sub", onehot, z, onehot, z, B, MB, rest, z, bmode="col")
        em.vec("abs", onehot, z, onehot, z, B, MB)
        em.vec("min", onehot, z, onehot, z, B, MB, bmode="imm", imm=1.0)
        em.vec("mul", onehot, z, onehot, z, B, MB, bmode="imm", imm=-1.0)
        em.vec("add", onehot, z, onehot, z, B, MB, bmode="imm", imm=1.0)
        em.vec("copy", table_f, z, table_i, z, B, MB)
        em.vec("mul", onehot, z, onehot, z, B, MB, table_f, z, bmode="tile")
        em.vec("rsum", half, z, onehot, z, B, MB)
        store(half, out[2])
    return BlockSteps(*out)


def kv_heads_per_pass(ctx: LoweringContext, Hkv: int, R: int, Dv: int) -> int:
    """The KV heads one pass over a sequence's blocks serves: all of them when their output rows
    (R per KV head, f32 in the accumulator) fit, else the largest divisor of Hkv that does (a
    prefill chunk of 32 tokens with 9 query heads needs 72 KiB, edge holds 64 KiB); each further
    pass gathers the sequence's K/V blocks again."""
    capacity = ctx.hw.memory.accumulator_bytes
    fitting = [h for h in range(Hkv, 0, -1) if Hkv % h == 0 and h * R * Dv * 4 <= capacity]
    return fitting[0] if fitting else 1  # 1 that does not fit: the stage check names the buffer


def lower_paged_attention(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.PagedAttentionOp)
    em = ctx.emitter
    B, Hq, Sq, D, Hkv, Dv, MB = op.geometry()
    BS = op.block_size_value
    S = shape_of(op.key_cache)[0]
    NB = S // BS
    Wk, Wv = Hkv * D, Hkv * Dv
    G = Hq // Hkv
    R = G * Sq  # query rows per KV head
    seq_rows = Hkv * R  # query rows of one sequence (= Hq * Sq), ordered (kv head, group, query)
    HP = kv_heads_per_pass(ctx, Hkv, R, Dv)
    passes = Hkv // HP
    rows = HP * R  # query rows of one pass: KV heads [p HP, (p + 1) HP)
    scale = op.scale.value.data if op.scale is not None else 1.0 / np.sqrt(D)
    tables = metadata_buffer(ctx, op, op.block_tables, "block tables")
    lens = metadata_buffer(ctx, op, op.context_lens, "context lengths")
    # every layer of a step reads the same lengths: the counts are computed by the first
    name = ctx.kernel_name()
    key = ("paged attention block steps", lens, tables, BS)
    if key not in ctx.derived:
        ctx.derived[key] = _block_steps(ctx, name, lens, tables, B, MB, BS)
    steps: BlockSteps = ctx.derived[key]
    ctx.debug(f"[graph-to-tile] {name}: paged attention B={B} heads={Hq}/{Hkv} Sq={Sq} D={D} "
              f"block={BS}: a run-time loop over each sequence's blocks"
              + (f", {passes} passes of {HP} KV heads" if passes > 1 else ""))
    with ctx.stage(op, "paged attention"):
        z = [0, 0]
        q2 = em.view(ctx.buffer(op.query), (B * seq_rows, D))
        out2 = em.view(ctx.output_buffer(op.output), (B * seq_rows, Dv))
        k_blocks = em.view(ctx.buffer(op.key_cache), (NB, BS * Wk))
        v_blocks = em.view(ctx.buffer(op.value_cache), (NB, BS * Wv))
        # the block table and the block counts in the scratchpad (one DMA each per kernel): the
        # front end reads every block number and trip count with `lds`, a scratchpad latency,
        # instead of stalling a DRAM latency on `ld` per block (docs/paged-kv.md)
        table_ids = em.alloc((B * MB,), i32, "spad")
        em.dma(em.view(tables, (B, MB)), z, em.view(table_ids, (B, MB)), z, [B, MB])
        local_steps = BlockSteps(*(em.alloc((B,), i32, "spad") for _ in range(3)))
        for dram_counts, counts in zip(steps, local_steps):
            em.dma(em.view(dram_counts, (1, B)), z, em.view(counts, (1, B)), z, [1, B])
        steps = local_steps
        lens2 = em.view(lens, (B, 1))
        # row r = (kv, g, i) holds query i: pos[r, s] = 1 - Sq + i - s, so n + pos - j*BS is the
        # number of keys of row r up to and including token j*BS + s (the same for every pass:
        # a pass's rows are whole KV heads, R a multiple of Sq)
        rr, ss = np.meshgrid(np.arange(rows), np.arange(BS), indexing="ij")
        pos = ctx.weight(f"{name}.positions", (1 - Sq + rr % Sq - ss).astype(np.float32), f32)
        q_tile = em.alloc((rows, D), f32, "spad")
        n_int = em.alloc((1, 1), i32, "spad")
        n_float = em.alloc((1, 1), f32, "spad")
        n_col = em.alloc((rows, 1), f32, "spad")
        base = em.alloc((rows, BS), f32, "spad")
        keep = em.alloc((rows, BS), f32, "spad")
        # two buffers per pool: the gather of one block overlaps the math of the other
        k_block = [em.alloc((1, BS * Wk), f32, "spad") for _ in range(2)]
        v_block = [em.alloc((1, BS * Wv), f32, "spad") for _ in range(2)]
        v_tile = _single_bf16_tile(ctx, BS, Wv)
        product = em.alloc((BS, D), f32, "spad")
        scores = em.alloc((rows, BS), f32, "spad")
        p_tile = _single_bf16_tile(ctx, rows, BS)
        m = em.alloc((rows, 1), f32, "spad")
        m_new = em.alloc((rows, 1), f32, "spad")
        l_sum = em.alloc((rows, 1), f32, "spad")
        tmp = em.alloc((rows, 1), f32, "spad")
        tmp_tile = em.alloc((rows, BS), f32, "spad")
        o = em.alloc((rows, Dv), f32, "acc")
        k_rows = [em.view(buf, (BS, Wk)) for buf in k_block]
        v_rows = [em.view(buf, (BS, Wv)) for buf in v_block]
        last_ids = steps.last
        score_column = em.view(scores, (rows * BS, 1))  # score row r = this column's [r*BS, +BS)

        def gather(ids: SSAValue, entry: Index, buf: int) -> None:
            # one index for both gathers, back to back: with equal row pitches tile-to-npu reads
            # the block number once (one front-end `ld` per block, docs/paged-kv.md)
            em.gather_rows(k_blocks, 0, ids, entry, k_block[buf], z, 1, BS * Wk)
            em.gather_rows(v_blocks, 0, ids, entry, v_block[buf], z, 1, BS * Wv)

        def block(p: Index, buf: int) -> None:
            k_rows_b, v_rows_b = k_rows[buf], v_rows[buf]

            def score_row(kv: Index, r: Index) -> None:  # kv: the pass's own KV head
                row = em.add(em.mul(kv, R), r)
                head = em.add(em.mul(p, HP), kv)
                em.vec("mul", product, z, k_rows_b, [0, em.mul(head, D)], BS, D, q_tile, [row, 0], bmode="row")
                em.vec("rsum", score_column, [em.mul(row, BS), 0], product, z, BS, D)

            em.range(HP, lambda kv: em.range(R, lambda r: score_row(kv, r)))
            # keep = clamp(remaining, 0, 1); scores += keep * 1e30 - 1e30
            em.vec("max", keep, z, base, z, rows, BS, bmode="imm", imm=0.0)
            em.vec("min", keep, z, keep, z, rows, BS, bmode="imm", imm=1.0)
            em.vec("mul", tmp_tile, z, keep, z, rows, BS, bmode="imm", imm=MASK_BIAS)
            em.vec("add", tmp_tile, z, tmp_tile, z, rows, BS, bmode="imm", imm=-MASK_BIAS)
            em.vec("add", scores, z, scores, z, rows, BS, tmp_tile, z, bmode="tile")
            em.vec("add", base, z, base, z, rows, BS, bmode="imm", imm=float(-BS))
            # online softmax
            em.vec("rmax", tmp, z, scores, z, rows, BS)
            em.vec("max", m_new, z, m, z, rows, 1, tmp, z, bmode="tile")
            em.vec("sub", tmp, z, m, z, rows, 1, m_new, z, bmode="tile")
            em.vec("exp", tmp, z, tmp, z, rows, 1)  # alpha = e^(m_old - m_new)
            em.vec("copy", m, z, m_new, z, rows, 1)
            em.vec("sub", scores, z, scores, z, rows, BS, m_new, z, bmode="col")
            em.vec("exp", scores, z, scores, z, rows, BS)
            # a query row without keys (n < Sq, or n = 0 whose block 0 is still read) stays 0
            em.vec("mul", scores, z, scores, z, rows, BS, keep, z, bmode="tile")
            em.vec("mul", l_sum, z, l_sum, z, rows, 1, tmp, z, bmode="tile")
            em.vec("mul", o, z, o, z, rows, Dv, tmp, z, bmode="col")
            em.vec("rsum", tmp, z, scores, z, rows, BS)
            em.vec("add", l_sum, z, l_sum, z, rows, 1, tmp, z, bmode="tile")
            split_on_chip(em, scores, p_tile, rows, BS)
            split_on_chip(em, v_rows_b, v_tile, BS, Wv)
            em.range(HP, lambda kv: emit_tile_product(
                ctx, p_tile, v_tile, o, R, BS, Dv, lhs_at=(em.mul(kv, R), 0),
                rhs_at=(0, em.mul(em.add(em.mul(p, HP), kv), Dv)), acc_at=(em.mul(kv, R), 0)))

        def sequence_pass(b: Index, p: Index) -> None:
            first_row = em.add(em.mul(b, seq_rows), em.mul(p, rows))
            em.dma(q2, [first_row, 0], q_tile, z, [rows, D])
            em.vec("mul", q_tile, z, q_tile, z, rows, D, bmode="imm", imm=scale)
            em.dma(lens2, [b, 0], n_int, z, [1, 1])
            em.vec("copy", n_float, z, n_int, z, 1, 1)
            em.fill(n_col, z, rows, 1, 0.0)
            em.vec("add", n_col, z, n_col, z, rows, 1, n_float, z, bmode="row")
            em.dma(pos, z, base, z, [rows, BS])
            em.vec("add", base, z, base, z, rows, BS, n_col, z, bmode="col")
            em.fill(m, z, rows, 1, NEG_INF)
            em.fill(l_sum, z, rows, 1, 0.0)
            em.fill(o, z, rows, Dv, 0.0)
            # blocks in order through two buffers: block 0 is gathered first; each step of the
            # loop gathers block 2i+1 into buffer 1, does block 2i's math, gathers block 2i+2
            # into buffer 0 and does block 2i+1's math, so each gather (its block-table `ld`
            # stalls the front end for a DRAM latency, then the DMA's latency) overlaps the
            # other buffer's math; then block 2p's math, and block 2p+1 when rest is odd
            row0 = em.mul(b, MB)
            gather(table_ids, row0, 0)
            pairs = em.load_index(steps.pairs, [b], max(MB - 1, 0) // 2)

            def pair(i: SSAValue) -> None:
                first = em.add(row0, em.mul(i, 2))
                gather(table_ids, em.add(first, 1), 1)
                block(p, 0)
                gather(table_ids, em.add(first, 2), 0)
                block(p, 1)

            em.loop(0, pairs, 1, pair)
            block(p, 0)
            odd = em.load_index(steps.odd, [b], 1)

            def last(_: SSAValue) -> None:
                gather(last_ids, b, 1)
                block(p, 1)

            em.loop(0, odd, 1, last)
            em.vec("max", l_sum, z, l_sum, z, rows, 1, bmode="imm", imm=1e-30)
            em.vec("recip", tmp, z, l_sum, z, rows, 1)
            em.vec("mul", o, z, o, z, rows, Dv, tmp, z, bmode="col")
            em.dma(o, z, out2, [first_row, 0], [rows, Dv])

        em.range(B, lambda b: em.range(passes, lambda p: sequence_pass(b, p)))
