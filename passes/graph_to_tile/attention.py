"""graph.attention as one flash kernel: online softmax, the score matrix never leaves the chip.

One kernel per (batch, kv head, query head in the group, q tile) (several heads interleaved:
below): the q tile is scaled and split once; per kv tile: S = q.K^T into an accumulator tile [TQ, TKV] (the K tile [TKV, D] as K is
stored, loaded into the array through the weight path's transposer: `tile.matmul
transpose_rhs`, `mx.loadw trans=1`), the causal mask added from a compile-time band
[TQ, Skv + QL] (QL = the last query tile's origin; row i, column c is -1e30 iff
c - QL - i - (Skv - Sq) > 0) read at column j0 - q0 + QL, which is affine in both the
query-tile and the key-tile loop (no clamp, which would be an `arith.select` that tile-to-npu
cannot address) and in range for every tile pair; then `rmax` -> m_new,
alpha = exp(m - m_new), P = exp(S - m_new), l = l*alpha + rsum(P), O = O*alpha + P.V (O stays
in the accumulator). Finally O / l.

Row sums on the matrix unit (bf16, the online softmax): where V's Dv columns leave a column of
the array free (Dv not a multiple of the array's columns: the Llama's heads on server), the V
tile carries a column of ones after its Dv columns, so P.[V | 1] writes rsum(P) into O's column
Dv, and l = l*alpha + rsum(P) is O's last column, scaled with O by alpha: the vector unit's row
sum of P and l's two column updates per score tile go (its softmax chain is what a score tile
waits for). The sum is the matrix unit's fp32 accumulation of the bf16 P it multiplies, not the
vector unit's. With one key tile the softmax drops its row sum (MiniLM on server 141,540 ->
139,764 cycles; in the twenty-second session, before the bias in the accumulator and the
prefetch after the first product loop, it lost: 146,862 -> 147,114, docs/tiling.md). Not in
fp32 emulation, where it gained nothing (4 heads of 128 x 32: 5,003 -> 5,005 cycles; GQA
8/2 causal at 256: 29,550 both). Causal tiles above the diagonal are masked, or skipped where
the tiling allows it (`tiling_cost.triangular_score_tiles`).

Interleaved heads: one score tile is a chain across the engines (its q.K^T on the matrix unit,
its softmax on the vector unit, its P.V on the matrix unit), each link waiting for the one
before (the array's fill and drain, the vector latency). The kernel therefore runs `interleave`
heads at once, each with its own buffers (a slot), their instructions emitted stage by stage:
every slot's loads, then every slot's q.K^T, then per slot its softmax and P.V, so the matrix
unit computes the next slot's scores while the vector unit does this slot's softmax. The slots
are consecutive query heads of one group (they share the K and V tiles: loaded and split once)
or, with one query head per group, consecutive kv heads; they share the causal band tile and a
mask the same for every head. On latency-bound targets the cost model picks the interleave with
the tiling (`GemmSpec.interleaves`: the fastest count that fits, per candidate tiling; ties to
more heads).

Explicit masks: a compile-time mask (i1: true = attend, or additive) becomes an additive weight
[mb*mh*Sq, Skv] (-inf/false -> -1e30); a runtime additive mask [B|1, H|1, Sq|1, Skv] (such as
the one integer_inputs.py makes from an integer attention mask, or from a runtime i1 mask) is
DMA'd per score tile
(`bmode=row` for one query row) and added after q.K^T. A query row with every key masked is
zeros, the reference's (torch's safe softmax): where a mask may mask a whole row, its 1 / l is
masked to 0 for rows whose score max is at or below -1e30 / 2 (five [TQ, 1] vector ops per query
tile; the flash sum over keys all at -1e30 is otherwise the mean of V). A float mask's finfo.min
is not -inf: such a row's softmax is uniform (the mean of V), as in the reference, which is why
the running max starts at the float minimum rather than -1e30 and the compile-time mask maps only
-inf to -1e30. A runtime float mask holding -inf still gives NaN for a fully masked row of a
one-key-tile kernel (-inf - -inf); graph-raise-attention hands torch.onnx's where(mask, 0, -inf)
over as the boolean mask, so the kernel never meets it there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from xdsl.dialects.builtin import StringAttr, f32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.dialects.dtypes import shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile import head_layout, integer_inputs
from infer.passes.graph_to_tile.builder import Emitter, Index
from infer.passes.graph_to_tile.context import NEG_INF, LoweringContext, error, latency_bound
from infer.passes.graph_to_tile.matrix_unit import Bf16Tile, alloc_bf16_tile, emit_tile_product, split_on_chip
from infer.target.hw import HardwareConfig

SOFTMAX_OPS = 12  # dependent vector instructions of one score tile's online softmax (kv_tile_body)
ONE_KEY_TILE_SOFTMAX_OPS = 4


def softmax_cost(hw: HardwareConfig, passes: int, ones: int, adds: int) -> int:
    """Vector cost units per score element of a score tile's softmax (kv_tile_body), from the
    target's instruction costs: `adds` additive tiles (the causal band, the mask), the row max,
    the subtraction of the row's max, exp, P's row sum (none with the ones column: P.[V | 1]
    makes it) and in fp32 P's split into bf16 halves. The running softmax over several key
    tiles also rescales O by alpha, per O element (`GemmSpec.flash_rescale`); its per-row
    statistics are the dependent chain (`softmax_ops`)."""
    c = hw.vector.cost
    return (adds * c["add"] + c["rmax"] + c["sub"] + c["exp"] + (0 if ones else c["rsum"])
            + (c["copy"] + c["sub"] if passes == 3 else 0))


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
    # a column of ones after V's Dv columns (module docstring): 1 where the array has it free
    # (and, below, the keys take more than one tile)
    ones = 1 if ROW_SUMS_ON_MATRIX and copies == 1 and Dv % hw.matrix.cols else 0
    mask_shape = (1,) * (4 - len(shape_of(op.mask))) + tuple(shape_of(op.mask)) if op.mask is not None else None
    mask_rows_full = mask_shape is not None and (ctx.constant(op.mask) is not None or mask_shape[2] > 1)

    def footprint(tq: int, tkv: int, _d: int) -> tuple[int, int]:
        # q [TQ, D], k^T [D, TKV], p [TQ, TKV], v [TKV, Dv]: f32 staging + bf16 hi(/lo) each;
        # m, m_new, l, tmp columns; causal band / mask tiles -- all x2; score and O tiles in acc
        per = 4 + 2 * copies
        spad = 2 * per * (tq * D + D * tkv + tq * tkv + tkv * (Dv + ones)) + 4 * 2 * tq * 4
        if causal:
            spad += 2 * tq * tkv * 4
        if op.mask is not None:
            spad += 2 * (tq if mask_rows_full else 1) * tkv * 4
        return spad, 2 * tq * tkv * 4 + 2 * tq * (Dv + ones) * 4

    # interleaved heads (module docstring): as many slots as divide the query heads of a group
    # (sharing its K and V) or, one query head per group, the kv heads; up to 8 (MiniLM's 12
    # heads at once measured slower than 6, which the model does not see). On latency-bound
    # targets only: on edge the one kernel the model interleaved (bench_compiler_gemm's block, 2
    # heads of 32x16 tiles) ran 126 cycles slower than one head at a time
    interleaves = tuple(u for u in (1, 2, 3, 4, 6, 8) if group % u == 0 or (group == 1 and Hkv % u == 0)) \
        if latency_bound(hw) else (1,)
    adds = int(causal) + int(op.mask is not None)  # the causal band's and the mask's tiles
    spec = tiling_cost.GemmSpec(lhs_bytes=4, lhs_split=True, rhs_bytes=4, rhs_split=True, passes=ctx.matmul_passes,
                                batch=B * Hq, footprint=footprint, flash_dv=Dv + ones,
                                epi_cost=softmax_cost(hw, ctx.matmul_passes, ones, adds),
                                softmax_ops=SOFTMAX_OPS - 3 * ones + (1 if causal or op.mask is not None else 0),
                                causal_offset=offset if causal else None, interleaves=interleaves)
    choice = tiling_cost.choose_gemm(hw, Sq, Skv, D, spec, tk_cands=[D], override=None)
    ctx.predict(choice.best.cycles)
    override = ctx.override(name, 2, optional=1)  # TQxTKV[xinterleave]
    TQ, TKV = (override[0], override[1]) if override else (choice.tiles[0], choice.tiles[1])
    interleave = (tiling_cost.gemm_estimate(hw, Sq, Skv, D, TQ, TKV, D, spec) if override else choice.best).interleave
    if override and len(override) == 3:
        if override[2] not in interleaves:
            raise error(op, f"override {name}: {override[2]} heads interleaved, the heads allow {list(interleaves)}")
        interleave = override[2]
    # causal: each query tile visits the key tiles up to its diagonal only (tiling_cost
    # .triangular_score_tiles says which tilings can): a key loop bound affine in the query tile
    triangular = causal and tiling_cost.triangular_score_tiles(Sq, Skv, TQ, TKV, offset) is not None
    # one key tile (Skv <= TKV: MiniLM's 128 keys on server): the online softmax has no running
    # statistics to carry, so no fills of m, l and O and no rescaling by alpha: m_new is the
    # score tile's row max, l its row sum of P, and the P.V product writes O. The same values
    # (m = -inf makes alpha 0, 0 * alpha + x = x), but for O's zeros, which no longer come out
    # as +0 from a 0 + -0 sum
    one_key_tile = ONE_KEY_TILE_SOFTMAX and Skv <= TKV and not triangular
    ctx.debug(tiling_cost.describe_choice(name, "attention", f"Sq={Sq} Skv={Skv} D={D} heads={Hq}/{Hkv} batch={B}"
                                          + (" causal" if causal else ""), choice)
              + f"\n[graph-to-tile] {name}:   flash tiles TQxTKV = {TQ}x{TKV} (score tile never leaves the chip)"
              + (f", {interleave} heads interleaved" if interleave > 1 else ""))
    # operands and result head-major [B, H, S, D], or sequence-major [B, S, H, D] where the
    # head transposes around the attention are folded into it (head_layout.py)
    # K tiles [TKV, D] as K is stored: q.K^T multiplies them through the weight path's
    # transposer (`transpose_rhs`), so K needs no transposed copy in DRAM (a helper nest and two
    # DRAM round trips before the first score tile: ~1.7 K cycles a layer of MiniLM on server)
    k_at = _heads(ctx, op.key, head_layout.sequence_major(ctx, op.key), B, Hkv, Skv, D)
    q_at = _heads(ctx, op.query, head_layout.sequence_major(ctx, op.query), B, Hq, Sq, D)
    v_at = _heads(ctx, op.value, head_layout.sequence_major(ctx, op.value), B, Hkv, Skv, Dv)
    merged = head_layout.merged_output(ctx, op)
    out_at = _heads(ctx, op.results[0], merged, B, Hq, Sq, Dv, output=True)
    band = None
    # causal band: score (q0 + i, j0 + jj) is masked iff j0 + jj - q0 - i - off > 0. Row i of the
    # band, column c = j0 + jj - q0 + QL (QL = the last q tile's origin) holds exactly that, so
    # the band column of a score tile, j0 - q0 + QL, is affine in both tile loops (no clamp:
    # hardware addresses must be affine) and in [0, Skv + QL) for every (q tile, kv tile) pair.
    QL = (Sq - 1) // TQ * TQ
    if causal:
        width = Skv + QL
        ii, cc = np.meshgrid(np.arange(TQ), np.arange(width), indexing="ij")
        band = ctx.weight(f"{name}.causal_band", np.where(cc - QL - ii - offset > 0, NEG_INF, 0.0).astype(np.float32), f32)
    # explicit mask: additive [mb*mh*mq, Skv] rows (mb in {1, B}, mh in {1, Hq}, mq in {1, Sq})
    mask2 = None
    mb = mh = mq = 1
    masked_rows = False  # may a query row have every key masked? (then its output is zeros)
    if mask_shape is not None:
        mb, mh = mask_shape[0], mask_shape[1]
        const_mask = ctx.constant(op.mask)
        if const_mask is not None:
            additive = np.broadcast_to(np.asarray(const_mask).reshape(mask_shape), (mb, mh, Sq, Skv))
            if additive.dtype == np.bool_:
                additive = np.where(additive, np.float32(0), np.float32(NEG_INF))
            # -inf -> NEG_INF (no inf - inf); a finite minimum below it (a float mask of
            # finfo.min) stays: softmax over a row of it is uniform, as the reference's
            additive = additive.astype(np.float32)
            additive = np.where(np.isneginf(additive), np.float32(NEG_INF), additive)
            visible = additive > NEG_INF / 2
            if causal:
                visible = visible & (np.arange(Skv)[None, :] <= np.arange(Sq)[:, None] + offset)
            masked_rows = bool((~visible.any(axis=-1)).any())
            mq = Sq
            mask2 = ctx.weight(f"{name}.mask", np.ascontiguousarray(additive.reshape(mb * mh * Sq, Skv)), f32)
        else:
            if mask_shape[3] != Skv or mask_shape[2] not in (1, Sq):
                raise error(op, f"a runtime mask {mask_shape} must have the key dim ({Skv}) and 1 or {Sq} query rows")
            mq = mask_shape[2]
            mask2 = em.view(integer_inputs.additive_mask(ctx, op.mask), (mb * mh * mq, Skv))
            masked_rows = True
    # the slots' heads share the causal band always, the mask where it is the same for every
    # head, K and V where they are query heads of one group: loaded and split once per step
    share_kv = group % interleave == 0 and interleave > 1
    slots = [_SlotBuffers.alloc(ctx, TQ, TKV, D, Dv, ones, band is not None, None if mask2 is None else (TQ if mq > 1 else 1))]
    slots += [_SlotBuffers.alloc(ctx, TQ, TKV, D, Dv, ones, band is not None, None if mask2 is None else (TQ if mq > 1 else 1),
                                 share=slots[0], share_kv=share_kv, share_mask=mh == 1) for _ in range(interleave - 1)]
    if interleave > 1:
        # each slot holds semaphores of its own (its output's store, a per-head mask's load):
        # where tile-to-npu cannot fit them at its last degrade level, the compile driver
        # lowers this kernel again with the next fewer heads (measured on server, the slots'
        # heads straight-line, one key tile: a GQA group with a per-head mask needs 4 + 2U in
        # bf16, 16/2 heads at U = 8 20 of 16; 5 + 2U in fp32, 12/2 at U = 6 17)
        fewer = max(u for u in interleaves if u < interleave)
        owner = slots[0].q_staging.owner
        if isinstance(owner, t.AllocOp):
            owner.attributes[t.SEMAPHORE_FALLBACK_ATTR] = StringAttr(f"{name}={TQ}x{TKV}x{fewer}")
    z = [0, 0]

    # one query tile per head with the heads merged side by side (sequence-major output): the
    # heads' outputs are normalised into one [Sq, Hq.Dv] tile that stays on chip for the o
    # projection after it (`keep_on_chip`), which then copies its activations instead of
    # loading them back once the last head's store retired (MiniLM server: 3 dependent k-step
    # loads of ~0.6 K cycles each)
    out_all = None
    if (out_at.seq_major and B == 1 and Sq <= TQ and latency_bound(hw)
            and Sq * Hq * Dv * 4 <= hw.memory.scratchpad_bytes // KEPT_OUTPUT_SHARE):
        out_all = em.alloc((Sq, Hq * Dv), f32, "spad")

    # Q, K and V whole on chip where together they take at most 1/RESIDENT_OPERANDS_SHARE of the
    # scratchpad (latency-bound targets): one DMA each before the loops (or the tile the kernel
    # before left on chip), and each step copies its tiles on the vector unit. Loaded per step, a block's first Q, K and V tiles waited a
    # DRAM latency with the array idle at every query-tile and head-group boundary (~1.5 K cycles
    # each in the Llama prefill on server)
    # (bf16 only: in the fp32 emulation the step's copies into the staging tiles, split after,
    # made the e2e Llama prefill on server run out of semaphores)
    resident = (latency_bound(hw) and copies == 1
                and B * (Hq * Sq * D + Hkv * Skv * (D + Dv)) * 4 <= hw.memory.scratchpad_bytes // RESIDENT_OPERANDS_SHARE)
    if resident or one_key_tile:
        # the cost model's cycles of the chosen tiling as emitted: its operands resident, or its
        # softmax over one key tile (no running statistics: fewer vector passes and a shorter
        # dependent chain per score tile)
        one_tile_softmax = ({"epi_cost": softmax_cost(hw, ctx.matmul_passes, ones, adds), "softmax_ops": ONE_KEY_TILE_SOFTMAX_OPS
                             - ones + (1 if causal or op.mask is not None else 0), "flash_rescale": False}
                            if one_key_tile else {})
        estimate = tiling_cost.gemm_estimate(hw, Sq, Skv, D, TQ, TKV, D, replace(
            spec, interleave=interleave, interleaves=(interleave,), resident_operands=resident,
            **one_tile_softmax))
        ctx.predict(estimate.cycles - choice.best.cycles)
    q_all = _resident_heads(ctx, q_at) if resident else None
    k_all = _resident_heads(ctx, k_at) if resident else None
    v_all = _resident_heads(ctx, v_at) if resident else None

    def stage_kv(heads_all: _Heads | None, staging: SSAValue, tile: Bf16Tile, b: Index,
                 kv_head: Index, j0: Index, tkv: int, width: int) -> None:
        """A K or V tile into its operand tile: one rounding copy from the resident operand, or
        the split of its staging tile, which the step's loads filled."""
        if heads_all is not None:
            em.vec("copy", tile.hi, z, heads_all.buffer, heads_all(b, kv_head, j0), tkv, width)
        else:
            split_on_chip(em, staging, tile, tkv, width)

    def load_kv(heads_all: _Heads | None, at: _Heads, staging: SSAValue, b: Index, kv_head: Index,
                j0: Index, tkv: int, width: int) -> None:
        """The step's load of a K or V tile into its staging tile (none when resident)."""
        if heads_all is None:
            em.dma(at.buffer, at(b, kv_head, j0), staging, z, [tkv, width])

    def q_tile_body(b: Index, heads: list[tuple[Index, Index]], q0: Index, tq: int) -> None:
        """The query tile q0 of the heads (kv head, query head in its group) of `heads`, one
        per slot, their instructions interleaved stage by stage (module docstring)."""
        attend(b, *prepare(b, heads, q0, tq), q0, tq)

    def prepare(b: Index, heads: list[tuple[Index, Index]], q0: Index, tq: int,
                keys: bool = False) -> tuple[list, list, bool]:
        """The slots' query tiles (scaled, rounded) and running statistics, and with `keys`
        (one key tile) their key tiles: (rows, planes, keys)."""
        rows, planes = [], []
        for sb, (kv_head, in_group) in zip(slots, heads):
            h = em.add(em.mul(kv_head, group), in_group)
            rows.append((h, out_at(b, h, q0)))
            planes.append(kv_head)
            if q_all is None:
                em.dma(q_at.buffer, q_at(b, h, q0), sb.q_staging, z, [tq, D])
        for sb, (h, _) in zip(slots, rows):
            if q_all is None:
                em.vec("mul", sb.q_staging, z, sb.q_staging, z, tq, D, bmode="imm", imm=scale)
            else:
                em.vec("mul", sb.q_staging, z, q_all.buffer, q_all(b, h, q0), tq, D, bmode="imm", imm=scale)
            split_on_chip(em, sb.q_staging, sb.q_tile, tq, D)
            if not one_key_tile:
                # the running max starts at the float minimum, not NEG_INF: a row of a float
                # mask's finfo.min keeps its uniform softmax (the reference's) instead of
                # underflowing to l = 0
                em.fill(sb.m, z, tq, 1, FLOAT32_MIN)
                if not ones:
                    em.fill(sb.l_sum, z, tq, 1, 0.0)
                em.fill(sb.o, z, tq, Dv + ones, 0.0)  # with l in column Dv
        if keys:
            staged: set[SSAValue] = set()
            for sb, kv_head in zip(slots, planes):
                if sb.k_staging not in staged:
                    load_kv(k_all, k_at, sb.k_staging, b, kv_head, 0, Skv, D)
                    staged.add(sb.k_staging)
            for sb, kv_head in zip(slots, planes):
                if sb.k_tile.hi not in staged:
                    stage_kv(k_all, sb.k_staging, sb.k_tile, b, kv_head, 0, Skv, D)
                    staged.add(sb.k_tile.hi)
        return rows, planes, keys

    def attend(b: Index, rows: list, planes: list, keys_ready: bool, q0: Index, tq: int,
               between: Callable[[], None] | None = None) -> None:
        """The prepared slots' products and softmax over the key tiles, then (after `between`,
        the next heads' preparation where the groups are pipelined) their outputs."""

        def kv_tile_body(j0: Index, tkv: int) -> None:
            # every load of the step first (software-pipelined by tile-to-npu: a rotation loop's
            # body starts with its loads), then the slots' scores, so the matrix unit runs the
            # next slot's product while the vector unit does this one's softmax
            seen: set[SSAValue] = set()

            def first(buffer: SSAValue) -> bool:  # not yet loaded (split) by an earlier slot
                new = buffer not in seen
                seen.add(buffer)
                return new

            for sb, (h, _), kv_head in zip(slots, rows, planes):
                if first(sb.k_staging) and not keys_ready:
                    load_kv(k_all, k_at, sb.k_staging, b, kv_head, j0, tkv, D)
                if band is not None and sb.band_tile is not None and first(sb.band_tile):
                    em.dma(band, [0, em.add(em.sub(j0, q0), QL)], sb.band_tile, z, [tq, tkv])
                if mask2 is not None and sb.mask_tile is not None and first(sb.mask_tile):
                    mask_row = em.mul(em.add(em.mul(b if mb > 1 else 0, mh), h if mh > 1 else 0), mq)
                    if mq > 1:
                        em.dma(mask2, [em.add(mask_row, q0), j0], sb.mask_tile, z, [tq, tkv])
                    else:
                        em.dma(mask2, [mask_row, j0], sb.mask_tile, z, [1, tkv])
                if first(sb.v_staging):
                    load_kv(v_all, v_at, sb.v_staging, b, kv_head, j0, tkv, Dv)
            for sb, kv_head in zip(slots, planes):
                if first(sb.k_tile.hi) and not keys_ready:
                    stage_kv(k_all, sb.k_staging, sb.k_tile, b, kv_head, j0, tkv, D)
                # the first product writes the score tile: no fill (two vector passes) before it
                emit_tile_product(ctx, sb.q_tile, sb.k_tile, sb.scores, tq, D, tkv, overwrite=True,
                                  rhs_transposed=True)
            for sb, kv_head in zip(slots, planes):
                m, m_new, l_sum, tmp, o = sb.m, sb.m_new, sb.l_sum, sb.tmp, sb.o
                if band is not None and sb.band_tile is not None:
                    em.vec("add", sb.scores, z, sb.scores, z, tq, tkv, sb.band_tile, z, bmode="tile")
                if mask2 is not None and sb.mask_tile is not None:
                    em.vec("add", sb.scores, z, sb.scores, z, tq, tkv, sb.mask_tile, z,
                           bmode="tile" if mq > 1 else "row")
                if one_key_tile:  # the row max is m_new, l = rsum(P), O = P.V (below)
                    em.vec("rmax", m_new, z, sb.scores, z, tq, tkv)
                else:
                    em.vec("rmax", tmp, z, sb.scores, z, tq, tkv)
                    em.vec("max", m_new, z, m, z, tq, 1, tmp, z, bmode="tile")
                    em.vec("sub", tmp, z, m, z, tq, 1, m_new, z, bmode="tile")
                    em.vec("exp", tmp, z, tmp, z, tq, 1)  # alpha = e^(m_old - m_new)
                    em.vec("copy", m, z, m_new, z, tq, 1)
                em.vec("sub", sb.p_staging, z, sb.scores, z, tq, tkv, m_new, z, bmode="col")
                # bf16: exp writes P's bf16 tile directly (the vector unit converts on store) and
                # l sums the P the matrix unit multiplies: no fp32 P and no copy pass
                p_exp = sb.p_tile.hi if sb.p_tile.lo is None else sb.p_staging
                em.vec("exp", p_exp, z, sb.p_staging, z, tq, tkv)
                if one_key_tile:
                    if not ones:  # (with them, l is O's column Dv: P.[V | 1] writes it)
                        em.vec("rsum", l_sum, z, p_exp, z, tq, tkv)
                elif ones:  # l is O's column Dv: scaled with it, P's row sum added by P.[V | 1]
                    em.vec("mul", o, z, o, z, tq, Dv + 1, tmp, z, bmode="col")
                else:
                    em.vec("mul", l_sum, z, l_sum, z, tq, 1, tmp, z, bmode="tile")
                    em.vec("mul", o, z, o, z, tq, Dv, tmp, z, bmode="col")
                    em.vec("rsum", tmp, z, p_exp, z, tq, tkv)
                    em.vec("add", l_sum, z, l_sum, z, tq, 1, tmp, z, bmode="tile")
                if sb.p_tile.lo is not None:
                    split_on_chip(em, sb.p_staging, sb.p_tile, tq, tkv)
                if first(sb.v_tile.hi):
                    stage_kv(v_all, sb.v_staging, sb.v_tile, b, kv_head, j0, tkv, Dv)
                    if ones:  # the tile's column of ones
                        em.fill(sb.v_tile.hi, [0, Dv], tkv, 1, 1.0)
                emit_tile_product(ctx, sb.p_tile, sb.v_tile, o, tq, tkv, Dv + ones, overwrite=one_key_tile)

        if triangular:  # key tiles 0 .. the one holding key q0 + TQ - 1 + offset (the last visible)
            upper = em.add(q0, TQ + offset)
            if isinstance(upper, int):
                em.tiles(upper, TKV, kv_tile_body)
            else:
                em.loop(0, upper, TKV, lambda j0: kv_tile_body(j0, TKV))
        else:
            em.tiles(Skv, TKV, kv_tile_body)
        if between is not None:
            between()
        for sb, (h, o_at) in zip(slots, rows):
            if masked_rows:  # keep: 0 for a row whose every key is masked, else 1
                row_max, keep = (sb.m_new, sb.m) if one_key_tile else (sb.m, sb.m_new)
                em.vec("neg", keep, z, row_max, z, tq, 1)
                em.vec("lt", keep, z, keep, z, tq, 1, bmode="imm", imm=-NEG_INF / 2)  # a visible key
                em.vec("lt", row_max, z, row_max, z, tq, 1, bmode="imm", imm=4 * NEG_INF)  # finfo.min
                em.vec("add", keep, z, keep, z, tq, 1, row_max, z, bmode="tile")
            if ones:
                em.vec("recip", sb.tmp, z, sb.o, [0, Dv], tq, 1)
            else:
                em.vec("recip", sb.tmp, z, sb.l_sum, z, tq, 1)
            if masked_rows:  # (mask, not mul: 1 / l is inf for a row of -inf scores)
                em.vec("mask", sb.tmp, z, sb.tmp, z, tq, 1, keep, z, bmode="tile")
            em.vec("mul", sb.o, z, sb.o, z, tq, Dv, sb.tmp, z, bmode="col")
            if out_all is not None:
                # (before the store: the last access of the slot's double-buffered tile in a
                # round releases it, so a copy after the store would wait for it to retire)
                em.vec("copy", out_all, [0, em.mul(h, Dv)], sb.o, z, tq, Dv)
            em.dma(sb.o, z, out_at.buffer, o_at, [tq, Dv])

    U = interleave

    def heads_of(kv_head: Index, in_group: Index) -> list[tuple[Index, Index]]:
        """The slots' heads: consecutive query heads of one group (sharing K and V), or with
        one query head per group consecutive kv heads."""
        if group % U == 0:
            return [(kv_head, em.add(em.mul(in_group, U), s)) for s in range(U)]
        return [(em.add(em.mul(kv_head, U), s), in_group) for s in range(U)]

    kv_steps, group_steps = (Hkv, group // U) if group % U == 0 else (Hkv // U, group)
    steps = [(b, kv_head, in_group, q0, min(TQ, Sq - q0)) for b in range(B) for kv_head in range(kv_steps)
             for in_group in range(group_steps) for q0 in range(0, Sq, TQ)]
    if latency_bound(hw) and one_key_tile and 1 < len(steps) <= PIPELINED_STEPS:
        # a few head groups in sequence, each group's queries and keys prepared ahead of the
        # group before's outputs: the vector unit prepares them while it waits for that group's
        # last products to drain, and the next group's first product follows the last one
        # (MiniLM on server: 526 -> 0 idle cycles between the two head groups of a layer)
        keys = True
        prepared = prepare(steps[0][0], heads_of(steps[0][1], steps[0][2]), steps[0][3], steps[0][4], keys)
        for i, (b, kv_head, in_group, q0, tq) in enumerate(steps):
            nxt = steps[i + 1] if i + 1 < len(steps) else None
            current = prepared

            def prepare_next(nxt=nxt) -> None:
                nonlocal prepared
                prepared = prepare(nxt[0], heads_of(nxt[1], nxt[2]), nxt[3], nxt[4], keys)

            attend(b, *current, q0, tq, prepare_next if nxt is not None else None)
    else:
        em.range(B, lambda b: em.range(kv_steps, lambda kv_head: em.range(group_steps, lambda in_group: em.tiles(
            Sq, TQ, lambda q0, tq: q_tile_body(b, heads_of(kv_head, in_group), q0, tq)))))
    if out_all is not None:
        ctx.keep_on_chip(out_at.buffer, out_all, next_kernels=1)


FLOAT32_MIN = float(np.finfo(np.float32).min)

#: at most this many head-group steps (batch x head groups x query tiles) of a one-key-tile
#: attention are emitted in sequence on latency-bound targets, each step's queries and keys
#: prepared ahead of the step before's outputs (lower_attention; the run is unrolled at the
#: tile level, so at most this many copies of a step's ops)
PIPELINED_STEPS = 4

#: a kernel whose keys fit one tile computes its softmax without running statistics (lower_attention)
ONE_KEY_TILE_SOFTMAX = True
#: P's row sums computed by the matrix unit where the array has a column free (module docstring)
ROW_SUMS_ON_MATRIX = True
#: the kept output tile may take at most 1/KEPT_OUTPUT_SHARE of the scratchpad (the kernel's
#: tiles were chosen for all of it)
KEPT_OUTPUT_SHARE = 8
#: resident Q, K and V together may take at most 1/RESIDENT_OPERANDS_SHARE of the scratchpad
RESIDENT_OPERANDS_SHARE = 8


def _resident_heads(ctx: LoweringContext, at: _Heads) -> _Heads:
    """A local copy of the 2-D view `at` stands for (same shape, so `at`'s addressing indexes
    it): the tile the kernel before left on chip (`keep_on_chip`), or one loaded whole by one
    DMA. (One DMA per head let the first heads start earlier, but each was a top-level item with
    semaphores of its own to the kernel before's readers of those bytes: the e2e Llama prefill
    in fp32 on server ran out of semaphores.)"""
    em = ctx.emitter
    shape = tuple(shape_of(at.buffer))
    kept = ctx.on_chip_as(at.buffer, shape)  # the kernel before left it on chip (a prefill's rotary)
    if kept is not None:
        return _Heads(kept, at.H, at.S, at.D, at.seq_major, em)
    tile = em.alloc(shape, f32, "spad")
    em.dma(at.buffer, [0, 0], tile, [0, 0], list(shape))
    return _Heads(tile, at.H, at.S, at.D, at.seq_major, em)


@dataclass
class _Heads:
    """Where head h's rows s0.. of a [B, H, S, D] tensor start in the 2-D view `buffer`:
    head-major ([B*H*S, D], row (b*H + h)*S + s0) or sequence-major ([B*S, H*D], row b*S + s0,
    column h*D: head_layout.py)."""

    buffer: SSAValue
    H: int
    S: int
    D: int
    seq_major: bool
    em: Emitter

    def __call__(self, b: Index, h: Index, s0: Index) -> list[Index]:
        em = self.em
        if self.seq_major:
            return [em.add(em.mul(b, self.S), s0), em.mul(h, self.D)]
        return [em.add(em.mul(em.add(em.mul(b, self.H), h), self.S), s0), 0]


def _heads(ctx: LoweringContext, value: SSAValue, seq_buffer: SSAValue | None, B: int, H: int, S: int, D: int,
           output: bool = False) -> _Heads:
    em = ctx.emitter
    if seq_buffer is not None:
        return _Heads(em.view(seq_buffer, (B * S, H * D)), H, S, D, True, em)
    buffer = ctx.output_buffer(value) if output else ctx.buffer(value)
    return _Heads(em.view(buffer, (B * H * S, D)), H, S, D, False, em)


@dataclass
class _SlotBuffers:
    """One interleave slot's on-chip buffers (each double-buffered)."""

    q_staging: SSAValue
    q_tile: Bf16Tile
    k_staging: SSAValue
    k_tile: Bf16Tile
    scores: SSAValue
    p_staging: SSAValue
    p_tile: Bf16Tile
    v_staging: SSAValue
    v_tile: Bf16Tile
    o: SSAValue
    m: SSAValue  # running row max
    m_new: SSAValue
    l_sum: SSAValue  # running row sum of exp
    tmp: SSAValue
    band_tile: SSAValue | None
    mask_tile: SSAValue | None

    @classmethod
    def alloc(cls, ctx: LoweringContext, TQ: int, TKV: int, D: int, Dv: int, ones: int, band: bool,
              mask_rows: int | None, share: _SlotBuffers | None = None, share_kv: bool = False,
              share_mask: bool = False) -> _SlotBuffers:
        """A slot's buffers; with `share` (the first slot's), its causal band tile, and its K
        and V tiles (`share_kv`) and mask tile (`share_mask`) are that slot's. `ones`: the V
        tile and O have a column more (V's column of ones, O's row sums: lower_attention)."""
        em = ctx.emitter
        if share is not None and share_kv:
            k = (share.k_staging, share.k_tile)
        else:
            k = (em.alloc((TKV, D), f32, "spad", 2), alloc_bf16_tile(ctx, TKV, D))
        q = (em.alloc((TQ, D), f32, "spad", 2), alloc_bf16_tile(ctx, TQ, D))
        scores = em.alloc((TQ, TKV), f32, "acc", 2)
        p = (em.alloc((TQ, TKV), f32, "spad", 2), alloc_bf16_tile(ctx, TQ, TKV))
        if share is not None and share_kv:
            v = (share.v_staging, share.v_tile)
        else:
            v = (em.alloc((TKV, Dv), f32, "spad", 2), alloc_bf16_tile(ctx, TKV, Dv + ones))
        o = em.alloc((TQ, Dv + ones), f32, "acc", 2)
        stats = [em.alloc((TQ, 1), f32, "spad", 2) for _ in range(4)]
        if share is not None:
            band_tile = share.band_tile
        else:
            band_tile = em.alloc((TQ, TKV), f32, "spad", 2) if band else None
        if share is not None and share_mask:
            mask_tile = share.mask_tile
        else:
            mask_tile = em.alloc((mask_rows, TKV), f32, "spad", 2) if mask_rows is not None else None
        return cls(*q, *k, scores, *p, *v, o, *stats, band_tile, mask_tile)
