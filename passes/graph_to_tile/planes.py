"""The input planes of windowed kernels (conv2d, window pooling): padding and stride phases.

A windowed kernel reads, for output pixel (oh, ow) and tap (kh, kw), the padded input at
(sh.oh + dh.kh, sw.ow + dw.kw). `Planes` splits the padded input into stride phases:

    plane (rp, cp)[i, j] = padded[sh.i + rp, sw.j + cp]        (i < Hq, j < Wq)

so tap (kh, kw) reads plane ((dh.kh) % sh, (dw.kw) % sw) at row oh + (dh.kh) // sh and column
ow + (dw.kw) // sw: every tap is a stride-1 shift of one plane. With a plane's rows laid end to
end, output pixel q = oh.Wq + ow ("padded-width" flat index: columns OW..Wq-1 of each row are
garbage the kernel computes and never stores) reads flat element q + offset(tap), so one
contiguous run of a plane feeds a whole tile of output rows for every tap, and a window of
TOH + (rows of halo) plane rows loaded once serves all KH.KW taps.

`prepare_planes` is the helper loop nest that writes the planes of an input into DRAM, only
the phases some tap reads, rounded to the kernel's element type (bf16 matrix operands: `hi`,
and `lo` for the fp32 emulation; f32 for pooling) with the border (padding) value around the
data, in one of two layouts:

* channel-major `[N.C, phases, Hq, Wq]` (a channel's plane rows end to end): stride 1 pads on
  chip (border columns filled in the staging tile, whole padded rows stored); stride 2 loads
  the rows of one row phase (a DMA row step) and splits the column phases on the vector unit
  (the rows viewed as groups of sw elements, one `copy` per phase), after the buffer is
  filled with the border value: no DMA moves single elements;
* pixel-major `[N, phases, Hq, Wq, C]` (a pixel's channels contiguous: the streamed operand
  of conv's "channels" orientation): the staging tile is transposed on the vector unit (a
  `copy` per channel, or per pixel when there are fewer pixels) and stored per column phase
  by a DMA whose source steps over the pixels; the border is filled by DMAs first.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from xdsl.dialects.builtin import bf16, f32
from xdsl.ir import Attribute, SSAValue

from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import LoweringContext


@dataclass(frozen=True)
class Planes:
    """Stride-phase planes of a padded [N.C, H, W] input for a KH x KW window (a value: its
    derived properties are computed once, the cost model reads them per tiling candidate)."""

    H: int
    W: int
    KH: int
    KW: int
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    OH: int
    OW: int

    @cached_property
    def raw(self) -> bool:
        """No padding and stride 1: the input itself is the one plane (Wq = W)."""
        return not any(self.pads) and self.stride == (1, 1)

    @cached_property
    def preparable(self) -> bool:
        """Can a windowed kernel read its windows from planes prepared in DRAM (conv's helper
        nest, `prepare_planes`): a padded input (the planes hold the border) or a strided one
        (the phases the taps read, compact: a 1x1/2 conv's windows are then whole rows of a
        quarter of the input, where windows built on chip read every other row and split the
        columns on the vector unit, once per output-channel tile)."""
        return any(self.pads) or self.stride != (1, 1)

    @cached_property
    def border_free(self) -> bool:
        """Every element of every plane is an input element (no padding, and each phase of the
        input has at least Hq rows and Wq columns): prepared planes need no border fill."""
        if any(self.pads):
            return False
        sh, sw = self.stride
        return all(len(range(rp, self.H, sh)) >= self.Hq and len(range(cp, self.W, sw)) >= self.Wq
                   for rp, cp in self.phases)

    @cached_property
    def phases(self) -> tuple[tuple[int, int], ...]:
        """The (row phase, column phase) pairs some tap reads, in plane order."""
        sh, sw = self.stride
        dh, dw = self.dilation
        return tuple(sorted({((dh * kh) % sh, (dw * kw) % sw) for kh in range(self.KH) for kw in range(self.KW)}))

    @cached_property
    def Hq(self) -> int:
        """Plane rows (prepared planes hold every row a window reads, border rows included)."""
        if self.raw:
            return self.H
        sh = self.stride[0]
        return max(self.window_rows(self.OH), -(-(self.H + self.pads[0] + self.pads[2]) // sh))

    @cached_property
    def Wq(self) -> int:
        """Plane columns: a plane row's pitch in the flat layout (so the streamed or stationary
        window row of `toh` output rows has toh.Wq elements, Wq - OW of each row garbage).

        Stride 1: neighbouring rows share their padding columns, Wq = W + max(left, right)
        (at least OW). A read past a row's last column lands in the next row's first columns:
        padded column c >= Wq of row r is read at row r + 1, column c - Wq, which lies in that
        row's left border (c - Wq < left, since c < W + left + right) while the padded element
        itself is right border (c >= Wq >= W + left): the same border value. So a 3x3 conv with
        padding 1 streams 57 of 56 useful columns per row instead of 58 (14x14: 15 instead of
        16, 7x7: 8 instead of 9). The window's last row (`window_rows`' extra one) is then
        read by valid outputs (the last row's right border): it is border, as the rows
        outside the input are (`clip_phase`). Strided planes keep both borders."""
        if self.raw:
            return self.W
        sw, dw = self.stride[1], self.dilation[1]
        if sw == 1:
            return max(self.OW, self.W + max(self.pads[1], self.pads[3]))
        return max(self.OW + (dw * (self.KW - 1)) // sw, -(-(self.W + self.pads[1] + self.pads[3]) // sw))

    def tap(self, kh: int, kw: int) -> tuple[int, int, int]:
        """(plane index, row offset, column offset) of tap (kh, kw)."""
        sh, sw = self.stride
        dh, dw = self.dilation
        plane = self.phases.index(((dh * kh) % sh, (dw * kw) % sw))
        return plane, (dh * kh) // sh, (dw * kw) // sw

    @cached_property
    def halo_rows(self) -> int:
        return (self.dilation[0] * (self.KH - 1)) // self.stride[0]

    @cached_property
    def halo_cols(self) -> int:
        return (self.dilation[1] * (self.KW - 1)) // self.stride[1]

    def window_rows(self, toh: int) -> int:
        """Plane rows a window for a tile of `toh` output rows holds: the rows its outputs read,
        plus one when taps shift columns (the last taps' shift reaches into it from the garbage
        columns of the last output row)."""
        return toh + self.halo_rows + (1 if self.halo_cols else 0)

    def window_length(self, toh: int) -> int:
        """Flat elements of a plane window (its rows end to end)."""
        return self.window_rows(toh) * self.Wq

    def clip_phase(self, oh0: int, toh: int, rp: int) -> tuple[int, int]:
        """(top, bottom): the window rows of output rows [oh0, oh0 + toh) that lie outside the
        input in row phase `rp` ((rows, 0) when none lies inside). Row phases differ when the
        input's height is not a multiple of the stride: the last rows of one phase can lie
        outside while the other phase's are inside."""
        rows = self.window_rows(toh)
        inputs = [self.stride[0] * (oh0 + i) + rp - self.pads[0] for i in range(rows)]
        valid = [i for i, r in enumerate(inputs) if 0 <= r < self.H]
        return (valid[0], rows - 1 - valid[-1]) if valid else (rows, 0)

    def clip(self, oh0: int, toh: int) -> tuple[int, int]:
        """(top, bottom): the most window rows of output rows [oh0, oh0 + toh) that lie outside
        the input in any row phase (0, 0: every phase's window lies inside, the tile can run in
        a loop; otherwise each phase is clipped by `clip_phase`)."""
        clips = [self.clip_phase(oh0, toh, rp) for rp in {rp for rp, _ in self.phases}]
        return max(t for t, _ in clips), max(b for _, b in clips)

    def offset(self, kh: int, kw: int) -> int:
        _, ro, co = self.tap(kh, kw)
        return ro * self.Wq + co





def prepare_estimate(hw, planes_count: int, p: Planes, elem: str, copies: int, pixel_major: bool,
                     in_bytes: int = 4, channels: int = 1) -> int:
    """The cost model's cycles for `prepare_planes`' helper nest (a streaming estimate);
    `in_bytes`: per input element in DRAM (2: an input held as bf16). Pixel-major planes of
    `channels` channels are stored one pixel's channels per DMA row (`_prepare_pixel_major`: the
    stores step over the tile's pixels), each row charged in whole DRAM bursts: a 3-channel
    stem's planes move 64 bytes per 6."""
    P = len(p.phases)
    esize = 2 if elem == "bf16" else 4
    count = copies if elem == "bf16" else 1
    sh, top = p.stride[0], p.pads[0]
    rows = sum(len(range((rp - top) % sh, p.H, sh)) for rp in {rp for rp, _ in p.phases})  # the rows read
    elements = planes_count * rows * p.W
    fill = p.stride != (1, 1) and not p.border_free  # whole planes filled with the border first
    vector = elements / hw.vector.lanes * (2 if count == 2 else 1) * (2 if pixel_major or p.stride != (1, 1) else 1)
    plane_bytes = planes_count * P * p.Hq * p.Wq * esize * count
    burst = hw.dram.burst_bytes

    def bursts(nbytes: int) -> int:  # a DMA row is charged in whole bursts
        return -(-nbytes // burst) * burst

    read = planes_count * rows * bursts(p.W * in_bytes)
    if pixel_major:  # the border fill (strided: whole planes first), then every pixel's row
        written = (plane_bytes if fill else 0) + elements // max(1, channels) * bursts(channels * esize) * count
    else:  # the fill, then the planes' rows
        written = (plane_bytes if fill else 0) + planes_count * P * p.Hq * bursts(p.Wq * esize) * count
    return tiling_cost.stream_estimate(hw, read, written, vector)


def prepare_planes(ctx: LoweringContext, x: SSAValue, planes_count: int, p: Planes, elem: str,
                   copies: int, border: float, pixel_major: int = 0) -> list[SSAValue]:
    """The planes of x (viewed [planes_count, H, W], f32, or bf16 when its producer narrowed it:
    staged as it is held) in DRAM as [planes_count, phases, Hq,
    Wq] of `elem` ("bf16": `copies` buffers hi(, lo); "f32": one buffer), `border` outside the
    input; `pixel_major` = C (planes_count = N.C): [N, phases, Hq, Wq, C] instead. A loop nest
    of its own."""
    em = ctx.emitter
    ctx.predict(prepare_estimate(ctx.hw, planes_count, p, elem, copies, bool(pixel_major),
                                 _bytes(x), max(1, pixel_major)))
    if pixel_major:
        with ctx.stage(what="input planes (pixel-major)"):
            return _prepare_pixel_major(ctx, x, planes_count // pixel_major, pixel_major, p, copies, border)
    with ctx.stage(what="input planes"):
        P, Hq, Wq, H, W = len(p.phases), p.Hq, p.Wq, p.H, p.W
        elem_type = bf16 if elem == "bf16" else f32
        count = copies if elem == "bf16" else 1
        outs = [em.alloc((planes_count, P, Hq, Wq), elem_type, "dram") for _ in range(count)]
        x3 = em.view(x, (planes_count, H, W))
        budget = ctx.hw.memory.scratchpad_bytes // 4  # per double-buffered staging pair
        ebytes = 2 if elem == "bf16" else 4
        if p.stride == (1, 1):
            _prepare_stride1(ctx, x3, outs, planes_count, p, elem_type, ebytes, budget, border)
        else:
            _prepare_phases(ctx, x3, outs, planes_count, p, elem_type, ebytes, budget, border)
        return outs


def _element(x: SSAValue) -> Attribute:
    """The element type of DRAM memref x (f32; bf16 for an activation its producer narrowed)."""
    return x.type.get_element_type()  # type: ignore[attr-defined]


def _bytes(x: SSAValue) -> int:
    return 2 if _element(x) == bf16 else 4


def _fill_rows(ctx: LoweringContext, outs: list[SSAValue], rows: int, cols: int, row0: int,
               nrows: int, elem_type, border: float, row_pitch: int) -> None:
    """Rows [row0, row0 + nrows) of every one of `rows` groups of `row_pitch` rows of the
    [rows.row_pitch, cols] views of `outs` = border: per group one contiguous run, DMA'd from
    one filled tile (groups x a chunk of the run, at most 1/16 of the scratchpad)."""
    em = ctx.emitter
    if nrows <= 0:
        return
    run = nrows * cols
    budget = max(1, ctx.hw.memory.scratchpad_bytes // 16 // 4)  # elements
    chunk = min(run, budget)
    groups = max(1, min(rows, budget // chunk))
    tile = em.alloc((groups, chunk), elem_type, "spad")
    em.fill(tile, [0, 0], groups, chunk, border)
    for out in outs:
        view = em.view(out, (rows, row_pitch * cols))
        em.tiles(rows, groups, lambda g0, gn, view=view: em.tiles(
            run, chunk, lambda k0, kn: em.dma(tile, [0, 0], view, [g0, em.add(k0, row0 * cols)], [gn, kn])))


def _convert(ctx: LoweringContext, staging: SSAValue, s_index: list[Index], dsts: list[SSAValue],
             d_index: list[Index], rows: int, cols: int) -> None:
    """dsts[0] = round(staging) (f32 -> the tiles' type); with two tiles dsts[1] =
    bf16(staging - dsts[0]) (`Emitter.round_parts`)."""
    ctx.emitter.round_parts(staging, s_index, dsts[0], dsts[1] if len(dsts) == 2 else None, d_index, rows, cols)


def _prepare_stride1(ctx: LoweringContext, x3: SSAValue, outs: list[SSAValue], planes_count: int, p: Planes,
                     elem_type, ebytes: int, budget: int, border: float) -> None:
    """Stride 1: staging [TC, TH, W] f32 -> local [TC, TH, Wq] with border columns -> whole
    padded rows to DRAM; the top/bottom border rows from a filled tile."""
    em = ctx.emitter
    H, W, Wq, Hq = p.H, p.W, p.Wq, p.Hq
    top, left = p.pads[0], p.pads[1]
    bottom_rows = Hq - top - H
    right = Wq - left - W
    _fill_rows(ctx, outs, planes_count, Wq, 0, top, elem_type, border, Hq)
    _fill_rows(ctx, outs, planes_count, Wq, top + H, bottom_rows, elem_type, border, Hq)
    per_row = W * _bytes(x3) + Wq * ebytes * len(outs)
    if H * per_row * 2 <= budget:
        TH, TC = H, max(1, min(planes_count, budget // (2 * H * per_row)))
    else:
        TH, TC = max(1, min(H, budget // (2 * per_row))), 1
    staging = em.alloc((TC, TH, W), _element(x3), "spad", 2)
    locs = [em.alloc((TC, TH, Wq), elem_type, "spad", 2) for _ in outs]
    s2 = em.view(staging, (TC * TH, W))
    l2 = [em.view(loc, (TC * TH, Wq)) for loc in locs]
    out3 = [em.view(out, (planes_count, Hq, Wq)) for out in outs]

    def body(c0: Index, tc: int, h0: Index, th: int) -> None:
        rows = tc * th  # contiguous rows: whole planes (th = H) or one plane (tc = 1)
        em.dma(x3, [c0, h0, 0], staging, [0, 0, 0], [tc, th, W])
        for loc in l2:
            if left:
                em.fill(loc, [0, 0], rows, left, border)
            if right:
                em.fill(loc, [0, left + W], rows, right, border)
        _convert(ctx, s2, [0, 0], l2, [0, left], rows, W)
        for loc, out in zip(locs, out3, strict=True):
            em.dma(loc, [0, 0, 0], out, [c0, em.add(h0, top), 0], [tc, th, Wq])

    em.tiles(planes_count, TC, lambda c0, tc: em.tiles(H, TH, lambda h0, th: body(c0, tc, h0, th)))


def _prepare_phases(ctx: LoweringContext, x3: SSAValue, outs: list[SSAValue], planes_count: int, p: Planes,
                    elem_type, ebytes: int, budget: int, border: float) -> None:
    """Stride > 1: fill every plane with the border value (not when every plane element is an
    input element: `Planes.border_free`), then per row phase one DMA of the input rows of that
    phase (a row step) and per column phase a vector copy of every sw-th element (the rows
    viewed as groups of sw: one column of the view) into a contiguous tile, stored at the
    phase's interior (an odd width falls back to an element-wise strided DMA)."""
    em = ctx.emitter
    sh, sw = p.stride
    H, W, Wq, Hq = p.H, p.W, p.Wq, p.Hq
    top, left = p.pads[0], p.pads[1]
    P = len(p.phases)
    if not p.border_free:
        _fill_rows(ctx, outs, planes_count * P, Wq, 0, Hq, elem_type, border, Hq)
    out3 = [em.view(out, (planes_count, P * Hq, Wq)) for out in outs]  # plane p row i: row p.Hq + i
    even = W % sw == 0
    budget //= len({rp for rp, _ in p.phases})  # each row phase has its own buffers
    for rp in sorted({rp for rp, _ in p.phases}):
        hc = (rp - top) % sh  # first input row of this row phase
        nh = len(range(hc, H, sh))
        if nh == 0:
            continue
        i0 = (hc + top) // sh
        col_phases = [cp for r, cp in p.phases if r == rp]
        nw = W // sw if even else -(-W // sw)
        per_row = (W if even else nw) * _bytes(x3) + nw * ebytes * len(outs)
        if nh * per_row * 2 <= budget:
            TH, TC = nh, max(1, min(planes_count, budget // (2 * nh * per_row)))
        else:
            TH, TC = max(1, min(nh, budget // (2 * per_row))), 1
        staging = em.alloc((TC, TH, W if even else nw), _element(x3), "spad", 2)
        pairs = em.view(staging, (TC * TH * W // sw, sw)) if even else em.view(staging, (TC * TH * nw, 1))
        locs = [em.alloc((TC, TH, nw), elem_type, "spad", 2) for _ in outs]
        flat = [em.view(loc, (TC * TH * nw, 1)) for loc in locs]

        def body(c0: Index, tc: int, h0: Index, th: int, rp=rp, hc=hc, i0=i0, col_phases=col_phases,
                 nw=nw, staging=staging, pairs=pairs, locs=locs, flat=flat) -> None:
            src_row = em.add(em.mul(h0, sh), hc)
            if even:  # whole rows (bursts), the column phases split on chip
                em.dma(x3, [c0, src_row, 0], staging, [0, 0, 0], [tc, th, W], [1, sh, 1])
            for cp in col_phases:
                wc = (cp - left) % sw  # first input column of this column phase
                n = len(range(wc, W, sw))
                if n == 0:
                    continue
                if even:
                    _convert(ctx, pairs, [0, wc], flat, [0, 0], tc * th * nw, 1)
                else:
                    em.dma(x3, [c0, src_row, wc], staging, [0, 0, 0], [tc, th, n], [1, sh, sw])
                    _convert(ctx, pairs, [0, 0], flat, [0, 0], tc * th * nw, 1)
                row = em.add(h0, p.phases.index((rp, cp)) * Hq + i0)
                for loc, out in zip(locs, out3, strict=True):
                    em.dma(loc, [0, 0, 0], out, [c0, row, (wc + left) // sw], [tc, th, n])

        em.tiles(planes_count, TC, lambda c0, tc, body=body, nh=nh, TH=TH: em.tiles(
            nh, TH, lambda h0, th: body(c0, tc, h0, th)))


def _prepare_pixel_major(ctx: LoweringContext, x: SSAValue, N: int, C: int, p: Planes, copies: int,
                         border: float) -> list[SSAValue]:
    """[N, phases, Hq, Wq, C] bf16 planes: per (image, channel tile, tile of rows of one row
    phase) a DMA of the f32 rows, a transpose on the vector unit into [rows.W, channels]
    (rounding to bf16; the fp32 emulation transposes in f32 and splits hi/lo), then per
    column phase one DMA store stepping over the tile's pixels."""
    em = ctx.emitter
    sh, sw = p.stride
    H, W, Wq, Hq = p.H, p.W, p.Wq, p.Hq
    top, left = p.pads[0], p.pads[1]
    P = len(p.phases)
    outs = [em.alloc((N, P, Hq, Wq, C), bf16, "dram") for _ in range(copies)]
    rows_view = [em.view(out, (N * P * Hq, Wq * C)) for out in outs]
    pix_view = [em.view(out, (N * P * Hq, Wq, C)) for out in outs]
    # the border: everything for strided planes (unless border-free), else the border rows and columns
    if p.stride != (1, 1):
        if not p.border_free:
            _fill_rows(ctx, outs, N * P, Wq * C, 0, Hq, bf16, border, Hq)
    elif any(p.pads):
        bottom = Hq - top - H
        _fill_rows(ctx, outs, N, Wq * C, 0, top, bf16, border, Hq)
        _fill_rows(ctx, outs, N, Wq * C, top + H, bottom, bf16, border, Hq)
        right = Wq - left - W
        side = max(left, right)
        if side:
            tile_rows = max(1, min(N * Hq, (ctx.hw.memory.scratchpad_bytes // 16) // (side * C * 2)))
            zeros = em.alloc((tile_rows, side * C), bf16, "spad")
            em.fill(zeros, [0, 0], tile_rows, side * C, border)
            for view in rows_view:
                for col0, width in ((0, left), ((left + W) * C, right)):
                    if width:
                        em.tiles(N * Hq, tile_rows, lambda r0, rn, view=view, col0=col0, width=width: em.dma(
                            zeros, [0, 0], view, [r0, col0], [rn, width * C]))
    x3 = em.view(x, (N * C, H, W))
    budget = ctx.hw.memory.scratchpad_bytes // 2 // len({rp for rp, _ in p.phases})  # each row phase its own
    per_pixel = _bytes(x) * 2 + 2 * copies * 2 + (4 * 2 if copies == 2 else 0)  # staging, transposed (+ f32)
    for rp in sorted({rp for rp, _ in p.phases}):
        hc = (rp - top) % sh
        nh = len(range(hc, H, sh))
        if nh == 0:
            continue
        i0 = (hc + top) // sh
        col_phases = [cp for r, cp in p.phases if r == rp]
        if nh * W * C * per_pixel <= budget:
            TH, TC = nh, C
        else:
            TC = max(1, min(C, budget // (W * per_pixel)))
            TH = max(1, min(nh, budget // (W * TC * per_pixel))) if TC == C else 1
        staging = em.alloc((TC, TH * W), _element(x), "spad", 2)
        flat_staging = em.view(staging, (TC * TH * W, 1))
        tiles_t = [em.alloc((TH * W, TC), bf16, "spad", 2) for _ in range(copies)]
        tile32 = em.alloc((TH * W, TC), f32, "spad", 2) if copies == 2 else None

        def body(n: Index, c0: Index, tc: int, h0: Index, th: int, rp=rp, hc=hc, i0=i0, col_phases=col_phases,
                 staging=staging, flat_staging=flat_staging, tiles_t=tiles_t, tile32=tile32, TH=TH) -> None:
            src_row = em.add(em.mul(h0, sh), hc)
            em.dma(x3, [em.add(em.mul(n, C), c0), src_row, 0], em.view(staging, (staging.type.get_shape()[0], TH, W)),
                   [0, 0, 0], [tc, th, W], [1, sh, 1] if sh > 1 else None)
            pixels = th * W
            target = tile32 if tile32 is not None else tiles_t[0]
            flat_target = em.view(target, (TH * W * target.type.get_shape()[1], 1))  # type: ignore[attr-defined]
            width = target.type.get_shape()[1]  # type: ignore[attr-defined]
            if tc <= pixels:  # channel c's pixels -> column c
                em.range(tc, lambda c: em.vec("copy", target, [0, c], flat_staging, [em.mul(c, TH * W), 0],
                                              pixels, 1))
            else:  # pixel q's channels -> row q
                em.range(pixels, lambda q: em.vec("copy", flat_target, [em.mul(q, width), 0], staging, [0, q],
                                                  tc, 1))
            if tile32 is not None:
                hi, lo = tiles_t
                em.round_parts(tile32, [0, 0], hi, lo, [0, 0], pixels, tc)
            for cp in col_phases:
                wc = (cp - left) % sw
                nw = len(range(wc, W, sw))
                if nw == 0:
                    continue
                plane = p.phases.index((rp, cp))
                row = em.add(em.add(em.mul(n, P * Hq), plane * Hq + i0), h0)
                for tile_t, view in zip(tiles_t, pix_view, strict=True):
                    em.dma(em.view(tile_t, (TH, W, TC)), [0, wc, 0], view, [row, (wc + left) // sw, c0],
                           [th, nw, tc], [1, sw, 1] if sw > 1 else None)

        em.range(N, lambda n, body=body, TH=TH, TC=TC, nh=nh: em.tiles(C, TC, lambda c0, tc: em.tiles(
            nh, TH, lambda h0, th: body(n, c0, tc, h0, th))))
    return outs


class PreparedWindows:
    """Windows loaded by DMA from planes `prepare_planes` wrote: per plane and copy one DMA of
    the window's plane rows (channel-major: a contiguous run per channel; pixel-major: rows of
    the channels of each pixel, one run when they are all of them). Same interface as
    windows.WindowLoader."""

    def __init__(self, ctx: LoweringContext, p: Planes, planes: list[SSAValue], N: int, C: int, TC: int,
                 TOH: int, *, pixel_major: bool, buffers: int = 2):
        em = self.em = ctx.emitter
        self.p, self.C, self.pixel_major = p, C, pixel_major
        P, HqWq = len(p.phases), p.Hq * p.Wq
        self.P, self.HqWq = P, HqWq
        self.Lw = p.window_length(TOH)
        if pixel_major:
            self.sources = [em.view(x, (N * P * HqWq, C)) for x in planes]
        else:
            self.sources = [em.view(x, (N * C, P * HqWq)) for x in planes]
        elem = planes[0].type.get_element_type()  # type: ignore[attr-defined]
        shape = (self.Lw, TC) if pixel_major else (TC, self.Lw)
        self.windows = [[em.alloc(shape, elem, "spad", buffers) for _ in planes] for _ in p.phases]

    def load(self, n: Index, channel: Index, oh0: Index, toh: int, tc: int, top: int = 0, bottom: int = 0) -> None:
        """Channels [channel, channel + tc) of image n for output rows [oh0, oh0 + toh) (prepared
        planes need no clipping: top = bottom = 0)."""
        em, p = self.em, self.p
        run = p.window_rows(toh) * p.Wq
        for plane, windows in enumerate(self.windows):
            for src, dst in zip(self.sources, windows, strict=True):
                if self.pixel_major:
                    first = em.add(em.add(em.mul(oh0, p.Wq), em.mul(n, self.P * self.HqWq)), plane * self.HqWq)
                    em.dma(src, [first, channel], dst, [0, 0], [run, tc])
                else:
                    em.dma(src, [em.add(em.mul(n, self.C), channel), em.add(em.mul(oh0, p.Wq), plane * self.HqWq)],
                           dst, [0, 0], [tc, run])
