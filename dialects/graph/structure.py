"""Structure graph ops: reshape, transpose, concat, slice, broadcast, pad, reductions and top-k."""

from __future__ import annotations

import math
from abc import ABC
from collections.abc import Sequence

from xdsl.dialects.builtin import I64, BoolAttr, DenseArrayBase, FloatAttr, IntegerAttr, TensorType, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, var_operand_def
from xdsl.utils.exceptions import VerifyException

from infer.dialects.dtypes import element_type_of, format_shape, shape_of
from infer.dialects.graph.base import (
    bool_attr,
    DYNAMIC,
    f64_attr,
    FUNCTIONAL,
    i64_array,
    i64_attr,
    i64_values,
    normalize_axis,
    require_same_elem,
    TensorResultOp,
)


# --------------------------------------------------------------------------
# Structure
# --------------------------------------------------------------------------


@irdl_op_definition
class ReshapeOp(TensorResultOp):
    """Reinterpret the elements (row-major) in the result type's static shape."""

    name = "graph.reshape"
    input = operand_def(TensorType)
    assembly_format = "$input " + FUNCTIONAL

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
    assembly_format = "$input " + FUNCTIONAL

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
    assembly_format = "$inputs " + FUNCTIONAL

    def infer_result_types(self) -> list[TensorType]:
        if not self.inputs:
            raise VerifyException("needs at least one input")
        elem = require_same_elem(self, list(self.inputs))
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
    assembly_format = "$input " + FUNCTIONAL

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
    assembly_format = "$input " + FUNCTIONAL

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
    assembly_format = "$input " + FUNCTIONAL

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
    assembly_format = "$input " + FUNCTIONAL

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


@irdl_op_definition
class TopKOp(TensorResultOp):
    """Indices (i64) of the `k` largest elements along `axis` (the `k` smallest when `largest`
    is false), the most extreme first; equal values in index order (ONNX TopK with sorted = 1,
    torch.topk). NaN ranks above every number (numpy's and torch's order): first among the
    largest, last among the smallest. The values are the input taken along `axis` at these
    indices (the frontends' one-hot select, `GraphBuilder.take_along_axis`)."""

    name = "graph.top_k"
    input = operand_def(TensorType)
    k = prop_def(IntegerAttr[I64])
    axis = prop_def(IntegerAttr[I64], default_value=i64_attr(-1))
    largest = prop_def(BoolAttr, default_value=bool_attr(True))
    assembly_format = "$input " + FUNCTIONAL

    def normalized_axis(self) -> int:
        return normalize_axis(self.name, self.axis.value.data, len(shape_of(self.input)))

    def infer_result_types(self) -> list[TensorType]:
        x = list(shape_of(self.input))
        if not x:
            raise VerifyException("the input must have rank 1 or more, got a scalar")
        axis = self.normalized_axis()
        k = self.k.value.data
        if k < 0 or (x[axis] != DYNAMIC and k > x[axis]):
            raise VerifyException(f"k = {k} is out of range for an axis of {x[axis]} elements "
                                  f"(0 <= k <= {x[axis]})")
        x[axis] = k
        return [TensorType(i64, x)]
