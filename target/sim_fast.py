"""The modes "fast", "functional" and "timing": the functional engine and the timing engine,
each a pass over the program (see infer.target.sim for the modes).

Fast mode runs the functional pass first (memory, registers; it records the trip counts of
register-driven loops and where it faulted), then the timing pass fed with those trip counts.
Timing depends on data only through those counts, so the cycles are the reference engine's,
and a program run again with the same counts has the same timing: in the fast mode the timing
pass's result is kept on the decoded program, keyed by the trace flag, the counts and the
fault position, and a later run gets a copy of it instead of simulating the timing again
(`timing_of`; a verification run over many inputs pays the timing pass once).
A fault is reported as the reference engine would report it: the functional pass stops at its
fault; the timing pass then runs up to that instruction and reports a deadlock instead when
one comes first (in program order). After a fault the DRAM contents are unspecified.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from infer.target.asm import Program
from infer.target.sim_core import Counters, EventLog, PcProfile
from infer.target.sim_decode import decoded
from infer.target.sim_functional import FunctionalRun
from infer.target.sim_reference import ReferenceRun
from infer.target.sim_replay import run_functional
from infer.target.sim_timing import TimingStop, run_timing


def run_fast(sim, program: Program, dram: np.ndarray, regs: Mapping[str | int, int], *,
             trace: bool, on_pc: Mapping[int, Callable[[int, np.ndarray], None]] | None,
             mode: str, constant_dram: tuple[tuple[int, int], ...] = ()) -> Counters:
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
            c = timing_of(dec, cfg, mode, trace, [], None)
            c.dram_written = []
            return c
        # loop counts come from registers: the control pass computes them
        fr = FunctionalRun(sim, dec, dram, regs, data=False).execute()
    else:
        fr = run_functional(sim, dec, dram, regs, on_pc, constant_dram)
    # what the run wrote to DRAM, when nothing else may have (callbacks may write anywhere)
    written = [] if mode == "timing" else None if on_pc or fr.fault is not None else fr.stores
    if mode == "functional":
        if fr.fault is not None:
            raise fr.fault[1]
        fr.c.dram_written = written
        return fr.c
    stop = fr.fault[0] if fr.fault is not None else None
    try:
        c = timing_of(dec, cfg, mode, trace, fr.loop_counts, stop)
    except TimingStop:
        assert fr.fault is not None
        raise fr.fault[1] from None
    if mode == "fast":
        c.acc_saturations = fr.c.acc_saturations
    c.dram_written = written
    return c


#: timing results kept per decoded program (a few: runs of one program differ in their counts
#: only when loop counts come from data)
TIMING_CACHE_SIZE = 4


def timing_of(dec, cfg, mode: str, trace: bool, loop_counts: list[int],
              stop: int | None) -> Counters:
    """run_timing's result for these loop counts and fault position: in the fast mode computed
    once per decoded program and key, then copied (the timing pass is a deterministic function
    of the program, the config, the counts and where it stops). The timing mode, for sweeps
    over configs, always runs the pass: what it measures is the pass. A run that ends in
    TimingStop or a deadlock is not kept."""
    if mode != "fast":
        return run_timing(dec, cfg, trace=trace, loop_counts=iter(loop_counts), stop_step=stop)
    cache: dict[Any, Counters] = dec.caches.setdefault("timing", {})
    key = (trace, stop, tuple(loop_counts))
    hit = cache.get(key)
    if hit is None:
        hit = run_timing(dec, cfg, trace=trace, loop_counts=iter(loop_counts), stop_step=stop)
        if len(cache) >= TIMING_CACHE_SIZE:
            del cache[next(iter(cache))]
        cache[key] = hit
    return copy_counters(hit)


def copy_counters(c: Counters) -> Counters:
    """A copy of c that shares nothing mutable with it (the event log's records are never
    modified once written: they are copied by reference)."""
    out = dataclasses.replace(
        c, per_engine_instructions=list(c.per_engine_instructions), busy=list(c.busy),
        stalls=dict(c.stalls), macs_by_dtype=dict(c.macs_by_dtype),
        peak_macs_per_cycle_by_dtype=dict(c.peak_macs_per_cycle_by_dtype),
        profile=None if c.profile is None else PcProfile(
            list(c.profile.count), list(c.profile.first), list(c.profile.last),
            list(c.profile.macs)),
        log=EventLog(), _events=None, dram_written=None)
    out.log.items = list(c.log.items)
    out.log.offset = c.log.offset
    return out
