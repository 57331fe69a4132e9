"""Pooling on the vector unit: graph.max_pool2d / avg_pool2d and the global pools.

* windowed: the input's stride-phase planes prepared once in DRAM (planes.py; -inf around
  the data for max, 0 for avg; the padding extended at the bottom and right so every window,
  ceil_mode included, stays inside), then per tap, a stride-1 shift of one plane, one window
  DMA [TR, TOH, OW] of whole contiguous rows (a strided window DMA would move one element per
  burst) and a vector `max`/`add` into the running result; avg multiplies by a compile-time
  1/count row (count_include_pad and ceil-mode rules).
* max pooling with its windows built on chip (`lower_max_pool_windows`, chosen when the cost
  model finds it faster than the planes, `window_pool_estimate`): per tile of TC channels x TOH
  output rows the input rows the window needs are loaded once (whole rows, one DMA per row
  phase) and the vector unit takes the stride's column phases and fills the border
  (windows.WindowLoader, -inf), so no plane goes through DRAM; each tap is then a flat shift of
  one plane window (output pixel q = oh.Wq + ow, as conv.py's padded-width windows) and one
  vector `max` into the [TC, TOH.Wq] result (which starts as a copy of the first tap's window),
  whose valid [TC, TOH, OW] box is stored; kernels up to 3x3 of more than 4 taps take a row
  max per row phase and then a column max of those instead (`separable_taps`: 6 `max` per
  tile for 3x3/2, not a copy and 8). (ResNet-50's 3x3/2 max pool: server 37.9 K -> 11.8 K
  cycles, edge 1.48 M -> 0.40 M; the planes path read the input, wrote and read its planes and
  issued nine tap DMAs per tile in series.)
* max pooling of stride 2 over an even map (2x2, or 3x3 with padding 1): its taps read the
  staged input rows in place by strided vector ops, no phase planes built
  (pooling_strided.py), where the cost model finds that faster than both paths above
  (ResNet-50's 3x3/2 pool inside the model: server 9.3 K -> 3.3 K cycles, reading the stem's
  output kept on chip in place; edge 263 K -> 162 K).
* global: `rsum`/`rmax` over column chunks of [N*C, H*W] rows, combined per row.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import bf16, f32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index
from infer.passes.tiling_cost import dma_round_trip
from infer.passes.graph_to_tile.context import MAX_IDENTITY, LoweringContext
from infer.passes.graph_to_tile.planes import Planes, prepare_estimate, prepare_planes
from infer.passes.graph_to_tile.pooling_strided import lower_stride_two_pool
from infer.passes.graph_to_tile.reductions import reduce_rows
from infer.passes.graph_to_tile.windows import WindowLoader, gathers_columns, row_tile_plan, row_tiles, staged_width


def _average_divisors(op: g.AvgPool2dOp, H: int, W: int, OH: int, OW: int) -> np.ndarray:
    """Per output pixel, the number of input elements its window averages."""
    KH, KW = g.i64_values(op.kernel)
    stride_h, stride_w = g.i64_values(op.stride)
    top, left, bottom, right = g.i64_values(op.padding)
    count = np.zeros((OH, OW), np.float64)
    include_pad = bool(op.count_include_pad.value.data)
    lo_h, hi_h = (-top, H + bottom) if include_pad else (0, H)
    lo_w, hi_w = (-left, W + right) if include_pad else (0, W)
    for i in range(OH):
        a = i * stride_h - top
        rows = max(0, min(a + KH, hi_h) - max(a, lo_h))
        for j in range(OW):
            b = j * stride_w - left
            count[i, j] = rows * max(0, min(b + KW, hi_w) - max(b, lo_w))
    return count


def lower_window_pool(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.MaxPool2dOp | g.AvgPool2dOp)
    em = ctx.emitter
    N, C, H, W = shape_of(op.input)
    _, _, OH, OW = shape_of(op.results[0])
    KH, KW = g.i64_values(op.kernel)
    stride_h, stride_w = g.i64_values(op.stride)
    dilation_h, dilation_w = g.i64_values(op.dilation) or (1, 1)
    top, left, bottom, right = g.i64_values(op.padding)
    is_max = isinstance(op, g.MaxPool2dOp)
    # pad bottom/right so every window (ceil_mode included) stays inside
    need_h = (OH - 1) * stride_h + (KH - 1) * dilation_h + 1
    need_w = (OW - 1) * stride_w + (KW - 1) * dilation_w + 1
    bottom = max(bottom, need_h - H - top)
    right = max(right, need_w - W - left)
    p = Planes(H, W, KH, KW, (stride_h, stride_w), (dilation_h, dilation_w), (top, left, bottom, right), OH, OW)
    if is_max and lower_max_pool_windows(ctx, op, p, N * C):
        return
    (planes,) = prepare_planes(ctx, ctx.buffer(op.input), N * C, p, "f32", 1, MAX_IDENTITY if is_max else 0.0)
    planes3 = em.view(planes, (N * C, len(p.phases) * p.Hq, p.Wq))  # [plane rows of every phase, Wq]
    name = ctx.kernel_name()
    override = ctx.override(name, 2)

    def rows_per_tile(tcn: int) -> int:
        return max(1, min(OH, tcn // OW))

    def footprint(tr: int, tcn: int) -> int:  # window + running result [TR, TOH*OW] x2, 1/count row x2
        tp = rows_per_tile(tcn) * OW
        return 2 * 2 * tr * tp * 4 + (0 if is_max else 2 * tp * 4)

    choice = tiling_cost.choose_rows(ctx.hw, N * C, OH * OW, bytes_in=4 * KH * KW, bytes_out=4,
                                     vec_cost=KH * KW + 1, live_tiles=3, override=(override[0] if override else None),
                                     footprint=footprint, rounds=KH * KW)  # one load, then a max/add per tap
    TR = choice.rows
    TOH = override[1] if override else rows_per_tile(choice.cols)
    ctx.predict(choice.cycles)
    ctx.debug(tiling_cost.describe_rows(name, op.name.split(".")[1], f"{N}x{C}x{H}x{W} window {KH}x{KW}", choice)
              + f"\n[graph-to-tile] {name}:   channels x output rows per tile = {TR}x{TOH}")
    out2 = em.view(ctx.output_buffer(op.results[0]), (N * C, OH * OW))
    window = em.alloc((TR, TOH, OW), f32, "spad", 2)
    window2 = em.view(window, (TR, TOH * OW))
    acc = em.alloc((TR, TOH * OW), f32, "spad", 2)
    z = [0, 0]
    reciprocal = reciprocal_tile = None
    if isinstance(op, g.AvgPool2dOp):
        count = _average_divisors(op, H, W, OH, OW)
        reciprocal = ctx.weight(f"{name}.recip_count",
                                (1.0 / np.maximum(count, 1)).reshape(1, OH * OW).astype(np.float32), f32)
        reciprocal_tile = em.alloc((1, TOH * OW), f32, "spad", 2)

    def tile(r0: Index, tr: int, oh0: Index, toh: int) -> None:
        tp = toh * OW
        em.fill(acc, z, tr, tp, MAX_IDENTITY if is_max else 0.0)

        def tap(plane: int, row: Index, col: Index) -> None:  # the tap reads plane rows oh0 + row.., cols col..
            em.dma(planes3, [r0, em.add(em.add(oh0, plane * p.Hq), row), col], window, [0, 0, 0], [tr, toh, OW])
            em.vec("max" if is_max else "add", acc, z, acc, z, tr, tp, window2, z, bmode="tile")

        over_plane_taps(em, p, tap)
        if reciprocal is not None and reciprocal_tile is not None:
            em.dma(reciprocal, [0, em.mul(oh0, OW)], reciprocal_tile, z, [1, tp])
            em.vec("mul", acc, z, acc, z, tr, tp, reciprocal_tile, z, bmode="row")
        em.dma(acc, z, out2, [r0, em.mul(oh0, OW)], [tr, tp])

    em.tiles(N * C, TR, lambda r0, tr: em.tiles(OH, TOH, lambda oh0, toh: tile(r0, tr, oh0, toh)))


#: max pooling takes its taps as a row max then a column max (`separable_taps`) for kernels up
#: to this size each way: their straight-line `max` ops stay few (a 3x3/2 pool: 6 instead of a
#: copy and 8); larger kernels keep the looped taps, and so do kernels of 4 taps or fewer (a
#: 2x2/2 pool saves only the copy, and its row maxima's buffers and chained ops ran slower:
#: the demo CNN's on edge 1,736 -> 2,088 cycles)
SEPARABLE_MAX_KERNEL = 3


def separable_taps(p: Planes) -> list[tuple[list[tuple[int, int]], list[int]]] | None:
    """Max pooling's taps split by row phase: per row phase, the (plane, column shift) of each
    kernel column (its row max: one [TC, rows.Wq] `max` per column after the first, over the
    plane rows its kernel rows read) and the row shift of each of its kernel rows (the column
    max of those row maxima). The maximum of the same elements, so the same value (max is
    exact; a NaN anywhere gives NaN either way). None for kernels larger than
    SEPARABLE_MAX_KERNEL or of 4 taps or fewer."""
    if max(p.KH, p.KW) > SEPARABLE_MAX_KERNEL or p.KH * p.KW <= 4:
        return None
    (sh, sw), (dh, dw) = p.stride, p.dilation
    return [([(p.phases.index((rp, (dw * kw) % sw)), (dw * kw) // sw) for kw in range(p.KW)],
             [(dh * kh) // sh for kh in range(p.KH) if (dh * kh) % sh == rp])
            for rp in sorted({rp for rp, _ in p.phases})]


def _row_max_rows(toh: int, shifts: list[int]) -> int:
    """Plane rows a row phase's row maxima cover for a tile of toh output rows (its kernel
    rows' row shifts: the last one reads that many rows further)."""
    return toh + max(shifts)


def window_pool_buffers(p: Planes, tc: int, toh: int, in_bytes: int = 4, out_bytes: int = 4,
                        separable: bool = False) -> int:
    """Scratchpad bytes of one set of `lower_max_pool_windows`' buffers: the staging rows of
    every row phase (the input's element type), the gathered column phase (strides), the plane
    windows and the result (f32), for a bf16 output the compact tile it is stored from, and
    with `separable` taps the row maxima of each row phase of several kernel columns (f32)."""
    sep = separable_taps(p) if separable else None
    row_max = sum(tc * _row_max_rows(toh, rows) * p.Wq for cols, rows in sep if len(cols) > 1) if sep else 0
    nw = -(-p.W // p.stride[1])
    rq = p.window_rows(toh)
    row_phases = len({rp for rp, _ in p.phases})
    staging = row_phases * tc * rq * staged_width(p, False)  # (WindowLoader's, channel-major)
    gathered = tc * rq * nw if gathers_columns(p, False) else 0
    compact = tc * toh * p.OW * out_bytes if out_bytes != 4 else 0
    return (in_bytes * staging + 4 * (gathered + len(p.phases) * tc * p.window_length(toh) + tc * toh * p.Wq + row_max)
            + compact)


def window_pool_estimate(hw, planes_count: int, p: Planes, tc: int, toh: int, in_bytes: int = 4,
                         out_bytes: int = 4, tap: tuple[int, int] | None = None, result_cost: int | None = None,
                         rotating: bool = False, separable: bool = False) -> int:
    """Cycles of `lower_max_pool_windows` for tiles of tc channels x toh output rows: the vector
    unit (window building and taps, in order) is the bottleneck once the first tile's rows
    arrived, the looped row tiles' loads double-buffered ahead of it; each reuse of the
    single-buffered edge tiles' set (windows reaching into the padding) waits for the tile
    before; without a loop of 3 or more row tiles every tile's load runs in series after the
    tile before; then the last store's round trip (as measured on server traces). `tap`: (vector
    cost units per group of result elements, instructions) of each tap, and `result_cost` the
    cost units per group outside the taps (default: max pooling's `max` per tap and its first
    tap's copy; depthwise.py's products and epilogue); `rotating`: the buffers rotate on the
    channel tiles' loop too (depthwise.py), so no tile's load waits for the tile before;
    `separable`: max pooling's row-then-column taps (`separable_taps`)."""
    L, cost, vlat = hw.vector.lanes, hw.vector.cost, hw.vector.latency
    tap_cost, tap_instrs = tap if tap is not None else (cost["max"], 1)
    result_cost = cost["max"] if result_cost is None else result_cost
    burst, bw = hw.dram.burst_bytes, hw.dram.bytes_per_cycle
    sw = p.stride[1]
    nw = -(-p.W // sw)
    row_phases = len({rp for rp, _ in p.phases})
    taps = p.KH * p.KW
    tiles, (lo, hi) = row_tile_plan(p, toh, True)
    channel_tiles = -(-planes_count // tc)

    def groups(n: int) -> int:
        return -(-n // L)

    def tile_cycles(rows: int) -> tuple[float, float, float]:
        rq = p.window_rows(rows)
        load = row_phases * tc * rq * (-(-p.W * in_bytes // burst) * burst)  # whole rows per row phase
        # per plane: the column phase gathered (strides), then placed between the border columns
        build = len(p.phases) * groups(tc * rq * nw) * cost["copy"] * (2 if sw > 1 else 1)
        result = groups(tc * rows * p.Wq)
        sep = separable_taps(p) if separable else None
        if sep:  # the row maxima (a max per kernel column after the first), then the column maxima
            terms = sum(len(shifts) for _, shifts in sep)
            maxes = sum(len(cols) - 1 for cols, _ in sep) + max(1, terms - 1)
            vector = build + cost["max"] * (sum(groups(tc * _row_max_rows(rows, shifts) * p.Wq) * (len(cols) - 1)
                                                for cols, shifts in sep) + result * max(1, terms - 1))
            vector += (maxes + 4) * vlat
        else:
            vector = build + result * (result_cost + taps * tap_cost) + (taps * tap_instrs + 4) * vlat
        if out_bytes != 4:
            vector += groups(tc * rows * p.OW) * cost["copy"] + vlat
        store = tc * (-(-rows * p.OW * out_bytes // burst) * burst if out_bytes != 4
                      else rows * (-(-p.OW * 4 // burst) * burst))
        return load, vector, store

    per_tile = [tile_cycles(rows) for _, rows, _, _ in tiles]
    vector = channel_tiles * sum(v for _, v, _ in per_tile)
    dram = channel_tiles * sum(ld + st for ld, _, st in per_tile) / bw
    reloads = 0.0
    if hi - lo < 3 and not rotating:
        # no loop, or a 2-trip one (not software-pipelined): every tile's load waits for the
        # tile before to free its buffers and runs in series
        reloads = (channel_tiles * len(tiles) - 1) * sum(dma_round_trip(hw, ld) for ld, _, _ in per_tile) / len(tiles)
    first_load, _, last_store = per_tile[0][0], 0, per_tile[-1][2]
    return int(dma_round_trip(hw, first_load) + max(vector, dram) + reloads + dma_round_trip(hw, last_store))


def choose_pool_windows(hw, planes_count: int, p: Planes, in_bytes: int = 4,
                        out_bytes: int = 4) -> tuple[int, int, int] | None:
    """(TC, TOH, cycles) of the fastest tiling of `lower_max_pool_windows` whose buffers fit
    (the looped tiles' double-buffered set and the edge tiles' single set), or None."""
    best = None
    separable = separable_taps(p) is not None
    for tc in tiling_cost.pow2_candidates(planes_count, 1):
        for toh in tiling_cost.pow2_candidates(p.OH, 1):
            if 3 * window_pool_buffers(p, tc, toh, in_bytes, out_bytes, separable) > hw.memory.scratchpad_bytes:
                continue
            cycles = window_pool_estimate(hw, planes_count, p, tc, toh, in_bytes, out_bytes, separable=separable)
            if best is None or cycles < best[2]:
                best = (tc, toh, cycles)
    return best


def lower_max_pool_windows(ctx: LoweringContext, op: g.MaxPool2dOp, p: Planes, planes_count: int) -> bool:
    """Max pooling over windows built on chip (see the module docstring), when the cost model
    finds it faster than the planes path (whose helper nest and tap loads it estimates with
    `prepare_estimate` and `choose_rows`); False: not taken, nothing emitted."""
    em, hw = ctx.emitter, ctx.hw
    # an override (TRxTOH) sizes the planes path's tiles: it keeps that path
    override = ctx.session.overrides.get(f"kernel{ctx.session.counter}")
    # activations held as bf16 in DRAM (storage.read_only_as_bf16_activations: a max pool
    # between a conv and the convs that read its result): rounding commutes with max
    in_bytes = 2 if ctx.held_as_bf16(op.input) else 4
    out_bytes = 2 if ctx.narrows(op.results[0]) else 4
    choice = choose_pool_windows(hw, planes_count, p, in_bytes, out_bytes) if override is None else None
    planes_path = prepare_estimate(hw, planes_count, p, "f32", 1, False) + tiling_cost.choose_rows(
        hw, planes_count, p.OH * p.OW, bytes_in=4 * p.KH * p.KW, bytes_out=4, vec_cost=p.KH * p.KW + 1, live_tiles=3,
        rounds=p.KH * p.KW).cycles
    # stride-2 windows read in place by strided vector ops, where faster than both (pooling_strided.py)
    rival = min(planes_path, choice[2]) if choice is not None else planes_path
    if override is None and lower_stride_two_pool(ctx, op, p, planes_count, in_bytes, out_bytes, rival):
        return True
    if choice is None:
        return False
    TC, TOH, cycles = choice
    if cycles >= planes_path:
        return False
    name = ctx.kernel_name()
    ctx.predict(cycles)
    ctx.debug(f"[graph-to-tile] {name}: max_pool2d {planes_count}x{p.H}x{p.W} window {p.KH}x{p.KW} on chip: "
              f"channels x output rows per tile = {TC}x{TOH}: est {cycles} cycles (planes in DRAM: {planes_path})")
    OH, OW, Wq = p.OH, p.OW, p.Wq
    out = ctx.narrow_output_buffer(op.results[0]) if out_bytes == 2 else ctx.output_buffer(op.results[0])
    out3 = em.view(out, (planes_count, OH, OW))
    x = ctx.buffer(op.input)
    sep = separable_taps(p)
    sets: dict[bool, tuple[WindowLoader, SSAValue, SSAValue | None, list[SSAValue | None]]] = {}

    def buffers(looped: bool):
        if looped not in sets:
            with em.no_pool():
                count = 2 if looped else 1
                loader = WindowLoader(ctx, p, x, planes_count, TC, TOH, pixel_major=False, targets=[f32],
                                      border=MAX_IDENTITY, buffers=count)
                compact = em.alloc((TC, TOH * OW), bf16, "spad", count) if out_bytes == 2 else None
                row_max = [em.alloc((TC, _row_max_rows(TOH, rows) * Wq), f32, "spad", count) if len(cols) > 1
                           else None for cols, rows in sep or []]
                sets[looped] = (loader, em.alloc((TC, TOH * Wq), f32, "spad", count), compact, row_max)
        return sets[looped]

    def separable(loader: WindowLoader, result: SSAValue, row_max: list[SSAValue | None], tc: int, toh: int) -> None:
        """The row maxima of each row phase (its kernel columns' shifted plane windows), then
        the result as the maximum of its kernel rows' shifted row maxima (`separable_taps`)."""
        assert sep is not None
        z = [0, 0]
        terms: list[tuple[SSAValue, int]] = []  # (row maxima or plane window, flat offset) per kernel row
        for (cols, rows), buf in zip(sep, row_max, strict=True):
            if buf is None:  # one kernel column: its plane window is the row maxima
                plane, shift = cols[0]
                terms += [(loader.windows[plane][0], shift + r * Wq) for r in rows]
                continue
            n = _row_max_rows(toh, rows) * Wq
            (p1, s1), (p2, s2) = cols[0], cols[1]
            em.vec("max", buf, z, loader.windows[p1][0], [0, s1], tc, n, loader.windows[p2][0], [0, s2], bmode="tile")
            for plane, shift in cols[2:]:
                em.vec("max", buf, z, buf, z, tc, n, loader.windows[plane][0], [0, shift], bmode="tile")
            terms += [(buf, r * Wq) for r in rows]
        tq = toh * Wq
        (a, ao) = terms[0]
        if len(terms) == 1:
            em.vec("copy", result, z, a, [0, ao], tc, tq)
            return
        (b, bo) = terms[1]
        em.vec("max", result, z, a, [0, ao], tc, tq, b, [0, bo], bmode="tile")
        for b, bo in terms[2:]:
            em.vec("max", result, z, result, z, tc, tq, b, [0, bo], bmode="tile")

    def tile(c0: Index, tc: int, oh0: Index, toh: int, top: int, bottom: int, looped: bool) -> None:
        loader, result, compact, row_max = buffers(looped)
        loader.load(0, c0, oh0, toh, tc, top, bottom)
        tq = toh * Wq
        if sep is not None:
            separable(loader, result, row_max, tc, toh)
        else:
            # the result starts as the first tap's window (one copy, where filling it with
            # MAX_IDENTITY took two vector passes); the taps' loop then takes its maximum with it
            # again, which leaves it unchanged (max(x, x) = x, NaN included)
            plane, row, col, _ = first_tap(p)
            em.vec("copy", result, [0, 0], loader.windows[plane][0], [0, row * Wq + col], tc, tq)

            def tap(plane: int, row: Index, col: Index) -> None:
                window = loader.windows[plane][0]
                em.vec("max", result, [0, 0], result, [0, 0], tc, tq, window,
                       [0, em.add(em.mul(row, Wq), col)], bmode="tile")

            over_plane_taps(em, p, tap)
        if compact is None:
            rows_view = em.view(result, (TC, TOH, Wq))
            em.dma(rows_view, [0, 0, 0], out3, [c0, oh0, 0], [tc, toh, OW])
            return
        # bf16: the valid columns rounded into a compact [TC, TOH.OW] tile (channel c's rows at
        # c.TOH, as in the result), so a full tile's channels are one DRAM run each
        src, dst = em.view(result, (TC * TOH, Wq)), em.view(compact, (TC * TOH, OW))
        if toh == TOH:
            em.vec("copy", dst, [0, 0], src, [0, 0], tc * TOH, OW)
            em.dma(compact, [0, 0], em.view(out, (planes_count, OH * OW)), [c0, em.mul(oh0, OW)], [tc, TOH * OW])
        else:  # a short row tile
            em.range(tc, lambda c: em.vec("copy", dst, [em.mul(c, TOH), 0], src, [em.mul(c, TOH), 0], toh, OW))
            em.dma(em.view(compact, (TC, TOH, OW)), [0, 0, 0], out3, [c0, oh0, 0], [tc, toh, OW])

    em.tiles(planes_count, TC, lambda c0, tc: row_tiles(
        em, p, TOH, True, lambda oh0, toh, top, bottom, looped: tile(c0, tc, oh0, toh, top, bottom, looped)))
    return True


def first_tap(p: Planes) -> tuple[int, int, int, int]:
    """(plane, row shift, column shift, kh . KW + kw) of the first tap `over_plane_taps` visits."""
    (sh, sw), (dh, dw) = p.stride, p.dilation
    rp, cp = p.phases[0]
    kh = next(kh for kh in range(p.KH) if (dh * kh) % sh == rp)
    kw = next(kw for kw in range(p.KW) if (dw * kw) % sw == cp)
    return 0, (dh * kh) // sh, (dw * kw) // sw, kh * p.KW + kw


def over_plane_taps(em, p: Planes, body, with_tap: bool = False, after_first: bool = False) -> None:
    """body(plane, row shift, column shift) for every tap of the window: per plane a loop nest
    over its taps (the taps of one stride phase are a grid whose shifts are affine in the loop
    variables); `with_tap`: body(plane, row shift, column shift, kh . KW + kw), the tap's index
    in the kernel (affine in them too); `after_first`: every tap but the first (`first_tap`),
    its plane's grid then the rest of its first row and the rows after."""
    (sh, sw), (dh, dw) = p.stride, p.dilation
    for plane, (rp, cp) in enumerate(p.phases):
        khs = [kh for kh in range(p.KH) if (dh * kh) % sh == rp]
        kws = [kw for kw in range(p.KW) if (dw * kw) % sw == cp]
        row0, col0 = (dh * khs[0]) // sh, (dw * kws[0]) // sw
        kh_step = khs[1] - khs[0] if len(khs) > 1 else 0
        kw_step = kws[1] - kws[0] if len(kws) > 1 else 0
        row_step, col_step = (dh * kh_step) // sh, (dw * kw_step) // sw
        index0 = khs[0] * p.KW + kws[0]  # (the plane's first tap's index in the kernel)

        def tap(a, b, plane=plane, row0=row0, col0=col0, row_step=row_step, col_step=col_step,
                kh_step=kh_step, kw_step=kw_step, index0=index0) -> None:
            shifts = (plane, em.add(em.mul(a, row_step), row0), em.add(em.mul(b, col_step), col0))
            if with_tap:
                body(*shifts, em.add(em.add(em.mul(a, kh_step * p.KW), em.mul(b, kw_step)), index0))
            else:
                body(*shifts)

        if after_first and plane == 0:
            from_one(em, len(kws), lambda b, tap=tap: tap(0, b))
            from_one(em, len(khs), lambda a, tap=tap, n=len(kws): em.range(n, lambda b: tap(a, b)))
        else:
            em.range(len(khs), lambda a, tap=tap, n=len(kws): em.range(n, lambda b: tap(a, b)))


def from_one(em, n: int, body) -> None:
    """body(i) for i in [1, n): inline for one, else a loop."""
    if n == 2:
        body(1)
    elif n > 2:
        em.loop(1, n, 1, body)


def lower_global_pool(ctx: LoweringContext, op: Operation) -> None:
    """Global average / max pooling: the [N.C, H.W] rows reduced as graph.reduce_mean /
    reduce_max over them are (`reductions.reduce_rows`: the same vector ops, and on a
    latency-bound target a one-tile reduction reads the rows the kernel before left on chip
    and keeps its result there for the kernels after, as in a squeeze-excitation block)."""
    assert isinstance(op, g.GlobalPoolOp)
    shape = shape_of(op.input)
    planes, pixels = shape[0] * shape[1], num_elements(shape[2:])
    is_max = isinstance(op, g.GlobalMaxPoolOp)
    name = ctx.kernel_name()
    override = ctx.override(name, 1)
    reduce_rows(ctx, ctx.buffer(op.input), ctx.output_buffer(op.results[0]), planes, pixels,
                "max" if is_max else "sum", None if is_max else 1.0 / pixels,
                rows=override[0] if override else None,
                describe=(name, op.name.split(".")[1], "x".join(map(str, shape))))
