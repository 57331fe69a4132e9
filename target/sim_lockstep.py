"""Lane-batched execution of hardware loops (the functional engine's fast path).

A loop of N iterations runs as one numpy operation per instruction of one iteration, over all
N iterations ("lanes") at once: a DMA of every iteration is one strided copy with the iteration
as an extra leading dimension, a matmul one stacked matmul, a vector op one op on stacked
tiles. Loops nested inside whose iterations are independent too become further lane
dimensions (up to MAXD); the others run unrolled inside the batched loop. Registers are affine
in the lane indices (value + sum of step * lane), so every address is a strided numpy view.

Why the results are the reference engine's bits:
- The numerics are the same functions (`sim_core`) on stacked operands: elementwise ops and
  conversions per element; row reductions over contiguous rows of the same length; a stacked
  matmul is one BLAS call per slice, each slice the (m, k) x (k, n) call the reference makes
  (C-ordered operands of the same shapes).
- The order of execution changes from iteration-major to instruction-major, which is exact
  when no instruction of one iteration touches bytes another iteration touches with a write
  involved (`sim_dependence.conflicts`: exact strided byte ranges, conservative only where it
  says so), except local memory that every iteration uses at the same addresses (buffers: a
  tile is loaded, computed and stored in every iteration): each lane then works on a private
  copy of the scratchpad/accumulator range, exact when every byte an iteration reads was
  written earlier in the same iteration or is never written by the loop (checked byte by
  byte: `sim_dependence.private_ok`); the copies of the last lane are what remains.
- Registers: the body's scalar instructions run once symbolically; the loop is accepted only
  when every register the body reads before writing ends the iteration at its start value
  plus a constant (so iteration i sees start + i * step exactly) and no lane overflows.
- Everything the reference checks before an instruction (bounds, alignment, matmul state,
  loop depth) is checked for all lanes first; if any lane would fault, the loop runs one
  instruction at a time instead, so the fault is the reference's.
Loops with `ld`, register-driven inner trip counts, or a matmul using weights that an earlier
iteration loaded run one iteration at a time.

Plans are cached on the decoded program by the loop, its trip count and the values of the
registers the body reads, so a program run again skips the analysis.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from infer.target import isa
from infer.target.sim_access import ACC, DRAM, SPAD
from infer.target.sim_constants import ConstantBytes, kept_conversion
from infer.target.sim_core import (
    NP_DTYPES, DequantSpec, VectorSpec, accumulate_into, converted, default_nan, may_hold_nan)
from infer.target.sim_decode import T_DMA, T_LD, T_LOADW, T_LOOP, T_MATMUL, T_SCALAR, T_VECTOR, Loop
from infer.target.sim_dependence import (
    MAXD, OP_ACCUM, OP_DMA, OP_ENTER, OP_EXIT, OP_LOADW, OP_MATMUL, OP_PRODUCT, OP_VECTOR, OP_VENTER,
    OP_VEXIT, NestedCopies, Reject, box_extent, conflicts, constant_read, lane_extent,
    private_ok)
from infer.target.sim_functional import functional_tables
from infer.target.sim_lanes import MIN_PARALLEL_ELEMENTS, MIN_PARALLEL_MACS, cut, splittable
from infer.target.sim_versions import version_loop

if TYPE_CHECKING:
    from infer.target.sim_functional import FunctionalRun

ACC_BASE = isa.ACC_BASE
#: private copies of local memory larger than this (bytes, all lanes): not batched
MAX_PRIVATE_BYTES = 1 << 28
_BASE = {SPAD: 0, ACC: ACC_BASE, DRAM: 0}


# A form is (a, b_0, ..., b_{MAXD-1}): the value a + sum_k b_k * lane_k.
Form = tuple[int, ...]


class _Walk:
    """Walks one iteration of a loop body symbolically and builds the batched operations."""

    def __init__(self, fr: FunctionalRun):
        self.fr, self.dec, self.tab = fr, fr.dec, functional_tables(fr.dec)
        self.size = {SPAD: fr.sim.spad.size, ACC: fr.sim.acc.size, DRAM: fr.dram.size}
        self.depth_left = fr.cfg.scalar.loop_depth - len(fr.stack) - 1
        self.nest = 0
        self.dims: list[int] = []
        zeros = (0,) * MAXD
        self.forms: list[Form] = [(v,) + zeros for v in fr.regs]
        self.ops: list[tuple[Any, ...]] = []
        self.accs: list[tuple[Any, ...]] = []  # see sim_dependence
        self.plevel = {SPAD: 0, ACC: 0}  # leading lane dims the memory is private over
        # the weights a matmul uses: (slot, lane dims, k, n); slot -1 = loaded before the loop
        self.weights: tuple[int, int, int, int] | None = None
        self.wdt = fr.wdtype
        if fr.weights is not None:
            self.weights = (-1, 0, *fr.weights.shape)
        self.carried: list[Any] = []  # weights a matmul may not use (another lane's)
        self.slots = 0
        self.versions: list[tuple[Any, ...]] = []  # renamed buffers (sim_versions)
        #: loops walked as lane dimensions with private copies or renamed buffers, and the
        #: loops to walk unrolled instead (an enclosing loop needs copies of the same memory)
        self.copying: list[int] = []
        self.unroll: set[int] = set()
        self.count = [0] * 10  # steps, 5 engines, DRAM read, DRAM written, MACs, vector elements

    # ------------------------------------------------------------------ registers
    def ext(self, f: Form) -> tuple[int, int]:
        lo = hi = f[0]
        for k, n in enumerate(self.dims):
            s = f[k + 1] * (n - 1)
            if s < 0:
                lo += s
            else:
                hi += s
        return lo, hi

    def scalar(self, t: tuple) -> None:
        op, rd, rs, rt, imm = t
        forms = self.forms
        x, y = forms[rs], forms[rt]
        if op == 1:
            r = (x[0] + imm,) + x[1:]
        elif op == 0:
            r = (imm,) + (0,) * MAXD
        elif op == 2:
            r = tuple(p + q for p, q in zip(x, y))
        elif op == 3:
            r = tuple(p - q for p, q in zip(x, y))
        elif op == 5:
            r = tuple(p * imm for p in x)
        elif not any(y[1:]):
            r = tuple(p * y[0] for p in x)
        elif not any(x[1:]):
            r = tuple(q * x[0] for q in y)
        else:
            raise Reject("register product of two lane-dependent values")
        lo, hi = self.ext(r)
        if lo < isa.REG_MIN or hi > isa.REG_MAX:
            raise Reject("register overflow in some lane")
        if rd:
            forms[rd] = r

    def dry(self, start: int, end: int, regs: list[int], live: set[int],
            written: set[int]) -> None:
        """Run the scalar instructions of [start, end) on concrete values (one iteration),
        collecting the registers read before being written (`live`)."""
        tab, tclass, reads = self.tab, self.dec.tclass, reads_table(self.dec)
        pc = start
        while pc < end:
            tc = tclass[pc]
            live.update(r for r in reads[pc] if r not in written)
            if tc == T_SCALAR and tab[pc] is not None:
                op, rd, rs, rt, imm = tab[pc]
                x, y = regs[rs], regs[rt]
                v = (imm, x + imm, x + y, x - y, x * y, x * imm)[op]
                if v < isa.REG_MIN or v > isa.REG_MAX:
                    # (out of range the reference faults; and a register squared in a loop
                    # would grow a Python int without bound here)
                    raise Reject("register overflow")
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
                raise Reject("ld in the body")
            pc += 1

    # ------------------------------------------------------------------ walking
    def body(self, start: int, end: int) -> None:
        tab, tclass, engine, count = self.tab, self.dec.tclass, self.dec.engine, self.count
        pc = start
        while pc < end:
            tc = tclass[pc]
            t = tab[pc]
            count[0] += 1
            count[1 + engine[pc]] += 1
            if tc == T_SCALAR:
                if t is not None:
                    self.scalar(t)
            elif tc == T_LOOP:
                self.loop(t)
                pc = t.end
                continue
            elif tc == T_DMA:
                self.dma(t)
            elif tc == T_LOADW:
                self.loadw(t)
            elif tc == T_MATMUL:
                self.matmul(t)
            elif tc == T_VECTOR:
                _VECTOR_WALKERS[type(t[0])](self, t)
            elif tc == T_LD:
                raise Reject("ld in the body")
            pc += 1

    def loop(self, lp: Loop) -> None:
        cnt = lp.count  # constant: the batched loop's body is static
        if cnt <= 0:
            return
        if self.nest + 1 > self.depth_left:
            raise Reject("loop nesting too deep")
        self.nest += 1
        if not (cnt > 1 and len(self.dims) < MAXD and lp.pc not in self.unroll
                and self.lane_loop(lp, cnt)):
            for _ in range(cnt):
                self.body(lp.start, lp.end)
        self.nest -= 1

    def lane_loop(self, lp: Loop, cnt: int) -> bool:
        """Walk lp as a new lane dimension; False (state restored) when its iterations are
        not independent (raises for the outermost loop: then nothing is batched).

        When lp needs private copies or renaming of a memory that a loop nested in it already
        copies or renames (sim_versions refuses to rename across nested copies; shared memory
        cannot hold an inner loop's copies), lp is walked again with those inner loops
        unrolled inside each of its lanes (`self.unroll`): a reduction loop around inner
        reduction loops becomes one reduction chain, an outer tile loop around a renamed
        K loop gets private copies over plain instructions."""
        d = len(self.dims)
        concrete = [f[0] for f in self.forms]
        live: set[int] = set()
        self.dry(lp.start, lp.end, concrete, live, set())
        delta = [c - f[0] for c, f in zip(concrete, self.forms)]
        start = list(self.forms)
        saved = (len(self.ops), len(self.accs), self.weights, self.wdt, self.slots,
                 list(self.count), dict(self.plevel), list(self.carried), self.nest,
                 len(self.copying))
        outer_plevel = saved[6]
        while True:
            self.forms = [f[:d + 1] + (dl,) + f[d + 2:] for f, dl in zip(start, delta)]
            self.dims.append(cnt)
            for s in (SPAD, ACC):  # optimistic: inner loops may make their own copies
                if self.plevel[s] == d:
                    self.plevel[s] = d + 1
            if any(self.dec.tclass[q] == T_LOADW for q in range(lp.start, lp.end)):
                self.carried.append(self.weights)
            try:
                self.body(lp.start, lp.end)
                for r in live:
                    s = start[r]
                    if self.forms[r] != (s[0] + delta[r],) + s[1:d + 1] + (delta[r],) + s[d + 2:]:
                        raise Reject("registers not affine in the iteration")
                private = self.decide(d, saved[0], saved[1], outer_plevel)
                break
            except Reject as e:
                inner = set(self.copying[saved[9]:]) - self.unroll
                n_ops, n_accs = saved[0], saved[1]
                del self.ops[n_ops:], self.accs[n_accs:], self.copying[saved[9]:]
                (_, _, self.weights, self.wdt, self.slots, count, plevel, carried, self.nest,
                 _) = saved
                self.plevel, self.carried = dict(plevel), list(carried)
                self.count[:] = count  # in place: the enclosing walk holds this list
                self.forms = start
                self.dims.pop()
                if isinstance(e, NestedCopies) and inner:
                    self.unroll |= inner  # and walk lp again
                    continue
                if d == 0:
                    raise
                self.dec.caches.setdefault("lane_rejects", {})[lp.pc] = str(e)
                return False
        if private or any(op[0] == OP_VENTER for op in self.ops[saved[0]:]):
            self.copying.append(lp.pc)
        lanes = tuple(self.dims)
        self.dims.pop()
        self.plevel, self.carried = outer_plevel, saved[7]
        if private:
            self.ops.insert(saved[0], (OP_ENTER, d + 1, tuple(private), lanes))
            self.ops.append((OP_EXIT, d + 1, tuple(private), lanes))
        self.count[:] = [c0 + cnt * (c - c0) for c, c0 in zip(self.count, saved[5])]
        # the registers of the last lane
        self.forms = [f[:1 + d] + (0,) + f[d + 2:] if not f[d + 1] else
                      (f[0] + f[d + 1] * (cnt - 1),) + f[1:d + 1] + (0,) + f[d + 2:]
                      for f in self.forms]
        return True

    def decide(self, d: int, first_op: int, first_acc: int,
               outer_plevel: dict[int, int]) -> list[int]:
        """Private copies or shared memory for lane dimension d; raises when the lanes
        depend on each other."""
        accs = self.accs[first_acc:]
        dims = tuple(self.dims)
        private, renamed = [], []
        for space in (SPAD, ACC):
            mine = [a for a in accs if a[0] == space]
            if (mine and outer_plevel[space] == d and any(a[1] for a in mine)
                    and all(a[2][d + 1] == 0 or constant_read(a, mine) for a in mine)):
                if private_ok(accs, space, d, dims, _BASE[space]):
                    private.append(space)
                else:
                    renamed.append(space)
            elif any((op[0] == OP_ENTER and space in op[2]) or (
                    op[0] == OP_VENTER and any(v[1] == space for v in op[2]))
                    for op in self.ops[first_op:]):
                raise NestedCopies("inner private copies of shared memory")
        if conflicts([a for a in accs if a[0] not in private and a[0] not in renamed], d, dims):
            raise Reject("iterations depend on each other")
        if renamed:
            version_loop(self, d, first_op, first_acc, renamed, _BASE)
        return private

    # ------------------------------------------------------------------ operands
    def local(self, f: Form, rows: int, row_bytes: int, stride: int, esz: int) -> int:
        """The memory of a local tile for every lane, or Reject if some lane would fault
        (the reference checks of local_view)."""
        lo, hi = self.ext(f)
        if lo >= ACC_BASE:
            space = ACC
        elif lo >= 0 and hi < ACC_BASE:
            space = SPAD
        else:
            raise Reject("local operand outside one memory")
        base = _BASE[space]
        if hi - base + (rows - 1) * stride + row_bytes > self.size[space]:
            raise Reject("local operand out of bounds")
        if (f[0] - base) % esz or any(b % esz for b in f[1:]) or stride % esz:
            raise Reject("misaligned local operand")
        return space

    def operand(self, space: int, f: Form, shape: tuple[int, ...], strides: tuple[int, ...],
                dtype: Any) -> tuple[Any, ...]:
        return (space, f, tuple(self.dims), shape, strides, dtype)

    def access(self, space: int, write: bool, f: Form, shape: tuple[int, ...],
               strides: tuple[int, ...], operand: int) -> None:
        self.accs.append((space, write, f, tuple(self.dims), shape, strides, len(self.ops),
                          operand))

    def dma(self, t: tuple) -> None:
        (db, do, lb, lo_, n0, n1, n2, ds1, ds2, ls1, ls2, dlo, dhi, llo, lhi, load) = t
        fd, fl = self.forms[db], self.forms[lb]
        d = (fd[0] + do,) + fd[1:]
        loc = (fl[0] + lo_,) + fl[1:]
        dmin, dmax = self.ext(d)
        if dmin + dlo < 0 or dmax + dhi > self.size[DRAM]:
            raise Reject("DMA outside DRAM")
        lmin, lmax = self.ext(loc)
        if lmin >= ACC_BASE:
            space = ACC
        elif lmin >= 0 and lmax < ACC_BASE:
            space = SPAD
        else:
            raise Reject("DMA local range outside one memory")
        base = _BASE[space]
        if lmin - base + llo < 0 or lmax - base + lhi > self.size[space]:
            raise Reject("DMA outside local memory")
        shape = (n2, n1, n0)
        dv = self.operand(DRAM, d, shape, (ds2, ds1, 1), np.uint8)
        lv = self.operand(space, loc, shape, (ls2, ls1, 1), np.uint8)
        self.access(DRAM, not load, d, shape, (ds2, ds1, 1), 2 if load else 1)
        self.access(space, load, loc, shape, (ls2, ls1, 1), 1 if load else 2)
        self.ops.append((OP_DMA, lv, dv) if load else (OP_DMA, dv, lv))
        self.count[6 if load else 7] += n0 * n1 * n2

    def loadw(self, t: tuple) -> None:
        wb, wo, k, n, stride, dt, wdt, trans = t
        fw = self.forms[wb]
        f = (fw[0] + wo,) + fw[1:]
        esz = NP_DTYPES[dt].itemsize
        rows, cols = isa.loadw_stored_shape(k, n, trans)  # (trans: read as its transpose)
        space = self.local(f, rows, cols * esz, stride, esz)
        op = self.operand(space, f, (k, n), (esz, stride) if trans else (stride, esz), NP_DTYPES[dt])
        self.access(space, False, f, (rows, cols * esz), (stride, 1), 2)
        slot = self.slots
        self.slots += 1
        self.ops.append((OP_LOADW, slot, op, wdt))
        self.weights = (slot, len(self.dims), k, n)
        self.wdt = dt

    def matmul(self, t: tuple) -> None:
        ab, ao, cb, co, m, astride, cstride, dt, accum, is_int, odt = t
        w = self.weights
        if w is None or any(w is c for c in self.carried):
            raise Reject("matmul with weights loaded by an earlier iteration")
        if self.wdt != dt:
            raise Reject("matmul dtype differs from the weights'")
        slot, wdims, k, n = w
        fa, fc = self.forms[ab], self.forms[cb]
        fa = (fa[0] + ao,) + fa[1:]
        fc = (fc[0] + co,) + fc[1:]
        if self.ext(fc)[0] < ACC_BASE:
            raise Reject("matmul output outside the accumulator")
        esz = NP_DTYPES[dt].itemsize
        sa = self.local(fa, m, k * esz, astride, esz)
        sc = self.local(fc, m, n * 4, cstride, 4)
        act = self.operand(sa, fa, (m, k), (astride, esz), NP_DTYPES[dt])
        out = self.operand(sc, fc, (m, n), (cstride, 4), NP_DTYPES[odt])
        self.access(sa, False, fa, (m, k * esz), (astride, 1), 3)
        if accum:
            self.access(sc, False, fc, (m, n * 4), (cstride, 1), 4)
        self.access(sc, True, fc, (m, n * 4), (cstride, 1), 4)
        self.ops.append((OP_MATMUL, slot, (wdims, len(self.dims)), act, out, is_int, accum))
        self.count[8] += m * k * n

    def vector(self, t: tuple) -> None:
        spec, rows, cols, db, do, ab, ao, dstride, astride, dt, at, bb, bo, bstride, bt, bmode = t
        ea, ed = NP_DTYPES[at].itemsize, NP_DTYPES[dt].itemsize
        dcols = 1 if spec.reduce else cols
        f = self.forms[ab]
        fa = (f[0] + ao,) + f[1:]
        f = self.forms[db]
        fd = (f[0] + do,) + f[1:]
        sa = self.local(fa, rows, cols * ea, astride, ea)
        sd = self.local(fd, rows, dcols * ed, dstride, ed)
        if spec.a_is_dead:  # bounds checked above; any values of the operand's type will do
            a = ("zero", fa, tuple(self.dims), (rows, cols), (astride, ea), NP_DTYPES[at])
        else:
            a = self.operand(sa, fa, (rows, cols), (astride, ea), NP_DTYPES[at])
            self.access(sa, False, fa, (rows, cols * ea), (astride, 1), 2)
        dst = self.operand(sd, fd, (rows, dcols), (dstride, ed), NP_DTYPES[dt])
        b = None
        if spec.binary and bmode != 3:
            eb = NP_DTYPES[bt].itemsize
            f = self.forms[bb]
            fb = (f[0] + bo,) + f[1:]
            brows, bcols, bstr = ((rows, cols, bstride), (1, cols, 0), (rows, 1, bstride))[bmode]
            sb = self.local(fb, brows, bcols * eb, bstr, eb)
            b = self.operand(sb, fb, (brows, bcols), (bstr, eb), NP_DTYPES[bt])
            self.access(sb, False, fb, (brows, bcols * eb), (bstr, 1), 3)
        self.access(sd, True, fd, (rows, dcols * ed), (dstride, 1), 4)
        self.ops.append((OP_VECTOR, spec, a, b, dst, dt))
        self.count[9] += rows * cols

    def dequant(self, t: tuple) -> None:
        spec, rows, cols, db, do, qb, qo, sb, so, dstride, qstride, sstride, dt = t
        (qr, qc), (sr, sc) = isa.dequant_shapes(spec.fmt, spec.axis, rows, cols)
        ed, p = NP_DTYPES[dt].itemsize, spec.scale_entry
        fq, fs, fd = ((self.forms[r][0] + o,) + self.forms[r][1:]
                      for r, o in ((qb, qo), (sb, so), (db, do)))
        sq = self.local(fq, qr, qc, qstride, 1)
        ss = self.local(fs, sr, sc * 2 * p, sstride, 2 * p)
        sd = self.local(fd, rows, cols * ed, dstride, ed)
        q = self.operand(sq, fq, (qr, qc), (qstride, 1), spec.code_dtype)
        s = self.operand(ss, fs, (sr, sc * p), (sstride, 2), np.dtype(np.float16))
        dst = self.operand(sd, fd, (rows, cols), (dstride, ed), NP_DTYPES[dt])
        self.access(sq, False, fq, (qr, qc), (qstride, 1), 2)
        self.access(ss, False, fs, (sr, sc * 2 * p), (sstride, 1), 3)
        self.access(sd, True, fd, (rows, cols * ed), (dstride, 1), 4)
        self.ops.append((OP_VECTOR, spec, q, s, dst, dt))
        self.count[9] += rows * cols


#: how a vector instruction is walked, by the kind of its functional-table entry
_VECTOR_WALKERS = {VectorSpec: _Walk.vector, DequantSpec: _Walk.dequant}


# ----------------------------------------------------------------------------- plans
class Plan:
    """The batched form of one loop execution: operations with their views resolved to
    (memory, offset, shape, strides, dtype), the private copies' ranges, and what the loop
    does to registers, weights and counters."""

    def __init__(self, ops: list[tuple[Any, ...]], hulls: dict[int, tuple[int, int]],
                 final: dict[int, int], walk: _Walk):
        self.ops, self.hulls, self.final = ops, hulls, final
        self.weights, self.wdt, self.slots, self.count = (walk.weights, walk.wdt, walk.slots,
                                                          walk.count)
        self.versions = walk.versions
        #: what every run of the plan would otherwise recompute: the version arrays of
        #: scratchpad buffers, and each version array's description by id
        self.spad_versions = frozenset(v[0] for v in walk.versions if v[1] == SPAD)
        self.version_info = {v[0]: v for v in walk.versions}
        #: the versions whose every byte some writer of theirs writes in every iteration (the
        #: mask of OP_VEXIT all set): their slots 1..n are written before they are read, so
        #: only slot 0 needs the memory's bytes, and the last slot is copied back whole
        self.fully_written = frozenset(
            vid for op in ops if op[0] == OP_VEXIT for vid, _, mask in op[2] if mask.all())
        #: the hulls [lo, hi) of the DRAM bytes the loop stores to (FunctionalRun.stores)
        self.dram_writes = []
        #: the hulls [lo, hi) of the scratchpad bytes the loop writes, and of those it reads
        #: (offsets)
        self.spad_writes: list[tuple[int, int]] = []
        self.spad_reads: list[tuple[int, int]] = []
        for space, write, f, lanes, shape, strides, _, _ in walk.accs:
            if space in (DRAM, SPAD) and (write or space == SPAD):
                blo, bhi = box_extent(shape, strides)
                llo, lhi = lane_extent(f, lanes, 0)
                lo = f[0] - _BASE[space]
                hulls = self.dram_writes if space == DRAM else self.spad_writes if write else self.spad_reads
                hulls.append((lo + blo + llo, lo + bhi + lhi))


def _finalize(walk: _Walk) -> list[tuple[Any, ...]]:
    """Resolve every operand to a view description: memory key ((space, level) for a private
    copy), offset, shape and strides, once the private copies are known."""
    hulls: dict[int, tuple[int, int]] = {}
    for space, _, f, lanes, shape, strides, _, _ in walk.accs:
        if space == DRAM:
            continue
        lo, hi = hulls.get(space, (1 << 62, -(1 << 62)))
        off = f[0] - _BASE[space]
        blo, bhi = box_extent(shape, strides)
        llo, lhi = lane_extent(f, lanes, 0)
        hulls[space] = (min(lo, off + blo + llo), max(hi, off + bhi + lhi))
    walk.hulls = hulls
    level = {SPAD: 0, ACC: 0, DRAM: 0}
    out: list[tuple[Any, ...]] = []

    versions = {v[0]: v for v in walk.versions}

    def view(o: tuple[Any, ...]) -> tuple[Any, ...]:
        space, f, lanes, shape, strides, dtype = o[:6]
        if space == "zero":
            return ("zero", 0, lanes + shape, (), dtype)
        if type(space) is tuple:  # a renamed buffer: ("V", version id, slot offset)
            _, vid, slot = space
            _, sp, d, n, wlo, whi, _ = versions[vid]
            hq = whi - wlo
            lstr = [(n + 1) * hq * math.prod(lanes[k + 1:d]) if k < d else (hq if k == d else
                                                                           f[k + 1])
                    for k in range(len(lanes))]
            return (("V", vid), slot * hq + f[0] - _BASE[sp] - wlo, lanes + shape,
                    tuple(lstr) + strides, dtype)
        p = level[space]
        if p:
            lo, hi = hulls[space]
            h = hi - lo
            key, off = (space, p), f[0] - _BASE[space] - lo
            # a read that moves with a private lane (constant_read) moves in its copy too
            lstr = [h * math.prod(lanes[k + 1:p]) + f[k + 1] for k in range(p)]
        else:
            key, off, lstr = space, f[0] - _BASE[space], []
        lstr += [f[k + 1] for k in range(p, len(lanes))]
        if len(o) > 6:  # one lane dimension dropped (the reduction's accumulator)
            drop = o[6]
            lanes = lanes[:drop] + lanes[drop + 1:]
            del lstr[drop]
        return (key, off, lanes + shape, tuple(lstr) + strides, dtype)

    for op in walk.ops:
        kind = op[0]
        if kind == OP_ENTER or kind == OP_EXIT:
            for space in op[2]:
                level[space] = op[1] if kind == OP_ENTER else op[1] - 1
                lo, hi = hulls[space]
                if math.prod(op[3]) * (hi - lo) > MAX_PRIVATE_BYTES:
                    raise Reject("private copies too large")
            out.append(op)
        elif kind == OP_DMA:
            out.append((kind, view(op[1]), view(op[2])))
        elif kind == OP_LOADW:
            out.append((kind, op[1], view(op[2]), op[3]))
        elif kind == OP_PRODUCT:
            (wd, md) = op[3]
            w_adapt = None if wd == md else ((1,) * (md - wd) if wd < md else
                                             (slice(None),) * md + (-1,) * (wd - md))
            out.append((kind, op[1], op[2], (wd, w_adapt), view(op[4]), op[5]))
        elif kind == OP_ACCUM:
            out.append((kind, op[1], op[2], [(view(acc), members, is_int)
                                             for acc, members, is_int in op[3]]))
        elif kind == OP_VENTER or kind == OP_VEXIT:
            out.append(op)
        elif kind == OP_MATMUL:
            (wd, md) = op[2]
            w_adapt = None if wd == md else ((1,) * (md - wd) if wd < md else
                                             (slice(None),) * md + (-1,) * (wd - md))
            out.append((kind, op[1], (wd, w_adapt), view(op[3]), view(op[4]), op[5], op[6]))
        else:
            _, spec, a, b, dst, dt = op
            out.append((kind, spec, view(a), None if b is None else view(b), view(dst), dt))
    return out


def _make_plan(fr: FunctionalRun, lp: Loop, n: int) -> Plan:
    walk = _Walk(fr)
    walk.lane_loop(lp, n)
    tab = walk.tab
    written = {tab[q][1] for q in range(lp.start, lp.end)
               if walk.dec.tclass[q] == T_SCALAR and tab[q] is not None and tab[q][1]}
    final = {r: walk.forms[r][0] for r in written}
    ops = _share_work(_finalize(walk), frozenset(v[0] for v in walk.versions if v[1] == SPAD))
    return Plan(ops, walk.hulls, final, walk)


def _in_spad(desc: tuple[Any, ...], spad_versions: frozenset[int] = frozenset()) -> bool:
    """Whether a resolved view is of the scratchpad, a private copy of it or a version array
    of a scratchpad buffer (keys name distinct arrays: the scratchpad, a private copy (space,
    level), a version array ("V", id)): memory no matrix operation writes."""
    key = desc[0]
    return key == SPAD or (type(key) is tuple and (key[0] == SPAD or (
        key[0] == "V" and key[1] in spad_versions)))


def _share_work(ops: list[tuple[Any, ...]],
                spad_versions: frozenset[int] = frozenset()) -> list[tuple[Any, ...]]:
    """Work the batched operations need not repeat, marked once per plan:
    - an mx.loadw converting the same scratchpad view as an earlier one, with only loadw and
      matrix operations in between (they write the accumulator), reuses its weights (fp32
      emulation loads the high half of a weight tile twice: with the activations' high and
      low halves);
    - an fp32 mx.matmul followed (across loadw of scratchpad weights) by another one
      accumulating into the same view, with scratchpad activations, leaves making its NaNs
      the default NaN to that one (`sim_core.canonical_nans`).
    OP_LOADW gets the slot to reuse (-1: convert), OP_MATMUL whether to canonicalise NaNs."""
    out: list[tuple[Any, ...]] = []
    loaded: dict[Any, int] = {}  # (view, compute type) -> slot, valid since its load
    for i, op in enumerate(ops):
        kind = op[0]
        if kind == OP_LOADW:
            key = (op[2], op[3])
            spad = _in_spad(op[2], spad_versions)
            alias = loaded.get(key, -1) if spad else -1
            if alias < 0 and spad:
                loaded[key] = op[1]
            out.append(op + (alias,))
            continue
        if kind == OP_MATMUL:
            check = True
            if not op[5]:  # float
                for nxt in ops[i + 1:]:
                    if nxt[0] == OP_LOADW and _in_spad(nxt[2], spad_versions):
                        continue
                    check = not (nxt[0] == OP_MATMUL and not nxt[5] and nxt[6]
                                 and nxt[4] == op[4] and _in_spad(nxt[3], spad_versions))
                    break
            out.append(op + (check,))
            continue
        if kind != OP_PRODUCT:  # may write the scratchpad or its copies
            loaded.clear()
        out.append(op)
    return out


def _run_plan(fr: FunctionalRun, plan: Plan, kept: dict[int, list[Any]] | None = None) -> None:
    """Run a plan on fr's memories. `kept`: id of an OP_LOADW -> [its conversion, or None
    until the first run makes it] (plan_constants)."""
    sim = fr.sim
    mem: dict[Any, np.ndarray] = {DRAM: fr.dram, SPAD: sim.spad, ACC: sim.acc}

    def view(o: tuple[Any, ...]) -> np.ndarray:
        key, off, shape, strides, dtype = o
        if key == "zero":
            return np.broadcast_to(np.zeros((), dtype), shape)
        return np.ndarray(shape, dtype, mem[key], off, strides)

    add = np.add
    # activation operands converted for the matrix unit since the last operation that may
    # write the scratchpad: fp32 emulation multiplies a tile by two weight tiles in a row, and
    # a loop unrolled in a lane multiplies tiles again (only mx.loadw and matrix operations in
    # between, which write the accumulator: only scratchpad operands and the version arrays
    # of scratchpad buffers are kept)
    spad_versions = plan.spad_versions
    fully_written = plan.fully_written
    acts: dict[Any, np.ndarray] = {}

    def activations(desc: tuple[Any, ...], dtype: Any) -> np.ndarray:
        x = acts.get((desc, dtype))
        if x is None:
            x = converted(view(desc), dtype)
            if _in_spad(desc, spad_versions):
                acts[(desc, dtype)] = x
        return x

    threads = fr.lanes  # a LanePool (sim_lanes: lanes split over threads), or None
    slots: list[Any] = [None] * plan.slots
    products: dict[int, np.ndarray] = {}
    sat = 0
    hulls = plan.hulls
    chain: np.ndarray | None = None  # the running sum of a chain of matmuls into one tile
    for op in plan.ops:
        kind = op[0]
        if kind != OP_LOADW and kind != OP_MATMUL and kind != OP_PRODUCT and acts:
            acts.clear()  # may write the scratchpad
        if kind == OP_DMA:
            view(op[1])[...] = view(op[2])
        elif kind == OP_MATMUL:
            wd, adapt = op[2]
            w = slots[op[1]] if op[1] >= 0 else fr.weights
            if adapt is not None:
                w = w.reshape(w.shape[:wd] + adapt + w.shape[wd:]) if type(adapt[0]) is int \
                    else w[adapt]
            x = activations(op[3], w.dtype)
            if chain is not None:  # the chain's next product: added to its temporary
                add(chain, x @ w, out=chain)
                if op[7]:  # the chain's last: the sum goes to the accumulator, then the NaN check
                    out = view(op[4])
                    out[...] = chain
                    chain = None
                    if may_hold_nan(out):
                        default_nan(out)
                continue
            out = view(op[4])
            if threads is not None and out.size * x.shape[-1] >= MIN_PARALLEL_MACS \
                    and splittable(out):
                def matmul_lanes(s: slice, x=x, w=w, out=out, op=op) -> int:
                    return accumulate_into(out[s], cut(x, s, out) @ cut(w, s, out), op[5], op[6],
                                           op[7])
                sat += sum(threads.map(out.shape[0], matmul_lanes))
            elif not op[7] and not op[5] and CHAIN_ACCUMULATIONS:
                # the first of a chain of float matmuls into this accumulator tile (`_share_work`:
                # the next operation but scratchpad weight loads is one more into it): summed
                # in a contiguous temporary, the same additions in the same order, the
                # accumulator read and written once instead of once per matmul
                r = x @ w
                chain = add(out, r) if op[6] else r
            else:
                sat += accumulate_into(out, x @ w, op[5], op[6], op[7])
        elif kind == OP_LOADW:
            if op[4] >= 0:
                slots[op[1]] = slots[op[4]]
            elif kept is not None and (box := kept.get(id(op))) is not None:
                slots[op[1]] = kept_conversion(box, view(op[2]), op[3])
            else:
                slots[op[1]] = converted(view(op[2]), op[3])
        elif kind == OP_PRODUCT:
            wd, adapt = op[3]
            w = slots[op[2]] if op[2] >= 0 else fr.weights
            if adapt is not None:
                w = w.reshape(w.shape[:wd] + adapt + w.shape[wd:]) if type(adapt[0]) is int \
                    else w[adapt]
            x = activations(op[4], w.dtype)
            if threads is not None and x.size * w.shape[-1] >= MIN_PARALLEL_MACS \
                    and (lead := np.broadcast_shapes(x.shape[:-2], w.shape[:-2])) and lead[0] >= 2:
                r = np.empty(lead + (x.shape[-2], w.shape[-1]), np.result_type(x, w))

                def product_lanes(s: slice, x=x, w=w, r=r) -> None:
                    np.matmul(cut(x, s, r), cut(w, s, r), out=r[s])
                threads.map(lead[0], product_lanes)
                products[op[1]] = r
            else:
                # computed by OP_ACCUM one iteration at a time, right before it is added
                # (_iteration): the operands are converted copies nothing writes
                products[op[1]] = (x, w)
        elif kind == OP_ACCUM:
            _, d, n, chains = op
            for acc, members, is_int in chains:
                out = view(acc)
                tmp = out.copy()  # contiguous: the same additions, in the same order
                terms = [products[q] for q in members]
                if tmp.size < ITERATION_PRODUCT_ELEMENTS or n * tmp.nbytes < WHOLE_PRODUCT_BYTES:
                    # small: one stacked product for all iterations costs fewer calls
                    terms = [t[0] @ t[1] if type(t) is tuple else t for t in terms]
                if is_int:
                    for j in range(n):
                        for t in terms:
                            sat += accumulate_into(tmp, _iteration(t, d, j), is_int, True, False)
                else:  # accumulate_into's float path, without a call per addition
                    for j in range(n):
                        for t in terms:
                            add(tmp, _iteration(t, d, j), out=tmp)
                if not is_int and may_hold_nan(tmp):  # again, each step with default NaNs
                    tmp[...] = out
                    for j in range(n):
                        for t in terms:
                            accumulate_into(tmp, _iteration(t, d, j), is_int, True)
                out[...] = tmp
            for _, members, _ in chains:
                for q in members:
                    del products[q]
        elif kind == OP_VENTER:
            for vid, space, d, n, wlo, whi, outer in op[2]:
                cur = _current(mem, hulls, space, d, wlo, whi)
                v = np.empty(outer + (n + 1, whi - wlo), np.uint8)
                if vid in fully_written:
                    # slot 0 is the memory before the loop; every byte of the later slots is
                    # written in its iteration before anything reads it (sim_versions: a read
                    # of a written byte reads its writer's slot after the writer ran)
                    v[..., 0, :] = cur
                else:
                    v[...] = cur[..., None, :]  # bytes no iteration writes stay
                mem[("V", vid)] = v
        elif kind == OP_VEXIT:
            info = plan.version_info
            for vid, space, mask in op[2]:
                _, _, d, n, wlo, whi, _ = info[vid]
                last = mem.pop(("V", vid))[..., n, :]
                if vid in fully_written:
                    _current(mem, hulls, space, d, wlo, whi)[...] = last
                else:
                    np.copyto(_current(mem, hulls, space, d, wlo, whi), last, where=mask)
        elif kind == OP_VECTOR:
            _, spec, a, b, dst, dt = op
            a, b, dst = view(a), None if b is None else view(b), view(dst)
            if threads is not None and dst.size >= MIN_PARALLEL_ELEMENTS and splittable(dst):
                def vector_lanes(s: slice, spec=spec, a=a, b=b, dst=dst, dt=dt) -> None:
                    spec.compute(cut(a, s, dst), None if b is None else cut(b, s, dst), dst[s], dt)
                threads.map(dst.shape[0], vector_lanes)
            else:
                spec.compute(a, b, dst, dt)
        elif kind == OP_ENTER:
            level, lanes = op[1], op[3]
            for space in op[2]:
                lo, hi = hulls[space]
                parent = mem[(space, level - 1)] if level > 1 else mem[space][lo:hi]
                p = np.empty(lanes + (hi - lo,), np.uint8)
                p[...] = parent[(slice(None),) * (level - 1) + (None,)]
                mem[(space, level)] = p
        else:  # OP_EXIT
            level = op[1]
            for space in op[2]:
                lo, hi = hulls[space]
                last = mem.pop((space, level))[..., -1, :]
                if level > 1:
                    mem[(space, level - 1)][...] = last
                else:
                    mem[space][lo:hi] = last
    assert chain is None  # (a chain's last matmul has its NaN check: `_share_work`)
    if plan.weights is not None and plan.weights[0] >= 0:
        slot, wdims, _, _ = plan.weights
        fr.weights = np.ascontiguousarray(slots[slot][(-1,) * wdims])
        fr.wdtype = plan.wdt
    for r, v in plan.final.items():
        fr.regs[r] = v
    fr.stores.extend(plan.dram_writes)
    c, cnt = fr.c, plan.count
    c.acc_saturations += sat
    c.macs += cnt[8]
    c.dram_read_bytes += cnt[6]
    c.dram_write_bytes += cnt[7]
    c.vector_elements += cnt[9]
    for e in range(5):
        c.per_engine_instructions[e] += cnt[1 + e]
    fr.steps += cnt[0]


def _replay_plan(cell: Any, plan: Plan) -> None:
    """A plan's step in a replay (sim_replay): run on the replay's FunctionalRun."""
    _run_plan(cell.run, plan)


def _replay_plan_kept(cell: Any, plan: Plan, kept: dict[int, list[Any]]) -> None:
    """_replay_plan with the conversions of constants kept (plan_constants)."""
    _run_plan(cell.run, plan, kept)


def plan_written(cb: ConstantBytes, plan: Plan) -> None:
    """What a plan's run writes, for ConstantBytes (sim_replay.keep_constants)."""
    for lo, hi in plan.spad_writes:
        cb.spad_written(lo, hi)
    for lo, hi in plan.dram_writes:
        cb.dram_written(lo, hi)


def plan_constants(plan: Plan, cb: ConstantBytes, budget: int) -> tuple[dict[int, list[Any]], int]:
    """The plan's weight conversions (OP_LOADW) of scratchpad bytes that are constant before
    it runs and that it does not write, as `kept` for _run_plan while their results fit in
    budget bytes; and the budget left."""
    kept: dict[int, list[Any]] = {}
    for op in plan.ops:
        if op[0] != OP_LOADW or op[4] >= 0 or op[2][0] != SPAD or budget <= 0:
            continue
        _, off, shape, strides, dtype = op[2]
        v = np.ndarray(shape, dtype, cb.spad, off, strides)
        nbytes = v.size * np.dtype(op[3]).itemsize
        lo, hi = cb.spad_range(v)
        if nbytes <= budget and cb.is_constant(v) \
                and all(hi <= wlo or whi <= lo for wlo, whi in plan.spad_writes):
            kept[id(op)] = [None]
            budget -= nbytes
    return kept, budget


#: a reduction computes its products one iteration at a time (_iteration) when an iteration's
#: product has this many elements and the whole stack this many bytes: below, one stacked
#: product per member costs fewer calls and stays in cache (all-MiniLM-L6-v2 on edge: chains
#: of 47 iterations of 32 x 16 tiles, 0.31 -> 0.39 s per run when computed per iteration; the
#: Llama prefill on edge: 15 iterations of 63 or 126 tiles of 128 x 16, 7.7-15 MB a member,
#: 2.37 -> 2.21 s)
ITERATION_PRODUCT_ELEMENTS = 1 << 14
WHOLE_PRODUCT_BYTES = 2 << 20
#: sum the float matmuls of a chain into one accumulator tile in a temporary (see _run_plan)
CHAIN_ACCUMULATIONS = True


def _iteration(p: np.ndarray | tuple[np.ndarray, np.ndarray], d: int, j: int) -> np.ndarray:
    """Iteration j (index j of lane dimension d) of a reduction's product: an array, or
    (activations, weights) whose stacked product is computed for that iteration only. The
    same BLAS call per (m, k) x (k, n) slice as the whole stack (as sim_lanes cuts stacks),
    and the product is added while it is in cache: a whole stack (the Llama prefill on edge:
    1,890 tiles of 128 x 16 per term, 15 MB) went to memory and came back for its additions."""
    if type(p) is not tuple:
        return p[(slice(None),) * d + (j,)]
    x, w = p
    rank = max(x.ndim, w.ndim)  # broadcast operands align on their last dimensions
    return _lane(x, d - rank + x.ndim, j) @ _lane(w, d - rank + w.ndim, j)


def _lane(a: np.ndarray, axis: int, j: int) -> np.ndarray:
    """Operand a of a stacked product for lane j of its dimension `axis` (whole if a has no
    such dimension, its only entry if it broadcasts along it)."""
    if axis < 0:
        return a
    return a[(slice(None),) * axis + (j if a.shape[axis] > 1 else 0,)]


def _current(mem: dict[Any, np.ndarray], hulls: dict[int, tuple[int, int]], space: int,
             level: int, lo: int, hi: int) -> np.ndarray:
    """Bytes [lo, hi) of a local memory as the lanes of `level` outer dimensions see it (its
    private copy at that level, or the memory itself)."""
    if level:
        h = hulls[space][0]
        return mem[(space, level)][..., lo - h:hi - h]
    return mem[space][lo:hi]


def reads_table(dec: Any) -> list[tuple[int, ...]]:
    """Per pc: the registers the instruction reads."""
    tab = dec.caches.get("reads")
    if tab is None:
        tab = dec.caches["reads"] = [tuple(v for f, v in zip(ins.d.fields, ins.values)
                                     if f.kind == "reg" and f.name != "rd" and v)
                               for ins in dec.instrs]
    return tab


def _reads(dec: Any, lp: Loop) -> tuple[int, ...]:
    """The registers the loop body reads (the plan depends on their values at entry)."""
    cache = dec.caches.setdefault("loop_reads", {})
    regs = cache.get(lp.pc)
    if regs is None:
        reads = reads_table(dec)
        regs = cache[lp.pc] = tuple(sorted({r for q in range(lp.start, lp.end) for r in reads[q]}))
    return regs


def try_lockstep(fr: FunctionalRun, lp: Loop, n: int) -> bool:
    """Run all n iterations of lp batched if that is provably exact; False (nothing done)
    otherwise."""
    dec = fr.dec
    if not lp.static_body:
        return False
    failed: dict[int, str] = dec.caches.setdefault("failed", {})
    if lp.pc in failed:
        return False
    plans: dict[Any, Plan] = dec.caches.setdefault("plans", {})
    key = (lp.pc, n, fr.dram.size, len(fr.stack), tuple(fr.regs[r] for r in _reads(dec, lp)),
           fr.wdtype, None if fr.weights is None else fr.weights.shape)
    plan = plans.get(key)
    if plan is None:
        try:
            plan = _make_plan(fr, lp, n)
        except Reject as e:
            failed[lp.pc] = str(e)  # why, for whoever profiles the simulator
            return False
        plans[key] = plan
    _run_plan(fr, plan)
    rec = fr.rec
    if rec is not None:
        if rec.tainted.intersection(_reads(dec, lp)):
            rec.refuse(f"batched loop at {lp.pc} reads a register that data decided")
        rec.add(_replay_plan, rec.cell, plan)
    return True
