"""Instruction-set simulator: functional semantics (numpy) + timing model + counters.

    Simulator(config).run(program, dram, regs={...}, mode="fast") -> Counters

Execution model and timing: docs/isa.md; the simulation modes: docs/simulator.md.

Modes (`MODES`):
- "fast" (default): outputs bit-identical to "reference" and the same cycles and counters,
  computed by two passes over the program: the functional engine (`sim_functional`: data and
  registers; hardware loops whose iterations are independent run as one batched numpy
  operation per instruction over all iterations) and the timing engine (`sim_timing`: the
  timing model without data; a loop iteration that provably repeats the timing state of an
  earlier one is extrapolated instead of replayed). `check_races=True` runs the reference
  engine (the race checker needs every instruction's time window and addresses together).
- "reference": every instruction executed one at a time, data and timing together
  (`sim_reference`), the definition the other modes are tested against.
- "functional": outputs only (the functional engine); `cycles` and the timing counters are 0.
- "timing": cycles and counters only, no data (the timing engine; DRAM, scratchpad and
  accumulator are not touched, `acc_saturations` is not counted, addresses are not checked).
  Timing never depends on data except through hardware loop counts read from registers;
  a program whose loop counts derive from `ld` of DRAM the program itself writes is refused.

Functional results are computed in program order, which equals any schedule the
synchronisation allows (properly synchronised programs are race-free). A missing semaphore
therefore never shows up as a wrong number; `run(..., check_races=True)` finds it (see
sim_reference).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from infer.target import isa
from infer.target.asm import Program
from infer.target.blas import one_blas_thread
from infer.target.heap import SIMULATOR, keep_buffers_in_heap
from infer.target.hw import HardwareConfig, load_config
from infer.target.sim_access import RACE_SPACES, overlap
from infer.target.sim_core import (
    E_LOAD, E_MATRIX, E_SCALAR, E_STORE, E_VECTOR, ENGINES, NP_DTYPES, VECTOR_FUNCTIONS, Counters,
    SimFault, store_converted)
from infer.target.sim_lanes import default_threads
from infer.target.sim_memo import DequantMemo, default_budget
from infer.target.sim_reference import ReferenceRun

__all__ = ["ENGINES", "E_LOAD", "E_MATRIX", "E_SCALAR", "E_STORE", "E_VECTOR", "MODES",
           "NP_DTYPES", "RACE_SPACES", "VECTOR_FUNCTIONS", "Counters", "SimFault", "Simulator",
           "store_converted"]

#: simulation modes of Simulator.run, fastest useful first (see the module docstring)
MODES = ("fast", "reference", "functional", "timing")

_overlap = overlap  # the race checker's overlap helper, as the tests know it


class Simulator:
    """`Simulator(config).run(program, dram, regs={...}) -> Counters`.

    The scratchpad and accumulator persist across runs (like the hardware); `reset()` clears
    them. `dram` is a writable 1-D uint8 numpy array or a bytearray, updated in place.
    A simulator running the same program on the same DRAM buffer again (the runtime keeps
    both per artifact) reuses the functional engine's operand views (`operand_views`), and
    any program it runs reuses the results of `vec.dequant`s whose operands are byte for byte
    those of an earlier one (`dequant_memo`, sim_memo).
    """

    def __init__(self, config: HardwareConfig | str = "edge", threads: int | None = None,
                 memo_budget: int | None = None):
        self.cfg = load_config(config)
        #: threads the functional engine may use for big batched operations (None: the cores
        #: this process may run on; 1: serial). Results do not depend on it (sim_lanes).
        self.threads = default_threads() if threads is None else max(1, int(threads))
        m = self.cfg.memory
        self.spad = np.zeros(m.scratchpad_bytes, np.uint8)
        self.acc = np.zeros(m.accumulator_bytes, np.uint8)
        self._views: tuple[Any, np.ndarray, dict[Any, Any]] | None = None
        #: `vec.dequant` results the functional engine keeps from run to run (sim_memo; bytes:
        #: None reads INFER_SIM_MEMO_MB)
        self.dequant_memo = DequantMemo(default_budget() if memo_budget is None else memo_budget)

    def reset(self) -> None:
        self.spad[:] = 0
        self.acc[:] = 0

    @classmethod
    def reuse(cls, sim: Simulator | None, config: HardwareConfig | str) -> Simulator:
        """`sim` with its local memories cleared, as a new simulator's are, when it runs on the
        threads a new one would (INFER_SIM_THREADS); else a new Simulator(config). What a
        simulator keeps from run to run (operand views, `dequant_memo`) then serves the next
        run: the runtime's Executable and DeviceSession hand each run the last one's. A
        different config (a what-if, `hw.unlimited`) gets a new simulator."""
        if (sim is None or sim.threads != default_threads()
                or (config is not sim.cfg and load_config(config) != sim.cfg)):
            return cls(config)
        sim.reset()
        return sim

    def operand_views(self, dec: Any, dram: np.ndarray) -> dict[Any, Any]:
        """The functional engine's operand views of a decoded program (`FunctionalRun.views`:
        numpy views of this simulator's local memories and of `dram`, each made once its
        bounds and alignment checks passed), kept from run to run while the program and the
        DRAM buffer stay the same objects: the views would be made again identically (the
        memories are the same arrays; `reset` clears them in place)."""
        kept = self._views
        if kept is None or kept[0] is not dec or kept[1] is not dram:
            kept = self._views = (dec, dram, {})
        return kept[2]

    def run(self, program: Program | bytes | str, dram: np.ndarray | bytearray | None = None,
            regs: dict[str | int, int] | None = None, trace: bool = False, *,
            check_races: bool = False,
            on_pc: Mapping[int, Callable[[int, np.ndarray], None]] | None = None,
            mode: str = "fast", constant_dram: Sequence[tuple[int, int]] = ()) -> Counters:
        """Run `program` on `dram` (updated in place). `trace=True` records the engine
        timelines (`Counters.events`, expanded when first read) and the per-instruction
        profile the per-op report uses; `check_races=True` faults (kind "race") on an
        unsynchronised conflicting access between two engines (see sim_reference).
        `mode` is one of MODES (see the module docstring).

        `on_pc={pc: callback}` calls `callback(pc, dram)` when the front end first reaches
        instruction `pc` outside every loop (loop depth 0), before dispatching it; `pc` =
        len(program) fires when the program ends. Functional results are computed in program
        order at dispatch, so the callback sees the memory effects of every earlier
        instruction and none of later ones (e.g. a kernel's output right after its last
        instruction, before the memory plan reuses the bytes). The callback may read or
        modify `dram`. No cost when not given; not called in timing mode (no data).

        `constant_dram`: byte ranges [lo, hi) of `dram` that the caller keeps the same in
        every run on this buffer (the runtime passes its weight region). A later run of the
        program replays the first one's operations (sim_replay) and keeps what it converted
        from those bytes instead of converting it again (sim_constants). Bytes that change
        while declared constant give wrong results."""
        if mode not in MODES:
            raise ValueError(f"unknown simulation mode {mode!r} (modes: {', '.join(MODES)})")
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
        if on_pc:
            n = len(program.instrs)
            for pc in on_pc:
                if not isinstance(pc, int) or not 0 <= pc <= n:
                    raise ValueError(f"on_pc: instruction index {pc!r} outside the program "
                                     f"(0..{n})")
        from infer.target.sim_fast import run_fast

        # batched operations allocate and free buffers of up to tens of MB per operation: from
        # the heap, not fresh mappings faulted in every time (target/heap.py)
        keep_buffers_in_heap(SIMULATOR)
        # one BLAS thread: the products' bits depend on the thread count (target/blas.py)
        with one_blas_thread(), np.errstate(all="ignore"):  # inf and NaN are data
            if mode == "reference" or (mode == "fast" and check_races):
                c = ReferenceRun(self, program, dram, regs or {}, trace, check_races).execute(on_pc)
                c.mode = "reference"
            else:
                c = run_fast(self, program, dram, regs or {}, trace=trace, on_pc=on_pc,
                             mode=mode, constant_dram=tuple((int(lo), int(hi))
                                                            for lo, hi in constant_dram))
                c.mode = mode
        return c
