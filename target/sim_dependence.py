"""Dependence tests of the lane-batched loop execution (sim_lockstep): whether the iterations
of a loop touch common bytes, and whether a private copy of local memory per iteration
computes what the sequential program computes.

An access record is (space, write, form, lanes, shape, strides, op, operand) where form = (a, b_0, ...,
b_{MAXD-1}) gives the address a + sum_k b_k * lane_k for the lane dimensions active at the
instruction (`lanes`: their sizes), and (shape, strides) the bytes it touches from that address: a 2-D
(rows, bytes per row) or 3-D (planes, rows, bytes) strided box. `op` groups the accesses of one
instruction (its reads happen before its writes); `operand` is the position of the operand in
that instruction's batched operation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from infer.target.sim_access import Access, dma_access, rows_access

OP_DMA, OP_LOADW, OP_MATMUL, OP_VECTOR, OP_ENTER, OP_EXIT, OP_PRODUCT, OP_ACCUM, OP_VENTER, \
    OP_VEXIT = range(10)


class Reject(Exception):
    """A loop cannot be batched (the reason is kept for whoever profiles the simulator)."""


class NestedCopies(Reject):
    """A loop needs private copies or renaming of a memory that a loop nested in it copies or
    renames too (sim_lockstep walks it again with those inner loops unrolled)."""


MAXD = 4  # lane dimensions (nested batched loops) at most; deeper loops run unrolled
#: a cross-lane test enumerating more lane distances than this counts as a conflict
MAX_DELTAS = 256
#: more candidate access pairs than this: the loop is not batched (analysis too costly)
MAX_PAIRS = 40_000


def rows_rel(shape: tuple[int, ...], strides: tuple[int, ...]) -> list[Access]:
    """The byte rows of a box at address 0."""
    out: list[Access] = []
    if len(shape) == 3:
        dma_access(0, False, 0, shape[0], shape[1], shape[2], strides[0], strides[1], out)
    else:
        rows_access(0, False, 0, shape[0], shape[1], strides[0], out)
    return out


def box_extent(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int]:
    """[lo, hi) of the bytes of a box at address 0 (the hull of rows_rel)."""
    lo = hi = 0
    for n, s in zip(shape[:-1], strides[:-1]):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + shape[-1]


def lane_extent(f: tuple[int, ...], lanes: tuple[int, ...], first: int) -> tuple[int, int]:
    """How far lanes first.. of an access move it: (min, max) of sum b_k * lane_k."""
    lo = hi = 0
    for k in range(first, len(lanes)):
        s = f[k + 1] * (lanes[k] - 1)
        if s < 0:
            lo += s
        else:
            hi += s
    return lo, hi


def gapped_overlap(x: Access, y: Access, shift: int) -> bool:
    """Whether accesses x and y (y moved by shift bytes) share a byte: O(1) for equal row
    strides, one numpy pass over x's rows otherwise."""
    xs, ys = x[6], y[6]
    x0, xn, xl = x[2], x[4], x[5]
    y0, yn, yl = y[2] + shift, y[4], y[5]
    if x0 >= y[3] + shift or y0 >= x[3]:
        return False
    if xs == 0 or ys == 0 or xn == 1 or yn == 1:
        if xs == 0 or xn == 1:  # x is one range: swap, so that y is
            x0, xn, xl, xs, y0, yn, yl, ys = y0, yn, yl, ys, x0, xn, xl, xs
        if xs == 0 or xn == 1:
            return x0 < y0 + yl and y0 < x0 + xl
        # y is one range [y0, y0 + yl); rows of x: x0 + xs * r, r < xn, length xl
        r_lo = max(0, (y0 - xl - x0) // xs + 1)  # first row ending after y0
        return r_lo < xn and x0 + xs * r_lo < y0 + yl
    if xs == ys:  # rows r of x, r' of y: -yl < (y0 - x0) + s (r' - r) < xl for some u = r' - r
        d = y0 - x0
        u_lo = max(-(xn - 1), (-yl - d) // xs + 1)
        u_hi = min(yn - 1, -((d - xl) // xs) - 1)
        return u_lo <= u_hi
    r = np.arange(xn, dtype=np.int64)
    p = x0 + xs * r  # row starts of x; a row r' of y meets [p, p + xl) when
    lo = (p - yl - y0) // ys + 1  # y0 + ys r' > p - yl
    hi = -((y0 - p - xl) // ys) - 1  # y0 + ys r' < p + xl
    return bool(((np.maximum(lo, 0) <= np.minimum(hi, yn - 1))).any())


def _rows_overlap(xr: list[Access], yr: list[Access], shift: int) -> bool:
    return any(gapped_overlap(x, y, shift) for x in xr for y in yr)


def _hull_row(lo: int, hi: int) -> list[Access]:
    return [(0, False, lo, hi, 1, hi - lo, 0)]


_MEMO: dict[Any, bool] = {}


def conflicts(accs: list[tuple[Any, ...]], dim: int, dims: tuple[int, ...]) -> bool:
    """Whether two accesses in lanes that differ along `dim` (and agree on the outer
    dimensions) touch a common byte with a write involved; accesses of deeper dimensions count
    as the hull over those lanes. Memoised on the accesses' geometry moved to start at 0 in
    each memory (the answer does not change when a memory's accesses all move together)."""
    if dims[dim] < 2 or not any(a[1] for a in accs):
        return False
    low: dict[int, int] = {}
    for a in accs:
        low[a[0]] = min(low.get(a[0], a[2][0]), a[2][0])
    key = (dim, dims, tuple((sp, w, f[0] - low[sp]) + f[1:] + (lanes, shape, strides)
                            for sp, w, f, lanes, shape, strides, _, _ in accs))
    hit = _MEMO.get(key)
    if hit is None:
        if len(_MEMO) > 1 << 14:
            _MEMO.clear()
        hit = _MEMO[key] = _conflicts(accs, dim, dims)
    return hit


def _conflicts(accs: list[tuple[Any, ...]], dim: int, dims: tuple[int, ...]) -> bool:
    n = dims[dim]
    # per access: (space, write, a, c, rows relative to a, lo, hi, outer coefficients)
    recs: list[tuple[Any, ...]] = []
    for space, write, f, lanes, shape, strides, _, _ in accs:
        rows = rows_rel(shape, strides)
        deeper = [f[k + 1] * (lanes[k] - 1) for k in range(dim + 1, len(lanes))]
        if any(deeper):
            lo = min(r[2] for r in rows) + sum(min(0, s) for s in deeper)
            hi = max(r[3] for r in rows) + sum(max(0, s) for s in deeper)
            rows = _hull_row(lo, hi)
        recs.append((space, write, f[0], f[dim + 1], rows, min(r[2] for r in rows),
                     max(r[3] for r in rows), f[1:dim + 1]))
    sp = np.array([r[0] for r in recs])
    wr = np.array([r[1] for r in recs], bool)
    a = np.array([r[2] for r in recs], np.int64)
    c = np.array([r[3] for r in recs], np.int64)
    lo = a + np.array([r[5] for r in recs], np.int64) + np.minimum(0, c * (n - 1))
    hi = a + np.array([r[6] for r in recs], np.int64) + np.maximum(0, c * (n - 1))
    for k in range(dim):  # outer lanes agree, but may move two accesses apart differently
        bk = np.array([r[7][k] for r in recs], np.int64)
        span = (bk - bk.min()) * (dims[k] - 1)
        lo -= span
        hi += span
    pairs = 0
    for i in np.flatnonzero(wr):
        cand = np.flatnonzero((sp == sp[i]) & (lo < hi[i]) & (hi > lo[i]))
        pairs += cand.size
        if pairs > MAX_PAIRS:
            return True
        x = recs[i]
        for j in cand:
            if wr[j] and j < i:
                continue  # this pair was tested from j
            if _pair_conflict(x, recs[j], n, dims[:dim]):
                return True
    return False


def _pair_conflict(x: tuple[Any, ...], y: tuple[Any, ...], n: int,
                   outer: tuple[int, ...]) -> bool:
    _, _, ax, cx, xr, xlo, xhi, bx = x
    _, _, ay, cy, yr, ylo, yhi, by = y
    if bx != by:  # the outer lanes move the pair apart: y's hull over them (conservative)
        lo, hi = ylo, yhi
        for bxk, byk, nk in zip(bx, by, outer):
            s = (byk - bxk) * (nk - 1)
            lo, hi = lo + min(0, s), hi + max(0, s)
        yr, ylo, yhi = _hull_row(lo, hi), lo, hi
    d0 = ay - ax
    if cx != cy:  # per-lane hulls, every pair of different lanes (conservative)
        j = np.arange(n, dtype=np.int64)
        xl, xh = ax + xlo + cx * j, ax + xhi + cx * j
        yl, yh = ay + ylo + cy * j, ay + yhi + cy * j
        hit = (xl[:, None] < yh[None, :]) & (yl[None, :] < xh[:, None])
        np.fill_diagonal(hit, False)
        return bool(hit.any())
    if cx == 0:
        return _rows_overlap(xr, yr, d0)
    # lane distances e = j' - j != 0 whose hulls overlap
    lo_e = (xlo - yhi - d0) / cx
    hi_e = (xhi - ylo - d0) / cx
    if cx < 0:
        lo_e, hi_e = hi_e, lo_e
    first = max(int(np.floor(lo_e)) + 1, -(n - 1))
    last = min(int(np.ceil(hi_e)) - 1, n - 1)
    deltas = [e for e in range(first, last + 1) if e]
    if len(deltas) > MAX_DELTAS:
        return _rows_overlap_many(xr, yr, d0 + cx * np.array(deltas, np.int64))
    return any(_rows_overlap(xr, yr, d0 + cx * e) for e in deltas)


def _rows_overlap_many(xr: list[Access], yr: list[Access], shifts: np.ndarray) -> bool:
    """_rows_overlap for every shift at once, when every pair of row sets has one row stride
    (gapped_overlap's O(1) case, vectorised over the shifts); True (conservative) otherwise."""
    for x in xr:
        for y in yr:
            xs, ys, xn, yn = x[6], y[6], x[4], y[4]
            if xs != ys or xs == 0 or xn == 1 or yn == 1:
                return True
            x0, xl, yl = x[2], x[5], y[5]
            y0 = y[2] + shifts
            near = (x0 < y[3] + shifts) & (y0 < x[3])
            d = y0 - x0
            u_lo = np.maximum(-(xn - 1), (-yl - d) // xs + 1)
            u_hi = np.minimum(yn - 1, -((d - xl) // xs) - 1)
            if (near & (u_lo <= u_hi)).any():
                return True
    return False


def constant_read(a: tuple[Any, ...], mine: list[tuple[Any, ...]]) -> bool:
    """Whether access `a` (one that moves with the lanes) is a read of bytes no access of
    `mine` (one memory's accesses in the loop) writes, in any lane: the byte hulls over all
    lanes are disjoint. Such a read (a bias row stepped per output tile beside buffers every
    iteration reuses) sees the memory as it was before the loop in every order of execution
    and in every private copy (a copy holds the hull of every lane's accesses), so it does not
    stop private copies or renaming; the analyses of those strategies look at lane 0 of it,
    whose bytes no write touches either."""
    if a[1]:
        return False
    lo, hi = _lane_hull(a)
    for w in mine:
        if w[1]:
            wlo, whi = _lane_hull(w)
            if wlo < hi and lo < whi:
                return False
    return True


def _lane_hull(a: tuple[Any, ...]) -> tuple[int, int]:
    """[lo, hi) of the bytes access a touches over all its lanes."""
    blo, bhi = box_extent(a[4], a[5])
    llo, lhi = lane_extent(a[2], a[3], 0)
    return a[2][0] + blo + llo, a[2][0] + bhi + lhi


def private_ok(accs: list[tuple[Any, ...]], space: int, dim: int, dims: tuple[int, ...],
               base: int) -> bool:
    """Every byte of `space` that an iteration (of the loop of lane dimension `dim`) reads was
    written earlier in the same iteration or is never written by the loop: then one private
    copy of the memory per lane computes the sequential program's bytes. The accesses do not
    move with lanes `dim` (checked by the caller); deeper lanes count as a whole. Memoised like
    `conflicts`."""
    mine = [a for a in accs if a[0] == space]
    low = min(a[2][0] for a in mine)
    key = (space, dim, dims, tuple((w, f[0] - low) + f[1:] + (lanes, shape, strides, k)
                                   for _, w, f, lanes, shape, strides, k, _ in mine))
    hit = _PRIVATE_MEMO.get(key)
    if hit is None:
        if len(_PRIVATE_MEMO) > 1 << 14:
            _PRIVATE_MEMO.clear()
        hit = _PRIVATE_MEMO[key] = _private_ok(mine, dim, dims, base)
    return hit


_PRIVATE_MEMO: dict[Any, bool] = {}


def _private_ok(mine: list[tuple[Any, ...]], dim: int, dims: tuple[int, ...], base: int) -> bool:
    lo, hi = 1 << 62, -(1 << 62)
    for _, _, f, lanes, shape, strides, _, _ in mine:
        blo, bhi = box_extent(shape, strides)
        llo, lhi = lane_extent(f, lanes, dim + 1)
        lo = min(lo, f[0] - base + blo + llo)
        hi = max(hi, f[0] - base + bhi + lhi)
    ever = np.zeros(hi - lo, bool)
    done = np.zeros(hi - lo, bool)

    def view(mask: np.ndarray, f: tuple[int, ...], lanes: tuple[int, ...],
             shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
        lstr = tuple(f[k + 1] for k in range(dim + 1, len(lanes)))
        return np.ndarray(lanes[dim + 1:] + shape, bool, mask, f[0] - base - lo, lstr + strides)

    seen: set[Any] = set()
    for _, write, f, lanes, shape, strides, _, _ in mine:
        key = (f, lanes, shape, strides)
        if write and key not in seen:
            seen.add(key)
            view(ever, f, lanes, shape, strides)[...] = True
    # `done` only grows: a read that passed once passes again, a range marked stays marked
    checked: set[Any] = set()
    marked: set[Any] = set()
    op = -1
    pending: list[np.ndarray] = []
    for _, write, f, lanes, shape, strides, k, _ in mine:
        if k != op:  # an instruction's reads happen before its writes
            for v in pending:
                v[...] = True
            pending, op = [], k
        key = (f, lanes, shape, strides)
        if write:
            if key not in marked:
                marked.add(key)
                pending.append(view(done, f, lanes, shape, strides))
        elif key not in checked:
            checked.add(key)
            e = view(ever, f, lanes, shape, strides)
            if e.any() and (e & ~view(done, f, lanes, shape, strides)).any():
                return False
    return True
