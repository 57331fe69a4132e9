"""The modes "fast", "functional" and "timing": the functional engine and the timing engine,
each a pass over the program (see infer.target.sim for the modes).

Fast mode runs the functional pass first (memory, registers; it records the trip counts of
register-driven loops and where it faulted), then the timing pass fed with those trip counts.
Timing depends on data only through those counts, so the cycles are the reference engine's.
A fault is reported as the reference engine would report it: the functional pass stops at its
fault; the timing pass then runs up to that instruction and reports a deadlock instead when
one comes first (in program order). After a fault the DRAM contents are unspecified.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from infer.target.asm import Program
from infer.target.sim_core import Counters
from infer.target.sim_decode import decoded
from infer.target.sim_functional import FunctionalRun
from infer.target.sim_reference import ReferenceRun
from infer.target.sim_timing import TimingStop, run_timing


def run_fast(sim, program: Program, dram: np.ndarray, regs: Mapping[str | int, int], *,
             trace: bool, on_pc: Mapping[int, Callable[[int, np.ndarray], None]] | None,
             mode: str) -> Counters:
    cfg = sim.cfg
    dec = decoded(program, cfg)
    if dec is None:  # loops that do not nest: only the reference engine defines them
        if mode == "timing":  # no data: run on copies
            from infer.target.sim import Simulator

            scratch = Simulator(cfg)
            return ReferenceRun(scratch, program, dram.copy(), regs, trace).execute()
        return ReferenceRun(sim, program, dram, regs, trace).execute(on_pc)
    if mode == "timing":
        if not dec.dynamic_loops:
            return run_timing(dec, cfg, trace=trace)
        # loop counts come from registers: the control pass computes them
        fr = FunctionalRun(sim, dec, dram, regs, data=False).execute()
    else:
        fr = FunctionalRun(sim, dec, dram, regs, on_pc).execute()
    if mode == "functional":
        if fr.fault is not None:
            raise fr.fault[1]
        return fr.c
    stop = fr.fault[0] if fr.fault is not None else None
    try:
        c = run_timing(dec, cfg, trace=trace, loop_counts=iter(fr.loop_counts), stop_step=stop)
    except TimingStop:
        assert fr.fault is not None
        raise fr.fault[1] from None
    if mode == "fast":
        c.acc_saturations = fr.c.acc_saturations
    return c
