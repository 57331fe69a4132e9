"""ONNX handlers: the QOperator form of quantized models (what onnxruntime's `quantize_static(...,
quant_format=QuantFormat.QOperator)` and `quantize_dynamic` write), expressed in the graph
dialect's quantized IR rather than as ops of their own.

* QLinearConv, QLinearMatMul and com.microsoft QGemm (static quantization) become the QDQ form
  of the same layer: `dequantize_linear` of each operand (the int32 bias with scale
  x_scale * w_scale), the float conv2d / matmul / linear, `quantize_linear` of the result.
  `graph-quantize-kernels` (`--precision int8`) turns that group back into one integer kernel
  with a requantizing epilogue, which computes what onnxruntime's kernels compute: int32
  accumulation, then acc * (x_scale * w_scale / y_scale), rounded half to even, plus y's zero
  point, saturated.
* com.microsoft QLinearAdd, QLinearMul and QLinearGlobalAveragePool (what the quantizer writes
  for residual adds, products and global pooling) likewise: dequantize, the float op,
  quantize. They have no integer kernel: on the NPU the op runs in float between the
  quantize/dequantize boundaries, within one output step of onnxruntime's arithmetic.
* MatMulInteger and ConvInteger with compile-time zero points become `graph.matmul_integer` /
  `graph.conv2d_integer`.
* DynamicQuantizeLinear (scale and zero point computed at run time, uint8) becomes the
  elementwise ops of its specification, and a MatMulInteger / ConvInteger whose zero point it
  computed becomes a float matmul / conv2d of the centred integers (x - zero point) and
  (w - zero point), cast to int32: every product and partial sum is an integer below 2^24, so
  f32 (and bf16 products with f32 accumulation on the NPU: |x - zp| <= 255 is exact in bf16)
  computes it exactly; a layer whose sums could exceed 2^24 is refused.

Scales must be float32 compile-time constants, finite and positive (one located error each);
per-row zero points of MatMulInteger's A are not supported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, TensorType, UnitAttr, f64, i64
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import from_numpy_dtype, numpy_dtype_of, shape_of
from infer.frontend.onnx_nn import CONV_ATTRS, convolution
from infer.frontend.onnx_ops import NodeProblem, attribute, handler, input_name
from infer.frontend.onnx_quant import quant_parameters

if TYPE_CHECKING:
    from infer.frontend.onnx_import import Importer

_QUANTIZED = (np.dtype(np.int8), np.dtype(np.uint8))
DYNAMIC_QUANTIZATION_ATTR = "infer.dynamic_quantization"
"""Module attribute: the model quantizes at run time (DynamicQuantizeLinear), so it is an int8
model as imported (`--precision int8` needs no calibration); its integer matmuls run as exact
float matmuls of integers, in bf16 on the NPU."""
EXACT_SUM_LIMIT = 1 << 24
"""Integers up to this magnitude are exact in float32: the bound of the float form of an
integer matmul / conv whose zero point is computed at run time."""


class _Operand:
    """One quantized operand of a QOperator node: its value and its checked parameters."""

    def __init__(self, imp: Importer, node: onnx.NodeProto, index: int, scale_index: int, zp_index: int,
                 what: str, per_axis: int):
        name = node.input[index]
        self.value = imp.value(name)
        self.dtype = imp.dtype(name)
        if self.dtype not in _QUANTIZED:
            raise NodeProblem(f"{what} is {self.dtype}; int8 and uint8 only")
        rank = len(shape_of(self.value))
        self.scale, self.zero_point, self.axis = quant_parameters(
            imp, node, scale_index, zp_index, rank, (self.dtype,), per_axis, f"{what}'s ")
        self.scale_name = node.input[scale_index]
        self.zp_name = input_name(node, zp_index)

    def dequantized(self, imp: Importer) -> SSAValue:
        zp = None if self.zero_point is None else imp.materialise(self.zero_point, self.zp_name)
        props = {} if self.axis is None else {"axis": self.axis}
        return imp.b.op(g.DequantizeLinearOp, [self.value, imp.materialise(self.scale, self.scale_name), zp], **props)


def _bias(imp: Importer, node: onnx.NodeProto, index: int, x: _Operand, w: _Operand, channels: int) -> SSAValue | None:
    """The int32 bias at input `index`, dequantized with scale x_scale * w_scale (zero point 0),
    as onnxruntime adds it to the int32 accumulator."""
    name = input_name(node, index)
    if not name:
        return None
    if imp.dtype(name) != np.int32:
        raise NodeProblem(f"the bias is {imp.dtype(name)}; int32 only")
    bias = imp.value(name)
    if shape_of(bias) != (channels,):
        raise NodeProblem(f"the bias has shape {list(shape_of(bias))}; [{channels}] only")
    scale = (np.float32(x.scale.reshape(-1)[0]) * w.scale).astype(np.float32)
    props = {"axis": g.i64_attr(0)} if scale.size > 1 else {}
    return imp.b.op(g.DequantizeLinearOp, [bias, imp.materialise(scale, f"{name}_scale")], **props)


def _quantized_result(imp: Importer, node: onnx.NodeProto, y: SSAValue, scale_index: int, zp_index: int) -> SSAValue:
    """`quantize_linear` of the float result y with the node's (per tensor) output parameters."""
    scale, zero_point, axis = quant_parameters(imp, node, scale_index, zp_index, len(shape_of(y)), _QUANTIZED, 0, "y's ")
    if axis is not None:
        raise NodeProblem("y's scale must be per tensor")
    result = zero_point.dtype if zero_point is not None else np.dtype(np.uint8)
    zp = None if zero_point is None else imp.materialise(zero_point, node.input[zp_index])
    return imp.b.op(g.QuantizeLinearOp, [y, imp.materialise(scale, node.input[scale_index]), zp],
                    TensorType(from_numpy_dtype(result), shape_of(y)))


@handler("QLinearConv", attrs=CONV_ATTRS, fold=False)
def _qlinear_conv(imp: Importer, node: onnx.NodeProto):
    x = _Operand(imp, node, 0, 1, 2, "x", 1)
    if x.axis is not None:
        raise NodeProblem("x's scale must be per tensor")
    w = _Operand(imp, node, 3, 4, 5, "w", 0)  # per output channel: axis 0 of OIHW
    channels = shape_of(w.value)[0]
    bias = _bias(imp, node, 8, x, w, channels)
    y = convolution(imp, node, x.dequantized(imp), w.dequantized(imp), bias)
    return [_quantized_result(imp, node, y, 6, 7)]


@handler("QLinearMatMul", fold=False)
def _qlinear_matmul(imp: Importer, node: onnx.NodeProto):
    a = _Operand(imp, node, 0, 1, 2, "a", 0)
    if a.axis is not None:
        raise NodeProblem("a's scale must be per tensor")
    b = _Operand(imp, node, 3, 4, 5, "b", -1)  # per column: the last axis of b
    y = imp.b.op(g.MatmulOp, [a.dequantized(imp), b.dequantized(imp)])
    return [_quantized_result(imp, node, y, 6, 7)]


@handler("QGemm", attrs=("alpha", "transA", "transB"), fold=False, domain="com.microsoft")
def _qgemm(imp: Importer, node: onnx.NodeProto):
    """com.microsoft QGemm: Y = (A - a_zp) (B' - b_zp) + C in int32 (C with scale
    a_scale * b_scale), requantized with y's parameters, or dequantized when y_scale is
    absent. alpha = 1 and transA = 0 only (what onnxruntime's quantizer writes)."""
    if float(attribute(node, "alpha", 1.0)) != 1.0 or int(attribute(node, "transA", 0)):
        raise NodeProblem("alpha = 1 and transA = 0 only")
    transposed = bool(attribute(node, "transB", 0))
    a = _Operand(imp, node, 0, 1, 2, "a", 0)
    if a.axis is not None or len(shape_of(a.value)) != 2:
        raise NodeProblem("a must be a 2-D matrix with a per-tensor scale")
    if not imp.is_const(node.input[3]):
        raise NodeProblem("b must be an initializer (the layer's weight)")
    b = _Operand(imp, node, 3, 4, 5, "b", 0 if transposed else 1)  # per column of B'
    if not transposed:  # graph.linear takes the weight as [out, in]
        b.value = imp.materialise(np.ascontiguousarray(imp.consts[node.input[3]].T), node.input[3] + "_t")
        b.axis = None if b.axis is None else g.i64_attr(0)
    channels = shape_of(b.value)[0]
    bias = _bias(imp, node, 6, a, b, channels)
    y = imp.b.op(g.LinearOp, [a.dequantized(imp), b.dequantized(imp), bias])
    if not input_name(node, 7):
        return [y]
    return [_quantized_result(imp, node, y, 7, 8)]


def _per_tensor(imp: Importer, node: onnx.NodeProto, index: int, what: str) -> _Operand:
    operand = _Operand(imp, node, index, index + 1, index + 2, what, 0)
    if operand.axis is not None:
        raise NodeProblem(f"{what}'s scale must be per tensor")
    return operand


_QLINEAR_BINARY = {"QLinearAdd": g.AddOp, "QLinearMul": g.MulOp}


@handler(*_QLINEAR_BINARY, fold=False, domain="com.microsoft")
def _qlinear_binary(imp: Importer, node: onnx.NodeProto):
    """com.microsoft QLinearAdd / QLinearMul: C = quantize(dequantize(A) op dequantize(B)), both
    operands and C per tensor (inputs A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)."""
    a = _per_tensor(imp, node, 0, "A")
    b = _per_tensor(imp, node, 3, "B")
    y = imp.b.op(_QLINEAR_BINARY[node.op_type], [a.dequantized(imp), b.dequantized(imp)])
    return [_quantized_result(imp, node, y, 6, 7)]


@handler("QLinearGlobalAveragePool", attrs=("channels_last",), fold=False, domain="com.microsoft")
def _qlinear_global_average_pool(imp: Importer, node: onnx.NodeProto):
    """com.microsoft QLinearGlobalAveragePool over NCHW (channels_last = 0): inputs X, x_scale,
    x_zp, y_scale, y_zp."""
    if int(attribute(node, "channels_last", 0)):
        raise NodeProblem("channels_last = 1 is not supported (NCHW only)")
    x = _per_tensor(imp, node, 0, "X")
    y = imp.b.op(g.GlobalAvgPoolOp, [x.dequantized(imp)])
    return [_quantized_result(imp, node, y, 3, 4)]


# -- integer matmul / conv --------------------------------------------------------------------


def _zero_point(imp: Importer, node: onnx.NodeProto, index: int, dtype: np.dtype, what: str) -> int | SSAValue:
    """A per-tensor zero point: an int when known at import time, else its (run-time) value."""
    name = input_name(node, index)
    if not name:
        return 0
    if imp.dtype(name) != dtype:
        raise NodeProblem(f"{what}'s zero point is {imp.dtype(name)} but {what} is {dtype}")
    if not imp.is_const(name):
        if int(np.prod(imp.shape(name))) != 1:
            raise NodeProblem(f"{what}'s zero point must be per tensor")
        return imp.value(name)
    zp = np.asarray(imp.consts[name])
    if np.unique(zp).size != 1:
        raise NodeProblem(f"{what}'s zero point must be one value per tensor, got {zp.reshape(-1)[:8].tolist()}")
    return int(zp.reshape(-1)[0])


def _centred(imp: Importer, node: onnx.NodeProto, index: int, zp: int | SSAValue) -> tuple[SSAValue, int]:
    """(x - zp) as f32 and the largest |x - zp| it can hold."""
    name = node.input[index]
    if imp.is_const(name) and isinstance(zp, int):
        centred = imp.consts[name].astype(np.float32) - np.float32(zp)
        return imp.materialise(centred, name + "_centred"), int(np.abs(centred).max(initial=0))
    x = imp.b.cast(imp.value(name), np.float32)
    if isinstance(zp, int):
        if zp:
            x = imp.b.op(g.SubOp, [x, imp.b.scalar(float(zp), x)])
    else:
        x = imp.b.op(g.SubOp, [x, imp.b.reshape(imp.b.cast(zp, np.float32), ())])
    info = np.iinfo(imp.dtype(name))
    return x, int(info.max - info.min)


def _integer_operands(imp: Importer, node: onnx.NodeProto):
    a_dt, b_dt = imp.dtype(node.input[0]), imp.dtype(node.input[1])
    for what, dt in (("the first input", a_dt), ("the second input", b_dt)):
        if dt not in _QUANTIZED:
            raise NodeProblem(f"{what} is {dt}; int8 and uint8 only")
    return _zero_point(imp, node, 2, a_dt, "the first input"), _zero_point(imp, node, 3, b_dt, "the second input")


def _as_float_form(imp: Importer, node: onnx.NodeProto, a_zp, b_zp, depth: int, build) -> SSAValue:
    """The integer op as a float op of the centred operands, cast to int32 (exact: checked)."""
    a, a_max = _centred(imp, node, 0, a_zp)
    b, b_max = _centred(imp, node, 1, b_zp)
    if depth * a_max * b_max >= EXACT_SUM_LIMIT:
        raise NodeProblem(f"a run-time zero point with {depth} products per output: sums up to "
                          f"{depth * a_max * b_max} exceed 2^24, where the float form would round; supported: "
                          f"products per output x {a_max} x {b_max} below 2^24")
    y = build(a, b)
    return imp.b.cast(y, np.int32)


@handler("MatMulInteger", fold=False)
def _matmul_integer(imp: Importer, node: onnx.NodeProto):
    a_zp, b_zp = _integer_operands(imp, node)
    if isinstance(a_zp, int) and isinstance(b_zp, int):
        return [imp.b.op(g.MatmulIntegerOp, [imp.value(node.input[0]), imp.value(node.input[1])],
                         lhs_zero_point=IntegerAttr(a_zp, i64), rhs_zero_point=IntegerAttr(b_zp, i64))]
    depth = imp.shape(node.input[0])[-1]
    return [_as_float_form(imp, node, a_zp, b_zp, depth, lambda a, b: imp.b.op(g.MatmulOp, [a, b]))]


@handler("ConvInteger", attrs=CONV_ATTRS, fold=False)
def _conv_integer(imp: Importer, node: onnx.NodeProto):
    x_zp, w_zp = _integer_operands(imp, node)
    if isinstance(x_zp, int) and isinstance(w_zp, int):
        zps = {"input_zero_point": IntegerAttr(x_zp, i64), "weight_zero_point": IntegerAttr(w_zp, i64)}
        return [convolution(imp, node, imp.value(node.input[0]), imp.value(node.input[1]), None,
                            g.Conv2dIntegerOp, **zps)]
    depth = int(np.prod(imp.shape(node.input[1])[1:]))  # in channels per group x kernel
    # padded positions hold 0 = x's zero point centred: they contribute nothing, as ConvInteger's
    return [_as_float_form(imp, node, x_zp, w_zp, depth, lambda x, w: convolution(imp, node, x, w, None))]


# -- DynamicQuantizeLinear ------------------------------------------------------------------------


@handler("DynamicQuantizeLinear", fold=False)
def _dynamic_quantize_linear(imp: Importer, node: onnx.NodeProto):
    """uint8 quantization with run-time parameters, as onnxruntime computes it (the ONNX
    specification, plus scale 1 when x is all zeros, where the specification divides by 0):

        lo = min(min(x), 0), hi = max(max(x), 0)
        scale = (hi - lo) / 255  (1 if hi == lo)
        zero_point = rint(clip(0 - lo / scale, 0, 255))
        y = clip(rint(x / scale) + zero_point, 0, 255)"""
    b = imp.b
    imp.module_attributes[DYNAMIC_QUANTIZATION_ATTR] = UnitAttr()
    x = imp.value(node.input[0])
    if numpy_dtype_of(x) != np.float32:
        raise NodeProblem(f"the input is {numpy_dtype_of(x)}; float32 only")
    rank = len(shape_of(x))
    axes = list(range(rank))
    zero = b.inline_constant(np.zeros((1,) * rank, np.float32))
    lo = b.op(g.MinimumOp, [b.reduce(g.ReduceMinOp, x, axes, True), zero])
    hi = b.op(g.MaximumOp, [b.reduce(g.ReduceMaxOp, x, axes, True), zero])
    span = b.op(g.SubOp, [hi, lo])
    scale = b.op(g.DivOp, [span, b.scalar(255.0, span)])
    scale = b.op(g.WhereOp, [b.op(g.EqualOp, [span, zero]), b.scalar(1.0, span), scale])
    zp = b.op(g.SubOp, [zero, b.op(g.DivOp, [lo, scale])])
    zp = b.op(g.RoundOp, [b.op(g.ClipOp, [zp], min=FloatAttr(0.0, f64), max=FloatAttr(255.0, f64))])
    q = b.op(g.AddOp, [b.op(g.RoundOp, [b.op(g.DivOp, [x, scale])]), zp])
    q = b.op(g.ClipOp, [q], min=FloatAttr(0.0, f64), max=FloatAttr(255.0, f64))
    return [b.cast(q, np.uint8), b.reshape(scale, ()), b.reshape(b.cast(zp, np.uint8), ())]



__all__ = ["DYNAMIC_QUANTIZATION_ATTR", "EXACT_SUM_LIMIT"]
