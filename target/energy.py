"""Energy and area model: per-event energies and area coefficients of the config
(`[energy]`, `[area]` in target/*.toml; their published sources are in the TOML comments).

    area = area_breakdown(cfg)                     # {"matrix": mm2, "vector": ..., "total": ...}
    e = energy_of(counters, program, cfg)          # Energy: pJ by component, per pc, power
    e.total_pj, e.by_component, e.average_power_w

Energy of a run = the dynamic energy of every executed instruction + static power x run time:

| component | events (per executed instruction, from its fields) | energy per event |
|---|---|---|
| matrix | the MACs of each `mx.matmul` (the simulator's count), by its dtype | `energy.mac_pj[dtype]` |
| vector | rows x cols elements of a `vec.*`, times `vector.cost[op]` | `energy.vector_pj_per_element` |
| scratchpad | bytes read or written in the scratchpad: DMA local side, `mx.loadw` weights (k x n), `mx.matmul` activations (m x k), vector operands and results there | SRAM pJ/byte of a scratchpad bank |
| accumulator | the same in the accumulator: `mx.matmul` results (m x n x 4, read and written when accumulating) | SRAM pJ/byte of an accumulator bank |
| dram | bytes of every `dma.load` / `dma.store` (n0 x n1 x n2) | `energy.dram_pj_per_byte` |
| static | run time at the config clock | `energy.static_mw_per_mm2` x the area model's total |

SRAM energy per byte grows with the bank (`memory.*_bytes / *_banks`), CACTI-like:
`sram_pj_per_byte * (bank / sram_reference_bank_bytes) ** sram_bank_exponent`.

What the count needs: how often each instruction ran, and each matmul's MACs: the simulator's
per-instruction profile (`Simulator.run(..., trace=True)`, which `Executable.run` records by
default), in any mode that has a timing model. A matmul's k and n are those of the last
`mx.loadw` before it in program order (the weights a compiled program loads for it; its MACs
are the simulator's own count either way). Whether a local address is in the accumulator is
read from the instruction's immediate (compiled code puts the buffer base there: a base
register only adds offsets inside the buffer).

Target code: no compiler import (the runtime reports energy from an artifact alone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infer.target import isa
from infer.target.hw import HardwareConfig
from infer.target.sim_decode import per_program

COMPONENTS = ("matrix", "vector", "scratchpad", "accumulator", "dram", "static")
AREA_COMPONENTS = ("matrix", "vector", "scratchpad", "accumulator", "fixed")


class EnergyModelError(ValueError):
    """The config has no [energy] or [area] section, or the run has no profile."""


def area_breakdown(cfg: HardwareConfig) -> dict[str, float]:
    """Area in mm^2 by component (AREA_COMPONENTS) and "total"."""
    a = cfg.area
    if a is None:
        raise EnergyModelError(f"{cfg.source}: the config has no [area] section")
    m = cfg.memory
    out = {"matrix": cfg.matrix.rows * cfg.matrix.cols * a.pe_mm2,
           "vector": cfg.vector.lanes * a.vector_lane_mm2,
           "scratchpad": m.scratchpad_bytes / 1024 * a.sram_mm2_per_kib,
           "accumulator": m.accumulator_bytes / 1024 * a.sram_mm2_per_kib,
           "fixed": a.fixed_mm2}
    out["total"] = sum(out.values())
    return out


def static_power_w(cfg: HardwareConfig) -> float:
    """Leakage and idle clock power: static_mw_per_mm2 x the total area."""
    return _energy(cfg).static_mw_per_mm2 * area_breakdown(cfg)["total"] * 1e-3


def sram_pj_per_byte(cfg: HardwareConfig, space: str) -> float:
    """Energy of one byte read or written in a bank of the scratchpad ("scratchpad") or the
    accumulator ("accumulator")."""
    e, m = _energy(cfg), cfg.memory
    bank = (m.scratchpad_bytes / m.scratchpad_banks if space == "scratchpad"
            else m.accumulator_bytes / m.accumulator_banks)
    return e.sram_pj_per_byte * (bank / e.sram_reference_bank_bytes) ** e.sram_bank_exponent


def _energy(cfg: HardwareConfig):
    if cfg.energy is None:
        raise EnergyModelError(f"{cfg.source}: the config has no [energy] section")
    return cfg.energy


@dataclass
class Energy:
    """The energy of one run: pJ by component and the dynamic pJ of each instruction (all its
    executions), the run time and the area it was computed with."""

    by_component: dict[str, float]  # pJ, COMPONENTS
    per_pc: list[float]  # dynamic pJ of each instruction, summed over its executions
    seconds: float
    area: dict[str, float] = field(default_factory=dict)

    @property
    def total_pj(self) -> float:
        return sum(self.by_component.values())

    @property
    def dynamic_pj(self) -> float:
        return self.total_pj - self.by_component["static"]

    @property
    def average_power_w(self) -> float:
        return self.total_pj * 1e-12 / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"total_uj": self.total_pj * 1e-6,
                "by_component_uj": {k: v * 1e-6 for k, v in self.by_component.items()},
                "average_power_w": self.average_power_w, "area_mm2": dict(self.area)}


def _local_space(imm: int) -> str:
    return "accumulator" if imm >= isa.ACC_BASE else "scratchpad"


def _esize(code: int) -> int:
    return isa.dtype_size(code) or 1


def instruction_events(program, cfg: HardwareConfig) -> list[dict[str, float]]:
    """Per instruction, the events of ONE execution except MACs: {component: bytes or
    element-cost units} (scratchpad/accumulator/dram bytes, vector element x cost), from the
    table of event functions keyed on the mnemonic (vector ops: on the engine)."""
    out: list[dict[str, float]] = []
    state = {"kn": (cfg.matrix.rows, cfg.matrix.cols)}  # the loaded weights (before any: a full tile)
    for ins in program.instrs:
        ev: dict[str, float] = {}
        fn = _EVENTS.get(ins.d.name) or (_vector_events if ins.d.engine == "vector" else None)
        if fn is not None:
            fn(ins.as_dict(), ins, cfg, state, ev)
        out.append(ev)
    return out


def _add(ev: dict[str, float], space: str, amount: float) -> None:
    ev[space] = ev.get(space, 0) + amount


def _dma_events(v, ins, cfg, state, ev) -> None:
    nbytes = v["n0"] * v["n1"] * v["n2"]
    _add(ev, "dram", nbytes)
    _add(ev, _local_space(v["local"]), nbytes)


def _loadw_events(v, ins, cfg, state, ev) -> None:
    state["kn"] = (v["k"], v["n"])
    _add(ev, _local_space(v["w"]), v["k"] * v["n"] * _esize(v["dtype"]))


def _matmul_events(v, ins, cfg, state, ev) -> None:
    k, n = state["kn"]
    _add(ev, _local_space(v["act"]), v["m"] * k * _esize(v["dtype"]))
    _add(ev, "accumulator", v["m"] * n * 4 * (2 if v["accum"] else 1))


def _vector_events(v, ins, cfg, state, ev) -> None:
    vop = ins.d.vop
    rows, cols = v["rows"], v["cols"]
    _add(ev, "vector", rows * cols * cfg.vector.cost[vop.name])
    _VECTOR_OPERANDS.get(vop.form, _elementwise_operands)(v, vop, ev)
    _add(ev, _local_space(v["dst"]), (rows if vop.reduces_rows else rows * cols) * _esize(v["dt"]))


def _elementwise_operands(v, vop, ev) -> None:
    """Operand a (a rows x cols tile) and, for binary ops, b as its broadcast mode reads it."""
    rows, cols = v["rows"], v["cols"]
    _add(ev, _local_space(v["a"]), rows * cols * _esize(v["at"]))
    if vop.reads_b:
        nb = {"tile": rows * cols, "row": cols, "col": rows, "imm": 0}[isa.BMODES[v["bmode"]]]
        if nb:
            _add(ev, _local_space(v["b"]), nb * _esize(v["bt"]))


def _dequant_operands(v, vop, ev) -> None:
    """vec.dequant reads packed codes and per-block scales (isa.dequant_shapes)."""
    (qr, qc), (sr, sc) = isa.dequant_shapes(v["fmt"], v["blocks"], v["rows"], v["cols"])
    _add(ev, _local_space(v["q"]), qr * qc)
    _add(ev, _local_space(v["s"]), sr * sc * isa.qscale_bytes(v["fmt"]))


_EVENTS = {"dma.load": _dma_events, "dma.store": _dma_events, "mx.loadw": _loadw_events,
           "mx.matmul": _matmul_events}
_VECTOR_OPERANDS = {"dequant": _dequant_operands}


def energy_of(counters, program, cfg: HardwareConfig) -> Energy:
    """The energy of a run from its counters (cycles, and the per-instruction profile of a
    traced run) and the program it ran. Raises EnergyModelError without [energy]/[area] in
    the config or without a profile."""
    e = _energy(cfg)
    prof = counters.profile
    if prof is None:
        raise EnergyModelError("energy needs the per-instruction profile of a traced run (trace=True)")
    unit = {"dram": e.dram_pj_per_byte, "vector": e.vector_pj_per_element,
            "scratchpad": sram_pj_per_byte(cfg, "scratchpad"),
            "accumulator": sram_pj_per_byte(cfg, "accumulator")}
    by = dict.fromkeys(COMPONENTS, 0.0)
    per_pc = [0.0] * len(program.instrs)
    events = per_program(program, cfg, "energy_events", instruction_events)
    for pc, (ins, ev) in enumerate(zip(program.instrs, events, strict=True)):
        count = prof.count[pc]
        if not count:
            continue
        pj = 0.0
        for comp, amount in ev.items():
            x = count * amount * unit[comp]
            by[comp] += x
            pj += x
        if prof.macs[pc]:
            dt = isa.DTYPES[ins["dtype"]][0]
            x = prof.macs[pc] * e.mac_pj.get(dt, 0.0)
            by["matrix"] += x
            pj += x
        per_pc[pc] = pj
    area = area_breakdown(cfg)
    seconds = counters.seconds
    by["static"] = static_power_w(cfg) * seconds * 1e12
    return Energy(by, per_pc, seconds, area)
