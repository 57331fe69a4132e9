"""Elementwise graph ops: unary functions, binary arithmetic, comparisons and logic with
numpy broadcasting, `where` and `cast`."""

from __future__ import annotations

from abc import ABC
from typing import ClassVar

from xdsl.dialects.builtin import BoolAttr, FloatAttr, StringAttr, TensorType, i1
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, opt_prop_def, prop_def
from xdsl.utils.exceptions import VerifyException

from infer.dialects.dtypes import element_type_name, element_type_of, is_bool, is_integer, shape_of
from infer.dialects.graph.base import (
    bool_attr,
    broadcast_shapes,
    f64_attr,
    FUNCTIONAL,
    require_float,
    require_same_elem,
    TensorResultOp,
)


# --------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------


class UnaryOp(TensorResultOp, ABC):
    """`y = f(x)` elementwise; the result has the operand's shape and element type.
    Floating-point operands only, except for neg, abs, sign, relu, clip (any number type)
    and not (i1)."""

    input = operand_def(TensorType)
    FLOAT_ONLY: ClassVar[bool] = True
    assembly_format = "$input " + FUNCTIONAL

    def __init__(self, input: SSAValue | Operation, properties: dict[str, Attribute] | None = None):
        super().__init__(
            operands=[input], result_types=[SSAValue.get(input).type], properties=properties or {}
        )

    def infer_result_types(self) -> list[TensorType]:
        if self.FLOAT_ONLY:
            require_float(self, self.input, "the operand")
        return [self.input.type]


def _unary(op_name: str, doc: str, float_only: bool = True) -> type[UnaryOp]:
    cls = type(
        "".join(p.capitalize() for p in op_name.split("_")) + "Op",
        (UnaryOp,),
        {
            "name": f"graph.{op_name}",
            "__doc__": doc,
            "FLOAT_ONLY": float_only,
            "__annotations__": {"FLOAT_ONLY": ClassVar[bool]},
        },
    )
    return irdl_op_definition(cls)


NegOp = _unary("neg", "y = -x", float_only=False)
AbsOp = _unary("abs", "y = |x|", float_only=False)
SignOp = _unary("sign", "y = sign(x)", float_only=False)
ExpOp = _unary("exp", "y = e^x")
LogOp = _unary("log", "natural logarithm")
SqrtOp = _unary("sqrt", "square root")
RsqrtOp = _unary("rsqrt", "1 / sqrt(x)")
ReciprocalOp = _unary("reciprocal", "1 / x")
TanhOp = _unary("tanh", "hyperbolic tangent")
SigmoidOp = _unary("sigmoid", "1 / (1 + e^-x)")
ErfOp = _unary("erf", "Gauss error function")
SinOp = _unary("sin", "sine")
CosOp = _unary("cos", "cosine")
FloorOp = _unary("floor", "round down")
CeilOp = _unary("ceil", "round up")
RoundOp = _unary("round", "round half to even")
ReluOp = _unary("relu", "max(x, 0)", float_only=False)
SiluOp = _unary("silu", "x * sigmoid(x) (a.k.a. swish)")
SoftplusOp = _unary("softplus", "log(1 + e^x)")


@irdl_op_definition
class NotOp(UnaryOp):
    """Logical not of an i1 tensor."""

    name = "graph.not"
    FLOAT_ONLY: ClassVar[bool] = False

    def infer_result_types(self) -> list[TensorType]:
        if not is_bool(element_type_of(self.input)):
            raise VerifyException(f"the operand must be an i1 tensor, got {element_type_name(element_type_of(self.input))}")
        return [self.input.type]


@irdl_op_definition
class BitwiseNotOp(UnaryOp):
    """~x: every bit of an integer tensor flipped (two's complement; -x - 1 when signed)."""

    name = "graph.bitwise_not"
    FLOAT_ONLY: ClassVar[bool] = False

    def infer_result_types(self) -> list[TensorType]:
        if not is_integer(element_type_of(self.input)):
            raise VerifyException(
                f"the operand must be an integer tensor, got {element_type_name(element_type_of(self.input))}"
            )
        return [self.input.type]


@irdl_op_definition
class GeluOp(UnaryOp):
    """GELU: exact (`approximate = "none"`, erf form) or the tanh approximation."""

    name = "graph.gelu"
    approximate = prop_def(StringAttr, default_value=StringAttr("none"))

    def infer_result_types(self) -> list[TensorType]:
        if self.approximate.data not in ("none", "tanh"):
            raise VerifyException(
                f"approximate must be \"none\" or \"tanh\", got \"{self.approximate.data}\""
            )
        return super().infer_result_types()


@irdl_op_definition
class ClipOp(UnaryOp):
    """min(max(x, min), max); either bound may be absent (relu6 = clip 0..6)."""

    name = "graph.clip"
    FLOAT_ONLY: ClassVar[bool] = False
    min = opt_prop_def(FloatAttr)
    max = opt_prop_def(FloatAttr)

    def infer_result_types(self) -> list[TensorType]:
        if self.min is not None and self.max is not None and self.min.value.data > self.max.value.data:
            raise VerifyException(
                f"min ({self.min.value.data}) must not exceed max ({self.max.value.data})"
            )
        return super().infer_result_types()


@irdl_op_definition
class LeakyReluOp(UnaryOp):
    """x if x >= 0 else alpha * x."""

    name = "graph.leaky_relu"
    alpha = prop_def(FloatAttr, default_value=f64_attr(0.01))


@irdl_op_definition
class EluOp(UnaryOp):
    """x if x > 0 else alpha * (e^x - 1)."""

    name = "graph.elu"
    alpha = prop_def(FloatAttr, default_value=f64_attr(1.0))


@irdl_op_definition
class HardSigmoidOp(UnaryOp):
    """clip(alpha * x + beta, 0, 1) (ONNX HardSigmoid; hard_swish = x * hard_sigmoid).
    The defaults are ONNX's; torch's hardsigmoid is alpha = 1/6, beta = 0.5."""

    name = "graph.hard_sigmoid"
    alpha = prop_def(FloatAttr, default_value=f64_attr(0.2))
    beta = prop_def(FloatAttr, default_value=f64_attr(0.5))


class BinaryOp(TensorResultOp, ABC):
    """`z = x op y` elementwise with numpy broadcasting; both operands have the same
    element type, which the result keeps, except that comparisons (equal, less,
    less_equal, greater, greater_equal) give i1; and, or, xor take i1 operands; the
    bitwise ops and shifts take integer operands."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    RESULT_IS_BOOL: ClassVar[bool] = False
    OPERAND_KIND: ClassVar[str] = "any"  # "any", "bool" (logical ops), "int" (bitwise ops)
    assembly_format = "$lhs `,` $rhs " + FUNCTIONAL

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation):
        lhs, rhs = SSAValue.get(lhs), SSAValue.get(rhs)
        elem = i1 if self.RESULT_IS_BOOL else element_type_of(lhs)
        shape = broadcast_shapes(self.name, shape_of(lhs), shape_of(rhs))
        super().__init__(operands=[lhs, rhs], result_types=[TensorType(elem, shape)])

    def infer_result_types(self) -> list[TensorType]:
        elem = require_same_elem(self, [self.lhs, self.rhs])
        if self.OPERAND_KIND == "bool" and not is_bool(elem):
            raise VerifyException(
                f"operands must be i1 tensors, got {element_type_name(elem)}"
            )
        if self.OPERAND_KIND == "int" and not is_integer(elem):
            raise VerifyException(
                f"operands must be integer tensors (i8 to i64, ui8 to ui64), got {element_type_name(elem)}"
            )
        shape = broadcast_shapes(self.name, shape_of(self.lhs), shape_of(self.rhs))
        return [TensorType(i1 if self.RESULT_IS_BOOL else elem, shape)]


def _binary(op_name: str, doc: str, result_is_bool: bool = False, operand_kind: str = "any") -> type[BinaryOp]:
    cls = type(
        "".join(p.capitalize() for p in op_name.split("_")) + "Op",
        (BinaryOp,),
        {
            "name": f"graph.{op_name}",
            "__doc__": doc,
            "RESULT_IS_BOOL": result_is_bool,
            "OPERAND_KIND": operand_kind,
            "__annotations__": {"RESULT_IS_BOOL": ClassVar[bool], "OPERAND_KIND": ClassVar[str]},
        },
    )
    return irdl_op_definition(cls)


AddOp = _binary("add", "x + y")
SubOp = _binary("sub", "x - y")
MulOp = _binary("mul", "x * y")
DivOp = _binary("div", "x / y (integer division truncates toward zero)")
PowOp = _binary("pow", "x ** y")
MaximumOp = _binary("maximum", "elementwise max(x, y)")
MinimumOp = _binary("minimum", "elementwise min(x, y)")
ModOp = _binary("mod", "x mod y with the sign of y (floor modulo, as Python and ONNX fmod=0)")
EqualOp = _binary("equal", "x == y", result_is_bool=True)
LessOp = _binary("less", "x < y", result_is_bool=True)
LessEqualOp = _binary("less_equal", "x <= y", result_is_bool=True)
GreaterOp = _binary("greater", "x > y", result_is_bool=True)
GreaterEqualOp = _binary("greater_equal", "x >= y", result_is_bool=True)
AndOp = _binary("and", "logical and", operand_kind="bool")
OrOp = _binary("or", "logical or", operand_kind="bool")
XorOp = _binary("xor", "logical xor", operand_kind="bool")
BitwiseAndOp = _binary("bitwise_and", "x & y on the two's complement bits of integers", operand_kind="int")
BitwiseOrOp = _binary("bitwise_or", "x | y on the two's complement bits of integers", operand_kind="int")
BitwiseXorOp = _binary("bitwise_xor", "x ^ y on the two's complement bits of integers", operand_kind="int")
ShiftLeftOp = _binary(
    "shift_left", "x << y for integers: bits shifted past the width are lost; a shift by y >= the "
    "bit width (or y < 0) gives 0", operand_kind="int",
)
ShiftRightOp = _binary(
    "shift_right", "x >> y for integers: logical for unsigned types, arithmetic (sign-filling) for "
    "signed ones; a shift by y >= the bit width (or y < 0) gives 0 (-1 for a negative signed x)",
    operand_kind="int",
)


@irdl_op_definition
class WhereOp(TensorResultOp):
    """`cond ? x : y` elementwise, all three broadcast together."""

    name = "graph.where"
    condition = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    assembly_format = "$condition `,` $lhs `,` $rhs " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        if not is_bool(element_type_of(self.condition)):
            raise VerifyException(
                f"the condition must be an i1 tensor, got "
                f"{element_type_name(element_type_of(self.condition))}"
            )
        elem = require_same_elem(self, [self.lhs, self.rhs])
        shape = broadcast_shapes(self.name, shape_of(self.condition), shape_of(self.lhs), shape_of(self.rhs))
        return [TensorType(elem, shape)]


_E8M0_ROUND_MODES = ("up", "down", "nearest")


@irdl_op_definition
class CastOp(TensorResultOp):
    """Convert the element type (float->int truncates toward zero; int->bool is x != 0).

    The storage-only types (`dtypes.STORAGE_ONLY_TYPES`: 8- and 4-bit floats, 4- and
    2-bit integers) are cast to and from here. To an 8-bit float other than f8E8M0FNU the
    value rounds to nearest even; with `saturate`, values beyond the largest finite value
    (infinities included) become it (ONNX Cast's default), without, they overflow as
    the type does (inf or NaN). f4E2M1FN always saturates. f8E8M0FNU (a power of two)
    takes the exponent of |x| rounded by `round_mode` ("up": any fraction rounds up,
    "down", "nearest"); NaN and inf give NaN, exponents past 2^127 give 2^127 with
    `saturate`, NaN without. To a 4- or 2-bit integer, floats truncate toward zero and
    a value out of the type's range gives 0 (ONNX leaves it unspecified; this is what
    ml_dtypes, which the ONNX tests use, does); integers wrap."""

    name = "graph.cast"
    input = operand_def(TensorType)
    saturate = prop_def(BoolAttr, default_value=bool_attr(False))
    round_mode = prop_def(StringAttr, default_value=StringAttr("up"))
    assembly_format = "$input " + FUNCTIONAL

    def __init__(
        self, input: SSAValue | Operation, element_type: Attribute, saturate: bool = False,
        round_mode: str = "up",
    ):
        input = SSAValue.get(input)
        properties: dict[str, Attribute] = {}
        if saturate:
            properties["saturate"] = bool_attr(True)
        if round_mode != "up":
            properties["round_mode"] = StringAttr(round_mode)
        super().__init__(
            operands=[input], result_types=[TensorType(element_type, shape_of(input))], properties=properties
        )

    def infer_result_types(self) -> list[TensorType]:
        if self.round_mode.data not in _E8M0_ROUND_MODES:
            raise VerifyException(
                f"round_mode must be one of {', '.join(_E8M0_ROUND_MODES)}, got \"{self.round_mode.data}\""
            )
        return [TensorType(element_type_of(self.output), shape_of(self.input))]
