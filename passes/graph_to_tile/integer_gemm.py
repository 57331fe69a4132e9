"""graph.linear_integer and graph.matmul_integer (compile-time right operand) on the matrix
unit's int8 path, with the integer epilogue (integer_epilogue.py).

The loop nest is gemm.py's: `m` (TM activation rows) -> `n` -> `k`; `fill acc 0` (int32);
per k step one DMA of the int8 activation tile x[m0:, k0:] into a staging tile and one
`vec.copy` into the tile the matmuls read (as gemm.py's bf16 split, minus the conversion:
measured on the edge 1024^3 GEMM, matmuls reading the DMA'd tile directly serialized with
the loads, 8.9M cycles against 5.0M with the copy), and one DMA of the pre-packed
int8 weight tile ([N/TN][Kp][TN], as gemm.py packs bf16); array-sized int8 matmuls
(matrix_unit.emit_tile_product) accumulate exactly into the int32 tile. Then the epilogue
(bias with the input zero point folded in, relu, requant to int8 or dequantize to f32 and the
float ops after it) and one DMA store of the int8 / f32 tile.

A batched lhs against a 2-D constant rhs is one [batch*M, K] GEMM. Supported: i8 operands,
weight zero point 0 (symmetric weights, what graph-quantize writes), any input zero point.
Tile sizes come from tiling_cost.choose_gemm with int8 bytes and the int8 MAC rate
(`matrix.macs_per_pe`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import f32, i8, i32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index, tile_extents
from infer.passes.graph_to_tile.context import LoweringContext, error
from infer.passes.graph_to_tile.elementwise import TileFrame
from infer.passes.graph_to_tile.integer_epilogue import (
    IntegerEpilogue,
    emit_epilogue,
    epilogue_scratchpad,
    int_output_buffer,
    parse_epilogue,
    require_signed_int8,
)
from infer.passes.graph_to_tile.matrix_unit import Bf16Tile, emit_tile_product


def folded_bias(op: Operation, weight_t: np.ndarray, bias: np.ndarray | None, input_zero_point: int) -> np.ndarray | None:
    """b - zx * sum_k W[k, n] (int32; None when there is neither a bias nor a zero point)."""
    if bias is None and input_zero_point == 0:
        return None
    total = np.zeros(weight_t.shape[1], np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
    total = total - input_zero_point * weight_t.astype(np.int64).sum(axis=0)
    if np.any(np.abs(total) >= 2**31):
        raise error(op, "the bias with the input zero point folded in leaves int32")
    return total.astype(np.int32)


def _operands(ctx: LoweringContext, op: Operation) -> tuple[SSAValue, np.ndarray, np.ndarray | None, int]:
    """(lhs, W^T [K, N] int8, the int32 bias or None, the input zero point)."""
    if isinstance(op, g.LinearIntegerOp):
        x, w_zp, x_zp = op.input, op.weight_zero_point.value.data, op.input_zero_point.value.data
        w = ctx.constant(op.weight)
        if w is None:
            raise error(op, "linear_integer needs a compile-time weight")
        w_t = np.asarray(w).T
        bias = ctx.constant(op.bias) if op.bias is not None else None
        if op.bias is not None and bias is None:
            raise error(op, "linear_integer needs a compile-time bias")
        require_signed_int8(op, op.input, op.weight)
    else:
        assert isinstance(op, g.MatmulIntegerOp)
        x, w_zp, x_zp = op.lhs, op.rhs_zero_point.value.data, op.lhs_zero_point.value.data
        w = ctx.constant(op.rhs)
        if w is None or len(shape_of(op.rhs)) != 2:
            raise error(op, "matmul_integer on the NPU needs a 2-D compile-time rhs (two runtime int8 operands "
                        "are not supported yet)")
        if op.transpose_a.value.data or len(shape_of(op.lhs)) < 2:
            raise error(op, "matmul_integer needs an lhs of rank >= 2 without transpose_a")
        w_t = np.asarray(w).T if op.transpose_b.value.data else np.asarray(w)
        bias = None
        require_signed_int8(op, op.lhs, op.rhs)
    if "int8" not in ctx.hw.matrix.dtypes:
        raise error(op, f"target '{ctx.hw.name}' has no int8 matrix unit")
    if w_zp != 0:
        raise error(op, f"weight zero point {w_zp}: the NPU lowering takes symmetric weights (zero point 0)")
    return x, np.ascontiguousarray(w_t), bias, x_zp


def lower_integer_gemm(ctx: LoweringContext, op: Operation, epilogue: Sequence[Operation], result: SSAValue) -> None:
    em, hw = ctx.emitter, ctx.hw
    x, w_t, bias, x_zp = _operands(ctx, op)
    K, N = w_t.shape
    out_shape = shape_of(op.results[0])
    M = num_elements(out_shape[:-1])
    epi: IntegerEpilogue = parse_epilogue(ctx, op, epilogue, result, N, len(out_shape) - 1)
    bias = folded_bias(op, w_t, bias, x_zp)
    frame_groups = ((), tuple(out_shape[:-1]), (N,))
    name = ctx.kernel_name()
    epi_bytes = epilogue_scratchpad(ctx, epi, result, frame_groups, bias is not None)
    vectors = (bias is not None) + (epi.scale is not None)

    def footprint(tm: int, tn: int, tk: int) -> tuple[int, int]:
        # int8 x staging and tile, weight tile, bias and scale rows, the epilogue's tiles -- double
        # buffered; the int32 accumulator tile
        spad = 2 * (2 * tm * tk + tk * tn) + vectors * 2 * tn * 4
        spad += sum(epi_bytes(a, b) for a in tile_extents(M, tm) for b in tile_extents(N, tn))
        return spad, 2 * tm * tn * 4

    out_bytes = epi.stored_bytes
    spec = tiling_cost.GemmSpec(
        lhs_bytes=1, lhs_split=True, rhs_bytes=1, rhs_split=False, passes=1, matmul_dtype="int8",
        epi_cost=epi.vector_cost(ctx, bias is not None, per_row=False), out_bytes=out_bytes, footprint=footprint)
    rows_limit = tiling_cost.dma_box_limits()[1]  # TM rows: one strided DMA box
    choice = tiling_cost.choose_gemm(hw, M, N, K, spec, override=ctx.override(name, 3),
                                     tm_cands=tiling_cost.pow2_candidates(M, hw.matrix.rows, rows_limit))
    TM, TN, TK = choice.tiles
    ctx.debug(tiling_cost.describe_choice(name, op.name.split(".")[1] + " (int8)", f"M={M} N={N} K={K}", choice))
    # pre-packed int8 weights: [N/TN tiles][Kp][TN] so one weight tile is one contiguous DMA
    Kp, Np = -(-K // TK) * TK, -(-N // TN) * TN
    padded = np.zeros((Kp, Np), np.int8)
    padded[:K, :N] = w_t
    blocked = padded.reshape(Kp, Np // TN, TN).transpose(1, 0, 2).reshape(Np // TN * Kp, TN)
    weight_value = op.operands[1]
    hint = (weight_value.owner.weight_key if isinstance(weight_value.owner, g.WeightOp) else f"{name}.weight")
    packed = ctx.weight(hint + ".packed", np.ascontiguousarray(blocked), i8)
    bias_row = ctx.weight(f"{hint}.bias_folded", bias.reshape(1, N), i32) if bias is not None else None
    scale_row = ctx.weight(f"{name}.{epi.kind}_scale", epi.scale.reshape(1, N), f32) if epi.scale is not None else None
    xv = em.view(ctx.buffer(x), (M, K))
    out2 = em.view(int_output_buffer(ctx, result), (M, N))
    # local buffers
    x_staging = em.alloc((TM, TK), i8, "spad", 2)
    x_tile = em.alloc((TM, TK), i8, "spad", 2)
    w_tile = em.alloc((TK, TN), i8, "spad", 2)
    acc = em.alloc((TM, TN), i32, "acc", 2)
    bias_tile = em.alloc((1, TN), i32, "spad", 2) if bias_row is not None else None
    scale_tile = em.alloc((1, TN), f32, "spad", 2) if scale_row is not None else None
    out_tile = em.alloc((TM, TN), epi.out_element(), "spad", 2) if epi.kind != "acc" else None
    z = [0, 0]

    def tile_body(m0: Index, tm: int, n_tile: Index, n0: Index, tn: int) -> None:
        em.fill(acc, z, tm, tn, 0.0)

        def k_step(k0: Index, tk: int) -> None:
            em.dma(xv, [m0, k0], x_staging, z, [tm, tk])
            em.vec("copy", x_tile, z, x_staging, z, tm, tk)
            em.dma(packed, [em.add(em.mul(n_tile, Kp), k0), 0], w_tile, z, [TK, TN])
            emit_tile_product(ctx, Bf16Tile(x_tile, None), Bf16Tile(w_tile, None), acc, tm, tk, tn)

        em.tiles(K, TK, k_step)
        if bias_row is not None and bias_tile is not None:
            em.dma(bias_row, [0, n0], bias_tile, z, [1, tn])
        if scale_row is not None and scale_tile is not None:
            em.dma(scale_row, [0, n0], scale_tile, z, [1, tn])
        frame = TileFrame(*frame_groups, 0, m0, n0, tm, tn)
        out = emit_epilogue(ctx, epi, acc, tm, tn, bias_tile, scale_tile, out_tile, "row", frame, result)
        em.dma(out, z, out2, [m0, n0], [tm, tn])

    def over_n(m0: Index, tm: int) -> None:
        em.counted_tiles(N, TN, lambda j, n0, tn: tile_body(m0, tm, j, n0, tn))

    em.tiles(M, TM, over_n)
