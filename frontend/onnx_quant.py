"""ONNX handlers: QuantizeLinear and DequantizeLinear (the QDQ form onnxruntime's
`quantize_static` writes) as `graph.quantize_linear` / `graph.dequantize_linear`.

A DequantizeLinear of an int8/uint8/int32 initializer (a weight or bias stored quantized) is
not folded to floats at import: the quantization passes read its integers and scales
(`graph-quantize-kernels` turns DQ -> conv/linear/matmul -> Q into integer kernels).
Scales must be float32, known at import time, finite and positive. An initializer of a type
those kernels do not take (FP8, int4/uint4, int16/uint16) or quantized in blocks
(`block_size`) is folded to float32 weights at import: FP8 checkpoints and int4 weight-only
models import, computing in the target's float precision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from xdsl.dialects.builtin import TensorType

from infer.dialects import graph as g
from infer.dialects.dtypes import from_numpy_dtype, shape_of
from infer.frontend.onnx_ops import NodeProblem, attribute, handler, input_name, normalize_axis

if TYPE_CHECKING:
    from infer.frontend.onnx_import import Importer

_QUANTIZED = (np.dtype(np.int8), np.dtype(np.uint8))


def _parameters(imp: Importer, node: onnx.NodeProto, rank: int, value_types: tuple[np.dtype, ...]):
    """(scale, zero point or None, axis property or None) of a Q/DQ node, checked."""
    return quant_parameters(imp, node, 1, 2, rank, value_types, int(attribute(node, "axis", 1)))


def quant_parameters(imp: Importer, node: onnx.NodeProto, scale_index: int, zp_index: int, rank: int,
                     value_types: tuple[np.dtype, ...], axis_if_per_axis: int, what: str = ""):
    """(scale, zero point or None, axis property or None) of the quantization parameters at
    inputs `scale_index` and `zp_index` of `node` (`what` names the operand in errors:
    "x's " ...), checked: float32 scales, finite and positive, known at import time."""
    scale = np.asarray(imp.static(node.input[scale_index], f"{what or 'the '}scale"))
    if scale.dtype != np.float32:
        raise NodeProblem(f"{what or 'the '}scale is {scale.dtype}; float32 scales only")
    if not (np.isfinite(scale).all() and (scale > 0).all()):
        raise NodeProblem(f"{what or 'the '}scale must be finite and positive, got {scale.reshape(-1)[:8].tolist()}")
    zp_name = input_name(node, zp_index)
    zero_point = None
    if zp_name:
        zero_point = np.asarray(imp.static(zp_name, f"{what or 'the '}zero point"))
        if zero_point.dtype not in value_types:
            raise NodeProblem(f"{what or 'the '}zero point is {zero_point.dtype}; supported: "
                              f"{', '.join(str(t) for t in value_types)}")
        if zero_point.size != scale.size or zero_point.ndim > 1:
            raise NodeProblem(f"{what or 'the '}zero point has shape {list(zero_point.shape)} but the scale "
                              f"{list(scale.shape)}")
    axis = None
    if scale.size != 1:  # per axis
        if scale.ndim != 1:
            raise NodeProblem(f"{what or 'the '}scale has shape {list(scale.shape)}; per tensor or 1-D per axis only")
        axis = g.i64_attr(normalize_axis(axis_if_per_axis, rank))
    else:  # per tensor: one element, as a scalar
        scale = scale.reshape(())
        zero_point = None if zero_point is None else zero_point.reshape(())
    return scale, zero_point, axis


@handler("QuantizeLinear", attrs=("axis", "saturate"))
def _quantize_linear(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    scale, zero_point, axis = _parameters(imp, node, len(shape_of(x)), _QUANTIZED)
    result = zero_point.dtype if zero_point is not None else np.dtype(np.uint8)  # ONNX's default: uint8
    zp = None if zero_point is None else imp.materialise(zero_point, node.input[2])
    props = {} if axis is None else {"axis": axis}
    return [imp.b.op(g.QuantizeLinearOp, [x, imp.materialise(scale, node.input[1]), zp],
                     TensorType(from_numpy_dtype(result), shape_of(x)), **props)]


# element types of weights stored quantized that the graph's integer kernels do not take: a
# DequantizeLinear of such an initializer (an FP8 checkpoint, int4 block-quantized weights) is
# folded to float32 weights at import
_FOLDED_ONLY = frozenset(("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "int4", "uint4",
                          "int16", "uint16"))


@handler("DequantizeLinear", attrs=("axis", "block_size", "output_dtype"), fold=False)
def _dequantize_linear(imp: Importer, node: onnx.NodeProto):
    name = node.input[0]
    xdt = imp.dtype(name)
    if imp.is_const(name) and (xdt.name in _FOLDED_ONLY or attribute(node, "block_size", 0)):
        return [_dequantized_weight(imp, node)]
    if attribute(node, "block_size", 0):
        raise NodeProblem("block_size (blocked quantization) of a run-time input is not supported (of initializers only)")
    if xdt.name in _FOLDED_ONLY:
        raise NodeProblem(f"the input is {xdt}, which is supported for initializers only (folded to float32 weights); "
                          "run-time inputs: int8, uint8 and int32")
    if int(attribute(node, "output_dtype", 0)) not in (0, onnx.TensorProto.FLOAT):
        raise NodeProblem("output_dtype other than float32 is not supported")
    x = imp.value(name)
    if xdt not in (*_QUANTIZED, np.dtype(np.int32)):
        raise NodeProblem(f"the input is {xdt}; int8, uint8 and int32 only")
    scale, zero_point, axis = _parameters(imp, node, len(shape_of(x)), (xdt,))
    if xdt == np.int32 and zero_point is not None and (zero_point != 0).any():
        raise NodeProblem("an int32 input has zero point 0")
    zp = None if zero_point is None or xdt == np.int32 else imp.materialise(zero_point, node.input[2])
    props = {} if axis is None else {"axis": axis}
    return [imp.b.op(g.DequantizeLinearOp, [x, imp.materialise(scale, node.input[1]), zp], **props)]


def _dequantized_weight(imp: Importer, node: onnx.NodeProto) -> np.ndarray:
    """(x - zero point) * scale of an initializer x, as ONNX's DequantizeLinear-21 defines it:
    per tensor, per axis, or per block of `block_size` elements along the axis (the scale then
    has x's shape with that axis divided by the block size, rounded up). Computed in float64
    from the exact values of the stored type and rounded once to float32."""
    x = np.asarray(imp.consts[node.input[0]])
    scale = np.asarray(imp.static(node.input[1], "the scale")).astype(np.float64)
    zp_name = input_name(node, 2)
    zero_point = np.asarray(imp.static(zp_name, "the zero point")).astype(np.float64) if zp_name else np.zeros(())
    if int(attribute(node, "output_dtype", 0)) not in (0, onnx.TensorProto.FLOAT):
        raise NodeProblem("output_dtype other than float32 is not supported")
    block = int(attribute(node, "block_size", 0))
    values = x.astype(np.float64)
    if scale.size == 1:
        return ((values - zero_point.reshape(())) * scale.reshape(())).astype(np.float32)
    axis = normalize_axis(int(attribute(node, "axis", 1)), x.ndim)
    if block:
        want = tuple(-(-d // block) if i == axis else d for i, d in enumerate(x.shape))
        if scale.shape != want or (zp_name and zero_point.shape != want):
            raise NodeProblem(f"a blocked scale (block_size {block} on axis {axis}) must have shape {list(want)}, "
                              f"got {list(scale.shape)}")

        def spread(p: np.ndarray) -> np.ndarray:  # one parameter per block -> per element
            return np.repeat(p, block, axis=axis).take(np.arange(x.shape[axis]), axis=axis)
        return ((values - (spread(zero_point) if zp_name else 0.0)) * spread(scale)).astype(np.float32)
    if scale.ndim != 1 or scale.size != x.shape[axis]:
        raise NodeProblem(f"a per-axis scale must have {x.shape[axis]} elements (axis {axis}), got shape {list(scale.shape)}")
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    zp = zero_point.reshape(shape) if zp_name else 0.0
    return ((values - zp) * scale.reshape(shape)).astype(np.float32)
