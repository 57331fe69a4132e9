"""A program decoded once for the fast engines: per-instruction tables read from the ISA
definition and the hardware config, and the loop structure.

`decoded(program, cfg)` caches the result on the Program object (keyed by the config), so a
program run many times (the runtime runs one artifact per inference) is decoded once. The
cache is checked against the instruction list, so a program edited in place is decoded again.

The timing class of an instruction follows from its engine in the ISA table (`isa.ENGINES`):
every `dma_load`/`dma_store` instruction is a transfer, every `vector` instruction occupies
the vector unit for `sim_core.vector_occupancy` cycles; the scalar front end and the
matrix unit's two instructions have their own rules (docs/isa.md, "Timing model").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import is_
from typing import Any

from infer.target import isa
from infer.target.asm import Program, format_instr
from infer.target.hw import HardwareConfig
from infer.target.sim_core import ENGINE_INDEX, NP_DTYPES, Fault, SimFault, vector_occupancy
from infer.target.sim_reference import compile_checks

# timing classes (small ints: the timing engine's dispatch)
T_SCALAR, T_LD, T_SYNC_ALL, T_HALT, T_LOOP, T_DMA, T_LOADW, T_MATMUL, T_VECTOR = range(9)
_SCALAR_CLASS = {"ld": T_LD, "lds": T_LD, "fence": T_SYNC_ALL, "halt": T_HALT, "loop": T_LOOP}
_MATRIX_CLASS = {"mx.loadw": T_LOADW, "mx.matmul": T_MATMUL}


@dataclass
class Loop:
    """One `loop` instruction: body [start, end); `count_base` 0 means a constant trip count."""

    pc: int
    start: int
    end: int
    count_base: int
    count: int
    #: every loop nested in the body has a constant trip count and the body has no halt:
    #: the instructions of one iteration are the same sequence every time
    static_body: bool
    #: instructions executed per iteration, when static_body (inner loops at their counts)
    steps_per_iteration: int


@dataclass
class Decoded:
    """Per-pc tables (lists indexed by instruction index) for one program and config."""

    n: int
    names: list[str]
    engine: list[int]
    tclass: list[int]
    wait: list[int]
    signal: list[int]
    signal2: list[int]
    wait2: list[int]  # (isa.Instr.wait2)
    #: timing parameters by class: DMA (xfer cycles, bytes), loadw (cycles, k*n),
    #: matmul (cycles = m * cycles_per_row, m), vector (occupancy, elements), ld / lds
    #: (front-end latency, DRAM bytes read)
    p1: list[int]
    p2: list[int]
    loops: dict[int, Loop]
    #: any loop whose count is read from a register (timing then needs the register values)
    dynamic_loops: bool
    instrs: list[isa.Instr]
    matrix_rows: int
    #: what the fast engines derive and keep per program: "tables" (the functional engine's
    #: operand tuples), "reads" (registers each instruction reads), "plans" (batched loop
    #: executions), "failed"/"lane_rejects" (loops not batched, and why: for profiling)
    caches: dict[str, Any] = field(default_factory=dict)
    #: operand dtype code (isa.DTYPES) of each `mx.matmul`, 0 elsewhere: MACs by dtype
    mdtype: list[int] = field(default_factory=list)


def _timing_params(cfg: HardwareConfig, ins: isa.Instr, v: dict[str, int]) -> tuple[int, int]:
    d = ins.d
    if d.engine in ("dma_load", "dma_store"):
        n0, n1, n2 = v["n0"], v["n1"], v["n2"]
        burst = cfg.dram.burst_bytes
        charged = n2 * n1 * (-(-n0 // burst) * burst)
        return -(-charged // cfg.dram.bytes_per_cycle), n0 * n1 * n2
    if d.name == "mx.loadw":
        k, n = v["k"], v["n"]
        esz = NP_DTYPES[v["dtype"]].itemsize
        return -(-(k * n * esz) // cfg.matrix.weight_load_bytes_per_cycle), k * n
    if d.name == "mx.matmul":
        return cfg.matrix.matmul_cycles(v["m"], isa.DTYPES[v["dtype"]][0]), v["m"]
    if d.engine == "vector":
        return vector_occupancy(cfg, ins), v["rows"] * v["cols"]
    if d.name == "ld":  # (front-end latency, DRAM bytes read)
        return cfg.dram.latency_cycles, 4
    if d.name == "lds":
        return cfg.scalar.local_load_cycles, 0
    return 0, 0


def _well_nested(instrs: list[isa.Instr]) -> bool:
    ends: list[int] = []
    for i, ins in enumerate(instrs):
        while ends and ends[-1] <= i:
            ends.pop()
        if ins.d.name == "loop":
            end = i + 1 + ins.as_dict()["body"]
            if end > len(instrs) or (ends and end > ends[-1]):
                return False
            ends.append(end)
    return True


def _decode(prog: Program, cfg: HardwareConfig) -> Decoded | None:
    instrs = prog.instrs
    n = len(instrs)
    names, engine, tclass, wait, signal, signal2, wait2, p1, p2, mdtype = ([] for _ in range(10))
    for pc, ins in enumerate(instrs):
        try:
            compile_checks(cfg, ins)
        except Fault as fl:
            raise SimFault(pc, format_instr(ins), fl.cause, fl.kind) from None
        d = ins.d
        names.append(d.name)
        engine.append(ENGINE_INDEX[d.engine])
        if d.engine == "scalar":
            tclass.append(_SCALAR_CLASS.get(d.name, T_SCALAR))
        elif d.engine == "matrix":
            tclass.append(_MATRIX_CLASS[d.name])
        elif d.engine == "vector":
            tclass.append(T_VECTOR)
        else:
            tclass.append(T_DMA)
        wait.append(ins.wait)
        signal.append(ins.signal)
        signal2.append(ins.signal2)
        wait2.append(ins.wait2)
        fields = dict(zip(d.field_names, ins.values))
        a, b = _timing_params(cfg, ins, fields)
        p1.append(a)
        p2.append(b)
        mdtype.append(fields["dtype"] if d.name == "mx.matmul" else 0)
    if not _well_nested(instrs):
        return None  # the reference engine's control flow is the definition there
    loops: dict[int, Loop] = {}
    for pc in range(n - 1, -1, -1):  # inner loops first
        ins = instrs[pc]
        if tclass[pc] != T_LOOP:
            continue
        v = ins.as_dict()
        count_base, count = v["count_base"], v["count"]
        start, end = pc + 1, pc + 1 + v["body"]
        static, steps, q = True, 0, start
        while q < end:
            if tclass[q] == T_LOOP:
                inner = loops[q]
                static = static and inner.static_body and inner.count_base == 0
                steps += 1 + max(inner.count, 0) * inner.steps_per_iteration
                q = inner.end
                continue
            if tclass[q] == T_HALT:
                static = False
            steps += 1
            q += 1
        loops[pc] = Loop(pc, start, end, count_base, count, static, steps if static else 0)
    dynamic = any(lp.count_base != 0 for lp in loops.values())
    return Decoded(n, names, engine, tclass, wait, signal, signal2, wait2, p1, p2, loops, dynamic,
                   instrs, cfg.matrix.rows, mdtype=mdtype)


def per_program(prog: Program, cfg: HardwareConfig, name: str,
                build: Callable[[Program, HardwareConfig], Any]) -> Any:
    """build(prog, cfg), computed once per program object, config and `name` and kept on the
    program (checked against the instruction list, so a program edited in place is built
    again): what a run needs that depends on the program and not on the data (the decoded
    tables; the energy model's and the report's per-instruction tables)."""
    cache: dict[Any, Any] = prog.__dict__.setdefault("_sim_decoded", {})
    key = (name, repr(cfg))  # configs are frozen dataclasses (with a dict inside: not hashable)
    hit = cache.get(key)
    instrs = prog.instrs
    if hit is not None:
        snapshot, value = hit
        if len(snapshot) == len(instrs) and all(map(is_, snapshot, instrs)):
            return value
    value = build(prog, cfg)
    cache[key] = (list(instrs), value)
    return value


def decoded(prog: Program, cfg: HardwareConfig) -> Decoded | None:
    """The decoded tables of prog for cfg (cached on prog); None when the loops do not nest
    properly (then only the reference engine runs the program). Raises the SimFault the
    reference engine raises before running (register/semaphore numbers, matrix dtypes)."""
    return per_program(prog, cfg, "decoded", _decode)
