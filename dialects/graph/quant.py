"""Quantization graph ops: linear (scale / zero-point) quantize, dequantize and requantize,
and the integer kernels the NPU runs in int8 (docs/quantization.md; numerics in
`infer.dialects.linear_quant`)."""

from __future__ import annotations

import math
from abc import ABC
from collections.abc import Sequence

from xdsl.dialects.builtin import I64, BoolAttr, IntegerAttr, TensorType, i32
from xdsl.ir import SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, opt_prop_def, prop_def
from xdsl.utils.exceptions import VerifyException

from infer.dialects.dtypes import element_type_name, element_type_of, format_shape, is_float, shape_of
from infer.dialects.graph.base import (
    bool_attr,
    DYNAMIC,
    FUNCTIONAL,
    GraphOp,
    i64_attr,
    normalize_axis,
    require_float,
    TensorResultOp,
)
from infer.dialects.graph.nn import linear_shape, matmul_shape, WindowedOp


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
    assembly_format = "$input `,` $scale (`,` $zero_point^)? " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        require_float(self, self.input, "the input")
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
    assembly_format = "$input `,` $scale (`,` $zero_point^)? " + FUNCTIONAL

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
    assembly_format = "$input `,` $multiplier " + FUNCTIONAL

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
    assembly_format = "$input `,` $weight (`,` $bias^)? " + FUNCTIONAL

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
    assembly_format = "$input `,` $weight (`,` $bias^)? " + FUNCTIONAL

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
    assembly_format = "$lhs `,` $rhs " + FUNCTIONAL

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
