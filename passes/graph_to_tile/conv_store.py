"""The store of a conv-shaped output tile: [rows, toh.Wq] f32 with padded-width rows (conv.py's
tiles, depthwise.py's) into the [N.O, OH, OW] output, f32 or narrowed to bf16."""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, MemRefType, bf16, i64
from xdsl.ir import SSAValue

from infer.dialects import tile as t
from infer.dialects.dtypes import num_elements, numpy_dtype_of, shape_of
from infer.passes.graph_to_tile.builder import Emitter, Index
from infer.passes.graph_to_tile.context import LoweringContext
from infer.passes.graph_to_tile.planes import Planes

#: a conv's whole bf16 output kept on chip (`store_output_tile`'s `whole`) for the two kernels
#: named next: the tile stays live to its reader, and those are the ones whose load would wait
#: behind this kernel's store (a ResNet bottleneck's 3x3 conv is read by its expanding 1x1 conv
#: after the block's downsampling conv; a residual read by a later block's epilogue is loaded
#: from DRAM, long after the store)
KEPT_CONV_OUTPUT_READERS = 2

#: a kept output taking at most 1/this of the scratchpad stays on chip for one kernel more
#: (`kept_output_readers`)
SMALL_KEPT_OUTPUT = 32


def kept_output_readers(ctx: LoweringContext, tile: SSAValue) -> int:
    """The kernels named next that may read a whole output kept on chip in `tile`:
    KEPT_CONV_OUTPUT_READERS, one more for a small one (at most 1/SMALL_KEPT_OUTPUT of the
    scratchpad), whose bytes the kernels in between hardly miss: the 7x7 stage's residual trunk
    for the next block's residual add (conv.py `ConvKernel.kept_output_readers`), a stem's
    pooled output for the stacked input of the first bottleneck's merged convs
    (copies.py `lower_concat`)."""
    nbytes = num_elements(shape_of(tile)) * numpy_dtype_of(tile).itemsize
    small = nbytes * SMALL_KEPT_OUTPUT <= ctx.hw.memory.scratchpad_bytes
    return KEPT_CONV_OUTPUT_READERS + (1 if small else 0)


def store_output_tile(ctx: LoweringContext, p: Planes, out3: SSAValue, tile: SSAValue, out_row: Index,
                      oh0: Index, to: int, toh: int, whole: bool = False,
                      kept_output: SSAValue | None = None) -> None:
    """Store the [to, toh.Wq] f32 output tile (padded-width rows) into rows [out_row, out_row +
    to) and output rows [oh0, oh0 + toh) of `out3` [N.O, OH, OW]: a bf16 output through a compact
    rounded copy (`_round_bf16`, `store_compact_tile`), an f32 one by a DMA of the valid columns of each row. `whole`:
    the tile is the whole output (the kernel's only tile): its compact bf16 copy is kept on chip
    for the next kernels (`LoweringContext.keep_on_chip`), whose load of it would wait for this
    store and a DRAM latency of its own (conv.py `ConvKernel.kept_input`). `kept_output`: the
    kernel's whole output [N.O, OH.OW] kept on chip, bf16 or f32 (`ConvKernel.output_kept_whole`;
    rows without padded-width columns): the tile's rows are written there and stored from
    there (`_store_from_kept`)."""
    em = ctx.emitter
    if kept_output is not None:
        _store_from_kept(em, p, out3, tile, out_row, oh0, to, toh, kept_output)
    elif ctx.is_bf16_buffer(out3):
        store_compact_tile(ctx, p, out3, _round_bf16(em, p, tile, to, toh), out_row, oh0, to, toh, whole)
    elif p.Wq != p.OW:
        # the tile's own row count: an edge row tile's buffers hold its toh rows, not TOH
        tile_rows, tile_cols = tile.type.get_shape()  # type: ignore[attr-defined]
        rows_view = em.view(tile, (tile_rows, tile_cols // p.Wq, p.Wq))
        em.dma(rows_view, [0, 0, 0], out3, [out_row, oh0, 0], [to, toh, p.OW])
    else:
        store_staged_rows(em, p, out3, tile, out_row, oh0, 0, to, toh)


def store_compact_tile(ctx: LoweringContext, p: Planes, out3: SSAValue, compact: SSAValue, out_row: Index,
                       oh0: Index, to: int, toh: int, whole: bool) -> None:
    """Store the compact [to, toh.OW] bf16 output tile (no padded-width columns: each channel's
    rows are one DRAM run, where short bf16 rows would waste most of their bursts) into rows
    [out_row, out_row + to) and output rows [oh0, oh0 + toh) of `out3`; `whole` (the kernel's
    only tile): kept on chip for the next kernels (`store_output_tile`)."""
    store_staged_rows(ctx.emitter, p, out3, compact, out_row, oh0, 0, to, toh)
    if whole:
        ctx.keep_on_chip(out3, compact, next_kernels=KEPT_CONV_OUTPUT_READERS, charged=True)


def stage_output_tile(em: Emitter, p: Planes, tile: SSAValue, to: int, toh: int, staged: SSAValue) -> None:
    """Write the [to, toh.OW] tile (no padded-width columns) into `staged`, a buffer of the
    output's element type the store reads later (`store_staged_rows`): the epilogue's last op
    writes it itself where it writes the whole tile (computing in fp32 and rounding once at its
    destination, the same bits as a copy after it), else one vector copy."""
    assert p.Wq == p.OW
    last = _last_whole_tile_write(em, tile, to, toh * p.OW)
    if last is not None:
        operands = list(last.operands)
        operands[0] = staged
        last.operands = operands
        em.discard_unused_alloc(tile)
    else:
        em.vec("copy", staged, [0, 0], tile, [0, 0], to, toh * p.OW)


def store_staged_rows(em: Emitter, p: Planes, out3: SSAValue, staged: SSAValue, out_row: Index, oh0: Index,
                      row0: Index, rows: int, toh: int) -> None:
    """DMA rows [row0, row0 + rows) of a [to, toh.OW] output tile without padded-width columns
    (an f32 tile, a compact bf16 copy, a `stage_output_tile` buffer) to rows [out_row + row0,
    ...) of `out3` [N.O, OH, OW], output rows [oh0, oh0 + toh)."""
    em.dma(staged, [row0, 0], em.view(out3, (out3.type.get_shape()[0], p.OH * p.OW)),  # type: ignore[attr-defined]
           [em.add(out_row, row0), em.mul(oh0, p.OW)], [rows, toh * p.OW])


def _round_bf16(em: Emitter, p: Planes, tile: SSAValue, to: int, toh: int) -> SSAValue:
    """Round the [to, toh.Wq] f32 tile into a compact [to, toh.OW] bf16 tile, the padded-width
    columns dropped (`store_compact_tile` stores it): by one vector copy, or by the epilogue's
    last op writing it itself. Returns the compact tile."""
    rows, cols = tile.type.get_shape()  # type: ignore[attr-defined]
    held = cols // p.Wq  # output rows the tile's buffer holds (toh, or TOH for a short tile)
    last = _last_whole_tile_write(em, tile, to, toh * p.OW) if p.Wq == p.OW else None
    pitched = _last_pointwise_write(em, tile, to, toh, p.Wq) if p.Wq != p.OW and held == toh else None
    compact = em.alloc((to, toh * p.OW), bf16, "spad", 2)
    if pitched is not None:
        # the epilogue's last op writes the compact tile itself, its padded-width columns
        # dropped: over the rows of OW valid columns (its operand and result viewed [rows, Wq]
        # and [rows, OW]); the same bits as the copy after it, one vector pass fewer
        _write_valid_columns(pitched, compact, to * toh, p.Wq, p.OW)
    elif last is not None:
        # the epilogue's last op writes the compact tile itself: it computes in fp32 and
        # rounds once at its destination, as the copy would after it (the same bits), and
        # the vector unit makes one pass over the tile fewer
        operands = list(last.operands)
        operands[0] = compact
        last.operands = operands
    elif p.Wq == p.OW:
        em.vec("copy", compact, [0, 0], tile, [0, 0], to, toh * p.OW)
    elif held == toh:  # every channel's output rows in one run of rows of the view
        em.vec("copy", em.view(compact, (to * toh, p.OW)), [0, 0], em.view(tile, (rows * held, p.Wq)), [0, 0],
               to * toh, p.OW)
    else:
        src, dst = em.view(tile, (rows * held, p.Wq)), em.view(compact, (to * toh, p.OW))
        em.range(to, lambda c: em.vec("copy", dst, [em.mul(c, toh), 0], src, [em.mul(c, held), 0], toh, p.OW))
    return compact


def _store_from_kept(em: Emitter, p: Planes, out3: SSAValue, tile: SSAValue, out_row: Index, oh0: Index,
                     to: int, toh: int, kept: SSAValue) -> None:
    """Store the tile through rows [out_row, out_row + to) of the kernel's kept whole output
    `kept` [N.O, OH.OW] (the tile has no padded-width columns): the tile is written there, then
    one DMA stores the rows from there.

    A bf16 output: a vector copy rounds the tile there. Not the epilogue's last op writing them
    itself (`_last_whole_tile_write`): that op would have three consumers (the accumulator's
    next round, the store, the next kernel's matmuls reading its rows in place), one more than
    an instruction signals, and the third became a front-end relay that held the dispatch until
    the op completed (a 1x1 256 -> 1024 -> 256 chain at 14x14 on server: 11,430 cycles so,
    10,336 with the copy, 10,569 with the output not kept). An f32 output (the residual trunk):
    its readers round it on the vector unit, the engine of the epilogue, so the last op writes
    the rows itself (one vector pass fewer per tile, on the path to the next kernel)."""
    assert p.Wq == p.OW
    at = [out_row, em.mul(oh0, p.OW)]
    last = (_last_whole_tile_write(em, tile, to, toh * p.OW)
            if kept.type.get_element_type() == tile.type.get_element_type() else None)  # type: ignore[attr-defined]
    if last is not None:
        b = list(last.b)
        em.vec(last.op.data, kept, at, last.a, list(last.a_indices), to, toh * p.OW, b[0] if b else None,
               list(last.b_indices), last.bmode.data if last.bmode is not None else None,
               last.imm.value.data if last.imm is not None else None)
        last.detach()
        last.erase()
    else:
        em.vec("copy", kept, at, tile, [0, 0], to, toh * p.OW)
    em.dma(kept, at, em.view(out3, (out3.type.get_shape()[0], p.OH * p.OW)),  # type: ignore[attr-defined]
           at, [to, toh * p.OW])


def _last_pointwise_write(em: Emitter, tile: SSAValue, rows: int, toh: int, Wq: int) -> t.VectorOp | None:
    """`_last_whole_tile_write` of the [rows, toh.Wq] tile when the op is elementwise on its a
    operand alone (unary, or binary with an immediate), read from [0, 0] of a buffer whose rows
    are toh rows of Wq: it is then the same op over [rows.toh, Wq] views, any columns of them."""
    last = _last_whole_tile_write(em, tile, rows, toh * Wq)
    if last is None or not (last.form == "unary" or (last.bmode is not None and last.bmode.data == "imm")):
        return None
    if any(not (isinstance(i.owner, arith.ConstantOp) and i.owner.value.value.data == 0) for i in last.a_indices):
        return None
    a_cols = last.a.type.get_shape()[1]  # type: ignore[attr-defined]
    return last if a_cols == toh * Wq else None


def _write_valid_columns(op: t.VectorOp, compact: SSAValue, rows: int, Wq: int, OW: int) -> None:
    """Make `op` (`_last_pointwise_write`) write the first OW of every Wq columns of its a
    operand, as [rows, OW] of `compact` viewed so, instead of its whole tile."""
    def view(value: SSAValue, cols: int) -> SSAValue:
        ty = value.type
        assert isinstance(ty, MemRefType)
        total = ty.get_shape()[0] * ty.get_shape()[1]
        new = t.ViewOp.build(operands=[value], result_types=[
            t.memref_type((total // cols, cols), ty.get_element_type(), ty.memory_space)])
        op.parent_block().insert_op_before(new, op)  # type: ignore[union-attr]
        return new.results[0]

    operands = list(op.operands)
    operands[0] = view(compact, OW)
    operands[1 + len(op.dst_indices)] = view(op.a, Wq)
    op.operands = operands
    op.properties["rows"] = IntegerAttr(rows, i64)
    op.properties["cols"] = IntegerAttr(OW, i64)


def _last_whole_tile_write(em: Emitter, tile: SSAValue, rows: int, cols: int) -> t.VectorOp | None:
    """The op just emitted, when it is an elementwise vector op writing all of `tile` ([rows,
    cols] from [0, 0]) in one instruction, reading neither `tile` nor a view of it through its
    b operand (its a operand may be `tile`: an in-place op then reads it and writes elsewhere)."""
    point = em.insert_point
    last = point.insert_before.prev_op if point.insert_before is not None else point.block.last_op
    if not isinstance(last, t.VectorOp) or last.dst is not tile:
        return None
    if last.form not in ("unary", "binary"):
        return None
    if last.rows.value.data != rows or last.cols.value.data != cols:
        return None
    if any(not (isinstance(i.owner, arith.ConstantOp) and i.owner.value.value.data == 0) for i in last.dst_indices):
        return None
    if any(b is tile or t.root_buffer(b) is t.root_buffer(tile) for b in last.b):
        return None
    return last
