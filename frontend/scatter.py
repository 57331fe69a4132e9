"""Scatters as one-hot selects of the graph ops there are (the ONNX frontend's ScatterElements,
Scatter and ScatterND; torch.export's scatter and index_put could take the same).

An update lands where its index equals a position: with E[j, d] = (index[j] == d) over the
updates j and the positions d of the scattered axis (or of the addressed leading dims, for
ScatterND, flattened), every position's new value is a reduction over j of the updates E
selects, and a position no update selects keeps its value:

    hit[d] = any_j E[j, d]          (graph.reduce_max of the bool)
    new[d] = sum_j where(E[j, d], u[j], 0)           reduction none or add
             prod_j where(E[j, d], u[j], 1)          mul
             max_j / min_j where(E[j, d], u[j], -+inf)   max / min
    out[d] = where(hit[d], combine(x[d], new[d]), x[d])

combine is new itself (none), x + new, x * new, max, min. Exact where each position takes one
update (what ONNX requires of reduction none); several updates of one position are summed
(add) in another order than the sequential reference (a rounding apart), multiplied likewise,
and max/min are exact. The work is positions x updates per element: meant for the scatters of
indices into small axes (masks, cache rows, one-hot labels), not for a gather's inverse over a
large table.
"""

from __future__ import annotations

import math
import numpy as np
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import numpy_dtype_of, shape_of
from infer.frontend.builder import GraphBuilder

REDUCTIONS = ("none", "add", "mul", "max", "min")


class ScatterProblem(ValueError):
    """A scatter this decomposition does not take (the frontend names the node)."""


def _identity(reduction: str, dtype: np.dtype) -> float | int:
    """The value a position's reduction starts from (what an unselected update contributes)."""
    if reduction == "mul":
        return 1
    if reduction in ("max", "min"):
        low = -np.inf if dtype.kind == "f" else np.iinfo(dtype).min
        high = np.inf if dtype.kind == "f" else np.iinfo(dtype).max
        return low if reduction == "max" else high
    return 0


def _combine(b: GraphBuilder, x: SSAValue, new: SSAValue, hit: SSAValue, reduction: str) -> SSAValue:
    """where(hit, combine(x, new), x)."""
    if reduction != "none":
        op = {"add": g.AddOp, "mul": g.MulOp, "max": g.MaximumOp, "min": g.MinimumOp}[reduction]
        new = b.op(op, [x, new])
    return b.op(g.WhereOp, [hit, new, x])


def _select_reduce(b: GraphBuilder, eq: SSAValue, updates: SSAValue, axis: int, reduction: str) -> tuple[SSAValue, SSAValue]:
    """(hit, new) reduced over the updates' axis `axis` of eq (bool) and updates (broadcast
    against eq), that axis dropped."""
    dtype = numpy_dtype_of(updates)
    hit = b.reduce(g.ReduceMaxOp, eq, [axis], False)
    picked = b.op(g.WhereOp, [eq, updates, b.scalar(_identity(reduction, dtype), updates)])
    op = {"none": g.ReduceSumOp, "add": g.ReduceSumOp, "mul": g.ReduceProdOp, "max": g.ReduceMaxOp,
          "min": g.ReduceMinOp}[reduction]
    return hit, b.reduce(op, picked, [axis], False)


def _check(reduction: str, x: SSAValue, updates: SSAValue) -> None:
    if reduction not in REDUCTIONS:
        raise ScatterProblem(f"reduction '{reduction}' is not one of {', '.join(REDUCTIONS)}")
    if numpy_dtype_of(x) != numpy_dtype_of(updates):
        raise ScatterProblem(f"the updates are {numpy_dtype_of(updates)}, the data {numpy_dtype_of(x)}")
    if numpy_dtype_of(x) == np.bool_ and reduction != "none":
        raise ScatterProblem(f"reduction '{reduction}' of bool data is not supported")


def _in_range(b: GraphBuilder, idx: SSAValue, size: int) -> SSAValue:
    """Indices as i64 with the negative ones counted from the end."""
    idx = b.cast(idx, np.dtype(np.int64))
    return b.op(g.WhereOp, [b.op(g.LessOp, [idx, b.scalar(0, idx)]), b.op(g.AddOp, [idx, b.scalar(size, idx)]), idx])


def scatter_elements(b: GraphBuilder, x: SSAValue, indices: SSAValue, updates: SSAValue, axis: int,
                     reduction: str = "none") -> SSAValue:
    """out = x with out[.., indices[.., j, ..], ..] (along `axis`) combined with updates[.., j, ..]
    (ONNX ScatterElements; indices and updates one shape, at most x's on the other axes)."""
    _check(reduction, x, updates)
    xs, ish = shape_of(x), shape_of(indices)
    rank = len(xs)
    if len(ish) != rank or shape_of(updates) != ish:
        raise ScatterProblem(f"indices {list(ish)} and updates {list(shape_of(updates))} must have one shape "
                             f"of the data's rank {rank}")
    if any(ish[i] > xs[i] for i in range(rank) if i != axis):
        raise ScatterProblem(f"indices {list(ish)} are larger than the data {list(xs)} off axis {axis}")
    d = xs[axis]
    idx = _in_range(b, indices, d)
    # E[.., j, p, ..] = idx[.., j, ..] == p: a new axis of the positions after `axis`
    ie = b.reshape(idx, [*ish[:axis + 1], 1, *ish[axis + 1:]])
    iota = np.arange(d, dtype=np.int64).reshape([1] * (axis + 1) + [d] + [1] * (rank - axis - 1))
    eq = b.op(g.EqualOp, [ie, b.constant(iota, name="iota")])
    ue = b.reshape(updates, [*ish[:axis + 1], 1, *ish[axis + 1:]])
    hit, new = _select_reduce(b, eq, ue, axis, reduction)  # shape ish with d at `axis`
    covered = [d if i == axis else ish[i] for i in range(rank)]
    if covered != list(xs):  # the positions no index reaches: padded as not hit
        pads = [0] * rank + [xs[i] - covered[i] for i in range(rank)]
        hit = b.op(g.PadOp, [hit], pads=g.i64_array(pads))
        new = b.op(g.PadOp, [new], pads=g.i64_array(pads))
    return _combine(b, x, new, hit, reduction)


def scatter_nd(b: GraphBuilder, x: SSAValue, indices: SSAValue, updates: SSAValue, reduction: str = "none") -> SSAValue:
    """out = x with the slices out[indices[q]] (indices' last dim: k leading coordinates)
    combined with updates[q] (ONNX ScatterND)."""
    _check(reduction, x, updates)
    xs, ish, us = shape_of(x), shape_of(indices), shape_of(updates)
    if not ish:
        raise ScatterProblem("the indices must have rank 1 or more")
    k = ish[-1]
    if not 1 <= k <= len(xs):
        raise ScatterProblem(f"the indices address {k} dims of a rank-{len(xs)} data")
    if list(us) != [*ish[:-1], *xs[k:]]:
        raise ScatterProblem(f"the updates must have shape {[*ish[:-1], *xs[k:]]} (the indices' leading dims and "
                             f"the data's dims after the {k} addressed), got {list(us)}")
    P, R, N = math.prod(xs[:k]), math.prod(xs[k:]), math.prod(ish[:-1])
    # flat positions: sum_i index_i * stride_i, each index counted from the end when negative
    strides = [math.prod(xs[i + 1:k]) for i in range(k)]
    flat: SSAValue | None = None
    for i in range(k):
        part = _in_range(b, b.slice_dim(indices, len(ish) - 1, i, i + 1), xs[i])
        part = b.op(g.MulOp, [part, b.scalar(strides[i], part)]) if strides[i] != 1 else part
        flat = part if flat is None else b.op(g.AddOp, [flat, part])
    assert flat is not None
    eq = b.op(g.EqualOp, [b.reshape(flat, [N, 1, 1]), b.constant(np.arange(P, dtype=np.int64).reshape(1, P, 1), name="iota")])
    hit, new = _select_reduce(b, eq, b.reshape(updates, [N, 1, R]), 0, reduction)  # [P, 1], [P, R]
    x2 = b.reshape(x, [P, R])
    return b.reshape(_combine(b, x2, new, hit, reduction), xs)


def reduction_of(name: str | bytes | None) -> str:
    """ONNX's `reduction` attribute as a string ('none' when absent)."""
    if name is None:
        return "none"
    return name.decode() if isinstance(name, bytes) else str(name)
