"""Moving a cross-kernel prefetch back into its own kernel when the kernel it was moved into
cannot fit the target's semaphores.

graph-to-tile moves a kernel's leading weight DMAs and its operand preparation into the kernel
before (graph_to_tile/prefetch_hoist.py) and labels what it moved: every moved op carries
`tile.hoisted = N`, and the first own alloc of the kernel they came from `tile.hoist_origin = N`.
The moved DMAs' semaphores are live across the kernel before's tail. Where that kernel needs
every semaphore the target has at its last degrade level (rotation.DegradeLevel), the extra ones
leave it with no way to fit: a GQA attention with 6 query heads of a group interleaved, whose
head-major output a linear reads, needed 17 of server's 16 (its linear's weights and their
bf16 copy, moved in front of the attention's last heads).

`sink_hoisted` then puts the moves of the failing kernels back: the allocs and the index
constants and views before the origin alloc, the DMAs and preparation ops (in their order)
before the first op of that kernel that emits code. Where no failing kernel holds a move, it
puts back every move: the moved allocs can start an op-marker group of their own inside the
kernel before (prefetch_hoist.py places them after its last load), and then the group that
fails is the part of that kernel ahead of them (an fp32 attention of 32 heads, 8 interleaved,
before two small linears on server: 17 of 16 semaphores; 7 alone). Both places are between the
op's moved and original positions, which prefetch_hoist checked that nothing touching the op's
buffers lies between, so the program computes the same values; it only gives up the overlap.
The driver compiles the function again (driver.compile_function).
"""

from __future__ import annotations

from collections.abc import Iterable

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import Block, Operation

from infer.dialects import tile as t

NO_CODE = (t.AllocOp, t.ViewOp, t.WeightOp, arith.ConstantOp)


def _label(op: Operation, name: str) -> int | None:
    attr = op.attributes.get(name)
    return attr.value.data if isinstance(attr, IntegerAttr) else None


def sink_hoisted(block: Block, failed_ops: Iterable[Operation]) -> int:
    """Put back, in `block`, every move whose ops are among `failed_ops` (the top-level ops of
    the kernels that ran out of semaphores) or, where none is, every move left in the block;
    returns how many moves were put back (0: none left)."""
    labels = {label for op in failed_ops if (label := _label(op, t.HOISTED_ATTR)) is not None}
    if not labels:
        labels = {label for op in block.ops if (label := _label(op, t.HOISTED_ATTR)) is not None}
    origins = {label: op for op in block.ops
               if (label := _label(op, t.HOIST_ORIGIN_ATTR)) in labels}
    members: dict[int, list[Operation]] = {label: [] for label in origins}
    for op in block.ops:
        label = _label(op, t.HOISTED_ATTR)
        if label in members:
            members[label].append(op)
    for label, origin in origins.items():
        first_code = origin
        while first_code is not None and isinstance(first_code, NO_CODE):
            first_code = first_code.next_op
        for op in members[label]:
            op.detach()
            del op.attributes[t.HOISTED_ATTR]
            op.attributes.pop(t.PREFETCH_FOR_NEXT_ATTR, None)
            if isinstance(op, NO_CODE) or first_code is None:
                block.insert_op_before(op, origin)
            else:
                block.insert_op_before(op, first_code)
        del origin.attributes[t.HOIST_ORIGIN_ATTR]
    return len(origins)
