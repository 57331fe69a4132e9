"""Questions about the tile IR that several tile-to-npu stages ask, and the stage's error form."""

from __future__ import annotations

from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, MemRefType, UnitAttr
from xdsl.ir import Attribute, Operation, SSAValue

from infer.dialects import tile as t
from infer.dialects.dtypes import element_name_of, element_type_of, shape_of, to_numpy_dtype
from infer.dialects.ir_io import LoweringError, lowering_error
from infer.target import isa

STAGE = "tile-to-npu"
# the engines with instruction queues (the scalar front end executes in order, it has none)
QUEUED_ENGINES = tuple(engine for engine in isa.ENGINES if engine != "scalar")


class CheckedInstructions:
    """isa.make with the field checks done once per distinct (name, fields): a function's
    instructions repeat the same fields many times (loop body copies, peeled and inlined
    iterations, kernels compiled again), and each is checked when emitted and built again,
    with its physical semaphores, for the program."""

    def __init__(self) -> None:
        self.checked: dict[tuple, isa.Instr] = {}

    def make(self, name: str, fields: dict[str, int], wait: int = 0, signal: int = 0,
             signal2: int = 0, wait2: int = 0) -> isa.Instr:
        """isa.make(name, wait, signal, signal2, wait2, **fields) (raises its EncodingError)."""
        key = (name, *fields.items())
        instr = self.checked.get(key)
        if instr is None:
            instr = self.checked[key] = isa.make(name, **fields)
        if not (wait or signal or signal2 or wait2):
            return instr
        if not all(0 <= s <= isa.MAX_SEMAPHORES for s in (wait, signal, signal2, wait2)):
            return isa.make(name, wait, signal, signal2, wait2, **fields)  # (its error)
        return isa.Instr(instr.d, instr.values, wait, signal, signal2, wait2)


def fail(op: Operation, msg: str) -> LoweringError:
    """The one-line error naming op: `file:line:col: error: 'op' op tile-to-npu: msg`."""
    return lowering_error(op, STAGE, msg)


def memref_info(memref_type: MemRefType) -> tuple[tuple[int, ...], str, int]:
    """(shape, element type name, element bytes) of a memref type."""
    element = element_name_of(memref_type)
    return shape_of(memref_type), element, to_numpy_dtype(element_type_of(memref_type)).itemsize


def is_output_flag(attr: Attribute | None) -> bool:
    """Does a function argument's `tile.output` attribute mark it as an output?"""
    return isinstance(attr, UnitAttr) or (isinstance(attr, IntegerAttr) and attr.value.data != 0)


def argument_attributes(fn: func.FuncOp) -> list[dict[str, Attribute]]:
    """Each argument's attribute dictionary ({} where it has none)."""
    attrs = fn.arg_attrs.data if fn.arg_attrs is not None else []
    return [a.data if isinstance(a, DictionaryAttr) else {} for a in attrs]


def is_output_argument(fn: func.FuncOp, index: int) -> bool:
    attrs = argument_attributes(fn)
    return index < len(attrs) and is_output_flag(attrs[index].get("tile.output"))


root_buffer = t.root_buffer  # (defined with the tile dialect's views; imported from here too)


def users_through_views(value: SSAValue) -> list[Operation]:
    """The ops using a buffer, directly or through tile.view ops (the views themselves not)."""
    out: list[Operation] = []
    for use in value.uses:
        op = use.operation
        if isinstance(op, t.ViewOp):
            out += users_through_views(op.result)
        else:
            out.append(op)
    return out


def enclosing_loops(op: Operation, fn: func.FuncOp) -> list[scf.ForOp]:
    """The scf.for ops around op inside fn, outermost first."""
    out = []
    parent = op.parent_op()
    while parent is not None and parent is not fn:
        if isinstance(parent, scf.ForOp):
            out.append(parent)
        parent = parent.parent_op()
    return list(reversed(out))


def constant_bounds(loop: scf.ForOp) -> bool:
    """Are the loop's bounds and step compile-time constants (one trip count for every
    enclosing iteration)?"""
    return all(isinstance(v.owner, arith.ConstantOp) for v in (loop.lb, loop.ub, loop.step))


def trip_count(loop: scf.ForOp) -> int:
    """The iteration count of a loop with constant bounds; of a loop whose upper bound grows
    affinely with enclosing loops (a triangular nest), its smallest; 0 when a bound is read
    at run time or not affine."""
    bounds = []
    for value in (loop.lb, loop.ub, loop.step):
        owner = value.owner
        if not isinstance(owner, arith.ConstantOp) or not isinstance(owner.value, IntegerAttr):
            if value is loop.ub and isinstance(owner, (arith.AddiOp, arith.SubiOp, arith.MuliOp)):
                return _smallest_affine_trip(loop)
            return 0
        bounds.append(int(owner.value.value.data))
    lower, upper, step = bounds
    return max(0, -(-(upper - lower) // step)) if step > 0 else 0


def _smallest_affine_trip(loop: scf.ForOp) -> int:
    from infer.passes.tile_to_npu.addressing import trip_index_of  # (addressing imports this module)

    try:
        trips = trip_index_of(loop)
    except LoweringError:
        return 0
    if any(c < 0 for c in trips.coefficients.values()):
        return 0
    return max(0, trips.constant)


# the engine that runs each tile op's instructions (each tile op lowers to one engine)
_ENGINE_OF_OP = {
    t.DmaOp: lambda op: "dma_load" if op.is_load else "dma_store",
    t.MatmulOp: lambda op: "matrix",
    t.GatherRowsOp: lambda op: "dma_load",
    t.ScatterRowsOp: lambda op: "dma_store",
}


def engine_of(op: Operation) -> str:
    engine = _ENGINE_OF_OP.get(type(op))
    return engine(op) if engine is not None else "vector"


# (root buffer, written?) of every buffer operand of each tile op that emits instructions
_BUFFERS_OF_OP = {
    t.DmaOp: lambda op: [(op.src, False), (op.dst, True)],
    t.MatmulOp: lambda op: [(op.lhs, False), (op.rhs, False), (op.acc, True)],
    t.VectorOp: lambda op: [(op.a, False), *((b, False) for b in op.b), (op.dst, True)],
    t.FillOp: lambda op: [(op.dst, True)],
    t.GatherRowsOp: lambda op: [(op.table, False), (op.indices, False), (op.dst, True)],
    t.ScatterRowsOp: lambda op: [(op.src, False), (op.indices, False), (op.table, True)],
    t.DequantOp: lambda op: [(op.codes, False), (op.scales, False), (op.dst, True)],
}


def accessed_buffers(op: Operation) -> list[tuple[SSAValue, bool]]:
    """(root buffer, written?) for each buffer operand of op, in operand order."""
    operands = _BUFFERS_OF_OP.get(type(op))
    return [] if operands is None else [(root_buffer(v), w) for v, w in operands(op)]


def top_level_op(op: Operation, fn: func.FuncOp) -> Operation:
    """The op of fn's body that contains op (op itself at the top level)."""
    while op.parent_op() is not fn and op.parent_op() is not None:
        op = op.parent_op()  # type: ignore[assignment]
    return op
