"""Max pooling of stride 2 read in place: 2x2 and 3x3 windows (padding 1) over even maps.

The windows path (pooling.py `lower_max_pool_windows`) builds every stride phase of a tile's
input rows as a plane on the vector unit (one strided copy per phase, then the border placed
around it) and takes the taps' maxima over those planes: for ResNet-50's 3x3/2 pool that is
more vector work in the copies than in the maxima. Here the taps read the staged input rows
themselves: a row of W elements viewed as W/2 column pairs, the even and odd columns are the
pairs' first and second elements (a [pairs, 1] view with a row stride of 2, as the windows
path's phase gather reads them), so

* the column maxima are one `max` of the pairs' two elements and, for 3x3, one `max` with the
  odd column before each pair (the same view one pair earlier; the first output column of
  each row has the -inf border there instead, so it is the pair's maximum again, taken from
  the rows' first two columns);
* the row maxima are one `max` of each pair of column-max rows and, for 3x3, one with the
  even row after each pair: output row p reads input rows 2p - 1, 2p and 2p + 1.

Each channel's staged rows are a whole number of row pairs (for 3x3 one pair more than the
tile's output rows: the row above the tile is staged first, the -inf border for the first
tile), so the row maxima of every channel are one strided box; the pair past the last output
row computes a junk row per channel that is never stored. Five vector ops per tile for 3x3
(two for 2x2) over the input and the output, against the phase gather's copies, the border
fills and six maxima. Max is exact, so the output is the windows path's (and a bf16 output
the rounding of the same maximum).

Where the kernel before kept the whole input on chip (`LoweringContext.keep_on_chip`:
ResNet-50's stem on server), the ops read that tile in place, the whole map in one pass with no
DMA in (`lower_kept_pool`): a channel's H rows are H/2 row pairs, so the row before each pair's
first row is the pair before's odd row for every output row but the first of each channel, and
one small copy puts those back; its result is kept on chip in turn for the next kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import bf16, f32
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import MAX_IDENTITY, LoweringContext, latency_bound
from infer.passes.graph_to_tile.conv_store import kept_output_readers
from infer.passes.graph_to_tile.planes import Planes
from infer.passes.graph_to_tile.windows import kept_window


@dataclass(frozen=True)
class StridedPool:
    """A max pool this module lowers: kernel k (2 or 3) of stride 2 over [planes, H, W]."""

    planes: int
    H: int
    W: int
    k: int
    in_bytes: int
    out_bytes: int

    @property
    def OH(self) -> int:
        return self.H // 2

    @property
    def OW(self) -> int:
        return self.W // 2

    @property
    def above(self) -> int:
        """Staged rows above the tile's first output row's window (the row 2p - 1 of 3x3)."""
        return 1 if self.k == 3 else 0

    def pair_rows(self, toh: int) -> int:
        """Row pairs staged per channel: the output rows', and for 3x3 one more (its row
        2p + 1 of the last output row is the first row of that pair)."""
        return toh + self.above

    def footprint(self, tc: int, toh: int) -> int:
        """Scratchpad bytes of one buffer set: staged rows, column maxima, row maxima, result."""
        rows = 2 * self.pair_rows(toh)
        return (tc * rows * self.W * self.in_bytes + 4 * tc * rows * self.OW
                + 4 * tc * self.pair_rows(toh) * self.OW + self.out_bytes * tc * self.pair_rows(toh) * self.OW)


def strided_pool(op: g.MaxPool2dOp, p: Planes, planes: int, in_bytes: int, out_bytes: int) -> StridedPool | None:
    """The pool as this module lowers it, or None where it does not apply: kernel 2 without
    padding or 3 with padding 1 at the top and left, stride 2, no dilation, an even input whose
    output is half of it in each dimension (no ceil-mode row or column)."""
    k = p.KH
    top, left = p.pads[0], p.pads[1]
    if (p.KW != k or k not in (2, 3) or p.stride != (2, 2) or p.dilation != (1, 1) or p.H % 2 or p.W % 2
            or (top, left) != ((1, 1) if k == 3 else (0, 0)) or (p.OH, p.OW) != (p.H // 2, p.W // 2)):
        return None
    return StridedPool(planes, p.H, p.W, k, in_bytes, out_bytes)


def strided_pool_estimate(hw, s: StridedPool, tc: int, toh: int) -> int:
    """Cycles for tiles of tc channels x toh output rows (`tiling_cost.pipeline_cycles`): the
    loads double-buffered ahead of the vector ops."""
    L, cost, vlat = hw.vector.lanes, hw.vector.cost, hw.vector.latency
    burst = hw.dram.burst_bytes
    shifted = s.k == 3
    rows = 2 * s.pair_rows(toh)
    columns = -(-tc * rows * s.OW // L) * (2 if shifted else 1) + (-(-tc * rows // L) if shifted else 0)
    row_maxima = -(-tc * s.pair_rows(toh) * s.OW // L) * (2 if shifted else 1)
    ops = 5 if shifted else 2
    vector = (columns + row_maxima) * cost["max"] + ops * vlat
    load = tc * -(-rows * s.W * s.in_bytes // burst) * burst
    store = tc * -(-toh * s.OW * s.out_bytes // burst) * burst
    # one pipeline over every tile where a loop rotates the inner row tiles' buffers (the
    # first and last row tiles' own buffers overlap it too, as measured: ResNet-50's pool on
    # server 6,543 predicted, 6,584 simulated; counted as restarting at every channel tile, or
    # those tiles in series, the model picked tilings that ran slower on edge), else every
    # tile's chain in series
    tiles = -(-s.planes // tc) * -(-s.OH // toh)
    return tiling_cost.pipeline_cycles(hw, tiles, load, vector, store, pipelined=len(_looped_rows(s, toh)) >= 3)


def _looped_rows(s: StridedPool, toh: int) -> list[int]:
    """The first output rows of the full row tiles whose staged rows all lie inside the input
    (for 3x3 not the first tile, whose row above is the border): those run in one loop when
    there are 3 or more."""
    R = 2 * s.pair_rows(toh)
    return [oh0 for oh0 in range(0, s.OH, toh)
            if 2 * oh0 - s.above >= 0 and 2 * oh0 - s.above + R <= s.H and oh0 + toh <= s.OH]


def choose_strided_pool(hw, s: StridedPool) -> tuple[int, int, int] | None:
    """(TC, TOH, cycles) of the fastest tiling whose three buffer sets (the looped tiles' two,
    the first and last tiles' one) fit the scratchpad, or None."""
    best = None
    for tc in tiling_cost.pow2_candidates(s.planes, 1):
        for toh in tiling_cost.pow2_candidates(s.OH, 1):
            if 3 * s.footprint(tc, toh) > hw.memory.scratchpad_bytes:
                continue
            cycles = strided_pool_estimate(hw, s, tc, toh)
            if best is None or cycles < best[2]:
                best = (tc, toh, cycles)
    return best


def _column_maxima(em, rows_in: SSAValue, columns: SSAValue, used: int, k: int) -> None:
    """columns[r, q] = the maximum of row r's input columns 2q and 2q + 1 (and for 3x3 2q - 1,
    the -inf border before the first) for the first `used` rows of rows_in ([rows, W], whole
    rows end to end) into columns ([rows, W/2]): each pair's two elements, then (3x3) the odd
    column before each pair, over all rows at once, then each row's first output column again
    (the row before's last odd column was taken there)."""
    rows, W = rows_in.type.get_shape()  # type: ignore[attr-defined]
    OW = W // 2
    n = used * OW
    pairs_in = em.view(rows_in, (rows * OW, 2))
    flat = em.view(columns, (rows * OW, 1))
    em.vec("max", flat, [0, 0], pairs_in, [0, 0], n, 1, pairs_in, [0, 1], bmode="tile")
    if k == 3:
        em.vec("max", flat, [1, 0], flat, [1, 0], n - 1, 1, pairs_in, [0, 1], bmode="tile")
        em.vec("max", columns, [0, 0], rows_in, [0, 0], used, 1, rows_in, [0, 1], bmode="tile")


def lower_strided_pool(ctx: LoweringContext, op: g.MaxPool2dOp, s: StridedPool, TC: int, TOH: int) -> None:
    """Emit the pool in tiles of TC channels x TOH output rows: the first row tile (the border
    above it) and the row tiles from the first one whose staged rows reach past the input on
    their own, the others in one loop."""
    em = ctx.emitter
    W, OW, OH, H = s.W, s.OW, s.OH, s.H
    R = 2 * s.pair_rows(TOH)  # staged rows per channel
    x2 = em.view(ctx.buffer(op.input), (s.planes, H * W))
    out = ctx.narrow_output_buffer(op.results[0]) if s.out_bytes == 2 else ctx.output_buffer(op.results[0])
    out2 = em.view(out, (s.planes, OH * OW))
    staged_type = bf16 if s.in_bytes == 2 else f32
    out_type = bf16 if s.out_bytes == 2 else f32
    sets: dict[bool, tuple[SSAValue, SSAValue, SSAValue, SSAValue]] = {}

    def buffers(looped: bool) -> tuple[SSAValue, SSAValue, SSAValue, SSAValue]:
        if looped not in sets:
            with em.no_pool():
                count = 2 if looped else 1
                sets[looped] = (em.alloc((TC, R * W), staged_type, "spad", count),
                                em.alloc((TC * R, OW), f32, "spad", count),
                                em.alloc((TC * (R // 2), OW), f32, "spad", count),
                                em.alloc((TC, (R // 2) * OW), out_type, "spad", count))
        return sets[looped]

    def tile(c0: Index, tc: int, oh0: Index, toh: int, looped: bool) -> None:
        staged, columns, pairs, result = buffers(looped)
        # staged row r is input row 2 * oh0 - above + r; rows outside the input are the border
        first = 2 * oh0 - s.above if isinstance(oh0, int) else None
        lo = max(0, -first) if first is not None else 0
        hi = min(R, H - first) if first is not None else R
        if lo:
            em.fill(staged, [0, 0], tc, lo * W, MAX_IDENTITY)
        if hi < R:
            em.fill(staged, [0, hi * W], tc, (R - hi) * W, MAX_IDENTITY)
        row0 = em.add(em.mul(oh0, 2 * W), (lo - s.above) * W)
        em.dma(x2, [c0, row0], staged, [0, lo * W], [tc, (hi - lo) * W])
        _column_maxima(em, em.view(staged, (TC * R, W)), columns, tc * R, s.k)
        # the row maxima: each pair of column-max rows, then (3x3) the even row after it
        m = tc * (R // 2)
        row_pairs = em.view(columns, (TC * (R // 2), 2 * OW))
        result_rows = em.view(result, (TC * (R // 2), OW))
        if s.k == 3:
            em.vec("max", pairs, [0, 0], row_pairs, [0, 0], m, OW, row_pairs, [0, OW], bmode="tile")
            # (the last channel's junk row would read past the tile: not computed)
            em.vec("max", result_rows, [0, 0], pairs, [0, 0], m - 1, OW, row_pairs, [1, 0], bmode="tile")
        else:
            em.vec("max", result_rows, [0, 0], row_pairs, [0, 0], m, OW, row_pairs, [0, OW], bmode="tile")
        em.dma(result, [0, 0], out2, [c0, em.mul(oh0, OW)], [tc, toh * OW])

    starts = list(range(0, OH, TOH))
    inside = _looped_rows(s, TOH)

    def rows_of_channels(c0: Index, tc: int) -> None:
        looped = len(inside) >= 3  # (a loop of 2 trips is not software-pipelined)
        for oh0 in starts:
            if looped and oh0 in inside:
                if oh0 == inside[0]:
                    em.loop(inside[0], inside[-1] + TOH, TOH, lambda i: tile(c0, tc, i, TOH, True))
                continue
            tile(c0, tc, oh0, min(TOH, OH - oh0), False)

    em.tiles(s.planes, TC, rows_of_channels)


def lower_stride_two_pool(ctx: LoweringContext, op: g.MaxPool2dOp, p: Planes, planes: int, in_bytes: int,
                          out_bytes: int, rival_cycles: int) -> bool:
    """Emit the pool by this module where it applies and the cost model predicts fewer cycles than
    `rival_cycles` (pooling.py's paths): from the kernel before's kept input if there is one,
    else from staged rows. False: nothing emitted."""
    s = strided_pool(op, p, planes, in_bytes, out_bytes)
    if s is None:
        return False
    staged = choose_strided_pool(ctx.hw, s)
    kept = kept_pool_input(ctx, op, s)
    if kept is not None and (cycles := kept_pool_estimate(ctx.hw, s)) < min(
            rival_cycles, staged[2] if staged is not None else rival_cycles):
        name = ctx.kernel_name()
        ctx.predict(cycles)
        ctx.debug(f"[graph-to-tile] {name}: max_pool2d {planes}x{p.H}x{p.W} window {p.KH}x{p.KW}/2 read "
                  f"in place from the kept input: est {cycles} cycles (staged rows: "
                  f"{staged[2] if staged is not None else '-'}, other paths: {rival_cycles})")
        lower_kept_pool(ctx, op, s, kept)
        return True
    if staged is None or staged[2] >= rival_cycles:
        return False
    TC, TOH, cycles = staged
    name = ctx.kernel_name()
    ctx.predict(cycles)
    ctx.debug(f"[graph-to-tile] {name}: max_pool2d {planes}x{p.H}x{p.W} window {p.KH}x{p.KW}/2 read in "
              f"place: channels x output rows per tile = {TC}x{TOH}: est {cycles} cycles (other paths: {rival_cycles})")
    lower_strided_pool(ctx, op, s, TC, TOH)
    return True


def kept_pool_input(ctx: LoweringContext, op: g.MaxPool2dOp, s: StridedPool) -> SSAValue | None:
    """A [planes, H.W] view of the input the kernel before kept whole on chip, when the pool can
    work on it in place: its column maxima, row maxima and result (the input's element type,
    and the output's) within a quarter of the scratchpad, on a latency-bound target, and not
    for a model output (its kept result is for the kernels after it)."""
    kept = kept_window(ctx, ctx.buffer(op.input), (s.planes, s.H * s.W))
    if kept is None or not latency_bound(ctx.hw) or op.results[0] in ctx.destinations:
        return None
    if _kept_pool_bytes(s, t.elem_bytes(kept)) > ctx.hw.memory.scratchpad_bytes // 4:
        return None
    return kept


def _kept_pool_bytes(s: StridedPool, elem_bytes: int) -> int:
    return elem_bytes * s.planes * (s.H * s.OW + s.OH * s.OW) + s.out_bytes * s.planes * s.OH * s.OW


def kept_pool_estimate(hw, s: StridedPool) -> int:
    """Cycles of `lower_kept_pool`: its vector ops in a row, then the store's round trip."""
    L, cost, vlat = hw.vector.lanes, hw.vector.cost, hw.vector.latency
    shifted = s.k == 3
    columns = -(-s.planes * s.H * s.OW // L) * (2 if shifted else 1) + (-(-s.planes * s.H // L) if shifted else 0)
    rows = -(-s.planes * s.OH * s.OW // L) * (2 if shifted else 1) + (-(-s.planes * s.OW // L) if shifted else 0)
    store = s.planes * s.OH * s.OW * s.out_bytes
    return int((columns + rows) * cost["max"] + (6 if shifted else 2) * vlat
               + tiling_cost.dma_round_trip(hw, store))


def lower_kept_pool(ctx: LoweringContext, op: g.MaxPool2dOp, s: StridedPool, kept: SSAValue) -> None:
    """The pool of the whole map read in place from the kept input `kept` ([planes, H.W]); one
    store of the result, which stays on chip for the next kernels."""
    em = ctx.emitter
    W, OW, OH, H, n_planes = s.W, s.OW, s.OH, s.H, s.planes
    elem = kept.type.get_element_type()  # type: ignore[attr-defined]
    out = ctx.narrow_output_buffer(op.results[0]) if s.out_bytes == 2 else ctx.output_buffer(op.results[0])
    with em.no_pool():
        columns = em.alloc((n_planes * H, OW), elem, "spad")
        pairs = em.alloc((n_planes * OH, OW), elem, "spad")
        result = em.alloc((n_planes, OH * OW), bf16 if s.out_bytes == 2 else f32, "spad")
    _column_maxima(em, em.view(kept, (n_planes * H, W)), columns, n_planes * H, s.k)
    # the row maxima: each pair of rows, then (3x3) the odd row before it (the pair before's
    # second row), then each channel's first output row again (the border above it)
    m = n_planes * OH
    row_pairs = em.view(columns, (m, 2 * OW))
    result_rows = em.view(result, (m, OW))
    if s.k == 3:
        em.vec("max", pairs, [0, 0], row_pairs, [0, 0], m, OW, row_pairs, [0, OW], bmode="tile")
        em.vec("max", result_rows, [1, 0], pairs, [1, 0], m - 1, OW, row_pairs, [0, OW], bmode="tile")
        em.vec("copy", result, [0, 0], em.view(pairs, (n_planes, OH * OW)), [0, 0], n_planes, OW)
    else:
        em.vec("max", result_rows, [0, 0], row_pairs, [0, 0], m, OW, row_pairs, [0, OW], bmode="tile")
    out2 = em.view(out, (n_planes, OH * OW))
    em.dma(result, [0, 0], out2, [0, 0], [n_planes, OH * OW])
    ctx.keep_on_chip(out2, result, next_kernels=kept_output_readers(ctx, result), charged=True)
