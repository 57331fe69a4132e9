"""graph-to-tile lowerings of data-movement, reduction, gather and rotary ops.

Split out of `graph_to_tile.py` (the `FunctionLowering` methods call these with
themselves as `fl`). See docs/tiling.md for the schemes:

  transpose (and K transposes)         `permute_copy`: one 3-D DMA per block in, permuted-stride
                                       DMAs out (innermost dim moved: vector copies on chip)
  slice / concat / broadcast / pad     `copy_box`: strided DMA boxes DRAM -> spad -> DRAM
  reduce_sum/mean/max/min              trailing axes: `rsum`/`rmax` per row chunk; other axes:
                                       tile-wise accumulation and a halving tree over rows
  gather (axis 0, runtime indices)     `tile.gather_rows` (data-dependent row addresses)
  gather (compile-time indices)        one `copy_box` per index
  rotary (half / interleaved)          vector ops on [rows, R] tiles with cos/sin tiles
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, MemRefType, TensorType, f32, i64
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.passes.graph_to_tile import driver as g2t
from infer.passes import tiling_cost as tc

Index = g2t.Index


def _prod(xs: Sequence[int]) -> int:
    return g2t._prod(xs)


def _elem(v: SSAValue):
    ty = v.type
    assert isinstance(ty, MemRefType)
    return ty.get_element_type()


def _cap_elems(fl) -> int:
    """Elements of one staging tile: a quarter of the scratchpad over two buffers."""
    return max(1, fl.hw.memory.scratchpad_bytes // (4 * 2 * 4))


# ----------------------------------------------------------------------------
# Generic box copy DRAM -> DRAM through the scratchpad
# ----------------------------------------------------------------------------


def copy_box(fl, src: SSAValue, S_in: Sequence[int], in_start: Sequence[int], in_step: Sequence[int],
             dst: SSAValue, S_out: Sequence[int], out_start: Sequence[int], box: Sequence[int]) -> None:
    with fl.stage(what="box copy"):
        _copy_box(fl, src, S_in, in_start, in_step, dst, S_out, out_start, box)


def _copy_box(fl, src: SSAValue, S_in: Sequence[int], in_start: Sequence[int], in_step: Sequence[int],
              dst: SSAValue, S_out: Sequence[int], out_start: Sequence[int], box: Sequence[int]) -> None:
    """dst[out_start + b] = src[in_start + b * in_step] for every b < box (same rank).
    Steps may be negative or 0 (broadcast). Contiguous tails are merged; the last two
    dims are one strided DMA box per tile (steps 0 there are broadcast on the vector
    unit), the leading dims are loops. Without broadcasts, when whole [rows, cols] boxes
    fit a staging tile, the innermost leading dim is the box's third (plane) dim: one DMA
    moves TP planes (a positive step on that dim is a source step)."""
    em = fl.em
    r = len(box)
    assert len(S_in) == len(S_out) == len(in_start) == len(in_step) == len(out_start) == r
    if any(b == 0 for b in box):
        return
    # [S_in, S_out, box, in_start, in_step, out_start]
    dims = [[S_in[i], S_out[i], box[i], in_start[i], in_step[i], out_start[i]] for i in range(r)]
    while len(dims) >= 2:
        a, b = dims[-2], dims[-1]
        if b[0] == b[1] == b[2] and b[3] == 0 and b[5] == 0 and b[4] == 1 and (a[4] == 1 or a[2] == 1):
            dims[-2:] = [[a[0] * b[0], a[1] * b[1], a[2] * b[2], a[3] * b[0], 1, a[5] * b[1]]]
        else:
            break
    while len(dims) < 2 or dims[-1][4] < 0 or dims[-2][4] < 0:
        dims.append([1, 1, 1, 0, 1, 0])
    lead, (Rd, Cd) = dims[:-2], dims[-2:]
    P_in, P_out = _prod([d[0] for d in lead]), _prod([d[1] for d in lead])
    s3 = em.view(src, (P_in, Rd[0], Cd[0]))
    d3 = em.view(dst, (P_out, Rd[1], Cd[1]))
    el = _elem(src)
    cap = _cap_elems(fl)
    TC = max(1, min(Cd[2], cap))
    TR = max(1, min(Rd[2], cap // TC, tc.dma_box_limits()[1]))  # rows of one DMA
    rb, cb = Rd[4] == 0, Cd[4] == 0
    # planes need contiguous rows: with a column step the DMA's two strided dims are rows and
    # columns (one element per burst), and a third would be one transfer per plane
    planes = (not rb and not cb and bool(lead) and lead[-1][4] > 0 and TR == Rd[2] and TC == Cd[2]
              and Cd[4] == 1)
    TP = max(1, min(lead[-1][2], cap // (TR * TC), tc.dma_box_limits()[2])) if planes else 1
    buf3 = em.alloc((TP, TR, TC), el, "spad", 2)
    buf2 = em.view(buf3, (TR, TC)) if rb or cb else None  # broadcasts: on the vector unit (TP = 1)
    row3 = em.alloc((1, 1, TC), el, "spad", 2) if rb and not cb else None
    col3 = em.alloc((1, TR, 1), el, "spad", 2) if cb and not rb else None
    one3 = em.alloc((1, 1, 1), el, "spad", 2) if cb and rb else None
    rowv = em.alloc((1, TC), el, "spad", 2) if cb and rb else None
    z = [0, 0]

    def tile(p: Index, q: Index, r0: Index, tr: int, c0: Index, tcn: int, tp: int = 1) -> None:
        srow = em.add(Rd[3], em.mul(r0, Rd[4]))
        scol = em.add(Cd[3], em.mul(c0, Cd[4]))
        if not rb and not cb:
            em.dma(s3, [p, srow, scol], buf3, [0, 0, 0], [tp, tr, tcn],
                   [lead[-1][4] if tp > 1 else 1, Rd[4], Cd[4]])
        else:
            em.fill(buf2, z, tr, tcn, 0.0)
            if rb and not cb:
                em.dma(s3, [p, srow, scol], row3, [0, 0, 0], [1, 1, tcn], [1, 1, Cd[4]])
                em.vec("add", buf2, z, buf2, z, tr, tcn, em.view(row3, (1, TC)), z, bmode="row")
            elif cb and not rb:
                em.dma(s3, [p, srow, scol], col3, [0, 0, 0], [1, tr, 1], [1, Rd[4], 1])
                em.vec("add", buf2, z, buf2, z, tr, tcn, em.view(col3, (TR, 1)), z, bmode="col")
            else:
                em.dma(s3, [p, srow, scol], one3, [0, 0, 0], [1, 1, 1])
                em.fill(rowv, z, 1, tcn, 0.0)
                em.vec("add", rowv, z, rowv, z, 1, tcn, em.view(one3, (1, 1)), z, bmode="col")
                em.vec("add", buf2, z, buf2, z, tr, tcn, rowv, z, bmode="row")
        em.dma(buf3, [0, 0, 0], d3, [q, em.add(Rd[5], r0), em.add(Cd[5], c0)], [tp, tr, tcn])

    def rec(k: int, p: Index, q: Index) -> None:
        if k == len(lead):
            em.tiles(Rd[2], TR, lambda r0, tr: em.tiles(Cd[2], TC, lambda c0, tcn: tile(p, q, r0, tr, c0, tcn)))
            return
        d = lead[k]
        if TP > 1 and k == len(lead) - 1:  # planes: the last leading dim's strides are 1 (in planes)
            em.tiles(d[2], TP, lambda i0, tp: tile(em.add(p, em.add(d[3], em.mul(i0, d[4]))),
                                                   em.add(q, em.add(d[5], i0)), 0, Rd[2], 0, Cd[2], tp))
            return
        si = _prod([x[0] for x in lead[k + 1:]])
        so = _prod([x[1] for x in lead[k + 1:]])
        em.range(d[2], lambda i: rec(k + 1, em.add(p, em.mul(em.add(d[3], em.mul(i, d[4])), si)),
                                     em.add(q, em.mul(em.add(d[5], i), so))))

    rec(0, 0, 0)


def fill_dram(fl, dst: SSAValue, shape: Sequence[int], value: float) -> None:
    with fl.stage(what="fill"):
        _fill_dram(fl, dst, shape, value)


def _fill_dram(fl, dst: SSAValue, shape: Sequence[int], value: float) -> None:
    em = fl.em
    n = _prod(shape)
    W = shape[-1] if shape else 1
    if W > _cap_elems(fl):
        W = 1
    rows = n // W
    d2 = em.view(dst, (rows, W))
    tr = max(1, min(rows, _cap_elems(fl) // W))
    buf = em.alloc((tr, W), _elem(dst), "spad")
    em.fill(buf, [0, 0], tr, W, value)
    em.tiles(rows, tr, lambda r0, r: em.dma(buf, [0, 0], d2, [r0, 0], [r, W]))


# ----------------------------------------------------------------------------
# slice / concat / broadcast / pad
# ----------------------------------------------------------------------------


def _S(v: SSAValue) -> tuple[int, ...]:
    return g2t._shape(v)


def lower_slice(fl, op: g.SliceOp) -> None:
    S_in, S_out = _S(op.input), _S(op.output)
    name = fl.name()
    fl.debug(f"[graph-to-tile] {name}: slice {'x'.join(map(str, S_in))} -> {'x'.join(map(str, S_out))}: strided DMA boxes")
    copy_box(fl, fl.buf(op.input), S_in, g._ints(op.starts), g._ints(op.steps),
             fl.out_buf(op.output), S_out, [0] * len(S_out), S_out)


def lower_concat(fl, op: g.ConcatOp) -> None:
    S_out = _S(op.output)
    axis = op.axis.value.data % len(S_out)
    name = fl.name()
    fl.debug(f"[graph-to-tile] {name}: concat of {len(op.inputs)} along axis {axis}: one DMA copy per input")
    out = fl.out_buf(op.output)
    off = 0
    for v in op.inputs:
        S = _S(v)
        start = [0] * len(S)
        start[axis] = off
        copy_box(fl, fl.buf(v), S, [0] * len(S), [1] * len(S), out, S_out, start, S)
        off += S[axis]


def lower_broadcast(fl, op: g.BroadcastOp) -> None:
    S_out = _S(op.output)
    S_in = (1,) * (len(S_out) - len(_S(op.input))) + _S(op.input)
    name = fl.name()
    fl.debug(f"[graph-to-tile] {name}: broadcast {'x'.join(map(str, S_in))} -> {'x'.join(map(str, S_out))}")
    src = fl.em.view(fl.buf(op.input), S_in) if S_in else fl.buf(op.input)
    steps = [0 if (a == 1 and b != 1) else 1 for a, b in zip(S_in, S_out, strict=True)]
    copy_box(fl, src, S_in, [0] * len(S_out), steps, fl.out_buf(op.output), S_out, [0] * len(S_out), S_out)


def lower_pad(fl, op: g.PadOp) -> None:
    S_in, S_out = _S(op.input), _S(op.output)
    pads = g._ints(op.pads)
    n = len(S_in)
    name = fl.name()
    fl.debug(f"[graph-to-tile] {name}: pad {'x'.join(map(str, S_in))} -> {'x'.join(map(str, S_out))}: fill, then one box copy")
    out = fl.out_buf(op.output)
    fill_dram(fl, out, S_out, float(op.value.value.data))
    copy_box(fl, fl.buf(op.input), S_in, [0] * n, [1] * n, out, S_out, list(pads[:n]), S_in)


# ----------------------------------------------------------------------------
# transpose: permuted copies in big blocks
# ----------------------------------------------------------------------------

Terms = list[tuple[Index, int]]  # an element offset: sum of index * coefficient


def canonical_perm(shape: Sequence[int], perm: Sequence[int]) -> tuple[list[int], list[int]]:
    """The same permutation on the fewest dims: size-1 dims dropped, runs of dims adjacent
    (and in order) in both the input and the output merged. -> (dim sizes in input order,
    perm: output dim k is input dim perm[k])."""
    keep = [d for d in range(len(shape)) if shape[d] != 1]
    pos_in = {d: i for i, d in enumerate(keep)}
    groups: list[list[int]] = []
    for d in (p for p in perm if shape[p] != 1):
        if groups and pos_in[d] == pos_in[groups[-1][-1]] + 1:
            groups[-1].append(d)
        else:
            groups.append([d])
    by_in = sorted(range(len(groups)), key=lambda gi: pos_in[groups[gi][0]])
    rank = {gi: r for r, gi in enumerate(by_in)}
    return [_prod([shape[d] for d in groups[gi]]) for gi in by_in], [rank[gi] for gi in range(len(groups))]


def _box_side(em, buf: SSAValue, total: int, strides: Sequence[int], terms: Terms) -> tuple[SSAValue, list[Index]]:
    """View a contiguous buffer of `total` elements so that box dims of the given element
    strides (descending, each dividing the one before) are a row-major sub-box, and split
    the origin (sum of index * coefficient) over the view's dims: each term goes to the
    dim with the largest stride dividing its coefficient. Offsets built from a tensor's
    own nested strides always land inside that dim's extent."""
    assert total % strides[0] == 0 and all(strides[k - 1] % strides[k] == 0 for k in range(1, len(strides)))
    shape = [total // strides[0]] + [strides[k - 1] // strides[k] for k in range(1, len(strides))]
    idx: list[Index] = [0] * len(strides)
    for iv, coef in terms:
        if coef == 0 or (isinstance(iv, int) and iv == 0):
            continue
        k = next(k for k, s in enumerate(strides) if coef % s == 0)
        idx[k] = em.add(idx[k], em.mul(iv, coef // strides[k]))
    return em.view(buf, shape), idx


def box_dma(em, src: SSAValue, src_total: int, dst: SSAValue, dst_total: int,
            dims: Sequence[tuple[int, int, int]], src_terms: Terms, dst_terms: Terms) -> None:
    """One tile.dma of a box given as (extent, src stride, dst stride) per dim, in elements,
    outermost first (both strides descending). Extent-1 dims are dropped; an innermost
    dim that is not contiguous on both sides gets a unit dim after it (rows of one
    element). At most 3 dims remain (one DMA instruction)."""
    box = [d for d in dims if d[0] != 1]
    if not box or box[-1][1] != 1 or box[-1][2] != 1:
        box.append((1, 1, 1))
    assert len(box) <= 3, box
    sv, si = _box_side(em, src, src_total, [d[1] for d in box], src_terms)
    dv, di = _box_side(em, dst, dst_total, [d[2] for d in box], dst_terms)
    em.dma(sv, si, dv, di, [d[0] for d in box])


def permute_copy(fl, src: SSAValue, shape: Sequence[int], perm: Sequence[int], dst: SSAValue) -> str:
    """dst = transpose(src, perm), DRAM -> DRAM through the scratchpad in big blocks
    (returns a description for debug-tiling). On the canonical permutation (size-1 dims
    dropped, runs adjacent in both orders merged):

    * innermost dim kept (rows of C contiguous elements): a block [Tu, Tv, TC] of the two
      dims u (the output's second innermost) and v (the input's) is one 3-D DMA load in
      input order; a loop over u or v stores it with the permuted strides (2-D DMAs of
      [Tv, TC] / [Tu, TC]). The remaining dims are loops.
    * innermost dim j moved (it becomes a row dim, the output's rows are dim i): a block
      [Ti, Tj] is loaded in input order, transposed on chip by a loop of vector copies of
      one column (or row) each, and stored as [Tj, Ti] in output order.

    Block buffers are double buffered; tile sizes come from the cost model
    (`tiling_cost.choose_permute_rows` / `choose_permute_block`)."""
    em, hw = fl.em, fl.hw
    sizes, cp = canonical_perm(shape, perm)
    n = len(sizes)
    if n <= 1:
        fl.copy(src, dst, tuple(shape) or (1,))
        return "a plain copy (the permutation moves no data)"
    el, esize = _elem(src), t.elem_bytes(src)
    total = _prod(sizes)
    ist = [_prod(sizes[d + 1:]) for d in range(n)]
    pos = {d: k for k, d in enumerate(cp)}
    ost = [_prod([sizes[cp[k]] for k in range(pos[d] + 1, n)]) for d in range(n)]
    desc = f"canonical {'x'.join(map(str, sizes))} perm {cp}: "

    def nest(block_dims: Sequence[int], body) -> None:
        others = [d for d in cp if d not in block_dims]  # loops, in output order
        outer = [d for d in others if sizes[d] > 1]

        def rec(k: int, tin: Terms, tout: Terms) -> None:
            if k == len(outer):
                body(tin, tout)
                return
            d = outer[k]
            em.range(sizes[d], lambda x: rec(k + 1, tin + [(x, ist[d])], tout + [(x, ost[d])]))

        rec(0, [], [])

    if cp[-1] == n - 1:  # rows of C contiguous elements stay rows
        C, v, u = sizes[-1], n - 2, cp[n - 2]
        outer = _prod([sizes[d] for d in cp[:-2] if d not in (u, v)])
        nloops = sum(1 for d in cp[:-2] if d not in (u, v) and sizes[d] > 1)
        ch = tc.choose_permute_rows(hw, sizes[u], sizes[v], C, esize, outer, nloops, u == v - 1)
        Tu, Tv, TC = ch.tiles
        Lb = em.alloc((Tu, Tv, TC), el, "spad", 2)
        Lt = Tu * Tv * TC

        def block(tin: Terms, tout: Terms, u0: Index, tu: int, v0: Index, tv: int, c0: Index, tcn: int) -> None:
            box_dma(em, src, total, Lb, Lt, [(tu, ist[u], Tv * TC), (tv, ist[v], TC), (tcn, 1, 1)],
                    tin + [(u0, ist[u]), (v0, ist[v]), (c0, 1)], [])
            if ch.loop == 1:  # one store per v: L[:, w, :] -> out rows of u
                em.range(tv, lambda w: box_dma(
                    em, Lb, Lt, dst, total, [(tu, Tv * TC, ost[u]), (tcn, 1, 1)], [(w, TC)],
                    tout + [(u0, ost[u]), (em.add(v0, w), ost[v]), (c0, 1)]))
            else:  # one store per u: L[w] -> out rows of v
                em.range(tu, lambda w: box_dma(
                    em, Lb, Lt, dst, total, [(tv, TC, ost[v]), (tcn, 1, 1)], [(w, Tv * TC)],
                    tout + [(em.add(u0, w), ost[u]), (v0, ost[v]), (c0, 1)]))

        nest((u, v, n - 1), lambda tin, tout: em.tiles(sizes[u], Tu, lambda u0, tu: em.tiles(
            sizes[v], Tv, lambda v0, tv: em.tiles(C, TC, lambda c0, tcn: block(tin, tout, u0, tu, v0, tv, c0, tcn)))))
        return (desc + f"blocks {Tu}x{Tv}x{TC} (one load each, one store per {'vu'[ch.loop]}): "
                f"{ch.dmas} DMAs, est {ch.cycles} cycles")

    # the innermost dim j moves: transpose [Ti, Tj] blocks on the vector unit
    i, j = cp[-1], n - 1
    outer = _prod([sizes[d] for d in cp if d not in (i, j)])
    nloops = sum(1 for d in cp if d not in (i, j) and sizes[d] > 1)
    ch = tc.choose_permute_block(hw, sizes[i], sizes[j], esize, outer, nloops, i == n - 2, pos[j] == n - 2)
    Ti, Tj = ch.tiles
    Lb = em.alloc((Ti, Tj), el, "spad", 2)
    Tb = em.alloc((Tj, Ti), el, "spad", 2)

    def tblock(tin: Terms, tout: Terms, i0: Index, ti: int, j0: Index, tj: int) -> None:
        box_dma(em, src, total, Lb, Ti * Tj, [(ti, ist[i], Tj), (tj, 1, 1)], tin + [(i0, ist[i]), (j0, 1)], [])
        if ch.loop == 0:  # row r of L -> column r of T
            em.range(ti, lambda r: em.vec("copy", Tb, [0, r], em.view(Lb, (Ti * Tj, 1)), [em.mul(r, Tj), 0], tj, 1))
        else:  # column c of L -> row c of T
            em.range(tj, lambda c: em.vec("copy", em.view(Tb, (Tj * Ti, 1)), [em.mul(c, Ti), 0], Lb, [0, c], ti, 1))
        box_dma(em, Tb, Ti * Tj, dst, total, [(tj, Ti, ost[j]), (ti, 1, 1)], [],
                tout + [(j0, ost[j]), (i0, 1)])

    nest((i, j), lambda tin, tout: em.tiles(sizes[i], Ti, lambda i0, ti: em.tiles(
        sizes[j], Tj, lambda j0, tj: tblock(tin, tout, i0, ti, j0, tj))))
    return (desc + f"blocks {Ti}x{Tj} transposed by vector copies of one {'row' if ch.loop == 0 else 'column'} "
            f"each: {ch.dmas} DMAs, est {ch.cycles} cycles (vector {ch.vector})")


def lower_transpose(fl, op: g.TransposeOp) -> None:
    S = _S(op.input)
    name = fl.name()
    desc = permute_copy(fl, fl.buf(op.input), S, g._ints(op.perm), fl.out_buf(op.results[0]))
    fl.debug(f"[graph-to-tile] {name}: transpose {'x'.join(map(str, S))} perm {list(g._ints(op.perm))}: {desc}")


# ----------------------------------------------------------------------------
# reductions
# ----------------------------------------------------------------------------


def lower_reduce(fl, op: g.ReduceOp) -> None:
    if isinstance(op, g.ReduceProdOp):
        raise g2t._err(op, "reduce_prod has no tile lowering (no log/exp-free product on the vector unit)")
    S = _S(op.input)
    axes = set(op.reduced_axes())
    kind = {"graph.reduce_sum": "sum", "graph.reduce_mean": "sum", "graph.reduce_max": "max",
            "graph.reduce_min": "min"}[op.name]
    count = _prod([S[a] for a in axes])
    scale = 1.0 / count if isinstance(op, g.ReduceMeanOp) else None
    name = fl.name()
    fl.debug(f"[graph-to-tile] {name}: {op.name.split('.')[1]} {'x'.join(map(str, S))} axes {sorted(axes)}")
    em = fl.em
    out = fl.out_buf(op.output)
    if not S or not axes:
        fl.copy(fl.buf(op.input), out, S or (1,))
        return
    # runs of reduced axes, last first; each step reduces one run to 1
    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(S):
        if i in axes:
            j = i
            while j < len(S) and j in axes:
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    cur, cur_shape = fl.buf(op.input), list(S)
    for n, (a, b) in enumerate(reversed(runs)):
        last = n == len(runs) - 1
        new_shape = cur_shape[:a] + [1] * (b - a) + cur_shape[b:]
        dst = em.view(out, tuple(new_shape)) if last else em.alloc(tuple(new_shape), f32, "dram")
        M, K, N = _prod(cur_shape[:a]), _prod(cur_shape[a:b]), _prod(cur_shape[b:])
        with fl.stage(what="reduction step"):
            if N == 1:
                _reduce_rows(fl, cur, dst, M, K, kind, scale if last else None)
            else:
                _reduce_middle(fl, cur, dst, M, K, N, kind, scale if last else None)
        cur, cur_shape = dst, new_shape


def _reduce_rows(fl, src, dst, M: int, K: int, kind: str, scale: float | None) -> None:
    """dst[M, 1] = reduce over the rows of src[M, K]: rsum/rmax per column chunk."""
    em = fl.em
    rc = tc.choose_rows(fl.hw, M, K, bytes_in=4, bytes_out=0, vec_cost=2, live_tiles=2,
                        footprint=lambda tr, tcn: tr * tcn * 8 + 2 * tr * 8)  # xs x2, part/res columns x2
    x2, o2 = em.view(src, (M, K)), em.view(dst, (M, 1))
    xs = em.alloc((rc.rows, rc.cols), f32, "spad", 2)
    part = em.alloc((rc.rows, 1), f32, "spad", 2)
    res = em.alloc((rc.rows, 1), f32, "spad", 2)
    z = [0, 0]

    def tile(r0: Index, tr: int) -> None:
        em.fill(res, z, tr, 1, g2t.NEG if kind != "sum" else 0.0)

        def chunk(c0: Index, cn: int) -> None:
            em.dma(x2, [r0, c0], xs, z, [tr, cn])
            if kind == "min":
                em.vec("neg", xs, z, xs, z, tr, cn)
            em.vec("rsum" if kind == "sum" else "rmax", part, z, xs, z, tr, cn)
            em.vec("add" if kind == "sum" else "max", res, z, res, z, tr, 1, part, z, bmode="tile")

        em.tiles(K, rc.cols, chunk)
        if kind == "min":
            em.vec("neg", res, z, res, z, tr, 1)
        if scale is not None:
            em.vec("mul", res, z, res, z, tr, 1, bmode="imm", imm=scale)
        em.dma(res, z, o2, [r0, 0], [tr, 1])

    em.tiles(M, rc.rows, tile)


def _reduce_middle(fl, src, dst, M: int, K: int, N: int, kind: str, scale: float | None) -> None:
    """dst[M, 1, N] = reduce over K of src[M, K, N]: [TK, TN] tiles combined tile-wise
    into an accumulator tile, then a halving tree over its rows."""
    em = fl.em
    vop = {"sum": "add", "max": "max", "min": "min"}[kind]
    cap = _cap_elems(fl)
    TN = min(N, cap)
    TK = max(1, min(K, cap // TN))
    x3 = em.view(src, (M, K, N))
    o2 = em.view(dst, (M, N))
    xs3 = em.alloc((1, TK, TN), f32, "spad", 2)
    xs = em.view(xs3, (TK, TN))
    acc = em.alloc((TK, TN), f32, "spad", 2)
    z = [0, 0]
    init = {"sum": 0.0, "max": g2t.NEG, "min": -g2t.NEG}[kind]

    def tile(m: Index, n0: Index, tn: int) -> None:
        em.fill(acc, z, min(TK, K), tn, init)

        def kstep(k0: Index, tk: int) -> None:
            em.dma(x3, [m, k0, n0], xs3, [0, 0, 0], [1, tk, tn])
            em.vec(vop, acc, z, acc, z, tk, tn, xs, z, bmode="tile")

        em.tiles(K, TK, kstep)
        rows = min(TK, K)
        while rows > 1:
            h = rows // 2
            em.vec(vop, acc, z, acc, z, h, tn, acc, [rows - h, 0], bmode="tile")
            rows -= h
        if scale is not None:
            em.vec("mul", acc, z, acc, z, 1, tn, bmode="imm", imm=scale)
        em.dma(acc, z, o2, [m, n0], [1, tn])

    em.range(M, lambda m: em.tiles(N, TN, lambda n0, tn: tile(m, n0, tn)))


_ = (IntegerAttr, i64, TensorType, t, np)


# ----------------------------------------------------------------------------
# gather
# ----------------------------------------------------------------------------

INDEX_TYPES = ("i32", "i64")


def index_source(fl, v: SSAValue) -> bool:
    """Whether integer tensor v only serves as gather indices (directly or through
    integer casts/reshapes): then it may cross the function boundary / stay in DRAM."""
    uses = list(v.uses)
    if not uses:
        return False
    for u in uses:
        op = u.operation
        if isinstance(op, g.GatherOp) and u.index == 1:
            continue
        if isinstance(op, g.CastOp | g.ReshapeOp) and _is_int_index(op.results[0]) and index_source(fl, op.results[0]):
            continue
        return False
    return True


def _is_int_index(v: SSAValue) -> bool:
    from infer.dialects.dtypes import element_type_name

    ty = v.type
    return isinstance(ty, TensorType | MemRefType) and element_type_name(ty.get_element_type()) in INDEX_TYPES


def lower_index_passthrough(fl, op) -> None:
    """An integer cast/reshape feeding only gathers: the result aliases the input's
    buffer (gather_rows reads i32 or the low 32 bits of i64; value-preserving for
    in-range indices)."""
    src = fl.vmap.get(op.operands[0])
    if src is None:
        raise g2t._err(op, "integer indices must come from a function argument or a constant")
    if isinstance(op, g.ReshapeOp):
        fl.vmap[op.results[0]] = fl.em.view(src, _S(op.results[0]))
    else:
        fl.vmap[op.results[0]] = src


def lower_gather(fl, op: g.GatherOp) -> None:
    em = fl.em
    S = _S(op.input)
    axis = op.axis.value.data % len(S)
    I = _S(op.indices)
    N = _prod(I)
    cidx = fl.const(op.indices)
    name = fl.name()
    out = fl.out_buf(op.output)
    if cidx is not None:
        idx = np.asarray(cidx, np.int64).reshape(-1)
        idx = np.where(idx < 0, idx + S[axis], idx)
        if axis != 0 and N > 64:
            raise g2t._err(op, f"gather along axis {axis} with {N} compile-time indices (at most 64 are lowered)")
        if axis != 0:
            fl.debug(f"[graph-to-tile] {name}: gather axis {axis}: {N} compile-time indices, one box copy each")
            lead, trail = S[:axis], S[axis + 1:]
            src = em.view(fl.buf(op.input), (*lead, S[axis], _prod(trail)))
            o = em.view(out, (*lead, N, _prod(trail)))
            for j, ix in enumerate(idx):
                k = len(lead)
                copy_box(fl, src, (*lead, S[axis], _prod(trail)), [0] * k + [int(ix), 0], [1] * (k + 2),
                         o, (*lead, N, _prod(trail)), [0] * k + [j, 0], (*lead, 1, _prod(trail)))
            return
        ibuf = fl.weight(f"{name}.indices", idx.astype(np.int32), _i32())
    else:
        if axis != 0:
            raise g2t._err(op, f"gather along axis {axis} with runtime indices is not supported (axis 0 is)")
        ibuf = fl.vmap.get(op.indices)
        if ibuf is None:
            raise g2t._err(op, "runtime gather indices must come from a function argument (i32/i64)")
    V, W = S[0], _prod(S[1:])
    table = em.view(fl.buf(op.input), (V, W))
    ids = em.view(ibuf, (N,))
    out2 = em.view(out, (N, W))
    cap = _cap_elems(fl)
    TC = min(W, cap)
    TR = max(1, min(N, cap // TC))
    fl.debug(f"[graph-to-tile] {name}: gather rows {N} of {V}x{W} (row {W * 4} bytes): tile.gather_rows tiles {TR}x{TC}")
    buf = em.alloc((TR, TC), f32, "spad", 2)

    def tile(r0: Index, tr: int, c0: Index, tcn: int) -> None:
        em.gather_rows(table, c0, ids, r0, buf, [0, 0], tr, tcn)
        em.dma(buf, [0, 0], out2, [r0, c0], [tr, tcn])

    em.tiles(N, TR, lambda r0, tr: em.tiles(W, TC, lambda c0, tcn: tile(r0, tr, c0, tcn)))


def _i32():
    from xdsl.dialects.builtin import i32

    return i32


# ----------------------------------------------------------------------------
# rotary
# ----------------------------------------------------------------------------


def lower_rotary(fl, op: g.RotaryOp) -> None:
    """y[:, :R] = x_r * cos + rot(x_r) * sin, y[:, R:] = x[:, R:], on [ts, R] row tiles.
    Half: rot = [-x2, x1] (column sub-boxes); interleaved: the tile is viewed
    [ts*R/2, 2] so even/odd features are columns 0/1. cos/sin broadcast over x's
    leading dims by index arithmetic (a constant 1-dim reads row 0), over S by a
    row-mode operand."""
    em = fl.em
    X = _S(op.input)
    D, S = X[-1], X[-2]
    CS = _S(op.cos)
    R = CS[-1]
    h = R // 2
    CS = (1,) * (len(X) - len(CS)) + CS
    lead_x, lead_c = X[:-2], CS[:-2]
    s_full = CS[-2] != 1 or S == 1
    inter = bool(op.interleaved.value.data)
    name = fl.name()
    cap = _cap_elems(fl)
    # x, y, tmp [TS, R] and cos, sin [TS or 1, R] and the pass-through rest [TS, D - R], x2 each
    per_row = 8 * (3 * R + 2 * (R if (CS[-2] != 1 or S == 1) else 0) + (D - R))
    fixed = 0 if (CS[-2] != 1 or S == 1) else 2 * 8 * R
    TS = max(1, min(S, cap // max(D, 1), 65535 // max(1, R // 2),
                    (fl.hw.memory.scratchpad_bytes - fixed) // max(1, per_row)))
    fl.debug(f"[graph-to-tile] {name}: rotary {'interleaved' if inter else 'half'} {'x'.join(map(str, X))} R={R}: rows of {TS}")
    P = _prod(lead_x)
    x3 = em.view(fl.buf(op.input), (P, S, D))
    o3 = em.view(fl.out_buf(op.output), (P, S, D))
    PC = _prod(lead_c)
    c3 = em.view(fl.buf(op.cos), (PC, CS[-2], R))
    s3 = em.view(fl.buf(op.sin), (PC, CS[-2], R))
    TSc = TS if s_full else 1
    xt3 = em.alloc((1, TS, R), f32, "spad", 2)
    yt3 = em.alloc((1, TS, R), f32, "spad", 2)
    ct3 = em.alloc((1, TSc, R), f32, "spad", 2)
    st3 = em.alloc((1, TSc, R), f32, "spad", 2)
    tmp = em.alloc((TS, R), f32, "spad", 2)
    rest3 = em.alloc((1, TS, D - R), f32, "spad", 2) if D > R else None
    xt, yt = em.view(xt3, (TS, R)), em.view(yt3, (TS, R))
    ct, st = em.view(ct3, (TSc, R)), em.view(st3, (TSc, R))
    bm = "tile" if s_full else "row"
    z = [0, 0]

    def tile(p: Index, pc: Index, s0: Index, ts: int) -> None:
        em.dma(x3, [p, s0, 0], xt3, [0, 0, 0], [1, ts, R])
        cs0 = s0 if s_full else 0
        tsc = ts if s_full else 1
        em.dma(c3, [pc, cs0, 0], ct3, [0, 0, 0], [1, tsc, R])
        em.dma(s3, [pc, cs0, 0], st3, [0, 0, 0], [1, tsc, R])
        em.vec("mul", yt, z, xt, z, ts, R, ct, z, bmode=bm)
        if not inter:
            em.vec("mul", tmp, z, xt, [0, h], ts, h, st, z, bmode=bm)
            em.vec("mul", tmp, [0, h], xt, z, ts, h, st, [0, h], bmode=bm)
            em.vec("sub", yt, z, yt, z, ts, h, tmp, z, bmode="tile")
            em.vec("add", yt, [0, h], yt, [0, h], ts, h, tmp, [0, h], bmode="tile")
        else:
            n = ts * h
            full = TS * h
            xv, yv, tv = (em.view(b, (full, 2)) for b in (xt, yt, tmp))
            if s_full:
                sv, sb = em.view(st, (full, 2)), "tile"
            else:
                sv, sb = st, "row"  # [1, R]: handled per pair below
            if s_full:
                em.vec("mul", tv, z, xv, [0, 1], n, 1, sv, z, bmode=sb)
                em.vec("mul", tv, [0, 1], xv, z, n, 1, sv, [0, 1], bmode=sb)
                em.vec("sub", yv, z, yv, z, n, 1, tv, z, bmode="tile")
                em.vec("add", yv, [0, 1], yv, [0, 1], n, 1, tv, [0, 1], bmode="tile")
            else:
                # rot(x) * sin with one sin row: swap pairs into tmp, then a row-mode multiply
                em.vec("neg", tv, z, xv, [0, 1], n, 1)
                em.vec("copy", tv, [0, 1], xv, z, n, 1)
                em.vec("mul", tmp, z, tmp, z, ts, R, sv, z, bmode="row")
                em.vec("add", yt, z, yt, z, ts, R, tmp, z, bmode="tile")
        em.dma(yt3, [0, 0, 0], o3, [p, s0, 0], [1, ts, R])
        if rest3 is not None:
            em.dma(x3, [p, s0, R], rest3, [0, 0, 0], [1, ts, D - R])
            em.dma(rest3, [0, 0, 0], o3, [p, s0, R], [1, ts, D - R])

    def rec(k: int, p: Index, pc: Index) -> None:
        if k == len(lead_x):
            em.tiles(S, TS, lambda s0, ts: tile(p, pc, s0, ts))
            return
        sx = _prod(lead_x[k + 1:])
        sc = _prod(lead_c[k + 1:])
        full_c = lead_c[k] != 1
        em.range(lead_x[k], lambda i: rec(k + 1, em.add(p, em.mul(i, sx)), em.add(pc, em.mul(i, sc)) if full_c else pc))

    rec(0, 0, 0)


# ----------------------------------------------------------------------------
# casts: f32 -> (bf16 | i32) -> f32 round trips
# ----------------------------------------------------------------------------

ROUND_TRIP = ("bf16", "i32")


def _ename(v: SSAValue) -> str:
    from infer.dialects.dtypes import element_type_name

    ty = v.type
    assert isinstance(ty, TensorType | MemRefType)
    return element_type_name(ty.get_element_type())


def inner_round_trip_cast(op) -> bool:
    """A cast f32 -> bf16/i32 whose every use casts back to f32 (lowered by the user)."""
    if not isinstance(op, g.CastOp) or _ename(op.input) != "f32" or _ename(op.output) not in ROUND_TRIP:
        return False
    uses = list(op.output.uses)
    return bool(uses) and all(isinstance(u.operation, g.CastOp) and _ename(u.operation.output) == "f32"
                              for u in uses)


def outer_round_trip_cast(op) -> bool:
    return (isinstance(op, g.CastOp) and _ename(op.output) == "f32"
            and isinstance(op.input.owner, g.CastOp) and inner_round_trip_cast(op.input.owner))


def lower_cast_round_trip(fl, op: g.CastOp) -> None:
    """y = f32(T(x)): T = bf16 rounds to nearest even (vector copy to a bf16 tile and back);
    T = i32 truncates toward zero: trunc(x) = t(relu(x)) - t(relu(-x)) with
    t(a) = r - rint(r - a + 0.5), r = rint(a) (the vector unit's f32 -> i32 conversion
    rounds half to even). Exact for |x| < 2^31 (the vector unit saturates beyond)."""
    from xdsl.dialects.builtin import bf16, i32

    em = fl.em
    inner = op.input.owner
    T = _ename(inner.output)
    S = _S(op.output)
    N = S[-1] if S else 1
    M = _prod(S) // N
    name = fl.name()
    rc = tc.choose_rows(fl.hw, M, N, bytes_in=4, bytes_out=4, vec_cost=2 if T == "bf16" else 14, live_tiles=5,
                        footprint=lambda tr, tcn: tr * tcn * (20 if T == "bf16" else 40))  # x, y, lo (, a, r) x2
    fl.debug(tc.describe_rows(name, f"cast f32->{T}->f32", "x".join(map(str, S)), rc))
    x2 = em.view(fl.buf(inner.input), (M, N))
    o2 = em.view(fl.out_buf(op.output), (M, N))
    TR, TC = min(rc.rows, M), rc.cols
    xt = em.alloc((TR, TC), f32, "spad", 2)
    yt = em.alloc((TR, TC), f32, "spad", 2)
    lo = em.alloc((TR, TC), bf16 if T == "bf16" else i32, "spad", 2)
    a = em.alloc((TR, TC), f32, "spad", 2) if T == "i32" else None
    r = em.alloc((TR, TC), f32, "spad", 2) if T == "i32" else None
    z = [0, 0]

    def trunc_pos(dst, rows, cols) -> None:  # dst = t(a)
        em.vec("copy", lo, z, a, z, rows, cols)
        em.vec("copy", dst, z, lo, z, rows, cols)
        em.vec("sub", r, z, dst, z, rows, cols, a, z, bmode="tile")
        em.vec("add", r, z, r, z, rows, cols, bmode="imm", imm=0.5)
        em.vec("copy", lo, z, r, z, rows, cols)
        em.vec("copy", r, z, lo, z, rows, cols)
        em.vec("sub", dst, z, dst, z, rows, cols, r, z, bmode="tile")

    def tile(r0: Index, rows: int, c0: Index, cols: int) -> None:
        em.dma(x2, [r0, c0], xt, z, [rows, cols])
        if T == "bf16":
            em.vec("copy", lo, z, xt, z, rows, cols)
            em.vec("copy", yt, z, lo, z, rows, cols)
        else:
            em.vec("relu", a, z, xt, z, rows, cols)
            trunc_pos(yt, rows, cols)
            em.vec("neg", a, z, xt, z, rows, cols)
            em.vec("relu", a, z, a, z, rows, cols)
            trunc_pos(xt, rows, cols)
            em.vec("sub", yt, z, yt, z, rows, cols, xt, z, bmode="tile")
        em.dma(yt, z, o2, [r0, c0], [rows, cols])

    em.tiles(M, TR, lambda r0, rows: em.tiles(N, TC, lambda c0, cols: tile(r0, rows, c0, cols)))


# ----------------------------------------------------------------------------
# integer model inputs (token ids, attention masks)
# ----------------------------------------------------------------------------


def int_input_ok(fl, v: SSAValue) -> bool:
    """Whether integer tensor v (an i32/i64 function argument, or an integer cast/reshape
    of one) has only uses graph-to-tile lowers: gather indices, integer casts/reshapes
    of such values, casts to f32 (`int_to_f32`), casts to i1 used only as attention
    masks (through reshapes; `int_to_mask`). An unused argument is refused (as before)."""
    uses = list(v.uses)
    if not uses:
        return False
    for u in uses:
        op = u.operation
        if isinstance(op, g.GatherOp) and u.index == 1:
            continue
        if isinstance(op, g.CastOp | g.ReshapeOp):
            r = op.results[0]
            e = _ename(r)
            if e in INDEX_TYPES and int_input_ok(fl, r):
                continue
            if isinstance(op, g.CastOp) and e == "f32":
                continue
            if isinstance(op, g.CastOp) and e == "i1" and mask_only(r):
                continue
        if _kernel_cast(op) is not None:  # graph-fuse wraps a lone cast in an elementwise kernel
            e = _ename(op.outputs[0])
            if e == "f32" or (e == "i1" and mask_only(op.outputs[0])):
                continue
        return False
    return True


def _kernel_cast(op):
    """The cast of a `graph.kernel` whose region is one cast of its single input, or None."""
    if not isinstance(op, g.KernelOp) or len(op.inputs) != 1 or len(op.outputs) != 1:
        return None
    ops = [o for o in op.body.block.ops if o is not op.yield_op]
    if len(ops) != 1 or not isinstance(ops[0], g.CastOp) or ops[0].input is not op.body.block.args[0]:
        return None
    return ops[0]


def mask_only(v: SSAValue) -> bool:
    """Whether i1 tensor v only serves as an attention mask (directly or through reshapes)."""
    uses = list(v.uses)
    if not uses:
        return False
    for u in uses:
        op = u.operation
        if isinstance(op, g.ReshapeOp) and mask_only(op.results[0]):
            continue
        if isinstance(op, g.AttentionOp) and op.mask is not None and op.mask == v:
            continue
        if isinstance(op, g.KernelOp) and mask_only(op.body.block.args[u.index]):
            continue  # a fused attention kernel: its region's attention takes the mask
        return False
    return True


def runtime_int_op(fl, op) -> bool:
    """Whether op reads a runtime integer buffer (an argument, possibly through
    aliasing casts/reshapes) or a runtime additive mask: lowered by `lower_runtime_int`."""
    if _kernel_cast(op) is not None:
        return _is_int_index(op.inputs[0]) and op.inputs[0] in fl.vmap
    if not isinstance(op, g.CastOp | g.ReshapeOp):
        return False
    x = op.operands[0]
    if x in fl.masks:
        return isinstance(op, g.ReshapeOp)
    return _is_int_index(x) and x in fl.vmap


def lower_runtime_int(fl, op) -> None:
    x, r = op.operands[0], op.results[0]
    if _kernel_cast(op) is not None:
        e = _ename(r)
        if e not in ("f32", "i1"):
            raise g2t._err(op, f"integer model inputs: a kernel casting to {r.type} is not supported")
        _lower_int_to_f32(fl, op, x, r, mask=e == "i1")
        return
    if x in fl.masks:  # reshape of an additive mask: a view
        fl.vmap[r] = fl.em.view(fl.vmap[x], _S(r))
        fl.masks.add(r)
        return
    e = _ename(r)
    if e in INDEX_TYPES:
        lower_index_passthrough(fl, op)
    elif isinstance(op, g.CastOp) and e in ("f32", "i1"):
        _lower_int_to_f32(fl, op, x, r, mask=e == "i1")
    else:
        raise g2t._err(op, f"integer model inputs: a {op.name} to {r.type} is not supported (integer inputs "
                       "may feed gathers, casts to f32, and casts to i1 used as attention masks)")


def _lower_int_to_f32(fl, op, x: SSAValue, r: SSAValue, mask: bool) -> None:
    """f32(x) of a runtime int32 buffer: vector copy int32 -> fp32 (exact for |x| < 2^24).
    mask=True (x -> i1 used as an attention mask): the result is the additive f32 mask
    (x != 0 ? 0 : NEG), computed as (min(|f32(x)|, 1) - 1) * 1e30; the i1 value is then
    represented by that buffer (`fl.masks`), which the attention lowering reads as a
    runtime additive mask."""
    from xdsl.dialects.builtin import i32

    em = fl.em
    src = fl.vmap[x]
    S = _S(r)
    N = S[-1] if S else 1
    M = _prod(S) // N
    name = fl.name()
    what = "cast int32->f32" + (" -> additive attention mask" if mask else "")
    rc = tc.choose_rows(fl.hw, M, N, bytes_in=4, bytes_out=4, vec_cost=4 if mask else 1, live_tiles=2,
                        footprint=lambda tr, tcn: tr * tcn * 16)  # int32 x, f32 y, x2
    fl.debug(tc.describe_rows(name, what, "x".join(map(str, S)), rc))
    x2 = em.view(src, (M, N))
    out = em.alloc(S, f32, "dram") if mask else fl.out_buf(r)
    if mask:
        fl.vmap[r] = out
        fl.masks.add(r)
    o2 = em.view(out, (M, N))
    TR, TC = min(rc.rows, M), rc.cols
    xt = em.alloc((TR, TC), i32, "spad", 2)
    yt = em.alloc((TR, TC), f32, "spad", 2)
    z = [0, 0]

    def tile(r0: Index, rows: int, c0: Index, cols: int) -> None:
        em.dma(x2, [r0, c0], xt, z, [rows, cols])
        em.vec("copy", yt, z, xt, z, rows, cols)
        if mask:
            em.vec("abs", yt, z, yt, z, rows, cols)
            em.vec("min", yt, z, yt, z, rows, cols, bmode="imm", imm=1.0)
            em.vec("add", yt, z, yt, z, rows, cols, bmode="imm", imm=-1.0)
            em.vec("mul", yt, z, yt, z, rows, cols, bmode="imm", imm=-g2t.NEG)
        em.dma(yt, z, o2, [r0, c0], [rows, cols])

    em.tiles(M, TR, lambda r0, rows: em.tiles(N, TC, lambda c0, cols: tile(r0, rows, c0, cols)))
