"""The simulation modes agree: fast mode's outputs are the reference mode's bits and its
cycles, counters and per-instruction profile are the same; functional mode's outputs too;
timing mode's cycles and counters too. On a compiled model (`assert_sim_modes_agree`, used by
the e2e tests after their reference run) and on a bare program (`assert_modes_agree`)."""

from __future__ import annotations

import numpy as np

from infer.target.asm import Program
from infer.target.sim import SimFault, Simulator


def assert_sim_modes_agree(exe, inputs, ref_outputs: list[np.ndarray]) -> None:
    """`exe.last_report` must come from a reference-engine run (check_races=True or
    mode="reference") on `inputs` that produced `ref_outputs`."""
    ref = exe.last_report.counters
    assert ref.mode == "reference"
    # the second run replays the first (sim_replay) and converts the weights it keeps
    # (the runtime declares its weight region constant: sim_constants); the third uses them
    for _ in range(3):
        fast_outputs = exe.run(inputs, mode="fast")
        fast = exe.last_report.counters
        assert [y.tobytes() for y in fast_outputs] == [y.tobytes() for y in ref_outputs]
        assert fast.as_dict() == ref.as_dict()
        assert fast.profile == ref.profile
    functional_outputs = exe.run(inputs, mode="functional", trace=False)
    assert [y.tobytes() for y in functional_outputs] == [y.tobytes() for y in ref_outputs]
    assert exe.run(inputs, mode="timing") == []
    want = ref.as_dict()
    want["acc_saturations"] = 0  # data: timing mode computes none
    assert exe.last_report.counters.as_dict() == want


def run_mode(prog: Program, dram: np.ndarray, mode: str, regs=None, trace: bool = True,
             cfg: str = "edge", spad_seed: int = 7):
    """(outcome, DRAM, scratchpad, accumulator): outcome is the Counters or the SimFault."""
    sim = Simulator(cfg)
    d = dram.copy()
    return _run(sim, prog, d, mode, regs, trace, spad_seed)


def run_again(prog: Program, dram: np.ndarray, again: np.ndarray, mode: str, regs=None,
              cfg: str = "edge", spad_seed: int = 7):
    """run_mode's result for DRAM `again`, run by a simulator that has just run prog on
    `dram` in the same DRAM buffer: the second run replays the first (sim_replay)."""
    sim = Simulator(cfg)
    d = dram.copy()
    _run(sim, prog, d, mode, regs, True, spad_seed)
    d[:] = again
    return _run(sim, prog, d, mode, regs, True, spad_seed)


def _run(sim: Simulator, prog: Program, d: np.ndarray, mode: str, regs, trace: bool,
         spad_seed: int):
    sim.reset()
    rng = np.random.default_rng(spad_seed)  # the same stale local memory for every mode
    sim.spad[:4096] = rng.integers(0, 256, 4096, dtype=np.uint8)
    sim.acc[:4096] = rng.integers(0, 256, 4096, dtype=np.uint8)
    try:
        out = sim.run(prog, d, regs=regs, trace=trace, mode=mode)
    except SimFault as e:
        out = e
    return out, d, sim.spad.copy(), sim.acc.copy()


def fault_key(e: SimFault) -> tuple:
    return (e.index, e.kind, e.cause)


def assert_modes_agree(prog: Program, dram: np.ndarray, regs=None, cfg: str = "edge",
                       again: np.ndarray | None = None, data_registers: bool = False) -> None:
    """The modes agree on prog; with `again`, so do the fast and functional modes run on DRAM
    `again` right after a run on `dram` (replays of that run, sim_replay) and the reference
    mode run on `again`. `data_registers`: prog `lds` registers from local memory or `ld`s
    them from DRAM it wrote, which timing-only mode refuses (their values are data)."""
    ref, rd, rs, ra = run_mode(prog, dram, "reference", regs, cfg=cfg)
    assert_fast_agrees(ref, run_mode(prog, dram, "fast", regs, cfg=cfg), rd, rs, ra)
    if again is not None:
        ref2, *mem2 = run_mode(prog, again, "reference", regs, cfg=cfg)
        assert_fast_agrees(ref2, run_again(prog, dram, again, "fast", regs, cfg=cfg), *mem2)
        func, *func_mem = run_again(prog, dram, again, "functional", regs, cfg=cfg)
        if not isinstance(ref2, SimFault):
            assert [m.tobytes() for m in func_mem] == [m.tobytes() for m in mem2]
            assert (func.instructions, func.macs, func.acc_saturations) == (
                ref2.instructions, ref2.macs, ref2.acc_saturations)
        elif ref2.kind != "deadlock":
            assert isinstance(func, SimFault) and fault_key(func) == fault_key(ref2)
    func, ud, us, ua = run_mode(prog, dram, "functional", regs, cfg=cfg)
    if not isinstance(ref, SimFault):
        assert not isinstance(func, SimFault), func
        assert (ud.tobytes(), us.tobytes(), ua.tobytes()) == (rd.tobytes(), rs.tobytes(),
                                                              ra.tobytes())
        assert (func.cycles, func.instructions, func.macs, func.acc_saturations) == (
            0, ref.instructions, ref.macs, ref.acc_saturations)
    elif ref.kind != "deadlock":  # functional mode has no semaphores to deadlock on
        assert isinstance(func, SimFault) and fault_key(func) == fault_key(ref)
    tim, td, ts, ta = run_mode(prog, dram, "timing", regs, cfg=cfg)
    assert td.tobytes() == dram.tobytes()  # no data touched
    if data_registers and isinstance(tim, SimFault) and tim.kind == "data-dependent":
        pass
    elif not isinstance(ref, SimFault):
        assert not isinstance(tim, SimFault), tim
        want = ref.as_dict()
        want["acc_saturations"] = 0  # data: not computed in timing mode
        assert tim.as_dict() == want
        assert tim.profile == ref.profile and tim.events == ref.events
    elif ref.kind == "deadlock":
        assert isinstance(tim, SimFault) and fault_key(tim) == fault_key(ref)


def assert_fast_agrees(ref, fast_run, rd: np.ndarray, rs: np.ndarray, ra: np.ndarray) -> None:
    """A fast-mode run_mode result against the reference's outcome and memories."""
    fast, fd, fs, fa = fast_run
    if isinstance(ref, SimFault):
        assert isinstance(fast, SimFault), f"reference faulted ({ref}), fast did not"
        assert fault_key(fast) == fault_key(ref)
    else:
        assert not isinstance(fast, SimFault), f"fast faulted: {fast}"
        assert fd.tobytes() == rd.tobytes() and fs.tobytes() == rs.tobytes()
        assert fa.tobytes() == ra.tobytes()
        assert fast.as_dict() == ref.as_dict()
        assert fast.profile == ref.profile and fast.events == ref.events
