"""Integer model inputs (token ids, attention masks): which ones graph-to-tile accepts and how
their casts and reshapes lower.

i32/i64 function arguments are accepted when every use is one of: gather indices (directly or
through integer casts/reshapes, which alias the buffer: `is_index_source`), paged-KV metadata
(i32 slots, block tables, context lengths: `is_paged_kv_metadata`), a cast to f32, or a
cast to i1 used only as an attention mask (through reshapes, also inside a fused
`graph.kernel "attention"`); a lone cast wrapped in an elementwise `graph.kernel` by graph-fuse
counts as the cast (`accepts_integer_input`). An i64 argument with a non-gather use becomes an
i32 DRAM memref (the driver marks it `tile.host_dtype = "i64"`; the runtime converts).

* int -> f32 (mean pooling): row tiles, DMA the int32 tile, vector `copy` (int32 -> fp32, exact
  for |x| < 2^24), DMA store.
* int -> i1 as an attention mask: the i1 value is represented by an additive f32 DRAM buffer
  (min(|f32(x)|, 1) - 1) * 1e30 (0 where x != 0, -1e30 where x = 0), which the attention
  lowering reads as a runtime additive mask (`LoweringContext.masks`); reshapes of it are views.
"""

from __future__ import annotations

from xdsl.dialects.builtin import MemRefType, TensorType, f32, i32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import element_name_of, num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import KEPT_TILE_READERS, NEG_INF, LoweringContext, error, latency_bound

INDEX_TYPES = ("i32", "i64")


def is_integer_index(value: SSAValue) -> bool:
    return isinstance(value.type, TensorType | MemRefType) and element_name_of(value) in INDEX_TYPES


def is_index_source(value: SSAValue) -> bool:
    """Whether integer tensor `value` only serves as gather indices (directly or through
    integer casts/reshapes): then it may cross the function boundary / stay in DRAM."""
    uses = list(value.uses)
    if not uses:
        return False
    for use in uses:
        op = use.operation
        if isinstance(op, g.GatherOp) and use.index == 1:
            continue
        if isinstance(op, g.CastOp | g.ReshapeOp) and is_integer_index(op.results[0]) \
                and is_index_source(op.results[0]):
            continue
        return False
    return True


def gather_table_sizes(value: SSAValue) -> set[int]:
    """The sizes of the tables whose rows integer tensor `value` selects (a gather's indices,
    directly or through integer casts/reshapes); empty when it selects none. The compiled
    gathers read indices as they are: the runtime checks an input against the smallest
    (`tile.index_bound`, runtime/boundary.py), where an index past it would read other DRAM
    bytes instead of failing."""
    sizes: set[int] = set()
    for use in value.uses:
        op = use.operation
        if isinstance(op, g.GatherOp) and use.index == 1:
            shape = shape_of(op.input)
            sizes.add(shape[op.axis.value.data % len(shape)])
        elif isinstance(op, g.CastOp | g.ReshapeOp) and is_integer_index(op.results[0]):
            sizes |= gather_table_sizes(op.results[0])
    return sizes


def kv_pool_sizes(value: SSAValue) -> set[int]:
    """The row counts of the paged KV pools integer tensor `value` holds the write slots of
    (`graph.kv_cache_write`'s slots): the compiled write stores each row at its slot as it is,
    so the runtime checks an input against the smallest, as gather indices (a slot past the
    pool would overwrite other DRAM bytes: the weights)."""
    return {shape_of(use.operation.operands[0])[0] for use in value.uses
            if isinstance(use.operation, g.KvCacheWriteOp) and use.index == 2}


def accepts_integer_input(value: SSAValue) -> bool:
    """Whether integer tensor `value` (an i32/i64 function argument, or an integer cast/reshape
    of one) has only uses graph-to-tile lowers: gather indices, integer casts/reshapes of
    such values, casts to f32, casts to i1 used only as attention masks (through reshapes).
    An unused argument is refused."""
    uses = list(value.uses)
    if not uses:
        return False
    for use in uses:
        op = use.operation
        if isinstance(op, g.GatherOp) and use.index == 1:
            continue
        if is_paged_kv_metadata(op, use.index) and element_name_of(value) == "i32":
            continue
        if isinstance(op, g.CastOp | g.ReshapeOp):
            result = op.results[0]
            elem = element_name_of(result)
            if elem in INDEX_TYPES and accepts_integer_input(result):
                continue
            if isinstance(op, g.CastOp) and elem == "f32":
                continue
            if isinstance(op, g.CastOp) and elem == "i1" and is_mask_only(result):
                continue
        if kernel_cast(op) is not None:  # graph-fuse wraps a lone cast in an elementwise kernel
            elem = element_name_of(op.outputs[0])
            if elem == "f32" or (elem == "i1" and is_mask_only(op.outputs[0])):
                continue
        return False
    return True


def is_paged_kv_metadata(op: Operation, operand: int) -> bool:
    """Whether operand #operand of op is paged-KV metadata read as raw int32 (paged_kv.py): the
    slots of a kv_cache_write, the block tables and context lengths of a paged_attention."""
    return ((isinstance(op, g.KvCacheWriteOp) and operand == 2)
            or (isinstance(op, g.PagedAttentionOp) and operand in (3, 4)))


def kernel_cast(op: Operation) -> g.CastOp | None:
    """The cast of a `graph.kernel` whose region is one cast of its single input, or None."""
    if not isinstance(op, g.KernelOp) or len(op.inputs) != 1 or len(op.outputs) != 1:
        return None
    ops = [o for o in op.body.block.ops if o is not op.yield_op]
    if len(ops) != 1 or not isinstance(ops[0], g.CastOp) or ops[0].input is not op.body.block.args[0]:
        return None
    return ops[0]


def is_mask_only(value: SSAValue) -> bool:
    """Whether i1 tensor `value` only serves as an attention mask (directly or through reshapes)."""
    uses = list(value.uses)
    if not uses:
        return False
    for use in uses:
        op = use.operation
        if isinstance(op, g.ReshapeOp) and is_mask_only(op.results[0]):
            continue
        if isinstance(op, g.AttentionOp) and op.mask is not None and op.mask == value:
            continue
        if isinstance(op, g.KernelOp) and is_mask_only(op.body.block.args[use.index]):
            continue  # a fused attention kernel: its region's attention takes the mask
        return False
    return True


def lower_if_integer(ctx: LoweringContext, op: Operation) -> bool:
    """Lower `op` if it is a cast or reshape of a runtime integer input or attention mask (a
    `graph.kernel` of one cast included), or an integer cast/reshape feeding only gathers;
    whether it was."""
    if _reads_runtime_integers(ctx, op):
        _lower_runtime_integer_op(ctx, op)
        return True
    if isinstance(op, g.CastOp | g.ReshapeOp) and is_integer_index(op.results[0]) \
            and is_index_source(op.results[0]):
        _alias_indices(ctx, op)
        return True
    return False


def _reads_runtime_integers(ctx: LoweringContext, op: Operation) -> bool:
    """Whether op reads a runtime integer buffer (an argument, possibly through aliasing
    casts/reshapes) or a runtime additive mask."""
    if isinstance(op, g.KernelOp) and kernel_cast(op) is not None:
        return is_integer_index(op.inputs[0]) and _integer_storage(ctx, op.inputs[0])
    if not isinstance(op, g.CastOp | g.ReshapeOp):
        return False
    x = op.operands[0]
    if x in ctx.masks:
        return isinstance(op, g.ReshapeOp)
    return is_integer_index(x) and _integer_storage(ctx, x)


def _integer_storage(ctx: LoweringContext, value: SSAValue) -> bool:
    """Whether value's DRAM buffer holds integers (a runtime integer input, possibly through
    aliasing casts/reshapes), not integer values held as f32 (storage.py)."""
    buffer = ctx.buffers.get(value)
    return buffer is not None and element_name_of(buffer) != "f32"


def _lower_runtime_integer_op(ctx: LoweringContext, op: Operation) -> None:
    x, result = op.operands[0], op.results[0]
    if kernel_cast(op) is not None:
        elem = element_name_of(result)
        if elem not in ("f32", "i1"):
            raise error(op, f"integer model inputs: a kernel casting to {result.type} is not supported")
        _lower_int_to_f32(ctx, x, result, mask=elem == "i1")
        return
    if x in ctx.masks:  # reshape of an additive mask: a view
        ctx.buffers[result] = ctx.emitter.view(ctx.buffers[x], shape_of(result))
        ctx.masks.add(result)
        return
    elem = element_name_of(result)
    if elem in INDEX_TYPES:
        _alias_indices(ctx, op)
    elif isinstance(op, g.CastOp) and elem in ("f32", "i1"):
        _lower_int_to_f32(ctx, x, result, mask=elem == "i1")
    else:
        raise error(op, f"integer model inputs: a {op.name} to {result.type} is not supported (integer inputs "
                    "may feed gathers, casts to f32, and casts to i1 used as attention masks)")


def _alias_indices(ctx: LoweringContext, op: Operation) -> None:
    """An integer cast/reshape feeding only gathers: the result aliases the input's
    buffer (gather_rows reads i32 or the low 32 bits of i64; value-preserving for
    in-range indices)."""
    src = ctx.buffers.get(op.operands[0])
    if src is None:
        raise error(op, "integer indices must come from a function argument or a constant")
    if isinstance(op, g.ReshapeOp):
        ctx.buffers[op.results[0]] = ctx.emitter.view(src, shape_of(op.results[0]))
    else:
        ctx.buffers[op.results[0]] = src


def _lower_int_to_f32(ctx: LoweringContext, x: SSAValue, result: SSAValue, mask: bool) -> None:
    """f32(x) of a runtime int32 buffer: vector copy int32 -> fp32 (exact for |x| < 2^24).
    mask=True (x -> i1 used as an attention mask): the result is the additive f32 mask
    (x != 0 ? 0 : NEG_INF), computed as (min(|f32(x)|, 1) - 1) * 1e30; the i1 value is then
    represented by that buffer (`ctx.masks`)."""
    em = ctx.emitter
    src = ctx.buffers[x]
    shape = shape_of(result)
    N = shape[-1] if shape else 1
    M = num_elements(shape) // N
    name = ctx.kernel_name()
    what = "cast int32->f32" + (" -> additive attention mask" if mask else "")
    choice = tiling_cost.choose_rows(ctx.hw, M, N, bytes_in=4, bytes_out=4, vec_cost=4 if mask else 1,
                                     live_tiles=2, footprint=lambda tr, tcn: tr * tcn * 16)  # int32 x, f32 y, x2
    ctx.predict(choice.cycles)
    ctx.debug(tiling_cost.describe_rows(name, what, "x".join(map(str, shape)), choice))
    x2 = em.view(src, (M, N))
    out = em.alloc(shape, f32, "dram") if mask else ctx.output_buffer(result)
    if mask:
        ctx.buffers[result] = out
        ctx.masks.add(result)
    out2 = em.view(out, (M, N))
    TR, TC = min(choice.rows, M), choice.cols
    x_tile = em.alloc((TR, TC), i32, "spad", 2)
    y_tile = em.alloc((TR, TC), f32, "spad", 2)
    z = [0, 0]
    # the whole result in one tile: the kernels after it may read it there (a sentence
    # embedding's mean pooling multiplies the last layer's rows by the mask cast to f32)
    one_tile = latency_bound(ctx.hw) and TR >= M and TC >= N

    def tile(r0: Index, rows: int, c0: Index, cols: int) -> None:
        em.dma(x2, [r0, c0], x_tile, z, [rows, cols])
        em.vec("copy", y_tile, z, x_tile, z, rows, cols)
        if mask:
            em.vec("abs", y_tile, z, y_tile, z, rows, cols)
            em.vec("min", y_tile, z, y_tile, z, rows, cols, bmode="imm", imm=1.0)
            em.vec("add", y_tile, z, y_tile, z, rows, cols, bmode="imm", imm=-1.0)
            em.vec("mul", y_tile, z, y_tile, z, rows, cols, bmode="imm", imm=-NEG_INF)
        em.dma(y_tile, z, out2, [r0, c0], [rows, cols])
        if one_tile:
            ctx.keep_on_chip(out2, y_tile, next_kernels=KEPT_TILE_READERS)

    em.tiles(M, TR, lambda r0, rows: em.tiles(N, TC, lambda c0, cols: tile(r0, rows, c0, cols)))


def additive_mask(ctx: LoweringContext, value: SSAValue) -> SSAValue:
    """The additive f32 DRAM buffer of runtime attention mask `value`: itself when it is one (an
    f32 mask, or an i1 mask this module made additive); an i1 mask held as 0/1 (storage.py)
    becomes (x - 1) * 1e30 (0 where x, -1e30 elsewhere) in a helper nest."""
    buffer = ctx.buffer(value)
    if value in ctx.masks or element_name_of(value) != "i1":
        return buffer
    with ctx.stage(what="additive mask"):
        em = ctx.emitter
        shape = shape_of(value)
        N = shape[-1] if shape else 1
        M = num_elements(shape) // N
        TR = max(1, min(M, ctx.staging_tile_elements // max(N, 1)))
        TC = min(N, ctx.staging_tile_elements)
        out = em.alloc(shape, f32, "dram")
        x2, out2 = em.view(buffer, (M, N)), em.view(out, (M, N))
        tile = em.alloc((TR, TC), f32, "spad", 2)
        z = [0, 0]

        def body(r0: Index, rows: int, c0: Index, cols: int) -> None:
            em.dma(x2, [r0, c0], tile, z, [rows, cols])
            em.vec("add", tile, z, tile, z, rows, cols, bmode="imm", imm=-1.0)
            em.vec("mul", tile, z, tile, z, rows, cols, bmode="imm", imm=-NEG_INF)
            em.dma(tile, z, out2, [r0, c0], [rows, cols])

        em.tiles(M, TR, lambda r0, rows: em.tiles(N, TC, lambda c0, cols: body(r0, rows, c0, cols)))
        return out
