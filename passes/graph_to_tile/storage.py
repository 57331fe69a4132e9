"""Element types on the accelerator: how graph-to-tile holds each graph element type in DRAM,
and which types each lowering accepts.

The vector unit computes in fp32 (int32, int8 and bf16 only as conversion formats), so every
graph tensor is held in DRAM as **f32**, whatever its graph element type:

| graph type | held as | exact |
|---|---|---|
| f32 | f32 | yes |
| i1 | 0.0 / 1.0 | yes |
| i8 .. i64, ui8 .. ui64 | the integer value | while every value stays within +-2^24 (the runtime checks inputs; constants are checked here). Narrow types wrap only at the outputs: an intermediate int8 sum of 100 + 100 is 200, not -56 |
| f16, bf16 | the value | f16/bf16 ops compute in f32 and round once, at the output (one op: the same result, as f32 has more than twice the bits; chains are more accurate than the reference's per-op rounding); casts to bf16 round on the vector unit |
| f64 | the value rounded to f32 | only at the boundary: an f64 argument whose every use is a cast to f32/f16/bf16 (the runtime rounds it as the cast would), and casts to f64 (exact widening) |

One exception, in bf16 precision: a tensor whose every consumer is a linear or a conv reading it
as its activations (the matrix unit rounds them to bf16 first) is held as **bf16**
(`read_only_as_bf16_activations`): the rms/layer norm that makes it writes its last instruction
into a bf16 tile, a GEMM or conv epilogue copies its output tile to bf16 (on bandwidth-bound
targets: edge; a conv's copy also drops the padded-width columns, so the store is one run per
channel), and the consumers stage the bf16 rows (a conv's windows and padded planes are built
from them). The bits are those of the f32 buffer; the DRAM
bytes written and read are halved.

i32/i64 model inputs that only feed gathers, casts to f32 or attention masks keep integer
storage (integer_inputs.py). The function signature keeps the graph's dtypes; the runtime
converts at the boundary (runtime/boundary.py) and the arg/result attribute
`tile.host_dtype` records the graph type of each argument held otherwise.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Block, BlockArgument, Operation, SSAValue, Use

from infer.dialects import graph as g
from infer.dialects.dtypes import element_name_of

FLOATS = frozenset({"f32", "f16", "bf16"})
"""Float types computed in f32."""
INTEGERS = frozenset({"i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64"})
BOOL = frozenset({"i1"})
HELD = FLOATS | INTEGERS | BOOL
"""Every type held as f32 values (data movement is exact for all of them)."""
NUMBERS = FLOATS | INTEGERS
"""Types whose arithmetic (add, sub, mul, max, min, neg, abs, relu) is exact on f32-held values
(integers: while the values stay within +-2^24)."""
EXACT_INTEGER_LIMIT = 1 << 24
"""Integers held as f32 are exact up to this magnitude."""
HOST_ROUNDED = frozenset({"f32", "f16", "bf16"})
"""Casts of an f64 argument to these types round as the runtime's f64 -> f32 conversion does
(f32 has more than twice the bits of f16 and bf16, so rounding twice is rounding once)."""


def tensor_element(value: SSAValue) -> str | None:
    return element_name_of(value) if isinstance(value.type, TensorType) else None


def unsupported_types(op: Operation, results: frozenset[str], operands: frozenset[str]) -> list[str]:
    """The element types of op's results outside `results` and of its operands outside
    `operands`, in order."""
    bad = {name for v in op.results if (name := tensor_element(v)) is not None and name not in results}
    bad |= {name for v in op.operands if (name := tensor_element(v)) is not None and name not in operands}
    return sorted(bad)


def _cast_of(op: Operation) -> g.CastOp | None:
    """op itself when it is a cast, or the cast of a `graph.kernel` whose region is one cast of
    its single input (graph-fuse wraps lone casts), else None."""
    if isinstance(op, g.CastOp):
        return op
    if isinstance(op, g.KernelOp) and len(op.inputs) == 1 and len(op.outputs) == 1:
        inner = [o for o in op.body.block.ops if o is not op.yield_op]
        if len(inner) == 1 and isinstance(inner[0], g.CastOp) and inner[0].input is op.body.block.args[0]:
            return inner[0]
    return None


def f64_argument_held(arg: SSAValue) -> bool:
    """Whether an f64 function argument may be held as f32: its every use is a cast to a type the
    runtime's rounding to f32 rounds exactly as the cast would (HOST_ROUNDED)."""
    uses = list(arg.uses)
    return bool(uses) and all((cast := _cast_of(u.operation)) is not None
                              and element_name_of(cast.output) in HOST_ROUNDED for u in uses)


def f64_result_held(value: SSAValue) -> bool:
    """Whether an f64 function result may be computed as f32: it is a cast of a held value
    (widening to f64 is exact)."""
    cast = _cast_of(value.owner) if isinstance(value.owner, Operation) else None
    return cast is not None and element_name_of(cast.input) in HELD


def held_constant(array: np.ndarray) -> np.ndarray | None:
    """A compile-time value as the f32 DRAM holds it, or None when it is not exact (an integer
    beyond +-2^24, an f64 value that f32 cannot represent)."""
    array = np.asarray(array)
    if array.dtype.kind in "iu":
        if array.size and (np.max(array) > EXACT_INTEGER_LIMIT
                           or (array.dtype.kind == "i" and np.min(array) < -EXACT_INTEGER_LIMIT)):
            return None
        return array.astype(np.float32)
    if array.dtype == np.float64:
        held = array.astype(np.float32)
        same = (held.astype(np.float64) == array) | (np.isnan(array) & np.isnan(held))
        return held if np.all(same) else None
    return array.astype(np.float32)


__all__ = ["BOOL", "EXACT_INTEGER_LIMIT", "FLOATS", "HELD", "HOST_ROUNDED", "INTEGERS", "NUMBERS",
           "f64_argument_held", "f64_result_held", "held_constant", "tensor_element",
           "unsupported_types"]


def _outside_kernel(value: SSAValue) -> SSAValue:
    """The value a graph.kernel region's block argument stands for, or `value` itself."""
    if isinstance(value, BlockArgument) and isinstance(value.owner, Block):
        kernel = value.owner.parent_op()
        if isinstance(kernel, g.KernelOp):
            return kernel.operands[value.index]
    return value


ACTIVATION_OPERAND: dict[type[Operation], int] = {g.LinearOp: 0, g.Conv2dOp: 0}
"""Per matrix-unit op type, the operand the unit reads as its activations, rounded to bf16 and
read for nothing else (gemm.py: a linear's input; conv.py: a conv's input, whose windows are
rounded to bf16 as they are built), when its weight is a compile-time value."""


CONV_ACTIVATION_OPERAND: dict[type[Operation], int] = {g.Conv2dOp: 0}
"""`ACTIVATION_OPERAND` for convs only: the readers for which a latency-bound target (server)
narrows a tensor too (`LoweringContext.narrows`). A 1x1 conv reading bf16 rows loads them
straight into its window (`windows.loads_in_place`), so the matrix unit no longer waits for the
window's fp32 -> bf16 copy queued behind the previous tile's epilogue on the in-order vector
unit; a linear's input is staged and copied either way, and the producer's extra copy made
transformer blocks slower there."""


ROUNDING_COMMUTES: dict[type[Operation], int] = {g.MaxPool2dOp: 0}
"""Per op type, the operand whose bf16 rounding commutes with the op: max(bf16(a), bf16(b)) =
bf16(max(a, b)) (rounding is monotonic). Such an op may read that operand as bf16 when its own
result is read only as bf16 activations (pooling.lower_max_pool_windows: a ResNet stem's
conv -> max pool -> convs)."""


STACKING: tuple[type[Operation], ...] = (g.ConcatOp,)
"""Op types whose every operand's bf16 rounding commutes with the op (each result element is
one operand element): a stacked conv input (graph-merge-summed-convs) is held as bf16 where
the conv reads it so and every tensor stacked into it is otherwise read so too (then all of
them are bf16, and the stacking copies them as they are: copies.lower_concat)."""


def _stacks_bf16(user: Operation, readers: dict[type[Operation], int]) -> bool:
    """Is the stacking op `user`'s result read only as bf16 activations, and every one of its
    operands, besides by `user`, too (none a function argument, a weight or a constant, which
    keep their f32 storage, or returned)?"""
    if not read_only_as_bf16_activations(user.results[0], readers):
        return False
    for operand in user.operands:
        if isinstance(operand, BlockArgument) or element_name_of(operand) != "f32":
            return False
        if isinstance(operand.owner, g.WeightOp | g.ConstantOp):  # (held as given, f32)
            return False
        if not all(_use_reads_bf16(use, readers) for use in operand.uses if use.operation is not user):
            return False
    return True


def _bf16_activation_use(user: Operation, index: int, readers: dict[type[Operation], int]) -> bool:
    """Is operand `index` of `user` the activations of one of `readers` (a graph.linear or
    graph.conv2d) on a compile-time weight (the matrix unit reads them as bf16 and nothing
    else), or the operand of an op that commutes with the rounding (`ROUNDING_COMMUTES`,
    `STACKING`) whose result is such?"""
    if isinstance(user, STACKING):
        return _stacks_bf16(user, readers)
    if ROUNDING_COMMUTES.get(type(user)) == index:
        return read_only_as_bf16_activations(user.results[0], readers)
    if readers.get(type(user)) != index:
        return False
    weight = _outside_kernel(user.weight).owner  # type: ignore[attr-defined]
    return isinstance(weight, g.WeightOp | g.ConstantOp)


def read_only_as_bf16_activations(value: SSAValue,
                                   readers: dict[type[Operation], int] = ACTIVATION_OPERAND) -> bool:
    """Is every use of `value` (through graph.kernel regions) the activations of a linear or a
    conv on a compile-time weight (`readers`: by default `ACTIVATION_OPERAND`; convs only,
    `CONV_ACTIVATION_OPERAND`), directly or through ops that commute
    with the rounding (`ROUNDING_COMMUTES`), and `value` neither a function argument nor
    returned? In bf16 precision
    such a tensor is held as **bf16** in DRAM (`LoweringContext.narrow_output_buffer`): its
    consumers round it to bf16 before the matmul anyway, so the bits are the same and the
    producer writes, and every consumer reads, half the bytes (docs/performance.md counts
    these activations at the operand size)."""
    uses = list(value.uses)
    if not uses or element_name_of(value) != "f32":
        return False
    return all(_use_reads_bf16(use, readers) for use in uses)


def _use_reads_bf16(use: Use, readers: dict[type[Operation], int]) -> bool:
    """Does `use` read its value only as bf16 activations (`read_only_as_bf16_activations`),
    through graph.kernel regions?"""
    user = use.operation
    if isinstance(user, g.YieldOp):  # a kernel's result: what its users read
        kernel = user.parent_op()
        return isinstance(kernel, g.KernelOp) and read_only_as_bf16_activations(kernel.results[use.index], readers)
    if isinstance(user, g.KernelOp):
        inner = user.body.block.args[use.index]
        return bool(inner.uses) and all(_bf16_activation_use(u.operation, u.index, readers) for u in inner.uses)
    return _bf16_activation_use(user, use.index, readers)
