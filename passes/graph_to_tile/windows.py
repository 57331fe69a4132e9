"""Windows of conv/pool kernels built on chip from the raw input (the padding filled on chip
too; padded inputs can instead be read from planes prepared in DRAM, planes.py: the conv's cost
model chooses, tiling_cost.ConvTiles.on_chip_padding).

`WindowLoader` loads, per channel step and tile of output rows, the window of every stride-phase
plane (planes.Planes) of an unpadded input straight from the input rows in DRAM and builds it on
the vector unit; `row_tiles` walks the tiles of output rows (edge tiles whose windows would
reach outside the input are emitted on their own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

from xdsl.dialects.builtin import MemRefType, bf16, f32
from xdsl.ir import Attribute, SSAValue

from infer.dialects.dtypes import element_type_name, num_elements
from infer.passes.graph_to_tile.builder import Emitter, Index
from infer.passes.graph_to_tile.context import LoweringContext
from infer.passes.graph_to_tile.planes import Planes

@lru_cache(maxsize=4096)
def row_tile_plan(p: Planes, TOH: int, clip: bool = True) -> tuple[tuple[tuple[int, int, int, int], ...],
                                                                     tuple[int, int]]:
    """The tiles of TOH output rows as (oh0, toh, top, bottom) and the range [lo, hi) of them
    that is one loop (empty when fewer than 2 tiles qualify): the longest run of full tiles
    whose windows need no clipping (Planes.clip; `clip=False`: windows of prepared planes,
    which never need it). Cached: the conv cost model asks for it per tiling candidate."""
    OH = p.OH
    TOH = max(1, min(TOH, OH))
    starts = list(range(0, OH, TOH))
    sizes = [min(TOH, OH - oh0) for oh0 in starts]
    clips = [p.clip(oh0, toh) if clip else (0, 0) for oh0, toh in zip(starts, sizes, strict=True)]
    runs: list[tuple[int, int]] = []
    for i, (clip, size) in enumerate(zip(clips, sizes, strict=True)):
        if clip == (0, 0) and size == TOH:
            if runs and runs[-1][1] == i:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
    lo, hi = max(runs, key=lambda r: r[1] - r[0]) if runs else (0, 0)
    if hi - lo < 2:
        lo = hi = 0
    return tuple((oh0, toh, *clip) for oh0, toh, clip in zip(starts, sizes, clips, strict=True)), (lo, hi)


def row_tiles(em: Emitter, p: Planes, TOH: int, clip: bool,
              body: Callable[[Index, int, int, int, bool], None]) -> None:
    """body(oh0, toh, top, bottom, looped) over the tiles of TOH output rows; `top`/`bottom` are
    the window rows outside the input (Planes.clip, when `clip`): such tiles are emitted on
    their own, the longest run of full tiles that need no clipping is one loop (`looped`)."""
    tiles, (lo, hi) = row_tile_plan(p, TOH, clip)
    TOH = max(1, min(TOH, p.OH))
    for i, (oh0, toh, top, bottom) in enumerate(tiles):
        if i == lo and hi > lo:
            em.loop(lo * TOH, hi * TOH, TOH, lambda oh0: body(oh0, TOH, 0, 0, True))
        if lo <= i < hi:
            continue
        body(oh0, toh, top, bottom, False)


def loads_in_place(p: Planes, pixel_major: bool, same_type: bool) -> bool:
    """Do the input rows' DMAs land in the window itself (no staging tile, no copy)? A
    channel-major window of an unpadded stride-1 input is its input rows end to end (Wq = W),
    when the input is in DRAM in the window's element type (bf16 activations, int8)."""
    return p.raw and not pixel_major and same_type


def staged_width(p: Planes, pixel_major: bool) -> int:
    """Columns of a `WindowLoader`'s staging rows: the input's width W; an odd width with a
    column stride widened to a multiple of the stride for a channel-major window (`widened`:
    whole input rows, the column phases gathered on the vector unit) or, pixel-major, its
    column phase (a DMA with element steps). (A kept input, which skips the staging rows, needs a
    width the stride divides: `copies_kept_rows`.)"""
    sw = p.stride[1]
    if p.W % sw == 0:
        return p.W
    nw = -(-p.W // sw)
    return nw if pixel_major else nw * sw


def gathers_columns(p: Planes, pixel_major: bool) -> bool:
    """Does a `WindowLoader` gather each plane into a contiguous tile before placing it (its
    `gathered` buffer): a pixel-major window (the transpose) or a column stride (the phase taken
    from whole or widened staging rows)."""
    return pixel_major or p.stride[1] > 1


def copies_kept_rows(p: Planes, N: int) -> bool:
    """Can a `WindowLoader` copy this input's rows from a kept tile (its `kept`): one image and
    a width the column stride divides (whole rows land in the staging tile, where a narrower
    column phase of an odd width is DMA'd with element steps instead). Stride-1 rows are one
    copy per step; a row stride's phases one copy per window row (`WindowLoader.load`)."""
    return N == 1 and p.W % p.stride[1] == 0


def places_rows_from_kept(p: Planes, pixel_major: bool) -> bool:
    """Does a `WindowLoader` with a kept input place its rows in the window straight from the
    kept tile, one copy per input row (`WindowLoader._place_kept_rows`)? A padded stride-1
    channel-major window: its rows are the input's, each at its padded place."""
    return not p.raw and p.stride == (1, 1) and not pixel_major


def kept_window(ctx: LoweringContext, buffer: SSAValue, shape: tuple[int, int]) -> SSAValue | None:
    """A `shape` view of the tile the kernel before kept on chip for DRAM `buffer`
    (`LoweringContext.keep_on_chip`: a conv's whole output, conv_store.store_output_tile), if
    any and in the buffer's element type (bf16, or the f32 residual trunk): `WindowLoader`'s
    `kept`, or a 1x1 conv's window itself (bf16 only, `ConvKernel.window_on_chip`). Only a tile the kernels up to
    its last reader were sized around (kept `charged`): a conv reading it keeps it live through
    a nest that may fill the scratchpad."""
    tile = ctx.on_chip(buffer)
    if (tile is None or not isinstance(tile.type, MemRefType) or not isinstance(buffer.type, MemRefType)
            or tile.type.element_type != buffer.type.element_type or not ctx.kept_charged(buffer)):
        return None
    return ctx.on_chip_as(buffer, shape)


def _shape(value: SSAValue) -> tuple[int, ...]:
    ty = value.type
    assert isinstance(ty, MemRefType)
    return tuple(ty.get_shape())


class WindowLoader:
    """Loads, per channel step and tile of output rows, the windows of every plane from the
    input in DRAM (any [.., H, W] buffer: the rows of its [rows, H, W] view are the channels;
    f32 or bf16) into local buffers, doing the padding, the stride phases and the rounding on
    chip:

    * one DMA per row phase of the window's input rows (a row step for strides; whole rows, so
      no DMA moves single elements) into a staging tile [TC, RQ, W] (RQ = the window's plane
      rows); rows outside the input are filled with the border value;
    * gather (per plane): a stride's column phase taken on the vector unit (the rows viewed as
      groups of sw elements, one `copy` of one column of that view), and for pixel-major
      windows the transpose (one `copy` per channel, or per pixel when there are fewer), into
      a contiguous [TC, RQ.nw] / [RQ.nw, TC] tile;
    * place: one `copy` of those rows into the padded windows (border columns filled), which
      also rounds to the windows' element type (bf16 `hi`, and `lo` = bf16(x - hi) for the fp32
      emulation; or f32 for pooling). Steps that would be identities are skipped: a
      channel-major window of an unpadded stride-1 input already in the window's element type
      is its own staging tile (`loads_in_place`: the DMA lands in the window).

    Channel-major windows are [TC, Lw] (a channel's plane rows end to end), pixel-major ones
    [Lw, TC]; `windows[plane]` lists one buffer per element type in `targets`. An odd input
    width with a column stride: a channel-major window's staging rows are widened to a multiple
    of the stride (`widened`: whole input rows land in them, the columns past the input hold the
    border value and no phase reads them), a pixel-major one loads the column phase by a DMA with
    element steps (slow: one element per burst; EfficientNet's 7x7 stride-2 depthwise convs on
    server were a DMA per channel, 26.9 K cycles)."""

    def __init__(self, ctx: LoweringContext, p: Planes, src: SSAValue, C: int, TC: int, TOH: int, *,
                 pixel_major: bool, targets: Sequence[Attribute], border: float, buffers: int = 2,
                 kept: SSAValue | None = None):
        """`kept`: the input (one image) as the kernel before left it on chip, a [C, H.W] tile
        of src's element type: the input rows are copied from it on the vector unit instead of
        loaded from DRAM (stride-1 rows one copy per step: every channel's rows are one run in
        both, at pitches H.W and RQ.W; a row stride's phases one copy per window row), so the
        window does not wait for the kernel before's
        store and a DRAM round trip; an unpadded stride-1 channel-major window of another
        element type rounds them straight from it (`rounds_kept`)."""
        em = self.em = ctx.emitter
        self.kept = kept
        self.C = C
        self.ctx, self.p, self.TC, self.TOH = ctx, p, TC, TOH
        self.pixel_major, self.border = pixel_major, border
        H, W = p.H, p.W
        src_type = src.type
        assert isinstance(src_type, MemRefType)
        self.src_elem = src_type.get_element_type()
        self.src = em.view(src, (num_elements(_shape(src)) // (H * W), H, W))
        sw = p.stride[1]
        self.RQ = p.window_rows(TOH)
        self.Lw = p.window_length(TOH)
        self.even = W % sw == 0
        self.nw = -(-W // sw)  # plane columns holding data (at most)
        self.split = len(targets) == 2  # hi and lo (fp32 emulation)
        # an odd width's channel-major staging rows widened to nw.sw: whole rows, then the
        # column phases gathered on the vector unit as for an even width
        self.widened = not self.even and sw > 1 and not pixel_major and kept is None
        width = staged_width(p, pixel_major)
        self.in_place = loads_in_place(p, pixel_major, len(targets) == 1 and targets[0] == self.src_elem)
        # a kept input of an unpadded stride-1 channel-major window in another element type (the
        # f32 residual trunk for bf16 windows): its rows are rounded into the window straight
        # from the kept tile, no staging copy first
        self.rounds_kept = kept is not None and p.raw and not pixel_major and not self.in_place
        # a kept input of a padded stride-1 channel-major window: each input row placed in the
        # window straight from the kept tile (`_place_kept_rows`), no staging copy first
        self.places_kept_rows = (kept is not None and places_rows_from_kept(p, pixel_major) and not self.in_place
                                 and not self.rounds_kept)
        if self.rounds_kept or self.places_kept_rows:
            self.staging = {}
        elif not self.in_place:
            self.staging = {rp: em.alloc((TC, self.RQ, width), self.src_elem, "spad", buffers)
                            for rp in sorted({rp for rp, _ in p.phases})}
        gather_elem = f32 if self.split or element_type_name(targets[0]) == "f32" else targets[0]
        self.needs_gather = gathers_columns(p, pixel_major)
        self.gathered = None
        if self.needs_gather:
            shape = (self.RQ * self.nw, TC) if pixel_major else (TC, self.RQ * self.nw)
            self.gathered = em.alloc(shape, gather_elem, "spad", buffers)
        shape = (self.Lw, TC) if pixel_major else (TC, self.Lw)
        self.windows = [[em.alloc(shape, e, "spad", buffers) for e in targets] for _ in p.phases]
        if self.in_place:  # the one plane's window, viewed as the staging tile's rows
            self.staging = {0: em.view(self.windows[0][0], (TC, self.RQ, width))}

    def plane_order(self) -> list[int]:
        """The planes (indices into p.phases) in the order `load` places them: row phase by
        row phase."""
        p = self.p
        return [p.phases.index((rp, cp)) for rp in sorted({rp for rp, _ in p.phases})
                for cp in [c for r, c in p.phases if r == rp]]

    def load(self, n: Index, channel: Index, oh0: Index, toh: int, tc: int, top: int, bottom: int,
             after_plane: Callable[[int], None] | None = None) -> None:
        """The windows of channels [channel, channel + tc) of image n for output rows
        [oh0, oh0 + toh); `top`/`bottom` window rows lie outside the input. `after_plane(plane)`:
        called right after each plane's window is placed, in `plane_order` (conv.py emits the
        products of the plane before there, ahead of the next planes' gathers:
        `ConvKernel.interleaves_planes`)."""
        em, p = self.em, self.p
        first_row = em.add(em.mul(n, self.C), channel)
        sh, sw = p.stride
        rq = p.window_rows(toh)
        if self.rounds_kept:  # (unpadded, stride 1: the window's rows are input rows oh0 ..)
            self._round(self.kept, (first_row, em.mul(oh0, p.W)), self.windows[0], (0, 0), tc, rq * p.W)
            return
        if self.places_kept_rows:
            self._place_kept_rows(first_row, oh0, rq, tc, top, bottom)
            return
        clipped = top or bottom  # then oh0 is a compile-time row (clipped tiles are not looped)
        # each row phase its own clipping: one phase's last rows can lie outside the input while
        # the other's are inside (a height that is not a multiple of the stride)
        clips = {rp: p.clip_phase(oh0, toh, rp) if clipped else (0, 0) for rp in self.staging}  # type: ignore[arg-type]

        def src_row(rp: int) -> Index:
            return em.add(em.mul(em.add(oh0, clips[rp][0]), sh), rp - p.pads[0])

        if self.kept is None and (self.even or self.widened):
            # every row phase's DMA first: the front end reaches a phase's vector work only once
            # its rows have landed, and a DMA after it would start a DRAM latency later (the
            # server stem's two row phases: 806 cycles each, the second issued when the first ended)
            for rp, staging in self.staging.items():
                top, bottom = clips[rp]
                if rq - top - bottom > 0:
                    em.dma(self.src, [first_row, src_row(rp), 0], staging, [0, top, 0], [tc, rq - top - bottom, p.W],
                           [1, sh, 1] if sh > 1 else None)
        for rp, staging in self.staging.items():
            top, bottom = clips[rp]
            rows = rq - top - bottom
            width = _shape(staging)[2]
            if rows > 0 and self.kept is not None:
                assert self.even
                staged = em.view(staging, (_shape(staging)[0], self.RQ * width))
                first = src_row(rp)
                if sh == 1:  # the rows are one run per channel in both
                    em.vec("copy", staged, [0, top * width], self.kept, [first_row, em.mul(first, p.W)], tc,
                           rows * p.W)
                else:  # this phase's rows are every sh-th input row: one copy per window row
                    em.range(rows, lambda i, top=top, first=first: em.vec(
                        "copy", staged, [0, em.mul(em.add(i, top), width)], self.kept,
                        [first_row, em.mul(em.add(first, em.mul(i, sh)), p.W)], tc, p.W))
            if self.widened:  # the columns past the input: the border (no phase takes them)
                em.fill(em.view(staging, (self.TC * self.RQ, width)), [0, p.W], tc * self.RQ, width - p.W, self.border)
            flat = em.view(staging, (self.TC, self.RQ * width))
            if top:
                em.fill(flat, [0, 0], tc, top * width, self.border)
            if bottom:
                em.fill(flat, [0, (rq - bottom) * width], tc, bottom * width, self.border)
            if self.in_place:
                continue
            for cp in [c for r, c in p.phases if r == rp]:
                wc = (cp - p.pads[1]) % sw
                if not self.even and not self.widened and rows > 0:
                    nw = len(range(wc, p.W, sw))
                    em.dma(self.src, [first_row, src_row(rp), wc], staging, [0, top, 0], [tc, rows, nw], [1, sh, sw])
                self._plane(p.phases.index((rp, cp)), staging, wc, rq, tc)
                if after_plane is not None:
                    after_plane(p.phases.index((rp, cp)))

    def _place_kept_rows(self, first_row: Index, oh0: Index, rq: int, tc: int, top: int, bottom: int) -> None:
        """The one plane's window of a padded stride-1 input kept on chip, channel-major: the
        border (the window rows outside the input, the padded columns of the others), then one
        copy per input row of every channel, from the kept tile straight into its padded row of
        the window (rounded to the window's element types). The staging path copied all rows
        into a staging tile first and then into the window's padded rows: two vector passes
        over the input where this is one (ResNet-50 server's 3x3 64->64 at 56x56: 837 cycles of
        window building ahead of its first im2col copy, its matmuls waiting)."""
        em, p = self.em, self.p
        Wq, W, left = p.Wq, p.W, p.pads[1]
        windows = self.windows[0]
        rows_view = [em.view(w, (self.TC, self.RQ * Wq)) for w in windows]
        columns_view = [em.view(w, (self.TC * self.RQ, Wq)) for w in windows]
        for rows, columns in zip(rows_view, columns_view, strict=True):
            if top:
                em.fill(rows, [0, 0], tc, top * Wq, self.border)
            if bottom:
                em.fill(rows, [0, (rq - bottom) * Wq], tc, bottom * Wq, self.border)
            if left:
                em.fill(columns, [0, 0], tc * self.RQ, left, self.border)
            if Wq - left - W > 0:
                em.fill(columns, [0, left + W], tc * self.RQ, Wq - left - W, self.border)
        src_row = em.add(oh0, top - p.pads[0])  # (window row r holds input row oh0 + r - pads[0])
        em.range(rq - top - bottom, lambda i: self._round(
            self.kept, (first_row, em.mul(em.add(src_row, i), W)), rows_view,
            (0, em.add(em.mul(i, Wq), top * Wq + left)), tc, W))

    def _plane(self, plane: int, staging: SSAValue, wc: int, rq: int, tc: int) -> None:
        em, p = self.em, self.p
        sw, left, Wq = p.stride[1], p.pads[1], p.Wq
        nw = len(range(wc, p.W, sw))  # data columns of this column phase
        j0 = (wc + left) // sw  # where they start in the plane
        width = _shape(staging)[2]
        windows = self.windows[plane]
        if self.pixel_major:
            src = self._transpose(staging, width, wc, nw, rq, tc)  # [rq.nw, tc] (pitch TC)
            if Wq == nw and j0 == 0:  # unpadded: the transpose is the window (rounded)
                self._round(src, (0, 0), windows, (0, 0), rq * nw, tc)
                return
            views = [em.view(w, (self.RQ, Wq * self.TC)) for w in windows]
            rows_src = em.view(src, (self.RQ, self.nw * self.TC)) if nw == self.nw else None
            if rows_src is None:  # a narrower phase: place row by row
                flat = em.view(src, (self.RQ * self.nw, self.TC))
                self._fill_border_pixels(views, rq, j0, nw, tc)
                for i in range(rq):
                    self._round(flat, (i * nw, 0), [em.view(w, (self.RQ * Wq, self.TC)) for w in windows],
                                (i * Wq + j0, 0), nw, tc)
                return
            self._fill_border_pixels(views, rq, j0, nw, tc)
            if tc == self.TC:
                self._round(rows_src, (0, 0), views, (0, j0 * self.TC), rq, nw * tc)
            else:  # a channel remainder: pixels of tc channels at pitch TC
                for i in range(rq):
                    self._round(em.view(src, (self.RQ * self.nw, self.TC)), (i * self.nw, 0),
                                [em.view(w, (self.RQ * Wq, self.TC)) for w in windows], (i * Wq + j0, 0), nw, tc)
            return
        # channel-major
        if self.gathered is not None:  # the column phase: every sw-th element of the rows
            groups = em.view(staging, (self.TC * self.RQ * width // sw, sw))
            gathered = em.view(self.gathered, (self.TC * self.RQ * self.nw, 1))
            # (all nw groups of each row: a widened odd width's narrower phase takes its first
            # nw below, the rows keep their pitch)
            em.vec("copy", gathered, [0, 0], groups, [0, wc], tc * self.RQ * self.nw, 1)
            src, pitch = em.view(self.gathered, (self.TC * self.RQ, self.nw)), self.nw
        else:
            src, pitch = em.view(staging, (self.TC * self.RQ, width)), width
        views = [em.view(w, (self.TC * self.RQ, Wq)) for w in windows]
        if j0:
            for v in views:
                em.fill(v, [0, 0], tc * self.RQ, j0, self.border)
        if Wq - j0 - nw > 0:
            for v in views:
                em.fill(v, [0, j0 + nw], tc * self.RQ, Wq - j0 - nw, self.border)
        _ = pitch
        self._round(src, (0, 0), views, (0, j0), tc * self.RQ, nw)

    def _fill_border_pixels(self, views: list[SSAValue], rq: int, j0: int, nw: int, tc: int) -> None:
        em, Wq, TC = self.em, self.p.Wq, self.TC
        for v in views:
            if j0:
                em.fill(v, [0, 0], rq, j0 * TC, self.border)
            if Wq - j0 - nw > 0:
                em.fill(v, [0, (j0 + nw) * TC], rq, (Wq - j0 - nw) * TC, self.border)

    def _transpose(self, staging: SSAValue, width: int, wc: int, nw: int, rq: int, tc: int) -> SSAValue:
        """The column phase of the staging tile [TC, RQ, width] transposed into the gathered
        tile [RQ.nw, TC]: per channel one strided `copy` (or per pixel when fewer)."""
        em = self.em
        assert self.gathered is not None
        sw = self.p.stride[1] if self.even else 1
        pixels = rq * nw
        out = self.gathered
        if not self.even and nw < width:
            # an odd width's narrower column phase: its DMA left rows of nw elements at pitch
            # `width` (not end to end), so the pixels move row by row
            column = em.view(staging, (self.TC * self.RQ * width, 1))
            flat_out = em.view(out, (self.RQ * self.nw * self.TC, 1))
            plane = em.view(staging, (self.TC, self.RQ * width))
            for i in range(rq):
                if tc <= nw:  # channel c's row i -> rows i.nw .. of column c
                    em.range(tc, lambda c, i=i: em.vec("copy", out, [i * nw, c], column,
                                                       [em.add(em.mul(c, self.RQ * width), i * width), 0], nw, 1))
                else:  # pixel (i, j)'s channels -> row i.nw + j
                    em.range(nw, lambda j, i=i: em.vec("copy", flat_out, [em.mul(em.add(j, i * nw), self.TC), 0],
                                                       plane, [0, em.add(j, i * width)], tc, 1))
            return out
        if tc <= pixels:  # channel c: its phase elements (every sw-th) -> column c
            groups = em.view(staging, (self.TC * self.RQ * width // sw, sw))
            column0 = wc if self.even else 0  # an odd width's staging holds only this phase's columns
            em.range(tc, lambda c: em.vec("copy", out, [0, c], groups, [em.mul(c, self.RQ * width // sw), column0],
                                          pixels, 1))
        else:  # pixel q: its channels -> row q
            flat_out = em.view(out, (self.RQ * self.nw * self.TC, 1))
            plane = em.view(staging, (self.TC, self.RQ * width))
            if sw > 1 and self.even:
                # pixel q = (i, j) sits at column i.width + wc + sw.j of the channel rows
                for i in range(rq):
                    em.range(nw, lambda j, i=i: em.vec(
                        "copy", flat_out, [em.mul(em.add(j, i * nw), self.TC), 0], plane,
                        [0, em.add(em.mul(j, sw), i * width + wc)], tc, 1))
            else:
                em.range(pixels, lambda q: em.vec("copy", flat_out, [em.mul(q, self.TC), 0], plane, [0, q], tc, 1))
        return out

    def _round(self, src: SSAValue, s_at: tuple[Index, Index], dsts: list[SSAValue], d_at: tuple[Index, Index],
               rows: int, cols: int) -> None:
        """dsts[0] = round(src); with two destinations dsts[1] = bf16(src - dsts[0])
        (`Emitter.round_parts`)."""
        self.em.round_parts(src, list(s_at), dsts[0], dsts[1] if len(dsts) == 2 else None, list(d_at), rows, cols)
