"""ONNX handlers: shapes, constants, reshaping, slicing, concatenation, padding, gathers and resizing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import numpy_dtype_of, shape_of
from infer.frontend.onnx_ops import (
    NodeProblem,
    attribute,
    constant_node_value,
    handler,
    input_name,
    ints_of,
    is_float_dtype,
    normalize_axis,
    numpy_dtype_for,
)
from infer.frontend.indexing import IndexingProblem, gather_nd, indices_in_range, scatter_elements, scatter_nd

if TYPE_CHECKING:
    from infer.frontend.onnx_import import Importer


@handler("If", attrs=("then_branch", "else_branch"), fold=False)
def _if(imp: Importer, node: onnx.NodeProto):
    """An If whose condition is known at import time (exporters write them for shape checks and
    static configuration) is the branch it takes, inlined. A condition computed at run time
    would need both branches and a select, or control flow the graph does not have: refused."""
    cond = np.asarray(imp.static(node.input[0], "the condition")).reshape(-1)
    if cond.size != 1:
        raise NodeProblem(f"the condition must have one element, got {cond.size}")
    branch = attribute(node, "then_branch" if bool(cond[0]) else "else_branch")
    results = imp.inline_graph(branch)
    if len(results) != len(node.output):
        raise NodeProblem(f"the branch has {len(results)} outputs, the node {len(node.output)}")
    return results


@handler("CenterCropPad", attrs=("axes",))
def _center_crop_pad(imp: Importer, node: onnx.NodeProto):
    """Each axis cropped or zero-padded to its target length, centred (the extra element of an
    odd difference cropped from or padded at the end): a slice, then a graph.pad."""
    x = imp.value(node.input[0])
    shape = shape_of(x)
    rank = len(shape)
    target = [int(v) for v in imp.static(node.input[1], "the shape").reshape(-1)]
    axes = attribute(node, "axes")
    axes = [normalize_axis(int(a), rank) for a in axes] if axes is not None else list(range(rank))
    if len(target) != len(axes) or len(set(axes)) != len(axes):
        raise NodeProblem(f"the shape {target} must give one length per axis of {axes}")
    starts, ends = [0] * rank, list(shape)
    before, after = [0] * rank, [0] * rank
    for a, length in zip(axes, target):
        if length < 1:
            raise NodeProblem(f"the target length of axis {a} must be positive, got {length}")
        if length < shape[a]:
            starts[a] = (shape[a] - length) // 2
            ends[a] = starts[a] + length
        elif length > shape[a]:
            before[a] = (length - shape[a]) // 2
            after[a] = length - shape[a] - before[a]
    y = x if ends == list(shape) and not any(starts) else imp.b.slice(x, starts, ends)
    if any(before) or any(after):
        y = imp.b.op(g.PadOp, [y], pads=g.i64_array(before + after), value=g.f64_attr(0.0))
    return [y]


@handler("Constant", attrs=("value", "value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings", "sparse_value"))
def _constant(imp: Importer, node: onnx.NodeProto):
    return [constant_node_value(node)]


@handler("Shape", attrs=("start", "end"))
def _shape(imp: Importer, node: onnx.NodeProto):
    s = imp.shape(node.input[0])
    start, end = attribute(node, "start", 0), attribute(node, "end")
    return [np.array(s[start:end] if end is not None else s[start:], dtype=np.int64)]


@handler("Size")
def _size(imp: Importer, node: onnx.NodeProto):
    return [np.array(math.prod(imp.shape(node.input[0])), dtype=np.int64)]


@handler("ConstantOfShape", attrs=("value",))
def _constant_of_shape(imp: Importer, node: onnx.NodeProto):
    shape = [int(d) for d in imp.static(node.input[0], "the shape").reshape(-1)]
    v = attribute(node, "value")
    value = numpy_helper.to_array(v).reshape(-1) if v is not None else np.zeros(1, np.float32)
    return [np.full(shape, value[0], dtype=value.dtype)]


@handler("EyeLike", attrs=("dtype", "k"))
def _eye_like(imp: Importer, node: onnx.NodeProto):
    shape = imp.shape(node.input[0])
    dt = attribute(node, "dtype")
    dtype = numpy_dtype_for(int(dt), "the result") if dt is not None else imp.dtype(node.input[0])
    return [np.eye(shape[0], shape[1], k=int(attribute(node, "k", 0)), dtype=dtype)]


@handler("Range")
def _range(imp: Importer, node: onnx.NodeProto):
    start, limit, delta = (imp.static(n, w).reshape(()) for n, w in zip(node.input, ("start", "limit", "delta")))
    return [np.arange(start, limit, delta, dtype=start.dtype)]


@handler("Reshape", attrs=("allowzero", "shape", "consumed_inputs"))
def _reshape(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    target = ints_of(imp, node, "shape", 1, "the target shape")
    xs = shape_of(x)
    allowzero = attribute(node, "allowzero", 0)
    shape = [xs[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
    if shape.count(-1) > 1:
        raise NodeProblem(f"the target shape {target} has more than one -1")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        total = math.prod(xs)
        if known == 0 or total % known:
            raise NodeProblem(f"cannot reshape {list(xs)} to {target}")
        shape[shape.index(-1)] = total // known
    if math.prod(shape) != math.prod(xs):
        raise NodeProblem(f"cannot reshape {list(xs)} ({math.prod(xs)} elements) to {target}")
    return [imp.b.reshape(x, shape)]


@handler("Flatten", attrs=("axis",))
def _flatten(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    axis = int(attribute(node, "axis", 1))
    axis = axis + len(xs) if axis < 0 else axis
    return [imp.b.reshape(x, (math.prod(xs[:axis]), math.prod(xs[axis:])))]


@handler("Squeeze", attrs=("axes",))
def _squeeze(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    axes = ints_of(imp, node, "axes", 1, "the axes")
    if axes is None:
        axes = [i for i, d in enumerate(xs) if d == 1]
    axes = {normalize_axis(a, len(xs)) for a in axes}
    for a in axes:
        if xs[a] != 1:
            raise NodeProblem(f"cannot squeeze dimension {a} of size {xs[a]}")
    return [imp.b.reshape(x, [d for i, d in enumerate(xs) if i not in axes])]


@handler("Unsqueeze", attrs=("axes",))
def _unsqueeze(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = list(shape_of(x))
    axes = ints_of(imp, node, "axes", 1, "the axes") or []
    rank = len(xs) + len(axes)
    axes = sorted(normalize_axis(a, rank) for a in axes)
    for a in axes:
        xs.insert(a, 1)
    return [imp.b.reshape(x, xs)]


@handler("Transpose", attrs=("perm",))
def _transpose(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    perm = attribute(node, "perm") or list(reversed(range(len(shape_of(x)))))
    return [imp.b.transpose(x, perm)]


@handler("Concat", attrs=("axis",))
def _concat(imp: Importer, node: onnx.NodeProto):
    vals = [imp.value(i) for i in node.input if i]
    rank = len(shape_of(vals[0]))
    axis = normalize_axis(int(attribute(node, "axis", 1)), rank)
    vals = [v for v in vals if shape_of(v)[axis] != 0] or vals[:1]
    if len(vals) == 1:
        return [vals[0]]
    return [imp.b.op(g.ConcatOp, vals, axis=g.i64_attr(axis))]


@handler("Split", attrs=("axis", "split", "num_outputs"))
def _split(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    axis = normalize_axis(int(attribute(node, "axis", 0)), len(xs))
    sizes = ints_of(imp, node, "split", 1, "the split sizes")
    n = len(node.output)
    if sizes is None:
        num = int(attribute(node, "num_outputs", n))
        chunk = -(-xs[axis] // num)
        sizes = [min(chunk, xs[axis] - i * chunk) for i in range(num)]
    if sum(sizes) != xs[axis]:
        raise NodeProblem(f"split sizes {sizes} do not add up to dimension {axis} ({xs[axis]})")
    outs, start = [], 0
    for s in sizes:
        starts = [0] * len(xs)
        ends = list(xs)
        starts[axis], ends[axis] = start, start + s
        outs.append(imp.b.slice(x, starts, ends, [1] * len(xs)))
        start += s
    return outs


@handler("Slice", attrs=("starts", "ends", "axes"))
def _slice(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    rank = len(xs)
    if imp.opset < 10 or attribute(node, "starts") is not None:
        starts, ends, axes, steps = attribute(node, "starts"), attribute(node, "ends"), attribute(node, "axes"), None
    else:
        starts = ints_of(imp, node, "-", 1, "the starts")
        ends = ints_of(imp, node, "-", 2, "the ends")
        axes = ints_of(imp, node, "-", 3, "the axes")
        steps = ints_of(imp, node, "-", 4, "the steps")
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    s_all, e_all, st_all = [0] * rank, list(xs), [1] * rank
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        a = normalize_axis(a, rank)
        d = xs[a]
        if st == 0:
            raise NodeProblem("a slice step is 0")
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if d == 0:
            s, e, st = 0, 0, 1
        elif st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
            e = max(e, s)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
            e = min(e, s)
        s_all[a], e_all[a], st_all[a] = s, e, st
    if s_all == [0] * rank and e_all == list(xs) and st_all == [1] * rank:
        return [x]
    return [imp.b.slice(x, s_all, e_all, st_all)]


@handler("Expand")
def _expand(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    shape = [int(d) for d in imp.static(node.input[1], "the target shape").reshape(-1)]
    out = np.broadcast_shapes(shape_of(x), tuple(shape))
    return [imp.b.broadcast(x, out)]


@handler("Tile")
def _tile(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    repeats = imp.static(node.input[1], "the repeats")
    if repeats.shape != (len(xs),):
        # (torch.onnx writes [1, 1] repeats for a chunk of Mamba's mixer: onnxruntime refuses
        # the model too)
        raise NodeProblem(f"the repeats must be a 1-D tensor of {len(xs)} counts (one per dim of the input), "
                          f"got shape {list(repeats.shape)}")
    reps = [int(r) for r in repeats]
    inter = [v for d in xs for v in (1, d)]
    big = [v for d, r in zip(xs, reps) for v in (r, d)]
    y = imp.b.broadcast(imp.b.reshape(x, inter), big)
    return [imp.b.reshape(y, [d * r for d, r in zip(xs, reps)])]


@handler("Gather", attrs=("axis",))
def _gather(imp: Importer, node: onnx.NodeProto):
    x, idx = imp.value(node.input[0]), imp.value(node.input[1])
    axis = normalize_axis(int(attribute(node, "axis", 0)), len(shape_of(x)))
    return [imp.b.op(g.GatherOp, [x, idx], axis=g.i64_attr(axis))]


@handler("Pad", attrs=("mode", "pads", "value", "paddings"))
def _pad(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    rank = len(xs)
    mode = attribute(node, "mode", "constant")
    pads = attribute(node, "pads") or attribute(node, "paddings")
    value = attribute(node, "value", 0.0)
    if pads is None:
        pads = [int(p) for p in imp.static(node.input[1], "the pads").reshape(-1)]
        cv = input_name(node, 2)
        if cv:
            value = np.asarray(imp.static(cv, "the constant value")).reshape(-1)[0].item()
        axes_name = input_name(node, 3)
        if axes_name:
            axes = [normalize_axis(int(a), rank) for a in imp.static(axes_name, "the axes").reshape(-1)]
            full = [0] * (2 * rank)
            for k, a in enumerate(axes):
                full[a], full[a + rank] = pads[k], pads[k + len(axes)]
            pads = full
    if len(pads) != 2 * rank:
        raise NodeProblem(f"pads {pads} need {2 * rank} entries")
    if mode != "constant":
        return [_pad_mode(imp, x, pads, mode)]
    # negative pads crop
    if any(p < 0 for p in pads):
        starts = [max(0, -pads[i]) for i in range(rank)]
        ends = [xs[i] - max(0, -pads[i + rank]) for i in range(rank)]
        x = imp.b.slice(x, starts, ends, [1] * rank)
        pads = [max(0, p) for p in pads]
    if not any(pads):
        return [x]
    return [imp.b.op(g.PadOp, [x], pads=g.i64_array(pads), value=g.f64_attr(float(value)))]


def _pad_mode(imp: Importer, x: SSAValue, pads: Sequence[int], mode: str) -> SSAValue:
    """edge / reflect / wrap padding, one axis at a time, with slices and concat."""
    rank = len(shape_of(x))
    if any(p < 0 for p in pads):
        raise NodeProblem(f"negative pads are not supported in mode '{mode}'")
    if mode not in ("edge", "reflect", "wrap"):
        raise NodeProblem(f"mode '{mode}' is not supported")
    for a in range(rank):
        before, after = pads[a], pads[a + rank]
        if not before and not after:
            continue
        xs = shape_of(x)
        d = xs[a]

        def piece(indices: list[int]) -> SSAValue | None:
            if not indices:
                return None
            idx = imp.materialise(np.array(indices, dtype=np.int64), "pad_idx")
            return imp.b.op(g.GatherOp, [x, idx], axis=g.i64_attr(a))

        if mode == "edge":
            lo, hi = [0] * before, [d - 1] * after
        elif mode == "reflect":
            if d < 2 or before >= d or after >= d:
                raise NodeProblem(f"reflect padding of {before}/{after} needs a dimension larger than {d}")
            lo = [before - i for i in range(before)]
            hi = [d - 2 - i for i in range(after)]
        else:
            lo = [(i - before) % d for i in range(before)]
            hi = [i % d for i in range(after)]
        parts = [p for p in (piece(lo), x, piece(hi)) if p is not None]
        x = imp.b.op(g.ConcatOp, parts, axis=g.i64_attr(a))
    return x


@handler("DepthToSpace", attrs=("blocksize", "mode"))
def _depth_to_space(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    n, c, h, w = shape_of(x)
    b = int(attribute(node, "blocksize"))
    if attribute(node, "mode", "DCR") == "DCR":
        y = imp.b.transpose(imp.b.reshape(x, (n, b, b, c // (b * b), h, w)), (0, 3, 4, 1, 5, 2))
    else:
        y = imp.b.transpose(imp.b.reshape(x, (n, c // (b * b), b, b, h, w)), (0, 1, 4, 2, 5, 3))
    return [imp.b.reshape(y, (n, c // (b * b), h * b, w * b))]


@handler("SpaceToDepth", attrs=("blocksize",))
def _space_to_depth(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    n, c, h, w = shape_of(x)
    b = int(attribute(node, "blocksize"))
    y = imp.b.transpose(imp.b.reshape(x, (n, c, h // b, b, w // b, b)), (0, 3, 5, 1, 2, 4))
    return [imp.b.reshape(y, (n, c * b * b, h // b, w // b))]


@handler("Trilu", attrs=("upper",))
def _trilu(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    k = int(np.asarray(imp.static(node.input[1], "k")).reshape(-1)[0]) if input_name(node, 1) else 0
    rows, cols = xs[-2], xs[-1]
    fn = np.triu if attribute(node, "upper", 1) else np.tril
    mask = fn(np.ones((rows, cols), dtype=np.bool_), k)
    return [imp.b.op(g.WhereOp, [imp.materialise(mask, "trilu_mask"), x, imp.b.scalar(0, x)])]


@handler("CumSum", "CumProd", attrs=("exclusive", "reverse"))
def _cumulative(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    axis = normalize_axis(int(np.asarray(imp.static(node.input[1], "the axis")).reshape(-1)[0]), len(shape_of(x)))
    return [imp.b.cumulative(x, axis, exclusive=bool(attribute(node, "exclusive", 0)),
                             reverse=bool(attribute(node, "reverse", 0)), product=node.op_type == "CumProd")]


@handler("OneHot", attrs=("axis",))
def _one_hot(imp: Importer, node: onnx.NodeProto):
    idx = imp.value(node.input[0])
    depth = int(np.asarray(imp.static(node.input[1], "the depth")).reshape(-1)[0])
    values = imp.static(node.input[2], "the values").reshape(-1)
    rank = len(shape_of(idx)) + 1
    axis = normalize_axis(int(attribute(node, "axis", -1)), rank)
    if not is_float_dtype(numpy_dtype_of(idx)):
        idx = imp.b.cast(idx, np.dtype(np.int64))
    else:
        idx = imp.b.cast(idx, np.dtype(np.int64))
    neg = imp.b.op(g.LessOp, [idx, imp.b.scalar(0, idx)])
    idx = imp.b.op(g.WhereOp, [neg, imp.b.op(g.AddOp, [idx, imp.b.scalar(depth, idx)]), idx])
    shape = list(shape_of(idx))
    shape.insert(axis, 1)
    idx = imp.b.reshape(idx, shape)
    iota = np.arange(depth, dtype=np.int64).reshape([-1 if i == axis else 1 for i in range(rank)])
    eq = imp.b.op(g.EqualOp, [idx, imp.materialise(iota, "iota")])
    off, on = imp.b.inline_constant(values[0]), imp.b.inline_constant(values[1])
    return [imp.b.op(g.WhereOp, [eq, on, off])]


def _resize_matrix(imp: Importer, node: onnx.NodeProto, n: int, out: int | None, scale: float | None, roi: tuple[float, float] | None) -> np.ndarray:
    """The [out, n] interpolation matrix of one axis: Resize is separable and
    linear, so the reference Resize of an identity basis gives its weights."""
    from onnx.reference import ReferenceEvaluator

    attrs = [a for a in node.attribute if a.name not in ("axes", "keep_aspect_ratio_policy")]
    eye = np.eye(n, dtype=np.float64)
    names = ["X", "roi", "scales", "sizes"]
    feeds: dict[str, np.ndarray] = {"X": eye}
    if roi is not None:
        feeds["roi"] = np.array([roi[0], 0.0, roi[1], 1.0], dtype=np.float32)
    if scale is not None:
        feeds["scales"] = np.array([scale, 1.0], dtype=np.float32)
    else:
        feeds["sizes"] = np.array([out, n], dtype=np.int64)
    inputs = [nm if nm in feeds else "" for nm in names]
    while inputs and not inputs[-1]:
        inputs.pop()
    rn = helper.make_node("Resize", inputs, ["Y"])
    rn.attribute.extend(attrs)
    vi = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()]
    m = helper.make_model(
        helper.make_graph([rn], "resize_basis", vi, [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)]),
        opset_imports=[helper.make_opsetid("", max(imp.opset, 19))],
    )
    (y,) = ReferenceEvaluator(m).run(None, feeds)
    return np.asarray(y)  # [out, n]


@handler("Resize", "Upsample", attrs=(
    "antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
    "extrapolation_value", "keep_aspect_ratio_policy", "mode", "nearest_mode", "scales", "height_scale", "width_scale",
))
def _resize(imp: Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    rank = len(xs)
    mode = attribute(node, "mode", "nearest")
    ctm = attribute(node, "coordinate_transformation_mode", "half_pixel")
    if node.op_type == "Upsample" or imp.opset < 11:
        # Upsample-7/9 and Resize-10: asymmetric coordinates, floor for nearest
        scales = attribute(node, "scales")
        if scales is None:
            scales = [float(s) for s in imp.static(node.input[1], "the scales").reshape(-1)]
        sizes, roi = None, None
        ctm = "asymmetric"
        node = helper.make_node("Resize", [], [], mode="linear" if mode in ("linear", "bilinear") else "nearest",
                                coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        mode = "linear" if mode in ("linear", "bilinear") else "nearest"
        axes = list(range(rank))
    else:
        axes = [normalize_axis(a, rank) for a in (attribute(node, "axes") or range(rank))]
        roi_v = imp.static(node.input[1], "the roi").reshape(-1) if input_name(node, 1) else None
        scales = [float(s) for s in imp.static(node.input[2], "the scales").reshape(-1)] if input_name(node, 2) else None
        sizes = [int(s) for s in imp.static(node.input[3], "the sizes").reshape(-1)] if input_name(node, 3) else None
        if scales is not None and len(scales) == 0:
            scales = None
        roi = None
        if ctm == "tf_crop_and_resize":
            if roi_v is None:
                raise NodeProblem("tf_crop_and_resize needs a roi")
            if float(attribute(node, "extrapolation_value", 0.0)) != 0.0:
                raise NodeProblem("a non-zero extrapolation_value is not supported")
            k = len(axes)
            roi = [(float(roi_v[i]), float(roi_v[i + k])) for i in range(k)]
    if mode not in ("nearest", "linear", "cubic"):
        raise NodeProblem(f"mode '{mode}' is not supported")
    outs: list[int] = []
    per_axis_scale: list[float | None] = []
    if scales is not None:
        for a, s in zip(axes, scales, strict=True):
            lo, hi = roi[axes.index(a)] if roi else (0.0, 1.0)
            outs.append(int(math.floor(xs[a] * (hi - lo) * s)) if roi else int(math.floor(xs[a] * s)))
            per_axis_scale.append(s)
    else:
        if sizes is None:
            raise NodeProblem("neither scales nor sizes is given")
        policy = attribute(node, "keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            outs = list(sizes)
            per_axis_scale = [None] * len(axes)
        else:
            ratios = [sz / xs[a] for a, sz in zip(axes, sizes)]
            s = min(ratios) if policy == "not_larger" else max(ratios)
            outs = [int(round(xs[a] * s)) for a in axes]
            if any(o != math.floor(xs[a] * s) for o, a in zip(outs, axes)):
                raise NodeProblem(f"keep_aspect_ratio_policy '{policy}' with these sizes is not supported")
            per_axis_scale = [s] * len(axes)
    y = x
    for k, a in enumerate(axes):
        n, out, s = xs[a], outs[k], per_axis_scale[k]
        if out == n and (s is None or s == 1.0) and not roi:
            continue
        m = _resize_matrix(imp, node, n, out, s, roi[k] if roi else None)
        if m.shape[0] != out:
            raise NodeProblem(f"axis {a}: expected {out} outputs, the basis gave {m.shape[0]}")
        one_hot = np.all((m == 0) | (m == 1)) and np.all(m.sum(axis=1) == 1)
        if not one_hot and not is_float_dtype(numpy_dtype_of(y)):
            raise NodeProblem(f"mode '{mode}' on {numpy_dtype_of(y)} is not supported")
        y = imp.b.resample_axis(y, a, m, name="resize")
    return [y]


@handler("GatherElements", attrs=("axis",))
def _gather_elements(imp: Importer, node: onnx.NodeProto):
    """out[.., n, ..] = x[.., idx[.., n, ..], ..] along `axis` (negative indices count from
    the end), as GraphBuilder.take_along_axis's one-hot select-and-sum."""
    x, idx = imp.value(node.input[0]), imp.value(node.input[1])
    xs, ish = shape_of(x), shape_of(idx)
    rank = len(xs)
    axis = normalize_axis(int(attribute(node, "axis", 0)), rank)
    d = xs[axis]
    # x restricted to idx's extent on the other axes
    ends = [ish[i] if i != axis else xs[i] for i in range(rank)]
    if ends != list(xs):
        x = imp.b.slice(x, [0] * rank, ends, [1] * rank)
    return [imp.b.take_along_axis(x, indices_in_range(imp.b, idx, d), axis)]


@handler("TopK", attrs=("axis", "largest", "sorted", "k"))
def _top_k(imp: Importer, node: onnx.NodeProto):
    """(values, indices) of the k largest or smallest along `axis`: graph.top_k's indices (the
    most extreme first, equal values in index order, as ONNX specifies; `sorted` = 0 allows
    any order, so the sorted one too) and the values taken along the axis at them. K must be
    known at import time (an initializer or constant; opset 1's attribute)."""
    x = imp.value(node.input[0])
    xs = shape_of(x)
    if not xs:
        raise NodeProblem("the input is a scalar; TopK needs rank 1 or more")
    axis = normalize_axis(int(attribute(node, "axis", -1)), len(xs))
    k_values = ints_of(imp, node, "k", 1, "K")
    if k_values is None or len(k_values) != 1:
        raise NodeProblem(f"K must hold exactly one integer, got {k_values}")
    (k,) = k_values
    if not 0 <= k <= xs[axis]:
        raise NodeProblem(f"K = {k} is out of range for axis {axis} of {xs[axis]} elements (0 <= K <= {xs[axis]})")
    idx = imp.b.op(g.TopKOp, [x], k=g.i64_attr(k), axis=g.i64_attr(axis),
                   largest=g.bool_attr(bool(attribute(node, "largest", 1))))
    return [imp.b.take_along_axis(x, idx, axis), idx]


@handler("ScatterElements", "Scatter", attrs=("axis", "reduction"))
def _scatter_elements(imp: Importer, node: onnx.NodeProto):
    """frontend/indexing.py's one-hot select along `axis` (Scatter: opset 9-10's name)."""
    x = imp.value(node.input[0])
    axis = normalize_axis(int(attribute(node, "axis", 0)), len(shape_of(x)))
    try:
        return [scatter_elements(imp.b, x, imp.value(node.input[1]), imp.value(node.input[2]), axis,
                                 attribute(node, "reduction", "none"))]
    except IndexingProblem as e:
        raise NodeProblem(str(e)) from None


@handler("ScatterND", attrs=("reduction",))
def _scatter_nd(imp: Importer, node: onnx.NodeProto):
    """frontend/indexing.py's one-hot select over the addressed leading dims."""
    try:
        return [scatter_nd(imp.b, imp.value(node.input[0]), imp.value(node.input[1]), imp.value(node.input[2]),
                           attribute(node, "reduction", "none"))]
    except IndexingProblem as e:
        raise NodeProblem(str(e)) from None


@handler("TensorScatter", attrs=("axis", "mode"))
def _tensor_scatter(imp: Importer, node: onnx.NodeProto):
    """A KV cache update: update's positions i along `axis` land at write_indices[b] + i (modulo
    the cache length in "circular" mode) of each batch entry b, as scatter_elements with those
    indices."""
    cache, update = imp.value(node.input[0]), imp.value(node.input[1])
    cs, us = shape_of(cache), shape_of(update)
    rank = len(cs)
    axis = normalize_axis(int(attribute(node, "axis", -2)), rank)
    mode = attribute(node, "mode", "linear")
    if mode not in ("linear", "circular"):
        raise NodeProblem(f"mode '{mode}' is not one of linear, circular")
    if axis == 0:
        raise NodeProblem("axis 0 is the batch axis; the sequence axis comes after it")
    s = us[axis]
    idx = imp.b.constant(np.arange(s, dtype=np.int64).reshape([1] * axis + [s] + [1] * (rank - axis - 1)), name="positions")
    if input_name(node, 2):
        w = imp.b.reshape(imp.b.cast(imp.value(node.input[2]), np.dtype(np.int64)), [cs[0]] + [1] * (rank - 1))
        idx = imp.b.op(g.AddOp, [w, idx])
    if mode == "circular":
        idx = imp.b.op(g.ModOp, [idx, imp.b.scalar(cs[axis], idx)])
    try:
        return [scatter_elements(imp.b, cache, imp.b.broadcast(idx, us), update, axis)]
    except IndexingProblem as e:
        raise NodeProblem(str(e)) from None


@handler("GatherND", attrs=("batch_dims",))
def _gather_nd(imp: Importer, node: onnx.NodeProto):
    """frontend/indexing.py: one graph.gather of the data's rows at the index tuples."""
    try:
        return [gather_nd(imp.b, imp.value(node.input[0]), imp.value(node.input[1]), int(attribute(node, "batch_dims", 0)))]
    except IndexingProblem as e:
        raise NodeProblem(str(e)) from None
