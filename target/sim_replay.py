"""Replay of the functional engine's data operations: a program run again skips the dispatch.

The functional engine (`sim_functional`) spends much of a loop-free program's time deciding
what each instruction does: reading its table entry, resolving its addresses, looking up its
operand views, choosing whether a conversion can be reused. Those decisions depend on the
program, the initial registers and the values `ld` / `lds` read, never on the data the other
instructions compute. So a run records the data operations it performed, in order, as calls
of numpy functions on the operand views it used (a `Trace`: DMA copies, weight and activation
conversions, products, vector ops, the lane-batched plans of `sim_lockstep`); a later run of
the same decoded program on the same simulator and DRAM buffer with the same initial registers
makes those calls again instead of interpreting the program. The calls are the same functions
on the same views in the same order, so the bits are those of an interpreted run.

Registers that `ld` / `lds` wrote, or that were computed from such registers, are *tainted*:
their values may differ from run to run (an embedding gather reads token ids). An instruction
that reads a tainted register, and every `ld` / `lds`, is recorded as an `interpret` step: the
replay runs that one instruction through the engine with the registers it reads (the untainted
ones as recorded, the tainted ones as the replay computed them), so its addresses, its value
and its faults are this run's. What the other instructions do cannot depend on tainted
registers, so the counters are the recorded ones except `acc_saturations`, which counts data.
A run is not recorded when a loop's trip count or a batched loop's registers are tainted, when
a `dma.store`'s address is (the DRAM ranges written would differ), when it faulted or had
`on_pc` callbacks, or when it would exceed `MAX_STEPS` calls (a run interpreting loops
iteration by iteration for millions of instructions: its trace would cost more memory than
it saves time).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from infer.target.sim_constants import ConstantBytes, LiveBytes, kept_conversion
from infer.target.sim_core import (Counters, accumulate_into, canonical_nans, converted,
                                    vector_compute_fast)
from infer.target.sim_decode import T_DMA, T_LD, T_LOOP, T_SCALAR
from infer.target.sim_memo import default_budget
from infer.target.sim_reference import initial_registers, matmul_step

if TYPE_CHECKING:
    from infer.target.sim import Simulator
    from infer.target.sim_decode import Decoded
    from infer.target.sim_functional import FunctionalRun

#: calls a trace may hold (~150 bytes each: the views themselves are shared with the
#: engine's view cache)
MAX_STEPS = 1 << 18
#: traces kept per (program, simulator, DRAM buffer): one per set of initial registers
MAX_TRACES = 2
#: replays sum each chain of float matmuls into one accumulator tile in a temporary
#: (`chain_matmuls`)
CHAIN_MATMULS = True


@dataclasses.dataclass
class Trace:
    """A recorded run: its data operations and what control decided."""
    #: (function, arguments) in program order; the steps that read or update the matrix
    #: unit's weights, a kept conversion or registers take `cell` as their first argument
    steps: list[tuple[Callable[..., Any], tuple[Any, ...]]]
    #: holds the FunctionalRun of the replay under way
    cell: Cell
    #: conversion slots a replay needs (-1: not counted yet, see `reuse_slots`)
    slots: int
    counters: Counters
    steps_run: int
    loop_counts: list[int]
    stores: list[tuple[int, int]]
    #: the steps with the conversions of constants kept (`keep_constants`), and the constant
    #: DRAM ranges they were found for
    kept_steps: list[tuple[Callable[..., Any], tuple[Any, ...]]] | None = None
    kept_for: tuple[tuple[int, int], ...] = ()
    #: kept_steps without the DMA copies only kept conversions read (`drop_dead_copies`), once
    #: a replay of kept_steps has made every kept conversion
    lean_steps: list[tuple[Callable[..., Any], tuple[Any, ...]]] | None = None
    #: (the steps a replay runs, those steps with their matmul chains summed in a temporary:
    #: `chain_matmuls`)
    chained: tuple[list[Any], list[Any]] | None = None


class Cell:
    """The FunctionalRun a replay updates (`run`): the steps are bound to the cell, not to a
    run, and the trace does not refer to the simulator that keeps it (which would make a
    reference cycle that only the cycle collector frees)."""

    run: Any = None


class Recorder:
    """What a FunctionalRun records while it runs (FunctionalRun.rec)."""

    def __init__(self, dec: Decoded) -> None:
        from infer.target.sim_lockstep import reads_table

        self.cell = Cell()
        self.reads = reads_table(dec)
        self.steps: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self.slots = 0
        #: id of a converted array -> its slot (the engine reuses conversions it keeps alive)
        self.slot_of: dict[int, int] = {}
        #: registers whose value came from data (see the module docstring)
        self.tainted: set[int] = set()
        #: why the run cannot be replayed, once it cannot
        self.refused: str | None = None

    def add(self, fn: Callable[..., Any], *args: Any) -> None:
        self.steps.append((fn, args))

    def check_size(self) -> None:
        """Refuses the run once its trace is too long (the engine asks at loop back-edges:
        a loop-free program's trace is as long as the program)."""
        if len(self.steps) > MAX_STEPS:
            self.refuse(f"more than {MAX_STEPS} data operations")

    def refuse(self, why: str) -> None:
        if self.refused is None:
            self.refused = why
            self.steps = _Discarded()

    def new_slot(self, array: np.ndarray) -> int:
        slot = self.slot_of[id(array)] = self.slots
        self.slots += 1
        return slot

    def interpreted(self, fr: FunctionalRun, pc: int, tc: int, t: Any) -> bool:
        """Before fr runs pc: whether it is recorded as an `interpret` step (fr then runs it
        without recording it; `after_interpreted` follows). Keeps the taint up to date."""
        tainted = self.tainted
        reads = self.reads[pc]
        if tc != T_LD and not any(r in tainted for r in reads):
            if tc == T_SCALAR and t is not None:
                tainted.discard(t[1])  # written from untainted registers
            return False
        if tc == T_LOOP:
            self.refuse(f"loop at {pc} reads a register that data decided")
            return False
        if tc == T_DMA and not t[15]:
            self.refuse(f"dma.store at {pc} writes an address that data decided")
            return False
        # conversions and accumulations the engine keeps pending are settled first: the
        # interpreted instruction's own are not recorded, so nothing after it may reuse them
        if fr.nan_tile is not None:
            fr.flush_nans()
        fr.act_key = None
        fr.wcache.clear()
        known = tuple((r, fr.regs[r]) for r in reads if r not in tainted)
        self.add(interpret, self.cell, pc, fr.steps, known)
        return True

    def after_interpreted(self, fr: FunctionalRun, tc: int, t: Any) -> None:
        if fr.nan_tile is not None:
            canonical = fr.rec
            fr.rec = None
            fr.flush_nans()  # as `interpret` does
            fr.rec = canonical
        fr.act_key = None
        fr.wcache.clear()
        if tc == T_LD or tc == T_SCALAR and t is not None:
            rd = t[0] if tc == T_LD else t[1]
            if rd:
                self.tainted.add(rd)


class _Discarded(list):
    """The steps of a refused recording: nothing is kept."""

    def append(self, item: Any) -> None:
        pass


# ----------------------------------------------------------------------------- replayed steps
# each mirrors what FunctionalRun does for one instruction (see its methods)
def loadw_converted(cell: Cell, slot: int, view: np.ndarray, wdt: Any, dt: int) -> None:
    fr = cell.run
    fr.weights = fr.slots[slot] = converted(view, wdt)
    fr.wdtype = dt


def loadw_kept(cell: Cell, slot: int, kept: list[np.ndarray | None], view: np.ndarray, wdt: Any,
               dt: int) -> None:
    """loadw_converted of a constant (keep_constants): converted by the first replay, then
    kept (read-only: nothing may write the matrix unit's weights)."""
    fr = cell.run
    fr.weights = fr.slots[slot] = kept_conversion(kept, view, wdt)
    fr.wdtype = dt


def loadw_again(cell: Cell, slot: int, dt: int) -> None:
    fr = cell.run
    fr.weights = fr.slots[slot]
    fr.wdtype = dt


def _product(fr: Any, slot: int, view: np.ndarray | None) -> np.ndarray:
    """An `mx.matmul`'s product with the loaded weights: its activations converted from `view`
    into conversion slot `slot`, or (view None) the conversion that slot holds."""
    w = fr.weights
    if view is None:
        x = fr.slots[slot]
    else:
        x = fr.slots[slot] = converted(view, w.dtype)
    return x @ w


def matmul(cell: Cell, slot: int, view: np.ndarray | None, out: np.ndarray, is_int: bool,
           accum: bool) -> None:
    fr = cell.run
    if is_int:
        fr.c.acc_saturations += accumulate_into(out, _product(fr, slot, view), True, accum)
    else:
        accumulate_into(out, _product(fr, slot, view), False, accum, nan_check=False)


def chain_first(cell: Cell, slot: int, view: np.ndarray | None, out: np.ndarray, accum: bool) -> None:
    """The first float `matmul` of a chain into one accumulator tile (`chain_matmuls`): its sum
    starts in a contiguous temporary (the accumulator's tile plus the product, or the product)."""
    fr = cell.run
    r = _product(fr, slot, view)
    fr.chain = np.add(out, r) if accum else r


def chain_next(cell: Cell, slot: int, view: np.ndarray | None, out: np.ndarray | None) -> None:
    """A later float `matmul` of the chain: its product added to the temporary; the last one
    (`out` given) writes the sum to the accumulator tile."""
    fr = cell.run
    np.add(fr.chain, _product(fr, slot, view), out=fr.chain)
    if out is not None:
        out[...] = fr.chain
        fr.chain = None


def matmul_in_place(cell: Cell, dt: int, act: int, acc: int, m: int, astride: int,
                    cstride: int, accum: bool) -> None:
    fr = cell.run
    matmul_step(fr.sim, fr.weights, fr.wdtype, dt, act, acc, m, astride, cstride, accum, fr.c)


def dequant(cell: Cell, spec: Any, q: np.ndarray, s: np.ndarray, dst: np.ndarray,
            dt: int) -> None:
    cell.run.sim.dequant_memo.run(spec, q, s, dst, dt)


class _Faulted(Exception):
    pass


def interpret(cell: Cell, pc: int, steps: int, known: tuple[tuple[int, int], ...]) -> None:
    """Run instruction pc through the engine with the untainted registers it reads set to their
    recorded values (the tainted ones hold what this replay computed)."""
    fr = cell.run
    regs = fr.regs
    for r, v in known:
        regs[r] = v
    fr.steps = steps
    fr.act_key = None
    fr.wcache.clear()
    fr.execute(pc, pc + 1)
    if fr.fault is not None:
        raise _Faulted


# ----------------------------------------------------------------------------- runs
def run_functional(sim: Simulator, dec: Decoded, dram: np.ndarray,
                   regs: Mapping[str | int, int],
                   on_pc: Mapping[int, Callable[[int, np.ndarray], None]] | None,
                   constant_dram: tuple[tuple[int, int], ...] = ()) -> FunctionalRun:
    """The functional engine's run of dec (data and registers), replayed from the trace of an
    earlier run when one applies (see the module docstring), else interpreted and recorded.
    `constant_dram`: DRAM ranges the caller keeps the same in every run on this buffer (the
    replay keeps its conversions of them: sim_constants)."""
    from infer.target.sim_functional import FunctionalRun

    if on_pc:
        return FunctionalRun(sim, dec, dram, regs, on_pc).execute()
    traces = sim.operand_views(dec, dram).setdefault("replay traces", {})
    key = tuple(initial_registers(sim.cfg, regs))
    trace = traces.get(key)
    if trace is not None:
        return replay(FunctionalRun(sim, dec, dram, regs), trace, constant_dram)
    fr = FunctionalRun(sim, dec, dram, regs)
    rec = fr.rec = Recorder(dec)
    fr.execute()
    fr.rec = None
    if fr.fault is None and rec.refused is None:
        if len(traces) >= MAX_TRACES:
            del traces[next(iter(traces))]
        traces[key] = Trace(rec.steps, rec.cell, -1, copy.deepcopy(fr.c), fr.steps,
                            list(fr.loop_counts), list(fr.stores))
    return fr


#: the steps that use a conversion slot (their second argument): to write it, to read it, or
#: to write it when their third argument (the view converted) is not None
_SLOT_STEPS = {loadw_converted: "write", loadw_again: "read", matmul: "write a view"}


def reuse_slots(steps: list[tuple[Callable[..., Any], tuple[Any, ...]]]
                ) -> tuple[list[tuple[Callable[..., Any], tuple[Any, ...]]], int]:
    """The steps with their conversion slots renumbered so that a slot whose conversion is
    read no more is used again (a replay then holds a few conversions at a time, as the
    engine does, not every conversion of the run), and the number of slots."""
    last: dict[int, int] = {}
    for i, (fn, args) in enumerate(steps):
        if fn in _SLOT_STEPS:
            last[args[1]] = i
    free: list[int] = []
    new: dict[int, int] = {}
    count = 0
    out = []
    for i, (fn, args) in enumerate(steps):
        use = _SLOT_STEPS.get(fn)
        if use is not None:
            old = args[1]
            if use == "write" or use == "write a view" and args[2] is not None:
                if free:
                    new[old] = free.pop()
                else:
                    new[old], count = count, count + 1
            slot = new[old]
            args = (args[0], slot, *args[2:])
            if last[old] == i:
                free.append(slot)
        out.append((fn, args))
    return out, count


# ----------------------------------------------------------------------------- kept constants
def _interpret_written(cb: ConstantBytes, args: tuple[Any, ...]) -> None:
    # a `dma.store` whose address data decided refuses the recording (Recorder.interpreted):
    # an interpreted instruction writes local memory only
    cb.forget_local()


def _nothing(state: Any, args: tuple[Any, ...]) -> None:
    """A step that neither writes (ConstantBytes) nor reads (LiveBytes) the scratchpad."""


@functools.cache
def _writes() -> dict[Any, Callable[[ConstantBytes, tuple[Any, ...]], None]]:
    """What each kind of step writes, for ConstantBytes (a step not listed forgets every
    constant). Built on first use: sim_lockstep imports this module."""
    from infer.target.sim_lockstep import _replay_plan, _replay_plan_kept, plan_written

    return {
        np.copyto: lambda cb, args: cb.copied(args[0], args[1]),
        vector_compute_fast: lambda cb, args: cb.written(args[3]),
        canonical_nans: lambda cb, args: cb.written(args[0]),
        dequant: lambda cb, args: cb.written(args[4]),
        matmul: lambda cb, args: cb.written(args[3]),
        matmul_in_place: _nothing,  # the accumulator, which holds no constants
        loadw_converted: _nothing,
        loadw_kept: _nothing,
        loadw_again: _nothing,
        interpret: _interpret_written,
        _replay_plan: lambda cb, args: plan_written(cb, args[1]),
        _replay_plan_kept: lambda cb, args: plan_written(cb, args[1]),
    }


def keep_constants(steps: list[tuple[Callable[..., Any], tuple[Any, ...]]], spad: np.ndarray,
                   dram: np.ndarray, constant_dram: tuple[tuple[int, int], ...], budget: int
                   ) -> list[tuple[Callable[..., Any], tuple[Any, ...]]]:
    """The steps with each weight conversion of constant scratchpad bytes (copied there from
    constant DRAM and not overwritten since: sim_constants) made a `loadw_kept` step, and a
    batched loop's such conversions kept too (`plan_constants`), while the kept results fit
    in `budget` bytes."""
    from infer.target.sim_lockstep import _replay_plan, _replay_plan_kept, plan_constants

    writes = _writes()
    cb = ConstantBytes(spad, dram, constant_dram)
    out = []
    for fn, args in steps:
        if fn is loadw_converted:
            cell, slot, view, wdt, dt = args
            nbytes = view.size * np.dtype(wdt).itemsize
            if nbytes <= budget and cb.is_constant(view):
                budget -= nbytes
                fn, args = loadw_kept, (cell, slot, [None], view, wdt, dt)
        elif fn is _replay_plan:
            kept, budget = plan_constants(args[1], cb, budget)
            if kept:
                fn, args = _replay_plan_kept, (*args, kept)
        written = writes.get(fn)
        if written is None:
            cb.forget_all()
        else:
            written(cb, args)
        out.append((fn, args))
    return out


def _all_read(lb: LiveBytes, args: tuple[Any, ...]) -> None:
    lb.read_all()


def _vector_reads(lb: LiveBytes, args: tuple[Any, ...]) -> None:
    lb.killed(args[3])
    lb.read(args[1], args[2])


def _dequant_reads(lb: LiveBytes, args: tuple[Any, ...]) -> None:
    lb.killed(args[4])
    lb.read(args[2], args[3])


def _plan_reads(lb: LiveBytes, args: tuple[Any, ...]) -> None:
    for lo, hi in args[1].spad_reads:  # (its kept conversions' reads too: kept live)
        lb.read_range(lo, hi)


@functools.cache
def _reads() -> dict[Any, Callable[[LiveBytes, tuple[Any, ...]], None]]:
    """What each kind of step reads of the scratchpad (and overwrites whole), for LiveBytes
    (a step not listed reads everything). DMA copies are drop_dead_copies' own case."""
    from infer.target.sim_lockstep import _replay_plan, _replay_plan_kept

    return {
        vector_compute_fast: _vector_reads,
        canonical_nans: lambda lb, args: lb.read(args[0]),
        dequant: _dequant_reads,
        matmul: lambda lb, args: lb.read(args[2]),
        matmul_in_place: _all_read,  # its operand's addresses are registers' values
        loadw_converted: lambda lb, args: lb.read(args[2]),
        loadw_kept: _nothing,  # the kept conversion: its bytes are not read again
        loadw_again: _nothing,
        interpret: _all_read,
        _replay_plan: _plan_reads,
        _replay_plan_kept: _plan_reads,
    }


def drop_dead_copies(steps: list[tuple[Callable[..., Any], tuple[Any, ...]]], spad: np.ndarray
                     ) -> list[tuple[Callable[..., Any], tuple[Any, ...]]]:
    """The steps without the DMA copies into the scratchpad whose bytes no later step reads
    before they are overwritten: once `keep_constants`' conversions are made, the weight tiles
    only those conversions read (their copies are still made by the replay that converts)."""
    reads = _reads()
    lb = LiveBytes(spad)
    dead = set()
    for i in range(len(steps) - 1, -1, -1):
        fn, args = steps[i]
        if fn is np.copyto:
            dst, src = args
            if not lb.is_live(dst):
                dead.add(i)
                continue
            lb.killed(dst)
            lb.read(src)
            continue
        read = reads.get(fn)
        if read is None:
            lb.read_all()
        else:
            read(lb, args)
    return [step for i, step in enumerate(steps) if i not in dead]


_WEIGHT_STEPS = (loadw_converted, loadw_kept, loadw_again)


def _same_tile(a: np.ndarray, b: np.ndarray) -> bool:
    return (a is b or a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def chain_matmuls(steps: list[tuple[Callable[..., Any], tuple[Any, ...]]]
                  ) -> list[tuple[Callable[..., Any], tuple[Any, ...]]]:
    """The steps with each chain of float `matmul`s into one accumulator tile (fp32 emulation's
    three passes: between them only weight loads, each after the first accumulating) made a
    `chain_first` and `chain_next` steps: the products are summed in a contiguous temporary, the
    same additions in the same order, and the accumulator tile is read and written once, not
    once per matmul (the NaN check that follows them stays where it is)."""
    out: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
    i, n = 0, len(steps)
    while i < n:
        fn, args = steps[i]
        if fn is not matmul or args[4]:
            out.append((fn, args))
            i += 1
            continue
        cell, slot, view, acc, _, accum = args
        members = [i]  # the chain's matmul steps
        j = i + 1
        while j < n:
            fj, aj = steps[j]
            if fj in _WEIGHT_STEPS:
                j += 1
                continue
            if fj is matmul and not aj[4] and aj[5] and _same_tile(aj[3], acc):
                members.append(j)
                j += 1
                continue
            break
        if len(members) == 1:
            out.append((fn, args))
            i += 1
            continue
        last = members[-1]
        for k in range(i, last + 1):
            fk, ak = steps[k]
            if k == i:
                out.append((chain_first, (cell, slot, view, acc, accum)))
            elif fk is matmul:
                out.append((chain_next, (ak[0], ak[1], ak[2], acc if k == last else None)))
            else:
                out.append((fk, ak))
        i = last + 1
    return out


def replay(fr: FunctionalRun, trace: Trace,
           constant_dram: tuple[tuple[int, int], ...] = ()) -> FunctionalRun:
    """Make the trace's calls with fr as the run; returns fr with the trace's counters, loop
    counts and stores, or with the fault an interpreted instruction met. With constant DRAM
    ranges, the calls that convert constants are made once and their results kept."""
    if trace.slots < 0:  # the first replay: a run that is not replayed does not pay for this
        trace.steps, trace.slots = reuse_slots(trace.steps)
    steps = trace.steps
    if constant_dram:
        if trace.kept_steps is None or trace.kept_for != constant_dram:
            trace.kept_steps = keep_constants(trace.steps, fr.sim.spad, fr.dram, constant_dram,
                                              default_budget())
            trace.kept_for, trace.lean_steps = constant_dram, None
        steps = trace.lean_steps or trace.kept_steps
    chained = trace.chained
    if chained is None or chained[0] is not steps:
        chained = trace.chained = (steps, chain_matmuls(steps) if CHAIN_MATMULS else steps)
    fr.slots = [None] * trace.slots
    cell = trace.cell
    cell.run = fr
    try:
        for fn, args in chained[1]:
            fn(*args)
    except _Faulted:
        pass
    finally:
        cell.run = None
    if steps is trace.kept_steps and fr.fault is None:
        # every kept conversion is made now: later replays skip the copies only they read
        trace.lean_steps = drop_dead_copies(steps, fr.sim.spad)
    saturations = fr.c.acc_saturations
    fr.slots, fr.weights = [], None  # the conversions are garbage now
    fr.c = copy.deepcopy(trace.counters)
    fr.c.acc_saturations = saturations
    # after a fault the timing pass stops at it, taking only the counts of the loops before
    fr.steps, fr.loop_counts = trace.steps_run, list(trace.loop_counts)
    fr.stores = list(trace.stores)
    return fr
