"""The base of every graph op (verification by shape inference) and the helpers the ops' shape
functions share: attribute builders, broadcasting, axis normalisation, operand checks."""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    DenseArrayBase,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    TensorType,
    i1,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import IRDLOperation, ParsePropInAttrDict, result_def, traits_def
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from infer.dialects.dtypes import (
    SUPPORTED_ELEMENT_TYPES,
    element_type_name,
    element_type_of,
    format_shape,
    is_float,
    shape_of,
)


Shape = tuple[int, ...]
DYNAMIC = DYNAMIC_INDEX  # how a `?` dimension reads from TensorType.get_shape()


# --------------------------------------------------------------------------
# Small helpers shared by the shape functions
# --------------------------------------------------------------------------


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    """An i64 dense array property (numpy or torch integers are taken as Python ints)."""
    return DenseArrayBase.from_list(i64, [int(v) for v in values])


def i64_values(attr: DenseArrayBase | None) -> tuple[int, ...]:
    """The integers of a dense array property (() when the property is absent)."""
    if attr is None:
        return ()
    return tuple(int(v) for v in attr.get_values())


_ints = i64_values  # the old private name, still read by passes/graph_to_tile.py and lower_data.py


def i64_attr(value: int) -> IntegerAttr:
    return IntegerAttr(value, i64)


def f64_attr(value: float) -> FloatAttr:
    return FloatAttr(value, Float64Type())


def bool_attr(value: bool) -> IntegerAttr:
    return IntegerAttr(int(bool(value)), i1)


def broadcast_shapes(op_name: str, *shapes: Shape) -> Shape:
    """Numpy broadcasting of static shapes, with a message naming both shapes."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for i in range(rank):
        dim = 1
        for s in shapes:
            d = s[i - rank + len(s)] if i - rank + len(s) >= 0 else 1
            if d == 1:
                continue
            if dim in (1, DYNAMIC) or d == DYNAMIC and dim == 1:
                dim = d
            elif d != dim and d != DYNAMIC:
                raise VerifyException(
                    "shapes "
                    + ", ".join(format_shape(s) for s in shapes)
                    + " are not broadcast-compatible (dimension "
                    f"{i - rank} is {dim} in one operand and {d} in another)"
                )
        out.append(dim)
    return tuple(out)


def normalize_axis(op_name: str, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise VerifyException(
            f"{what} {axis} is out of range for a rank-{rank} operand "
            f"(expected {-rank} <= {what} < {rank})"
        )
    return axis % rank if rank else 0


class GraphOp(IRDLOperation, ABC):
    """Base of all graph ops: verification by shape inference."""

    irdl_options = (ParsePropInAttrDict(),)

    def infer_result_types(self) -> list[TensorType]:
        """Result types computed from operands and properties alone."""
        raise NotImplementedError

    @classmethod
    def inferred(cls, operands: Sequence[SSAValue], properties: dict[str, Attribute]) -> GraphOp:
        """An op of this type on `operands` whose result types are inferred from them and the
        properties (a probe op computes them, then lets go of its operands; its f32 result is
        what the few ops that read their own result type expect)."""
        probe = cls.create(operands=list(operands), result_types=[TensorType(Float32Type(), [])],
                           properties=properties)
        try:
            types = probe.infer_result_types()
        finally:  # a refused probe too: it must not stay a user of its operands
            probe.drop_all_references()
        return cls.create(operands=list(operands), result_types=types, properties=properties)

    def verify_(self) -> None:
        """Every operand and result has an element type the graph level supports, and each
        declared result type agrees with `infer_result_types()`: the same element type and
        rank, and the same size in every dimension where neither is `?`."""
        for kind, values in (("operand", self.operands), ("result", self.results)):
            for i, v in enumerate(values):
                elem = element_type_name(element_type_of(v))
                if elem not in SUPPORTED_ELEMENT_TYPES:
                    raise VerifyException(
                        f"{kind} #{i} has element type {elem}, which the graph level does not "
                        f"support (supported: {', '.join(SUPPORTED_ELEMENT_TYPES)})"
                    )
        inferred = self.infer_result_types()
        for i, (result, expected) in enumerate(zip(self.results, inferred, strict=True)):
            declared = result.type
            assert isinstance(declared, TensorType)
            if declared.get_element_type() != expected.get_element_type():
                raise VerifyException(
                    f"result #{i} has element type "
                    f"{element_type_name(declared.get_element_type())} but the operands "
                    f"give {element_type_name(expected.get_element_type())}"
                )
            d_shape, e_shape = declared.get_shape(), expected.get_shape()
            compatible = len(d_shape) == len(e_shape) and all(
                d == DYNAMIC or e == DYNAMIC or d == e for d, e in zip(d_shape, e_shape)
            )
            if not compatible:
                raise VerifyException(
                    f"result #{i} has shape {format_shape(d_shape)} but the "
                    f"operands and attributes give {format_shape(e_shape)}"
                )


class TensorResultOp(GraphOp, ABC):
    """A graph op without side effects computing one tensor, `output` (every graph op but
    `graph.constant`, `graph.kernel` and `graph.yield`)."""

    output = result_def(TensorType)
    traits = traits_def(Pure())


FUNCTIONAL = "attr-dict `:` functional-type(operands, results)"


def require_float(op: GraphOp, value: SSAValue, what: str) -> None:
    if not is_float(element_type_of(value)):
        raise VerifyException(
            f"{what} must have a floating-point element type "
            f"(f32, f16, bf16, f64), got {element_type_name(element_type_of(value))}"
        )


def require_same_elem(op: GraphOp, values: Sequence[SSAValue]) -> Attribute:
    elems = [element_type_of(v) for v in values]
    if any(e != elems[0] for e in elems):
        raise VerifyException(
            "operands must share one element type, got "
            + ", ".join(element_type_name(e) for e in elems)
        )
    return elems[0]


def require_rank(op: GraphOp, value: SSAValue, what: str, ranks: Sequence[int]) -> Shape:
    shape = shape_of(value)
    if len(shape) not in ranks:
        expected = " or ".join(str(r) for r in ranks)
        raise VerifyException(
            f"{what} must have rank {expected}, got shape {format_shape(shape)}"
        )
    return shape
