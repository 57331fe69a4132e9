"""Ops addressed by runtime indices, as the graph ops there are: scatters as one-hot selects
(the ONNX frontend's ScatterElements, Scatter, ScatterND and TensorScatter; torch.export's
scatter and index_put could take the same) and GatherND as one `graph.gather` of rows.

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
from collections.abc import Sequence

import numpy as np
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import numpy_dtype_of, shape_of
from infer.frontend.builder import GraphBuilder

REDUCTIONS = ("none", "add", "mul", "max", "min")


class IndexingProblem(ValueError):
    """An indexing op these decompositions do not take (the frontend names the node)."""


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
        raise IndexingProblem(f"reduction '{reduction}' is not one of {', '.join(REDUCTIONS)}")
    if numpy_dtype_of(x) != numpy_dtype_of(updates):
        raise IndexingProblem(f"the updates are {numpy_dtype_of(updates)}, the data {numpy_dtype_of(x)}")
    if numpy_dtype_of(x) == np.bool_ and reduction != "none":
        raise IndexingProblem(f"reduction '{reduction}' of bool data is not supported")


def indices_in_range(b: GraphBuilder, idx: SSAValue, size: int) -> SSAValue:
    """Indices into an axis of `size` as i64, the negative ones counted from the end."""
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
        raise IndexingProblem(f"indices {list(ish)} and updates {list(shape_of(updates))} must have one shape "
                             f"of the data's rank {rank}")
    if any(ish[i] > xs[i] for i in range(rank) if i != axis):
        raise IndexingProblem(f"indices {list(ish)} are larger than the data {list(xs)} off axis {axis}")
    d = xs[axis]
    idx = indices_in_range(b, indices, d)
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


def _flat_positions(b: GraphBuilder, indices: SSAValue, dims: Sequence[int]) -> SSAValue:
    """The index tuples of `indices` (its last dim: one coordinate per dim of `dims`, negative
    ones counted from the end) as row-major positions in prod(dims), indices' last dim dropped."""
    ish = shape_of(indices)
    strides = [math.prod(dims[i + 1:]) for i in range(len(dims))]
    flat: SSAValue | None = None
    for i, size in enumerate(dims):
        part = indices_in_range(b, b.slice_dim(indices, len(ish) - 1, i, i + 1), size)
        part = b.op(g.MulOp, [part, b.scalar(strides[i], part)]) if strides[i] != 1 else part
        flat = part if flat is None else b.op(g.AddOp, [flat, part])
    assert flat is not None
    return b.reshape(flat, ish[:-1])


def _check_tuples(ish: Sequence[int], rank: int) -> int:
    if not ish:
        raise IndexingProblem("the indices must have rank 1 or more")
    k = ish[-1]
    if not 1 <= k <= rank:
        raise IndexingProblem(f"the indices address {k} dims of a rank-{rank} data")
    return k


def scatter_nd(b: GraphBuilder, x: SSAValue, indices: SSAValue, updates: SSAValue, reduction: str = "none") -> SSAValue:
    """out = x with the slices out[indices[q]] (indices' last dim: k leading coordinates)
    combined with updates[q] (ONNX ScatterND)."""
    _check(reduction, x, updates)
    xs, ish, us = shape_of(x), shape_of(indices), shape_of(updates)
    k = _check_tuples(ish, len(xs))
    if list(us) != [*ish[:-1], *xs[k:]]:
        raise IndexingProblem(f"the updates must have shape {[*ish[:-1], *xs[k:]]} (the indices' leading dims and "
                             f"the data's dims after the {k} addressed), got {list(us)}")
    P, R, N = math.prod(xs[:k]), math.prod(xs[k:]), math.prod(ish[:-1])
    flat = _flat_positions(b, indices, xs[:k])
    eq = b.op(g.EqualOp, [b.reshape(flat, [N, 1, 1]), b.constant(np.arange(P, dtype=np.int64).reshape(1, P, 1), name="iota")])
    hit, new = _select_reduce(b, eq, b.reshape(updates, [N, 1, R]), 0, reduction)  # [P, 1], [P, R]
    x2 = b.reshape(x, [P, R])
    return b.reshape(_combine(b, x2, new, hit, reduction), xs)


def gather_nd(b: GraphBuilder, x: SSAValue, indices: SSAValue, batch_dims: int = 0) -> SSAValue:
    """out[B.., q..] = x[B.., indices[B.., q..]] (ONNX GatherND): the data viewed as rows (the
    batch dims and the k addressed dims flattened, the rest a row) and one `graph.gather` of
    the rows at the index tuples' flat positions, each batch entry offset to its own rows."""
    xs, ish = shape_of(x), shape_of(indices)
    nb = batch_dims
    if not 0 <= nb < min(len(xs), len(ish)) or list(ish[:nb]) != list(xs[:nb]):
        raise IndexingProblem(f"batch_dims = {nb} must be below both ranks and name dims the data {list(xs)} and "
                             f"the indices {list(ish)} share")
    k = _check_tuples(ish[nb:], len(xs) - nb)
    P = math.prod(xs[nb:nb + k])
    flat = _flat_positions(b, indices, xs[nb:nb + k])  # [B.., Q..]
    if nb:  # batch entry e's rows start at e * P
        B = math.prod(xs[:nb])
        entry = np.arange(B, dtype=np.int64).reshape([*xs[:nb]] + [1] * (len(ish) - 1 - nb)) * P
        flat = b.op(g.AddOp, [flat, b.constant(entry, name="batch_rows")])
    rows = b.reshape(x, [math.prod(xs[:nb + k]), math.prod(xs[nb + k:])])
    out = b.op(g.GatherOp, [rows, flat], axis=g.i64_attr(0))
    return b.reshape(out, [*ish[:-1], *xs[nb + k:]])
