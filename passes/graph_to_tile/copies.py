"""Data movement through the scratchpad: reshape, slice, concat, broadcast, pad, plain copies.

* reshape is a `tile.view` (free: every buffer is a contiguous row-major DRAM memref, so there
  is no non-contiguous reshape); a copy only when the result is a function output.
* slice (any steps, negative too), concat, broadcast and pad (constant) are `copy_box`: trailing
  full dims are merged, the last two dims are one strided DMA box per [TR, TC] staging tile
  (step 0 = broadcast: a row/column DMA and a `bmode=row/col` add), leading dims are loops (a
  negative step in the last two dims moves that dim into the loops); without broadcasts, when
  whole [rows, cols] boxes fit the staging tile, the innermost leading dim is the DMA's plane
  dim (TP planes per DMA, a positive step being a source step). Pad first fills the output.
* `copy_dram` (result copies, identity transposes, empty reductions), `padded_copy` (the
  bordered input of convs and pools) and `fill_dram` are helper loop nests of other kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import f32
from xdsl.ir import Attribute, Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import element_type_of, num_elements, numpy_dtype_of, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile import integer_inputs
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import LoweringContext, latency_bound
from infer.passes.graph_to_tile.conv_store import kept_output_readers


def _dims(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


def copy_dram(ctx: LoweringContext, src: SSAValue, dst: SSAValue, shape: Sequence[int]) -> None:
    """dst = src (same shape), in row tiles through the scratchpad."""
    em, scratchpad = ctx.emitter, ctx.hw.memory.scratchpad_bytes
    n = num_elements(shape)
    if n == 0:
        return
    cols = shape[-1] if shape else 1
    rows = n // cols
    src2, dst2 = em.view(src, (rows, cols)), em.view(dst, (rows, cols))
    tile_rows = max(1, min(rows, (scratchpad // 4) // (cols * 4 * 2)))
    if cols * 4 > scratchpad // 4:  # rows too long for a staging tile: copy as a column
        src2, dst2 = em.view(src, (n, 1)), em.view(dst, (n, 1))
        rows, cols, tile_rows = n, 1, min(n, scratchpad // 16)
    buffer = em.alloc((tile_rows, cols), f32, "spad", 2)
    em.tiles(rows, tile_rows, lambda r0, r: (em.dma(src2, [r0, 0], buffer, [0, 0], [r, cols]),
                                             em.dma(buffer, [0, 0], dst2, [r0, 0], [r, cols])))


def padded_copy(ctx: LoweringContext, x: SSAValue, planes: int, H: int, W: int,
                pads: tuple[int, int, int, int], value: float, elem: Attribute = f32) -> SSAValue:
    """x viewed [planes, H, W] copied into a DRAM buffer [planes, H + top + bottom, W + left +
    right] whose border is `value` (zero padding of convs, -inf of max pooling, the input zero
    point of int8 convs: `elem` i8); x itself (viewed) without padding. A loop nest of its own."""
    with ctx.stage(what="padded copy"):
        em = ctx.emitter
        top, left, bottom, right = pads
        x3 = em.view(x, (planes, H, W))
        if not any(pads):
            return x3
        Hp, Wp = H + top + bottom, W + left + right
        xp = em.alloc((planes, Hp, Wp), elem, "dram")
        quarter = ctx.hw.memory.scratchpad_bytes // 4
        rows2 = em.view(xp, (planes * Hp, Wp))
        border_rows = max(1, min(planes * Hp, quarter // (Wp * 4)))
        border = em.alloc((border_rows, Wp), elem, "spad")
        em.fill(border, [0, 0], border_rows, Wp, value)
        em.tiles(planes * Hp, border_rows, lambda r0, r: em.dma(border, [0, 0], rows2, [r0, 0], [r, Wp]))
        _, max_rows, max_planes = tiling_cost.dma_box_limits()  # one DMA box [planes, rows, W]
        tile_h = max(1, min(H, quarter // (W * 4 * 2), max_rows))
        tile_planes = max(1, min(planes, quarter // (tile_h * W * 4 * 2), max_planes))
        staging = em.alloc((tile_planes, tile_h, W), elem, "spad", 2)

        def body(c0: Index, cn: int, h0: Index, hn: int) -> None:
            em.dma(x3, [c0, h0, 0], staging, [0, 0, 0], [cn, hn, W])
            em.dma(staging, [0, 0, 0], xp, [c0, em.add(h0, top), left], [cn, hn, W])

        em.tiles(planes, tile_planes, lambda c0, cn: em.tiles(H, tile_h, lambda h0, hn: body(c0, cn, h0, hn)))
        return xp


def fill_dram(ctx: LoweringContext, dst: SSAValue, shape: Sequence[int], value: float) -> None:
    """dst[...] = value, from one filled staging tile. A loop nest of its own."""
    with ctx.stage(what="fill"):
        em = ctx.emitter
        n = num_elements(shape)
        width = shape[-1] if shape else 1
        if width > ctx.staging_tile_elements:
            width = 1
        rows = n // width
        dst2 = em.view(dst, (rows, width))
        tile_rows = max(1, min(rows, ctx.staging_tile_elements // width))
        buffer = em.alloc((tile_rows, width), element_type_of(dst), "spad")
        em.fill(buffer, [0, 0], tile_rows, width, value)
        em.tiles(rows, tile_rows, lambda r0, r: em.dma(buffer, [0, 0], dst2, [r0, 0], [r, width]))


# -- box copies --------------------------------------------------------------------------------


@dataclass
class _BoxDim:
    """One dim of a box copy: the source and destination sizes, the box extent, the source
    start and step, the destination start."""

    in_size: int
    out_size: int
    extent: int
    in_start: int
    in_step: int
    out_start: int


def copy_box(ctx: LoweringContext, src: SSAValue, in_shape: Sequence[int], in_start: Sequence[int],
             in_step: Sequence[int], dst: SSAValue, out_shape: Sequence[int], out_start: Sequence[int],
             box: Sequence[int]) -> None:
    """dst[out_start + b] = src[in_start + b * in_step] for every b < box (same rank).
    Steps may be negative or 0 (broadcast). Contiguous tails are merged; the last two
    dims are one strided DMA box per tile (steps 0 there are broadcast on the vector
    unit), the leading dims are loops. Without broadcasts, when whole [rows, cols] boxes
    fit a staging tile, the innermost leading dim is the box's third (plane) dim: one DMA
    moves TP planes (a positive step on that dim is a source step). Where src and dst hold
    different element types (a bf16 activation stacked into an f32 concat), each staged tile is
    converted by a vector copy before it is stored: a DMA copies bytes. A loop nest of its own."""
    with ctx.stage(what="box copy"):
        _copy_box(ctx, src, in_shape, in_start, in_step, dst, out_shape, out_start, box)


def _copy_box(ctx: LoweringContext, src: SSAValue, in_shape: Sequence[int], in_start: Sequence[int],
              in_step: Sequence[int], dst: SSAValue, out_shape: Sequence[int], out_start: Sequence[int],
              box: Sequence[int]) -> None:
    em = ctx.emitter
    rank = len(box)
    assert len(in_shape) == len(out_shape) == len(in_start) == len(in_step) == len(out_start) == rank
    if any(b == 0 for b in box):
        return
    dims = [_BoxDim(in_shape[i], out_shape[i], box[i], in_start[i], in_step[i], out_start[i]) for i in range(rank)]
    while len(dims) >= 2:  # merge a whole, contiguous last dim into the one before
        a, b = dims[-2], dims[-1]
        if (b.in_size == b.out_size == b.extent and b.in_start == 0 and b.out_start == 0 and b.in_step == 1
                and (a.in_step == 1 or a.extent == 1)):
            dims[-2:] = [_BoxDim(a.in_size * b.in_size, a.out_size * b.out_size, a.extent * b.extent,
                                 a.in_start * b.in_size, 1, a.out_start * b.out_size)]
        else:
            break
    while len(dims) < 2 or dims[-1].in_step < 0 or dims[-2].in_step < 0:
        dims.append(_BoxDim(1, 1, 1, 0, 1, 0))
    lead, (row_dim, col_dim) = dims[:-2], dims[-2:]
    planes_in, planes_out = num_elements([d.in_size for d in lead]), num_elements([d.out_size for d in lead])
    src3 = em.view(src, (planes_in, row_dim.in_size, col_dim.in_size))
    dst3 = em.view(dst, (planes_out, row_dim.out_size, col_dim.out_size))
    elem = element_type_of(src)
    converts = elem != element_type_of(dst)
    capacity = ctx.staging_tile_elements
    TC = max(1, min(col_dim.extent, capacity))
    TR = max(1, min(row_dim.extent, capacity // TC, tiling_cost.dma_box_limits()[1]))  # rows of one DMA
    rows_broadcast, cols_broadcast = row_dim.in_step == 0, col_dim.in_step == 0
    # planes need contiguous rows: with a column step the DMA's two strided dims are rows and
    # columns (one element per burst), and a third would be one transfer per plane
    planes = (not rows_broadcast and not cols_broadcast and bool(lead) and lead[-1].in_step > 0
              and TR == row_dim.extent and TC == col_dim.extent and col_dim.in_step == 1 and not converts)
    TP = max(1, min(lead[-1].extent, capacity // (TR * TC), tiling_cost.dma_box_limits()[2])) if planes else 1
    buf3 = em.alloc((TP, TR, TC), elem, "spad", 2)
    # broadcasts: on the vector unit (TP = 1)
    buf2 = em.view(buf3, (TR, TC)) if rows_broadcast or cols_broadcast else None
    row3 = em.alloc((1, 1, TC), elem, "spad", 2) if rows_broadcast and not cols_broadcast else None
    col3 = em.alloc((1, TR, 1), elem, "spad", 2) if cols_broadcast and not rows_broadcast else None
    one3 = em.alloc((1, 1, 1), elem, "spad", 2) if cols_broadcast and rows_broadcast else None
    row_vector = em.alloc((1, TC), elem, "spad", 2) if cols_broadcast and rows_broadcast else None
    # (converting: one plane per tile, so each tile is one [tr, tcn] box of the staged rows)
    converted = em.alloc((1, TR, TC), element_type_of(dst), "spad", 2) if converts else None
    z = [0, 0]

    def tile(p: Index, q: Index, r0: Index, tr: int, c0: Index, tcn: int, tp: int = 1) -> None:
        src_row = em.add(row_dim.in_start, em.mul(r0, row_dim.in_step))
        src_col = em.add(col_dim.in_start, em.mul(c0, col_dim.in_step))
        if buf2 is None:
            em.dma(src3, [p, src_row, src_col], buf3, [0, 0, 0], [tp, tr, tcn],
                   [lead[-1].in_step if tp > 1 else 1, row_dim.in_step, col_dim.in_step])
        else:
            em.fill(buf2, z, tr, tcn, 0.0)
            if row3 is not None:
                em.dma(src3, [p, src_row, src_col], row3, [0, 0, 0], [1, 1, tcn], [1, 1, col_dim.in_step])
                em.vec("add", buf2, z, buf2, z, tr, tcn, em.view(row3, (1, TC)), z, bmode="row")
            elif col3 is not None:
                em.dma(src3, [p, src_row, src_col], col3, [0, 0, 0], [1, tr, 1], [1, row_dim.in_step, 1])
                em.vec("add", buf2, z, buf2, z, tr, tcn, em.view(col3, (TR, 1)), z, bmode="col")
            else:
                assert one3 is not None and row_vector is not None
                em.dma(src3, [p, src_row, src_col], one3, [0, 0, 0], [1, 1, 1])
                em.fill(row_vector, z, 1, tcn, 0.0)
                em.vec("add", row_vector, z, row_vector, z, 1, tcn, em.view(one3, (1, 1)), z, bmode="col")
                em.vec("add", buf2, z, buf2, z, tr, tcn, row_vector, z, bmode="row")
        out = buf3
        if converted is not None:
            em.vec("copy", em.view(converted, (TR, TC)), z, em.view(buf3, (TR, TC)), z, tr, tcn)
            out = converted
        em.dma(out, [0, 0, 0], dst3, [q, em.add(row_dim.out_start, r0), em.add(col_dim.out_start, c0)],
               [tp, tr, tcn])

    def nest(k: int, p: Index, q: Index) -> None:
        if k == len(lead):
            em.tiles(row_dim.extent, TR, lambda r0, tr: em.tiles(
                col_dim.extent, TC, lambda c0, tcn: tile(p, q, r0, tr, c0, tcn)))
            return
        d = lead[k]
        if TP > 1 and k == len(lead) - 1:  # planes: the last leading dim's strides are 1 (in planes)
            em.tiles(d.extent, TP, lambda i0, tp: tile(em.add(p, em.add(d.in_start, em.mul(i0, d.in_step))),
                                                       em.add(q, em.add(d.out_start, i0)),
                                                       0, row_dim.extent, 0, col_dim.extent, tp))
            return
        in_stride = num_elements([x.in_size for x in lead[k + 1:]])
        out_stride = num_elements([x.out_size for x in lead[k + 1:]])
        em.range(d.extent, lambda i: nest(k + 1, em.add(p, em.mul(em.add(d.in_start, em.mul(i, d.in_step)), in_stride)),
                                          em.add(q, em.mul(em.add(d.out_start, i), out_stride))))

    nest(0, 0, 0)


# -- ops -------------------------------------------------------------------------------------


def lower_reshape(ctx: LoweringContext, op: Operation) -> None:
    """A view of the input's buffer (integer inputs and attention masks too); a copy when the
    result is a function output."""
    assert isinstance(op, g.ReshapeOp)
    if integer_inputs.lower_if_integer(ctx, op):
        return
    lower_reshape_view(ctx, op.input, op.output)


def lower_reshape_view(ctx: LoweringContext, source: SSAValue, result: SSAValue) -> None:
    """`result` as a view of `source`'s buffer (the same bytes in the same order); a copy when
    the result is a function output."""
    ctx.buffers[result] = ctx.emitter.view(ctx.buffer(source), shape_of(result))
    if result in ctx.destinations:
        copy_dram(ctx, ctx.buffers[result], ctx.destinations[result], shape_of(result))


def lower_slice(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.SliceOp)
    in_shape, out_shape = shape_of(op.input), shape_of(op.output)
    name = ctx.kernel_name()
    ctx.debug(f"[graph-to-tile] {name}: slice {_dims(in_shape)} -> {_dims(out_shape)}: strided DMA boxes")
    copy_box(ctx, ctx.buffer(op.input), in_shape, g.i64_values(op.starts), g.i64_values(op.steps),
             ctx.output_buffer(op.output), out_shape, [0] * len(out_shape), out_shape)


def lower_concat(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.ConcatOp)
    out_shape = shape_of(op.output)
    axis = op.axis.value.data % len(out_shape)
    name = ctx.kernel_name()
    # bf16 where the inputs are (storage.STACKING: all of them, or none)
    out = (ctx.narrow_output_buffer(op.output) if all(ctx.held_as_bf16(v) for v in op.inputs)
           else ctx.output_buffer(op.output))
    if _concat_on_chip(ctx, op, out, axis):
        ctx.debug(f"[graph-to-tile] {name}: concat of {len(op.inputs)} along axis {axis}: on chip, "
                  "one vector copy per input kept there")
        return
    ctx.debug(f"[graph-to-tile] {name}: concat of {len(op.inputs)} along axis {axis}: one DMA copy per input")
    offset = 0
    for value in op.inputs:
        shape = shape_of(value)
        start = [0] * len(shape)
        start[axis] = offset
        copy_box(ctx, ctx.buffer(value), shape, [0] * len(shape), [1] * len(shape), out, out_shape, start, shape)
        offset += shape[axis]


def _concat_on_chip(ctx: LoweringContext, op: g.ConcatOp, out: SSAValue, axis: int) -> bool:
    """On a latency-bound target, a concat of one image's channels (NCHW, axis 1) whose inputs
    the kernels before kept on chip (`LoweringContext.keep_on_chip`; a conv's whole output, a
    pool's) is stacked on chip: one vector copy per input into a tile of the output, which is
    stored and kept for the next kernels in its turn (a 1x1 conv reads it in place as its
    window: graph-merge-summed-convs' stacked input). Their loads would wait for the inputs'
    stores, and the conv's for the concat's, each with a DRAM latency of its own. False where
    an input is not kept or the tile would take more than a quarter of the scratchpad (it
    stays live to its last reader)."""
    shape = shape_of(op.output)
    if not latency_bound(ctx.hw) or axis != 1 or len(shape) < 2 or shape[0] != 1:
        return False
    pixels = num_elements(shape[2:])
    kept = [ctx.on_chip_as(ctx.buffer(v), (shape_of(v)[1], pixels)) for v in op.inputs]
    elem = element_type_of(out)
    if any(k is None or element_type_of(k) != elem for k in kept):
        return False
    tile_shape = (shape[1], pixels)
    if num_elements(tile_shape) * numpy_dtype_of(out).itemsize * 4 > ctx.hw.memory.scratchpad_bytes:
        return False
    em = ctx.emitter
    stacked = em.alloc(tile_shape, elem, "spad")
    row = 0
    for value, tile in zip(op.inputs, kept, strict=True):
        rows = shape_of(value)[1]
        em.vec("copy", stacked, [row, 0], tile, [0, 0], rows, pixels)
        row += rows
    out2 = em.view(out, tile_shape)
    em.dma(stacked, [0, 0], out2, [0, 0], list(tile_shape))
    ctx.keep_on_chip(out2, stacked, next_kernels=kept_output_readers(ctx, stacked), charged=True)
    return True


def lower_broadcast(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.BroadcastOp)
    out_shape = shape_of(op.output)
    in_shape = (1,) * (len(out_shape) - len(shape_of(op.input))) + shape_of(op.input)
    name = ctx.kernel_name()
    ctx.debug(f"[graph-to-tile] {name}: broadcast {_dims(in_shape)} -> {_dims(out_shape)}")
    src = ctx.emitter.view(ctx.buffer(op.input), in_shape) if in_shape else ctx.buffer(op.input)
    steps = [0 if (a == 1 and b != 1) else 1 for a, b in zip(in_shape, out_shape, strict=True)]
    copy_box(ctx, src, in_shape, [0] * len(out_shape), steps, ctx.output_buffer(op.output), out_shape,
             [0] * len(out_shape), out_shape)


def lower_pad(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.PadOp)
    in_shape, out_shape = shape_of(op.input), shape_of(op.output)
    pads = g.i64_values(op.pads)
    rank = len(in_shape)
    name = ctx.kernel_name()
    ctx.debug(f"[graph-to-tile] {name}: pad {_dims(in_shape)} -> {_dims(out_shape)}: fill, then one box copy")
    out = ctx.output_buffer(op.output)
    fill_dram(ctx, out, out_shape, float(op.value.value.data))
    copy_box(ctx, ctx.buffer(op.input), in_shape, [0] * rank, [1] * rank, out, out_shape, list(pads[:rank]), in_shape)
