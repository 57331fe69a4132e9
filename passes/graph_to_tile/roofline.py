"""The algorithmic roofline of each lowered graph op: its MACs and compulsory DRAM bytes.

graph-to-tile records, for every graph-level op it lowers (a `graph.kernel` region, an anchor
with its fused epilogue, or a lone op), what the op costs *as the model defines it*, so the run
report can measure the compiled kernel against the algorithmic minimum instead of against the
work the compiler chose to do (docs/performance.md):

* `macs`: multiply-accumulates of the graph op (conv2d: N.O.OH.OW.(C/groups).KH.KW; linear and
  matmul: batch.M.N.K; attention: B.H.Sq.Skv.(D + Dv), dense); padding, partial tiles and
  recomputation never count. The report multiplies by the precision's passes (3 for fp32).
* `bytes`: every distinct input and output of the op once, each at the smallest size the
  precision lets a kernel hold it: a matrix-unit weight at the matmul operand size (bf16: 2
  bytes, fp32 emulation: 4 = hi + lo), another weight at 4; an activation consumed only as a
  matrix-unit operand (and not a model input or output; directly or through a max pool,
  `matrix_operand_only`) at the operand size, any other at its element size (f32: 4); of a
  table only gathers read (an embedding), the elements they take, at most the table. Re-reads, halos, padded copies and partial bursts never count.
* `weight_bytes`: the weights' share of `bytes` (the whole-model minimum is the sum of every
  op's weights plus the model's inputs and outputs: intermediates could stay on chip).

The record is the `tile.roofline` attribute ({macs, bytes, weight_bytes[, predicted, class]}) on
the op's last top-level tile op, with the tiling cost model's predicted cycles of the op's loop
nests and the op's kernel class (for the cost model's error table); tile-to-npu copies it into
the op markers (`npu.ops`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr, TensorType, i64
from xdsl.ir import Block, BlockArgument, Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.dialects.dtypes import element_name_of, num_elements, shape_of
from infer.passes.graph_to_tile.context import LoweringContext
from infer.passes.graph_to_tile.storage import ROUNDING_COMMUTES

_ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i8": 1, "i32": 4, "i64": 8, "i1": 1}


def _conv_macs(op: g.Conv2dOp) -> int:
    n, _, oh, ow = shape_of(op.results[0])
    o, cg, kh, kw = shape_of(op.weight)
    return n * o * oh * ow * cg * kh * kw


def _linear_macs(op: g.LinearOp) -> int:
    return num_elements(shape_of(op.results[0])) * shape_of(op.input)[-1]


def _matmul_macs(op: g.MatmulOp) -> int:
    lhs = shape_of(op.lhs)
    k = lhs[-2] if op.transpose_a.value.data and len(lhs) > 1 else lhs[-1]
    return num_elements(shape_of(op.results[0])) * k


def _attention_macs(op: g.AttentionOp) -> int:
    q, k, v = shape_of(op.query), shape_of(op.key), shape_of(op.value)
    rows = num_elements(q[:-1])  # B . H . Sq
    return rows * k[-2] * (q[-1] + v[-1])


MACS: dict[type[Operation], Callable[..., int]] = {
    g.Conv2dOp: _conv_macs,
    g.LinearOp: _linear_macs,
    g.MatmulOp: _matmul_macs,
    g.AttentionOp: _attention_macs,
}
"""Algorithmic MACs per graph op type (ops missing here do no multiply-accumulates)."""


def _matrix_weight_operands(op: Operation) -> tuple[SSAValue, ...]:
    """The operands of `op` the matrix unit holds as weights (packed at the operand size)."""
    if isinstance(op, g.Conv2dOp):
        return (op.weight,)
    if isinstance(op, g.LinearOp):
        return (op.weight,)
    if isinstance(op, g.MatmulOp):
        return (op.rhs,)
    return ()


def _matrix_activation_operands(op: Operation) -> tuple[SSAValue, ...]:
    if isinstance(op, g.Conv2dOp):
        return (op.input,)
    if isinstance(op, g.LinearOp):
        return (op.input,)
    if isinstance(op, g.MatmulOp):
        return (op.lhs, op.rhs)
    if isinstance(op, g.AttentionOp):
        return (op.query, op.key, op.value)
    return ()


def _is_matrix_operand(use_op: Operation, index: int) -> bool:
    operand = use_op.operands[index]
    return any(operand is v for v in _matrix_activation_operands(use_op) + _matrix_weight_operands(use_op))


def matrix_operand_only(value: SSAValue, yielded: bool = False) -> bool:
    """Every use of `value` is a matrix-unit operand (through graph.kernel regions and ops that
    commute with the operand rounding, storage.ROUNDING_COMMUTES: a max pool between convs),
    and it is neither a function argument nor returned. `yielded`: `value` is such an op's
    result, which a kernel region may yield (then its kernel's result is what is read)."""
    if isinstance(value, BlockArgument) and isinstance(value.owner, Block) and isinstance(
            value.owner.parent_op(), func.FuncOp):
        return False
    uses = list(value.uses)
    if not uses:
        return False
    for use in uses:
        user = use.operation
        if isinstance(user, func.ReturnOp):
            return False
        if isinstance(user, g.KernelOp):
            if not matrix_operand_only(user.body.block.args[use.index]):
                return False
        elif ROUNDING_COMMUTES.get(type(user)) == use.index:
            if not matrix_operand_only(user.results[0], yielded=True):
                return False
        elif isinstance(user, g.YieldOp):
            kernel = user.parent_op()
            if not (yielded and isinstance(kernel, g.KernelOp) and matrix_operand_only(kernel.results[use.index])):
                return False
        elif not _is_matrix_operand(user, use.index):
            return False
    return True


def _element_bytes(value: SSAValue) -> int:
    return _ELEMENT_BYTES.get(element_name_of(value), 4) if isinstance(value.type, TensorType) else 4


def _gathered_elements(ops: Sequence[Operation]) -> dict[SSAValue, int]:
    """The tables that the kernel's ops read only as a gather's input (an embedding lookup),
    with the elements those gathers take: at most that many of the table's elements are
    compulsory (a 128-token lookup in MiniLM's 30522-row table reads 128 rows, not 47 MB)."""
    inside = set(ops)
    taken: dict[SSAValue, int] = {}
    for o in ops:
        if isinstance(o, g.GatherOp):
            taken[o.input] = taken.get(o.input, 0) + num_elements(shape_of(o.results[0]))
    return {v: n for v, n in taken.items()
            if all(isinstance(u.operation, g.GatherOp) and u.index == 0
                   for u in v.uses if u.operation in inside)}


def kernel_record(ctx: LoweringContext, ops: Sequence[Operation],
                  inputs: Sequence[tuple[SSAValue, SSAValue]],
                  outputs: Sequence[SSAValue]) -> tuple[int, int, int]:
    """(macs, bytes, weight_bytes) of a kernel made of the graph `ops` (anchor and epilogue,
    or a graph.kernel's region), reading `inputs` ((outer value, the value the ops use) pairs)
    and writing `outputs` (outer values)."""
    operand_bytes = 2 * ctx.bf16_copies
    macs = sum(MACS[type(o)](o) for o in ops if type(o) in MACS)
    matrix_weights = {v for o in ops for v in _matrix_weight_operands(o)}
    gathered = _gathered_elements(ops)
    total = weights = 0
    seen: set[SSAValue] = set()
    for value, inner in inputs:
        if value in seen or not isinstance(value.type, TensorType):
            continue
        seen.add(value)
        n = num_elements(shape_of(value))
        if ctx.is_constant(value):
            if inner in gathered:  # a table read only by gathers: the slices they take
                n = min(n, gathered[inner])
            size = n * (operand_bytes if inner in matrix_weights else 4)
            weights += size
            total += size
        else:
            total += n * (operand_bytes if matrix_operand_only(value) else _element_bytes(value))
    for value in outputs:
        n = num_elements(shape_of(value))
        total += n * (operand_bytes if matrix_operand_only(value) else _element_bytes(value))
    return macs, total, weights


def record_for(ctx: LoweringContext, op: Operation, fused: Sequence[Operation],
               without: Sequence[Operation] = ()) -> tuple[int, int, int]:
    """The record of graph op `op` lowered with the epilogue ops `fused` (or a graph.kernel;
    `without`: its last ops, lowered as kernels of their own, LoweringContext.defer)."""
    if isinstance(op, g.KernelOp):
        block = op.body.block
        inner_ops = [o for o in block.ops if not isinstance(o, g.YieldOp) and o not in without]
        pairs = [(v, a) for v, a in zip(op.inputs, block.args, strict=True)
                 if not without or any(u.operation in inner_ops for u in a.uses)]
        outputs = [w.operands[0] for w in without[:1]] or list(op.outputs)
        return kernel_record(ctx, inner_ops, pairs, outputs)
    ops = [op, *fused]
    produced = {r for o in ops for r in o.results}
    pairs = [(v, v) for o in ops for v in o.operands if v not in produced]
    last = ops[-1]
    return kernel_record(ctx, ops, pairs, list(last.results))


def kernel_class(op: Operation) -> str:
    """The kernel class of a lowered graph op (the cost model's error table groups by it): its
    anchor's op name (conv2d, linear, matmul, attention, ...), `elementwise` for elementwise
    ops and anchor-less kernels."""
    if isinstance(op, g.KernelOp):
        anchor = op.anchor()
        return anchor.name.split(".", 1)[1] if anchor is not None else "elementwise"
    name = op.name.split(".", 1)[1]
    from infer.passes.graph_to_tile.elementwise import ELEMENTWISE_OPS

    return "elementwise" if type(op) in ELEMENTWISE_OPS else name


def tag(top_level: Operation | None, record: tuple[int, int, int], predicted: int = 0, kind: str = "") -> None:
    """Attach the record (and the cost model's predicted cycles, the kernel class) to the
    kernel's last top-level tile op (None: it emitted no code)."""
    if top_level is None:
        return
    macs, nbytes, weight_bytes = record
    entries = {"macs": IntegerAttr(macs, i64), "bytes": IntegerAttr(nbytes, i64),
               "weight_bytes": IntegerAttr(weight_bytes, i64)}
    if predicted:
        entries["predicted"] = IntegerAttr(predicted, i64)
    if kind:
        entries["class"] = StringAttr(kind)
    top_level.attributes[t.ROOFLINE_ATTR] = DictionaryAttr(entries)
