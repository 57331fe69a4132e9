"""The reference engine: every instruction executed one at a time, data and timing together
(`Simulator.run(..., mode="reference")`). The fast engines (sim_functional, sim_timing) are
tested against it: same outputs bit for bit, same cycles and counters.

Execution model (see docs/isa.md): a front end fetches instructions in program order, runs
scalar/control instructions itself (1 cycle each, loops free) and dispatches the rest into
per-engine queues (dma_load, dma_store, matrix, vector). Register operands are read at
dispatch. Engines run their queues in order, concurrently; `wait=sN` makes an instruction
wait for (and consume) one token of semaphore N, `signal=sN` adds one when it completes.
A wait consumes the oldest token produced by an earlier instruction in program order; a wait
with no such token can never be satisfied and faults as a deadlock.

Functional results are computed in program order, which equals any schedule the
synchronisation allows (properly synchronised programs are race-free). A missing semaphore
therefore never shows up as a wrong number; `run(..., check_races=True)` finds it: every
executed memory instruction is recorded with its time window [start, done) and the byte ranges
it reads and writes, and two instructions of different engines (the front end's `ld` counts as
the scalar engine) that touch overlapping bytes of one space, at least one writing, fault as a
"race" when the later one in program order starts before the earlier one completes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from infer.target import isa
from infer.target.asm import Program, format_instr
from infer.target.sim_access import ACC, DRAM, RACE_SPACES, SPAD, dma_access, overlap, rows_access
from infer.target.sim_core import (
    E_LOAD, E_MATRIX, E_SCALAR, E_STORE, E_VECTOR, ENGINES, NP_DTYPES, Calendar, Counters, Fault,
    DequantSpec, PcProfile, SimFault, VectorSpec, deadlock, matmul_into, vector_compute,
    vector_occupancy, weights_dtype)

if TYPE_CHECKING:
    from infer.target.sim import Simulator


def dma_views(sim: Simulator, dram: np.ndarray, geometry: tuple, d: int, loc: int) -> tuple[np.ndarray,
                                                                                             np.ndarray]:
    """(DRAM view, local view) of a DMA at DRAM address d and local address loc; out-of-bounds
    boxes are faults. `geometry` is (n0, n1, n2, ds1, ds2, ls1, ls2, dlo, dhi, llo, lhi, load):
    the box and its byte extents relative to the two base addresses."""
    n0, n1, n2, ds1, ds2, ls1, ls2, dlo, dhi, llo, lhi, load = geometry
    dir_ = "load" if load else "store"
    if d + dlo < 0 or d + dhi > dram.size:
        raise Fault("out-of-bounds", f"dma.{dir_} DRAM range [{d + dlo}, {d + dhi}) "
                    f"outside DRAM ({dram.size} bytes)")
    if loc >= isa.ACC_BASE:
        mem, off, space = sim.acc, loc - isa.ACC_BASE, "accumulator"
    else:
        mem, off, space = sim.spad, loc, "scratchpad"
    if loc < 0 or off + llo < 0 or off + lhi > mem.size:
        raise Fault("out-of-bounds", f"dma.{dir_} local range [{loc + llo:#x}, "
                    f"{loc + lhi:#x}) outside the {space} ({mem.size} bytes)")
    return (np.ndarray((n2, n1, n0), np.uint8, dram, d, (ds2, ds1, 1)),
            np.ndarray((n2, n1, n0), np.uint8, mem, off, (ls2, ls1, 1)))


def matmul_step(sim: Simulator, weights: np.ndarray | None, wdtype: int, dt: int, act_addr: int, acc_addr: int,
                m: int, astride: int, cstride: int, accum: bool, counters: Any) -> int:
    """The data side of `mx.matmul`: m activation rows times the loaded weights into the
    accumulator (int8 -> int32 or float -> fp32); faults on a state or address error.
    Returns the MACs, which it also adds to `counters`."""
    if weights is None:
        raise Fault("state", "mx.matmul before any mx.loadw")
    if wdtype != dt:
        raise Fault("state", f"matmul dtype {isa.DTYPES[dt][0]} differs from the loaded "
                    f"weights' {isa.DTYPES[wdtype][0]}")
    k, n = weights.shape
    if acc_addr < isa.ACC_BASE:
        raise Fault("out-of-bounds", f"matmul output {acc_addr:#x} is not in the "
                    f"accumulator (which starts at {isa.ACC_BASE:#x})")
    is_int = dt == 0
    a = local_view(sim, act_addr, m, k, astride, dt, "activations")
    out = local_view(sim, acc_addr, m, n, cstride, 1 if is_int else 2, "accumulator")
    counters.acc_saturations += matmul_into(a, weights, out, is_int, accum)
    counters.macs += m * k * n
    name = isa.DTYPES[dt][0]
    counters.macs_by_dtype[name] = counters.macs_by_dtype.get(name, 0) + m * k * n
    return m * k * n


def local_view(sim: Simulator, addr: int, rows: int, cols: int, stride: int, dt: int,
               what: str) -> np.ndarray:
    """The (rows, cols) tile of dtype dt at local address addr (bounds and alignment checked)."""
    return local_array(sim, addr, rows, cols, stride, NP_DTYPES[dt], NP_DTYPES[dt].itemsize,
                       isa.DTYPES[dt][0], what)


def local_word(sim: Simulator, addr: int) -> int:
    """The sign-extended int32 at local address addr (`lds`; bounds and alignment checked)."""
    return int(local_array(sim, addr, 1, 1, 4, np.dtype(np.int32), 4, "int32", "lds")[0, 0])


def local_array(sim: Simulator, addr: int, rows: int, cols: int, stride: int, npdt: Any,
                align: int, tname: str, what: str) -> np.ndarray:
    """The (rows, cols) tile of numpy dtype npdt at local address addr; the address and the
    stride must be multiples of `align` (the element, or a `vec.dequant` scale entry)."""
    esz = npdt.itemsize
    if addr >= isa.ACC_BASE:
        mem, off, space = sim.acc, addr - isa.ACC_BASE, "accumulator"
    else:
        mem, off, space = sim.spad, addr, "scratchpad"
    if addr < 0:
        raise Fault("out-of-bounds", f"{what} address {addr} is negative")
    last = off + (rows - 1) * stride + cols * esz
    if last > mem.size:
        raise Fault("out-of-bounds", f"{what} [{addr:#x}, {addr - off + last:#x}) exceeds "
                    f"the {space} ({mem.size} bytes)")
    if off % align or stride % align:
        raise Fault("misaligned", f"{what} address {addr:#x} / stride {stride} not "
                    f"aligned to {align} bytes ({tname})")
    return np.ndarray((rows, cols), npdt, mem, off, (stride, esz))


def dequant_views(sim: Simulator, spec: DequantSpec, rows: int, cols: int, q: int,
                  qstride: int, s: int, sstride: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes, scales) operand tiles of a `vec.dequant` (bounds and alignment checked): the
    codes as bytes (int8 for q8_0), the scales as fp16 (d, or d, m pairs, along a row)."""
    (qr, qc), (sr, sc) = isa.dequant_shapes(spec.fmt, spec.axis, rows, cols)
    fname = isa.QFORMATS[spec.fmt]
    return (local_array(sim, q, qr, qc, qstride, spec.code_dtype, 1, fname, "codes"),
            local_array(sim, s, sr, sc * spec.scale_entry, sstride, np.dtype(np.float16),
                        2 * spec.scale_entry, f"{fname} scales", "scales"))


def compile_checks(cfg: Any, ins: isa.Instr) -> None:
    """The checks a program fails before it runs (same order in every engine)."""
    nreg, nsem = cfg.scalar.registers, cfg.scalar.semaphores
    for f, v in zip(ins.d.fields, ins.values):
        if f.kind == "reg" and v >= nreg:
            raise Fault("register", f"register {f.name} = r{v} out of range "
                        f"(config {cfg.name} has r0..r{nreg - 1})")
    for nm, s in (("wait", ins.wait), ("signal", ins.signal), ("signal2", ins.signal2),
                  ("wait2", ins.wait2)):
        if s > nsem:
            raise Fault("register", f"{nm} semaphore s{s} out of range (config "
                        f"{cfg.name} has s1..s{nsem})")
    if ins.d.engine == "matrix":
        mc = cfg.matrix
        v = ins.as_dict()
        dname = isa.DTYPES[v["dtype"]][0]
        if dname not in mc.dtypes:
            raise Fault("unsupported", f"dtype {dname} not supported by the matrix unit of "
                        f"config {cfg.name} ({', '.join(mc.dtypes)})")
        if ins.d.name == "mx.loadw" and (v["k"] > mc.rows or v["n"] > mc.cols):
            raise Fault("shape", f"weight tile {v['k']}x{v['n']} exceeds the "
                        f"{mc.rows}x{mc.cols} array")


def initial_registers(cfg: Any, regs: Mapping[str | int, int]) -> list[int]:
    nreg = cfg.scalar.registers
    out = [0] * isa.MAX_REGISTERS
    for k, v in regs.items():
        idx = int(k[1:]) if isinstance(k, str) and k.startswith("r") and k[1:].isdigit() else k
        if not isinstance(idx, int) or not 1 <= idx < nreg:
            raise ValueError(f"register {k!r} out of range (r1..r{nreg - 1})")
        if not isa.REG_MIN <= v <= isa.REG_MAX:
            raise ValueError(f"register {k!r} value {v} out of the 64-bit range")
        out[idx] = int(v)
    return out


class ReferenceRun:
    """State of one simulation run (pre-decoded closures over this state). One class of one
    closure factory per engine, as the simulator always had it (over the usual size): the
    reference stays the straightforward definition the fast engines are tested against."""

    def __init__(self, sim: Simulator, prog: Program, dram: np.ndarray,
                 regs: Mapping[str | int, int], trace: bool, check_races: bool = False):
        cfg = sim.cfg
        self.sim, self.cfg, self.prog, self.dram = sim, cfg, prog, dram
        self.trace = trace
        self.check_races = check_races
        # race checker: (done, engine, pc, start, accesses) of instructions that may still
        # conflict with later ones (done > front-end time; everything later starts after that)
        self.inflight: list[tuple[int, int, int, int, list[Any]]] = []
        self.regs = initial_registers(cfg, regs)
        self.c = Counters(cfg.name, cfg.clock_ghz, peak_macs_per_cycle=cfg.peak_macs_per_cycle,
                          peak_macs_per_cycle_by_dtype=cfg.peak_macs_per_cycle_by_dtype)
        self.prof = PcProfile.empty(len(prog.instrs)) if trace else None
        self.c.profile = self.prof
        self.events = self.c.log.items
        self.fe = 0
        self.eng_free = [0] * 5
        self.retired = [0] * 5  # per engine: when its latest instruction retired (see finish)
        self.qdepth = [cfg.queue_depth(e) for e in ENGINES]
        self.starts: list[deque[int]] = [deque(maxlen=d) for d in self.qdepth]
        self.sems: list[deque[int]] = [deque() for _ in range(isa.MAX_SEMAPHORES + 1)]
        self.last_done = 0
        self.cal = Calendar()
        self.chan = [[0] * cfg.dma.channels, [0] * cfg.dma.channels]
        # matrix
        self.wpath_free = 0
        self.weights_ready = 0
        self.stream_free = 0
        self.wbuf_release = [0, 0]
        self.wbuf = 0
        self.weights: np.ndarray | None = None
        self.wdtype = -1
        self.loop_stack: list[list[int]] = []

    # ------------------------------------------------------------------ timing core
    def stall(self, cause: str, n: int) -> None:
        if n > 0:
            self.c.stalls[cause] = self.c.stalls.get(cause, 0) + n

    def dispatch(self, e: int, wait: int, wait2: int = 0) -> int:
        """Enter engine e's queue; returns the earliest time the instruction may start (after
        the tokens of `wait` and `wait2`, each the oldest of its semaphore's)."""
        q = self.starts[e]
        t = self.fe
        if len(q) == self.qdepth[e] and q[0] > t:
            self.stall("queue_full_" + ENGINES[e], q[0] - t)
            t = q[0]
        self.fe = t + 1
        ready = max(t + 1, self.eng_free[e])
        for w in (wait, wait2):
            if w:
                fifo = self.sems[w]
                if not fifo:
                    raise deadlock(w)
                ts = fifo.popleft()
                if ts > ready:
                    self.stall("semaphore_" + ENGINES[e], ts - ready)
                    ready = ts
        return ready

    def finish(self, e: int, start: int, free: int, done: int, busy: int, signal: int,
               signal2: int, pc: int) -> None:
        self.eng_free[e] = free
        self.starts[e].append(start)
        self.c.busy[e] += busy
        self.c.per_engine_instructions[e] += 1
        # engines retire in order: a signal fires when the instruction and every earlier
        # instruction of its engine have completed (DMA transfers in flight on several channels,
        # or pipelined matmuls, may complete out of order)
        retire = self.retired[e] = max(done, self.retired[e])
        if signal:
            self.sems[signal].append(retire)
            if signal2:
                self.sems[signal2].append(retire)
        elif signal2:
            self.sems[signal2].append(retire)
        if done > self.last_done:
            self.last_done = done
        if self.trace:
            self.events.append((e, self.prog.instrs[pc].d.name, start, done - start, pc))
            p = self.prof
            assert p is not None
            p.count[pc] += 1
            if p.first[pc] < 0:
                p.first[pc] = start
            end = max(done, start + 1)
            if end > p.last[pc]:
                p.last[pc] = end

    def race(self, e: int, pc: int, start: int, done: int, accs: list[Any]) -> None:
        """Check instruction pc (engine e, window [start, done), accesses accs) against every
        earlier instruction still in flight; then record it."""
        fe = self.fe
        keep = []
        for rec in self.inflight:
            if rec[0] <= fe:  # completed before anything from now on can start
                continue
            keep.append(rec)
            if rec[1] == e or rec[0] <= start:
                continue
            for a in rec[4]:
                for b in accs:
                    if (a[0] == b[0] and (a[1] or b[1]) and a[2] < b[3] and b[2] < a[3]
                            and (ov := overlap(a, b)) is not None):
                        self.race_fault(rec, a, (done, e, pc, start, accs), b, ov)
        if accs:
            keep.append((done, e, pc, start, accs))
        self.inflight = keep

    def race_fault(self, first: tuple[int, int, int, int, list[Any]], a: Any,
                   later: tuple[int, int, int, int, list[Any]], b: Any,
                   ov: tuple[int, int]) -> None:
        def who(rec: tuple[int, int, int, int, list[Any]]) -> str:
            return (f"pc {rec[2]} {self.prog.instrs[rec[2]].d.name} ({ENGINES[rec[1]]}, "
                    f"cycles [{rec[3]}, {rec[0]}))")

        raise Fault("race", f"{RACE_SPACES[a[0]]} [{ov[0]:#x}, {ov[1]:#x}): {who(later)} "
                    f"{'writes' if b[1] else 'reads'} it while {who(first)} "
                    f"{'writes' if a[1] else 'reads'} it; pc {first[2]} is earlier in program "
                    f"order but pc {later[2]} starts before it completes (missing wait/signal)")

    # ------------------------------------------------------------------ pre-decode
    def compile(self) -> list[Any]:
        code = []
        for pc, ins in enumerate(self.prog.instrs):
            try:
                compile_checks(self.cfg, ins)
                code.append(getattr(self, "_c_" + ins.d.engine)(pc, ins))
            except Fault as fl:
                raise SimFault(pc, format_instr(ins), fl.cause, fl.kind) from None
        return code

    def _c_scalar(self, pc: int, ins: isa.Instr) -> Any:
        v = ins.as_dict()
        name, regs, wait, signal, signal2 = (ins.d.name, self.regs, ins.wait, ins.signal,
                                             ins.signal2)

        def sync_in() -> None:
            for w in (wait, ins.wait2):
                if w:
                    fifo = self.sems[w]
                    if not fifo:
                        raise deadlock(w)
                    ts = fifo.popleft()
                    if ts > self.fe:
                        self.stall("semaphore_scalar", ts - self.fe)
                        self.fe = ts

        def sync_out() -> None:
            self.c.per_engine_instructions[0] += 1
            self.c.busy[0] += 1
            if signal:
                self.sems[signal].append(self.fe)
            if signal2:
                self.sems[signal2].append(self.fe)

        def setreg(rd: int, val: int) -> None:
            if not isa.REG_MIN <= val <= isa.REG_MAX:
                raise Fault("register", f"result {val} overflows 64-bit register r{rd}")
            if rd:
                regs[rd] = val

        if name in ("nop", "halt", "fence"):
            def f() -> int:
                sync_in()
                if name != "nop":
                    self.fe = max(self.fe, self.last_done)
                self.fe += 1
                sync_out()
                return n_instrs if name == "halt" else pc + 1
            n_instrs = len(self.prog.instrs)
            return f
        rd = v.get("rd", 0)
        if name == "loop":
            cb, cnt, end = v["count_base"], v["count"], pc + 1 + v["body"]
            depth = self.cfg.scalar.loop_depth

            def f() -> int:
                sync_in()
                n = regs[cb] + cnt
                self.fe += 1
                sync_out()
                if n <= 0:
                    return end
                if len(self.loop_stack) >= depth:
                    raise Fault("loop", f"loop nesting exceeds scalar.loop_depth = {depth}")
                self.loop_stack.append([pc + 1, end, n])
                return pc + 1
            return f
        if name == "ld":
            base, off = v["addr_base"], v["addr"]
            lat = self.cfg.dram.latency_cycles
            dram = self.dram

            chk = self.check_races

            def f() -> int:
                sync_in()
                a = regs[base] + off
                if a < 0 or a + 4 > dram.size:
                    raise Fault("out-of-bounds", f"ld address {a} outside DRAM "
                                f"({dram.size} bytes)")
                if a % 4:
                    raise Fault("misaligned", f"ld address {a:#x} not 4-byte aligned")
                if chk:
                    self.race(E_SCALAR, pc, self.fe, self.fe + 1 + lat,
                              [(DRAM, False, a, a + 4, 1, 4, 0)])
                setreg(rd, int(dram[a:a + 4].view(np.int32)[0]))
                self.c.dram_read_bytes += 4
                self.fe += 1 + lat
                self.stall("scalar_load", lat)
                sync_out()
                return pc + 1
            return f
        if name == "lds":
            base, off = v["addr_base"], v["addr"]
            lds_lat = self.cfg.scalar.local_load_cycles
            chk = self.check_races

            def f() -> int:
                sync_in()
                a = regs[base] + off
                value = local_word(self.sim, a)
                if chk:
                    self.race(E_SCALAR, pc, self.fe, self.fe + 1 + lds_lat,
                              [(ACC if a >= isa.ACC_BASE else SPAD, False, a, a + 4, 1, 4, 0)])
                setreg(rd, value)
                self.fe += 1 + lds_lat
                self.stall("scalar_load", lds_lat)
                sync_out()
                return pc + 1
            return f
        rs, rt, imm = v.get("rs", 0), v.get("rt", 0), v.get("imm", 0)
        op = {"li": lambda: imm, "addi": lambda: regs[rs] + imm,
              "add": lambda: regs[rs] + regs[rt], "sub": lambda: regs[rs] - regs[rt],
              "mul": lambda: regs[rs] * regs[rt], "muli": lambda: regs[rs] * imm}[name]

        def f() -> int:
            sync_in()
            setreg(rd, op())
            self.fe += 1
            sync_out()
            return pc + 1
        return f

    def _dma(self, pc: int, ins: isa.Instr, load: bool) -> Any:
        v = ins.as_dict()
        db, do, lb, lo = v["dram_base"], v["dram"], v["local_base"], v["local"]
        n0, n1, n2, ds1, ds2, ls1, ls2 = (v[k] for k in ("n0", "n1", "n2", "ds1", "ds2", "ls1",
                                                         "ls2"))
        cfg, regs, sim, dram = self.cfg, self.regs, self.sim, self.dram
        burst = cfg.dram.burst_bytes
        charged = n2 * n1 * (-(-n0 // burst) * burst)
        xfer = -(-charged // cfg.dram.bytes_per_cycle)
        lat, setup = cfg.dram.latency_cycles, cfg.dma.setup_cycles
        nbytes = n0 * n1 * n2
        e = E_LOAD if load else E_STORE
        chans = self.chan[0 if load else 1]
        wait, signal, signal2 = ins.wait, ins.signal, ins.signal2
        c = self.c
        dlo = min(0, (n1 - 1) * ds1) + min(0, (n2 - 1) * ds2)
        dhi = max(0, (n1 - 1) * ds1) + max(0, (n2 - 1) * ds2) + n0
        llo = min(0, (n1 - 1) * ls1) + min(0, (n2 - 1) * ls2)
        lhi = max(0, (n1 - 1) * ls1) + max(0, (n2 - 1) * ls2) + n0
        dir_ = "load" if load else "store"
        chk = self.check_races
        geometry = (n0, n1, n2, ds1, ds2, ls1, ls2, dlo, dhi, llo, lhi, load)

        def f() -> int:
            d = regs[db] + do
            loc = regs[lb] + lo
            dv, lv = dma_views(sim, dram, geometry, d, loc)
            if load:
                lv[...] = dv
                c.dram_read_bytes += nbytes
            else:
                dv[...] = lv
                c.dram_write_bytes += nbytes
            # timing
            ready = self.dispatch(e, wait, ins.wait2)
            ci = min(range(len(chans)), key=chans.__getitem__)
            start = max(ready, chans[ci])
            self.stall("dma_channels_" + dir_, start - ready)
            t0 = start + setup
            xs = self.cal.reserve(t0, xfer)
            self.stall("dram_bandwidth_" + dir_, xs - t0)
            done = xs + xfer + lat
            chans[ci] = done
            c.dram_busy_cycles += xfer
            self.finish(e, start, t0, done, xfer, signal, signal2, pc)
            if chk:
                accs: list[Any] = []
                dma_access(DRAM, not load, d, n2, n1, n0, ds2, ds1, accs)
                dma_access(ACC if loc >= isa.ACC_BASE else SPAD, load, loc, n2, n1, n0, ls2,
                           ls1, accs)
                self.race(e, pc, start, done, accs)
            return pc + 1
        return f

    def _c_dma_load(self, pc: int, ins: isa.Instr) -> Any:
        return self._dma(pc, ins, True)

    def _c_dma_store(self, pc: int, ins: isa.Instr) -> Any:
        return self._dma(pc, ins, False)

    def _c_matrix(self, pc: int, ins: isa.Instr) -> Any:
        v = ins.as_dict()
        cfg, mc, regs = self.cfg, self.cfg.matrix, self.regs
        wait, signal, signal2, c = ins.wait, ins.signal, ins.signal2, self.c
        dt = v["dtype"]
        nbuf = mc.weight_buffers
        chk = self.check_races
        esz = NP_DTYPES[dt].itemsize
        prof = self.prof
        if ins.d.name == "mx.loadw":
            wb, wo, k, n, stride, trans = v["w_base"], v["w"], v["k"], v["n"], v["stride"], v["trans"]
            cyc = -(-(k * n * esz) // mc.weight_load_bytes_per_cycle)
            wdt = weights_dtype(dt, mc.rows)
            stored_rows, stored_cols = isa.loadw_stored_shape(k, n, trans)

            def f() -> int:
                w = local_view(self.sim, regs[wb] + wo, stored_rows, stored_cols, stride, dt, "weights")
                self.weights = (w.T if trans else w).astype(wdt, order="C")
                self.wdtype = dt
                ready = self.dispatch(E_MATRIX, wait, ins.wait2)
                buf = (self.wbuf + 1) % nbuf
                start = max(ready, self.wpath_free)
                if self.wbuf_release[buf] > start:
                    self.stall("weight_buffer", self.wbuf_release[buf] - start)
                    start = self.wbuf_release[buf]
                end = start + cyc
                self.wpath_free = self.weights_ready = end
                self.wbuf = buf
                c.weight_load_cycles += cyc
                self.finish(E_MATRIX, start, start + 1, end, 0, signal, signal2, pc)
                if chk:
                    accs: list[Any] = []
                    wa = regs[wb] + wo
                    rows_access(ACC if wa >= isa.ACC_BASE else SPAD, False, wa, stored_rows,
                                stored_cols * esz, stride, accs)
                    self.race(E_MATRIX, pc, start, end, accs)
                return pc + 1
            return f
        ab, ao, cb, co = v["act_base"], v["act"], v["acc_base"], v["acc"]
        m, astride, cstride, accum = v["m"], v["astride"], v["cstride"], v["accum"]
        cyc = mc.matmul_cycles(m, isa.DTYPES[dt][0])
        fill = mc.fill_drain_cycles

        def f() -> int:
            accaddr = regs[cb] + co
            macs = matmul_step(self.sim, self.weights, self.wdtype, dt, regs[ab] + ao, accaddr, m, astride,
                               cstride, accum, c)
            if prof is not None:
                prof.macs[pc] += macs
            ready = self.dispatch(E_MATRIX, wait, ins.wait2)
            start = max(ready, self.stream_free)
            if self.weights_ready > start:
                self.stall("weight_load", self.weights_ready - start)
                start = self.weights_ready
            end = start + cyc
            self.stream_free = end
            self.wbuf_release[self.wbuf] = end
            self.finish(E_MATRIX, start, start + 1, end + fill, cyc, signal, signal2, pc)
            if chk:
                k, n = self.weights.shape
                accs: list[Any] = []
                aa = regs[ab] + ao
                rows_access(ACC if aa >= isa.ACC_BASE else SPAD, False, aa, m, k * esz, astride,
                            accs)
                rows_access(ACC, True, accaddr, m, n * 4, cstride, accs)  # read + write
                self.race(E_MATRIX, pc, start, end + fill, accs)
            return pc + 1
        return f

    def _c_vector(self, pc: int, ins: isa.Instr) -> Any:
        v = ins.as_dict()
        vop = ins.d.vop
        assert vop is not None
        if vop.form == "dequant":
            return self._c_dequant(pc, ins)
        cfg, regs, sim, c = self.cfg, self.regs, self.sim, self.c
        wait, signal, signal2 = ins.wait, ins.signal, ins.signal2
        rows, cols = v["rows"], v["cols"]
        db, do, ab, ao = v["dst_base"], v["dst"], v["a_base"], v["a"]
        dstride, astride, dt, at = v["dstride"], v["astride"], v["dt"], v["at"]
        spec = VectorSpec.of(ins)
        binary = spec.binary
        if binary:
            bb, bo, bstride, bt, bmode = v["b_base"], v["b"], v["bstride"], v["bt"], v["bmode"]
        occ = vector_occupancy(cfg, ins)
        lat = cfg.vector.latency
        dshape = (rows, 1) if spec.reduce else (rows, cols)
        nelem = rows * cols

        def read_b() -> np.ndarray | None:
            if not binary or bmode == 3:
                return None
            base = regs[bb] + bo
            if bmode == 0:
                return local_view(sim, base, rows, cols, bstride, bt, "operand b")
            if bmode == 1:
                return local_view(sim, base, 1, cols, 0, bt, "operand b (row)")
            return local_view(sim, base, rows, 1, bstride, bt, "operand b (col)")

        chk = self.check_races
        b_rows = b_bytes = b_stride = a_bytes = d_bytes = 0
        if chk:  # operand shapes in bytes: (rows, bytes per row, stride) of a, b, dst
            a_bytes = cols * NP_DTYPES[at].itemsize
            d_bytes = dshape[1] * NP_DTYPES[dt].itemsize
            if binary and bmode != 3:
                b_rows, b_bytes, b_stride = ((rows, cols, bstride), (1, cols, 0),
                                             (rows, 1, bstride))[bmode]
                b_bytes *= NP_DTYPES[bt].itemsize

        def f() -> int:
            a = local_view(sim, regs[ab] + ao, rows, cols, astride, at, "operand a")
            dst = local_view(sim, regs[db] + do, dshape[0], dshape[1], dstride, dt, "destination")
            vector_compute(spec, a, read_b(), dst, dt)
            c.vector_elements += nelem
            ready = self.dispatch(E_VECTOR, wait, ins.wait2)
            self.finish(E_VECTOR, ready, ready + occ, ready + occ + lat, occ, signal, signal2, pc)
            if chk:
                accs: list[Any] = []
                x = regs[ab] + ao
                rows_access(ACC if x >= isa.ACC_BASE else SPAD, False, x, rows, a_bytes, astride,
                            accs)
                if b_rows:
                    x = regs[bb] + bo
                    rows_access(ACC if x >= isa.ACC_BASE else SPAD, False, x, b_rows, b_bytes,
                                b_stride, accs)
                x = regs[db] + do
                rows_access(ACC if x >= isa.ACC_BASE else SPAD, True, x, dshape[0], d_bytes,
                            dstride, accs)
                self.race(E_VECTOR, pc, ready, ready + occ + lat, accs)
            return pc + 1
        return f

    def _c_dequant(self, pc: int, ins: isa.Instr) -> Any:
        v = ins.as_dict()
        regs, sim, c = self.regs, self.sim, self.c
        wait, signal, signal2 = ins.wait, ins.signal, ins.signal2
        rows, cols, dt = v["rows"], v["cols"], v["dt"]
        spec = DequantSpec.of(ins)
        occ = vector_occupancy(self.cfg, ins)
        lat = self.cfg.vector.latency
        nelem = rows * cols
        (qr, qc), (sr, sc) = isa.dequant_shapes(spec.fmt, spec.axis, rows, cols)
        s_bytes = sc * 2 * spec.scale_entry
        d_bytes = cols * NP_DTYPES[dt].itemsize
        chk = self.check_races

        def f() -> int:
            q, s = dequant_views(sim, spec, rows, cols, regs[v["q_base"]] + v["q"],
                                 v["qstride"], regs[v["s_base"]] + v["s"], v["sstride"])
            dst = local_view(sim, regs[v["dst_base"]] + v["dst"], rows, cols, v["dstride"], dt,
                             "destination")
            spec.compute(q, s, dst, dt)
            c.vector_elements += nelem
            ready = self.dispatch(E_VECTOR, wait, ins.wait2)
            self.finish(E_VECTOR, ready, ready + occ, ready + occ + lat, occ, signal, signal2, pc)
            if chk:
                accs: list[Any] = []
                for name, nrows, nbytes, stride, write in (
                        ("q", qr, qc, v["qstride"], False), ("s", sr, s_bytes, v["sstride"], False),
                        ("dst", rows, d_bytes, v["dstride"], True)):
                    x = regs[v[name + "_base"]] + v[name]
                    rows_access(ACC if x >= isa.ACC_BASE else SPAD, write, x, nrows, nbytes,
                                stride, accs)
                self.race(E_VECTOR, pc, ready, ready + occ + lat, accs)
            return pc + 1
        return f

    # ------------------------------------------------------------------ main loop
    def execute(self, on_pc: Mapping[int, Callable[[int, np.ndarray], None]] | None = None) -> Counters:
        code = self.compile()
        instrs = self.prog.instrs
        n = len(code)
        pc = 0
        steps = 0
        stack = self.loop_stack
        at_end = self._hook(code, on_pc) if on_pc else None
        try:
            while pc < n:
                npc = code[pc]()
                steps += 1
                while stack and npc == stack[-1][1]:
                    top = stack[-1]
                    top[2] -= 1
                    if top[2] > 0:
                        npc = top[0]
                        break
                    stack.pop()
                if steps & 0xFFF == 0:
                    self.cal.prune(self.fe)
                pc = npc
        except Fault as fl:
            raise SimFault(pc, format_instr(instrs[pc]), fl.cause, fl.kind) from None
        if at_end is not None and pc == n:
            at_end(n, self.dram)
        self.c.instructions = steps
        self.c.cycles = max(self.fe, self.last_done)
        return self.c

    def _hook(self, code: list[Any], on_pc: Mapping[int, Callable[[int, np.ndarray], None]]):
        """Wrap the pre-decoded closures of the hooked pcs (see Simulator.run's `on_pc`);
        returns the end-of-program callback, if any."""
        n = len(code)
        stack, dram = self.loop_stack, self.dram
        fired: set[int] = set()
        at_end = None
        for pc, cb in on_pc.items():
            if not isinstance(pc, int) or not 0 <= pc <= n:
                raise ValueError(f"on_pc: instruction index {pc!r} outside the program (0..{n})")
            if pc == n:
                at_end = cb
                continue

            def hooked(f=code[pc], cb=cb, pc=pc) -> int:
                if not stack and pc not in fired:
                    fired.add(pc)
                    cb(pc, dram)
                return f()
            code[pc] = hooked
        return at_end
