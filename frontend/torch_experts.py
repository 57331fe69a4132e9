"""torch.export handlers for the ops transformers' grouped mixture-of-experts layers export
(`grouped_mm_experts_forward`, the default experts of Mixtral, Qwen2-MoE and the other
`ExpertsInterface` models): `aten.histc` (tokens per expert), `aten.index_put` (the inverse of
the sort permutation; also a boolean mask's `x[mask] = v`, a `where`) and the grouped product (`aten._grouped_mm`, or transformers' own
`transformers::grouped_mm_fallback` on CPU).

The grouped product is data dependent: rows `offs[e-1] .. offs[e]` (the tokens routed to
expert e, sorted by expert) take expert e's weight. A static program cannot size a product
by a count computed at run time, so each row is spread over E blocks of K columns, zero but in
its own group's block (a one-hot mask of the row's group, from the run-time offsets), and
multiplied by the experts' weights stacked `[E*K, N]` (a compile-time weight): one product of
E times the routed MACs (for top-k routing, E/k times a dense FFN's) in which each expert's
weight is read once; transformers' `batched_mm` path gathers a weight copy per row instead
(a tiny Mixtral on server: 124 K cycles against 165 K through `batched_mm`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import numpy_dtype_of, shape_of
from infer.frontend.indexing import IndexingProblem, scatter_nd
from infer.frontend.torch_ops import KnownTensor, Unsupported, aten, handles

if TYPE_CHECKING:
    from infer.frontend.torch_import import Importer


@handles(aten.histc.default)
def _histc(imp: Importer, node, args, kwargs):
    """torch.histc(x, bins, min, max) of a run-time tensor: bin = floor((x - min) * bins /
    (max - min)) in x's dtype, as torch's kernel computes it, x == max in the last bin,
    elements outside [min, max] (and NaN) counted nowhere; counts are one-hot sums."""
    bins = int(args[1] if len(args) > 1 else kwargs.get("bins", 100))
    lo = float(args[2] if len(args) > 2 else kwargs.get("min", 0))
    hi = float(args[3] if len(args) > 3 else kwargs.get("max", 0))
    if lo == hi == 0:
        raise Unsupported("histc with min = max = 0 (the data's own range) of a run-time tensor; "
                          "give min < max")
    if lo == hi:  # torch widens an empty range by one on each side
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise Unsupported(f"histc with min {lo} > max {hi}")
    x = imp.value(args[0])
    dtype = numpy_dtype_of(x)
    n = math.prod(shape_of(x))
    x = imp.b.reshape(x, [n, 1])
    scaled = imp.b.op(g.MulOp, [imp.b.op(g.SubOp, [x, imp.b.scalar(lo, x)]), imp.b.scalar(bins, x)])
    position = imp.b.op(g.FloorOp, [imp.b.op(g.DivOp, [scaled, imp.b.scalar(hi - lo, x)])])
    position = imp.b.op(g.MinimumOp, [position, imp.b.scalar(bins - 1, x)])  # x == max
    inside = imp.b.op(g.AndOp, [imp.b.op(g.GreaterEqualOp, [x, imp.b.scalar(lo, x)]),
                                imp.b.op(g.LessEqualOp, [x, imp.b.scalar(hi, x)])])
    iota = imp.b.constant(np.arange(bins, dtype=dtype).reshape(1, bins), name="bins")
    hit = imp.b.op(g.AndOp, [imp.b.op(g.EqualOp, [position, iota]), inside])  # [n, bins]
    counts = imp.b.reduce(g.ReduceSumOp, imp.b.cast(hit, dtype), [0], False)
    return imp.b.cast(counts, imp.out_dtype())


@handles(aten.index_put.default)
def _index_put(imp: Importer, node, args, kwargs):
    """x[i0, i1, ..] = values (accumulate: +=) with index tensors for the leading dims:
    frontend/indexing.py's scatter_nd of the stacked, broadcast index tuples (positions written
    twice without accumulate take their sum, where torch leaves the order undefined)."""
    indices = list(args[1])
    accumulate = bool(args[3] if len(args) > 3 else kwargs.get("accumulate", False))
    if not indices or any(i is None for i in indices):
        raise Unsupported("op:aten.index_put with a slice (None) among the indices")
    x = imp.value(args[0])
    xs = shape_of(x)
    k = len(indices)
    if any(numpy_dtype_of(imp.value(i)) == np.bool_ for i in indices):
        return _masked_put(imp, x, indices, args[2], accumulate)
    index_values = [imp.b.cast(imp.value(i), np.dtype(np.int64)) for i in indices]
    ish = list(torch.broadcast_shapes(*(tuple(shape_of(i)) for i in index_values)))
    tuples = imp.b.op(g.ConcatOp, [imp.b.reshape(imp.b.broadcast(i, ish), [*ish, 1]) for i in index_values],
                      axis=g.i64_attr(len(ish))) if k > 1 else imp.b.reshape(imp.b.broadcast(index_values[0], ish), [*ish, 1])
    values = args[2]
    updates = imp.b.broadcast(imp.operand(values, numpy_dtype_of(x)), [*ish, *xs[k:]])
    try:
        return scatter_nd(imp.b, x, tuples, updates, "add" if accumulate else "none")
    except IndexingProblem as e:
        raise Unsupported(str(e)) from None


def _masked_put(imp: Importer, x: SSAValue, indices: list, values, accumulate: bool) -> SSAValue:
    """x[mask] = v (accumulate: +=) with one boolean mask over x's leading dims and one value
    (`y[y < 0] = 0.5`): where(mask, v, x). A mask's positions take as many values as it has
    true elements, a count known only at run time: other values are refused."""
    xs = shape_of(x)
    mask = imp.value(indices[0])
    ms = shape_of(mask)
    if len(indices) != 1 or tuple(xs[:len(ms)]) != tuple(ms):
        raise Unsupported("index_put with a boolean mask other than one mask over the data's leading dims")
    v = imp.operand(values, numpy_dtype_of(x))
    if math.prod(shape_of(v)) != 1:
        raise Unsupported("index_put of a boolean mask with more than one value (as many as the mask selects: "
                          "a count known only at run time)")
    v = imp.b.reshape(v, [])
    condition = imp.b.reshape(mask, [*ms, *([1] * (len(xs) - len(ms)))])
    if accumulate:
        return imp.b.op(g.AddOp, [x, imp.b.op(g.WhereOp, [condition, v, imp.b.scalar(0, x)])])
    return imp.b.op(g.WhereOp, [condition, v, x])


def _grouped_product(imp: Importer, x, weight, offs) -> SSAValue:
    """out[r] = x[r] @ weight[e(r)] with e(r) the group of row r: offs[e-1] <= r < offs[e]
    (rows past offs[-1] are zeros). x [S, K] run-time, weight [E, K, N], offs [E]."""
    if not isinstance(weight, KnownTensor) or weight.tensor.dim() != 3:
        raise Unsupported("a grouped product whose weights are not one [experts, in, out] tensor known at "
                          "import time")
    xv = imp.value(x)
    if len(shape_of(xv)) != 2 or offs is None:
        raise Unsupported("a grouped product other than a 2-D input against 3-D weights with group offsets")
    E, K, N = (int(d) for d in weight.tensor.shape)
    S = shape_of(xv)[0]
    if shape_of(xv)[1] != K:
        raise Unsupported(f"a grouped product of a [{S}, {shape_of(xv)[1]}] input with [{E}, {K}, {N}] weights")
    dtype = numpy_dtype_of(xv)
    ends = imp.b.cast(imp.value(offs), dtype)  # row counts: exact in a float
    starts = imp.b.op(g.PadOp, [imp.b.slice(ends, [0], [E - 1])], pads=g.i64_array([1, 0])) if E > 1 else \
        imp.b.constant(np.zeros(1, dtype), name="starts")
    rows = imp.b.constant(np.arange(S, dtype=dtype).reshape(S, 1), name="rows")
    in_group = imp.b.op(g.AndOp, [imp.b.op(g.GreaterEqualOp, [rows, imp.b.reshape(starts, [1, E])]),
                                  imp.b.op(g.LessOp, [rows, imp.b.reshape(ends, [1, E])])])  # [S, E]
    mask = imp.b.reshape(imp.b.cast(in_group, dtype), [S, E, 1])
    # row r's input in its group's K columns and zeros elsewhere, against the experts' weights
    # stacked [E*K, N]: one product, whose zero columns add exact zeros
    spread = imp.b.reshape(imp.b.op(g.MulOp, [imp.b.reshape(xv, [S, 1, K]), mask]), [S, E * K])
    stacked = KnownTensor(weight.tensor.reshape(E * K, N).contiguous(), None)
    return imp.b.op(g.MatmulOp, [spread, imp.value(stacked)])


@handles(aten._grouped_mm.default)
def _grouped_mm(imp: Importer, node, args, kwargs):
    """torch._grouped_mm(x, w, offs) of a 2-D input and 3-D weights (no bias or out dtype)."""
    offs = args[2] if len(args) > 2 else kwargs.get("offs")
    if (args[3] if len(args) > 3 else kwargs.get("bias")) is not None:
        raise Unsupported("op:aten._grouped_mm with a bias")
    out = _grouped_product(imp, args[0], args[1], offs)
    return imp.b.cast(out, imp.out_dtype())


@handles("transformers.grouped_mm_fallback.default")
def _transformers_grouped_mm(imp: Importer, node, args, kwargs):
    """transformers' CPU fallback of the grouped product (integrations/moe.py): the same
    (input, weight, offs) contract as torch._grouped_mm."""
    out = _grouped_product(imp, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("offs"))
    return imp.b.cast(out, imp.out_dtype())
