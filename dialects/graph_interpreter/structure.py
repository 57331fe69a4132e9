"""Graph-interpreter kernels of values and structure: constants, weights from the store,
reshape/transpose/concat/slice/broadcast/pad, and reductions."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from xdsl.ir import Operation

from infer.dialects import graph as g
from infer.dialects.dtypes import dense_to_numpy, format_shape
from infer.dialects.graph_interpreter.core import (
    bool_of,
    Env,
    float_of,
    int_of,
    InterpreterError,
    is_float_dtype,
    kernel_for,
    result_type,
    upcast,
)
from infer.dialects.graph_interpreter.elementwise import int_div
from infer.dialects.weight_refs import stored_weight
from infer.dialects.weights import WeightStoreError


# -- constants and weights ---------------------------------------------------


@kernel_for(g.ConstantOp)
def _constant(op: g.ConstantOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    try:
        return dense_to_numpy(op.value)
    except ValueError as e:
        raise InterpreterError(str(e)) from None


@kernel_for(g.WeightOp)
def _weight(op: g.WeightOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    try:
        return stored_weight(op, env.weights(op))
    except (WeightStoreError, ValueError) as e:
        raise InterpreterError(f"{op.name} @{op.weight_key}: {e}") from None

# -- structure ------------------------------------------------------------------------------------


@kernel_for(g.ReshapeOp)
def _reshape(op: g.ReshapeOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    shape = result_type(op).get_shape()
    if math.prod(shape) != xs[0].size:
        raise InterpreterError(
            f"{op.name}: cannot reshape {format_shape(xs[0].shape)} ({xs[0].size} elements) to {format_shape(shape)}"
        )
    return xs[0].reshape(shape)


@kernel_for(g.TransposeOp)
def _transpose(op: g.TransposeOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(xs[0], g.i64_values(op.perm)))


@kernel_for(g.ConcatOp)
def _concat(op: g.ConcatOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    axis = g.normalize_axis(op.name, int_of(op.axis), xs[0].ndim)
    return np.concatenate(xs, axis=axis)


@kernel_for(g.SliceOp)
def _slice(op: g.SliceOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    index = tuple(
        slice(s, e if e >= 0 else None, st)
        for s, e, st in zip(g.i64_values(op.starts), g.i64_values(op.ends), g.i64_values(op.steps), strict=True)
    )
    return np.ascontiguousarray(xs[0][index])


@kernel_for(g.BroadcastOp)
def _broadcast(op: g.BroadcastOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    shape = result_type(op).get_shape()
    try:
        return np.broadcast_to(xs[0], shape)
    except ValueError:
        raise InterpreterError(f"{op.name}: cannot broadcast {format_shape(xs[0].shape)} to {format_shape(shape)}") from None


@kernel_for(g.PadOp)
def _pad(op: g.PadOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = xs[0]
    pads = g.i64_values(op.pads)
    n = x.ndim
    value = float_of(op.value)
    if x.dtype == np.bool_:
        fill: Any = value != 0
    elif is_float_dtype(x.dtype):
        fill = x.dtype.type(value)
    else:
        fill = int(value)
    return np.pad(x, [(pads[i], pads[i + n]) for i in range(n)], constant_values=fill)


# -- reductions --------------------------------------------------------------------------------------


def _reduce_axes(op: g.ReduceOp) -> tuple[int, ...]:
    return op.reduced_axes()


def int_mean(op: Operation, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    count = math.prod(x.shape[a] for a in axes)
    if count == 0:
        raise InterpreterError(f"{op.name}: mean over zero elements")
    s = np.sum(x, axis=axes, keepdims=True, dtype=np.int64 if x.dtype != np.uint64 else np.uint64)
    q = int_div(op, s, np.asarray(count, dtype=s.dtype))
    return q


@kernel_for(g.ReduceSumOp, g.ReduceMeanOp, g.ReduceMaxOp, g.ReduceMinOp, g.ReduceProdOp)
def _reduce(op: g.ReduceOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    axes = _reduce_axes(op)
    keep = bool_of(op.keepdims)
    is_int = x.dtype == np.bool_ or np.issubdtype(x.dtype, np.integer)
    acc = x.dtype
    try:
        match op:
            case g.ReduceSumOp():
                y = np.sum(x, axis=axes, keepdims=True, dtype=acc)
            case g.ReduceProdOp():
                y = np.prod(x, axis=axes, keepdims=True, dtype=acc)
            case g.ReduceMaxOp():
                y = np.max(x, axis=axes, keepdims=True)
            case g.ReduceMinOp():
                y = np.min(x, axis=axes, keepdims=True)
            case g.ReduceMeanOp() if is_int:
                y = int_mean(op, x, axes)
            case _:
                y = np.mean(x, axis=axes, keepdims=True, dtype=x.dtype)
    except ValueError as e:  # max/min over an empty axis
        raise InterpreterError(f"{op.name}: {e}") from None
    if not keep:
        y = y.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes))
    return y


@kernel_for(g.ArgmaxOp, g.ArgminOp)
def _arg_reduce(op: g.ArgReduceOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    (axis,) = _reduce_axes(op)
    if x.shape[axis] == 0:
        raise InterpreterError(f"{op.name}: arg-reduction over an empty axis")
    fn = np.argmax if isinstance(op, g.ArgmaxOp) else np.argmin
    return fn(x, axis=axis, keepdims=bool_of(op.keepdims)).astype(np.int64)


@kernel_for(g.TopKOp)
def _top_k(op: g.TopKOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    """The stable sort of graph.top_k's definition. Largest first: the ascending stable sort
    of the axis reversed, read backwards (equal values then come in index order, NaN first
    as numpy's sort puts it last); smallest first: the ascending stable sort (NaN last)."""
    x = upcast(xs[0])
    axis = op.normalized_axis()
    k = op.k.value.data
    n = x.shape[axis]
    if op.largest.value.data:
        order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        order = (n - 1) - np.flip(order, axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    return np.take(order, np.arange(k), axis=axis).astype(np.int64)
