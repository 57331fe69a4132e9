"""Depthwise convs on the vector unit: graph.conv2d with one input and one output channel per
group (MobileNet's 3x3 depthwise convs), where the cost model finds it faster than the matrix
unit's merged groups (grouped_conv.py).

On the matrix unit a depthwise conv uses one row of the array per channel, or r channels with
r - 1 of every r weights zero when r groups are merged: on server (128x128) its 3x3 convs ran
at 2-18 % of their roofline even merged. The vector unit does the conv's own MACs: per tile of
TC channels x TOH output rows, the windows are built on chip as max pooling builds them
(pooling.lower_max_pool_windows: windows.WindowLoader, the border filled with 0), and each tap
is two vector instructions over the [TC, TOH.Wq] result (padded-width rows, as conv.py's
tiles): a `mul` of the tap's shifted plane window by the tap's weight of each channel (bmode
col: one value per row, read from the [C, KH.KW] weight table loaded once), and an `add` into
the result, which starts as the first tap's product (no zeroing: 960 channels at 7x7 on server
4,454 -> 4,214 cycles). Then the bias (one `add`, bmode col), the conv's fused epilogue
(elementwise.apply_epilogue) and the store (conv_store.store_output_tile: bf16 outputs rounded
into a compact tile). The taps are loops per stride-phase plane (pooling.over_plane_taps).

The products and sums are fp32 on the activations as held (bf16 where the producer narrowed
them); the matrix unit rounds activations and weights to bf16 first, so in bf16 precision this
path is the more accurate one. Chosen per conv by the cost model (`choose_depthwise_tiles`, the
pooling estimate with two instructions per tap, against the matrix unit's fastest merge;
conv.lower_conv), a choice autotuning measures too: on server the late convs of MobileNetV2 go
to the vector unit, on edge (16 lanes against a 16x16 array) the latest few. The tiles' buffers
rotate on the channel tiles' loop too (`rotates_channel_tiles`). Not for int8 convs nor with
tile overrides (an override sizes the matrix unit's tiles).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import f32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import LoweringContext, latency_bound
from infer.passes.graph_to_tile.conv_store import store_output_tile
from infer.passes.graph_to_tile.elementwise import TileFrame, apply_epilogue
from infer.passes.graph_to_tile.planes import Planes
from infer.passes.graph_to_tile.pooling import first_tap, over_plane_taps, window_pool_buffers, window_pool_estimate
from infer.passes.graph_to_tile.windows import WindowLoader, copies_kept_rows, kept_window, row_tiles


def is_depthwise(op: g.Conv2dOp) -> bool:
    """One input and one output channel per group."""
    _, C, _, _ = shape_of(op.input)
    O, Cg, _, _ = shape_of(op.weight)
    return op.groups.value.data == C == O and Cg == 1


def rotates_channel_tiles(N: int, C: int, TC: int) -> bool:
    """Do the tiles' buffers rotate on the loop over images and channel tiles (two or more
    tiles): each tile's window then loads while the tile before computes, row loop or not.
    (Single-buffered, a 576-channel stride-2 conv at 14x14 in 16-channel tiles on edge waited
    for each tile's load in series: 152,255 cycles, 66,500 double-buffered.)"""
    return N * -(-C // TC) >= 2


def choose_depthwise_tiles(hw, N: int, C: int, p: Planes, in_bytes: int, out_bytes: int, epi_cost: int,
                           epi_bytes) -> tuple[int, int, int] | None:
    """(TC, TOH, cycles) of the fastest tiling whose buffers fit: per looped set (double-
    buffered) and edge set (double where the channel tiles rotate, else single) the pooling
    windows, the result, the tap product and the epilogue's tiles, besides the weight table and
    the bias. `epi_cost`: vector cost units per
    group of result elements outside the taps (the zeroing, the bias, the epilogue)."""
    cost = hw.vector.cost
    best = None
    fixed = 4 * C * (p.KH * p.KW + 1)
    for tc in tiling_cost.pow2_candidates(C, 1):
        rotating = rotates_channel_tiles(N, C, tc)
        for toh in tiling_cost.pow2_candidates(p.OH, 1):
            one_set = (window_pool_buffers(p, tc, toh, in_bytes, out_bytes) + 4 * tc * toh * p.Wq
                       + epi_bytes(tc, toh * p.Wq))
            if (4 if rotating else 3) * one_set + fixed > hw.memory.scratchpad_bytes:
                continue
            cycles = window_pool_estimate(hw, N * -(-C // tc) * tc, p, tc, toh, in_bytes, out_bytes,
                                          tap=(cost["mul"] + cost["add"], 2), result_cost=epi_cost,
                                          rotating=rotating)
            if best is None or cycles < best[2]:
                best = (tc, toh, cycles)
    return best


def vector_tiles(ctx: LoweringContext, op: g.Conv2dOp, result: SSAValue, p: Planes, epi_cost: int,
                 epi_bytes) -> tuple[int, int, int] | None:
    """(TC, TOH, cycles) of the depthwise conv `op` on the vector unit (`choose_depthwise_tiles`
    for the activations as held); `epi_cost` / `epi_bytes`: its fused epilogue's vector cost
    units per group of result elements and its buffers per [rows, cols] tile."""
    N, C, _, _ = shape_of(op.input)
    in_bytes = 2 if ctx.held_as_bf16(op.input) else 4
    out_bytes = 2 if ctx.narrows(result) else 4
    # (the first tap has no add: its product starts the result)
    return choose_depthwise_tiles(ctx.hw, N, C, p, in_bytes, out_bytes, epi_cost - ctx.hw.vector.cost["add"], epi_bytes)


def lower_depthwise_on_vector(ctx: LoweringContext, op: g.Conv2dOp, epilogue: Sequence[Operation],
                              result: SSAValue, p: Planes, name: str, choice: tuple[int, int, int],
                              matrix_cycles: int) -> None:
    """Lower the depthwise conv `op` and its fused `epilogue` on the vector unit with the tiles
    of `choice` (`vector_tiles`); `matrix_cycles`: the matrix unit's estimate (printed)."""
    em = ctx.emitter
    N, C, _, _ = shape_of(op.input)
    KH, KW = p.KH, p.KW
    TC, TOH, cycles = choice
    ctx.predict(cycles)
    ctx.debug(f"[graph-to-tile] {name}: depthwise conv2d C={C} P={p.OH}x{p.OW} taps={KH}x{KW}"
              + (f" stride={p.stride[0]}x{p.stride[1]}" if p.stride != (1, 1) else "") + f" batch={N} on the vector "
              f"unit: channels x output rows per tile = {TC}x{TOH}: est {cycles} cycles (matrix unit: {matrix_cycles})")
    OH, OW, Wq = p.OH, p.OW, p.Wq
    # (the output's DRAM alloc before any code: an alloc after code starts another kernel,
    # prefetch_hoist.kernel_groups' rule, the op markers')
    out3 = em.view(ctx.narrow_output_buffer(result), (N * C, OH, OW))
    w = np.asarray(ctx.constant(op.weight), np.float32).reshape(C, KH * KW)
    taps = em.alloc((C, KH * KW), f32, "spad")
    em.dma(ctx.weight(f"{name}.taps", w, f32), [0, 0], taps, [0, 0], [C, KH * KW])
    bias = None
    if op.bias is not None:
        bias = em.alloc((C, 1), f32, "spad")
        em.dma(em.view(ctx.buffer(op.bias), (C, 1)), [0, 0], bias, [0, 0], [C, 1])
    x = ctx.buffer(op.input)
    rotating_channels = rotates_channel_tiles(N, C, TC)
    sets: dict[bool, tuple[WindowLoader, SSAValue, SSAValue]] = {}
    pools: dict[bool, dict] = {True: {}, False: {}}

    def buffers(looped: bool) -> tuple[WindowLoader, SSAValue, SSAValue]:
        if looped not in sets:
            with em.no_pool():
                count = 2 if looped or rotating_channels else 1
                # the input rows copied from the kernel before's output kept on chip, if it is
                kept = kept_window(ctx, x, (C, p.H * p.W)) if copies_kept_rows(p, N) else None
                loader = WindowLoader(ctx, p, x, C, TC, TOH, pixel_major=False, targets=[f32], border=0.0,
                                      buffers=count, kept=kept)
                sets[looped] = (loader, em.alloc((TC, TOH * Wq), f32, "spad", count),
                                em.alloc((TC, TOH * Wq), f32, "spad", count))
        return sets[looped]

    def tile(n: Index, c0: Index, tc: int, oh0: Index, toh: int, top: int, bottom: int, looped: bool) -> None:
        loader, acc, product = buffers(looped)
        with em.alloc_pool(pools[looped], single=not (looped or rotating_channels)):
            loader.load(n, c0, oh0, toh, tc, top, bottom)
            tq = toh * Wq
            # the first tap's product is the result's start (no zeroing, no add)
            plane, row, col, k = first_tap(p)
            em.vec("mul", acc, [0, 0], loader.windows[plane][0], [0, row * Wq + col], tc, tq, taps, [c0, k],
                   bmode="col")

            def tap(plane: int, row: Index, col: Index, k: Index) -> None:
                em.vec("mul", product, [0, 0], loader.windows[plane][0], [0, em.add(em.mul(row, Wq), col)], tc, tq,
                       taps, [c0, k], bmode="col")
                em.vec("add", acc, [0, 0], acc, [0, 0], tc, tq, product, [0, 0], bmode="tile")

            over_plane_taps(em, p, tap, with_tap=True, after_first=True)
            if bias is not None:
                em.vec("add", acc, [0, 0], acc, [0, 0], tc, tq, bias, [c0, 0], bmode="col")
            frame = TileFrame((N,), (C,), (OH, OW), n, c0, em.mul(oh0, OW), tc, tq, Wq if Wq != OW else 0, oh0)
            out = apply_epilogue(ctx, epilogue, {op.results[0]: acc}, frame, result)
            # (the one tile, kept on chip for the next kernels where the DRAM latency is long)
            whole = N == 1 and tc == C and toh == p.OH and latency_bound(ctx.hw)
            store_output_tile(ctx, p, out3, out, em.add(em.mul(n, C), c0), oh0, tc, toh, whole)

    em.range(N, lambda n: em.tiles(C, TC, lambda c0, tc: row_tiles(
        em, p, TOH, True, lambda oh0, toh, top, bottom, looped: tile(n, c0, tc, oh0, toh, top, bottom, looped))))
