"""Instruction-set simulator: functional semantics (numpy) + timing model + counters.

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

import json
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from infer.target import isa
from infer.target.asm import Program, format_instr
from infer.target.hw import HardwareConfig, load_config

ENGINES = isa.ENGINES
E_SCALAR, E_LOAD, E_STORE, E_MATRIX, E_VECTOR = range(5)
_ENGINE_INDEX = {e: i for i, e in enumerate(ENGINES)}

NP_DTYPES: dict[int, Any] = {
    0: np.dtype(np.int8), 1: np.dtype(np.int32), 2: np.dtype(np.float32),
    3: np.dtype(ml_dtypes.bfloat16), 4: np.dtype(ml_dtypes.float8_e4m3fn),
    5: np.dtype(ml_dtypes.float8_e5m2),
}
_INT_RANGE = {0: (-128, 127), 1: (-(2**31), 2**31 - 1)}


class SimFault(Exception):
    """A program fault: names the instruction index, its disassembly and the cause."""

    def __init__(self, index: int, text: str, cause: str, kind: str):
        self.index, self.text, self.cause, self.kind = index, text, cause, kind
        super().__init__(f"fault [{kind}] at instruction {index} ({text}): {cause}")


class _Fault(Exception):
    def __init__(self, kind: str, cause: str):
        self.kind, self.cause = kind, cause


# ----------------------------------------------------------------------------- race checker
# An access is (space, write, lo, hi, rows, row_bytes, stride): bytes [lo, hi) of `space`
# (hull), made of `rows` rows of `row_bytes` bytes `stride` apart when stride > 0 (gapped rows,
# stride > row_bytes), one contiguous range when stride == 0. Local addresses are kept as the
# program writes them (the accumulator at ACC_BASE+), so reports match the disassembly.
RACE_SPACES = ("dram", "scratchpad", "accumulator")
_DRAM, _SPAD, _ACC = range(3)
_MAX_PLANES = 16  # a 3-D DMA with more gapped planes than this is checked as its hull


def _rows(space: int, write: bool, lo: int, n: int, length: int, stride: int,
          out: list[tuple[int, bool, int, int, int, int, int]]) -> None:
    """Append the access of n rows of `length` bytes `stride` apart (stride may be negative)."""
    if n <= 0 or length <= 0:
        return
    if stride < 0:
        lo += (n - 1) * stride
        stride = -stride
    hi = lo + (n - 1) * stride + length
    if n == 1 or stride <= length:
        out.append((space, write, lo, hi, 1, hi - lo, 0))
    else:
        out.append((space, write, lo, hi, n, length, stride))


def _dma_rows(space: int, write: bool, base: int, n2: int, n1: int, n0: int, s2: int, s1: int,
              out: list[tuple[int, bool, int, int, int, int, int]]) -> None:
    """Append the access of a 3-D strided DMA side (exact rows; the hull for many planes)."""
    if n2 <= 0 or n1 <= 0 or n0 <= 0:
        return
    if n2 == 1:
        _rows(space, write, base, n1, n0, s1, out)
    elif n1 == 1:
        _rows(space, write, base, n2, n0, s2, out)
    elif abs(s1) <= n0:  # each plane is contiguous
        _rows(space, write, base + min(0, (n1 - 1) * s1), n2, (n1 - 1) * abs(s1) + n0, s2, out)
    elif n2 <= _MAX_PLANES:
        for p in range(n2):
            _rows(space, write, base + p * s2, n1, n0, s1, out)
    else:
        lo = base + min(0, (n1 - 1) * s1) + min(0, (n2 - 1) * s2)
        hi = base + max(0, (n1 - 1) * s1) + max(0, (n2 - 1) * s2) + n0
        out.append((space, write, lo, hi, 1, hi - lo, 0))


def _clip(x: tuple[int, bool, int, int, int, int, int], lo: int,
          hi: int) -> tuple[int, int] | None:
    """The first piece of access x inside [lo, hi), or None."""
    xlo, n, length, s = x[2], x[4], x[5], x[6]
    if s == 0:
        a, b = max(lo, xlo), min(hi, x[3])
        return (a, b) if a < b else None
    i = max(0, (lo - xlo - length) // s + 1)  # first row ending after lo
    if i >= n:
        return None
    r = xlo + i * s
    return (max(lo, r), min(hi, r + length)) if r < hi else None


def _overlap(a: tuple[int, bool, int, int, int, int, int],
             b: tuple[int, bool, int, int, int, int, int]) -> tuple[int, int] | None:
    """The first overlapping byte range of two accesses of one space (hulls overlap), or None."""
    lo, hi = max(a[2], b[2]), min(a[3], b[3])
    if a[6] == 0 and b[6] == 0:
        return (lo, hi) if lo < hi else None
    while lo < hi:
        r = _clip(a, lo, hi)
        if r is None:
            return None
        q = _clip(b, r[0], hi)
        if q is None:
            return None
        if q[0] < r[1]:
            return q[0], min(r[1], q[1])
        lo = q[0]
    return None


# ----------------------------------------------------------------------------- counters
@dataclass
class Counters:
    config: str
    clock_ghz: float
    cycles: int = 0
    instructions: int = 0  # dynamic (executed) instruction count
    per_engine_instructions: list[int] = field(default_factory=lambda: [0] * 5)
    busy: list[int] = field(default_factory=lambda: [0] * 5)
    stalls: dict[str, int] = field(default_factory=dict)
    dram_read_bytes: int = 0
    dram_write_bytes: int = 0
    dram_busy_cycles: int = 0
    macs: int = 0
    peak_macs_per_cycle: int = 1
    weight_load_cycles: int = 0
    vector_elements: int = 0
    acc_saturations: int = 0
    events: list[tuple[int, str, int, int, int]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.cycles / (self.clock_ghz * 1e9)

    def busy_by_engine(self) -> dict[str, int]:
        return dict(zip(ENGINES, self.busy))

    def utilization(self, engine: str) -> float:
        return self.busy[_ENGINE_INDEX[engine]] / self.cycles if self.cycles else 0.0

    @property
    def matrix_utilization(self) -> float:
        """Achieved fraction of the array's peak MAC rate over the whole run."""
        return self.macs / (self.peak_macs_per_cycle * self.cycles) if self.cycles else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config, "cycles": self.cycles, "seconds": self.seconds,
            "instructions": self.instructions,
            "instructions_by_engine": dict(zip(ENGINES, self.per_engine_instructions)),
            "busy_cycles": self.busy_by_engine(),
            "utilization": {e: self.utilization(e) for e in ENGINES},
            "stall_cycles": dict(self.stalls), "dram_read_bytes": self.dram_read_bytes,
            "dram_write_bytes": self.dram_write_bytes, "dram_busy_cycles": self.dram_busy_cycles,
            "macs": self.macs, "matrix_utilization": self.matrix_utilization,
            "weight_load_cycles": self.weight_load_cycles,
            "vector_elements": self.vector_elements, "acc_saturations": self.acc_saturations,
        }

    def summary(self) -> str:
        lines = [f"config {self.config}: {self.cycles} cycles ({self.seconds * 1e6:.2f} us), "
                 f"{self.instructions} instructions executed"]
        for e in ENGINES:
            lines.append(f"  {e:<9} busy {self.busy[_ENGINE_INDEX[e]]:>12} cycles "
                         f"({100 * self.utilization(e):5.1f}%)  "
                         f"{self.per_engine_instructions[_ENGINE_INDEX[e]]} instrs")
        lines.append(f"  MACs {self.macs} ({100 * self.matrix_utilization:.1f}% of peak), "
                     f"DRAM read {self.dram_read_bytes} B, written {self.dram_write_bytes} B")
        if self.stalls:
            lines.append("  stalls: " + ", ".join(f"{k} {v}" for k, v in sorted(self.stalls.items())))
        return "\n".join(lines)

    def to_chrome_trace(self, path: str | Path | None = None) -> dict[str, Any]:
        """Chrome-trace / Perfetto JSON of the engine timelines (needs run(trace=True))."""
        us = 1.0 / (self.clock_ghz * 1e3)
        evs: list[dict[str, Any]] = [
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": e}}
            for i, e in enumerate(ENGINES)]
        evs.append({"name": "process_name", "ph": "M", "pid": 0, "tid": 0,
                    "args": {"name": f"npu ({self.config})"}})
        for eng, name, start, dur, pc in self.events:
            evs.append({"name": name, "ph": "X", "pid": 0, "tid": eng, "ts": start * us,
                        "dur": max(dur, 1) * us, "args": {"pc": pc, "cycle": start}})
        doc = {"traceEvents": evs, "displayTimeUnit": "ns"}
        if path is not None:
            Path(path).write_text(json.dumps(doc))
        return doc


# ----------------------------------------------------------------------------- DRAM calendar
class _Calendar:
    """Busy intervals of the shared DRAM channel; transfers take the earliest free gap."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def reserve(self, t: int, dur: int) -> int:
        s, e = self.starts, self.ends
        i = bisect_left(e, t + 1)  # first interval ending after t
        while i < len(s):
            if s[i] >= t + dur:
                break
            t = max(t, e[i])
            i += 1
        # insert [t, t+dur) at i, merging with neighbours
        end = t + dur
        if i > 0 and e[i - 1] == t:
            e[i - 1] = end
            if i < len(s) and s[i] == end:
                e[i - 1] = e[i]
                del s[i], e[i]
        elif i < len(s) and s[i] == end:
            s[i] = t
        else:
            s.insert(i, t)
            e.insert(i, end)
        return t

    def prune(self, t: int) -> None:
        k = bisect_left(self.ends, t)
        if k > 64:
            del self.starts[:k], self.ends[:k]


# ----------------------------------------------------------------------------- simulator
class Simulator:
    """`Simulator(config).run(program, dram, regs={...}) -> Counters`.

    The scratchpad and accumulator persist across runs (like the hardware); `reset()` clears
    them. `dram` is a writable 1-D uint8 numpy array or a bytearray, updated in place.
    """

    def __init__(self, config: HardwareConfig | str = "edge"):
        self.cfg = load_config(config)
        m = self.cfg.memory
        self.spad = np.zeros(m.scratchpad_bytes, np.uint8)
        self.acc = np.zeros(m.accumulator_bytes, np.uint8)

    def reset(self) -> None:
        self.spad[:] = 0
        self.acc[:] = 0

    # ------------------------------------------------------------------ helpers
    def _local(self, addr: int, rows: int, cols: int, stride: int, dt: int,
               what: str) -> np.ndarray:
        esz = NP_DTYPES[dt].itemsize
        if addr >= isa.ACC_BASE:
            mem, off, space = self.acc, addr - isa.ACC_BASE, "accumulator"
        else:
            mem, off, space = self.spad, addr, "scratchpad"
        if addr < 0:
            raise _Fault("out-of-bounds", f"{what} address {addr} is negative")
        last = off + (rows - 1) * stride + cols * esz
        if last > mem.size:
            raise _Fault("out-of-bounds", f"{what} [{addr:#x}, {addr - off + last:#x}) exceeds "
                         f"the {space} ({mem.size} bytes)")
        if off % esz or stride % esz:
            raise _Fault("misaligned", f"{what} address {addr:#x} / stride {stride} not "
                         f"aligned to {esz} bytes ({isa.DTYPES[dt][0]})")
        return np.ndarray((rows, cols), NP_DTYPES[dt], mem, off, (stride, esz))

    def run(self, program: Program | bytes | str, dram: np.ndarray | bytearray | None = None,
            regs: dict[str | int, int] | None = None, trace: bool = False, *,
            check_races: bool = False,
            on_pc: Mapping[int, Callable[[int, np.ndarray], None]] | None = None) -> Counters:
        """Run `program` on `dram` (updated in place). `trace=True` records the engine
        timelines; `check_races=True` faults (kind "race") on an unsynchronised conflicting
        access between two engines (see the module docstring).

        `on_pc={pc: callback}` calls `callback(pc, dram)` when the front end first reaches
        instruction `pc` outside every loop (loop depth 0), before dispatching it; `pc` =
        len(program) fires when the program ends. Functional results are computed in program
        order at dispatch, so the callback sees the memory effects of every earlier
        instruction and none of later ones (e.g. a kernel's output right after its last
        instruction, before the memory plan reuses the bytes). The callback may read or
        modify `dram`. No cost when not given."""
        if not isinstance(program, Program):
            from infer.target.asm import load_program

            try:
                program = load_program(program)
            except isa.EncodingError as e:
                if e.index is None:
                    raise
                raise SimFault(e.index, f"undecodable word {e.word:#066x}", e.cause,
                               "bad-encoding") from None
        if dram is None:
            dram = np.zeros(0, np.uint8)
        if isinstance(dram, bytearray | memoryview):
            dram = np.frombuffer(dram, np.uint8)
        if not isinstance(dram, np.ndarray) or dram.dtype != np.uint8 or dram.ndim != 1:
            raise TypeError("dram must be a bytearray or a 1-D uint8 numpy array")
        if not dram.flags.writeable or not dram.flags.c_contiguous:
            raise TypeError("dram must be writable and contiguous")
        return _Run(self, program, dram, regs or {}, trace, check_races).execute(on_pc)


class _Run:
    """State of one simulation run (pre-decoded closures over this state)."""

    def __init__(self, sim: Simulator, prog: Program, dram: np.ndarray,
                 regs: dict[str | int, int], trace: bool, check_races: bool = False):
        cfg = sim.cfg
        self.sim, self.cfg, self.prog, self.dram = sim, cfg, prog, dram
        self.trace = trace
        self.check_races = check_races
        # race checker: (done, engine, pc, start, accesses) of instructions that may still
        # conflict with later ones (done > front-end time; everything later starts after that)
        self.inflight: list[tuple[int, int, int, int, list[Any]]] = []
        nreg = cfg.scalar.registers
        self.regs = [0] * isa.MAX_REGISTERS
        for k, v in regs.items():
            idx = int(k[1:]) if isinstance(k, str) and k.startswith("r") and k[1:].isdigit() \
                else k
            if not isinstance(idx, int) or not 1 <= idx < nreg:
                raise ValueError(f"register {k!r} out of range (r1..r{nreg - 1})")
            if not isa.REG_MIN <= v <= isa.REG_MAX:
                raise ValueError(f"register {k!r} value {v} out of the 64-bit range")
            self.regs[idx] = int(v)
        self.c = Counters(cfg.name, cfg.clock_ghz, peak_macs_per_cycle=cfg.peak_macs_per_cycle)
        self.fe = 0
        self.eng_free = [0] * 5
        self.retired = [0] * 5  # per engine: when its latest instruction retired (see finish)
        self.qdepth = [cfg.queue_depth(e) for e in ENGINES]
        self.starts: list[deque[int]] = [deque(maxlen=d) for d in self.qdepth]
        self.sems: list[deque[int]] = [deque() for _ in range(isa.MAX_SEMAPHORES + 1)]
        self.last_done = 0
        self.cal = _Calendar()
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

    def dispatch(self, e: int, wait: int) -> int:
        """Enter engine e's queue; returns the earliest time the instruction may start."""
        q = self.starts[e]
        t = self.fe
        if len(q) == self.qdepth[e] and q[0] > t:
            self.stall("queue_full_" + ENGINES[e], q[0] - t)
            t = q[0]
        self.fe = t + 1
        ready = max(t + 1, self.eng_free[e])
        if wait:
            fifo = self.sems[wait]
            if not fifo:
                raise _Fault("deadlock", f"wait on s{wait} can never be satisfied: no earlier "
                             "instruction signals it (or all its tokens were consumed)")
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
            self.c.events.append((e, self.prog.instrs[pc].d.name, start, done - start, pc))

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
                            and (ov := _overlap(a, b)) is not None):
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

        raise _Fault("race", f"{RACE_SPACES[a[0]]} [{ov[0]:#x}, {ov[1]:#x}): {who(later)} "
                     f"{'writes' if b[1] else 'reads'} it while {who(first)} "
                     f"{'writes' if a[1] else 'reads'} it; pc {first[2]} is earlier in program "
                     f"order but pc {later[2]} starts before it completes (missing wait/signal)")

    # ------------------------------------------------------------------ pre-decode
    def compile(self) -> list[Any]:
        cfg = self.cfg
        code = []
        nreg, nsem = cfg.scalar.registers, cfg.scalar.semaphores
        for pc, ins in enumerate(self.prog.instrs):
            try:
                for f, v in zip(ins.d.fields, ins.values):
                    if f.kind == "reg" and v >= nreg:
                        raise _Fault("register", f"register {f.name} = r{v} out of range "
                                     f"(config {cfg.name} has r0..r{nreg - 1})")
                for nm, s in (("wait", ins.wait), ("signal", ins.signal),
                              ("signal2", ins.signal2)):
                    if s > nsem:
                        raise _Fault("register", f"{nm} semaphore s{s} out of range (config "
                                     f"{cfg.name} has s1..s{nsem})")
                code.append(getattr(self, "_c_" + ins.d.engine)(pc, ins))
            except _Fault as fl:
                raise SimFault(pc, format_instr(ins), fl.cause, fl.kind) from None
        return code

    def _c_scalar(self, pc: int, ins: isa.Instr) -> Any:
        v = ins.as_dict()
        name, regs, wait, signal, signal2 = (ins.d.name, self.regs, ins.wait, ins.signal,
                                             ins.signal2)

        def sync_in() -> None:
            if wait:
                fifo = self.sems[wait]
                if not fifo:
                    raise _Fault("deadlock", f"wait on s{wait} can never be satisfied: no "
                                 "earlier instruction signals it")
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
                raise _Fault("register", f"result {val} overflows 64-bit register r{rd}")
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
                    raise _Fault("loop", f"loop nesting exceeds scalar.loop_depth = {depth}")
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
                    raise _Fault("out-of-bounds", f"ld address {a} outside DRAM "
                                 f"({dram.size} bytes)")
                if a % 4:
                    raise _Fault("misaligned", f"ld address {a:#x} not 4-byte aligned")
                if chk:
                    self.race(E_SCALAR, pc, self.fe, self.fe + 1 + lat,
                              [(_DRAM, False, a, a + 4, 1, 4, 0)])
                setreg(rd, int(dram[a:a + 4].view(np.int32)[0]))
                self.c.dram_read_bytes += 4
                self.fe += 1 + lat
                self.stall("scalar_load", lat)
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

        def f() -> int:
            d = regs[db] + do
            loc = regs[lb] + lo
            if d + dlo < 0 or d + dhi > dram.size:
                raise _Fault("out-of-bounds", f"dma.{dir_} DRAM range [{d + dlo}, {d + dhi}) "
                             f"outside DRAM ({dram.size} bytes)")
            if loc >= isa.ACC_BASE:
                mem, off, space = sim.acc, loc - isa.ACC_BASE, "accumulator"
            else:
                mem, off, space = sim.spad, loc, "scratchpad"
            if loc < 0 or off + llo < 0 or off + lhi > mem.size:
                raise _Fault("out-of-bounds", f"dma.{dir_} local range [{loc + llo:#x}, "
                             f"{loc + lhi:#x}) outside the {space} ({mem.size} bytes)")
            dv = np.ndarray((n2, n1, n0), np.uint8, dram, d, (ds2, ds1, 1))
            lv = np.ndarray((n2, n1, n0), np.uint8, mem, off, (ls2, ls1, 1))
            if load:
                lv[...] = dv
                c.dram_read_bytes += nbytes
            else:
                dv[...] = lv
                c.dram_write_bytes += nbytes
            # timing
            ready = self.dispatch(e, wait)
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
                _dma_rows(_DRAM, not load, d, n2, n1, n0, ds2, ds1, accs)
                _dma_rows(_ACC if loc >= isa.ACC_BASE else _SPAD, load, loc, n2, n1, n0, ls2,
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
        dname = isa.DTYPES[dt][0]
        if dname not in mc.dtypes:
            raise _Fault("unsupported", f"dtype {dname} not supported by the matrix unit of "
                         f"config {cfg.name} ({', '.join(mc.dtypes)})")
        nbuf = mc.weight_buffers
        chk = self.check_races
        esz = NP_DTYPES[dt].itemsize
        if ins.d.name == "mx.loadw":
            wb, wo, k, n, stride = v["w_base"], v["w"], v["k"], v["n"], v["stride"]
            if k > mc.rows or n > mc.cols:
                raise _Fault("shape", f"weight tile {k}x{n} exceeds the {mc.rows}x{mc.cols} "
                             "array")
            cyc = -(-(k * n * NP_DTYPES[dt].itemsize) // mc.weight_load_bytes_per_cycle)
            exact32 = mc.rows <= 1024

            def f() -> int:
                w = self.sim._local(regs[wb] + wo, k, n, stride, dt, "weights")
                self.weights = w.astype(np.float32 if (dt != 0 or exact32) else np.float64)
                self.wdtype = dt
                ready = self.dispatch(E_MATRIX, wait)
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
                    _rows(_ACC if wa >= isa.ACC_BASE else _SPAD, False, wa, k, n * esz, stride,
                          accs)
                    self.race(E_MATRIX, pc, start, end, accs)
                return pc + 1
            return f
        ab, ao, cb, co = v["act_base"], v["act"], v["acc_base"], v["acc"]
        m, astride, cstride, accum = v["m"], v["astride"], v["cstride"], v["accum"]
        cyc = m * mc.cycles_per_row
        fill = mc.fill_drain_cycles
        is_int = dt == 0
        odt = 1 if is_int else 2
        lo, hi = -(2**31), 2**31 - 1

        def f() -> int:
            w = self.weights
            if w is None:
                raise _Fault("state", "mx.matmul before any mx.loadw")
            if self.wdtype != dt:
                raise _Fault("state", f"matmul dtype {dname} differs from the loaded weights' "
                             f"{isa.DTYPES[self.wdtype][0]}")
            k, n = w.shape
            accaddr = regs[cb] + co
            if accaddr < isa.ACC_BASE:
                raise _Fault("out-of-bounds", f"matmul output {accaddr:#x} is not in the "
                             f"accumulator (which starts at {isa.ACC_BASE:#x})")
            a = self.sim._local(regs[ab] + ao, m, k, astride, dt, "activations")
            out = self.sim._local(accaddr, m, n, cstride, odt, "accumulator")
            r = a.astype(w.dtype) @ w
            if is_int:
                r = r.astype(np.int64)
                if accum:
                    r += out
                mx, mn = r.max(), r.min()
                if mx > hi or mn < lo:
                    c.acc_saturations += int(np.count_nonzero((r > hi) | (r < lo)))
                    np.clip(r, lo, hi, out=r)
                out[...] = r
            elif accum:
                out += r
            else:
                out[...] = r
            c.macs += m * k * n
            ready = self.dispatch(E_MATRIX, wait)
            start = max(ready, self.stream_free)
            if self.weights_ready > start:
                self.stall("weight_load", self.weights_ready - start)
                start = self.weights_ready
            end = start + cyc
            self.stream_free = end
            self.wbuf_release[self.wbuf] = end
            self.finish(E_MATRIX, start, start + 1, end + fill, cyc, signal, signal2, pc)
            if chk:
                accs: list[Any] = []
                aa = regs[ab] + ao
                _rows(_ACC if aa >= isa.ACC_BASE else _SPAD, False, aa, m, k * esz, astride, accs)
                _rows(_ACC, True, accaddr, m, n * 4, cstride, accs)  # accumulate: read + write
                self.race(E_MATRIX, pc, start, end + fill, accs)
            return pc + 1
        return f

    def _c_vector(self, pc: int, ins: isa.Instr) -> Any:
        v = ins.as_dict()
        vop = ins.d.vop
        assert vop is not None
        cfg, regs, sim, c = self.cfg, self.regs, self.sim, self.c
        wait, signal, signal2 = ins.wait, ins.signal, ins.signal2
        rows, cols = v["rows"], v["cols"]
        db, do, ab, ao = v["dst_base"], v["dst"], v["a_base"], v["a"]
        dstride, astride, dt, at = v["dstride"], v["astride"], v["dt"], v["at"]
        binary = vop.form in ("binary", "requant")
        if binary:
            bb, bo, bstride, bt, bmode = v["b_base"], v["b"], v["bstride"], v["bt"], v["bmode"]
            imm = np.float32(isa.bits_f32(v["imm"]))
        groups = -(-(rows * cols) // cfg.vector.lanes)
        occ = groups * cfg.vector.cost[vop.name]
        lat = cfg.vector.latency
        name = vop.name
        float_in = at >= 2 or (binary and (bt >= 2 or (bmode == 3 and not float(imm).is_integer())))
        transcend = name in ("gelu", "silu", "sigmoid", "tanh", "exp", "sqrt", "rsqrt", "recip", "log")
        use_float = float_in or transcend or name == "requant"
        ctype = np.float32 if use_float else np.int64
        dshape = (rows, 1) if vop.form == "reduce" else (rows, cols)
        nelem = rows * cols

        def read_b() -> Any:
            if bmode == 3:
                return imm if use_float else np.int64(int(imm))
            base = regs[bb] + bo
            if bmode == 0:
                x = sim._local(base, rows, cols, bstride, bt, "operand b")
            elif bmode == 1:
                x = sim._local(base, 1, cols, 0, bt, "operand b (row)")
            else:
                x = sim._local(base, rows, 1, bstride, bt, "operand b (col)")
            return x.astype(ctype)

        fn = VECTOR_FUNCTIONS[name]
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
            a = sim._local(regs[ab] + ao, rows, cols, astride, at, "operand a").astype(ctype)
            dst = sim._local(regs[db] + do, dshape[0], dshape[1], dstride, dt, "destination")
            with np.errstate(all="ignore"):
                r = fn(a, read_b()) if binary else fn(a)
                store_converted(dst, r, dt)
            c.vector_elements += nelem
            ready = self.dispatch(E_VECTOR, wait)
            self.finish(E_VECTOR, ready, ready + occ, ready + occ + lat, occ, signal, signal2, pc)
            if chk:
                accs: list[Any] = []
                x = regs[ab] + ao
                _rows(_ACC if x >= isa.ACC_BASE else _SPAD, False, x, rows, a_bytes, astride, accs)
                if b_rows:
                    x = regs[bb] + bo
                    _rows(_ACC if x >= isa.ACC_BASE else _SPAD, False, x, b_rows, b_bytes,
                          b_stride, accs)
                x = regs[db] + do
                _rows(_ACC if x >= isa.ACC_BASE else _SPAD, True, x, dshape[0], d_bytes, dstride,
                      accs)
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
        except _Fault as fl:
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


def store_converted(dst: np.ndarray, r: Any, dt: int) -> None:
    """Write r into dst with the hardware's conversion: float -> int rounds half to even and
    saturates; int -> int saturates; float -> bf16/fp8 rounds to nearest even (numpy astype)."""
    r = np.asarray(r)
    if dt in _INT_RANGE:
        lo, hi = _INT_RANGE[dt]
        if r.dtype.kind == "f":
            # float64: fp32 cannot hold 2**31 - 1, so clipping in fp32 would wrap to -2**31
            r = np.nan_to_num(np.rint(r.astype(np.float64)), nan=0.0)
        dst[...] = np.clip(r, lo, hi).astype(dst.dtype)
    else:
        dst[...] = r.astype(dst.dtype)


def _gelu(a: np.ndarray) -> np.ndarray:
    k = np.float32(math.sqrt(2.0 / math.pi))
    return np.float32(0.5) * a * (np.float32(1) + np.tanh(k * (a + np.float32(0.044715) * a**3)))


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return np.float32(1) / (np.float32(1) + np.exp(-a))


VECTOR_FUNCTIONS: dict[str, Any] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
    "min": np.minimum, "copy": lambda a: a, "neg": np.negative, "abs": np.abs,
    "relu": lambda a: np.maximum(a, 0), "gelu": _gelu, "silu": lambda a: a * _sigmoid(a),
    "sigmoid": _sigmoid, "tanh": np.tanh, "exp": np.exp, "sqrt": np.sqrt,
    "rsqrt": lambda a: np.float32(1) / np.sqrt(a), "recip": lambda a: np.float32(1) / a,
    "rsum": lambda a: a.sum(axis=1, keepdims=True), "rmax": lambda a: a.max(axis=1, keepdims=True),
    "requant": lambda a, b: a * b,
    "log": np.log,
    "eq": lambda a, b: (a == b).astype(np.result_type(a, b)),
    "lt": lambda a, b: (a < b).astype(np.result_type(a, b)),
    "le": lambda a, b: (a <= b).astype(np.result_type(a, b)),
}
