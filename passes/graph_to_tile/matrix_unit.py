"""What the matrix-unit kernels (gemm.py, conv.py, attention.py) share: bf16 operands.

The matrix unit multiplies bf16 with fp32 accumulation. `precision=bf16` rounds each operand
to bf16 once (one exception, in packed_gemm.py and paged_kv.py: a decode step's packed products
on at most 7 rows, and on server its attention's values, take that operand in two passes hi + lo,
which the idle array pays for while the next weight tile loads; docs/gguf.md);
`precision=fp32` emulates fp32 products with three bf16 passes
hi*hi + hi*lo + lo*hi (hi = bf16(x), lo = bf16(x - hi); the dropped lo*lo term leaves ~2^-16
relative error per product): activations are split on the vector unit (`split_on_chip`: copy,
sub, copy), weights at compile time (`packed_weight_parts`: `<name>.packed_hi` / `_lo`).
`emit_tile_product` cuts a tile product into matmuls of the array's size.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import bf16
from xdsl.ir import SSAValue

from infer.dialects.dtypes import num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Emitter, Index
from infer.passes.graph_to_tile.context import KERNEL_OVERLAP_SHARE, LoweringContext


@dataclass(frozen=True)
class Bf16Tile:
    """A matrix operand tile on chip: its bf16 `hi` part and, for fp32 emulation, `lo`."""

    hi: SSAValue
    lo: SSAValue | None


def alloc_bf16_tile(ctx: LoweringContext, rows: int, cols: int, buffers: int = 2) -> Bf16Tile:
    """Scratchpad tiles (double-buffered by default) for the bf16 part(s) of a [rows, cols]
    operand."""
    em = ctx.emitter
    hi = em.alloc((rows, cols), bf16, "spad", buffers)
    lo = em.alloc((rows, cols), bf16, "spad", buffers) if ctx.bf16_copies == 2 else None
    return Bf16Tile(hi, lo)


def split_on_chip(em: Emitter, src: SSAValue, dst: Bf16Tile, rows: int, cols: int,
                  dst_at: tuple[Index, Index] = (0, 0)) -> None:
    """dst.hi = bf16(src); for fp32 emulation also dst.lo = bf16(src - hi) (`Emitter.round_parts`);
    the box of dst starts at `dst_at`."""
    em.round_parts(src, (0, 0), dst.hi, dst.lo, dst_at, rows, cols)


def packed_weight_parts(ctx: LoweringContext, hint: str, array: np.ndarray) -> list[SSAValue]:
    """A pre-packed weight as bf16 `tile.weight`s: `hint` (bf16), or `hint_hi` and `hint_lo`
    (fp32 emulation, lo = bf16(w - hi))."""
    w32 = array.astype(np.float32)
    hi = w32.astype(ml_dtypes.bfloat16)
    if ctx.bf16_copies == 1:
        return [ctx.weight(hint, hi, bf16)]
    lo = (w32 - hi.astype(np.float32)).astype(ml_dtypes.bfloat16)
    return [ctx.weight(hint + "_hi", hi, bf16), ctx.weight(hint + "_lo", lo, bf16)]


def emit_tile_product(ctx: LoweringContext, lhs: Bf16Tile, rhs: Bf16Tile, acc: SSAValue, rows: int,
                      depth: int, width: int, *, width_outer: bool = False,
                      lhs_at: tuple[Index, Index] = (0, 0), rhs_at: tuple[Index, Index] = (0, 0),
                      acc_at: tuple[Index, Index] = (0, 0), overwrite: bool = False,
                      rhs_transposed: bool = False) -> None:
    """acc[:rows, :width] += lhs[:rows, :depth] @ rhs[:depth, :width] as array-sized matmuls
    (depth in steps of the array's rows, width in steps of its columns; the depth loop is the
    outer one unless `width_outer`), each one pass (bf16) or three (fp32 emulation). The boxes
    start at `lhs_at`, `rhs_at`, `acc_at`. `overwrite`: the first pass of the first depth step
    writes the accumulator instead of adding to it (that step is emitted before the loop).
    `rhs_transposed`: rhs holds the [width, depth] transpose (`rhs_at` indexes it), loaded
    through the weight path's transposer (`tile.matmul transpose_rhs`)."""
    em = ctx.emitter
    array_rows, array_cols = ctx.hw.matrix.rows, ctx.hw.matrix.cols

    def product(k0: Index, k: int, n0: Index, n: int, first: bool = False) -> None:
        lhs_i = [lhs_at[0], em.add(lhs_at[1], k0)]
        rhs_i = ([em.add(rhs_at[0], n0), em.add(rhs_at[1], k0)] if rhs_transposed
                 else [em.add(rhs_at[0], k0), em.add(rhs_at[1], n0)])
        acc_i = [acc_at[0], em.add(acc_at[1], n0)]
        t = rhs_transposed
        em.matmul(lhs.hi, lhs_i, rhs.hi, rhs_i, acc, acc_i, rows, k, n, accumulate=not first, transpose_rhs=t)
        if lhs.lo is not None and rhs.lo is not None:
            em.matmul(lhs.hi, lhs_i, rhs.lo, rhs_i, acc, acc_i, rows, k, n, transpose_rhs=t)
            em.matmul(lhs.lo, lhs_i, rhs.hi, rhs_i, acc, acc_i, rows, k, n, transpose_rhs=t)

    def over_width(k0: Index, k: int, first: bool = False) -> None:
        em.tiles(width, array_cols, lambda n0, n: product(k0, k, n0, n, first))

    first_depth = min(depth, array_rows) if overwrite else 0

    def over_depth(n0: Index, n: int) -> None:
        if overwrite:
            product(0, first_depth, n0, n, True)
        em.tiles(depth - first_depth, array_rows, lambda k0, k: product(em.add(k0, first_depth), k, n0, n))

    if width_outer:
        em.tiles(width, array_cols, over_depth)
    else:
        if overwrite:
            over_width(0, first_depth, True)
        em.tiles(depth - first_depth, array_rows, lambda k0, k: over_width(em.add(k0, first_depth), k))


#: DMAs a prefetched weight part is split into (prefetch_packed)
PREFETCH_PIECES = 8


def prefetch_packed(ctx: LoweringContext, packs: list[SSAValue], nest_spad: int, nest_acc: int,
                    share: float = KERNEL_OVERLAP_SHARE) -> Bf16Tile | None:
    """Cross-kernel weight prefetch: the whole pre-packed bf16 weight (each part, [rows, cols])
    DMAd into the scratchpad here, as the kernel's first instructions, into buffers live from
    the start of the kernel before (`LoweringContext.previous_nest`,
    `Emitter.live_from_previous`), so the planner gives them bytes that kernel does not use. The
    loads then wait for nothing (weights are read-only and their bytes free): the front end
    dispatches them while the kernel before still runs its last matmuls, epilogue and store,
    and only this kernel's first activation load waits for that store (packed_gemm.py's
    `_prefetch_next` does the same for resident packed products). The kernel then reads its weight tiles in place: no weight DMA in its
    loop nest, each weight byte read once. None when there is no kernel before in this block,
    or the weights do not fit beside that kernel's buffers and this kernel's (`nest_spad`,
    `nest_acc`: its other buffers) within `share` of each memory."""
    em = ctx.emitter
    shape = shape_of(packs[0])
    size = len(packs) * num_elements(shape) * 2
    if not ctx.room_beside_previous(em.insert_point.block, nest_spad + size, nest_acc, share):
        return None
    parts = [em.alloc(shape, bf16, "spad") for _ in packs]
    for part in parts:
        em.live_from_previous(part)
    # pieces of at most 1/PREFETCH_PIECES of a part (and of one DMA's n0 bytes): the kernel
    # before's stores come first in program order and take their DRAM slots first, and a
    # transfer occupies one unbroken slot (docs/isa.md), so a whole-weight DMA waited for a gap
    # as long as itself (Llama prefill server, gate projection: 6.7 K cycles for 1.4 MB)
    rows = max(1, min(tiling_cost.dma_box_limits()[0] // (shape[1] * 2), -(-shape[0] // PREFETCH_PIECES)))
    for src, dst in zip(packs, parts, strict=True):
        for r0 in range(0, shape[0], rows):
            em.dma(src, [r0, 0], dst, [r0, 0], [min(rows, shape[0] - r0), shape[1]])
    return Bf16Tile(parts[0], parts[1] if len(parts) > 1 else None)
