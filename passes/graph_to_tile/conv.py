"""graph.conv2d (NCHW; groups, stride, dilation, padding) on the matrix unit, with a fused epilogue.

The output [O, pixels] is NCHW already, so the activation window is the stationary operand and
the weights stream. For each (n, group, o-tile, output-row tile): `fill acc`; for each channel
tile and tap (kh, kw): one 3-D strided DMA of the window xp[c0:, oh0*s + kh*d:, kw*d:] with
`src_steps [1, s, s]` -> [TC, TOH, OW], viewed [TC, TOH*OW] and split to bf16; a DMA of the
tap's weight block [TO, TC] (packed [(g*KH*KW + tap)*Og + o, c]); matmuls acc[TO, TP] += W.X.
Padding is one zero-bordered DRAM copy of the input (copies.padded_copy). Epilogue: the bias
per output channel (`bmode=col`), then the kernel's elementwise ops (residual add, BN-folded
ops, activation). Pixel tiles are whole output rows (TP = TOH*OW).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import f32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of
from infer.dialects.ir_io import LoweringError
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index, tile_extents
from infer.passes.graph_to_tile.context import STAGE, LoweringContext, error
from infer.passes.graph_to_tile.copies import padded_copy
from infer.passes.graph_to_tile.elementwise import TileFrame, apply_epilogue, epilogue_cost, epilogue_footprint
from infer.passes.graph_to_tile.matrix_unit import (
    alloc_bf16_tile,
    emit_tile_product,
    packed_weight_parts,
    split_on_chip,
)


def lower_conv(ctx: LoweringContext, op: Operation, epilogue: Sequence[Operation], result: SSAValue) -> None:
    """`op` (graph.conv2d) followed by the elementwise `epilogue` ops on its output tiles;
    `result` (the last of them, or op's result) is stored."""
    assert isinstance(op, g.Conv2dOp)
    em, hw = ctx.emitter, ctx.hw
    w = ctx.constant(op.weight)
    if w is None:
        raise error(op, "conv2d needs a compile-time weight")
    N, C, H, W = shape_of(op.input)
    O, Cg, KH, KW = shape_of(op.weight)
    groups = op.groups.value.data
    Og = O // groups
    stride_h, stride_w = g._ints(op.stride)
    dilation_h, dilation_w = g._ints(op.dilation)
    pads = tuple(g._ints(op.padding))
    _, _, OH, OW = shape_of(op.results[0])
    taps = KH * KW
    xp = padded_copy(ctx, ctx.buffer(op.input), N * C, H, W, (pads[0], pads[1], pads[2], pads[3]), 0.0)
    name = ctx.kernel_name()
    copies = ctx.bf16_copies
    out_shape = shape_of(result)
    epilogue_bytes = epilogue_footprint(ctx, epilogue, result, [op.results[0]], ((N,), (O,), (OH, OW)))
    has_bias = op.bias is not None

    def footprint(to: int, tp: int, tcn: int) -> tuple[int, int]:
        # window f32 staging + bf16 hi(/lo) [TC, TP]; weight block bf16 hi(/lo) [TO, TC];
        # bias column; epilogue tiles [TO, TP] -- double buffered; the accumulator tile
        spad = 2 * (tcn * tp * (4 + 2 * copies) + to * tcn * 2 * copies)
        spad += (2 * to * 4 if has_bias else 0)
        # each emitted tile shape (full, remainder) allocates its own epilogue buffers
        rows_per_tile = max(1, tp // OW)
        spad += sum(epilogue_bytes(a, b * OW) for a in tile_extents(Og, to) for b in tile_extents(OH, rows_per_tile))
        return spad, 2 * to * tp * 4

    produced = {r for e in epilogue for r in e.results}
    spec = tiling_cost.GemmSpec(
        lhs_bytes=2 * copies, lhs_split=False, rhs_bytes=4, rhs_split=True, passes=ctx.matmul_passes,
        taps=taps, batch=N * groups, epi_cost=epilogue_cost(ctx, epilogue) + (1 if op.bias else 0),
        epi_tiles=sum(1 for e in epilogue for v in e.operands
                      if shape_of(v) == out_shape and v not in produced and v is not op.results[0]),
        footprint=footprint)
    pixel_candidates = sorted({min(OH, 1 << i) * OW for i in range(0, max(1, OH).bit_length() + 1)})
    override = ctx.override(name, 3)
    if override is not None and override[1] % OW:
        raise LoweringError(f"error: {STAGE}: {name}: the pixel tile (TN) must be a multiple of OW = {OW}")
    choice = tiling_cost.choose_gemm(hw, Og, OH * OW, Cg, spec, tn_cands=pixel_candidates, override=override)
    TO, TP, TC = choice.tiles
    TOH = max(1, TP // OW)
    ctx.debug(tiling_cost.describe_choice(name, "conv2d", f"O={Og} P={OH}x{OW} C={Cg} taps={KH}x{KW}"
                                          + (f" groups={groups}" if groups > 1 else "") + f" batch={N}", choice))
    # weights: per (group, tap) an [Og, Cg] block: rows ((g*taps + kh*KW + kw)*Og + o)
    blocks = np.asarray(w, np.float32).reshape(groups, Og, Cg, KH, KW).transpose(0, 3, 4, 1, 2)
    blocks = blocks.reshape(groups * taps * Og, Cg)
    hint = (op.weight.owner.weight_key if isinstance(op.weight.owner, g.WeightOp) else f"{name}.weight") + ".packed"
    packs = packed_weight_parts(ctx, hint, np.ascontiguousarray(blocks))
    out2 = em.view(ctx.output_buffer(result), (N * O, OH * OW))
    window = em.alloc((TC, TOH, OW), f32, "spad", 2)
    window2 = em.view(window, (TC, TOH * OW))
    x_tile = alloc_bf16_tile(ctx, TC, TP)
    w_tile = alloc_bf16_tile(ctx, TO, TC)
    acc = em.alloc((TO, TP), f32, "acc", 2)
    bias_col = em.view(ctx.buffer(op.bias), (O, 1)) if op.bias is not None else None
    bias_tile = em.alloc((TO, 1), f32, "spad", 2) if bias_col is not None else None
    z = [0, 0]

    def tile(n: Index, group: Index, o0: Index, to: int, oh0: Index, toh: int) -> None:
        tp = toh * OW
        em.fill(acc, z, to, tp, 0.0)

        def channel_step(c0: Index, tcn: int) -> None:
            def tap(kh: Index, kw: Index) -> None:
                row = em.add(em.add(em.mul(n, C), em.mul(group, Cg)), c0)
                em.dma(xp, [row, em.add(em.mul(oh0, stride_h), em.mul(kh, dilation_h)), em.mul(kw, dilation_w)],
                       window, [0, 0, 0], [tcn, toh, OW], [1, stride_h, stride_w])
                split_on_chip(em, window2, x_tile, tcn, tp)
                w_row = em.add(em.mul(em.add(em.add(em.mul(group, taps), em.mul(kh, KW)), kw), Og), o0)
                em.dma(packs[0], [w_row, c0], w_tile.hi, z, [to, tcn])
                if w_tile.lo is not None:
                    em.dma(packs[1], [w_row, c0], w_tile.lo, z, [to, tcn])
                emit_tile_product(ctx, w_tile, x_tile, acc, to, tcn, tp, width_outer=True)

            em.range(KH, lambda kh: em.range(KW, lambda kw: tap(kh, kw)))

        em.tiles(Cg, TC, channel_step)
        r0 = em.add(em.mul(group, Og), o0)
        if bias_col is not None and bias_tile is not None:
            em.dma(bias_col, [r0, 0], bias_tile, z, [to, 1])
            em.vec("add", acc, z, acc, z, to, tp, bias_tile, z, bmode="col")
        frame = TileFrame((N,), (O,), (OH, OW), n, r0, em.mul(oh0, OW), to, tp)
        result_tile = apply_epilogue(ctx, epilogue, {op.results[0]: acc}, frame, result)
        em.dma(result_tile, z, out2, [em.add(em.mul(n, O), r0), em.mul(oh0, OW)], [to, tp])

    em.range(N, lambda n: em.range(groups, lambda gi: em.tiles(
        Og, TO, lambda o0, to: em.tiles(OH, TOH, lambda oh0, toh: tile(n, gi, o0, to, oh0, toh)))))
