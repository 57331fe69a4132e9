"""The `graph` dialect: value-semantic model-level ops on builtin tensors.

Every frontend (ONNX, torch.export, Hugging Face checkpoints) produces this
level, and its reference interpreter (`infer.dialects.graph_interpreter`) is the
golden model every lower level is checked against.

Conventions
- Operands and results are ranked builtin tensors. Shapes are static; a `?`
  dimension in a result is allowed and is refined by `graph-shape-inference`.
- Every op computes its result types from its operands and properties
  (`infer_result_types`); the verifier checks the declared result types agree,
  so a shape error is reported at the op that causes it.
- Elementwise binary ops broadcast like numpy. Layouts follow PyTorch/ONNX:
  NCHW activations, OIHW conv weights, [out, in] linear weights.
- Large constants live outside the text: `graph.weight @name` refers to the
  module's weight store (see `infer.dialects.weights`). `graph.constant` holds
  small inline values.
- Quantized values are plain i8 / ui8 / i32 tensors; `graph.quantize_linear`,
  `graph.dequantize_linear` and `graph.requantize` convert them with their scale
  and zero point as operands, and the integer kernels (`graph.conv2d_integer`,
  `graph.linear_integer`, `graph.matmul_integer`) compute in int8 with int32
  accumulation (docs/quantization.md).
- Block-quantized weights (GGUF Q8_0 / Q4_0 / Q4_1) stay packed as `ui8`
  weights; `graph.dequantize_blocks {format = "q4_1"}` states their values
  (docs/gguf.md).
- `graph.kernel` groups an anchor op (matmul, conv, norm, ...) with its
  elementwise epilogue, or a chain of elementwise ops, into one isolated region
  (formed by `graph-fuse`); the tile lowering turns each into one kernel.
"""

from __future__ import annotations

import math
from abc import ABC
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    I64,
    ArrayAttr,
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    ParamAttrConstraint,
    VarConstraint,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import (
    ConstantLike,
    HasCanonicalizationPatternsTrait,
    HasParent,
    IsolatedFromAbove,
    IsTerminator,
    Pure,
    RecursiveMemoryEffect,
    RecursivelySpeculatable,
)
from xdsl.utils.exceptions import VerifyException

from infer.dialects.block_quant import BLOCK_FORMATS, block_format
from infer.dialects.dtypes import (
    SUPPORTED_ELEMENT_TYPES,
    element_type_name,
    element_type_of,
    format_shape,
    is_bool,
    is_float,
    is_integer,
    shape_of,
)
from infer.dialects.weight_refs import WeightReference

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


_FUNCTIONAL = "attr-dict `:` functional-type(operands, results)"


def _require_float(op: GraphOp, value: SSAValue, what: str) -> None:
    if not is_float(element_type_of(value)):
        raise VerifyException(
            f"{what} must have a floating-point element type "
            f"(f32, f16, bf16, f64), got {element_type_name(element_type_of(value))}"
        )


def _require_same_elem(op: GraphOp, values: Sequence[SSAValue]) -> Attribute:
    elems = [element_type_of(v) for v in values]
    if any(e != elems[0] for e in elems):
        raise VerifyException(
            "operands must share one element type, got "
            + ", ".join(element_type_name(e) for e in elems)
        )
    return elems[0]


def _require_rank(op: GraphOp, value: SSAValue, what: str, ranks: Sequence[int]) -> Shape:
    shape = shape_of(value)
    if len(shape) not in ranks:
        expected = " or ".join(str(r) for r in ranks)
        raise VerifyException(
            f"{what} must have rank {expected}, got shape {format_shape(shape)}"
        )
    return shape


# --------------------------------------------------------------------------
# Constants and weights
# --------------------------------------------------------------------------


@irdl_op_definition
class ConstantOp(GraphOp):
    """A small constant inlined in the IR (large ones belong in `graph.weight`)."""

    name = "graph.constant"
    _T: ClassVar = VarConstraint("T", AnyAttr())
    value = prop_def(ParamAttrConstraint(DenseIntOrFPElementsAttr, (_T, AnyAttr())))
    output = result_def(_T)
    traits = traits_def(Pure(), ConstantLike())
    assembly_format = "$value attr-dict"

    def __init__(self, value: DenseIntOrFPElementsAttr):
        super().__init__(result_types=[value.type], properties={"value": value})

    def infer_result_types(self) -> list[TensorType]:
        t = self.value.type
        assert isinstance(t, TensorType)
        return [t]


@irdl_op_definition
class WeightOp(WeightReference, TensorResultOp):
    """A named tensor from the module's weight store (kept out of the text)."""

    name = "graph.weight"
    assembly_format = "$name attr-dict `:` type($output)"

    def infer_result_types(self) -> list[TensorType]:
        t = self.output.type
        assert isinstance(t, TensorType)
        if any(d == DYNAMIC for d in t.get_shape()):
            raise VerifyException("a weight must have a static shape")
        return [t]


@irdl_op_definition
class DequantizeBlocksOp(GraphOp):
    """The float values of a block-quantized weight kept packed (llama.cpp's
    Q8_0 / Q4_0 / Q4_1; see `infer.dialects.block_quant` and docs/gguf.md).

    The operand is the packed weight as stored, normally a `graph.weight` of
    `ui8`: `[..., K / block_size * block_bytes]`; the result is the logical
    weight `[..., K]` in f32 (or f16 / bf16: computed in f32, then rounded once).
    Each row (last dimension) is a sequence of blocks of 32 values with an fp16
    scale `d` (and, for q4_1, an fp16 minimum `m`): q8_0 is `d * q` with signed
    bytes q; q4_0 is `d * (q - 8)` and q4_1 `d * q + m` with 4-bit q (the low
    nibbles of a block's 16 bytes are its first 16 values, the high nibbles the
    last 16). Results are bit-identical to llama.cpp / `gguf.quants.dequantize`.

    A lowering sees `graph.linear %x, (graph.dequantize_blocks (graph.weight))`
    as "this matmul's weight is these packed blocks in this format" and may
    keep the blocks packed in memory and expand them next to the matrix unit.

        %p = graph.weight @blk.0.attn_q.weight : tensor<576x360xui8>
        %w = graph.dequantize_blocks %p {format = "q4_1"} : (tensor<576x360xui8>) -> tensor<576x576xf32>
    """

    name = "graph.dequantize_blocks"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    block_format = prop_def(StringAttr, prop_name="format")
    traits = traits_def(Pure())
    assembly_format = "$input " + _FUNCTIONAL

    def __init__(self, input: SSAValue | Operation, format: str, element_type: Attribute):
        input = SSAValue.get(input)
        fmt = block_format(format)
        shape = shape_of(input)
        logical = (*shape[:-1], fmt.logical_last_dim(shape[-1])) if shape else shape
        super().__init__(
            operands=[input],
            result_types=[TensorType(element_type, logical)],
            properties={"format": StringAttr(format)},
        )

    @property
    def format_name(self) -> str:
        return self.block_format.data

    def infer_result_types(self) -> list[TensorType]:
        fmt = BLOCK_FORMATS.get(self.format_name)
        if fmt is None:
            raise VerifyException(
                f"unknown block format \"{self.format_name}\" (supported: {', '.join(BLOCK_FORMATS)})"
            )
        if element_type_name(element_type_of(self.input)) != "ui8":
            raise VerifyException(
                f"the packed weight must be ui8, got {element_type_name(element_type_of(self.input))}"
            )
        elem = element_type_of(self.output)
        if element_type_name(elem) not in ("f32", "f16", "bf16"):
            raise VerifyException(f"the result must be f32, f16 or bf16, got {element_type_name(elem)}")
        packed = shape_of(self.input)
        if not packed:
            raise VerifyException("the packed weight must have rank >= 1")
        if packed[-1] == DYNAMIC or packed[-1] % fmt.block_bytes:
            raise VerifyException(
                f"a packed {fmt.name} row is a whole number of {fmt.block_bytes}-byte blocks, "
                f"got {format_shape(packed)}"
            )
        return [TensorType(elem, (*packed[:-1], fmt.logical_last_dim(packed[-1])))]


# --------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------


class UnaryOp(TensorResultOp, ABC):
    """`y = f(x)` elementwise; the result has the operand's shape and element type.
    Floating-point operands only, except for neg, abs, sign, relu, clip (any number type)
    and not (i1)."""

    input = operand_def(TensorType)
    FLOAT_ONLY: ClassVar[bool] = True
    assembly_format = "$input " + _FUNCTIONAL

    def __init__(self, input: SSAValue | Operation, properties: dict[str, Attribute] | None = None):
        super().__init__(
            operands=[input], result_types=[SSAValue.get(input).type], properties=properties or {}
        )

    def infer_result_types(self) -> list[TensorType]:
        if self.FLOAT_ONLY:
            _require_float(self, self.input, "the operand")
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
    assembly_format = "$lhs `,` $rhs " + _FUNCTIONAL

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation):
        lhs, rhs = SSAValue.get(lhs), SSAValue.get(rhs)
        elem = i1 if self.RESULT_IS_BOOL else element_type_of(lhs)
        shape = broadcast_shapes(self.name, shape_of(lhs), shape_of(rhs))
        super().__init__(operands=[lhs, rhs], result_types=[TensorType(elem, shape)])

    def infer_result_types(self) -> list[TensorType]:
        elem = _require_same_elem(self, [self.lhs, self.rhs])
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
    assembly_format = "$condition `,` $lhs `,` $rhs " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        if not is_bool(element_type_of(self.condition)):
            raise VerifyException(
                f"the condition must be an i1 tensor, got "
                f"{element_type_name(element_type_of(self.condition))}"
            )
        elem = _require_same_elem(self, [self.lhs, self.rhs])
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
    assembly_format = "$input " + _FUNCTIONAL

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


# --------------------------------------------------------------------------
# Linear algebra
# --------------------------------------------------------------------------


def matmul_shape(op_name: str, a: Shape, b: Shape, transpose_a: bool, transpose_b: bool) -> Shape:
    """numpy.matmul semantics (rank-1 promotion, batch broadcasting), optional transposes."""
    if not a or not b:
        raise VerifyException("operands must have rank >= 1 (scalars cannot be multiplied)")
    if (transpose_a and len(a) < 2) or (transpose_b and len(b) < 2):
        raise VerifyException("a transposed operand must have rank >= 2")
    if transpose_a:
        a = (*a[:-2], a[-1], a[-2])
    if transpose_b:
        b = (*b[:-2], b[-1], b[-2])
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    k_a, k_b = a2[-1], b2[-2]
    if DYNAMIC not in (k_a, k_b) and k_a != k_b:
        raise VerifyException(
            f"contraction dimensions differ: lhs {format_shape(a)} has K={k_a}, "
            f"rhs {format_shape(b)} has K={k_b}"
        )
    batch = broadcast_shapes(op_name, a2[:-2], b2[:-2])
    out = [*batch, a2[-2], b2[-1]]
    if len(b) == 1:
        out.pop(-1)
    if len(a) == 1:
        out.pop(-1 if len(b) == 1 else -2)
    return tuple(out)


@irdl_op_definition
class MatmulOp(TensorResultOp):
    """Batched matrix product, numpy.matmul semantics, with optional transposes of
    the last two dimensions of either operand."""

    name = "graph.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    transpose_a = prop_def(BoolAttr, default_value=bool_attr(False))
    transpose_b = prop_def(BoolAttr, default_value=bool_attr(False))
    assembly_format = "$lhs `,` $rhs " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        elem = _require_same_elem(self, [self.lhs, self.rhs])
        shape = matmul_shape(
            self.name, shape_of(self.lhs), shape_of(self.rhs),
            bool(self.transpose_a.value.data), bool(self.transpose_b.value.data),
        )
        return [TensorType(elem, shape)]


@irdl_op_definition
class LinearOp(TensorResultOp):
    """y = x @ W^T + b with W of shape [out, in] (torch.nn.Linear layout)."""

    name = "graph.linear"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    assembly_format = "$input `,` $weight (`,` $bias^)? " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        operands = [self.input, self.weight] + ([self.bias] if self.bias else [])
        elem = _require_same_elem(self, operands)
        return [TensorType(elem, linear_shape(self, self.input, self.weight, self.bias))]


def linear_shape(op: GraphOp, input: SSAValue, weight: SSAValue, bias: SSAValue | None) -> Shape:
    """The result shape of x @ W^T (+ b) with W of shape [out, in] (linear, linear_integer)."""
    x = shape_of(input)
    w = _require_rank(op, weight, "the weight [out, in]", [2])
    if not x:
        raise VerifyException("the input must have rank >= 1")
    if DYNAMIC not in (x[-1], w[1]) and x[-1] != w[1]:
        raise VerifyException(
            f"input features {x[-1]} (shape {format_shape(x)}) do not match "
            f"the weight's in-features {w[1]} (weight shape {format_shape(w)}, expected [out, in])"
        )
    if bias is not None and shape_of(bias) != (w[0],):
        raise VerifyException(
            f"bias must have shape {w[0]}, got {format_shape(shape_of(bias))}"
        )
    return (*x[:-1], w[0])


# --------------------------------------------------------------------------
# Convolution, pooling, normalization (CNN)
# --------------------------------------------------------------------------


def _window_out(op_name: str, size: int, kernel: int, stride: int, pad_lo: int, pad_hi: int, dilation: int, ceil_mode: bool = False) -> int:
    if size == DYNAMIC:
        return DYNAMIC
    span = dilation * (kernel - 1) + 1
    padded = size + pad_lo + pad_hi
    if padded < span:
        raise VerifyException(
            f"the window (kernel {kernel}, dilation {dilation}) is larger than the "
            f"padded input ({size} + padding {pad_lo}+{pad_hi})"
        )
    if ceil_mode:
        out = -(-(padded - span) // stride) + 1
        # the last window must start inside the input or left padding (PyTorch rule)
        if (out - 1) * stride >= size + pad_lo:
            out -= 1
        return out
    return (padded - span) // stride + 1


class WindowedOp(TensorResultOp, ABC):
    """Shared attributes of conv and pooling: 2-D stride, dilation and padding
    given as [top, left, bottom, right]."""

    stride = prop_def(DenseArrayBase, default_value=i64_array([1, 1]))
    padding = prop_def(DenseArrayBase, default_value=i64_array([0, 0, 0, 0]))
    dilation = prop_def(DenseArrayBase, default_value=i64_array([1, 1]))

    def _check_window_attrs(self) -> tuple[Shape, Shape, Shape]:
        stride, padding, dilation = i64_values(self.stride), i64_values(self.padding), i64_values(self.dilation)
        if len(stride) != 2 or any(s < 1 for s in stride):
            raise VerifyException(f"stride must be 2 positive integers, got {list(stride)}")
        if len(dilation) != 2 or any(d < 1 for d in dilation):
            raise VerifyException(f"dilation must be 2 positive integers, got {list(dilation)}")
        if len(padding) != 4 or any(p < 0 for p in padding):
            raise VerifyException(
                f"padding must be 4 non-negative integers [top, left, bottom, right], "
                f"got {list(padding)}"
            )
        return stride, padding, dilation

    def _spatial_out(self, hw: Shape, kernel: Shape, ceil_mode: bool = False) -> Shape:
        stride, padding, dilation = self._check_window_attrs()
        return tuple(
            _window_out(self.name, hw[i], kernel[i], stride[i], padding[i], padding[i + 2], dilation[i], ceil_mode)
            for i in range(2)
        )

    def _conv_shape(self, input: SSAValue, weight: SSAValue, bias: SSAValue | None, groups: int) -> Shape:
        """The NCHW result shape (conv2d, conv2d_integer)."""
        n, c, h, w = _require_rank(self, input, "the input (NCHW)", [4])
        o, ci, kh, kw = _require_rank(self, weight, "the weight (OIHW)", [4])
        if groups < 1:
            raise VerifyException(f"groups must be >= 1, got {groups}")
        if c % groups or o % groups:
            raise VerifyException(
                f"input channels ({c}) and output channels ({o}) must both be "
                f"divisible by groups ({groups})"
            )
        if ci * groups != c:
            raise VerifyException(
                f"the weight expects {ci} input channels per group, but the input has "
                f"{c} channels in {groups} group(s) ({c // groups} per group)"
            )
        if bias is not None and shape_of(bias) != (o,):
            raise VerifyException(
                f"bias must have shape {o} (one per output channel), got "
                f"{format_shape(shape_of(bias))}"
            )
        oh, ow = self._spatial_out((h, w), (kh, kw))
        return (n, o, oh, ow)


@irdl_op_definition
class Conv2dOp(WindowedOp):
    """2-D convolution (cross-correlation) of NCHW input with OIHW weights; `groups`
    splits channels (groups == C for depthwise)."""

    name = "graph.conv2d"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    groups = prop_def(IntegerAttr[I64], default_value=i64_attr(1))
    assembly_format = "$input `,` $weight (`,` $bias^)? " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        operands = [self.input, self.weight] + ([self.bias] if self.bias else [])
        elem = _require_same_elem(self, operands)
        return [TensorType(elem, self._conv_shape(self.input, self.weight, self.bias, self.groups.value.data))]


class Pool2dOp(WindowedOp, ABC):
    input = operand_def(TensorType)
    kernel = prop_def(DenseArrayBase)
    ceil_mode = prop_def(BoolAttr, default_value=bool_attr(False))
    assembly_format = "$input " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        n, c, h, w = _require_rank(self, self.input, "the input (NCHW)", [4])
        kernel = i64_values(self.kernel)
        if len(kernel) != 2 or any(k < 1 for k in kernel):
            raise VerifyException(f"kernel must be 2 positive integers, got {list(kernel)}")
        padding = i64_values(self.padding)
        if len(padding) == 4 and any(padding[i] > kernel[i % 2] // 2 for i in range(4)):
            raise VerifyException(
                f"padding {list(padding)} must be at most half the kernel {list(kernel)}"
            )
        oh, ow = self._spatial_out((h, w), kernel, bool(self.ceil_mode.value.data))
        return [TensorType(element_type_of(self.input), (n, c, oh, ow))]


@irdl_op_definition
class MaxPool2dOp(Pool2dOp):
    """Max over each window; padding never wins (acts as -inf)."""

    name = "graph.max_pool2d"


@irdl_op_definition
class AvgPool2dOp(Pool2dOp):
    """Mean over each window; `count_include_pad` chooses the divisor at the borders.
    With `ceil_mode`, the part of a window past the bottom/right padding never
    counts in the divisor (PyTorch's rule)."""

    name = "graph.avg_pool2d"
    count_include_pad = prop_def(BoolAttr, default_value=bool_attr(False))

    def infer_result_types(self) -> list[TensorType]:
        if i64_values(self.dilation) not in ((1, 1), ()):
            raise VerifyException("dilation is not supported for average pooling")
        return super().infer_result_types()


class GlobalPoolOp(TensorResultOp, ABC):
    input = operand_def(TensorType)
    assembly_format = "$input " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        shape = shape_of(self.input)
        if len(shape) < 3:
            raise VerifyException(
                f"the input must be N x C x spatial... (rank >= 3), got {format_shape(shape)}"
            )
        return [TensorType(element_type_of(self.input), (*shape[:2], *([1] * (len(shape) - 2))))]


@irdl_op_definition
class GlobalAvgPoolOp(GlobalPoolOp):
    """Mean over all spatial dimensions, kept as size-1 dims."""

    name = "graph.global_avg_pool"


@irdl_op_definition
class GlobalMaxPoolOp(GlobalPoolOp):
    """Max over all spatial dimensions, kept as size-1 dims."""

    name = "graph.global_max_pool"


@irdl_op_definition
class BatchNormOp(TensorResultOp):
    """Inference batch norm over dim 1: (x - mean) / sqrt(var + eps) * scale + bias."""

    name = "graph.batch_norm"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = operand_def(TensorType)
    mean = operand_def(TensorType)
    var = operand_def(TensorType)
    epsilon = prop_def(FloatAttr, default_value=f64_attr(1e-5))
    assembly_format = "$input `,` $scale `,` $bias `,` $mean `,` $var " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        params = [self.scale, self.bias, self.mean, self.var]
        elem = _require_same_elem(self, [self.input, *params])
        _require_float(self, self.input, "the input")
        x = shape_of(self.input)
        if len(x) < 2:
            raise VerifyException(f"the input must have rank >= 2 (N x C x ...), got {format_shape(x)}")
        for what, p in zip(("scale", "bias", "mean", "var"), params, strict=True):
            if shape_of(p) != (x[1],):
                raise VerifyException(
                    f"{what} must have shape {x[1]} (one per channel), got {format_shape(shape_of(p))}"
                )
        if self.epsilon.value.data < 0:
            raise VerifyException("epsilon must be >= 0")
        return [TensorType(elem, x)]


class NormOp(TensorResultOp, ABC):
    """Normalization over the trailing dimensions starting at `axis`."""

    axis = prop_def(IntegerAttr[I64], default_value=i64_attr(-1))
    epsilon = prop_def(FloatAttr, default_value=f64_attr(1e-5))

    def _check(self, x: SSAValue, params: Sequence[tuple[str, SSAValue]]) -> TensorType:
        elem = _require_same_elem(self, [x, *(p for _, p in params)])
        _require_float(self, x, "the input")
        shape = shape_of(x)
        axis = normalize_axis(self.name, self.axis.value.data, len(shape))
        normalized = shape[axis:]
        for what, p in params:
            ps = shape_of(p)
            try:
                ok = broadcast_shapes(self.name, ps, normalized) == normalized
            except VerifyException:
                ok = False
            if not ok:
                raise VerifyException(
                    f"{what} of shape {format_shape(ps)} does not broadcast to the "
                    f"normalized shape {format_shape(normalized)}"
                )
        if self.epsilon.value.data < 0:
            raise VerifyException("epsilon must be >= 0")
        return TensorType(elem, shape)


@irdl_op_definition
class LayerNormOp(NormOp):
    """(x - mean) / sqrt(var + eps) * scale (+ bias), statistics over dims >= axis."""

    name = "graph.layer_norm"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    assembly_format = "$input `,` $scale (`,` $bias^)? " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        params = [("scale", self.scale)] + ([("bias", self.bias)] if self.bias else [])
        return [self._check(self.input, params)]


@irdl_op_definition
class RmsNormOp(NormOp):
    """x / sqrt(mean(x^2) + eps) * scale, statistics over dims >= axis (Llama RMSNorm)."""

    name = "graph.rms_norm"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    assembly_format = "$input `,` $scale " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        return [self._check(self.input, [("scale", self.scale)])]


class AxisOp(TensorResultOp, ABC):
    input = operand_def(TensorType)
    axis = prop_def(IntegerAttr[I64], default_value=i64_attr(-1))
    assembly_format = "$input " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        _require_float(self, self.input, "the input")
        normalize_axis(self.name, self.axis.value.data, len(shape_of(self.input)))
        return [self.input.type]


@irdl_op_definition
class SoftmaxOp(AxisOp):
    """exp(x - max) / sum(exp(x - max)) along `axis`."""

    name = "graph.softmax"


@irdl_op_definition
class LogSoftmaxOp(AxisOp):
    """log(softmax(x)) along `axis`, computed stably."""

    name = "graph.log_softmax"


# --------------------------------------------------------------------------
# Transformer ops
# --------------------------------------------------------------------------


@irdl_op_definition
class AttentionOp(TensorResultOp):
    """Scaled dot-product attention with grouped-query heads.

    q: [B, Hq, Sq, D], k: [B, Hkv, Skv, D], v: [B, Hkv, Skv, Dv], Hq % Hkv == 0
    (query head h reads kv head h // (Hq / Hkv)). `scale` defaults to 1/sqrt(D).
    `causal`: query i sees keys j <= i + (Skv - Sq), i.e. the queries are the last
    Sq positions (a decode step with a KV cache). An optional `mask` broadcasting to
    [B, Hq, Sq, Skv] is boolean (true = attend) or additive (added to the scores).
    A query row whose keys are all masked out yields zeros (as PyTorch's SDPA math path).
    """

    name = "graph.attention"
    query = operand_def(TensorType)
    key = operand_def(TensorType)
    value = operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    causal = prop_def(BoolAttr, default_value=bool_attr(False))
    scale = opt_prop_def(FloatAttr)
    assembly_format = "$query `,` $key `,` $value (`,` $mask^)? " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        elem = _require_same_elem(self, [self.query, self.key, self.value])
        _require_float(self, self.query, "the query")
        b, hq, sq, d = _require_rank(self, self.query, "the query [B, Hq, Sq, D]", [4])
        bk, hkv, skv, dk = _require_rank(self, self.key, "the key [B, Hkv, Skv, D]", [4])
        bv, hv, sv, dv = _require_rank(self, self.value, "the value [B, Hkv, Skv, Dv]", [4])
        if (bk, hkv, skv) != (bv, hv, sv):
            raise VerifyException(
                f"key {format_shape(shape_of(self.key))} and value "
                f"{format_shape(shape_of(self.value))} must agree on batch, heads and length"
            )
        if b != bk:
            raise VerifyException(f"query batch {b} differs from key batch {bk}")
        if d != dk:
            raise VerifyException(f"query head dim {d} differs from key head dim {dk}")
        if hkv < 1 or hq % hkv:
            raise VerifyException(
                f"query heads ({hq}) must be a multiple of key/value heads ({hkv})"
            )
        if self.causal.value.data and sq > skv:
            raise VerifyException(
                f"causal attention needs at least as many keys ({skv}) as queries ({sq})"
            )
        if self.mask is not None:
            m_elem = element_type_of(self.mask)
            if not is_bool(m_elem) and m_elem != elem:
                raise VerifyException(
                    f"the mask must be i1 (true = attend) or additive with the "
                    f"query's element type, got {element_type_name(m_elem)}"
                )
            target = (b, hq, sq, skv)
            if broadcast_shapes(self.name, shape_of(self.mask), target) != target:
                raise VerifyException(
                    f"mask {format_shape(shape_of(self.mask))} does not broadcast to the "
                    f"scores' shape {format_shape(target)}"
                )
        return [TensorType(elem, (b, hq, sq, dv))]


@irdl_op_definition
class RotaryOp(TensorResultOp):
    """Rotary position embedding on the first R = cos.shape[-1] features of x.

    x: [..., S, D]; cos, sin broadcast to [..., S, R], R even, R <= D (partial
    rotary leaves the rest untouched). `interleaved = false` rotates halves
    (x[:R/2], x[R/2:]) as in Llama/GPT-NeoX; `true` rotates pairs (x[2i], x[2i+1])
    as in GPT-J. cos/sin hold the angle per feature (HF layout: halves repeated).
    """

    name = "graph.rotary"
    input = operand_def(TensorType)
    cos = operand_def(TensorType)
    sin = operand_def(TensorType)
    interleaved = prop_def(BoolAttr, default_value=bool_attr(False))
    assembly_format = "$input `,` $cos `,` $sin " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        elem = _require_same_elem(self, [self.input, self.cos, self.sin])
        _require_float(self, self.input, "the input")
        x = shape_of(self.input)
        if len(x) < 2:
            raise VerifyException(f"the input must be [..., S, D], got {format_shape(x)}")
        cos, sin = shape_of(self.cos), shape_of(self.sin)
        if cos != sin:
            raise VerifyException(f"cos {format_shape(cos)} and sin {format_shape(sin)} differ")
        if not cos:
            raise VerifyException("cos/sin must have rank >= 1")
        r = cos[-1]
        if r % 2 or r > x[-1]:
            raise VerifyException(
                f"the rotary dim (cos.shape[-1] = {r}) must be even and at most the "
                f"feature dim {x[-1]}"
            )
        target = (*x[:-1], r)
        if broadcast_shapes(self.name, cos, target) != target:
            raise VerifyException(
                f"cos/sin {format_shape(cos)} do not broadcast to {format_shape(target)}"
            )
        return [TensorType(elem, x)]


@irdl_op_definition
class GatherOp(TensorResultOp):
    """Take slices of `input` along `axis` at `indices` (embedding lookup = axis 0).
    Result shape: input[:axis] + indices + input[axis+1:]. Negative indices count
    from the end; out-of-range indices are an error at run time."""

    name = "graph.gather"
    input = operand_def(TensorType)
    indices = operand_def(TensorType)
    axis = prop_def(IntegerAttr[I64], default_value=i64_attr(0))
    assembly_format = "$input `,` $indices " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        x = shape_of(self.input)
        if not is_integer(element_type_of(self.indices)):
            raise VerifyException(
                f"indices must be integers, got {element_type_name(element_type_of(self.indices))}"
            )
        axis = normalize_axis(self.name, self.axis.value.data, len(x))
        if not x:
            raise VerifyException("cannot gather from a scalar")
        return [TensorType(element_type_of(self.input), (*x[:axis], *shape_of(self.indices), *x[axis + 1 :]))]


def _require_i32(value: SSAValue, what: str, rank: int) -> Shape:
    if element_type_name(element_type_of(value)) != "i32":
        raise VerifyException(
            f"{what} must be i32, got {element_type_name(element_type_of(value))}"
        )
    shape = shape_of(value)
    if len(shape) != rank:
        raise VerifyException(f"{what} must have rank {rank}, got shape {format_shape(shape)}")
    return shape


@irdl_op_definition
class KvCacheWriteOp(TensorResultOp):
    """Write rows into a paged KV pool at token slots (docs/paged-kv.md).

    cache: T[S, W] (one row per token slot: all KV heads of one token), rows: T[N, W],
    slots: i32[N]. The result is the cache with row slots[i] replaced by rows[i]; a slot
    outside [0, S) is an error at run time. The host computes the slots (vLLM's
    slot_mapping): block_table[t // BS] * BS + t % BS. When the cache is a function
    argument and the result is returned, the NPU lowering writes in place (the result's
    buffer is the argument's: a donated buffer).

        %k1 = graph.kv_cache_write %k0, %rows, %slots : (tensor<64x32xf32>, tensor<2x32xf32>, tensor<2xi32>) -> tensor<64x32xf32>
    """

    name = "graph.kv_cache_write"
    cache = operand_def(TensorType)
    rows = operand_def(TensorType)
    slots = operand_def(TensorType)
    assembly_format = "$cache `,` $rows `,` $slots " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        elem = _require_same_elem(self, [self.cache, self.rows])
        s, w = _require_rank(self, self.cache, "the cache [S, W]", [2])
        n, wr = _require_rank(self, self.rows, "the rows [N, W]", [2])
        (ns,) = _require_i32(self.slots, "the slots", 1)
        if wr != w:
            raise VerifyException(f"rows {format_shape((n, wr))} must have the cache's row width {w}")
        if ns != n:
            raise VerifyException(f"{n} rows but {ns} slots")
        return [TensorType(elem, (s, w))]


@irdl_op_definition
class PagedAttentionOp(TensorResultOp):
    """Attention of the last Sq tokens of each sequence over its paged KV cache
    (docs/paged-kv.md).

    q: T[B, Hq, Sq, D], k_cache: T[S, Hkv*D], v_cache: T[S, Hkv*Dv] (S = NB * BS: a pool of
    NB blocks of BS token rows), block_tables: i32[B, MB], context_lens: i32[B];
    `block_size` = BS (a power of two), `scale` defaults to 1/sqrt(D).
    Sequence b has n = context_lens[b] tokens (0 <= n <= MB * BS); token t lives in row
    block_tables[b, t // BS] * BS + t % BS of the pools; query row i is the token at
    position n - Sq + i (the queries are the last Sq tokens, already written to the cache)
    and attends to the tokens t <= n - Sq + i (causal); query head h reads KV head
    h // (Hq / Hkv). A query row without any key (n - Sq + i < 0) yields zeros. Decode is
    Sq = 1, a chunk of prefill Sq = C. Only the blocks below ceil(n / BS) are read.

        %o = graph.paged_attention %q, %kc, %vc, %bt, %n {block_size = 16 : i64} : (tensor<2x4x1x8xf32>, tensor<64x16xf32>, tensor<64x16xf32>, tensor<2x4xi32>, tensor<2xi32>) -> tensor<2x4x1x8xf32>
    """

    name = "graph.paged_attention"
    query = operand_def(TensorType)
    key_cache = operand_def(TensorType)
    value_cache = operand_def(TensorType)
    block_tables = operand_def(TensorType)
    context_lens = operand_def(TensorType)
    block_size = prop_def(IntegerAttr[I64])
    scale = opt_prop_def(FloatAttr)
    assembly_format = (
        "$query `,` $key_cache `,` $value_cache `,` $block_tables `,` $context_lens " + _FUNCTIONAL
    )

    @property
    def block_size_value(self) -> int:
        return int(self.block_size.value.data)

    def geometry(self) -> tuple[int, int, int, int, int, int, int]:
        """(B, Hq, Sq, D, Hkv, Dv, MB) after verification."""
        b, hq, sq, d = shape_of(self.query)
        wk = shape_of(self.key_cache)[1]
        hkv = wk // d
        dv = shape_of(self.value_cache)[1] // hkv
        return b, hq, sq, d, hkv, dv, shape_of(self.block_tables)[1]

    def infer_result_types(self) -> list[TensorType]:
        elem = _require_same_elem(self, [self.query, self.key_cache, self.value_cache])
        _require_float(self, self.query, "the query")
        b, hq, sq, d = _require_rank(self, self.query, "the query [B, Hq, Sq, D]", [4])
        s, wk = _require_rank(self, self.key_cache, "the key cache [S, Hkv*D]", [2])
        sv, wv = _require_rank(self, self.value_cache, "the value cache [S, Hkv*Dv]", [2])
        bt_b, _mb = _require_i32(self.block_tables, "the block tables [B, MB]", 2)
        (cl_b,) = _require_i32(self.context_lens, "the context lengths [B]", 1)
        bs = self.block_size_value
        if bs < 1 or bs & (bs - 1):
            raise VerifyException(f"block_size must be a power of two, got {bs}")
        if s != sv:
            raise VerifyException(f"the key cache has {s} rows but the value cache {sv}")
        if s % bs:
            raise VerifyException(f"the caches' {s} rows are not a whole number of {bs}-row blocks")
        if d < 1 or wk % d:
            raise VerifyException(
                f"the key cache width {wk} is not a multiple of the query head dim {d}"
            )
        hkv = wk // d
        if hq % hkv:
            raise VerifyException(
                f"query heads ({hq}) must be a multiple of key/value heads ({hkv} = {wk} / {d})"
            )
        if wv % hkv:
            raise VerifyException(
                f"the value cache width {wv} is not a multiple of the key/value heads ({hkv})"
            )
        if bt_b != b or cl_b != b:
            raise VerifyException(
                f"block tables ({bt_b} rows) and context lengths ({cl_b}) must have the "
                f"query's batch {b}"
            )
        return [TensorType(elem, (b, hq, sq, wv // hkv))]


PAGED_KV_OPS = (KvCacheWriteOp, PagedAttentionOp)


# --------------------------------------------------------------------------
# Structure
# --------------------------------------------------------------------------


@irdl_op_definition
class ReshapeOp(TensorResultOp):
    """Reinterpret the elements (row-major) in the result type's static shape."""

    name = "graph.reshape"
    input = operand_def(TensorType)
    assembly_format = "$input " + _FUNCTIONAL

    def __init__(self, input: SSAValue | Operation, shape: Sequence[int]):
        input = SSAValue.get(input)
        super().__init__(operands=[input], result_types=[TensorType(element_type_of(input), shape)])

    def infer_result_types(self) -> list[TensorType]:
        src, dst = shape_of(self.input), shape_of(self.output)
        if DYNAMIC in dst:
            raise VerifyException(f"the result shape must be static, got {format_shape(dst)}")
        if DYNAMIC not in src and math.prod(src) != math.prod(dst):
            raise VerifyException(
                f"cannot reshape {format_shape(src)} ({math.prod(src)} elements) to "
                f"{format_shape(dst)} ({math.prod(dst)} elements)"
            )
        return [TensorType(element_type_of(self.input), dst)]


@irdl_op_definition
class TransposeOp(TensorResultOp):
    """Permute dimensions: result dim i is input dim perm[i]."""

    name = "graph.transpose"
    input = operand_def(TensorType)
    perm = prop_def(DenseArrayBase)
    assembly_format = "$input " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        x = shape_of(self.input)
        perm = i64_values(self.perm)
        if sorted(perm) != list(range(len(x))):
            raise VerifyException(
                f"perm {list(perm)} is not a permutation of 0..{len(x) - 1} "
                f"(input rank {len(x)})"
            )
        return [TensorType(element_type_of(self.input), tuple(x[p] for p in perm))]


@irdl_op_definition
class ConcatOp(TensorResultOp):
    """Join tensors along `axis`; all other dimensions must agree."""

    name = "graph.concat"
    inputs = var_operand_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    assembly_format = "$inputs " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        if not self.inputs:
            raise VerifyException("needs at least one input")
        elem = _require_same_elem(self, list(self.inputs))
        shapes = [shape_of(v) for v in self.inputs]
        rank = len(shapes[0])
        axis = normalize_axis(self.name, self.axis.value.data, rank)
        for s in shapes:
            if len(s) != rank or any(s[i] != shapes[0][i] for i in range(rank) if i != axis):
                raise VerifyException(
                    "shapes " + ", ".join(format_shape(s) for s in shapes)
                    + f" must agree on every dimension except axis {axis}"
                )
        total = DYNAMIC if any(s[axis] == DYNAMIC for s in shapes) else sum(s[axis] for s in shapes)
        return [TensorType(elem, (*shapes[0][:axis], total, *shapes[0][axis + 1 :]))]


@irdl_op_definition
class SliceOp(TensorResultOp):
    """Strided slice with one (start, end, step) per dimension, already normalized:
    step != 0; for step > 0, 0 <= start <= end <= dim; for step < 0,
    -1 <= end <= start < dim where end = -1 means "past index 0"."""

    name = "graph.slice"
    input = operand_def(TensorType)
    starts = prop_def(DenseArrayBase)
    ends = prop_def(DenseArrayBase)
    steps = prop_def(DenseArrayBase)
    assembly_format = "$input " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        x = shape_of(self.input)
        starts, ends, steps = i64_values(self.starts), i64_values(self.ends), i64_values(self.steps)
        if not len(starts) == len(ends) == len(steps) == len(x):
            raise VerifyException(
                f"starts, ends and steps need one entry per dimension ({len(x)}), got "
                f"{len(starts)}, {len(ends)} and {len(steps)}"
            )
        out = []
        for i, (d, s, e, st) in enumerate(zip(x, starts, ends, steps, strict=True)):
            if st == 0:
                raise VerifyException(f"step of dimension {i} is 0")
            if st > 0 and not 0 <= s <= e <= d:
                raise VerifyException(
                    f"dimension {i} (size {d}): need 0 <= start ({s}) <= end ({e}) <= {d}"
                )
            if st < 0 and not -1 <= e <= s < d:
                raise VerifyException(
                    f"dimension {i} (size {d}): with a negative step need "
                    f"-1 <= end ({e}) <= start ({s}) < {d}"
                )
            out.append(max(0, -(-(e - s) // st)))
        return [TensorType(element_type_of(self.input), tuple(out))]


@irdl_op_definition
class BroadcastOp(TensorResultOp):
    """Broadcast to the result type's shape (numpy.broadcast_to rules)."""

    name = "graph.broadcast"
    input = operand_def(TensorType)
    assembly_format = "$input " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        src, dst = shape_of(self.input), shape_of(self.output)
        ok = len(dst) >= len(src) and all(
            s in (1, d) for s, d in zip(src[::-1], dst[::-1])
        )
        if not ok:
            raise VerifyException(f"cannot broadcast {format_shape(src)} to {format_shape(dst)}")
        return [TensorType(element_type_of(self.input), dst)]


@irdl_op_definition
class PadOp(TensorResultOp):
    """Constant padding: `pads` = [before_0, ..., before_n-1, after_0, ..., after_n-1]."""

    name = "graph.pad"
    input = operand_def(TensorType)
    pads = prop_def(DenseArrayBase)
    value = prop_def(FloatAttr, default_value=f64_attr(0.0))
    assembly_format = "$input " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        x = shape_of(self.input)
        pads = i64_values(self.pads)
        if len(pads) != 2 * len(x) or any(p < 0 for p in pads):
            raise VerifyException(
                f"pads must hold {2 * len(x)} non-negative integers (before..., after...), "
                f"got {list(pads)}"
            )
        n = len(x)
        return [TensorType(element_type_of(self.input), tuple(d + pads[i] + pads[i + n] for i, d in enumerate(x)))]


class ReduceOp(TensorResultOp, ABC):
    """Reduce over `axes` (all axes when empty), keeping them as size 1 if `keepdims`."""

    input = operand_def(TensorType)
    axes = prop_def(DenseArrayBase, default_value=i64_array([]))
    keepdims = prop_def(BoolAttr, default_value=bool_attr(True))
    assembly_format = "$input " + _FUNCTIONAL

    def reduced_axes(self) -> tuple[int, ...]:
        rank = len(shape_of(self.input))
        axes = i64_values(self.axes)
        if not axes:
            return tuple(range(rank))
        return tuple(sorted(normalize_axis(self.name, a, rank, "reduction axis") for a in axes))

    def result_element_type(self) -> Attribute:
        return element_type_of(self.input)

    def infer_result_types(self) -> list[TensorType]:
        x = shape_of(self.input)
        axes = self.reduced_axes()
        if len(set(axes)) != len(axes):
            raise VerifyException(f"axes {list(i64_values(self.axes))} repeat a dimension")
        if self.keepdims.value.data:
            shape = tuple(1 if i in axes else d for i, d in enumerate(x))
        else:
            shape = tuple(d for i, d in enumerate(x) if i not in axes)
        return [TensorType(self.result_element_type(), shape)]


def _reduce(op_name: str, doc: str) -> type[ReduceOp]:
    cls = type(
        "".join(p.capitalize() for p in op_name.split("_")) + "Op",
        (ReduceOp,),
        {"name": f"graph.{op_name}", "__doc__": doc},
    )
    return irdl_op_definition(cls)


ReduceSumOp = _reduce("reduce_sum", "sum over axes")
ReduceMeanOp = _reduce("reduce_mean", "mean over axes")
ReduceMaxOp = _reduce("reduce_max", "max over axes")
ReduceMinOp = _reduce("reduce_min", "min over axes")
ReduceProdOp = _reduce("reduce_prod", "product over axes")


class ArgReduceOp(ReduceOp, ABC):
    """Index of the extreme value along one axis (first occurrence), as i64."""

    def result_element_type(self) -> Attribute:
        return i64

    def infer_result_types(self) -> list[TensorType]:
        if len(i64_values(self.axes)) != 1:
            raise VerifyException(f"axes must name exactly one axis, got {list(i64_values(self.axes))}")
        return super().infer_result_types()


@irdl_op_definition
class ArgmaxOp(ArgReduceOp):
    """Index (i64) of the largest element along the one axis in `axes`; the first one
    when several are equal (numpy.argmax, ONNX ArgMax with select_last_index = 0)."""

    name = "graph.argmax"


@irdl_op_definition
class ArgminOp(ArgReduceOp):
    """Index (i64) of the smallest element along the one axis in `axes`; the first one
    when several are equal (numpy.argmin, ONNX ArgMin with select_last_index = 0)."""

    name = "graph.argmin"


# --------------------------------------------------------------------------
# Quantization: linear (scale / zero-point) quantized values and the integer
# kernels the NPU runs in int8. docs/quantization.md is the design; the numerics
# are in infer.dialects.linear_quant. Quantized values are plain i8 / ui8 / i32
# tensors: their scale and zero point are operands of the ops that convert them,
# so every other op, pass and verifier works unchanged.
# --------------------------------------------------------------------------

_QUANTIZED_TYPES = ("i8", "ui8")


def _elem_name(value: SSAValue) -> str:
    return element_type_name(element_type_of(value))


def _require_elem(value: SSAValue, what: str, allowed: Sequence[str]) -> str:
    name = _elem_name(value)
    if name not in allowed:
        raise VerifyException(f"{what} must be {' or '.join(allowed)}, got {name}")
    return name


def _quant_params(
    op: GraphOp, value: SSAValue, scale: SSAValue, zero_point: SSAValue | None,
    axis: IntegerAttr | None, what: str = "scale",
) -> None:
    """A float32 scale (and zero point of the same shape) per tensor (one element, no
    `axis`) or per axis (1-D, one value per slice of `value` along `axis`)."""
    _require_elem(scale, f"the {what}", ["f32"])
    s, x = shape_of(scale), shape_of(value)
    if axis is None:
        if len(s) > 1 or math.prod(s) != 1:
            raise VerifyException(
                f"a per-tensor {what} has one element (shape [] or [1]), got {format_shape(s)} "
                f"(give `axis` for one {what} per slice)"
            )
    else:
        a = normalize_axis(op.name, axis.value.data, len(x))
        if len(s) != 1 or (x[a] != DYNAMIC and s[0] != x[a]):
            raise VerifyException(
                f"a per-axis {what} along axis {a} of a {format_shape(x)} operand has shape {x[a]}, "
                f"got {format_shape(s)}"
            )
    if zero_point is not None and shape_of(zero_point) != s:
        raise VerifyException(
            f"the zero point has shape {format_shape(shape_of(zero_point))} but the {what} has {format_shape(s)}"
        )


def _require_zero_point_in_range(attr: IntegerAttr, value: SSAValue, what: str) -> None:
    lo, hi = (-128, 127) if _elem_name(value) == "i8" else (0, 255)
    zp = attr.value.data
    if not lo <= zp <= hi:
        raise VerifyException(f"{what} {zp} is outside the range of {_elem_name(value)} [{lo}, {hi}]")


@irdl_op_definition
class QuantizeLinearOp(TensorResultOp):
    """ONNX QuantizeLinear: `y = saturate(round(x / scale) + zero_point)`.

    x is a float tensor (computed in f32); y is i8 or ui8 (the result type; the
    zero point, when given, has that element type, else it is 0). Rounding is to
    nearest with ties to even, `x / scale` a float32 division as onnxruntime
    computes it, saturation to the result type's range; NaN gives the zero point.
    `scale` is f32: one element (per tensor) or, with `axis`, one per slice of x
    along `axis` (per channel), with a zero point of the same shape.

        %q = graph.quantize_linear %x, %s, %zp : (tensor<1x64xf32>, tensor<f32>, tensor<i8>) -> tensor<1x64xi8>
        %wq = graph.quantize_linear %w, %ws {axis = 0 : i64} : (tensor<16x64xf32>, tensor<16xf32>) -> tensor<16x64xi8>

    This is the reference for imported models. Passes that produce code for the
    NPU use `graph.requantize` instead, which multiplies by a float32 multiplier
    (1 / scale) as the NPU's `requant` does (docs/quantization.md)."""

    name = "graph.quantize_linear"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    zero_point = opt_operand_def(TensorType)
    axis = opt_prop_def(IntegerAttr[I64])
    assembly_format = "$input `,` $scale (`,` $zero_point^)? " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        _require_float(self, self.input, "the input")
        elem = _require_elem(self.output, "the result", _QUANTIZED_TYPES)
        _quant_params(self, self.input, self.scale, self.zero_point, self.axis)
        if self.zero_point is not None and _elem_name(self.zero_point) != elem:
            raise VerifyException(
                f"the zero point is {_elem_name(self.zero_point)} but the result is {elem} (they must agree)"
            )
        return [TensorType(element_type_of(self.output), shape_of(self.input))]


@irdl_op_definition
class DequantizeLinearOp(TensorResultOp):
    """ONNX DequantizeLinear: `y = float32(x - zero_point) * scale`.

    x is i8, ui8 or i32 (an int32 accumulator or bias, whose zero point is 0); y is
    f32. The difference is exact, its conversion to f32 rounds to nearest even
    (only int32 values beyond 2^24 round), the product rounds once. `scale` and
    the optional zero point (x's element type) are per tensor or, with `axis`,
    per slice of x along `axis`.

        %x = graph.dequantize_linear %q, %s, %zp : (tensor<1x64xi8>, tensor<f32>, tensor<i8>) -> tensor<1x64xf32>
        %y = graph.dequantize_linear %acc, %s {axis = 1 : i64} : (tensor<1x16x8x8xi32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>

    Of a weight, it states that the weight is stored quantized: constant folding
    keeps it, and the quantization passes read the integers and the scales."""

    name = "graph.dequantize_linear"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    zero_point = opt_operand_def(TensorType)
    axis = opt_prop_def(IntegerAttr[I64])
    assembly_format = "$input `,` $scale (`,` $zero_point^)? " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        elem = _require_elem(self.input, "the input", (*_QUANTIZED_TYPES, "i32"))
        _quant_params(self, self.input, self.scale, self.zero_point, self.axis)
        if self.zero_point is not None and _elem_name(self.zero_point) != elem:
            raise VerifyException(
                f"the zero point is {_elem_name(self.zero_point)} but the input is {elem} (they must agree)"
            )
        _require_elem(self.output, "the result", ["f32"])
        return [TensorType(element_type_of(self.output), shape_of(self.input))]


@irdl_op_definition
class RequantizeOp(TensorResultOp):
    """The NPU's `requant`: `y = saturate(round(float32(x) * multiplier) + zero_point)`.

    x is an i32 accumulator (or a float tensor); y is i8 or ui8. The conversion of
    x to f32 and the product each round to nearest even in float32, the product is
    rounded to an integer with ties to even, the zero point (a property, default 0)
    is added and the sum saturates to y's range; NaN gives the zero point.
    `multiplier` is f32, per tensor or, with `axis`, per slice of x along `axis`
    (per output channel). For an integer kernel, multiplier = input scale * weight
    scale / output scale; for a float tensor, multiplier = 1 / scale.

        %y = graph.requantize %acc, %m {axis = 1 : i64} : (tensor<1x16x8x8xi32>, tensor<16xf32>) -> tensor<1x16x8x8xi8>
        %q = graph.requantize %x, %inv_s : (tensor<1x64xf32>, tensor<f32>) -> tensor<1x64xi8>

    The NPU runs it as one `vec.requant` (per-column fp32 scales, int8 result,
    zero point 0); a nonzero zero point is one more integer add before the
    saturation."""

    name = "graph.requantize"
    input = operand_def(TensorType)
    multiplier = operand_def(TensorType)
    axis = opt_prop_def(IntegerAttr[I64])
    zero_point = prop_def(IntegerAttr[I64], default_value=i64_attr(0))
    assembly_format = "$input `,` $multiplier " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        if not is_float(element_type_of(self.input)):
            _require_elem(self.input, "the input", ["i32", "f32", "f16", "bf16"])
        _require_elem(self.output, "the result", _QUANTIZED_TYPES)
        _quant_params(self, self.input, self.multiplier, None, self.axis, "multiplier")
        _require_zero_point_in_range(self.zero_point, self.output, "the zero point")
        return [TensorType(element_type_of(self.output), shape_of(self.input))]


class IntegerKernelOp(TensorResultOp, ABC):
    """Integer-domain compute: i8 / ui8 operands, each with a per-tensor zero point
    (an i64 property, default 0), exact products accumulated and saturated to an
    i32 result (plus an optional i32 bias, per output channel, whose scale is the
    input scale times the weight scale). Computes what the NPU's matrix unit does
    in int8; the result is requantized (`graph.requantize`) or dequantized
    (`graph.dequantize_linear`) by the kernel's epilogue."""

    def _check_operand(self, value: SSAValue, what: str, zero_point: IntegerAttr, zp_name: str) -> None:
        _require_elem(value, what, _QUANTIZED_TYPES)
        _require_zero_point_in_range(zero_point, value, zp_name)

    def _check_bias(self, bias: SSAValue | None) -> None:
        if bias is not None:
            _require_elem(bias, "the bias", ["i32"])


@irdl_op_definition
class Conv2dIntegerOp(WindowedOp, IntegerKernelOp):
    """Integer 2-D convolution (ONNX ConvInteger plus an int32 bias):
    `y = sum (x - input_zero_point) * (w - weight_zero_point) + bias`, i32.

    Shapes and attributes as `graph.conv2d` (NCHW input, OIHW weight, `groups`);
    padded positions hold the input's zero point, so they contribute nothing.

        %acc = graph.conv2d_integer %xq, %wq, %b {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x8x16x16xi8>, tensor<16x8x3x3xi8>, tensor<16xi32>) -> tensor<1x16x16x16xi32>"""

    name = "graph.conv2d_integer"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    groups = prop_def(IntegerAttr[I64], default_value=i64_attr(1))
    input_zero_point = prop_def(IntegerAttr[I64], default_value=i64_attr(0))
    weight_zero_point = prop_def(IntegerAttr[I64], default_value=i64_attr(0))
    assembly_format = "$input `,` $weight (`,` $bias^)? " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        self._check_operand(self.input, "the input", self.input_zero_point, "input_zero_point")
        self._check_operand(self.weight, "the weight", self.weight_zero_point, "weight_zero_point")
        self._check_bias(self.bias)
        return [TensorType(i32, self._conv_shape(self.input, self.weight, self.bias, self.groups.value.data))]


@irdl_op_definition
class LinearIntegerOp(IntegerKernelOp):
    """Integer `graph.linear`: `y = (x - input_zero_point) @ (W - weight_zero_point)^T + bias`,
    i32, with W of shape [out, in] and an optional i32 bias [out].

        %acc = graph.linear_integer %xq, %wq, %b : (tensor<4x64xi8>, tensor<10x64xi8>, tensor<10xi32>) -> tensor<4x10xi32>"""

    name = "graph.linear_integer"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    input_zero_point = prop_def(IntegerAttr[I64], default_value=i64_attr(0))
    weight_zero_point = prop_def(IntegerAttr[I64], default_value=i64_attr(0))
    assembly_format = "$input `,` $weight (`,` $bias^)? " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        self._check_operand(self.input, "the input", self.input_zero_point, "input_zero_point")
        self._check_operand(self.weight, "the weight", self.weight_zero_point, "weight_zero_point")
        self._check_bias(self.bias)
        return [TensorType(i32, linear_shape(self, self.input, self.weight, self.bias))]


@irdl_op_definition
class MatmulIntegerOp(IntegerKernelOp):
    """Integer `graph.matmul` (ONNX MatMulInteger):
    `y = (lhs - lhs_zero_point) @ (rhs - rhs_zero_point)`, i32, numpy.matmul semantics
    with optional transposes of the last two dimensions (as `graph.matmul`).

        %acc = graph.matmul_integer %aq, %bq {rhs_zero_point = 3 : i64} : (tensor<2x4x8xui8>, tensor<8x16xi8>) -> tensor<2x4x16xi32>"""

    name = "graph.matmul_integer"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    transpose_a = prop_def(BoolAttr, default_value=bool_attr(False))
    transpose_b = prop_def(BoolAttr, default_value=bool_attr(False))
    lhs_zero_point = prop_def(IntegerAttr[I64], default_value=i64_attr(0))
    rhs_zero_point = prop_def(IntegerAttr[I64], default_value=i64_attr(0))
    assembly_format = "$lhs `,` $rhs " + _FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        self._check_operand(self.lhs, "the lhs", self.lhs_zero_point, "lhs_zero_point")
        self._check_operand(self.rhs, "the rhs", self.rhs_zero_point, "rhs_zero_point")
        shape = matmul_shape(
            self.name, shape_of(self.lhs), shape_of(self.rhs),
            bool(self.transpose_a.value.data), bool(self.transpose_b.value.data),
        )
        return [TensorType(i32, shape)]


QUANTIZATION_OPS: tuple[type[GraphOp], ...] = (QuantizeLinearOp, DequantizeLinearOp, RequantizeOp)
"""Ops converting between float and quantized values (elementwise)."""

INTEGER_KERNEL_OPS: tuple[type[GraphOp], ...] = (Conv2dIntegerOp, LinearIntegerOp, MatmulIntegerOp)
"""Integer-domain compute ops (kernel anchors, like their float counterparts)."""


# --------------------------------------------------------------------------
# Fusion groups
# --------------------------------------------------------------------------

ELEMENTWISE_OPS: tuple[type[GraphOp], ...] = (UnaryOp, BinaryOp, WhereOp, CastOp, *QUANTIZATION_OPS)
"""Op classes (and their subclasses) a kernel may hold besides its anchor."""

KERNEL_ANCHORS: dict[str, tuple[type[GraphOp], ...]] = {
    "matmul": (MatmulOp, LinearOp, MatmulIntegerOp, LinearIntegerOp),
    "conv": (Conv2dOp, Conv2dIntegerOp),
    "norm": (LayerNormOp, RmsNormOp),
    "softmax": (SoftmaxOp, LogSoftmaxOp),
    "attention": (AttentionOp,),
    "pool": (MaxPool2dOp, AvgPool2dOp, GlobalAvgPoolOp, GlobalMaxPoolOp),
    "elementwise": (),
}
"""Kernel kind -> the op classes that may anchor a kernel of that kind."""

ANCHOR_OPS: tuple[type[GraphOp], ...] = tuple(c for cs in KERNEL_ANCHORS.values() for c in cs)


def kernel_kind_of(op: Operation) -> str | None:
    """The kernel kind `op` anchors, or None if it is not an anchor op."""
    for kind, classes in KERNEL_ANCHORS.items():
        if isinstance(op, classes):
            return kind
    return None


@irdl_op_definition
class KernelOp(GraphOp):
    """A fusion group (like an IREE dispatch region): the region computes the
    results from the operands and nothing else.

        %r = graph.kernel "matmul" (%x, %w, %b) : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32> {
        ^bb0(%a: tensor<4x8xf32>, %wa: tensor<16x8xf32>, %ba: tensor<16xf32>):
          %y = graph.linear %a, %wa, %ba : (...) -> tensor<4x16xf32>
          %z = graph.gelu %y : (tensor<4x16xf32>) -> tensor<4x16xf32>
          graph.yield %z : tensor<4x16xf32>
        }

    The region is isolated from above and has one block whose arguments are the
    operands (same types, same order); `graph.yield` returns the results. `kind`
    names the kernel class the lowering uses (see `KERNEL_ANCHORS`): every kind
    but "elementwise" holds exactly one anchor op of that kind; all other ops
    are elementwise (`ELEMENTWISE_OPS`) or `graph.constant`, except a "matmul"
    kernel's prologue: a `graph.rms_norm` first in the region whose only use is
    the anchor's activation operand (graph-fuse-norm-prologue; the lowering
    normalises the rows on chip where the product's activations are loaded).
    """

    name = "graph.kernel"
    kind = prop_def(StringAttr)
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), RecursiveMemoryEffect(), RecursivelySpeculatable())
    assembly_format = "$kind ` ` `(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs) $body"

    def __init__(
        self,
        kind: str,
        inputs: Sequence[SSAValue | Operation],
        result_types: Sequence[Attribute],
        body: Region,
    ):
        super().__init__(
            operands=[[SSAValue.get(v) for v in inputs]],
            result_types=[list(result_types)],
            properties={"kind": StringAttr(kind)},
            regions=[body],
        )

    @property
    def yield_op(self) -> YieldOp | None:
        block = self.body.block
        last = block.last_op
        return last if isinstance(last, YieldOp) else None

    def anchor(self) -> Operation | None:
        """The kernel's anchor op (None for an "elementwise" kernel)."""
        classes = KERNEL_ANCHORS.get(self.kind.data) or ANCHOR_OPS
        return next((o for o in self.body.block.ops if isinstance(o, classes)), None)

    def prologue(self) -> list[Operation]:
        """The ops before the anchor that feed it (a "matmul" kernel's rms_norm prologue)."""
        anchor = self.anchor()
        ops: list[Operation] = []
        for o in self.body.block.ops:
            if o is anchor:
                return ops
            if not isinstance(o, ConstantOp):
                ops.append(o)
        return []

    def infer_result_types(self) -> list[TensorType]:
        yield_op = self.yield_op
        if yield_op is None:
            raise VerifyException("the body must end with graph.yield")
        return [v.type for v in yield_op.values]

    def verify_(self) -> None:
        """`kind` is a known kernel class, there is at least one result, the block's
        arguments have the operands' types, the body ends with `graph.yield` returning the
        result types, and it holds one anchor of `kind` (none for "elementwise") besides
        elementwise ops and constants; then the checks of every graph op."""
        kind = self.kind.data
        if kind not in KERNEL_ANCHORS:
            raise VerifyException(
                f"unknown kernel kind \"{kind}\" (expected one of "
                + ", ".join(f'"{k}"' for k in KERNEL_ANCHORS) + ")"
            )
        if not self.outputs:
            raise VerifyException("a kernel must have at least one result")
        block = self.body.block
        arg_types = [a.type for a in block.args]
        operand_types = [v.type for v in self.inputs]
        if arg_types != operand_types:
            raise VerifyException(
                "the body's arguments must match the operands: got ("
                + ", ".join(str(t) for t in arg_types) + "), operands are ("
                + ", ".join(str(t) for t in operand_types) + ")"
            )
        yield_op = self.yield_op
        if yield_op is None:
            raise VerifyException("the body must end with graph.yield")
        yielded = [v.type for v in yield_op.values]
        results = [r.type for r in self.outputs]
        if yielded != results:
            raise VerifyException(
                "graph.yield returns (" + ", ".join(str(t) for t in yielded)
                + ") but the kernel's results are (" + ", ".join(str(t) for t in results) + ")"
            )
        anchors = [o for o in block.ops if isinstance(o, ANCHOR_OPS)]
        expected = KERNEL_ANCHORS[kind]
        if kind == "matmul" and len(anchors) == 2 and isinstance(anchors[0], RmsNormOp):
            norm, anchor = anchors
            uses = [u for u in norm.results[0].uses]
            if (not isinstance(anchor, expected) or len(uses) != 1 or uses[0].operation is not anchor
                    or uses[0].index != 0):
                raise VerifyException(
                    "a \"matmul\" kernel's rms_norm prologue must feed only the anchor's first operand"
                )
            anchors = [anchor]
        if kind == "elementwise":
            if anchors:
                raise VerifyException(
                    f"an \"elementwise\" kernel holds no anchor op, found {anchors[0].name}"
                )
        elif len(anchors) != 1 or not isinstance(anchors[0], expected):
            raise VerifyException(
                f"a \"{kind}\" kernel must hold exactly one anchor op ("
                + " or ".join(c.name for c in expected) + "), found "
                + (", ".join(o.name for o in anchors) or "none")
            )
        for o in block.ops:
            if o is yield_op or isinstance(o, ANCHOR_OPS + ELEMENTWISE_OPS + (ConstantOp,)):
                continue
            raise VerifyException(
                f"{o.name} cannot be part of a kernel (only its anchor, elementwise ops "
                "and graph.constant)"
            )
        super().verify_()


@irdl_op_definition
class YieldOp(GraphOp):
    """Terminator of `graph.kernel`: its operands are the kernel's results."""

    name = "graph.yield"
    values = var_operand_def(TensorType)
    traits = traits_def(IsTerminator(), HasParent(KernelOp), Pure())
    assembly_format = "attr-dict ($values^ `:` type($values))?"

    def __init__(self, *values: SSAValue | Operation):
        super().__init__(operands=[[SSAValue.get(v) for v in values]])

    def infer_result_types(self) -> list[TensorType]:
        return []


class GraphCanonicalizationPatterns(HasCanonicalizationPatternsTrait):
    """Lets upstream `canonicalize` use the graph patterns (infer.dialects.graph_canonicalization)."""

    def get_patterns(self, op):
        from infer.dialects.graph_canonicalization import patterns_for

        return patterns_for(op)

    @classmethod
    def get_canonicalization_patterns(cls):
        return ()


Graph = Dialect(
    "graph",
    [
        ConstantOp, WeightOp, DequantizeBlocksOp,
        NegOp, AbsOp, SignOp, ExpOp, LogOp, SqrtOp, RsqrtOp, ReciprocalOp, TanhOp, SigmoidOp,
        ErfOp, SinOp, CosOp, FloorOp, CeilOp, RoundOp, ReluOp, SiluOp, SoftplusOp, NotOp,
        BitwiseNotOp, GeluOp, ClipOp, LeakyReluOp, EluOp, HardSigmoidOp,
        AddOp, SubOp, MulOp, DivOp, PowOp, MaximumOp, MinimumOp, ModOp,
        EqualOp, LessOp, LessEqualOp, GreaterOp, GreaterEqualOp, AndOp, OrOp, XorOp,
        BitwiseAndOp, BitwiseOrOp, BitwiseXorOp, ShiftLeftOp, ShiftRightOp,
        WhereOp, CastOp,
        MatmulOp, LinearOp,
        Conv2dOp, MaxPool2dOp, AvgPool2dOp, GlobalAvgPoolOp, GlobalMaxPoolOp,
        BatchNormOp, LayerNormOp, RmsNormOp, SoftmaxOp, LogSoftmaxOp,
        AttentionOp, RotaryOp, GatherOp, *PAGED_KV_OPS,
        ReshapeOp, TransposeOp, ConcatOp, SliceOp, BroadcastOp, PadOp,
        ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceMinOp, ReduceProdOp, ArgmaxOp, ArgminOp,
        KernelOp, YieldOp,
        *QUANTIZATION_OPS, *INTEGER_KERNEL_OPS,
    ],
    [],
)
"""The graph dialect."""

for _op in Graph.operations:
    _op.traits.add_trait(GraphCanonicalizationPatterns())

__all__ = ["Graph", "GraphOp", "ArrayAttr"]
