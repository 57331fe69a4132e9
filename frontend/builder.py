"""GraphBuilder: the one way frontends emit graph-level IR.

    b = GraphBuilder()
    x = b.input("x", (1, 3, 224, 224), np.float32)
    w = b.weight("conv1.weight", array)           # goes to the weight store, not the text
    y = b.op(graph.Conv2dOp, [x, w], stride=graph.i64_array([2, 2]))
    y = b.reshape(y, (1, 64 * 112 * 112))         # shaping helpers, below
    module = b.finish([y], ["logits"])

Result types come from each op's own shape inference, so a frontend states
only operands and attributes; ops whose result type is their meaning (cast,
reshape, broadcast) take `result_type=`, or go through the helpers `reshape`,
`cast`, `broadcast`, `transpose`, `slice`, `slice_dim`, `reduce` and `scalar`
that every frontend shares. A helper whose op would not change its operand
(same shape, same element type, identity permutation) returns the operand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    f32,
)
from xdsl.ir import Attribute, Block, Region, SSAValue

from infer.dialects import graph
from infer.dialects.dtypes import (
    dense_attr,
    element_type_of,
    from_numpy_dtype,
    is_float,
    numpy_dtype_of,
    shape_of,
    tensor_type,
)
from infer.dialects.weights import WeightStore, attach_weights

NAME_ATTR = "graph.name"
"""Argument/result attribute holding the model's own input/output name."""

INLINE_CONSTANT_LIMIT = 16
"""Constants with more elements than this become weights (kept out of the text)."""

DType = np.dtype | type | Attribute
"""An element type as a numpy dtype (or scalar type) or as a builtin element type."""


def _element_type(dtype: DType) -> Attribute:
    return dtype if isinstance(dtype, Attribute) else from_numpy_dtype(np.dtype(dtype))


class GraphBuilder:
    def __init__(self, store: WeightStore | None = None):
        self.store = store or WeightStore()
        self.block = Block()
        self.input_names: list[str] = []

    # -- values ----------------------------------------------------------
    def input(self, name: str, shape: Sequence[int], dtype: DType) -> SSAValue:
        arg = self.block.insert_arg(TensorType(_element_type(dtype), list(shape)), len(self.block.args))
        self.input_names.append(name)
        return arg

    def weight(self, name: str, array: np.ndarray) -> SSAValue:
        """Add `array` to the weight store (fresh name if taken) and reference it."""
        key = self.store.add(name, np.asarray(array))
        op = graph.WeightOp(key, tensor_type(array.shape, array.dtype))
        self.block.add_op(op)
        return op.output

    def file_weight(self, name: str, shape: Sequence[int], dtype: np.dtype | type) -> SSAValue:
        """Reference a weight already in the store's backing file (no copy)."""
        op = graph.WeightOp(name, tensor_type(tuple(shape), dtype))
        self.block.add_op(op)
        return op.output

    def constant(self, array: np.ndarray | float | int, dtype: np.dtype | type | None = None, name: str = "const") -> SSAValue:
        """A `graph.constant`, or a weight named `name` when it has more than
        INLINE_CONSTANT_LIMIT elements."""
        array = np.asarray(array, dtype=dtype)
        if array.size > INLINE_CONSTANT_LIMIT:
            return self.weight(name, array)
        return self.inline_constant(array)

    def inline_constant(self, array: np.ndarray | float | int, dtype: np.dtype | type | None = None) -> SSAValue:
        """A `graph.constant` in the text whatever its size."""
        op = graph.ConstantOp(dense_attr(np.asarray(array, dtype=dtype)))
        self.block.add_op(op)
        return op.output

    def scalar(self, value: float | int | bool, like: SSAValue) -> SSAValue:
        """A 0-d constant with the element type of `like` (to broadcast against it)."""
        return self.inline_constant(np.asarray(value, dtype=numpy_dtype_of(like)))

    def op(
        self,
        op_type: type[graph.GraphOp],
        operands: Sequence[SSAValue | None],
        result_type: Attribute | None = None,
        **properties: Attribute,
    ) -> SSAValue:
        """Append a graph op; its result type is inferred unless given."""
        # An absent optional operand (e.g. a bias) is passed as None; each op
        # has at most one optional operand, so dropping it is unambiguous.
        present = [o for o in operands if o is not None]
        if result_type is None:
            op = op_type.inferred(present, dict(properties))
        else:
            op = op_type.create(operands=present, result_types=[result_type], properties=dict(properties))
        self.block.add_op(op)
        return op.results[0]

    # -- shaping helpers -------------------------------------------------
    def reshape(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        shape = tuple(int(d) for d in shape)
        if shape_of(x) == shape:
            return x
        return self.op(graph.ReshapeOp, [x], TensorType(element_type_of(x), shape))

    def cast(self, x: SSAValue, dtype: DType, saturate: bool = False, round_mode: str = "up") -> SSAValue:
        """`x` as `dtype` (`x` itself when it has that type); `saturate` and `round_mode`
        matter for the 8- and 4-bit float results only (graph.cast)."""
        element_type = _element_type(dtype)
        if element_type_of(x) == element_type:
            return x
        properties = {}
        if saturate:
            properties["saturate"] = graph.bool_attr(True)
        if round_mode != "up":
            properties["round_mode"] = StringAttr(round_mode)
        return self.op(graph.CastOp, [x], TensorType(element_type, shape_of(x)), **properties)

    def broadcast(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        shape = tuple(int(d) for d in shape)
        if shape_of(x) == shape:
            return x
        return self.op(graph.BroadcastOp, [x], TensorType(element_type_of(x), shape))

    def transpose(self, x: SSAValue, perm: Sequence[int]) -> SSAValue:
        """Result dim i is x's dim perm[i]."""
        perm = [int(p) for p in perm]
        if perm == list(range(len(perm))):
            return x
        return self.op(graph.TransposeOp, [x], perm=graph.i64_array(perm))

    def slice(self, x: SSAValue, starts: Sequence[int], ends: Sequence[int], steps: Sequence[int] | None = None) -> SSAValue:
        """`graph.slice` with one normalized (start, end, step) per dimension (steps default 1)."""
        steps = [1] * len(starts) if steps is None else steps
        return self.op(
            graph.SliceOp, [x],
            starts=graph.i64_array(starts), ends=graph.i64_array(ends), steps=graph.i64_array(steps),
        )

    def slice_dim(self, x: SSAValue, dim: int, start: int, end: int, step: int = 1) -> SSAValue:
        """x[..., start:end:step, ...] along dimension `dim`, every other dimension whole."""
        shape = shape_of(x)
        starts, ends, steps = [0] * len(shape), list(shape), [1] * len(shape)
        starts[dim], ends[dim], steps[dim] = start, end, step
        return self.slice(x, starts, ends, steps)

    def reduce(self, op_type: type[graph.ReduceOp], x: SSAValue, axes: Sequence[int], keepdims: bool) -> SSAValue:
        return self.op(op_type, [x], axes=graph.i64_array(axes), keepdims=graph.bool_attr(keepdims))

    def take_along_axis(self, x: SSAValue, idx: SSAValue, axis: int) -> SSAValue:
        """out[.., n, ..] = x[.., idx[.., n, ..], ..] along `axis` (numpy.take_along_axis; idx an
        integer tensor of x's rank, in [0, x.shape[axis]), and of x's extent on the other axes),
        as a one-hot select-and-sum: sum_d where(idx == d, x[.., d, ..], 0). Exact: one term of
        each sum is selected (a -0.0 comes out +0.0)."""
        xs, ish = shape_of(x), shape_of(idx)
        rank, d = len(xs), xs[axis]
        xe = self.reshape(x, [*xs[:axis], 1, d, *xs[axis + 1:]])
        ie = self.reshape(idx, [*ish[:axis], ish[axis], 1, *ish[axis + 1:]])
        iota = np.arange(d, dtype=numpy_dtype_of(idx)).reshape([1] * (axis + 1) + [d] + [1] * (rank - axis - 1))
        eq = self.op(graph.EqualOp, [ie, self.constant(iota, name="iota")])
        if numpy_dtype_of(x) == np.bool_:
            return self.reduce(graph.ReduceMaxOp, self.op(graph.AndOp, [eq, xe]), [axis + 1], False)
        picked = self.op(graph.WhereOp, [eq, xe, self.scalar(0, xe)])
        return self.reduce(graph.ReduceSumOp, picked, [axis + 1], False)

    def cumulative(self, x: SSAValue, axis: int, exclusive: bool = False, reverse: bool = False,
                   product: bool = False) -> SSAValue:
        """The cumulative sum (product) along `axis`: out[j] = the sum (product) of x[i] over the i
        a mask m[i, j] takes (i <= j, i < j when exclusive, reversed when reverse). A float sum is
        x @ m (the matrix unit's work); a product, and an integer sum (exact), reduce
        where(m, x, identity) over i."""
        xs = shape_of(x)
        rank, n = len(xs), xs[axis]
        i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")  # out[j] = sum_i x[i] * m[i, j]
        if reverse:
            m = (i > j) if exclusive else (i >= j)
        else:
            m = (i < j) if exclusive else (i <= j)
        dtype = numpy_dtype_of(x)
        if not product and is_float(element_type_of(x)):
            perm = [d for d in range(rank) if d != axis] + [axis]
            y = self.op(graph.MatmulOp, [self.transpose(x, perm), self.constant(m.astype(dtype), name="cumsum_mask")])
            return self.transpose(y, list(np.argsort(perm)))
        # x[.., i, 1, ..] against m[i, j]: the reduction over i leaves j where the axis was. A
        # reverse one runs forward on x reversed, and is reversed back: its factors then multiply
        # from the end, as a sequential scan from the end does (the same bits for floats)
        if reverse:
            x = self.slice_dim(x, axis, n - 1, -1, -1)
            m = (i < j) if exclusive else (i <= j)
        xe = self.reshape(x, [*xs[:axis + 1], 1, *xs[axis + 1:]])
        mask = self.constant(m.reshape([n, n] + [1] * (rank - axis - 1)), name="cumulative_mask")
        picked = self.op(graph.WhereOp, [mask, xe, self.scalar(1 if product else 0, xe)])
        y = self.reduce(graph.ReduceProdOp if product else graph.ReduceSumOp, picked, [axis], False)
        return self.slice_dim(y, axis, n - 1, -1, -1) if reverse else y

    def resample_axis(self, x: SSAValue, axis: int, matrix: np.ndarray, name: str = "resample") -> SSAValue:
        """x resampled along `axis` by the [out, n] interpolation `matrix` (row o: the weights
        of output position o over the n inputs): resizing and upsampling are separable and
        linear, one such product per axis. A one-hot matrix (nearest neighbour) is a gather
        of compile-time indices, exact; otherwise the axis is moved last and multiplied by the
        compile-time matrix (a product graph-raise-linear makes a graph.linear); the caller
        checks that x holds floats then."""
        rank = len(shape_of(x))
        matrix = np.asarray(matrix)
        if np.all((matrix == 0) | (matrix == 1)) and np.all(matrix.sum(axis=1) == 1):
            index = self.constant(matrix.argmax(axis=1).astype(np.int64), name=f"{name}_index")
            return self.op(graph.GatherOp, [x, index], axis=graph.i64_attr(axis))
        perm = [d for d in range(rank) if d != axis] + [axis]
        moved = self.transpose(x, perm)
        weight = self.constant(np.ascontiguousarray(matrix.T).astype(numpy_dtype_of(x)), name=f"{name}_weight")
        return self.transpose(self.op(graph.MatmulOp, [moved, weight]), list(np.argsort(perm)))

    def normalize(self, x: SSAValue, axes: Sequence[int], eps: float) -> tuple[SSAValue, SSAValue, SSAValue]:
        """(x - mean) / sqrt(var + eps) over `axes` (the biased variance), with the mean and
        1 / sqrt(var + eps) (kept dims): instance, group and layer normalization's parts."""
        mean = self.reduce(graph.ReduceMeanOp, x, axes, True)
        d = self.op(graph.SubOp, [x, mean])
        var = self.reduce(graph.ReduceMeanOp, self.op(graph.MulOp, [d, d]), axes, True)
        inv = self.op(graph.RsqrtOp, [self.op(graph.AddOp, [var, self.scalar(eps, var)])])
        return self.op(graph.MulOp, [d, inv]), mean, inv

    def group_norm(self, x: SSAValue, groups: int, scale: SSAValue | None, bias: SSAValue | None,
                   eps: float) -> SSAValue:
        """x [N, C, ...] normalized over each group of C / groups channels and their positions,
        then times scale [C] plus bias [C] per channel (ONNX GroupNormalization-21,
        torch.nn.GroupNorm). The caller checks that groups divides C."""
        xs = shape_of(x)
        n, c = xs[0], xs[1]
        grouped = self.reshape(x, (n, groups, math.prod(xs) // (n * groups) if n * groups else 0))
        y = self.reshape(self.normalize(grouped, [2], eps)[0], xs)
        per_channel = (c, *([1] * (len(xs) - 2)))
        if scale is not None:
            y = self.op(graph.MulOp, [y, self.reshape(scale, per_channel)])
        if bias is not None:
            y = self.op(graph.AddOp, [y, self.reshape(bias, per_channel)])
        return y

    def conv3d(self, x: SSAValue, w: SSAValue, bias: SSAValue | None, stride: Sequence[int],
               pads: Sequence[int], dilation: Sequence[int], groups: int) -> SSAValue:
        """A 3-D convolution (x [N, C, D, H, W], w [O, C / groups, KD, KH, KW], pads
        [d0, h0, w0, d1, h1, w1]) as one graph.conv2d: the KD depth taps of every output depth
        become input channels (x padded along D, one strided slice per tap, [N.OD, C.KD, H, W] in
        channel-major order c.KD + kd, which is w's own [O, C / groups . KD, KH, KW] layout, so
        the groups stay contiguous), and the 2-D conv's batch of N.OD images is the output's
        depth. The program stays one conv kernel of KD times the input's bytes."""
        n, c, d, h, wd = shape_of(x)
        o, cg, kd, kh, kw = shape_of(w)
        sd, sh, sw = stride
        dd, dh, dw = dilation
        if pads[0] or pads[3]:
            x = self.op(graph.PadOp, [x], pads=graph.i64_array([0, 0, pads[0], 0, 0, 0, 0, pads[3], 0, 0]))
            d += pads[0] + pads[3]
        od = (d - dd * (kd - 1) - 1) // sd + 1
        taps = [self.reshape(self.slice_dim(x, 2, t * dd, t * dd + sd * (od - 1) + 1, sd), (n, c, od, 1, h, wd))
                for t in range(kd)]
        stacked = taps[0] if kd == 1 else self.op(graph.ConcatOp, taps, axis=graph.i64_attr(3))
        images = self.reshape(self.transpose(stacked, (0, 2, 1, 3, 4, 5)), (n * od, c * kd, h, wd))
        y = self.op(graph.Conv2dOp, [images, self.reshape(w, (o, cg * kd, kh, kw)), bias],
                    stride=graph.i64_array([sh, sw]), padding=graph.i64_array([pads[1], pads[2], pads[4], pads[5]]),
                    dilation=graph.i64_array([dh, dw]), groups=graph.i64_attr(groups))
        _, _, oh, ow = shape_of(y)
        return self.transpose(self.reshape(y, (n, od, o, oh, ow)), (0, 2, 1, 3, 4))

    # -- finishing -------------------------------------------------------
    def finish(self, outputs: Sequence[SSAValue], output_names: Sequence[str] | None = None, func_name: str = "main") -> ModuleOp:
        output_names = list(output_names or [f"output{i}" for i in range(len(outputs))])
        self.block.add_op(func.ReturnOp(*outputs))
        fn = func.FuncOp(
            func_name,
            ([a.type for a in self.block.args], [o.type for o in outputs]),
            Region(self.block),
            arg_attrs=_name_attrs(self.input_names),
            res_attrs=_name_attrs(output_names),
        )
        module = ModuleOp([fn])
        attach_weights(module, self.store)
        module.verify()
        return module


def _name_attrs(names: Sequence[str]) -> ArrayAttr:
    return ArrayAttr([DictionaryAttr({NAME_ATTR: StringAttr(n)}) for n in names])


__all__ = ["GraphBuilder", "NAME_ATTR", "INLINE_CONSTANT_LIMIT"]
