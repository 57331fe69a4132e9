"""graph.gather: embedding lookups and index selection.

* axis 0 with runtime indices (embedding lookup): `tile.gather_rows` (a column tile of the table
  [V, W] -> scratchpad [TR, TC], then a DMA store). Runtime indices must be in [0, V) (negative
  indices are not wrapped; i64 indices are read as their low 32 bits) and come from a function
  argument (integer_inputs.py); runtime indices on other axes are refused.
* compile-time indices on axis 0 become an i32 weight for the same op; on other axes one box
  copy per index (at most 64).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import f32, i32
from xdsl.ir import Operation

from infer.dialects import graph as g
from infer.dialects.dtypes import num_elements, shape_of
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import LoweringContext, error
from infer.passes.graph_to_tile.copies import copy_box

MAX_BOX_COPIES = 64  # compile-time indices on an inner axis: one box copy each, at most this many


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
        if axis != 0 and count > MAX_BOX_COPIES:
            raise error(op, f"gather along axis {axis} with {count} compile-time indices "
                        f"(at most {MAX_BOX_COPIES} are lowered)")
        if axis != 0:
            ctx.debug(f"[graph-to-tile] {name}: gather axis {axis}: {count} compile-time indices, one box copy each")
            lead, trail = shape[:axis], num_elements(shape[axis + 1:])
            in_shape, out_shape = (*lead, shape[axis], trail), (*lead, count, trail)
            src = em.view(ctx.buffer(op.input), in_shape)
            dst = em.view(out, out_shape)
            k = len(lead)
            for j, index in enumerate(indices):
                copy_box(ctx, src, in_shape, [0] * k + [int(index), 0], [1] * (k + 2),
                         dst, out_shape, [0] * k + [j, 0], (*lead, 1, trail))
            return
        index_buffer = ctx.weight(f"{name}.indices", indices.astype(np.int32), i32)
    else:
        if axis != 0:
            raise error(op, f"gather along axis {axis} with runtime indices is not supported (axis 0 is)")
        index_buffer = ctx.buffers.get(op.indices)
        if index_buffer is None:
            raise error(op, "runtime gather indices must come from a function argument (i32/i64)")
    V, W = shape[0], num_elements(shape[1:])
    table = em.view(ctx.buffer(op.input), (V, W))
    ids = em.view(index_buffer, (count,))
    out2 = em.view(out, (count, W))
    TC = min(W, ctx.staging_tile_elements)
    TR = max(1, min(count, ctx.staging_tile_elements // TC))
    ctx.debug(f"[graph-to-tile] {name}: gather rows {count} of {V}x{W} (row {W * 4} bytes): "
              f"tile.gather_rows tiles {TR}x{TC}")
    rows_tile = em.alloc((TR, TC), f32, "spad", 2)

    def tile(r0: Index, tr: int, c0: Index, tcn: int) -> None:
        em.gather_rows(table, c0, ids, r0, rows_tile, [0, 0], tr, tcn)
        em.dma(rows_tile, [0, 0], out2, [r0, c0], [tr, tcn])

    em.tiles(count, TR, lambda r0, tr: em.tiles(W, TC, lambda c0, tcn: tile(r0, tr, c0, tcn)))
