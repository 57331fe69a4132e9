"""Lane-batched execution of hardware loops (the functional engine's fast path).

A loop of N iterations runs as one numpy operation per instruction of one iteration, over all
N iterations ("lanes") at once: a DMA of every iteration is one strided copy with the iteration
as an extra leading dimension, a matmul one stacked matmul, a vector op one op on stacked
tiles. One loop nested inside (whose body has no loops) may be batched the same way as a
second lane dimension. Registers are affine in the lane index (value + step * lane), so every
address is a strided numpy view.

Why the results are the reference engine's bits:
- The numerics are the same functions (`sim_core`) on stacked operands: elementwise ops and
  conversions per element; row reductions over contiguous rows of the same length; a stacked
  matmul is one BLAS call per slice, each slice the (m, k) x (k, n) call the reference makes
  (C-ordered operands of the same shapes).
- The order of execution changes from iteration-major to instruction-major, which is exact
  when no instruction of one iteration touches bytes another iteration touches with a write
  involved ("no cross-lane conflict", tested on the exact strided byte ranges, conservative
  only where it says so), except local memory that every iteration uses at the same addresses
  (buffers: a tile is loaded, computed and stored in every iteration): each lane then works on
  a private copy of the scratchpad/accumulator range, which is exact when every byte an
  iteration reads was written earlier in the same iteration or is never written by the loop
  (checked byte by byte), and afterwards holds the last iteration's bytes.
- Registers: the body's scalar instructions run once symbolically; the loop is accepted only
  when every register ends the iteration at its start value plus a constant (so iteration i
  sees start + i * step exactly) and no lane overflows.
- Everything the reference checks before an instruction (bounds, alignment, matmul state,
  loop depth) is checked for all lanes first; if any lane would fault, the loop runs one
  instruction at a time instead, so the fault is the reference's.
Loops with `ld`, register-driven inner trip counts or a matmul using weights loaded by an
earlier iteration run one instruction at a time.

Plans are cached on the decoded program by the loop, its trip count and the values of the
registers the body reads, so a program run again skips the analysis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from infer.target import isa
from infer.target.sim_access import ACC, DRAM, SPAD, Access, dma_access, rows_access
from infer.target.sim_core import NP_DTYPES, matmul_into, vector_compute
from infer.target.sim_decode import T_DMA, T_LD, T_LOADW, T_LOOP, T_MATMUL, T_SCALAR, T_VECTOR, Loop
from infer.target.sim_functional import functional_tables

if TYPE_CHECKING:
    from infer.target.sim_functional import FunctionalRun

ACC_BASE = isa.ACC_BASE
OP_DMA, OP_LOADW, OP_MATMUL, OP_VECTOR = range(4)
#: a cross-lane test enumerating more lane distances than this counts as a conflict
MAX_DELTAS = 256
#: more candidate access pairs than this: the loop is not batched (analysis too costly)
MAX_PAIRS = 40_000


class _Reject(Exception):
    """The loop cannot be batched (the reason is for debugging)."""


# A form is (a, b0, b1): the value a + b0 * lane0 + b1 * lane1.
Form = tuple[int, int, int]


def _extremes(f: Form, n0: int, n1: int) -> tuple[int, int]:
    a, b0, b1 = f
    lo = a + min(0, b0 * (n0 - 1)) + min(0, b1 * (n1 - 1))
    hi = a + max(0, b0 * (n0 - 1)) + max(0, b1 * (n1 - 1))
    return lo, hi


class _Walk:
    """Walks one iteration of a loop body symbolically and builds the batched operations."""

    def __init__(self, fr: FunctionalRun, lp: Loop, n0: int):
        self.fr, self.dec, self.tab, self.n0 = fr, fr.dec, functional_tables(fr.dec), n0
        self.spad_size, self.acc_size = fr.sim.spad.size, fr.sim.acc.size
        self.dram_size = fr.dram.size
        self.depth_left = fr.cfg.scalar.loop_depth - len(fr.stack) - 1
        self.ops: list[tuple[Any, ...]] = []
        self.accs: list[tuple[Any, ...]] = []  # (space, write, form, n1, geometry, op index)
        self.n1 = 1  # lanes of the inner batched loop being walked (1 outside)
        # the weights a matmul uses: (slot, lane dims, k, n); slot -1 = loaded before the loop
        self.weights: tuple[int, int, int, int] | None = None
        self.wdt = -1
        if fr.weights is not None:
            self.weights = (-1, 0, *fr.weights.shape)
            self.wdt = fr.wdtype
        #: weights a matmul may not use: an earlier lane's (the batched loop loads others)
        self.carried: Any = self.weights if _has_loadw(fr.dec, lp.start, lp.end) else None
        self.slots = 0
        self.steps = 0
        self.nins = [0] * 5
        self.rd = self.wr = self.macs = self.velem = 0

    # ------------------------------------------------------------------ registers
    def scalar(self, t: tuple, forms: list[Form]) -> None:
        op, rd, rs, rt, imm = t
        x, y = forms[rs], forms[rt]
        if op == 1:
            r = (x[0] + imm, x[1], x[2])
        elif op == 0:
            r = (imm, 0, 0)
        elif op == 2:
            r = (x[0] + y[0], x[1] + y[1], x[2] + y[2])
        elif op == 3:
            r = (x[0] - y[0], x[1] - y[1], x[2] - y[2])
        elif op == 5:
            r = (x[0] * imm, x[1] * imm, x[2] * imm)
        elif y[1] == y[2] == 0:
            r = (x[0] * y[0], x[1] * y[0], x[2] * y[0])
        elif x[1] == x[2] == 0:
            r = (y[0] * x[0], y[1] * x[0], y[2] * x[0])
        else:
            raise _Reject("register product of two lane-dependent values")
        lo, hi = _extremes(r, self.n0, self.n1)
        if lo < isa.REG_MIN or hi > isa.REG_MAX:
            raise _Reject("register overflow in some lane")
        if rd:
            forms[rd] = r

    def dry(self, start: int, end: int, regs: list[int], live: set[int],
            written: set[int]) -> None:
        """Run the scalar instructions of [start, end) on concrete values (one iteration),
        collecting the registers read before being written (`live`)."""
        tab, tclass, reads = self.tab, self.dec.tclass, _reads_table(self.dec)
        pc = start
        while pc < end:
            tc = tclass[pc]
            live.update(r for r in reads[pc] if r not in written)
            if tc == T_SCALAR and tab[pc] is not None:
                op, rd, rs, rt, imm = tab[pc]
                x, y = regs[rs], regs[rt]
                v = (imm, x + imm, x + y, x - y, x * y, x * imm)[op]
                if rd:
                    regs[rd] = v
                    written.add(rd)
            elif tc == T_LOOP:
                lp = tab[pc]
                for _ in range(max(lp.count, 0)):
                    self.dry(lp.start, lp.end, regs, live, written)
                pc = lp.end
                continue
            elif tc == T_LD:
                raise _Reject("ld in the body")
            pc += 1

    # ------------------------------------------------------------------ walking
    def body(self, start: int, end: int, forms: list[Form], depth: int) -> None:
        tab, tclass, dec = self.tab, self.dec.tclass, self.dec
        pc = start
        while pc < end:
            tc = tclass[pc]
            t = tab[pc]
            self.steps += 1
            self.nins[dec.engine[pc]] += 1
            if tc == T_SCALAR:
                if t is not None:
                    self.scalar(t, forms)
            elif tc == T_LOOP:
                self.inner_loop(t, forms, depth)
                pc = t.end
                continue
            elif tc == T_DMA:
                self.dma(pc, t, forms)
            elif tc == T_LOADW:
                self.loadw(pc, t, forms)
            elif tc == T_MATMUL:
                self.matmul(pc, t, forms)
            elif tc == T_VECTOR:
                self.vector(pc, t, forms)
            elif tc == T_LD:
                raise _Reject("ld in the body")
            pc += 1

    def inner_loop(self, lp: Loop, forms: list[Form], depth: int) -> None:
        cnt = lp.count  # constant: the batched loop's body is static
        if cnt <= 0:
            return
        if depth + 1 > self.depth_left:
            raise _Reject("loop nesting too deep")
        flat = all(self.dec.tclass[q] != T_LOOP for q in range(lp.start, lp.end))
        if flat and cnt > 1 and self.n1 == 1 and self.try_batch_inner(lp, cnt, forms):
            return
        for _ in range(cnt):
            self.body(lp.start, lp.end, forms, depth + 1)

    def try_batch_inner(self, lp: Loop, cnt: int, forms: list[Form]) -> bool:
        """Walk an inner loop as lane dimension 1; False (state restored) when its iterations
        are not independent."""
        concrete = [f[0] for f in forms]
        live: set[int] = set()
        self.dry(lp.start, lp.end, concrete, live, set())
        delta = [e - f[0] for e, f in zip(concrete, forms)]
        saved = (len(self.ops), len(self.accs), self.weights, self.wdt, self.slots, self.steps,
                 list(self.nins), self.rd, self.wr, self.macs, self.velem, self.carried)
        inner = [(f[0], f[1], d) for f, d in zip(forms, delta)]
        self.n1 = cnt
        try:
            first_acc = len(self.accs)
            if _has_loadw(self.dec, lp.start, lp.end):
                self.carried = self.weights  # a matmul using them would see another lane's
            self.body(lp.start, lp.end, inner, 1)
            if any(inner[r] != (forms[r][0] + delta[r], forms[r][1], delta[r]) for r in live):
                raise _Reject("inner registers not affine")
            if _conflicts(self.accs[first_acc:], dim=1, n=cnt, n0=self.n0):
                raise _Reject("inner iterations depend on each other")
        except _Reject:
            (n_ops, n_accs, self.weights, self.wdt, self.slots, self.steps, self.nins, self.rd,
             self.wr, self.macs, self.velem, self.carried) = saved
            del self.ops[n_ops:], self.accs[n_accs:]
            self.n1 = 1
            return False
        self.n1 = 1
        self.carried = saved[11]
        # per-iteration counts were counted once: the loop ran cnt times
        d_steps, d_nins = self.steps - saved[5], [a - b for a, b in zip(self.nins, saved[6])]
        self.steps += (cnt - 1) * d_steps
        self.nins = [a + (cnt - 1) * d for a, d in zip(self.nins, d_nins)]
        for name, i in (("rd", 7), ("wr", 8), ("macs", 9), ("velem", 10)):
            setattr(self, name, getattr(self, name) + (cnt - 1) * (getattr(self, name) - saved[i]))
        for r, f in enumerate(inner):  # the registers of the last inner lane
            forms[r] = (f[0] + (cnt - 1) * f[2], f[1], 0)
        return True

    # ------------------------------------------------------------------ operands
    def _local(self, f: Form, rows: int, row_bytes: int, stride: int, esz: int) -> tuple[int, int]:
        """(space, offset form a) of a local tile for every lane, or _Reject if some lane would
        fault (the reference checks of local_view)."""
        lo, hi = _extremes(f, self.n0, self.n1)
        if lo >= ACC_BASE:
            space, base, size = ACC, ACC_BASE, self.acc_size
        elif lo >= 0 and hi < ACC_BASE:
            space, base, size = SPAD, 0, self.spad_size
        else:
            raise _Reject("local operand outside one memory")
        if hi - base + (rows - 1) * stride + row_bytes > size:
            raise _Reject("local operand out of bounds")
        if (f[0] - base) % esz or f[1] % esz or f[2] % esz or stride % esz:
            raise _Reject("misaligned local operand")
        return space, base

    def _operand(self, space: int, base: int, f: Form, shape: tuple[int, ...],
                 strides: tuple[int, ...], dtype: Any) -> tuple[Any, ...]:
        lanes = (self.n0,) if self.n1 == 1 else (self.n0, self.n1)
        lstr = (f[1],) if self.n1 == 1 else (f[1], f[2])
        return (space, f[0] - base, lanes + shape, lstr + strides, dtype)

    def _access(self, space: int, write: bool, f: Form, shape: tuple[int, ...],
                strides: tuple[int, ...]) -> None:
        self.accs.append((space, write, f, self.n1, shape, strides, len(self.ops)))

    def dma(self, pc: int, t: tuple, forms: list[Form]) -> None:
        (db, do, lb, lo_, n0, n1, n2, ds1, ds2, ls1, ls2, dlo, dhi, llo, lhi, load) = t
        fd = forms[db]
        d = (fd[0] + do, fd[1], fd[2])
        fl = forms[lb]
        loc = (fl[0] + lo_, fl[1], fl[2])
        dmin, dmax = _extremes(d, self.n0, self.n1)
        if dmin + dlo < 0 or dmax + dhi > self.dram_size:
            raise _Reject("DMA outside DRAM")
        lmin, lmax = _extremes(loc, self.n0, self.n1)
        if lmin >= ACC_BASE:
            space, base, size = ACC, ACC_BASE, self.acc_size
        elif lmin >= 0 and lmax < ACC_BASE:
            space, base, size = SPAD, 0, self.spad_size
        else:
            raise _Reject("DMA local range outside one memory")
        if lmin - base + llo < 0 or lmax - base + lhi > size:
            raise _Reject("DMA outside local memory")
        shape = (n2, n1, n0)
        dv = self._operand(DRAM, 0, d, shape, (ds2, ds1, 1), np.uint8)
        lv = self._operand(space, base, loc, shape, (ls2, ls1, 1), np.uint8)
        self._access(DRAM, not load, d, shape, (ds2, ds1, 1))
        self._access(space, load, loc, shape, (ls2, ls1, 1))
        self.ops.append((OP_DMA, lv, dv) if load else (OP_DMA, dv, lv))
        nbytes = n0 * n1 * n2
        if load:
            self.rd += nbytes
        else:
            self.wr += nbytes

    def loadw(self, pc: int, t: tuple, forms: list[Form]) -> None:
        wb, wo, k, n, stride, dt, wdt = t
        fw = forms[wb]
        f = (fw[0] + wo, fw[1], fw[2])
        esz = NP_DTYPES[dt].itemsize
        space, base = self._local(f, k, n * esz, stride, esz)
        op = self._operand(space, base, f, (k, n), (stride, esz), NP_DTYPES[dt])
        self._access(space, False, f, (k, n * esz), (stride, 1))
        slot = self.slots
        self.slots += 1
        self.ops.append((OP_LOADW, slot, op, wdt))
        self.weights = (slot, 1 if self.n1 == 1 else 2, k, n)
        self.wdt = dt

    def matmul(self, pc: int, t: tuple, forms: list[Form]) -> None:
        ab, ao, cb, co, m, astride, cstride, dt, accum, is_int, odt = t
        w = self.weights
        if w is None or w is self.carried:
            raise _Reject("matmul with weights loaded by an earlier iteration")
        if self.wdt != dt:
            raise _Reject("matmul dtype differs from the weights'")
        slot, wdims, k, n = w
        fa, fc = forms[ab], forms[cb]
        fa = (fa[0] + ao, fa[1], fa[2])
        fc = (fc[0] + co, fc[1], fc[2])
        if _extremes(fc, self.n0, self.n1)[0] < ACC_BASE:
            raise _Reject("matmul output outside the accumulator")
        esz = NP_DTYPES[dt].itemsize
        sa, ba = self._local(fa, m, k * esz, astride, esz)
        sc, bc = self._local(fc, m, n * 4, cstride, 4)
        act = self._operand(sa, ba, fa, (m, k), (astride, esz), NP_DTYPES[dt])
        out = self._operand(sc, bc, fc, (m, n), (cstride, 4), NP_DTYPES[odt])
        ndims = 1 if self.n1 == 1 else 2
        select = None if wdims == ndims else ((None,) * ndims if wdims == 0 else (
            (slice(None), None) if wdims < ndims else (slice(None), -1)))
        self._access(sa, False, fa, (m, k * esz), (astride, 1))
        if accum:
            self._access(sc, False, fc, (m, n * 4), (cstride, 1))
        self._access(sc, True, fc, (m, n * 4), (cstride, 1))
        self.ops.append((OP_MATMUL, slot, select, act, out, is_int, accum))
        self.macs += m * k * n

    def vector(self, pc: int, t: tuple, forms: list[Form]) -> None:
        spec, rows, cols, db, do, ab, ao, dstride, astride, dt, at, bb, bo, bstride, bt, bmode = t
        ea, ed = NP_DTYPES[at].itemsize, NP_DTYPES[dt].itemsize
        dcols = 1 if spec.reduce else cols
        f = forms[ab]
        fa = (f[0] + ao, f[1], f[2])
        f = forms[db]
        fd = (f[0] + do, f[1], f[2])
        sa, ba = self._local(fa, rows, cols * ea, astride, ea)
        sd, bd = self._local(fd, rows, dcols * ed, dstride, ed)
        a = self._operand(sa, ba, fa, (rows, cols), (astride, ea), NP_DTYPES[at])
        dst = self._operand(sd, bd, fd, (rows, dcols), (dstride, ed), NP_DTYPES[dt])
        if not spec.a_is_dead:
            self._access(sa, False, fa, (rows, cols * ea), (astride, 1))
        b = None
        if spec.binary and bmode != 3:
            eb = NP_DTYPES[bt].itemsize
            f = forms[bb]
            fb = (f[0] + bo, f[1], f[2])
            brows, bcols, bstr = ((rows, cols, bstride), (1, cols, 0), (rows, 1, bstride))[bmode]
            sb, bbase = self._local(fb, brows, bcols * eb, bstr, eb)
            b = self._operand(sb, bbase, fb, (brows, bcols), (bstr, eb), NP_DTYPES[bt])
            self._access(sb, False, fb, (brows, bcols * eb), (bstr, 1))
        self._access(sd, True, fd, (rows, dcols * ed), (dstride, 1))
        self.ops.append((OP_VECTOR, spec, a, b, dst, dt))
        self.velem += rows * cols


# ----------------------------------------------------------------------------- dependence tests
def _rows_rel(shape: tuple[int, ...], strides: tuple[int, ...]) -> list[Access]:
    out: list[Access] = []
    if len(shape) == 3:
        dma_access(0, False, 0, shape[0], shape[1], shape[2], strides[0], strides[1], out)
    else:
        rows_access(0, False, 0, shape[0], shape[1], strides[0], out)
    return out


def _shifted(rows: list[Access], s: int) -> list[Access]:
    return [(r[0], r[1], r[2] + s, r[3] + s, r[4], r[5], r[6]) for r in rows]


def _gapped_overlap(x: Access, y: Access, shift: int) -> bool:
    """Whether accesses x and y (y moved by shift bytes) share a byte: O(1) for equal row
    strides, one numpy pass over x's rows otherwise."""
    xs, ys = x[6], y[6]
    x0, xn, xl = x[2], x[4], x[5]
    y0, yn, yl = y[2] + shift, y[4], y[5]
    if x0 >= y[3] + shift or y0 >= x[3]:
        return False
    if xs == 0 or ys == 0 or xn == 1 or yn == 1:
        if xs == 0 or xn == 1:  # x is one range [x0, x0 + xl): does it meet a row of y?
            x, y, x0, xn, xl, xs, y0, yn, yl, ys = y, x, y0, yn, yl, ys, x0, xn, xl, xs
        # y is one range [y0, y0 + yl); rows of x: x0 + xs * r, r < xn, length xl
        if xs == 0 or xn == 1:
            return x0 < y0 + yl and y0 < x0 + xl
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
    return any(_gapped_overlap(x, y, shift) for x in xr for y in yr)


def _conflicts(accs: list[tuple[Any, ...]], dim: int, n: int, n0: int) -> bool:
    """Whether two accesses of different lanes along `dim` (n lanes) touch a common byte with
    a write involved. dim 0: any lanes of dimension 1 (each access is the hull of its inner
    lanes); dim 1: the same lane of dimension 0."""
    if n < 2:
        return False
    # per access: (write, a, c, rows relative to a, lo, hi, extra) where c is the lane
    # coefficient along dim and `extra` the other dimension's (b, count) for dim 1
    recs: list[tuple[Any, ...]] = []
    for space, write, f, n1, shape, strides, _ in accs:
        rows = _rows_rel(shape, strides)
        if dim == 0 and n1 > 1 and f[2]:
            lo = min(r[2] for r in rows) + min(0, f[2] * (n1 - 1))
            hi = max(r[3] for r in rows) + max(0, f[2] * (n1 - 1))
            rows = [(0, False, lo, hi, 1, hi - lo, 0)]
        c = f[1] if dim == 0 else f[2]
        recs.append((space, write, f[0], c, rows, min(r[2] for r in rows),
                     max(r[3] for r in rows), f[1]))
    sp = np.array([r[0] for r in recs])
    wr = np.array([r[1] for r in recs], bool)
    if not wr.any():
        return False
    a = np.array([r[2] for r in recs], np.int64)
    c = np.array([r[3] for r in recs], np.int64)
    lo = a + np.array([r[5] for r in recs], np.int64) + np.minimum(0, c * (n - 1))
    hi = a + np.array([r[6] for r in recs], np.int64) + np.maximum(0, c * (n - 1))
    if dim == 1:  # the other dimension may shift two accesses apart by (b0y - b0x) * lane0
        b0 = np.array([r[7] for r in recs], np.int64)
        span = np.abs(b0 - b0.min()) * (n0 - 1)
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
            if _pair_conflict(x, recs[j], n, n0, dim):
                return True
    return False


def _pair_conflict(x: tuple[Any, ...], y: tuple[Any, ...], n: int, n0: int, dim: int) -> bool:
    _, _, ax, cx, xr, xlo, xhi, bx = x
    _, _, ay, cy, yr, ylo, yhi, by = y
    if dim == 1 and bx != by:
        # lanes of dimension 0 shift the pair apart differently: use y's hull over them
        s = (by - bx) * (n0 - 1)
        lo, hi = ylo + min(0, s), yhi + max(0, s)
        yr = [(0, False, lo, hi, 1, hi - lo, 0)]
        ylo, yhi = lo, hi
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
    # lane distance e = j' - j with overlapping hulls: xlo < ylo + d0 + c e + (yhi - ylo) ...
    lo_e = (xlo - yhi - d0) / cx
    hi_e = (xhi - ylo - d0) / cx
    if cx < 0:
        lo_e, hi_e = hi_e, lo_e
    first = max(int(np.floor(lo_e)) + 1, -(n - 1))
    last = min(int(np.ceil(hi_e)) - 1, n - 1)
    deltas = [e for e in range(first, last + 1) if e]
    if len(deltas) > MAX_DELTAS:
        return True
    return any(_rows_overlap(xr, yr, d0 + cx * e) for e in deltas)


def _private_ok(accs: list[tuple[Any, ...]], space: int, lo: int, hi: int, base: int) -> bool:
    """Every byte of `space` a lane reads was written earlier in the same iteration or is never
    written by the loop (then a private copy per lane computes the reference's bytes)."""
    size = hi - lo
    ever = np.zeros(size, bool)
    done = np.zeros(size, bool)

    def view(mask: np.ndarray, f: Form, n1: int, shape: tuple[int, ...],
             strides: tuple[int, ...]) -> np.ndarray:
        off = f[0] - base - lo
        if n1 > 1:
            return np.ndarray((n1,) + shape, bool, mask, off, (f[2],) + strides)
        return np.ndarray(shape, bool, mask, off, strides)

    mine = [a for a in accs if a[0] == space]
    for _, write, f, n1, shape, strides, _ in mine:
        if write:
            view(ever, f, n1, shape, strides)[...] = True
    op = -1
    pending: list[np.ndarray] = []
    for _, write, f, n1, shape, strides, k in mine:
        if k != op:  # an instruction's reads happen before its writes
            for v in pending:
                v[...] = True
            pending, op = [], k
        if write:
            pending.append(view(done, f, n1, shape, strides))
        else:
            e = view(ever, f, n1, shape, strides)
            if e.any() and (e & ~view(done, f, n1, shape, strides)).any():
                return False
    return True


# ----------------------------------------------------------------------------- plans
class Plan:
    """The batched form of one loop execution: operations, private memory ranges, and what
    the loop does to registers, weights and counters."""

    def __init__(self, walk: _Walk, n0: int, final: dict[int, int],
                 private: dict[int, tuple[int, int]]):
        self.ops, self.n0, self.final, self.private = walk.ops, n0, final, private
        self.weights = walk.weights
        self.wdt = walk.wdt
        self.slots = walk.slots
        self.steps, self.nins = walk.steps, walk.nins
        self.rd, self.wr, self.macs, self.velem = walk.rd, walk.wr, walk.macs, walk.velem


def _make_plan(fr: FunctionalRun, lp: Loop, n0: int) -> Plan:
    walk = _Walk(fr, lp, n0)
    concrete = list(fr.regs)
    live: set[int] = set()
    written: set[int] = set()
    walk.dry(lp.start, lp.end, concrete, live, written)
    delta = [e - s for e, s in zip(concrete, fr.regs)]
    forms: list[Form] = [(v, d, 0) for v, d in zip(fr.regs, delta)]
    walk.body(lp.start, lp.end, forms, 0)
    if any(forms[r] != (fr.regs[r] + delta[r], delta[r], 0) for r in live):
        raise _Reject("registers not affine in the iteration")
    # after the loop every register holds the last lane's value
    final = {r: forms[r][0] + forms[r][1] * (n0 - 1) for r in written if r}
    # local memory used at the same addresses by every lane and written: private copies
    private: dict[int, tuple[int, int]] = {}
    shared_accs = []
    for space, base in ((SPAD, 0), (ACC, ACC_BASE)):
        mine = [a for a in walk.accs if a[0] == space]
        if not mine or not any(a[1] for a in mine) or any(a[2][1] for a in mine):
            shared_accs += mine
            continue
        lo, hi = 1 << 62, -(1 << 62)
        for _, _, f, n1, shape, strides, _ in mine:
            rows = _rows_rel(shape, strides)
            off = f[0] - base
            s1 = f[2] * (n1 - 1)
            lo = min(lo, off + min(r[2] for r in rows) + min(0, s1))
            hi = max(hi, off + max(r[3] for r in rows) + max(0, s1))
        if not _private_ok(walk.accs, space, lo, hi, base):
            raise _Reject("a lane reads local bytes an earlier iteration wrote")
        private[space] = (lo, hi)
    shared_accs += [a for a in walk.accs if a[0] == DRAM]
    if _conflicts(shared_accs, dim=0, n=n0, n0=n0):
        raise _Reject("iterations depend on each other")
    return Plan(walk, n0, final, private)


def _run_plan(fr: FunctionalRun, plan: Plan) -> None:
    sim = fr.sim
    bufs: list[Any] = [fr.dram, sim.spad, sim.acc]
    copies = {}
    for space, (lo, hi) in plan.private.items():
        mem = sim.spad if space == SPAD else sim.acc
        p = np.empty((plan.n0, hi - lo), np.uint8)
        p[...] = mem[lo:hi]
        copies[space] = (p, lo, hi)

    def view(o: tuple[Any, ...]) -> np.ndarray:
        space, off, shape, strides, dtype = o
        if space in copies:
            p, lo, hi = copies[space]
            return np.ndarray(shape, dtype, p, off - lo, (hi - lo,) + strides[1:])
        return np.ndarray(shape, dtype, bufs[space], off, strides)

    slots: list[Any] = [None] * plan.slots
    sat = 0
    for op in plan.ops:
        kind = op[0]
        if kind == OP_DMA:
            view(op[1])[...] = view(op[2])
        elif kind == OP_MATMUL:
            w = slots[op[1]] if op[1] >= 0 else fr.weights
            if op[2] is not None:
                w = w[op[2]]
            sat += matmul_into(view(op[3]), w, view(op[4]), op[5], op[6])
        elif kind == OP_LOADW:
            slots[op[1]] = view(op[2]).astype(op[3], order="C")
        else:
            _, spec, a, b, dst, dt = op
            vector_compute(spec, view(a), None if b is None else view(b), view(dst), dt)
    for space, (p, lo, hi) in copies.items():
        (sim.spad if space == SPAD else sim.acc)[lo:hi] = p[-1]
    if plan.weights is not None and plan.weights[0] >= 0:
        slot, ndims, _, _ = plan.weights
        w = slots[slot][-1]
        if ndims == 2:
            w = w[-1]
        fr.weights = np.ascontiguousarray(w)
        fr.wdtype = plan.wdt
    n = plan.n0
    for r, v in plan.final.items():
        fr.regs[r] = v
    c = fr.c
    c.acc_saturations += sat
    c.macs += n * plan.macs
    c.dram_read_bytes += n * plan.rd
    c.dram_write_bytes += n * plan.wr
    c.vector_elements += n * plan.velem
    for e in range(5):
        c.per_engine_instructions[e] += n * plan.nins[e]
    fr.steps += n * plan.steps


def _reads_table(dec: Any) -> list[tuple[int, ...]]:
    """Per pc: the registers the instruction reads."""
    tab = dec.__dict__.get("reg_reads")
    if tab is None:
        tab = dec.reg_reads = [tuple(v for f, v in zip(ins.d.fields, ins.values)
                                     if f.kind == "reg" and f.name != "rd" and v)
                               for ins in dec.instrs]
    return tab


def _reads(dec: Any, lp: Loop) -> tuple[int, ...]:
    """The registers the loop body reads (the plan depends on their values at entry)."""
    cache = dec.__dict__.setdefault("loop_reads", {})
    regs = cache.get(lp.pc)
    if regs is None:
        reads = _reads_table(dec)
        regs = cache[lp.pc] = tuple(sorted({r for q in range(lp.start, lp.end) for r in reads[q]}))
    return regs


def _has_loadw(dec: Any, start: int, end: int) -> bool:
    return any(dec.tclass[q] == T_LOADW for q in range(start, end))


def try_lockstep(fr: FunctionalRun, lp: Loop, n: int) -> bool:
    """Run all n iterations of lp batched if that is provably exact; False (nothing done)
    otherwise."""
    dec = fr.dec
    if not lp.static_body:
        return False
    failed: dict[int, str] = dec.__dict__.setdefault("lockstep_failed", {})
    if lp.pc in failed:
        return False
    plans: dict[Any, Plan] = dec.__dict__.setdefault("lockstep_plans", {})
    key = (lp.pc, n, fr.dram.size, len(fr.stack), tuple(fr.regs[r] for r in _reads(dec, lp)),
           fr.wdtype, None if fr.weights is None else fr.weights.shape)
    plan = plans.get(key)
    if plan is None:
        try:
            plan = _make_plan(fr, lp, n)
        except _Reject as e:
            failed[lp.pc] = str(e)  # why, for whoever profiles the simulator
            return False
        plans[key] = plan
    _run_plan(fr, plan)
    return True
