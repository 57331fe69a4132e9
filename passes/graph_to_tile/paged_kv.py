"""Paged KV cache (docs/paged-kv.md): graph.kv_cache_write and graph.paged_attention.

The metadata (slots, block tables, context lengths) are i32 function arguments kept as raw
int32 in DRAM (integer_inputs.py), read by the front end's `ld` (tile.scatter_rows,
tile.gather_rows, tile.load_index); paged attention reads the block table and its block
counts from the scratchpad with `lds` (a scratchpad latency instead of a DRAM one per block):
copied there once per kernel, or (G > 1, a decode step on server) left there by the helper
nest that computed them, for every layer's attention (`OnChipSteps`).

* kv_cache_write: the cache is copied to the result's buffer, unless the write is in place (the
  driver ties a returned write of a cache argument to that argument: `tile.alias_of`), then the
  rows go through the scratchpad and `tile.scatter_rows` stores each at its slot (several
  slots: copied to the scratchpad first and read with `lds`).
* paged_attention, a flash-decoding kernel whose cost follows each sequence's actual length:
  a helper nest computes, on the vector unit, each sequence's loop counts over its
  super-blocks (G consecutive entries of its block table, `superblock_blocks`: 8 for a decode
  step on server, whose little math per block would leave one DMA latency per block exposed; 1
  on edge and for prefill chunks), the block numbers of its last super-block and (G > 1) the
  block table padded to a multiple of G and clamped to the sequence's last block, so a
  super-block's padding gathers a real block that the length mask drops and entries after the
  last block are never read (exact in f32; into i32 DRAM buffers copied, with the table, to the
  scratchpad by each paged-attention kernel). Per sequence b (a static loop) the query rows of
  every head are scaled once (several sequences: their queries, lengths and the position tile
  come in one DMA each per kernel, every sequence's first super-block is gathered at the
  kernel's start and copied on chip when the buffers take <= 1/8 of the scratchpad, and the
  outputs are stored once after the last sequence); then a loop over the super-blocks whose
  upper bound is `tile.load_index` of those buffers (a run-time trip count) gathers the K and V
  blocks (the pool viewed as [NB, BS * W]: one DMA per block, its address from the table, a
  super-block's G DMAs in flight together) into two buffers (the gathers of one super-block
  overlap the math of the other) and, for all KV heads at once over G * BS keys:
    - scores S[r, s] = q_r . k_s on the vector unit (one `rdot` per query row and KV head:
      each key row's dot product with the broadcast query row, the bits of a `mul` and an
      `rsum` in one pass; the pool is token-major, so q.K^T on the matrix unit would need K's
      bf16 split first; the column written with a unit stride is the score row);
    - the causal / tail mask from the run-time length: remaining = n - Sq + 1 + i - s - j G BS
      (kept as an f32 row tile `base` that loses G BS per step), keep = clamp(remaining, 0, 1),
      S += keep * 1e30 - 1e30;
    - the online softmax of attention.py (running max m, sum l, output O in the accumulator;
      P *= keep for chunks, so a query row without keys stays 0), O += P @ V on the matrix unit;
      bf16: over V's hi and lo parts, with l summed from bf16(P) (docs/paged-kv.md, "bf16
      precision": neither the values' rounding nor P's stays in the output).
  Finally O / max(l, 1e-30) is stored (rows without keys: 0).
* A decode step on server (latency-bound): the K / V appends of the step's token, fused into
  the projections' kernel (product_consumers.py), are stored by the attention after its
  gathers (`append_after_gathers`): its pool part covers the tokens below n - 1 and the token at
  n - 1 comes from the rows on chip, starting the online softmax (m = its score, l = 1, O = its
  value row). Nothing of the step's layer is then in the gathered blocks, so the projections'
  kernel gathers the first super-block once the key and value rows are made
  (`_prefetch_first_blocks`, layers after the first: the block table is on chip,
  `OnChipSteps`). This relies on the decode contract every caller keeps: slots[b] is the slot
  of token n_b - 1 in sequence b's block table (docs/paged-kv.md, "The appends after the
  gathers").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from xdsl.dialects.builtin import bf16, f32, i32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.dialects.dtypes import element_name_of, shape_of
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import NEG_INF, LoweringContext, error, latency_bound
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


class Appended(NamedTuple):
    """A decode step's K or V rows whose append to the pool waits for the paged attention that
    reads the pool (`append_after_gathers`): the rows on chip, where they go."""

    rows: SSAValue  # local [B, W]: sequence b's new row, the token at n_b - 1
    slots: SSAValue  # local i32 [B]
    pool: SSAValue  # the pool's DRAM buffer, viewed [S, W]


def append_after_gathers(ctx: LoweringContext, write: g.KvCacheWriteOp) -> bool:
    """Whether a decode step's in-place append `write` (rows on chip, fused into its product's
    kernel: product_consumers.py) may leave its store to the paged attention that reads the
    pool: that attention then gathers the pool before the store (its gathers no longer wait for
    the append's store and a DRAM latency) and takes the new rows from chip. On latency-bound
    targets (server), when the pool's only reader is one paged attention with one query row per
    sequence and one row per sequence is appended. Its key is the token at position n - 1: the
    slots name where that token lives in the block table, as every decode caller builds them
    (docs/paged-kv.md, "The appends after the gathers")."""
    if not latency_bound(ctx.hw):
        return False
    readers = [u.operation for u in write.output.uses]
    attention = [r for r in readers if isinstance(r, g.PagedAttentionOp)]
    if len(attention) != 1 or any(not isinstance(r, g.PagedAttentionOp) and r.name != "func.return" for r in readers):
        return False
    B, _Hq, Sq, _D, _Hkv, _Dv, _MB = attention[0].geometry()
    return Sq == 1 and shape_of(write.rows)[0] == B and write.output in (attention[0].key_cache, attention[0].value_cache)


def defer_append(ctx: LoweringContext, write: g.KvCacheWriteOp, appended: Appended) -> None:
    """Record `write`'s rows (a local tile no later op writes) for the attention to store; once
    both of its attention's pools have theirs, gather the attention's first super-block now
    (`_prefetch_first_blocks`)."""
    ctx.derived[("appended rows", write.output)] = appended
    attention = next(u.operation for u in write.output.uses if isinstance(u.operation, g.PagedAttentionOp))
    if all(("appended rows", v) in ctx.derived for v in (attention.key_cache, attention.value_cache)):
        _prefetch_first_blocks(ctx, attention)


def _prefetch_first_blocks(ctx: LoweringContext, attention: g.PagedAttentionOp) -> None:
    """Gather a decode attention's first super-block of K and V blocks of every sequence in the
    kernel that makes its query, key and value: with the appends after the gathers, nothing of
    the step's layer is in those blocks, so their DRAM latency overlaps the products instead of
    starting the attention. Only when the block table is already on chip (`OnChipSteps`, made
    by the step's first attention: every layer but the first); one sequence into the
    attention's buffer 0 (one pass over the KV heads), several into its `first_k` / `first_v`
    (when it would gather them at its start: `_first_blocks_on_chip`)."""
    B, Hq, Sq, D, Hkv, Dv, MB = attention.geometry()
    BS = attention.block_size_value
    R = Hq // Hkv * Sq
    HP = kv_heads_per_pass(ctx, Hkv, R, Dv)
    if Sq != 1 or (B == 1 and HP != Hkv):
        return
    G = superblock_blocks(ctx, BS, MB, HP * R, D)
    Wk, Wv = Hkv * D, Hkv * Dv
    if B > 1 and not _first_blocks_on_chip(ctx, B, G * BS, Wk, Wv):
        return
    lens = metadata_buffer(ctx, attention, attention.context_lens, "context lengths")
    tables = metadata_buffer(ctx, attention, attention.block_tables, "block tables")
    steps = ctx.derived.get(("paged attention block steps", lens, tables, BS, G))
    if steps is None or steps.on_chip is None:
        return
    em = ctx.emitter
    NB = shape_of(attention.key_cache)[0] // BS
    pairs = [(em.view(ctx.buffer(pool), (NB, BS * W)), em.alloc((B * G, BS * W), f32, "spad"))
             for pool, W in ((attention.key_cache, Wk), (attention.value_cache, Wv))]
    _gather_first_blocks(ctx, pairs, steps.on_chip.table, B, G, steps.width)
    ctx.derived[("first blocks", attention)] = (pairs[0][1], pairs[1][1], G)


def _gather_first_blocks(ctx: LoweringContext, pools: Sequence[tuple[SSAValue, SSAValue]], table: SSAValue,
                         B: int, G: int, MBP: int) -> None:
    """Each sequence b's first super-block (table entries [b MBP, b MBP + G)) of each pool
    [NB, BS W] into rows [b G, (b + 1) G) of its buffer."""
    em = ctx.emitter

    def sequence(b: Index) -> None:
        for blocks, buf in pools:
            width = shape_of(blocks)[1]
            em.gather_rows(blocks, 0, table, em.mul(b, MBP), buf, [em.mul(b, G), 0], G, width)

    em.range(B, sequence)


def _first_blocks_on_chip(ctx: LoweringContext, B: int, KB: int, Wk: int, Wv: int) -> bool:
    """Several sequences: whether every sequence's first super-block is gathered at once (at the
    attention's start, or by the kernel before) and copied on chip per sequence: when those
    buffers take at most an eighth of the scratchpad."""
    return B > 1 and B * KB * (Wk + Wv) * 4 <= ctx.hw.memory.scratchpad_bytes // 8


def _store_appended(ctx: LoweringContext, appended: Appended) -> None:
    B, W = shape_of(appended.rows)
    ctx.emitter.scatter_rows(appended.rows, [0, 0], appended.slots, 0, appended.pool, 0, B, W)


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
    """What drives each sequence's loop over its super-blocks (G consecutive blocks of its
    block table gathered and computed together; rest = max(ceil(n / (G BS)) - 1, 0)
    super-blocks after super-block 0)."""

    pairs: SSAValue  # i32 DRAM [B]: rest // 2, steps of the two-buffer loop
    odd: SSAValue  # i32 DRAM [B]: rest % 2, 1 when a last super-block follows the loop
    last: SSAValue  # i32 DRAM [B, G]: the block numbers of the sequence's last super-block
    table: SSAValue  # i32 DRAM [B, MBP]: the block table the loop reads (G > 1: padded, clamped)
    width: int  # MBP: entries per sequence in `table` (MB rounded up to a multiple of G)
    on_chip: OnChipSteps | None = None  # G > 1: the same values, left in the scratchpad


class OnChipSteps(NamedTuple):
    """BlockSteps' values as the helper nest computed them in the scratchpad, kept there for
    every paged-attention kernel of the step (G > 1: a decode step on server). Each kernel
    copied them (and the lengths) from DRAM before its first gathers: a DMA latency on every
    layer's attention chain (docs/paged-kv.md, "The block table on chip")."""

    table: SSAValue  # i32 [B * MBP]
    pairs: SSAValue  # i32 [B]
    odd: SSAValue  # i32 [B]
    last: SSAValue  # i32 [B * G]
    lens: SSAValue  # f32 [B, 1]: the context lengths


def superblock_blocks(ctx: LoweringContext, block_size: int, max_blocks: int, rows: int = 1, head_dim: int = 1) -> int:
    """G, the blocks a paged-attention step gathers and computes at once. Each step pays one
    DMA latency (its G gathers are in flight together; the other buffer's math is all that
    overlaps it) and one chain of dependent vector instructions and matmuls, so a decode step
    (a few query rows, little math per block) takes G blocks at a time until that math covers
    the latency, as many as the matrix unit's P @ V takes in one pass (G BS <= matrix.rows), a
    power of two (1/G exact in f32), at most a quarter of the table's width (the cost follows
    the context in steps of at most a quarter of the capacity; a step's padding after the last
    block gathers that block again). A prefill chunk's rows (Sq per query head) already have a
    latency's worth of math per block: G = 1 (more would compute masked keys at the start of a
    sequence)."""
    hw = ctx.hw
    lanes = hw.vector.lanes
    per_block = rows * -(-block_size * head_dim // lanes) * hw.vector.cost["rdot"]
    g = 1
    while (2 * g * block_size <= hw.matrix.rows and 2 * g <= max_blocks // 4
           and g * per_block < hw.dram.latency_cycles):
        g *= 2
    return g


def values_in_two_parts(ctx: LoweringContext, keys: int, width: int) -> bool:
    """bf16: whether P @ V takes V as hi = bf16(V) and lo = bf16(V - hi), two passes of P (the
    values' rounding, most of the attention's bf16 error, gone: docs/paged-kv.md, "bf16
    precision") when the split's vector work for a step of `keys` keys (a sub and a copy of
    keys x width) takes at most a quarter of a DRAM latency, i.e. hides behind the step's
    gathers (server: 96 cycles for a decode step's 128 keys x 192, 12 for a chunk's block of
    16; edge's 16 lanes take 384 per block of 16 keys against a 100-cycle latency: +10 % of
    SmolLM2's decode step at context 1024 there, so edge keeps bf16(V))."""
    hw = ctx.hw
    split = -(-keys * width // hw.vector.lanes) * hw.vector.cost["sub"]  # (Emitter.round_parts)
    return ctx.bf16_copies == 1 and 4 * split <= hw.dram.latency_cycles


def _block_steps(ctx: LoweringContext, name: str, lens: SSAValue, tables: SSAValue, batch: int, max_blocks: int,
                 block_size: int, group: int) -> BlockSteps:
    """The super-block loops' counts, the last super-block's block numbers and the table the
    loop reads, computed on the vector unit (exact in f32: lengths and block numbers stay far
    below 2^24): blocks = ceil(n / BS) >= 1 (block 0 is read when n = 0), rest_blocks =
    round((n + BS - 1) / BS - (BS - 1) / (2 BS) - 1) clamped at 0 (the f32 -> i32 copy rounds
    half to even: the floor of ceil(n / BS) - 1), rest = floor(rest_blocks / G) = round(
    rest_blocks / G - (G - 1) / (2 G)) (no ties), pairs = round(rest / 2 - 1/4), odd = rest - 2
    pairs. G = 1: the table is the argument's and last = tables[b, rest] (a one-hot row). G > 1:
    the table is padded to MBP = ceil(MB / G) G entries and every entry after the sequence's last
    block is that block (table[b, min(j, rest_blocks)]), so a super-block's padding gathers a
    real block, which the length mask then drops; last[b, g] = table[b, rest G + g]."""
    em = ctx.emitter
    B, MB, G = batch, max_blocks, group
    MBP = -(-MB // G) * G
    with ctx.stage(what="block steps per sequence"):
        out = [em.alloc((B,), i32, "dram") for _ in range(2)]
        last_out = em.alloc((B, G), i32, "dram")
        col_i = em.alloc((B, 1), i32, "spad")
        rest = em.alloc((B, 1), f32, "spad")
        half = em.alloc((B, 1), f32, "spad")
        table_i = em.alloc((B, MB), i32, "spad")
        table_f = em.alloc((B, MBP), f32, "spad")
        onehot = em.alloc((B, MBP), f32, "spad")
        iota = em.alloc((B, MBP), f32, "spad")  # iota[b, j] = j
        z = [0, 0]
        em.dma(ctx.weight(f"{name}.block_iota", np.tile(np.arange(MBP, dtype=np.float32), (B, 1)), f32),
               z, iota, z, [B, MBP])

        kept: list[SSAValue] = []  # G > 1: the stored counts, also left in the scratchpad

        def store(src: SSAValue, buffer: SSAValue) -> None:  # f32 column -> i32 buffer
            em.vec("copy", col_i, z, src, z, B, 1)  # rounds half to even
            em.dma(col_i, z, em.view(buffer, (B, 1)), z, [B, 1])
            if G > 1:
                counts = em.alloc((B,), i32, "spad")
                em.vec("copy", em.view(counts, (B, 1)), z, src, z, B, 1)
                kept.append(counts)

        def rounded(col: SSAValue) -> None:  # col = round(col), through i32
            em.vec("copy", col_i, z, col, z, B, 1)
            em.vec("copy", col, z, col_i, z, B, 1)

        def pick(dst: SSAValue, dst_at: list, column: SSAValue) -> None:
            """dst[b] = table_f[b, column[b]]: the one-hot row of column `column` (1 -
            min(|j - column|, 1)) times the table, summed."""
            em.vec("sub", onehot, z, iota, z, B, MBP, column, z, bmode="col")
            em.vec("abs", onehot, z, onehot, z, B, MBP)
            em.vec("min", onehot, z, onehot, z, B, MBP, bmode="imm", imm=1.0)
            em.vec("mul", onehot, z, onehot, z, B, MBP, bmode="imm", imm=-1.0)
            em.vec("add", onehot, z, onehot, z, B, MBP, bmode="imm", imm=1.0)
            em.vec("mul", onehot, z, onehot, z, B, MBP, table_f, z, bmode="tile")
            em.vec("rsum", dst, dst_at, onehot, z, B, MBP)

        em.dma(em.view(lens, (B, 1)), z, col_i, z, [B, 1])
        em.dma(em.view(tables, (B, MB)), z, table_i, z, [B, MB])
        em.vec("copy", rest, z, col_i, z, B, 1)
        if G > 1:  # the lengths as f32, kept for the attention kernels
            lens_f = em.alloc((B, 1), f32, "spad")
            em.vec("copy", lens_f, z, rest, z, B, 1)
        em.vec("add", rest, z, rest, z, B, 1, bmode="imm", imm=float(block_size - 1))
        em.vec("mul", rest, z, rest, z, B, 1, bmode="imm", imm=1.0 / block_size)
        em.vec("sub", rest, z, rest, z, B, 1, bmode="imm", imm=(block_size - 1) / (2.0 * block_size) + 1.0)
        em.vec("max", rest, z, rest, z, B, 1, bmode="imm", imm=0.0)  # n = 0: block 0 only
        rounded(rest)
        if MBP > MB:
            em.fill(table_f, [0, MB], B, MBP - MB, 0.0)
        em.vec("copy", table_f, z, table_i, z, B, MB)
        if G > 1:
            # table_f[b, j] = table[b, min(j, rest_blocks)]: (table - last) * (j <= rest) + last
            last_block = em.alloc((B, 1), f32, "spad")
            valid = em.alloc((B, MBP), f32, "spad")
            pick(last_block, z, rest)
            em.vec("le", valid, z, iota, z, B, MBP, rest, z, bmode="col")
            em.vec("sub", table_f, z, table_f, z, B, MBP, last_block, z, bmode="col")
            em.vec("mul", table_f, z, table_f, z, B, MBP, valid, z, bmode="tile")
            em.vec("add", table_f, z, table_f, z, B, MBP, last_block, z, bmode="col")
            table_out = em.alloc((B, MBP), i32, "dram")
            table_int = em.alloc((B, MBP), i32, "spad")
            em.vec("copy", table_int, z, table_f, z, B, MBP)
            em.dma(table_int, z, table_out, z, [B, MBP])
            # rest = floor(rest_blocks / G)
            em.vec("mul", rest, z, rest, z, B, 1, bmode="imm", imm=1.0 / G)
            em.vec("sub", rest, z, rest, z, B, 1, bmode="imm", imm=(G - 1) / (2.0 * G))
            rounded(rest)
        else:
            table_out = tables
        em.vec("mul", half, z, rest, z, B, 1, bmode="imm", imm=0.5)
        em.vec("sub", half, z, half, z, B, 1, bmode="imm", imm=0.25)
        rounded(half)
        store(half, out[0])
        em.vec("mul", half, z, half, z, B, 1, bmode="imm", imm=-2.0)
        em.vec("add", half, z, half, z, B, 1, rest, z, bmode="tile")
        store(half, out[1])
        # the last super-block's G block numbers: table_f[b, rest G + g]
        last_f = em.alloc((B, G), f32, "spad")
        first = rest
        if G > 1:
            first = em.alloc((B, 1), f32, "spad")
            em.vec("mul", first, z, rest, z, B, 1, bmode="imm", imm=float(G))
        for g in range(G):
            pick(last_f, [0, g], first)
            if g + 1 < G:
                em.vec("add", first, z, first, z, B, 1, bmode="imm", imm=1.0)
        last_i = em.alloc((B, G), i32, "spad")
        em.vec("copy", last_i, z, last_f, z, B, G)
        em.dma(last_i, z, last_out, z, [B, G])
    on_chip = None
    if G > 1:
        on_chip = OnChipSteps(em.view(table_int, (B * MBP,)), kept[0], kept[1], em.view(last_i, (B * G,)), lens_f)
    return BlockSteps(out[0], out[1], last_out, table_out, MBP, on_chip)


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
    group = Hq // Hkv
    R = group * Sq  # query rows per KV head
    seq_rows = Hkv * R  # query rows of one sequence (= Hq * Sq), ordered (kv head, group, query)
    HP = kv_heads_per_pass(ctx, Hkv, R, Dv)
    passes = Hkv // HP
    rows = HP * R  # query rows of one pass: KV heads [p HP, (p + 1) HP)
    scale = op.scale.value.data if op.scale is not None else 1.0 / np.sqrt(D)
    tables = metadata_buffer(ctx, op, op.block_tables, "block tables")
    lens = metadata_buffer(ctx, op, op.context_lens, "context lengths")
    # every layer of a step reads the same lengths: the counts are computed by the first
    name = ctx.kernel_name()
    G = superblock_blocks(ctx, BS, MB, rows, D)
    KB = G * BS  # keys per step
    key = ("paged attention block steps", lens, tables, BS, G)
    if key not in ctx.derived:
        ctx.derived[key] = _block_steps(ctx, name, lens, tables, B, MB, BS, G)
    steps: BlockSteps = ctx.derived[key]
    MBP = steps.width
    ctx.debug(f"[graph-to-tile] {name}: paged attention B={B} heads={Hq}/{Hkv} Sq={Sq} D={D} "
              f"block={BS}: a run-time loop over each sequence's blocks, {G} per step"
              + (f", {passes} passes of {HP} KV heads" if passes > 1 else ""))
    with ctx.stage(op, "paged attention"):
        z = [0, 0]
        # a decode step's K and V appends left to this kernel (`append_after_gathers`): the
        # pool is gathered before they are stored, the token at n - 1 comes from their rows
        appended = [ctx.derived.pop(("appended rows", v), None) for v in (op.key_cache, op.value_cache)]
        new_rows: tuple[Appended, Appended] | None = None
        if appended[0] is not None and appended[1] is not None:
            new_rows = (appended[0], appended[1])
        else:  # (one of them only: stored before the gathers read the pool)
            for a in appended:
                if a is not None:
                    _store_appended(ctx, a)
        q2 = em.view(ctx.buffer(op.query), (B * seq_rows, D))
        q_kept = ctx.on_chip_as(ctx.buffer(op.query), (B * seq_rows, D))
        if q_kept is None and ctx.derived.get(("never stored", t.root_buffer(ctx.buffer(op.query)))):
            raise error(op, "internal: the query was left on chip only, and is not there")
        out_buffer = ctx.output_buffer(op.output)
        out2 = em.view(out_buffer, (B * seq_rows, Dv))
        k_blocks = em.view(ctx.buffer(op.key_cache), (NB, BS * Wk))
        v_blocks = em.view(ctx.buffer(op.value_cache), (NB, BS * Wv))
        # the block table and the block counts in the scratchpad (one DMA each per kernel): the
        # front end reads every block number and trip count with `lds`, a scratchpad latency,
        # instead of stalling a DRAM latency on `ld` per block (docs/paged-kv.md)
        # (G > 1: the helper nest left them there, `OnChipSteps`)
        kept = steps.on_chip
        if kept is not None:
            table_ids, pairs_ids, odd_ids, last_ids = kept.table, kept.pairs, kept.odd, kept.last
        else:
            table_ids = em.alloc((B * MBP,), i32, "spad")
            em.dma(em.view(steps.table, (B, MBP)), z, em.view(table_ids, (B, MBP)), z, [B, MBP])
            pairs_ids, odd_ids, last_ids = (em.alloc((B * w,), i32, "spad") for w in (1, 1, G))
            for dram_counts, counts, w in ((steps.pairs, pairs_ids, 1), (steps.odd, odd_ids, 1), (steps.last, last_ids, G)):
                em.dma(em.view(dram_counts, (1, B * w)), z, em.view(counts, (1, B * w)), z, [1, B * w])
        lens2 = em.view(lens, (B, 1))
        # row r = (kv, g, i) holds query i: pos[r, s] = 1 - Sq + i - s, so n + pos - j*BS is the
        # number of keys of row r up to and including token j*BS + s (the same for every pass:
        # a pass's rows are whole KV heads, R a multiple of Sq)
        rr, ss = np.meshgrid(np.arange(rows), np.arange(KB), indexing="ij")
        pos = ctx.weight(f"{name}.positions", (1 - Sq + rr % Sq - ss).astype(np.float32), f32)
        q_tile = em.alloc((rows, D), f32, "spad")
        n_int = em.alloc((1, 1), i32, "spad") if kept is None and B == 1 else None
        n_float = em.alloc((1, 1), f32, "spad")
        n_col = em.alloc((rows, 1), f32, "spad")
        base = em.alloc((rows, KB), f32, "spad")
        keep = em.alloc((rows, KB), f32, "spad")
        # two buffers per pool: the gather of one super-block overlaps the math of the other
        k_block = [em.alloc((G, BS * Wk), f32, "spad") for _ in range(2)]
        v_block = [em.alloc((G, BS * Wv), f32, "spad") for _ in range(2)]
        # super-block 0 gathered by the kernel before (`_prefetch_first_blocks`): one sequence
        # in one pass reads it as buffer 0, several as `first_k` / `first_v` (else, e.g. when
        # that kernel's accumulator sized the passes otherwise, it is gathered again here)
        many = B > 1
        prefetch_first = _first_blocks_on_chip(ctx, B, KB, Wk, Wv)
        prefetched = ctx.derived.pop(("first blocks", op), None)
        if prefetched is None or prefetched[2] != G or not (B * passes == 1 or prefetch_first):
            prefetched = None
        elif not many:
            k_block[0], v_block[0] = em.view(prefetched[0], (G, BS * Wk)), em.view(prefetched[1], (G, BS * Wv))
        # V as hi + lo: fp32 emulation's three passes, or bf16's P @ V_hi + P @ V_lo (the values'
        # rounding gone) where the split is cheap (`values_in_two_parts`)
        v_lo = em.alloc((KB, Wv), bf16, "spad") if ctx.bf16_copies == 2 or values_in_two_parts(ctx, KB, Wv) else None
        v_tile = Bf16Tile(em.alloc((KB, Wv), bf16, "spad"), v_lo)  # (lo before hi: fp32's program as before)
        scores = em.alloc((rows, KB), f32, "spad")
        p_tile = _single_bf16_tile(ctx, rows, KB)
        # several sequences: their query rows, lengths and the position tile come in one DMA
        # each per kernel, and (when the buffers take at most an eighth of the scratchpad) every
        # sequence's first super-block is gathered at the start, so a sequence's math starts
        # from a vector copy instead of waiting for its own gathers' DRAM latency
        if many:  # (the projection's rotated rows when it left them on chip: read in place)
            q_all = q_kept if q_kept is not None else em.alloc((B * seq_rows, D), f32, "spad")
            out_all = em.alloc((B * seq_rows, Dv), f32, "spad")  # stored once, after the last sequence
            lens_all = kept.lens if kept is not None else em.alloc((B, 1), i32, "spad")
        # the position tile: per kernel (a DMA before the base), or (G > 1) loaded by the
        # step's first attention and read by every layer's (its values are the same)
        pos_key = ("paged attention positions", lens, rows, KB, Sq)  # (lens: this function's)
        pos_tile = ctx.derived.get(pos_key) if kept is not None else None
        load_pos = pos_tile is None and (many or kept is not None)
        if load_pos:
            pos_tile = em.alloc((rows, KB), f32, "spad")
            if kept is not None:
                ctx.derived[pos_key] = pos_tile
        if prefetched is not None and many:  # gathered by the kernel before
            first_k, first_v = prefetched[0], prefetched[1]
        elif prefetch_first:
            first_k = em.alloc((B * G, BS * Wk), f32, "spad")
            first_v = em.alloc((B * G, BS * Wv), f32, "spad")
        if new_rows is not None:
            keep_new = em.alloc((rows, 1), f32, "spad")  # 1 when the sequence has its token n - 1
        m = em.alloc((rows, 1), f32, "spad")
        m_new = em.alloc((rows, 1), f32, "spad")
        l_sum = em.alloc((rows, 1), f32, "spad")
        tmp = em.alloc((rows, 1), f32, "spad")
        tmp_tile = em.alloc((rows, KB), f32, "spad")
        o = em.alloc((rows, Dv), f32, "acc")
        k_rows = [em.view(buf, (KB, Wk)) for buf in k_block]
        v_rows = [em.view(buf, (KB, Wv)) for buf in v_block]
        score_column = em.view(scores, (rows * KB, 1))  # score row r = this column's [r*KB, +KB)

        def gather(ids: SSAValue, entry: Index, buf: int) -> None:
            # the G blocks of a super-block (entries [entry, entry + G) of `ids`), their DMAs in
            # flight together; with G = 1 one index serves both gathers, back to back: with
            # equal row pitches tile-to-npu reads the block number once
            em.gather_rows(k_blocks, 0, ids, entry, k_block[buf], z, G, BS * Wk)
            em.gather_rows(v_blocks, 0, ids, entry, v_block[buf], z, G, BS * Wv)

        def block(p: Index, buf: int) -> None:
            k_rows_b, v_rows_b = k_rows[buf], v_rows[buf]

            def score_row(kv: Index, r: Index) -> None:  # kv: the pass's own KV head
                row = em.add(em.mul(kv, R), r)
                head = em.add(em.mul(p, HP), kv)
                em.vec("rdot", score_column, [em.mul(row, KB), 0], k_rows_b, [0, em.mul(head, D)], KB, D, q_tile,
                       [row, 0], bmode="row")

            em.range(HP, lambda kv: em.range(R, lambda r: score_row(kv, r)))
            # keep = clamp(remaining, 0, 1); scores += keep * 1e30 - 1e30
            em.vec("max", keep, z, base, z, rows, KB, bmode="imm", imm=0.0)
            em.vec("min", keep, z, keep, z, rows, KB, bmode="imm", imm=1.0)
            em.vec("mul", tmp_tile, z, keep, z, rows, KB, bmode="imm", imm=MASK_BIAS)
            em.vec("add", tmp_tile, z, tmp_tile, z, rows, KB, bmode="imm", imm=-MASK_BIAS)
            em.vec("add", scores, z, scores, z, rows, KB, tmp_tile, z, bmode="tile")
            em.vec("add", base, z, base, z, rows, KB, bmode="imm", imm=float(-KB))
            # online softmax
            em.vec("rmax", tmp, z, scores, z, rows, KB)
            em.vec("max", m_new, z, m, z, rows, 1, tmp, z, bmode="tile")
            em.vec("sub", tmp, z, m, z, rows, 1, m_new, z, bmode="tile")
            em.vec("exp", tmp, z, tmp, z, rows, 1)  # alpha = e^(m_old - m_new)
            em.vec("copy", m, z, m_new, z, rows, 1)
            em.vec("sub", scores, z, scores, z, rows, KB, m_new, z, bmode="col")
            em.vec("exp", scores, z, scores, z, rows, KB)
            # a query row without keys (n < Sq, or n = 0 whose block 0 is still read) stays 0
            em.vec("mul", scores, z, scores, z, rows, KB, keep, z, bmode="tile")
            em.vec("mul", l_sum, z, l_sum, z, rows, 1, tmp, z, bmode="tile")
            em.vec("mul", o, z, o, z, rows, Dv, tmp, z, bmode="col")
            if p_tile.lo is None:
                # bf16: l sums P as the matrix unit gets it, bf16(P), so O / l stays a convex
                # combination of the values (with l from the f32 P, V's common offset times the
                # sum of P's rounding errors would be left in every output)
                split_on_chip(em, scores, p_tile, rows, KB)
                em.vec("copy", scores, z, p_tile.hi, z, rows, KB)
                em.vec("rsum", tmp, z, scores, z, rows, KB)
                em.vec("add", l_sum, z, l_sum, z, rows, 1, tmp, z, bmode="tile")
            else:
                em.vec("rsum", tmp, z, scores, z, rows, KB)
                em.vec("add", l_sum, z, l_sum, z, rows, 1, tmp, z, bmode="tile")
                split_on_chip(em, scores, p_tile, rows, KB)
            split_on_chip(em, v_rows_b, v_tile, KB, Wv)
            # bf16 with V in two parts: one pass of P over each
            products = [(p_tile, v_tile)] if p_tile.lo is not None or v_tile.lo is None else \
                [(p_tile, Bf16Tile(v_tile.hi, None)), (p_tile, Bf16Tile(v_tile.lo, None))]

            def head_product(kv: Index) -> None:
                for lhs, rhs in products:
                    emit_tile_product(ctx, lhs, rhs, o, R, KB, Dv, lhs_at=(em.mul(kv, R), 0),
                                      rhs_at=(0, em.mul(em.add(em.mul(p, HP), kv), Dv)), acc_at=(em.mul(kv, R), 0))

            em.range(HP, head_product)

        def sequence_pass(b: Index, p: Index) -> None:
            first_row = em.add(em.mul(b, seq_rows), em.mul(p, rows))
            row0 = em.mul(b, MBP)
            # G > 1 (the table on chip): the first gather first, it needs nothing else; after
            # the setup otherwise (a prefill chunk measured 0.5 % slower with it first)
            early_gather = kept is not None and not prefetch_first and prefetched is None
            if early_gather:
                gather(table_ids, row0, 0)
            if many:
                em.vec("mul", q_tile, z, q_all, [first_row, 0], rows, D, bmode="imm", imm=scale)
                em.vec("copy", n_float, z, lens_all, [b, 0], 1, 1)
            else:
                if q_kept is not None:  # the projection left the rotated rows on chip
                    em.vec("mul", q_tile, z, q_kept, [first_row, 0], rows, D, bmode="imm", imm=scale)
                else:
                    em.dma(q2, [first_row, 0], q_tile, z, [rows, D])
                    em.vec("mul", q_tile, z, q_tile, z, rows, D, bmode="imm", imm=scale)
                if kept is not None:
                    em.vec("copy", n_float, z, kept.lens, [b, 0], 1, 1)
                else:
                    em.dma(lens2, [b, 0], n_int, z, [1, 1])
                    em.vec("copy", n_float, z, n_int, z, 1, 1)
            em.fill(n_col, z, rows, 1, 0.0)
            em.vec("add", n_col, z, n_col, z, rows, 1, n_float, z, bmode="row")
            if new_rows is not None:  # the pool's part: the tokens below n - 1
                em.vec("min", keep_new, z, n_col, z, rows, 1, bmode="imm", imm=1.0)
                em.vec("add", n_col, z, n_col, z, rows, 1, bmode="imm", imm=-1.0)
            if pos_tile is not None:
                em.vec("add", base, z, pos_tile, z, rows, KB, n_col, z, bmode="col")
            else:
                em.dma(pos, z, base, z, [rows, KB])
                em.vec("add", base, z, base, z, rows, KB, n_col, z, bmode="col")
            if new_rows is None:
                em.fill(m, z, rows, 1, NEG_INF)
                em.fill(l_sum, z, rows, 1, 0.0)
                em.fill(o, z, rows, Dv, 0.0)
            else:
                # the softmax starts from the token at n - 1, its key and value on chip: m = its
                # score, l = P = 1 (e^0, exact in bf16 too), O = its value row (0 without it)
                k_new, v_new = new_rows[0].rows, new_rows[1].rows

                def new_token(kv: Index) -> None:
                    head = em.add(em.mul(p, HP), kv)
                    em.vec("rdot", m, [em.mul(kv, R), 0], q_tile, [em.mul(kv, R), 0], R, D, k_new,
                           [b, em.mul(head, D)], bmode="row")
                    em.vec("add", o, [em.mul(kv, R), 0], o, [em.mul(kv, R), 0], R, Dv, v_new,
                           [b, em.mul(head, Dv)], bmode="row")

                em.fill(o, z, rows, Dv, 0.0)
                em.range(HP, new_token)
                em.vec("mul", o, z, o, z, rows, Dv, keep_new, z, bmode="col")
                em.vec("copy", l_sum, z, keep_new, z, rows, 1)
            # super-blocks in order through two buffers: super-block 0 is gathered first (or
            # copied from its prefetch); each step of the loop gathers super-block 2i+1 into
            # buffer 1, does 2i's math, gathers 2i+2 into buffer 0 and does 2i+1's math, so each
            # gather's DMA latency overlaps the other buffer's math; then 2p's math, and 2p+1's
            # (the last super-block's blocks) when rest is odd
            if prefetch_first:
                em.vec("copy", k_rows[0], z, em.view(first_k, (B * KB, Wk)), [em.mul(b, KB), 0], KB, Wk)
                em.vec("copy", v_rows[0], z, em.view(first_v, (B * KB, Wv)), [em.mul(b, KB), 0], KB, Wv)
            elif not early_gather and prefetched is None:
                gather(table_ids, row0, 0)
            pairs = em.load_index(pairs_ids, [b], max(MBP // G - 1, 0) // 2)

            def pair(i: SSAValue) -> None:
                first = em.add(row0, em.mul(i, 2 * G))
                gather(table_ids, em.add(first, G), 1)
                block(p, 0)
                gather(table_ids, em.add(first, 2 * G), 0)
                block(p, 1)

            em.loop(0, pairs, 1, pair)
            block(p, 0)
            odd = em.load_index(odd_ids, [b], 1)

            def last(_: SSAValue) -> None:
                gather(last_ids, em.mul(b, G), 1)
                block(p, 1)

            em.loop(0, odd, 1, last)
            em.vec("max", l_sum, z, l_sum, z, rows, 1, bmode="imm", imm=1e-30)
            em.vec("recip", tmp, z, l_sum, z, rows, 1)
            if many:  # the next sequence's O need not wait for this one's store
                em.vec("mul", out_all, [first_row, 0], o, z, rows, Dv, tmp, z, bmode="col")
            else:
                em.vec("mul", o, z, o, z, rows, Dv, tmp, z, bmode="col")
                em.dma(o, z, out2, [first_row, 0], [rows, Dv])
                if B * passes == 1:  # o holds the whole output: the next kernel may copy it
                    ctx.keep_on_chip(out_buffer, o)

        if many:
            if q_kept is None:
                em.dma(q2, z, q_all, z, [B * seq_rows, D])
            if kept is None:
                em.dma(lens2, z, lens_all, z, [B, 1])
        if load_pos:
            em.dma(pos, z, pos_tile, z, [rows, KB])
        if prefetch_first and prefetched is None:
            _gather_first_blocks(ctx, ((k_blocks, first_k), (v_blocks, first_v)), table_ids, B, G, MBP)
        em.range(B, lambda b: em.range(passes, lambda p: sequence_pass(b, p)))
        # the appends last: the fence after a run-time block loop would wait for their stores
        for a in new_rows or ():
            _store_appended(ctx, a)
        if many:
            em.dma(out_all, z, out2, z, [B * seq_rows, Dv])
            ctx.keep_on_chip(out_buffer, out_all)
