"""Head-split and head-merge transposes folded into the attention kernel (issue 14, layer fusion).

A transformer's attention reads q, k and v as [B, H, S, D], made from the projections'
[B, S, H*D] results by a reshape (a view) and `transpose(0, 2, 1, 3)`, and its result goes back
to [B, S, H, D] through another `transpose(0, 2, 1, 3)`. Lowered alone, each transpose is a
DRAM-to-DRAM kernel of its own (all-MiniLM-L6-v2, four per layer: 25.5 K cycles each on edge,
1.4-2.4 K on server). The flash kernel (attention.py) moves its q, v and output tiles with
strided DMAs in any case, so it reads and writes the sequence-major layout [B, S, H, D]
directly, a head's [tile, D] box at row b*S + s0, column h*D of the [B*S, H*D] view:

* `defer(ctx, op)` (from transpose.lower_transpose): a `transpose(0, 2, 1, 3)` of a rank-4 f32
  buffer whose every use is a query, key or value operand of a `graph.attention` (inside its
  `graph.kernel` or not), or the input of a prefill's rotary (rotary.py reads each head's
  position tiles as strided boxes of the source, or of the tile the projection left on chip),
  emits nothing; the buffer of its input is recorded as the
  sequence-major form of its result (`sequence_major`). Its result has no buffer of its own, so
  the per-layer check does not compare it.
* `merged_output(ctx, op)` (from attention.lower_attention): when the attention's one use (through
  its kernel's result) is such a transpose, and neither is a function output, the attention
  writes that transpose's result buffer and the driver skips the transpose
  (`packed_siblings.LOWERED_WITH`); the per-layer check compares the transpose's result.
"""

from __future__ import annotations

from xdsl.dialects.builtin import MemRefType, f32
from xdsl.ir import BlockArgument, Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of
from infer.passes.graph_to_tile.context import LoweringContext
from infer.passes.graph_to_tile.packed_siblings import LOWERED_WITH

SEQUENCE_MAJOR = "sequence-major source of a head-split transpose"
HEAD_SWAP = (0, 2, 1, 3)


def _is_head_swap(op: Operation | None) -> bool:
    return isinstance(op, g.TransposeOp) and tuple(g.i64_values(op.perm)) == HEAD_SWAP


def _attention_operand_uses(value: SSAValue) -> bool:
    """Whether every use of `value` is a q, k or v operand of a graph.attention (looking into
    the graph.kernel regions it is an input of) or the input of a rotary that takes it
    sequence-major (`rotary_reads_sequence_major`)."""
    uses = list(value.uses)
    for use in uses:
        user = use.operation
        if isinstance(user, g.KernelOp):
            if not _attention_operand_uses(user.body.block.args[use.index]):
                return False
        elif not ((isinstance(user, g.AttentionOp) and use.index < 3)
                  or (isinstance(user, g.RotaryOp) and use.index == 0 and rotary_reads_sequence_major(user))):
            return False
    return bool(uses)


def rotary_reads_sequence_major(op: g.RotaryOp) -> bool:
    """Whether rotary.py reads this rotary's [1, H, S, D] input from its head-split
    transpose's sequence-major source: one batch, several positions, cos/sin shared by every
    head (a prefill's q or k), so each head's position tile is a strided box of the [S, H*D]
    source."""
    x_shape, cs_shape = shape_of(op.input), shape_of(op.cos)
    return (len(x_shape) == 4 and x_shape[0] == 1 and x_shape[2] > 1 and not op.interleaved.value.data
            and len(cs_shape) >= 2 and all(d == 1 for d in cs_shape[:-2]) and cs_shape[-2] == x_shape[2]
            and cs_shape[-1] == x_shape[-1])


def defer(ctx: LoweringContext, op: g.TransposeOp) -> bool:
    """Record a head-split transpose that only attention reads instead of copying (module
    docstring); False when it must be lowered as a copy."""
    if not _is_head_swap(op) or op.output in ctx.destinations or not _attention_operand_uses(op.output):
        return False
    source = ctx.buffer(op.input)
    if not isinstance(source.type, MemRefType) or source.type.element_type != f32:
        return False
    ctx.derived[(SEQUENCE_MAJOR, op.output)] = source
    return True


def _outside(value: SSAValue) -> SSAValue:
    """A graph.kernel region's argument as the value outside the region it stands for."""
    if isinstance(value, BlockArgument):
        kernel = value.block.parent_op()
        if isinstance(kernel, g.KernelOp):
            return kernel.inputs[value.index]
    return value


def sequence_major(ctx: LoweringContext, value: SSAValue) -> SSAValue | None:
    """The [B, S, H, D] buffer holding attention operand `value` ([B, H, S, D]) when its
    head-split transpose was deferred, else None."""
    return ctx.derived.get((SEQUENCE_MAJOR, _outside(value)))


def merged_output(ctx: LoweringContext, op: g.AttentionOp) -> SSAValue | None:
    """The [B, S, H, D] buffer the attention writes when its result's one use is a head-merge
    transpose (the driver then skips that transpose), else None."""
    result = op.results[0]
    if result in ctx.destinations or len(list(result.uses)) != 1:
        return None
    user = next(iter(result.uses)).operation
    if isinstance(user, g.YieldOp):
        kernel = user.parent_op()
        if not isinstance(kernel, g.KernelOp) or len(kernel.outputs) != 1 or kernel.outputs[0] in ctx.destinations:
            return None
        result = kernel.outputs[0]
        if len(list(result.uses)) != 1:
            return None
        user = next(iter(result.uses)).operation
    if not _is_head_swap(user) or len(shape_of(user.results[0])) != 4:
        return None
    ctx.derived[(LOWERED_WITH, user)] = True
    return ctx.output_buffer(user.results[0])
