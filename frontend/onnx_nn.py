"""ONNX handlers: matmul/Gemm, convolution, pooling, normalizations, softmax and reductions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import onnx
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import numpy_dtype_of, shape_of
from infer.frontend.conv_transpose import ConvTransposeProblem, conv_transpose
from infer.frontend.einsum import EinsumProblem, einsum
from infer.frontend.onnx_ops import (
    NodeProblem,
    attribute,
    handler,
    input_name,
    ints_of,
    is_float_dtype,
    normalize_axis,
    require_float,
)

if TYPE_CHECKING:
    from infer.frontend.onnx_import import Importer


@handler("MatMul")
def _matmul(imp: Importer, node: onnx.NodeProto):
    a, b = imp.value(node.input[0]), imp.value(node.input[1])
    return [imp.b.op(g.MatmulOp, [a, b])]


@handler("Einsum", attrs=("equation",))
def _einsum(imp: Importer, node: onnx.NodeProto):
    """Sums, transposes and batched matmuls (frontend/einsum.py)."""
    equation = attribute(node, "equation")
    equation = equation.decode() if isinstance(equation, bytes) else str(equation or "")
    try:
        return [einsum(imp.b, equation, [imp.value(n) for n in node.input])]
    except EinsumProblem as e:
        raise NodeProblem(str(e)) from None


@handler("Gemm", attrs=("alpha", "beta", "transA", "transB", "broadcast"))
def _gemm(imp: Importer, node: onnx.NodeProto):
    alpha, beta = float(attribute(node, "alpha", 1.0)), float(attribute(node, "beta", 1.0))
    ta, tb = bool(attribute(node, "transA", 0)), bool(attribute(node, "transB", 0))
    a_name, b_name, c_name = node.input[0], node.input[1], input_name(node, 2)
    a = imp.value(a_name)
    n = imp.shape(b_name)[0 if tb else 1]
    c_shape = imp.shape(c_name) if c_name else None
    # y = x @ W^T + b: the linear form with a constant weight.
    if not ta and alpha == 1.0 and imp.is_const(b_name) and (c_shape is None or (beta == 1.0 and c_shape in ((n,), (1, n)))):
        w = imp.consts[b_name] if tb else np.ascontiguousarray(imp.consts[b_name].T)
        wv = imp.value(b_name) if tb else imp.materialise(w, b_name + "_t")
        bias = None
        if c_name:
            bias = imp.b.reshape(imp.value(c_name), (n,))
        return [imp.b.op(g.LinearOp, [a, wv, bias])]
    y = imp.b.op(g.MatmulOp, [a, imp.value(b_name)], transpose_a=g.bool_attr(ta), transpose_b=g.bool_attr(tb))
    if alpha != 1.0:
        y = imp.b.op(g.MulOp, [y, imp.b.scalar(alpha, y)])
    if c_name:
        c = imp.value(c_name)
        if beta != 1.0:
            c = imp.b.op(g.MulOp, [c, imp.b.scalar(beta, c)])
        y = imp.b.op(g.AddOp, [y, c])
    return [y]


def _window(imp: Importer, node: onnx.NodeProto, in_spatial: Sequence[int], kernel: Sequence[int]):
    """strides, dilations, pads (begin..., end...) with auto_pad made explicit."""
    r = len(in_spatial)
    strides = attribute(node, "strides") or [1] * r
    dilations = attribute(node, "dilations") or [1] * r
    pads = attribute(node, "pads") or [0] * (2 * r)
    auto_pad = attribute(node, "auto_pad", "NOTSET") or "NOTSET"
    if len(strides) != r or len(dilations) != r or len(pads) != 2 * r:
        raise NodeProblem(f"strides/dilations/pads do not match the {r} spatial dims")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * r)
        for i in range(r):
            out = -(-in_spatial[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_spatial[i])
            small, big = total // 2, total - total // 2
            pads[i], pads[i + r] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    elif auto_pad == "VALID":
        pads = [0] * (2 * r)
    elif auto_pad != "NOTSET":
        raise NodeProblem(f"auto_pad = {auto_pad} is not supported")
    return list(strides), list(dilations), list(pads)


def _as_2d(r: int, strides, dilations, pads, kernel):
    """Spatial params for 1-D (made 2-D with H = 1) or 2-D windows."""
    if r == 1:
        return [1, strides[0]], [1, dilations[0]], [0, pads[0], 0, pads[1]], [1, kernel[0]]
    return strides, dilations, pads, list(kernel)


CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
"""The attributes Conv and its quantized forms (QLinearConv, ConvInteger) share."""


@handler("Conv", attrs=CONV_ATTRS)
def _conv(imp: Importer, node: onnx.NodeProto):
    bias = imp.value(node.input[2]) if input_name(node, 2) else None
    return [convolution(imp, node, imp.value(node.input[0]), imp.value(node.input[1]), bias)]


def convolution(imp: Importer, node: onnx.NodeProto, x: SSAValue, w: SSAValue, bias: SSAValue | None,
                conv_op: type[g.GraphOp] = g.Conv2dOp, **properties) -> SSAValue:
    """`conv_op` (graph.conv2d, or graph.conv2d_integer with its zero points in `properties`)
    of x and w with the window attributes of the Conv-like `node` (1-D as 2-D with H = 1; 3-D
    float convs as one 2-D conv over the depth taps, GraphBuilder.conv3d)."""
    xs, ws = shape_of(x), shape_of(w)
    r = len(xs) - 2
    if r not in (1, 2, 3):
        raise NodeProblem(f"{r}-D convolution is not supported (1-D, 2-D and 3-D only)")
    if r == 3 and conv_op is not g.Conv2dOp:
        raise NodeProblem("a quantized 3-D convolution is not supported (float 3-D convs only)")
    kernel = attribute(node, "kernel_shape") or list(ws[2:])
    strides, dilations, pads = _window(imp, node, xs[2:], kernel)
    if r == 3:
        return imp.b.conv3d(x, w, bias, strides, pads, dilations, int(attribute(node, "group", 1)))
    strides, dilations, pads, _ = _as_2d(r, strides, dilations, pads, kernel)
    if r == 1:
        x = imp.b.reshape(x, (xs[0], xs[1], 1, xs[2]))
        w = imp.b.reshape(w, (ws[0], ws[1], 1, ws[2]))
    y = imp.b.op(
        conv_op, [x, w, bias],
        stride=g.i64_array(strides), padding=g.i64_array(pads), dilation=g.i64_array(dilations),
        groups=g.i64_attr(int(attribute(node, "group", 1))), **properties,
    )
    if r == 1:
        ys = shape_of(y)
        y = imp.b.reshape(y, (ys[0], ys[1], ys[3]))
    return y


@handler("ConvTranspose", attrs=(*CONV_ATTRS, "output_padding", "output_shape"))
def _conv_transpose(imp: Importer, node: onnx.NodeProto):
    """1-D and 2-D ConvTranspose as stride-1 convs (frontend/conv_transpose.py); output_shape
    and auto_pad give the pads as the ONNX spec computes them."""
    x, w = imp.value(node.input[0]), imp.value(node.input[1])
    bias = imp.value(node.input[2]) if input_name(node, 2) else None
    xs, ws = shape_of(x), shape_of(w)
    r = len(xs) - 2
    if r not in (1, 2):
        raise NodeProblem(f"{r}-D ConvTranspose is not supported (1-D and 2-D only)")
    kernel = list(attribute(node, "kernel_shape") or ws[2:])
    if kernel != list(ws[2:]):
        raise NodeProblem(f"kernel_shape {kernel} does not match the weight's {list(ws[2:])}")
    strides = list(attribute(node, "strides") or [1] * r)
    dilations = list(attribute(node, "dilations") or [1] * r)
    output_padding = list(attribute(node, "output_padding") or [0] * r)
    pads = list(attribute(node, "pads") or [0] * (2 * r))
    if not len(strides) == len(dilations) == len(output_padding) == r or len(pads) != 2 * r:
        raise NodeProblem(f"strides/dilations/output_padding/pads do not match the {r} spatial dims")
    if any(not 0 <= o < max(s, d) for o, s, d in zip(output_padding, strides, dilations, strict=True)):
        raise NodeProblem(f"output_padding {output_padding} must be below the stride or the dilation")
    output_shape = list(attribute(node, "output_shape") or [])
    auto_pad = attribute(node, "auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise NodeProblem(f"auto_pad = {auto_pad} is not supported")
    if auto_pad == "VALID":
        pads = [0] * (2 * r)
    if output_shape or auto_pad.startswith("SAME"):
        spatial = output_shape[-r:] if output_shape else [xs[2 + i] * strides[i] for i in range(r)]
        for i in range(r):
            total = (strides[i] * (xs[2 + i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1
                     - spatial[i])
            if total < 0:  # longer than the scatter reaches: output padding, within its bound
                output_padding[i] -= total
                total = 0
                if output_padding[i] >= max(strides[i], dilations[i]):
                    raise NodeProblem(f"output_shape {spatial} is longer than the input reaches in spatial "
                                      f"dim {i} (at most {spatial[i] - output_padding[i] + max(strides[i], dilations[i]) - 1})")
            small, big = total // 2, total - total // 2
            pads[i], pads[i + r] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    try:
        return [conv_transpose(imp.b, x, w, bias, strides, pads, dilations, output_padding,
                               int(attribute(node, "group", 1)))]
    except ConvTransposeProblem as e:
        raise NodeProblem(str(e)) from None


def _pool_2d(imp: Importer, x: SSAValue, is_max: bool, kernel, strides, dilations, pads, ceil_mode: bool,
             count_include_pad: bool) -> SSAValue:
    """graph.max_pool2d / avg_pool2d of x [N, C, H, W] (pads [top, left, bottom, right]). A
    padding beyond half the kernel, which the graph ops do not take, is made an explicit
    graph.pad first (-inf for max, 0 for the averages: the pad counted), and an average that
    must not count it is scaled by its compile-time count ratio (counted taps / taps on input
    elements per output position)."""
    if not is_max and any(d != 1 for d in dilations):
        return _dilated_avg_pool_2d(imp, x, kernel, strides, dilations, pads, ceil_mode, count_include_pad)
    props = dict(kernel=g.i64_array(kernel), stride=g.i64_array(strides), ceil_mode=g.bool_attr(ceil_mode))
    if is_max:
        props["dilation"] = g.i64_array(dilations)
    else:
        props["count_include_pad"] = g.bool_attr(count_include_pad)
    if all(pads[i] <= kernel[i % 2] // 2 for i in range(4)):
        return imp.b.op(g.MaxPool2dOp if is_max else g.AvgPool2dOp, [x], padding=g.i64_array(pads), **props)
    n, c, h, w = shape_of(x)
    padded = imp.b.op(g.PadOp, [x], pads=g.i64_array([0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]]),
                      value=g.f64_attr(float("-inf") if is_max else 0.0))
    y = imp.b.op(g.MaxPool2dOp if is_max else g.AvgPool2dOp, [padded], padding=g.i64_array([0, 0, 0, 0]), **props)
    if is_max or count_include_pad:
        return y
    _, _, oh, ow = shape_of(y)
    hp, wp = h + pads[0] + pads[2], w + pads[1] + pads[3]
    taps_h = np.arange(oh)[:, None] * strides[0] + np.arange(kernel[0])[None, :]
    taps_w = np.arange(ow)[:, None] * strides[1] + np.arange(kernel[1])[None, :]
    counted = np.outer((taps_h < hp).sum(1), (taps_w < wp).sum(1))
    valid = np.outer(((taps_h >= pads[0]) & (taps_h < pads[0] + h)).sum(1), ((taps_w >= pads[1]) & (taps_w < pads[1] + w)).sum(1))
    with np.errstate(divide="ignore"):
        ratio = (counted / valid).astype(numpy_dtype_of(x)).reshape(1, 1, oh, ow)
    return imp.b.op(g.MulOp, [y, imp.b.constant(ratio, name="pool_count_ratio")])


def _dilated_avg_pool_2d(imp: Importer, x: SSAValue, kernel, strides, dilations, pads, ceil_mode: bool,
                         count_include_pad: bool) -> SSAValue:
    """A dilated average pool (graph.avg_pool2d takes no dilation) as the sum of its taps, one
    strided slice of the zero-padded input each, times a compile-time 1 / count per output
    position. The count is the window's taps inside the padded input (count_include_pad) or
    inside the input; with ceil_mode, the taps of a last window past the padding never count."""
    n, c, h, w = shape_of(x)
    out = [g.window_out("AveragePool", size, kernel[i], strides[i], pads[i], pads[i + 2], dilations[i], ceil_mode)
           for i, size in enumerate((h, w))]
    # rows / columns the last window reaches beyond the bottom / right padding (ceil_mode)
    beyond = [max(0, (out[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - (size + pads[i] + pads[i + 2]))
              for i, size in enumerate((h, w))]
    padded = x
    if any(pads) or any(beyond):
        padded = imp.b.op(g.PadOp, [x], pads=g.i64_array([0, 0, pads[0], pads[1], 0, 0, pads[2] + beyond[0],
                                                           pads[3] + beyond[1]]), value=g.f64_attr(0.0))
    total = None
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            top, left = i * dilations[0], j * dilations[1]
            tap = imp.b.slice(padded, [0, 0, top, left],
                              [n, c, top + (out[0] - 1) * strides[0] + 1, left + (out[1] - 1) * strides[1] + 1],
                              [1, 1, strides[0], strides[1]])
            total = tap if total is None else imp.b.op(g.AddOp, [total, tap])
    counts = []
    for i, size in enumerate((h, w)):
        taps = np.arange(out[i])[:, None] * strides[i] + np.arange(kernel[i])[None, :] * dilations[i]
        lo, hi = (0, size + pads[i] + pads[i + 2]) if count_include_pad else (pads[i], pads[i] + size)
        counts.append(((taps >= lo) & (taps < hi)).sum(1))
    with np.errstate(divide="ignore"):
        scale = (1.0 / np.outer(counts[0], counts[1])).astype(numpy_dtype_of(x)).reshape(1, 1, out[0], out[1])
    return imp.b.op(g.MulOp, [total, imp.b.constant(scale, name="pool_count_recip")])


def _pool_3d(imp: Importer, x: SSAValue, is_max: bool, kernel, strides, dilations, pads, ceil_mode: bool,
             count_include_pad: bool) -> SSAValue:
    """A 3-D max or average pool [N, C, D, H, W] as two 2-D ones: over (H, W) with the depth
    slices as channels, then over D with the (H', W') pixels as a row. A box window is
    separable: the max of the depth window's maxima is the 3-D maximum, and an average's
    count is the product of its per-axis counts (the (H, W) count of a position does not
    depend on its depth), so the average of the depth window's (H, W) averages is the 3-D
    average (another rounding of the same sum)."""
    N, C, D, H, W = shape_of(x)

    def pool(v: SSAValue, k, s, d, p) -> SSAValue:
        return _pool_2d(imp, v, is_max, k, s, d, p, ceil_mode, count_include_pad)

    plane = pool(imp.b.reshape(x, (N, C * D, H, W)), kernel[1:], strides[1:], dilations[1:],
                 [pads[1], pads[2], pads[4], pads[5]])
    _, _, H2, W2 = shape_of(plane)
    depth = pool(imp.b.reshape(plane, (N, C, D, H2 * W2)), [kernel[0], 1], [strides[0], 1], [dilations[0], 1],
                 [pads[0], 0, pads[3], 0])
    return imp.b.reshape(depth, (N, C, shape_of(depth)[2], H2, W2))


@handler("MaxPool", "AveragePool", attrs=("auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "storage_order", "strides"))
def _pool(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    r = len(xs) - 2
    if r not in (1, 2, 3):
        raise NodeProblem(f"{r}-D pooling is not supported (1-D, 2-D and 3-D only)")
    if attribute(node, "storage_order", 0):
        raise NodeProblem("storage_order = 1 is not supported")
    if len(node.output) > 1 and node.output[1]:
        raise NodeProblem("the Indices output is not supported")
    kernel = attribute(node, "kernel_shape")
    strides, dilations, pads = _window(imp, node, xs[2:], kernel)
    if r == 3:
        return [_pool_3d(imp, x, node.op_type == "MaxPool", list(kernel), strides, dilations, pads,
                         bool(attribute(node, "ceil_mode", 0)), bool(attribute(node, "count_include_pad", 0)))]
    strides, dilations, pads, kernel = _as_2d(r, strides, dilations, pads, kernel)
    if r == 1:
        x = imp.b.reshape(x, (xs[0], xs[1], 1, xs[2]))
    y = _pool_2d(imp, x, node.op_type == "MaxPool", kernel, strides, dilations, pads, bool(attribute(node, "ceil_mode", 0)),
                 bool(attribute(node, "count_include_pad", 0)))
    if r == 1:
        ys = shape_of(y)
        y = imp.b.reshape(y, (ys[0], ys[1], ys[3]))
    return [y]


@handler("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(imp: Importer, node: onnx.NodeProto):
    cls = g.GlobalAvgPoolOp if node.op_type == "GlobalAveragePool" else g.GlobalMaxPoolOp
    return [imp.b.op(cls, [imp.value(node.input[0])])]


@handler("BatchNormalization", attrs=("epsilon", "momentum", "training_mode", "spatial", "is_test", "consumed_inputs"))
def _batch_norm(imp: Importer, node: onnx.NodeProto):
    if attribute(node, "training_mode", 0):
        raise NodeProblem("training_mode = 1 is not supported (inference only)")
    if attribute(node, "spatial", 1) != 1:
        raise NodeProblem("spatial = 0 is not supported")
    x = imp.value(node.input[0])
    params = [imp.b.cast(imp.value(n), numpy_dtype_of(x)) for n in node.input[1:5]]
    y = imp.b.op(g.BatchNormOp, [x, *params], epsilon=g.f64_attr(attribute(node, "epsilon", 1e-5)))
    return [y]


@handler("LRN", attrs=("alpha", "beta", "bias", "size"))
def _lrn(imp: Importer, node: onnx.NodeProto):
    """y = x / (bias + alpha / size * sum of x^2 over the channel window)^beta; the window
    sum is a 1x1 convolution with a 0/1 band matrix (channels c - (size-1)//2 .. c +
    ceil((size-1)/2)), so the matrix unit does it."""
    x = imp.value(node.input[0])
    require_float(x, "LRN")
    xs = shape_of(x)
    if len(xs) < 3:
        raise NodeProblem(f"LRN needs an input [N, C, spatial...], got rank {len(xs)}")
    size = int(attribute(node, "size"))
    alpha, beta, bias = (float(attribute(node, a, d)) for a, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    n, c = xs[0], xs[1]
    pixels = int(np.prod(xs[2:]))
    channel = np.arange(c)
    offset = channel[None, :] - channel[:, None]  # [out, in]: in - out
    band = ((offset >= -((size - 1) // 2)) & (offset <= math.ceil((size - 1) / 2))).astype(numpy_dtype_of(x))
    weight = imp.b.constant(band.reshape(c, c, 1, 1), name=f"{node.name or 'lrn'}.window")
    square = imp.b.op(g.MulOp, [x, x])
    flat = imp.b.reshape(square, (n, c, 1, pixels))
    window = imp.b.op(g.Conv2dOp, [flat, weight, None], stride=g.i64_array([1, 1]),
                      padding=g.i64_array([0, 0, 0, 0]), dilation=g.i64_array([1, 1]),
                      groups=g.i64_attr(1))
    window = imp.b.reshape(window, xs)
    base = imp.b.op(g.AddOp, [imp.b.op(g.MulOp, [window, imp.b.scalar(alpha / size, window)]),
                              imp.b.scalar(bias, window)])
    return [imp.b.op(g.DivOp, [x, imp.b.op(g.PowOp, [base, imp.b.scalar(beta, base)])])]


@handler("InstanceNormalization", attrs=("epsilon",))
def _instance_norm(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    rank = len(shape_of(x))
    axes = list(range(2, rank))
    y = imp.b.normalize(x, axes, float(attribute(node, "epsilon", 1e-5)))[0]
    c = shape_of(x)[1]
    pshape = (c, *([1] * (rank - 2)))
    scale = imp.b.reshape(imp.value(node.input[1]), pshape)
    bias = imp.b.reshape(imp.value(node.input[2]), pshape)
    return [imp.b.op(g.AddOp, [imp.b.op(g.MulOp, [y, scale]), bias])]


@handler("LayerNormalization", attrs=("axis", "epsilon", "stash_type"))
def _layer_norm(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    scale = imp.value(node.input[1])
    bias = imp.value(node.input[2]) if input_name(node, 2) else None
    rank = len(shape_of(x))
    axis = normalize_axis(int(attribute(node, "axis", -1)), rank)
    eps = float(attribute(node, "epsilon", 1e-5))
    wants_stats = any(o for o in node.output[1:])
    if not wants_stats:
        return [imp.b.op(g.LayerNormOp, [x, scale, bias], axis=g.i64_attr(axis), epsilon=g.f64_attr(eps))]
    stash = attribute(node, "stash_type", 1)
    xc = imp.b.cast(x, np.dtype(np.float32)) if stash == 1 and is_float_dtype(numpy_dtype_of(x)) else x
    y, mean, inv = imp.b.normalize(xc, list(range(axis, rank)), eps)
    y = imp.b.cast(y, numpy_dtype_of(x))
    y = imp.b.op(g.MulOp, [y, scale])
    if bias is not None:
        y = imp.b.op(g.AddOp, [y, bias])
    return [y, mean, inv]


@handler("RMSNormalization", attrs=("axis", "epsilon", "stash_type"))
def _rms_norm(imp: Importer, node: onnx.NodeProto):
    x, scale = imp.value(node.input[0]), imp.value(node.input[1])
    axis = normalize_axis(int(attribute(node, "axis", -1)), len(shape_of(x)))
    return [imp.b.op(g.RmsNormOp, [x, scale], axis=g.i64_attr(axis), epsilon=g.f64_attr(float(attribute(node, "epsilon", 1e-5))))]


@handler("GroupNormalization", attrs=("epsilon", "num_groups", "stash_type"))
def _group_norm(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    c = shape_of(x)[1]
    groups = int(attribute(node, "num_groups"))
    eps = float(attribute(node, "epsilon", 1e-5))
    if c % groups:
        raise NodeProblem(f"channels ({c}) are not divisible by num_groups ({groups})")
    scale, bias = imp.value(node.input[1]), imp.value(node.input[2])
    if shape_of(scale)[0] == groups and groups != c:
        # opset 18: one scale/bias per group
        scale = imp.b.reshape(imp.b.broadcast(imp.b.reshape(scale, (groups, 1)), (groups, c // groups)), (c,))
        bias = imp.b.reshape(imp.b.broadcast(imp.b.reshape(bias, (groups, 1)), (groups, c // groups)), (c,))
    return [imp.b.group_norm(x, groups, scale, bias, eps)]


@handler("LpNormalization", attrs=("axis", "p"))
def _lp_norm(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    axis = normalize_axis(int(attribute(node, "axis", -1)), len(shape_of(x)))
    p = int(attribute(node, "p", 2))
    if p == 1:
        norm = imp.b.reduce(g.ReduceSumOp, imp.b.op(g.AbsOp, [x]), [axis], True)
    elif p == 2:
        norm = imp.b.op(g.SqrtOp, [imp.b.reduce(g.ReduceSumOp, imp.b.op(g.MulOp, [x, x]), [axis], True)])
    else:
        raise NodeProblem(f"p = {p} is not supported (1 or 2)")
    zero = imp.b.scalar(0, x)
    is_zero = imp.b.op(g.EqualOp, [norm, zero])
    safe = imp.b.op(g.WhereOp, [is_zero, imp.b.scalar(1, x), norm])
    return [imp.b.op(g.WhereOp, [is_zero, zero, imp.b.op(g.DivOp, [x, safe])])]


@handler("MeanVarianceNormalization", attrs=("axes",))
def _mvn(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    axes = attribute(node, "axes", [0, 2, 3])
    rank = len(shape_of(x))
    axes = sorted(normalize_axis(a, rank) for a in axes)
    mean = imp.b.reduce(g.ReduceMeanOp, x, axes, True)
    d = imp.b.op(g.SubOp, [x, mean])
    var = imp.b.reduce(g.ReduceMeanOp, imp.b.op(g.MulOp, [d, d]), axes, True)
    std = imp.b.op(g.SqrtOp, [var])
    return [imp.b.op(g.DivOp, [d, imp.b.op(g.AddOp, [std, imp.b.scalar(1e-9, std)])])]


@handler("Softmax", "LogSoftmax", "Hardmax", attrs=("axis",))
def _softmax(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    rank = len(xs)
    opset = imp.opset
    if opset < 13:
        axis = normalize_axis(int(attribute(node, "axis", 1)), rank)
        flat = (math.prod(xs[:axis]), math.prod(xs[axis:]))
        y = _softmax_like(imp, node.op_type, imp.b.reshape(x, flat), 1)
        return [imp.b.reshape(y, xs)]
    axis = normalize_axis(int(attribute(node, "axis", -1)), rank)
    return [_softmax_like(imp, node.op_type, x, axis)]


def _softmax_like(imp: Importer, op_type: str, x: SSAValue, axis: int) -> SSAValue:
    if op_type == "Softmax":
        return imp.b.op(g.SoftmaxOp, [x], axis=g.i64_attr(axis))
    if op_type == "LogSoftmax":
        return imp.b.op(g.LogSoftmaxOp, [x], axis=g.i64_attr(axis))
    xs = shape_of(x)
    am = imp.b.op(g.ArgmaxOp, [x], axes=g.i64_array([axis]), keepdims=g.bool_attr(True))
    iota = np.arange(xs[axis], dtype=np.int64).reshape([-1 if i == axis else 1 for i in range(len(xs))])
    eq = imp.b.op(g.EqualOp, [am, imp.materialise(iota, "iota")])
    return imp.b.cast(imp.b.broadcast(eq, xs), numpy_dtype_of(x))


@handler("LpPool", attrs=("auto_pad", "ceil_mode", "dilations", "kernel_shape", "p", "pads", "strides"))
def _lp_pool(imp: Importer, node: onnx.NodeProto):
    """(sum over the window of |x|^p)^(1/p) = (avg_pool(|x|^p, pads counted) * k)^(1/p)."""
    x = imp.value(node.input[0])
    require_float(x, "LpPool")
    xs = shape_of(x)
    r = len(xs) - 2
    if r not in (1, 2, 3):
        raise NodeProblem(f"{r}-D pooling is not supported (1-D, 2-D and 3-D only)")
    p = float(attribute(node, "p", 2))
    kernel = attribute(node, "kernel_shape")
    strides, dilations, pads = _window(imp, node, xs[2:], kernel)
    xp = imp.b.op(g.PowOp, [imp.b.op(g.AbsOp, [x]), imp.b.scalar(p, x)])
    if r == 3:
        avg = _pool_3d(imp, xp, False, list(kernel), strides, dilations, pads, bool(attribute(node, "ceil_mode", 0)), True)
    else:
        strides, dilations, pads, kernel = _as_2d(r, strides, dilations, pads, kernel)
        if r == 1:
            xp = imp.b.reshape(xp, (xs[0], xs[1], 1, xs[2]))
        avg = _pool_2d(imp, xp, False, kernel, strides, dilations, pads, bool(attribute(node, "ceil_mode", 0)), True)
    total = imp.b.op(g.MulOp, [avg, imp.b.scalar(math.prod(kernel), avg)])
    y = imp.b.op(g.PowOp, [total, imp.b.scalar(1.0 / p, total)])
    if r == 1:
        ys = shape_of(y)
        y = imp.b.reshape(y, (ys[0], ys[1], ys[3]))
    return [y]


# --------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------

_REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")


@handler(*_REDUCE, attrs=("axes", "keepdims", "noop_with_empty_axes"))
def _reduce(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    rank = len(shape_of(x))
    axes = ints_of(imp, node, "axes", 1, "the axes")
    keep = bool(attribute(node, "keepdims", 1))
    if not axes:
        if attribute(node, "noop_with_empty_axes", 0):
            return [x]
        axes = list(range(rank))
    axes = sorted({normalize_axis(a, rank) for a in axes})
    t = node.op_type

    def reduce_axes(cls: type[g.ReduceOp], v: SSAValue) -> SSAValue:
        return imp.b.reduce(cls, v, axes, keep)

    if t in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"):
        cls = {"ReduceSum": g.ReduceSumOp, "ReduceMean": g.ReduceMeanOp, "ReduceMax": g.ReduceMaxOp, "ReduceMin": g.ReduceMinOp, "ReduceProd": g.ReduceProdOp}[t]
        if t in ("ReduceMax", "ReduceMin") and any(shape_of(x)[a] == 0 for a in axes):
            fill = -np.inf if t == "ReduceMax" else np.inf
            if not is_float_dtype(numpy_dtype_of(x)):
                info = np.iinfo(numpy_dtype_of(x)) if numpy_dtype_of(x) != np.bool_ else None
                fill = (info.min if t == "ReduceMax" else info.max) if info else (t == "ReduceMin")
            shape = _reduced_shape(shape_of(x), axes, keep)
            return [np.full(shape, fill, dtype=numpy_dtype_of(x))]
        return [reduce_axes(cls, x)]
    if t == "ReduceL1":
        return [reduce_axes(g.ReduceSumOp, imp.b.op(g.AbsOp, [x]))]
    if t == "ReduceSumSquare":
        return [reduce_axes(g.ReduceSumOp, imp.b.op(g.MulOp, [x, x]))]
    if t == "ReduceL2":
        return [_float_then_back(imp, reduce_axes(g.ReduceSumOp, imp.b.op(g.MulOp, [x, x])), g.SqrtOp)]
    if t == "ReduceLogSum":
        return [_float_then_back(imp, reduce_axes(g.ReduceSumOp, x), g.LogOp)]
    # ReduceLogSumExp, stably: m + log(sum(exp(x - m)))
    if any(shape_of(x)[a] == 0 for a in axes):
        return [np.full(_reduced_shape(shape_of(x), axes, keep), -np.inf, dtype=numpy_dtype_of(x))]
    m = imp.b.reduce(g.ReduceMaxOp, x, axes, True)
    s = imp.b.reduce(g.ReduceSumOp, imp.b.op(g.ExpOp, [imp.b.op(g.SubOp, [x, m])]), axes, keep)
    mk = m if keep else imp.b.reshape(m, shape_of(s))
    return [imp.b.op(g.AddOp, [mk, imp.b.op(g.LogOp, [s])])]


def _reduced_shape(shape: Sequence[int], axes: Sequence[int], keep: bool) -> list[int]:
    return [1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes]


def _float_then_back(imp: Importer, x: SSAValue, cls) -> SSAValue:
    dt = numpy_dtype_of(x)
    if is_float_dtype(dt):
        return imp.b.op(cls, [x])
    return imp.b.cast(imp.b.op(cls, [imp.b.cast(x, np.dtype(np.float64))]), dt)


@handler("ArgMax", "ArgMin", attrs=("axis", "keepdims", "select_last_index"))
def _arg_reduce(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    axis = normalize_axis(int(attribute(node, "axis", 0)), len(xs))
    keep = bool(attribute(node, "keepdims", 1))
    cls = g.ArgmaxOp if node.op_type == "ArgMax" else g.ArgminOp
    if not attribute(node, "select_last_index", 0):
        return [imp.b.op(cls, [x], axes=g.i64_array([axis]), keepdims=g.bool_attr(keep))]
    starts, ends, steps = [0] * len(xs), list(xs), [1] * len(xs)
    starts[axis], ends[axis], steps[axis] = xs[axis] - 1, -1, -1
    rev = imp.b.slice(x, starts, ends, steps)
    i = imp.b.op(cls, [rev], axes=g.i64_array([axis]), keepdims=g.bool_attr(keep))
    return [imp.b.op(g.SubOp, [imp.b.scalar(xs[axis] - 1, i), i])]
