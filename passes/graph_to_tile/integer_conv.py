"""graph.conv2d_integer on the matrix unit's int8 path, with the integer epilogue
(integer_epilogue.py).

The loop nest is conv.py's (output channels x output-row tiles, channel tiles and taps
innermost; the window stationary, the weight block [TO, TC] streaming), on int8 operands:
the window DMA lands in the scratchpad as the int8 tile the array multiplies (no conversion
pass), the pre-packed int8 weight block likewise, and int8 matmuls accumulate exactly into
the int32 tile [TO, TP]. Padding is an int8 DRAM copy bordered with the input zero point,
so padded taps contribute (zx - zx) * w = 0 and the zero point folds into the bias:
sum (x - zx) w + b = sum x w + (b - zx * sum w). Output channels are the tile's rows, so
the bias and the requantize multipliers are columns (bmode=col): requantize is `vec.mul` into
the int32 tile then a saturating copy / zero-point add into int8 (the `requant` instruction
takes per-column scales only).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import f32, i8, i32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of
from infer.dialects.ir_io import LoweringError
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index, tile_extents
from infer.passes.graph_to_tile.context import STAGE, LoweringContext, error
from infer.passes.graph_to_tile.copies import padded_copy
from infer.passes.graph_to_tile.elementwise import TileFrame
from infer.passes.graph_to_tile.integer_epilogue import (
    emit_epilogue,
    epilogue_scratchpad,
    int_output_buffer,
    parse_epilogue,
    require_signed_int8,
)
from infer.passes.graph_to_tile.integer_gemm import folded_bias
from infer.passes.graph_to_tile.matrix_unit import Bf16Tile, emit_tile_product


def lower_integer_conv(ctx: LoweringContext, op: Operation, epilogue: Sequence[Operation], result: SSAValue) -> None:
    assert isinstance(op, g.Conv2dIntegerOp)
    em, hw = ctx.emitter, ctx.hw
    require_signed_int8(op, op.input, op.weight)
    if "int8" not in hw.matrix.dtypes:
        raise error(op, f"target '{hw.name}' has no int8 matrix unit")
    w = ctx.constant(op.weight)
    bias = ctx.constant(op.bias) if op.bias is not None else None
    if w is None or (op.bias is not None and bias is None):
        raise error(op, "conv2d_integer needs a compile-time weight and bias")
    if op.weight_zero_point.value.data != 0:
        raise error(op, f"weight zero point {op.weight_zero_point.value.data}: the NPU lowering takes symmetric "
                    "weights (zero point 0)")
    x_zp = op.input_zero_point.value.data
    N, C, H, W = shape_of(op.input)
    O, Cg, KH, KW = shape_of(op.weight)
    groups = op.groups.value.data
    Og = O // groups
    stride_h, stride_w = g._ints(op.stride)
    dilation_h, dilation_w = g._ints(op.dilation)
    pads = tuple(g._ints(op.padding))
    _, _, OH, OW = shape_of(op.results[0])
    taps = KH * KW
    epi = parse_epilogue(ctx, op, epilogue, result, O, 1)
    w = np.asarray(w, np.int8)
    bias = folded_bias(op, w.reshape(O, -1).T, bias, x_zp)
    xp = padded_copy(ctx, ctx.buffer(op.input), N * C, H, W, (pads[0], pads[1], pads[2], pads[3]), float(x_zp), i8)
    name = ctx.kernel_name()
    frame_groups = ((N,), (O,), (OH, OW))
    epi_bytes = epilogue_scratchpad(ctx, epi, result, frame_groups, bias is not None)
    vectors = (bias is not None) + (epi.scale is not None)

    def footprint(to: int, tp: int, tcn: int) -> tuple[int, int]:
        # int8 window [TC, TP] and weight block [TO, TC], bias and scale columns, the
        # epilogue's tiles -- double buffered; the int32 accumulator tile
        spad = 2 * (tcn * tp + to * tcn) + vectors * 2 * to * 4
        rows_per_tile = max(1, tp // OW)
        spad += sum(epi_bytes(a, b * OW) for a in tile_extents(Og, to) for b in tile_extents(OH, rows_per_tile))
        return spad, 2 * to * tp * 4

    spec = tiling_cost.GemmSpec(
        lhs_bytes=1, lhs_split=False, rhs_bytes=1, rhs_split=False, passes=1, taps=taps, batch=N * groups,
        epi_cost=epi.vector_cost(ctx, bias is not None, per_row=True), matmul_dtype="int8",
        out_bytes=epi.stored_bytes, footprint=footprint)
    pixel_candidates = sorted({min(OH, 1 << i) * OW for i in range(0, max(1, OH).bit_length() + 1)})
    override = ctx.override(name, 3)
    if override is not None and override[1] % OW:
        raise LoweringError(f"error: {STAGE}: {name}: the pixel tile (TN) must be a multiple of OW = {OW}")
    choice = tiling_cost.choose_gemm(hw, Og, OH * OW, Cg, spec, tn_cands=pixel_candidates, override=override)
    TO, TP, TC = choice.tiles
    TOH = max(1, TP // OW)
    ctx.debug(tiling_cost.describe_choice(name, "conv2d_integer (int8)", f"O={Og} P={OH}x{OW} C={Cg} taps={KH}x{KW}"
                                          + (f" groups={groups}" if groups > 1 else "") + f" batch={N}", choice))
    # weights: per (group, tap) an [Og, Cg] int8 block: rows ((g*taps + kh*KW + kw)*Og + o)
    blocks = w.reshape(groups, Og, Cg, KH, KW).transpose(0, 3, 4, 1, 2).reshape(groups * taps * Og, Cg)
    hint = (op.weight.owner.weight_key if isinstance(op.weight.owner, g.WeightOp) else f"{name}.weight")
    packed = ctx.weight(hint + ".packed", np.ascontiguousarray(blocks), i8)
    bias_col = ctx.weight(f"{hint}.bias_folded", bias.reshape(O, 1), i32) if bias is not None else None
    scale_col = ctx.weight(f"{name}.{epi.kind}_scale", epi.scale.reshape(O, 1), f32) if epi.scale is not None else None
    out2 = em.view(int_output_buffer(ctx, result), (N * O, OH * OW))
    window = em.alloc((TC, TOH, OW), i8, "spad", 2)
    x_tile = em.view(window, (TC, TOH * OW))
    w_tile = em.alloc((TO, TC), i8, "spad", 2)
    acc = em.alloc((TO, TP), i32, "acc", 2)
    bias_tile = em.alloc((TO, 1), i32, "spad", 2) if bias_col is not None else None
    scale_tile = em.alloc((TO, 1), f32, "spad", 2) if scale_col is not None else None
    out_tile = em.alloc((TO, TP), epi.out_element(), "spad", 2) if epi.kind != "acc" else None
    z = [0, 0]

    def tile(n: Index, group: Index, o0: Index, to: int, oh0: Index, toh: int) -> None:
        tp = toh * OW
        em.fill(acc, z, to, tp, 0.0)

        def channel_step(c0: Index, tcn: int) -> None:
            def tap(kh: Index, kw: Index) -> None:
                row = em.add(em.add(em.mul(n, C), em.mul(group, Cg)), c0)
                em.dma(xp, [row, em.add(em.mul(oh0, stride_h), em.mul(kh, dilation_h)), em.mul(kw, dilation_w)],
                       window, [0, 0, 0], [tcn, toh, OW], [1, stride_h, stride_w])
                w_row = em.add(em.mul(em.add(em.add(em.mul(group, taps), em.mul(kh, KW)), kw), Og), o0)
                em.dma(packed, [w_row, c0], w_tile, z, [to, tcn])
                emit_tile_product(ctx, Bf16Tile(w_tile, None), Bf16Tile(x_tile, None), acc, to, tcn, tp,
                                  width_outer=True)

            em.range(KH, lambda kh: em.range(KW, lambda kw: tap(kh, kw)))

        em.tiles(Cg, TC, channel_step)
        r0 = em.add(em.mul(group, Og), o0)
        if bias_col is not None and bias_tile is not None:
            em.dma(bias_col, [r0, 0], bias_tile, z, [to, 1])
        if scale_col is not None and scale_tile is not None:
            em.dma(scale_col, [r0, 0], scale_tile, z, [to, 1])
        frame = TileFrame(*frame_groups, n, r0, em.mul(oh0, OW), to, tp)
        out = emit_epilogue(ctx, epi, acc, to, tp, bias_tile, scale_tile, out_tile, "col", frame, result)
        em.dma(out, z, out2, [em.add(em.mul(n, O), r0), em.mul(oh0, OW)], [to, tp])

    em.range(N, lambda n: em.range(groups, lambda gi: em.tiles(
        Og, TO, lambda o0, to: em.tiles(OH, TOH, lambda oh0, toh: tile(n, gi, o0, to, oh0, toh)))))
