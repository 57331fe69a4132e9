"""The performance report of one simulator run (`Executable.last_report`).

Whole-run numbers come from the simulator's `Counters`: cycles and time at the
config clock, per-engine busy cycles and utilisation, stalls by cause, DRAM bytes,
MACs and the fraction of the matrix unit's peak.

Per-op numbers need the op markers the compiler records in the artifact (`ops`:
instruction index ranges [start, end) with a name) and a traced run. The simulator's
per-instruction profile of the engine events (how often each instruction ran, its first
start and last completion, its matmuls' MACs: m x k x n with the weights loaded before
it) gives each op its span (first start to last completion), its busy cycles per engine,
its MACs and, from the instruction fields, its DRAM bytes. Each op is placed on the roofline of the config:
the compute time lower bound is max(MACs / peak MACs per cycle, vector busy
cycles), the memory bound is DRAM bytes / DRAM bytes per cycle; the larger one
names the op's bound ("compute" or "bandwidth") and `achieved` = bound / span.
Without markers the report is per engine only and says so.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from infer.target import isa
from infer.target.sim import ENGINES, Counters
from infer.target.sim_core import vector_occupancy


@dataclass
class OpStats:
    name: str
    kind: str
    start: int  # first instruction index
    end: int
    cycles: int = 0  # span: first start .. last completion
    first: int = -1
    last: int = 0
    busy: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ENGINES, 0))
    instructions: int = 0
    macs: int = 0
    dram_bytes: int = 0
    compute_cycles: float = 0.0
    memory_cycles: float = 0.0

    @property
    def bound(self) -> str:
        if not self.instructions:
            return "-"
        return "compute" if self.compute_cycles >= self.memory_cycles else "bandwidth"

    @property
    def achieved(self) -> float:
        """Roofline bound / actual span (1.0 = at the roofline)."""
        return max(self.compute_cycles, self.memory_cycles) / self.cycles if self.cycles else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "instructions": [self.start, self.end],
                "cycles": self.cycles, "busy": dict(self.busy), "macs": self.macs,
                "dram_bytes": self.dram_bytes, "bound": self.bound, "achieved": self.achieved,
                "executed": self.instructions}


@dataclass
class Report:
    counters: Counters
    peak_macs_per_cycle: int
    dram_bytes_per_cycle: int
    ops: list[OpStats] | None = None  # None: the program carries no per-op markers
    wall_seconds: float = 0.0

    # whole run
    @property
    def cycles(self) -> int:
        return self.counters.cycles

    @property
    def seconds(self) -> float:
        return self.counters.seconds

    @property
    def utilization(self) -> dict[str, float]:
        return {e: self.counters.utilization(e) for e in ENGINES}

    @property
    def stalls(self) -> dict[str, int]:
        return dict(self.counters.stalls)

    @property
    def dram_bytes(self) -> int:
        return self.counters.dram_read_bytes + self.counters.dram_write_bytes

    @property
    def macs(self) -> int:
        return self.counters.macs

    @property
    def matrix_peak_fraction(self) -> float:
        return self.counters.matrix_utilization

    def top_ops(self, n: int = 10) -> list[OpStats]:
        return sorted(self.ops or [], key=lambda o: -o.cycles)[:n]

    def as_dict(self) -> dict[str, Any]:
        d = self.counters.as_dict()
        d["simulation_mode"] = self.counters.mode
        d["dram_bytes"] = self.dram_bytes
        d["matrix_peak_fraction"] = self.matrix_peak_fraction
        d["ops"] = None if self.ops is None else [o.as_dict() for o in self.ops]
        d["simulation_wall_seconds"] = self.wall_seconds
        d["peak_macs_per_cycle"] = self.peak_macs_per_cycle  # the roofline (runtime/plots.py)
        d["dram_bytes_per_cycle"] = self.dram_bytes_per_cycle
        return d

    def to_chrome_trace(self, path=None) -> dict[str, Any]:
        """Chrome-trace JSON: engine timelines, plus one 'ops' track when markers exist."""
        doc = self.counters.to_chrome_trace(None)
        if self.ops:
            us = 1.0 / (self.counters.clock_ghz * 1e3)
            evs = doc["traceEvents"]
            evs.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": len(ENGINES), "args": {"name": "ops"}})
            for o in self.ops:
                if o.instructions:
                    evs.append({"name": o.name, "ph": "X", "pid": 0, "tid": len(ENGINES), "ts": o.first * us,
                                "dur": max(o.cycles, 1) * us,
                                "args": {"kind": o.kind, "macs": o.macs, "dram_bytes": o.dram_bytes,
                                         "bound": o.bound, "achieved": round(o.achieved, 4)}})
        if path is not None:
            import json
            from pathlib import Path

            Path(path).write_text(json.dumps(doc))
        return doc

    def summary(self, top: int = 8) -> str:
        c = self.counters
        if c.mode == "functional":
            return (f"functional-only run ({c.config}): outputs, no timing model; {c.instructions} instructions "
                    f"executed, MACs {c.macs}, DRAM read {c.dram_read_bytes} B, written {c.dram_write_bytes} B")
        lines = [f"performance ({c.config}, {c.clock_ghz:g} GHz): {c.cycles} cycles = {c.seconds * 1e6:.2f} us; "
                 f"{c.instructions} instructions executed" + (" (timing-only run: no data computed)"
                                                               if c.mode == "timing" else "")]
        util = "  ".join(f"{e} {100 * c.utilization(e):.1f}%" for e in ENGINES if e != "scalar")
        lines.append(f"  engine utilisation: {util}")
        lines.append(f"  MACs {c.macs} = {100 * c.matrix_utilization:.1f}% of matrix peak "
                     f"({self.peak_macs_per_cycle} MACs/cycle); DRAM read {c.dram_read_bytes} B, "
                     f"written {c.dram_write_bytes} B")
        if c.stalls:
            st = sorted(c.stalls.items(), key=lambda kv: -kv[1])
            lines.append("  stalls (cycles): " + ", ".join(f"{k} {v}" for k, v in st))
        else:
            lines.append("  stalls: none")
        if self.ops is None:
            lines.append("  per-op: the program carries no op markers; per-engine numbers only")
        elif self.ops:
            lines.append(f"  top ops by cycles ({len(self.ops)} ops):")
            lines.append(f"    {'op':<24} {'kind':<12} {'cycles':>10} {'MACs':>10} {'DRAM B':>10}  bound      achieved")
            for o in self.top_ops(top):
                lines.append(f"    {o.name[:24]:<24} {o.kind[:12]:<12} {o.cycles:>10} {o.macs:>10} {o.dram_bytes:>10}  "
                             f"{o.bound:<10} {100 * o.achieved:5.1f}%")
        return "\n".join(lines)


def build_report(counters: Counters, program, ops: list[dict[str, Any]] | None, cfg,
                 wall_seconds: float = 0.0) -> Report:
    """Counters (+ the per-instruction profile of a traced run) + op markers -> Report."""
    rep = Report(counters, cfg.peak_macs_per_cycle, cfg.dram.bytes_per_cycle, wall_seconds=wall_seconds)
    prof = counters.profile
    if not ops or prof is None:
        return rep
    stats = [OpStats(str(o.get("name", f"op{i}")), str(o.get("kind", "")), int(o["start"]), int(o["end"]))
             for i, o in enumerate(ops)]
    order = sorted(range(len(stats)), key=lambda i: stats[i].start)
    starts = [stats[i].start for i in order]
    instrs = program.instrs
    for pc, count in enumerate(prof.count):
        if not count:
            continue
        j = bisect.bisect_right(starts, pc) - 1
        # markers may nest or leave gaps: find the innermost range holding pc
        op = None
        while j >= 0:
            cand = stats[order[j]]
            if cand.start <= pc < cand.end:
                op = cand
                break
            j -= 1
        if op is None:
            continue
        ins = instrs[pc]
        op.instructions += count
        op.first = prof.first[pc] if op.first < 0 else min(op.first, prof.first[pc])
        op.last = max(op.last, prof.last[pc])
        eng = ins.d.engine
        if eng in ("matrix", "vector", "dma_load", "dma_store"):
            op.busy[eng] += count * _busy(ins, cfg)
        op.macs += prof.macs[pc]
        if ins.d.name in ("dma.load", "dma.store"):
            v = ins.as_dict()
            op.dram_bytes += count * v["n0"] * v["n1"] * v["n2"]
    peak, bw = cfg.peak_macs_per_cycle, cfg.dram.bytes_per_cycle
    for o in stats:
        if o.instructions:
            o.cycles = o.last - o.first
        o.compute_cycles = max(o.macs / peak, float(o.busy["vector"]))
        o.memory_cycles = o.dram_bytes / bw
    rep.ops = stats
    return rep


def _busy(ins, cfg) -> int:
    """Busy cycles of one instruction on its engine (the simulator's occupancy model)."""
    name = ins.d.name
    v = ins.as_dict()
    if name == "mx.matmul":
        return cfg.matrix.matmul_cycles(v["m"], isa.DTYPES[v["dtype"]][0])
    if name == "mx.loadw":
        return 0
    if name in ("dma.load", "dma.store"):
        burst = cfg.dram.burst_bytes
        charged = v["n2"] * v["n1"] * (-(-v["n0"] // burst) * burst)
        return -(-charged // cfg.dram.bytes_per_cycle)
    if ins.d.engine == "vector":
        return vector_occupancy(cfg, ins)
    return 0
