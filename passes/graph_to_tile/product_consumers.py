"""What a decode step does with a resident product's result, done on its tile: rotary
embedding and the KV-cache append (packed_gemm._lower_resident's products, issue 11).

In a decode step q and k are rotated at the step's positions and k and v are appended to the
paged pools: as kernels of their own (graph.rotary, graph.kv_cache_write) each loads the
projection's result back from DRAM, a round trip on the step's critical path. Here, where a
product's result reaches them only through views,

    y -> reshape/transpose* -> rotary(., cos, sin) [-> reshape/transpose* -> kv_cache_write rows]
    y -> reshape/transpose* -> kv_cache_write rows

the product's kernel rotates its result tile with rotary.py's instructions (one position per
row: the decode shape, S = 1, cos/sin one row per sequence) and scatters the rows into the pool
(`tile.scatter_rows` at the slots, as paged_kv.py does); the rotary and the write are not
lowered again (the driver skips them: packed_siblings.LOWERED_WITH). The rotated tile stays on
chip for the op that reads it (q: paged attention, `keep_on_chip`), and goes to DRAM only when
something else reads it too; the unrotated one never (its buffer exists for the views,
unwritten). On latency-bound targets a decode step's append is left to the paged attention
that reads the pool (`paged_kv.append_after_gathers`): its rows stay on chip and that kernel
stores them after its gathers.

Conditions: the views are reshapes and transposes that move only size-1 dims (free on a
row-major buffer); the rotary has S = 1, rotates all D features and its cos/sin have one row of
D per sequence [B, 1, 1, D] (B = the product's rows) made before the product's kernel; the
write is in place (`LoweringContext.in_place`) with i32 slots of the function.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import f32, i32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import num_elements, shape_of
from infer.passes.graph_to_tile.context import LoweringContext
from infer.passes.graph_to_tile.paged_kv import Appended, append_after_gathers, defer_append, metadata_buffer


@dataclass
class Consumers:
    """The rotary and/or KV write to do on a product's tile."""

    rotary: g.RotaryOp | None
    write: g.KvCacheWriteOp | None
    store_rotary: bool  # the rotated rows are read by another op too (q: paged attention)
    tables: tuple[SSAValue, SSAValue] | None = None  # cos, sin tiles [M, D] once loaded
    slots: SSAValue | None = None  # the write's slots [M] in the scratchpad once loaded


def _free_view(op: Operation) -> bool:
    if isinstance(op, g.ReshapeOp):
        return True
    if isinstance(op, g.TransposeOp):
        shape = shape_of(op.input)
        perm = g.i64_values(op.perm)
        moved = [p for p in perm if shape[p] != 1]
        return moved == sorted(moved)
    return False


def _through_views(value: SSAValue) -> tuple[SSAValue, Operation | None, list[Operation]]:
    """Follow single-use free views from `value`: (the last view's result, its single user or
    None, the views)."""
    views: list[Operation] = []
    while True:
        users = [u.operation for u in value.uses]
        if len(users) != 1:
            return value, None, views
        if not _free_view(users[0]):
            return value, users[0], views
        views.append(users[0])
        value = users[0].results[0]


def _available(value: SSAValue, kernel: Operation) -> bool:
    owner = value.owner
    if isinstance(owner, Operation):
        return owner.parent_block() is kernel.parent_block() and owner.is_before_in_block(kernel)
    return True


def find(ctx: LoweringContext, kernel: Operation, out: SSAValue, M: int, N: int,
         first_kernel: Operation) -> Consumers | None:
    """The rotary / KV write `kernel`'s result `out` [.., N] (M rows) reaches through views
    (see the module docstring), or None."""
    end, user, _ = _through_views(out)
    rotary: g.RotaryOp | None = None
    if isinstance(user, g.RotaryOp) and user.input is end:
        x_shape = shape_of(user.input)
        D = x_shape[-1]
        cos_shape = shape_of(user.cos)
        if (len(x_shape) == 4 and x_shape[-2] == 1 and x_shape[0] == M and N % D == 0 and cos_shape[-1] == D
                and D % 2 == 0 and num_elements(cos_shape) == M * D and shape_of(user.sin) == cos_shape
                and all(v in ctx.buffers and _available(v, first_kernel) for v in (user.cos, user.sin))):
            rotary = user
            end, user, _ = _through_views(user.output)
    write = None
    if isinstance(user, g.KvCacheWriteOp) and user.rows is end and user.output in ctx.in_place \
            and shape_of(user.rows) == (M, N) and user.slots in ctx.buffers:
        write = user
    if rotary is None and write is None:
        return None
    store_rotary = rotary is not None and (write is None or len(list(rotary.output.uses)) != 1)
    return Consumers(rotary, write, store_rotary)


def _read_on_chip_only(value: SSAValue) -> bool:
    """Is every reader of `value` (through free views) the query of a one-query-row paged
    attention, which reads a kept tile on chip (paged_kv.lower_paged_attention)?"""
    users = [u.operation for u in value.uses]
    return bool(users) and all(
        (_free_view(u) and _read_on_chip_only(u.results[0]))
        or (isinstance(u, g.PagedAttentionOp) and u.query is value and shape_of(u.query)[2] == 1)
        for u in users)


def mark(ctx: LoweringContext, c: Consumers) -> None:
    """The driver skips the fused ops."""
    from infer.passes.graph_to_tile.packed_siblings import LOWERED_WITH

    for op in (c.rotary, c.write):
        if op is not None:
            ctx.derived[(LOWERED_WITH, op)] = True


def load_tables(ctx: LoweringContext, c: Consumers, M: int) -> None:
    """DMA the cos/sin rows [M, D] (made by earlier kernels) and the write's slots [M] into the
    scratchpad: issued early, off the product's critical path, so the scatter's front end reads
    each slot with `lds` (a scratchpad latency) instead of stalling a DRAM latency on `ld`."""
    em = ctx.emitter
    if c.write is not None:
        slots = em.alloc((M,), i32, "spad")
        em.dma(em.view(metadata_buffer(ctx, c.write, c.write.slots, "slots"), (1, M)), [0, 0],
               em.view(slots, (1, M)), [0, 0], [1, M])
        c.slots = slots
    if c.rotary is None:
        return
    D = shape_of(c.rotary.cos)[-1]
    tiles = []
    for v in (c.rotary.cos, c.rotary.sin):
        tile = em.alloc((M, D), f32, "spad")
        em.dma(em.view(ctx.buffer(v), (M, D)), [0, 0], tile, [0, 0], [M, D])
        tiles.append(tile)
    c.tables = (tiles[0], tiles[1])


def emit(ctx: LoweringContext, c: Consumers, tile: SSAValue, M: int, N: int) -> None:
    """Rotate `tile` [M, N] (rows = sequences, N = heads x D) and/or scatter it into the pool."""
    em = ctx.emitter
    z = [0, 0]
    rows = tile
    if c.rotary is not None and c.tables is not None:
        cos, sin = c.tables
        D = shape_of(c.rotary.cos)[-1]
        H, half = N // D, D // 2
        y, tmp = em.alloc((M, N), f32, "spad"), em.alloc((M, N), f32, "spad")
        xv, yv, tv = (em.view(b, (M * H, D)) for b in (tile, y, tmp))
        xp, tp = em.view(tile, (M * N // 2, 2)), em.view(tmp, (M * N // 2, 2))
        for b in range(M):  # rotary.py's one-position instructions, one sequence's heads at a time
            r0, p0 = b * H, b * N // 2
            em.vec("mul", yv, [r0, 0], xv, [r0, 0], H, D, cos, [b, 0], bmode="row")
            if c.rotary.interleaved.value.data:
                em.vec("neg", tp, [p0, 0], xp, [p0, 1], N // 2, 1)
                em.vec("copy", tp, [p0, 1], xp, [p0, 0], N // 2, 1)
                em.vec("mul", tv, [r0, 0], tv, [r0, 0], H, D, sin, [b, 0], bmode="row")
                em.vec("add", yv, [r0, 0], yv, [r0, 0], H, D, tv, [r0, 0], bmode="tile")
            else:
                em.vec("mul", tv, [r0, 0], xv, [r0, half], H, half, sin, [b, 0], bmode="row")
                em.vec("mul", tv, [r0, half], xv, [r0, 0], H, half, sin, [b, half], bmode="row")
                em.vec("sub", yv, [r0, 0], yv, [r0, 0], H, half, tv, [r0, 0], bmode="tile")
                em.vec("add", yv, [r0, half], yv, [r0, half], H, half, tv, [r0, half], bmode="tile")
        rows = y
        em.live_into_next(y)  # stored (and scattered) last: see Emitter.live_into_next
        out = ctx.output_buffer(c.rotary.output)
        if c.store_rotary:
            # the reader (paged attention: the query) may copy the rotated rows instead of
            # loading them back, a store and a DRAM latency later
            ctx.keep_on_chip(out, y)
            if _read_on_chip_only(c.rotary.output):
                # (no store: nothing reads the DRAM copy, and a `fence` after the attention's
                # run-time block loops would wait for it)
                ctx.derived[("never stored", out)] = True
            else:
                em.dma(y, z, em.view(out, (M, N)), z, [M, N])
    if c.write is not None:
        S, W = shape_of(c.write.cache)
        pool = em.view(ctx.output_buffer(c.write.output), (S, W))
        slots = c.slots if c.slots is not None else metadata_buffer(ctx, c.write, c.write.slots, "slots")
        if c.slots is not None and append_after_gathers(ctx, c.write):
            # stored by the paged attention after its gathers, which take these rows from chip
            # (a copy: the product's own tile is the next sibling's)
            if rows is tile:
                rows = em.alloc((M, W), f32, "spad")
                em.vec("copy", rows, z, tile, z, M, W)
            defer_append(ctx, c.write, Appended(rows, slots, pool))
            return
        em.scatter_rows(rows, z, slots, 0, pool, 0, M, W)
