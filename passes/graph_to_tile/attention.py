"""graph.attention as one flash kernel: online softmax, the score matrix never leaves the chip.

One kernel per (batch, kv head, query head in the group, q tile): the q tile is scaled and
split once; per kv tile: S = q.K^T into an accumulator tile [TQ, TKV] (K is transposed once into
DRAM: transpose.transposed_copy), the causal mask added from a compile-time band
[TQ, Skv + QL] (QL = the last query tile's origin; row i, column c is -1e30 iff
c - QL - i - (Skv - Sq) > 0) read at column j0 - q0 + QL, which is affine in both the
query-tile and the key-tile loop (no clamp, which would be an `arith.select` that tile-to-npu
cannot address) and in range for every tile pair; then `rmax` -> m_new,
alpha = exp(m - m_new), P = exp(S - m_new), l = l*alpha + rsum(P), O = O*alpha + P.V (O stays
in the accumulator). Finally O / l. Causal tiles above the diagonal are masked (not yet skipped).

Explicit masks: a compile-time mask (i1: true = attend, or additive) becomes an additive weight
[mb*mh*Sq, Skv] (-inf/false -> -1e30); a runtime additive mask [B|1, H|1, Sq|1, Skv] (such as
the one integer_inputs.py makes from an integer attention mask, or from a runtime i1 mask) is
DMA'd per score tile
(`bmode=row` for one query row) and added after q.K^T. A query row with every key masked yields
the mean of V (-1e30 mask) or NaN (runtime -inf), not the reference's zeros.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.dialects.builtin import f32
from xdsl.ir import Operation

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile import integer_inputs
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import NEG_INF, LoweringContext, error
from infer.passes.graph_to_tile.matrix_unit import alloc_bf16_tile, emit_tile_product, split_on_chip
from infer.passes.graph_to_tile.transpose import transposed_copy

SOFTMAX_COST = 12  # vector ops per score element (cost-model estimate of the online softmax)
SOFTMAX_OPS = 12  # dependent vector instructions of one score tile's online softmax (kv_tile_body)


def lower_attention(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.AttentionOp)
    em, hw = ctx.emitter, ctx.hw
    B, Hq, Sq, D = shape_of(op.query)
    _, Hkv, Skv, _ = shape_of(op.key)
    Dv = shape_of(op.value)[-1]
    group = Hq // Hkv
    scale = op.scale.value.data if op.scale is not None else 1.0 / math.sqrt(D)
    causal = bool(op.causal.value.data)
    offset = Skv - Sq
    copies = ctx.bf16_copies
    name = ctx.kernel_name()
    mask_shape = (1,) * (4 - len(shape_of(op.mask))) + tuple(shape_of(op.mask)) if op.mask is not None else None
    mask_rows_full = mask_shape is not None and (ctx.constant(op.mask) is not None or mask_shape[2] > 1)

    def footprint(tq: int, tkv: int, _d: int) -> tuple[int, int]:
        # q [TQ, D], k^T [D, TKV], p [TQ, TKV], v [TKV, Dv]: f32 staging + bf16 hi(/lo) each;
        # m, m_new, l, tmp columns; causal band / mask tiles -- all x2; score and O tiles in acc
        per = 4 + 2 * copies
        spad = 2 * per * (tq * D + D * tkv + tq * tkv + tkv * Dv) + 4 * 2 * tq * 4
        if causal:
            spad += 2 * tq * tkv * 4
        if op.mask is not None:
            spad += 2 * (tq if mask_rows_full else 1) * tkv * 4
        return spad, 2 * tq * tkv * 4 + 2 * tq * Dv * 4

    spec = tiling_cost.GemmSpec(lhs_bytes=4, lhs_split=True, rhs_bytes=4, rhs_split=True, passes=ctx.matmul_passes,
                                batch=B * Hq, epi_cost=SOFTMAX_COST, footprint=footprint, flash_dv=Dv,
                                softmax_ops=SOFTMAX_OPS + (1 if causal or op.mask is not None else 0),
                                causal_offset=offset if causal else None)
    choice = tiling_cost.choose_gemm(hw, Sq, Skv, D, spec, tk_cands=[D], override=None)
    ctx.predict(choice.best.cycles)
    override = ctx.override(name, 2)
    TQ, TKV = (override[0], override[1]) if override else (choice.tiles[0], choice.tiles[1])
    # causal: each query tile visits the key tiles up to its diagonal only (tiling_cost
    # .triangular_score_tiles says which tilings can): a key loop bound affine in the query tile
    triangular = causal and tiling_cost.triangular_score_tiles(Sq, Skv, TQ, TKV, offset) is not None
    ctx.debug(tiling_cost.describe_choice(name, "attention", f"Sq={Sq} Skv={Skv} D={D} heads={Hq}/{Hkv} batch={B}"
                                          + (" causal" if causal else ""), choice)
              + f"\n[graph-to-tile] {name}:   flash tiles TQxTKV = {TQ}x{TKV} (score tile never leaves the chip)")
    k_t = transposed_copy(ctx, ctx.buffer(op.key), (B, Hkv, Skv, D))
    k_t2 = em.view(k_t, (B * Hkv * D, Skv))
    q2 = em.view(ctx.buffer(op.query), (B * Hq * Sq, D))
    v2 = em.view(ctx.buffer(op.value), (B * Hkv * Skv, Dv))
    out2 = em.view(ctx.output_buffer(op.results[0]), (B * Hq * Sq, Dv))
    q_staging = em.alloc((TQ, D), f32, "spad", 2)
    q_tile = alloc_bf16_tile(ctx, TQ, D)
    k_staging = em.alloc((D, TKV), f32, "spad", 2)
    k_tile = alloc_bf16_tile(ctx, D, TKV)
    scores = em.alloc((TQ, TKV), f32, "acc", 2)
    p_staging = em.alloc((TQ, TKV), f32, "spad", 2)
    p_tile = alloc_bf16_tile(ctx, TQ, TKV)
    v_staging = em.alloc((TKV, Dv), f32, "spad", 2)
    v_tile = alloc_bf16_tile(ctx, TKV, Dv)
    o = em.alloc((TQ, Dv), f32, "acc", 2)
    m = em.alloc((TQ, 1), f32, "spad", 2)  # running row max
    m_new = em.alloc((TQ, 1), f32, "spad", 2)
    l_sum = em.alloc((TQ, 1), f32, "spad", 2)  # running row sum of exp
    tmp = em.alloc((TQ, 1), f32, "spad", 2)
    band = band_tile = None
    # causal band: score (q0 + i, j0 + jj) is masked iff j0 + jj - q0 - i - off > 0. Row i of the
    # band, column c = j0 + jj - q0 + QL (QL = the last q tile's origin) holds exactly that, so
    # the band column of a score tile, j0 - q0 + QL, is affine in both tile loops (no clamp:
    # hardware addresses must be affine) and in [0, Skv + QL) for every (q tile, kv tile) pair.
    QL = (Sq - 1) // TQ * TQ
    if causal:
        width = Skv + QL
        ii, cc = np.meshgrid(np.arange(TQ), np.arange(width), indexing="ij")
        band = ctx.weight(f"{name}.causal_band", np.where(cc - QL - ii - offset > 0, NEG_INF, 0.0).astype(np.float32), f32)
        band_tile = em.alloc((TQ, TKV), f32, "spad", 2)
    # explicit mask: additive [mb*mh*mq, Skv] rows (mb in {1, B}, mh in {1, Hq}, mq in {1, Sq})
    mask2 = mask_tile = None
    mb = mh = mq = 1
    if mask_shape is not None:
        mb, mh = mask_shape[0], mask_shape[1]
        const_mask = ctx.constant(op.mask)
        if const_mask is not None:
            additive = np.broadcast_to(np.asarray(const_mask).reshape(mask_shape), (mb, mh, Sq, Skv))
            if additive.dtype == np.bool_:
                additive = np.where(additive, np.float32(0), np.float32(NEG_INF))
            additive = np.maximum(additive.astype(np.float32), np.float32(NEG_INF))  # -inf -> NEG_INF (no inf - inf)
            mq = Sq
            mask2 = ctx.weight(f"{name}.mask", np.ascontiguousarray(additive.reshape(mb * mh * Sq, Skv)), f32)
        else:
            if mask_shape[3] != Skv or mask_shape[2] not in (1, Sq):
                raise error(op, f"a runtime mask {mask_shape} must have the key dim ({Skv}) and 1 or {Sq} query rows")
            mq = mask_shape[2]
            mask2 = em.view(integer_inputs.additive_mask(ctx, op.mask), (mb * mh * mq, Skv))
        mask_tile = em.alloc((TQ if mq > 1 else 1, TKV), f32, "spad", 2)
    z = [0, 0]

    def q_tile_body(b: Index, kv_head: Index, in_group: Index, q0: Index, tq: int) -> None:
        h = em.add(em.mul(kv_head, group), in_group)
        q_row = em.add(em.mul(em.add(em.mul(b, Hq), h), Sq), q0)
        em.dma(q2, [q_row, 0], q_staging, z, [tq, D])
        em.vec("mul", q_staging, z, q_staging, z, tq, D, bmode="imm", imm=scale)
        split_on_chip(em, q_staging, q_tile, tq, D)
        em.fill(m, z, tq, 1, NEG_INF)
        em.fill(l_sum, z, tq, 1, 0.0)
        em.fill(o, z, tq, Dv, 0.0)
        kv_plane = em.add(em.mul(b, Hkv), kv_head)

        def kv_tile_body(j0: Index, tkv: int) -> None:
            em.dma(k_t2, [em.mul(kv_plane, D), j0], k_staging, z, [D, tkv])
            split_on_chip(em, k_staging, k_tile, D, tkv)
            em.fill(scores, z, tq, tkv, 0.0)
            emit_tile_product(ctx, q_tile, k_tile, scores, tq, D, tkv)
            if band is not None and band_tile is not None:
                em.dma(band, [0, em.add(em.sub(j0, q0), QL)], band_tile, z, [tq, tkv])
                em.vec("add", scores, z, scores, z, tq, tkv, band_tile, z, bmode="tile")
            if mask2 is not None and mask_tile is not None:
                mask_row = em.mul(em.add(em.mul(b if mb > 1 else 0, mh), h if mh > 1 else 0), mq)
                if mq > 1:
                    em.dma(mask2, [em.add(mask_row, q0), j0], mask_tile, z, [tq, tkv])
                    em.vec("add", scores, z, scores, z, tq, tkv, mask_tile, z, bmode="tile")
                else:
                    em.dma(mask2, [mask_row, j0], mask_tile, z, [1, tkv])
                    em.vec("add", scores, z, scores, z, tq, tkv, mask_tile, z, bmode="row")
            em.vec("rmax", tmp, z, scores, z, tq, tkv)
            em.vec("max", m_new, z, m, z, tq, 1, tmp, z, bmode="tile")
            em.vec("sub", tmp, z, m, z, tq, 1, m_new, z, bmode="tile")
            em.vec("exp", tmp, z, tmp, z, tq, 1)  # alpha = e^(m_old - m_new)
            em.vec("copy", m, z, m_new, z, tq, 1)
            em.vec("sub", p_staging, z, scores, z, tq, tkv, m_new, z, bmode="col")
            em.vec("exp", p_staging, z, p_staging, z, tq, tkv)
            em.vec("mul", l_sum, z, l_sum, z, tq, 1, tmp, z, bmode="tile")
            em.vec("mul", o, z, o, z, tq, Dv, tmp, z, bmode="col")
            em.vec("rsum", tmp, z, p_staging, z, tq, tkv)
            em.vec("add", l_sum, z, l_sum, z, tq, 1, tmp, z, bmode="tile")
            split_on_chip(em, p_staging, p_tile, tq, tkv)
            em.dma(v2, [em.add(em.mul(kv_plane, Skv), j0), 0], v_staging, z, [tkv, Dv])
            split_on_chip(em, v_staging, v_tile, tkv, Dv)
            emit_tile_product(ctx, p_tile, v_tile, o, tq, tkv, Dv)

        if triangular:  # key tiles 0 .. the one holding key q0 + TQ - 1 + offset (the last visible)
            upper = em.add(q0, TQ + offset)
            if isinstance(upper, int):
                em.tiles(upper, TKV, kv_tile_body)
            else:
                em.loop(0, upper, TKV, lambda j0: kv_tile_body(j0, TKV))
        else:
            em.tiles(Skv, TKV, kv_tile_body)
        em.vec("recip", tmp, z, l_sum, z, tq, 1)
        em.vec("mul", o, z, o, z, tq, Dv, tmp, z, bmode="col")
        em.dma(o, z, out2, [q_row, 0], [tq, Dv])

    em.range(B, lambda b: em.range(Hkv, lambda kv_head: em.range(group, lambda in_group: em.tiles(
        Sq, TQ, lambda q0, tq: q_tile_body(b, kv_head, in_group, q0, tq)))))
