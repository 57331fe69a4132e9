"""graph.gather: embedding lookups and index selection.

* axis 0 with runtime indices (embedding lookup): `tile.gather_rows` (a column tile of the table
  [V, W] -> scratchpad [TR, TC], then a DMA store). Integer model inputs used only as indices
  are read as they are (integer_inputs.py: must be in [0, V); i64 indices are read as their
  low 32 bits); indices computed on the device (held as f32 values, storage.py) are converted
  to an i32 buffer first, negative ones wrapped (+V), in a helper nest.
* runtime indices on another axis: the axis is moved to the front (transpose.permute_copy),
  rows are gathered, and the result is permuted back (helper nests).
* compile-time indices on axis 0 become an i32 weight for the same op; on other axes a few
  strided box copies (`index_boxes`: runs of evenly stepping indices, or the output's phases
  modulo a small period: a roll is 2 boxes, a nearest 2x upsampling 2; at most 64; more: the
  runtime path's transposes).
* a table that is `graph.dequantize_blocks` of a packed GGUF weight (the token embedding of a
  Q8_0/Q4_0/Q4_1 model) stays packed: its rows are split at compile time into a codes plane and
  a scales plane with blocks along the rows (`split_blocks(..., "row")`, llama.cpp's `get_rows`:
  gathering rows commutes with a row-wise dequantization), each indexed row's codes and scales
  are gathered and `tile.dequant blocks=row` expands them on chip. No dense copy of the table
  is stored (SmolLM2's Q8_0 embedding: 30 MB of planes instead of 113 MB of f32).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import MemRefType, f16, f32, i8, i32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.dialects.block_quant import block_format
from infer.dialects.dtypes import element_name_of, element_type_of, num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import LoweringContext, error, latency_bound
from infer.passes.graph_to_tile.copies import copy_box
from infer.passes.graph_to_tile.packed_gemm import emit_dequant, packed_source, plane_weight, ui8
from infer.passes.graph_to_tile.transpose import permute_copy
from infer.target import isa
from infer.target.qblocks import split_blocks

MAX_BOX_COPIES = 64  # compile-time indices on an inner axis: one box copy each, at most this many
LOCAL_INDEX_SHARE = 16  # row gathers copy their indices to the scratchpad when they take at most 1/16 of it
LOCAL_TABLE_SHARE = 8  # ... and their table where it takes at most 1/8 of it and pays (_gather_rows)


@dataclass(frozen=True)
class IndexBox:
    """Output positions first, first + period, ... (length of them) take input positions
    start, start + step, ...: one strided box copy of a gather with compile-time indices."""

    first: int
    period: int
    start: int
    step: int
    length: int


def _progression(values: np.ndarray) -> int | None:
    """The common difference of an arithmetic progression (0 for one value), else None."""
    if len(values) < 2:
        return 0
    steps = np.diff(values)
    return int(steps[0]) if np.all(steps == steps[0]) else None


def index_boxes(indices: np.ndarray, max_period: int = 8) -> list[IndexBox]:
    """Compile-time gather indices as few strided boxes: the runs of consecutive output
    positions whose indices step evenly (a roll's two runs, a slice, a reversal), or, when
    fewer, the output positions by phase modulo a period dividing their count whose indices
    step evenly (a nearest-neighbour upsampling by 2: [0, 0, 1, 1, ...] is two phases)."""
    indices = [int(i) for i in indices]
    count = len(indices)
    runs: list[IndexBox] = []
    j = 0
    while j < count:
        step = indices[j + 1] - indices[j] if j + 1 < count else 0
        end = j + 1
        while end < count and indices[end] - indices[end - 1] == step:
            end += 1
        runs.append(IndexBox(j, 1, indices[j], step, end - j))
        j = end
    best = runs
    array = np.asarray(indices)
    for period in range(2, min(max_period, count) + 1):
        if count % period or period >= len(best):
            continue
        steps = [_progression(array[r::period]) for r in range(period)]
        if all(s is not None for s in steps):
            best = [IndexBox(r, period, indices[r], steps[r], count // period) for r in range(period)]
    return best


def lower_gather(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.GatherOp)
    em = ctx.emitter
    shape = shape_of(op.input)
    axis = op.axis.value.data % len(shape)
    count = num_elements(shape_of(op.indices))
    const_indices = ctx.constant(op.indices)
    name = ctx.kernel_name()
    out = ctx.output_buffer(op.output)
    if const_indices is not None:
        indices = np.asarray(const_indices, np.int64).reshape(-1)
        indices = np.where(indices < 0, indices + shape[axis], indices)
        boxes = index_boxes(indices) if axis != 0 else []
        if axis != 0 and len(boxes) <= MAX_BOX_COPIES:
            ctx.debug(f"[graph-to-tile] {name}: gather axis {axis}: {count} compile-time indices "
                      f"in {len(boxes)} box copies")
            lead, trail = shape[:axis], num_elements(shape[axis + 1:])
            k = len(lead)
            for box in boxes:
                # output positions phase, phase + period, ...: the axis viewed [count / period, period]
                in_shape = (*lead, shape[axis], 1, trail)
                out_shape = (*lead, count // box.period, box.period, trail)
                copy_box(ctx, em.view(ctx.buffer(op.input), in_shape), in_shape,
                         [0] * k + [box.start, 0, 0], [1] * k + [box.step, 1, 1],
                         em.view(out, out_shape), out_shape, [0] * k + [box.first // box.period, box.first % box.period, 0],
                         (*lead, box.length, 1, trail))
            return
        index_buffer = ctx.weight(f"{name}.indices", indices.astype(np.int32), i32)
    else:
        index_buffer = ctx.buffers.get(op.indices)
        if index_buffer is None:
            raise error(op, "runtime gather indices have no buffer")
        if element_name_of(index_buffer) == "f32":
            index_buffer = _indices_as_i32(ctx, index_buffer, count, shape[axis])
    packed = packed_source(op.input) if axis == 0 else None
    if packed is not None:
        _gather_packed_rows(ctx, name, *packed, shape, index_buffer, count, out)
        return
    table_buffer = ctx.buffer(op.input)
    if axis != 0:  # move the axis to the front, gather rows, move it back
        lead, trail = shape[:axis], shape[axis + 1:]
        front = (shape[axis], *lead, *trail)
        perm = (axis, *range(axis), *range(axis + 1, len(shape)))
        with ctx.stage(what="transposed copy"):
            moved = em.alloc(front, f32, "dram")
            permute_copy(ctx, table_buffer, shape, perm, moved)
        gathered = em.alloc((count, *lead, *trail), f32, "dram")
        _gather_rows(ctx, name, moved, front[0], num_elements(front[1:]), index_buffer, count, gathered)
        back = (*range(1, axis + 1), 0, *range(axis + 1, len(shape)))
        with ctx.stage(what="transposed copy"):
            permute_copy(ctx, gathered, (count, *lead, *trail), back, em.view(out, (*lead, count, *trail)))
        return
    _gather_rows(ctx, name, table_buffer, shape[0], num_elements(shape[1:]), index_buffer, count, out)


def _indices_as_i32(ctx: LoweringContext, indices: SSAValue, count: int, size: int) -> SSAValue:
    """An i32 DRAM copy of f32-held indices, negative ones wrapped (+size). A loop nest of its own."""
    with ctx.stage(what="indices to i32"):
        em = ctx.emitter
        out = em.alloc((count,), i32, "dram")
        cols = min(count, ctx.staging_tile_elements)
        rows = -(-count // cols)
        if rows * cols != count:
            cols, rows = 1, count
        TR = max(1, min(rows, ctx.staging_tile_elements // cols))
        x2, out2 = em.view(indices, (rows, cols)), em.view(out, (rows, cols))
        x_tile = em.alloc((TR, cols), f32, "spad", 2)
        negative = em.alloc((TR, cols), f32, "spad", 2)
        as_int = em.alloc((TR, cols), i32, "spad", 2)
        z = [0, 0]

        def tile(r0: Index, tr: int) -> None:
            em.dma(x2, [r0, 0], x_tile, z, [tr, cols])
            em.vec("lt", negative, z, x_tile, z, tr, cols, bmode="imm", imm=0.0)
            em.vec("mul", negative, z, negative, z, tr, cols, bmode="imm", imm=float(size))
            em.vec("add", x_tile, z, x_tile, z, tr, cols, negative, z, bmode="tile")
            em.vec("copy", as_int, z, x_tile, z, tr, cols)
            em.dma(as_int, z, out2, [r0, 0], [tr, cols])

        em.tiles(rows, TR, tile)
        return out


def _gather_rows(ctx: LoweringContext, name: str, table_buffer: SSAValue, V: int, W: int,
                 index_buffer: SSAValue, count: int, out: SSAValue) -> None:
    """out[count, W] = table[indices] with tile.gather_rows on [TR, TC] tiles."""
    em = ctx.emitter
    table = em.view(table_buffer, (V, W))
    ids = em.view(index_buffer, (count,))
    out2 = em.view(out, (count, W))
    TC = min(W, ctx.staging_tile_elements)
    TR = max(1, min(count, ctx.staging_tile_elements // TC))
    # the indices copied to the scratchpad first (one DMA): each row's index is then read with
    # `lds` (a scratchpad latency) instead of `ld`, which stalls the front end a DRAM latency per
    # row (server: 500 cycles a row; the embedding lookups were a fifth to a third of MiniLM's
    # and the Llama prefill's cycles)
    index_type = index_buffer.type
    assert isinstance(index_type, MemRefType)
    index_bytes = count * t.elem_bytes(index_buffer)
    # (where the cost model predicts it pays: a bandwidth-bound gather hides the `ld` stalls, and
    # the copy adds a round trip before the first row)
    dram_cycles = tiling_cost.gather_rows_estimate(ctx.hw, count, W, TR, TC)
    local_cycles = tiling_cost.gather_rows_estimate(ctx.hw, count, W, TR, TC, local_indices=True)
    local_ids = index_bytes <= ctx.hw.memory.scratchpad_bytes // LOCAL_INDEX_SHARE and local_cycles < dram_cycles
    cycles = local_cycles if local_ids else dram_cycles
    # the whole table in the scratchpad (one DMA) and each row a vector copy, where it takes at
    # most 1/LOCAL_TABLE_SHARE of the scratchpad and the cost model predicts it faster: on
    # server each row DMA holds one of the 16 channels for a DRAM latency, 32 cycles a row
    # (the Llama prefill's 512 rows of a 1024-token table: 16.7 K cycles)
    table_bytes = V * W * t.elem_bytes(table_buffer)
    local_table = False
    if table_bytes <= ctx.hw.memory.scratchpad_bytes // LOCAL_TABLE_SHARE:
        table_cycles = tiling_cost.gather_rows_estimate(ctx.hw, count, W, TR, TC, local_indices=local_ids,
                                                        table_bytes=table_bytes)
        local_table = table_cycles < cycles
        cycles = min(cycles, table_cycles)
    ctx.predict(cycles)
    ctx.debug(f"[graph-to-tile] {name}: gather rows {count} of {V}x{W} (row {W * 4} bytes): "
              f"tile.gather_rows tiles {TR}x{TC}, indices in the "
              f"{'scratchpad' if local_ids else 'DRAM'}"
              + (", the table in the scratchpad (a vector copy per row)" if local_table else "")
              + f": est {cycles} cycles")
    if local_ids:
        on_chip = em.alloc((count,), index_type.element_type, "spad")
        em.dma(ids, [0], on_chip, [0], [count])
        ids = on_chip
    if local_table:
        local = em.alloc((V, W), element_type_of(table_buffer), "spad")
        em.dma(table, [0, 0], local, [0, 0], [V, W])
        table = local
    rows_tile = em.alloc((TR, TC), f32, "spad", 2)

    def tile(r0: Index, tr: int, c0: Index, tcn: int) -> None:
        em.gather_rows(table, c0, ids, r0, rows_tile, [0, 0], tr, tcn)
        em.dma(rows_tile, [0, 0], out2, [r0, c0], [tr, tcn])

    em.tiles(count, TR, lambda r0, tr: em.tiles(W, TC, lambda c0, tcn: tile(r0, tr, c0, tcn)))
    if TR >= count and TC >= W and latency_bound(ctx.hw):
        # the whole result in one tile: the kernel after it (the first norm of a transformer)
        # copies it instead of loading it back
        ctx.keep_on_chip(out2, rows_tile, next_kernels=3)


def _gather_packed_rows(ctx: LoweringContext, name: str, dq: g.DequantizeBlocksOp, packed: g.WeightOp,
                        shape: tuple[int, ...], index_buffer: SSAValue, count: int, out: SSAValue) -> None:
    """out[count, W] = dequantize_blocks(table)[indices]: per [TR, TC] tile the rows' codes and
    scales are gathered (two tile.gather_rows) and expanded by tile.dequant blocks=row."""
    em = ctx.emitter
    fmt_name = dq.block_format.data
    bits = block_format(fmt_name).bits
    code_elem = i8 if bits == 8 else ui8
    V, W = shape
    key = ("packed rows", packed.weight_key)
    if key not in ctx.derived:
        codes, scales = split_blocks(np.asarray(ctx.store.get(packed.weight_key)), fmt_name, V, W, "row")
        ctx.derived[key] = (plane_weight(ctx, packed.weight_key + ".row_codes", codes, code_elem),
                            plane_weight(ctx, packed.weight_key + ".row_scales",
                                         np.ascontiguousarray(scales).view(np.float16), f16))
    codes_w, scales_w = ctx.derived[key]
    scale_halves = isa.qscale_bytes(isa.QFORMAT_CODE[fmt_name]) // 2  # f16 entries of one block's scale
    ids = em.view(index_buffer, (count,))
    out2 = em.view(out, (count, W))
    # whole blocks per column tile: W is a multiple of the block, so is every remainder tile
    TC = min(W, max(isa.QBLOCK, ctx.staging_tile_elements // isa.QBLOCK * isa.QBLOCK))
    TR = max(1, min(count, ctx.staging_tile_elements // TC))
    cycles = (tiling_cost.gather_rows_estimate(ctx.hw, count, W * bits // 32, TR, TC * bits // 32)
              + tiling_cost.gather_rows_estimate(ctx.hw, count, W // isa.QBLOCK * scale_halves // 2, TR,
                                                 max(1, TC // isa.QBLOCK * scale_halves // 2)))
    ctx.predict(cycles)
    ctx.debug(f"[graph-to-tile] {name}: gather rows {count} of a packed {fmt_name} {V}x{W} table: codes and "
              f"scales by tile.gather_rows, tile.dequant blocks=row, tiles {TR}x{TC}: est {cycles} cycles")
    codes_tile = em.alloc((TR, TC * bits // 8), code_elem, "spad", 2)
    scales_tile = em.alloc((TR, TC // isa.QBLOCK * scale_halves), f16, "spad", 2)
    rows_tile = em.alloc((TR, TC), f32, "spad", 2)
    z = [0, 0]

    def tile(r0: Index, tr: int, c_tile: Index, c0: Index, tcn: int) -> None:
        # the column tile counts tiles, so both planes' columns are affine in it
        em.gather_rows(codes_w, em.mul(c_tile, TC * bits // 8), ids, r0, codes_tile, z, tr, tcn * bits // 8)
        em.gather_rows(scales_w, em.mul(c_tile, TC // isa.QBLOCK * scale_halves), ids, r0, scales_tile, z, tr,
                       tcn // isa.QBLOCK * scale_halves)
        emit_dequant(em, rows_tile, codes_tile, z, scales_tile, z, tr, tcn, fmt_name, blocks="row")
        em.dma(rows_tile, z, out2, [r0, c0], [tr, tcn])

    em.tiles(count, TR, lambda r0, tr: em.counted_tiles(W, TC, lambda j, c0, tcn: tile(r0, tr, j, c0, tcn)))
