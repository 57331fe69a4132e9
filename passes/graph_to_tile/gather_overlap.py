"""The loads of the kernels after a long row gather issued around it (latency-bound targets).

A `tile.gather_rows` from a DRAM table is one DMA per row, each holding one of the DMA
engine's channels for a DRAM latency: a BERT-style embedding lookup of 128 tokens keeps the
server's 16 channels busy for ~4.1 K cycles. Once more rows are in flight than the channels
and the load queue hold, the in-order front end waits inside the row loop, so every
instruction after it (the kernels up to the first product: the token-type lookup, the
embedding sum with its position rows, the layer norm and its parameters, the attention mask,
the q projection's weights) is dispatched only when the last rows are queued: their loads
then wait behind the rows, and the kernels run one after the other at the end of the gather.

Here the loads of those kernels that read nothing the function writes (weights and input
arguments) into buffers of their own go around the gather: those of the kernel right after it
(its first consumer, e.g. the token-type lookup's indices and table) in front of the row loop,
so it can start as soon as the front end leaves the loop, and those of the later kernels up to
the first one that holds a product right after the loop, ahead of the first kernel's work (they
queue behind the last rows instead of behind every kernel in between). Each moved load writes
a buffer no op before its old place touches (its alloc moves with it) from memory nothing
writes, so every value is the same; the memory plan sees the buffers live from their new first
touch. MiniLM on server (bf16): see docs/tiling.md, "Loads around the embedding gather".
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import UnitAttr
from xdsl.ir import Block, BlockArgument, Operation

from infer.dialects import tile as t
from infer.passes.graph_to_tile.context import local_bytes
from infer.passes.graph_to_tile.prefetch_hoist import NO_CODE, buffers_of, holds_matmul, kernel_groups, root_alloc


#: the buffers of the moved loads, live from the gather on, take at most this share of the
#: scratchpad (a kernel after it stops the moves where its buffers would pass it)
MOVED_BUFFERS_SHARE = 0.25


def hoist_loads_around_row_gathers(block: Block, rows_in_flight: int, scratchpad_bytes: int) -> int:
    """Move the free loads of the kernels after each top-level DRAM row gather of more than
    `rows_in_flight` rows (the DMA channels plus the load queue: past that the front end waits
    in the row loop) around it (module docstring); returns how many DMAs moved."""
    written: set = set()
    for op in block.ops:
        if not isinstance(op, NO_CODE):  # (a view writes nothing)
            written |= buffers_of(op)[0]
    moved = 0
    kernels = kernel_groups(block)
    for i, kernel in enumerate(kernels):
        gather = next((op for op in kernel if isinstance(op, t.GatherRowsOp)
                       and t.space_of(op.table) == "dram" and op.rows.value.data > rows_in_flight), None)
        if gather is None:
            continue
        first_code = next(op for op in kernel if not isinstance(op, NO_CODE))
        ahead: list[t.DmaOp] = []
        beside: list[t.DmaOp] = []
        budget = MOVED_BUFFERS_SHARE * scratchpad_bytes
        for j, later in enumerate(kernels[i + 1:]):
            loads = _free_loads(later, written)
            own = [op for op in later if isinstance(op, t.AllocOp)]
            buffers = {root_alloc(d.dst) for d in loads}
            budget -= sum(local_bytes(a) for a in buffers if a is not None)
            if budget < 0:
                break
            if len(buffers) < len(own):  # the kernel keeps a start of its own
                (ahead if j == 0 else beside).extend(loads)
            if any(holds_matmul(op) for op in later):
                break
        after = gather
        for dma in [*ahead, *beside]:
            alloc = root_alloc(dma.dst)
            assert alloc is not None
            if alloc.parent_block() is block and block.get_operation_index(alloc) > block.get_operation_index(first_code):
                alloc.detach()
                block.insert_op_before(alloc, first_code)
            for helper in _helpers(dma, block, first_code):
                helper.detach()
                block.insert_op_before(helper, first_code)
            dma.detach()
            dma.attributes[t.PREFETCH_FOR_LATER_ATTR] = UnitAttr()
            if dma in ahead:
                block.insert_op_before(dma, gather)
            else:
                block.insert_op_after(dma, after)
                after = dma
            moved += 1
    return moved


def _free_loads(kernel: list[Operation], written: set) -> list[t.DmaOp]:
    """The kernel's top-level DMAs from DRAM memory the function never writes (a weight, an
    input argument) into a local alloc of the kernel that no op of it touches before them."""
    loads: list[t.DmaOp] = []
    touched: set = set()
    for op in kernel:
        if isinstance(op, NO_CODE):
            continue
        if (isinstance(op, t.DmaOp) and t.space_of(op.src) == "dram" and t.space_of(op.dst) != "dram"
                and t.PREFETCH_FOR_LATER_ATTR not in op.attributes):  # (moved for a gather before)
            source = t.root_buffer(op.src)
            alloc = root_alloc(op.dst)
            if (isinstance(source.owner, t.WeightOp) or isinstance(source, BlockArgument)) \
                    and source not in written and alloc is not None and alloc in kernel \
                    and alloc.buffer not in touched:
                loads.append(op)  # (several loads may fill one buffer: they keep their order)
                continue
        touched |= buffers_of(op)[1]
    return loads


def _helpers(op: Operation, block: Block, first_code: Operation) -> list[Operation]:
    """The index constants, views and weights op reads that are defined after `first_code` (they
    move with it, in their order), transitively."""
    limit = block.get_operation_index(first_code)
    found: list[Operation] = []

    def visit(o: Operation) -> None:
        for v in o.operands:
            owner = v.owner
            if (isinstance(owner, arith.ConstantOp | t.ViewOp | t.WeightOp) and owner.parent_block() is block
                    and block.get_operation_index(owner) > limit and owner not in found):
                visit(owner)
                found.append(owner)

    visit(op)
    return found
