"""The performance report of one simulator run (`Executable.last_report`).

Whole-run numbers come from the simulator's `Counters`: cycles and time at the
config clock, per-engine busy cycles and utilisation, stalls by cause, DRAM bytes,
MACs and the fraction of the matrix unit's peak.

Per-op numbers need the op markers the compiler records in the artifact (`ops`:
instruction index ranges [start, end) with a name) and a traced run. The simulator's
per-instruction profile of the engine events (how often each instruction ran, its first
start and last completion, its matmuls' MACs: m x k x n with the weights loaded before
it) gives each op its span (first start to last completion), its busy cycles per engine,
the MACs it executed and, from the instruction fields, the DRAM bytes it moved.

The roofline is algorithmic (docs/performance.md): markers from graph-to-tile carry each
op's MACs as the model defines it (`macs`) and its compulsory DRAM bytes (`bytes`: every
input, weight and output once, `weight_bytes` the weights' share), the tiling cost model's
predicted cycles (`predicted`) and the kernel class (`class`). An op's roofline is
max(macs x passes / peak MACs per cycle, bytes / DRAM bytes per cycle) (passes: 3 for the
fp32 emulation, 1 for bf16; the peak is that of the dtype the op's matmuls ran on: int8 runs
at twice the bf16 rate on the server config) and `achieved` = roofline / span, so padding, partial tiles,
extra passes and re-reads all count against the compiler; `mac_overhead` (executed / model
MACs) and `traffic` (moved / compulsory bytes) say why. The whole run's roofline uses the
model's MACs and the weights plus the model's inputs and outputs (intermediates could stay
on chip). Markers without the record (hand-written programs) fall back to the executed
work: max(executed MACs / peak, vector busy) against the moved bytes. Without markers the
report is per engine only and says so.

Energy (`infer.target.energy`, with the config's `[energy]` and `[area]` sections): per
inference by component (matrix MACs, vector, scratchpad, accumulator, DRAM, static power x run
time) and the average power at the config clock, from the per-instruction profile of a traced
run; each op gets the dynamic energy of its instructions (`energy_pj`; static energy is the
run's, not split by op). `energy` is None, and `energy_note` says why, for a run without a
timing model or profile, or a config without the sections.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from infer.target import isa
from infer.target.energy import Energy, EnergyModelError, energy_of
from infer.target.sim import ENGINES, Counters
from infer.target.sim_core import vector_occupancy
from infer.target.sim_decode import per_program


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
    peak_mac_cycles: float = 0.0  # the executed MACs at their dtype's peak rate
    dram_bytes: int = 0  # moved
    compute_cycles: float = 0.0  # roofline terms (algorithmic when the marker has the record)
    memory_cycles: float = 0.0
    model_macs: int | None = None  # the marker's algorithmic record (None: not recorded)
    compulsory_bytes: int | None = None
    weight_bytes: int | None = None
    predicted: int | None = None  # the tiling cost model's cycles for the op
    kernel_class: str = ""  # conv2d, linear, matmul, attention, max_pool2d, elementwise, ...

    @property
    def algorithmic(self) -> bool:
        return self.model_macs is not None and self.compulsory_bytes is not None

    @property
    def roofline_cycles(self) -> float:
        return max(self.compute_cycles, self.memory_cycles)
    energy_pj: float = 0.0  # dynamic energy of the op's instructions

    @property
    def bound(self) -> str:
        if not self.instructions:
            return "-"
        return "compute" if self.compute_cycles >= self.memory_cycles else "bandwidth"

    @property
    def achieved(self) -> float:
        """Roofline / actual span (1.0 = at the roofline)."""
        return self.roofline_cycles / self.cycles if self.cycles else 0.0

    @property
    def mac_overhead(self) -> float | None:
        """Executed MACs per model MAC (padding, partial tiles; passes not included)."""
        return self.macs / self.model_macs if self.model_macs else None

    @property
    def traffic(self) -> float | None:
        """Moved DRAM bytes per compulsory byte."""
        return self.dram_bytes / self.compulsory_bytes if self.compulsory_bytes else None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "instructions": [self.start, self.end],
                "cycles": self.cycles, "busy": dict(self.busy), "macs": self.macs,
                "dram_bytes": self.dram_bytes, "model_macs": self.model_macs,
                "compulsory_bytes": self.compulsory_bytes, "weight_bytes": self.weight_bytes,
                "roofline_cycles": self.roofline_cycles, "bound": self.bound,
                "achieved": self.achieved, "executed": self.instructions, "predicted": self.predicted,
                "class": self.kernel_class, "energy_uj": self.energy_pj * 1e-6}


@dataclass
class Report:
    counters: Counters
    peak_macs_per_cycle: int
    dram_bytes_per_cycle: int
    ops: list[OpStats] | None = None  # None: the program carries no per-op markers
    wall_seconds: float = 0.0
    passes: int = 1  # bf16 matrix passes per model MAC (3: fp32 emulation)
    io_bytes: int = 0  # the model's inputs and outputs in DRAM
    output_bytes: int = 0  # the outputs' share of io_bytes
    dram_latency_cycles: int = 0  # the config's DRAM latency (the latency floor below)

    # the algorithmic roofline of the whole run (needs the markers' records)
    @property
    def model_macs(self) -> int | None:
        if not self.ops or not any(o.algorithmic for o in self.ops):
            return None
        return sum(o.model_macs or 0 for o in self.ops)

    @property
    def compulsory_bytes(self) -> int | None:
        if self.model_macs is None:
            return None
        return sum(o.weight_bytes or 0 for o in self.ops or []) + self.io_bytes

    @property
    def roofline_cycles(self) -> float | None:
        if self.model_macs is None or self.compulsory_bytes is None:
            return None
        return max(self.model_macs * self.passes * self.cycles_per_mac, self.compulsory_bytes / self.dram_bytes_per_cycle)

    @property
    def cycles_per_mac(self) -> float:
        """Array cycles per MAC at the peak of the dtypes the run's MACs used (1 / the bf16
        peak for a bf16 run, 1 / the int8 peak for an int8 one)."""
        c = self.counters
        return c.matrix_peak_cycles / c.macs if c.macs else 1 / self.peak_macs_per_cycle

    @property
    def roofline_fraction(self) -> float | None:
        """Algorithmic roofline / simulated cycles (1.0 = at the roofline)."""
        r = self.roofline_cycles
        return r / self.cycles if r is not None and self.cycles else None

    @property
    def latency_floor_cycles(self) -> float | None:
        """The fewest cycles any program computing this model can take on this config: the
        roofline's terms plus the DRAM latency they cannot hide. Nothing computes before the
        first operand byte arrives (a latency after the start) and the last result byte lands a
        latency after it leaves the chip; every compulsory byte read feeds some output, so the
        reads end a latency before the last store can start; and the last of all the DRAM
        transfers completes a latency after it was issued:
        max(MACs / peak + 2L, read bytes / bandwidth + 2L, compulsory bytes / bandwidth + L).
        Beside a large model it is the roofline; for a single layer on a latency-bound config
        (server: 500 cycles against a 1-7 K-cycle roofline) it caps the reachable fraction of
        the roofline well below 100 % (docs/performance.md)."""
        if self.model_macs is None or self.compulsory_bytes is None:
            return None
        lat, bw = self.dram_latency_cycles, self.dram_bytes_per_cycle
        reads = self.compulsory_bytes - self.output_bytes
        return max(self.model_macs * self.passes * self.cycles_per_mac + 2 * lat,
                   reads / bw + 2 * lat, self.compulsory_bytes / bw + lat)

    @property
    def floor_fraction(self) -> float | None:
        """Algorithmic roofline / latency floor: the largest roofline_fraction any program
        reaches on this config."""
        r, f = self.roofline_cycles, self.latency_floor_cycles
        return r / f if r is not None and f else None
    energy: Energy | None = None  # None: see energy_note
    energy_note: str = ""

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
        d["model_macs"] = self.model_macs
        d["compulsory_bytes"] = self.compulsory_bytes
        d["roofline_cycles"] = self.roofline_cycles
        d["roofline_fraction"] = self.roofline_fraction
        d["latency_floor_cycles"] = self.latency_floor_cycles
        d["passes"] = self.passes
        d["ops"] = None if self.ops is None else [o.as_dict() for o in self.ops]
        d["simulation_wall_seconds"] = self.wall_seconds
        d["peak_macs_per_cycle"] = self.peak_macs_per_cycle  # the roofline (runtime/plots.py)
        d["dram_bytes_per_cycle"] = self.dram_bytes_per_cycle
        d["energy"] = None if self.energy is None else self.energy.as_dict()
        if self.energy is None:
            d["energy_note"] = self.energy_note
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
        peaks = ", ".join(f"{d} {c.peak_macs_per_cycle_by_dtype.get(d, self.peak_macs_per_cycle)}"
                          for d in c.macs_by_dtype) or str(self.peak_macs_per_cycle)
        lines.append(f"  MACs {c.macs} = {100 * c.matrix_utilization:.1f}% of matrix peak "
                     f"({peaks} MACs/cycle); DRAM read {c.dram_read_bytes} B, "
                     f"written {c.dram_write_bytes} B")
        roof = self.roofline_cycles
        if roof is not None and self.model_macs is not None and self.compulsory_bytes is not None:
            lines.append(f"  algorithmic roofline {roof:.0f} cycles = max({self.model_macs} model MACs"
                         f"{f' x {self.passes} passes' if self.passes != 1 else ''} / {1 / self.cycles_per_mac:.0f}, "
                         f"{self.compulsory_bytes} compulsory B / {self.dram_bytes_per_cycle} B/cycle): "
                         f"run at {100 * roof / max(1, c.cycles):.1f}% of it; DRAM moved "
                         f"{self.dram_bytes / max(1, self.compulsory_bytes):.1f}x the compulsory bytes")
            floor, ceiling = self.latency_floor_cycles, self.floor_fraction
            if floor is not None and ceiling is not None and ceiling < 0.99:
                lines.append(f"  latency floor {floor:.0f} cycles (the DRAM latency of the first read and the "
                             f"last store, {self.dram_latency_cycles} cycles each, added): no program "
                             f"exceeds {100 * ceiling:.1f}% of the roofline here")
        if c.stalls:
            st = sorted(c.stalls.items(), key=lambda kv: -kv[1])
            lines.append("  stalls (cycles): " + ", ".join(f"{k} {v}" for k, v in st))
        else:
            lines.append("  stalls: none")
        if self.energy is not None:
            en = self.energy
            parts = ", ".join(f"{k} {v * 1e-6:.3g}" for k, v in en.by_component.items())
            lines.append(f"  energy per inference {en.total_pj * 1e-6:.4g} uJ ({parts} uJ); average power "
                         f"{en.average_power_w * 1e3:.4g} mW at {c.clock_ghz:g} GHz; area {en.area['total']:.3g} mm^2")
        else:
            lines.append(f"  energy: not computed ({self.energy_note})")
        if self.ops is None:
            lines.append("  per-op: the program carries no op markers; per-engine numbers only")
        elif self.ops:
            lines.append(f"  top ops by cycles ({len(self.ops)} ops; % of roofline = roofline / cycles; "
                         "MACs x = executed / model MACs, traffic x = moved / compulsory bytes):")
            lines.append(self.table(top))
        return "\n".join(lines)

    def table(self, top: int | None = None, indent: str = "    ") -> str:
        """The per-op table (the `top` slowest ops, all when None, in program order then)."""
        ops = self.top_ops(top) if top is not None else list(self.ops or [])
        rows = [f"{indent}{'op':<24} {'kind':<12} {'cycles':>10} {'predicted':>10} {'roofline':>10} {'% roof':>7} "
                f"{'model MACs':>12} {'MACs x':>6} {'compulsory B':>12} {'moved B':>12} {'traffic x':>9}  {'bound':<10} {'dyn nJ':>10}"]
        for o in ops:
            pred = str(o.predicted) if o.predicted is not None else "-"
            mx = f"{o.mac_overhead:.2f}" if o.mac_overhead is not None else "-"
            tx = f"{o.traffic:.2f}" if o.traffic is not None else "-"
            model = str(o.model_macs) if o.model_macs is not None else f"({o.macs})"
            comp = str(o.compulsory_bytes) if o.compulsory_bytes is not None else "-"
            nj = f"{o.energy_pj * 1e-3:.1f}" if self.energy is not None else "-"
            rows.append(f"{indent}{o.name[:24]:<24} {(o.kernel_class or o.kind)[:12]:<12} {o.cycles:>10} {pred:>10} "
                        f"{o.roofline_cycles:>10.0f} "
                        f"{100 * o.achieved:6.1f}% {model:>12} {mx:>6} {comp:>12} {o.dram_bytes:>12} {tx:>9}  "
                        f"{o.bound:<10} {nj:>10}")
        return "\n".join(rows)


def build_report(counters: Counters, program, ops: list[dict[str, Any]] | None, cfg,
                 wall_seconds: float = 0.0, *, passes: int = 1, io_bytes: int = 0,
                 output_bytes: int = 0) -> Report:
    """Counters (+ the per-instruction profile of a traced run) + op markers -> Report.
    `passes`: bf16 matrix passes per MAC of the artifact's precision; `io_bytes`: the DRAM
    bytes of the model's inputs and outputs (both for the algorithmic roofline), of which
    `output_bytes` are outputs (the latency floor)."""
    rep = Report(counters, cfg.peak_macs_per_cycle, cfg.dram.bytes_per_cycle, wall_seconds=wall_seconds,
                 passes=passes, io_bytes=io_bytes, output_bytes=output_bytes,
                 dram_latency_cycles=cfg.dram.latency_cycles)
    prof = counters.profile
    if counters.mode == "functional":
        rep.energy_note = "functional mode has no timing model"
    else:
        try:
            rep.energy = energy_of(counters, program, cfg)
        except EnergyModelError as e:
            rep.energy_note = str(e)
    if not ops or prof is None:
        return rep

    def record(o: dict[str, Any], key: str) -> int | None:
        v = o.get(key)
        return int(v) if isinstance(v, int) and v >= 0 else None

    stats = [OpStats(str(o.get("name", f"op{i}")), str(o.get("kind", "")), int(o["start"]), int(o["end"]),
                     model_macs=record(o, "macs"), compulsory_bytes=record(o, "bytes"),
                     weight_bytes=record(o, "weight_bytes"), predicted=record(o, "predicted"),
                     kernel_class=str(o.get("class", "")))
             for i, o in enumerate(ops)]
    order = sorted(range(len(stats)), key=lambda i: stats[i].start)
    starts = [stats[i].start for i in order]
    per_pc = per_program(program, cfg, "report_busy", _instruction_costs)
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
        op.instructions += count
        op.first = prof.first[pc] if op.first < 0 else min(op.first, prof.first[pc])
        op.last = max(op.last, prof.last[pc])
        eng, busy, nbytes, mac_rate = per_pc[pc]
        if eng is not None:
            op.busy[eng] += count * busy
        op.macs += prof.macs[pc]
        if prof.macs[pc]:
            op.peak_mac_cycles += prof.macs[pc] / mac_rate
        if rep.energy is not None:
            op.energy_pj += rep.energy.per_pc[pc]
        op.dram_bytes += count * nbytes
    peak, bw = cfg.peak_macs_per_cycle, cfg.dram.bytes_per_cycle
    for o in stats:
        if o.instructions:
            o.cycles = o.last - o.first
        # the peak of the dtype the op's matmuls ran on (int8 and bf16 differ on server)
        per_mac = o.peak_mac_cycles / o.macs if o.macs else 1 / peak
        if o.algorithmic:
            o.compute_cycles = (o.model_macs or 0) * passes * per_mac
            o.memory_cycles = (o.compulsory_bytes or 0) / bw
        else:  # no record: the executed work
            o.compute_cycles = max(o.peak_mac_cycles, float(o.busy["vector"]))
            o.memory_cycles = o.dram_bytes / bw
    rep.ops = stats
    return rep


def _instruction_costs(program, cfg) -> list[tuple[str | None, int, int, int]]:
    """Per instruction: the engine whose busy cycles it adds to (None: the front end), its
    busy cycles there, its DRAM bytes and, for a matmul, the array's MACs per cycle on its
    dtype (1 elsewhere) (computed once per program: see per_program)."""
    out: list[tuple[str | None, int, int, int]] = []
    for ins in program.instrs:
        eng = ins.d.engine
        nbytes, mac_rate = 0, 1
        if ins.d.name in ("dma.load", "dma.store"):
            v = ins.as_dict()
            nbytes = v["n0"] * v["n1"] * v["n2"]
        elif ins.d.name == "mx.matmul":
            mac_rate = cfg.macs_per_cycle(isa.DTYPES[ins.as_dict()["dtype"]][0])
        if eng in ("matrix", "vector", "dma_load", "dma_store"):
            out.append((eng, _busy(ins, cfg), nbytes, mac_rate))
        else:
            out.append((None, 0, nbytes, mac_rate))
    return out


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
