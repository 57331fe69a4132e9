"""Simulation modes (infer.target.sim.MODES): the fast mode computes the reference mode's
outputs bit for bit and its cycles and counters exactly; functional mode the same outputs;
timing mode the same cycles and counters. On random programs (sim_programs: compiled-kernel
shapes with every structural choice drawn, and any instruction of the ISA table in random loop
nests, faults included) and on hand-written kernels."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infer.target import kernels
from infer.target.asm import Program
from infer.target.sim import MODES, SimFault, Simulator
from infer.target.sim_core import LAYOUT_FREE
from infer.target.sim_decode import decoded

from helpers.sim_modes import assert_modes_agree, fault_key, run_mode
from helpers.sim_programs import (
    BATCHED_KERNELS, TABLE_WORDS, TILED_PARAMS, random_program, table_words, tiled_kernel)

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(params=st.fixed_dictionaries({k: st.sampled_from(v) for k, v in TILED_PARAMS.items()}),
       seed=st.integers(0, 1000))
def test_tiled_kernels(params, seed):
    prog, dram = tiled_kernel(params, seed)
    assert_modes_agree(prog, dram, again=tiled_kernel(params, seed + 1)[1])


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1))
def test_random_programs(seed):
    prog, dram, regs = random_program(seed)
    assert_modes_agree(prog, dram, regs, again=dram)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1))
def test_random_programs_replayed_with_other_data(seed):
    """Registers that `ld` / `lds` decide (addresses, the loop count), run again on other data
    and another `ld` table: the replay of the first run (sim_replay) interprets what those
    registers decide, so it computes the reference's bits and faults on the new data."""
    prog, dram, regs = random_program(seed, loads=True)
    rng = np.random.default_rng(seed)
    again = dram ^ rng.integers(0, 256, dram.size, dtype=np.uint8)
    again[:again.size // 2].view(np.float32)[::3] = 0.25
    again[-4 * TABLE_WORDS:] = table_words(rng).view(np.uint8)
    assert_modes_agree(prog, dram, regs, again=again, data_registers=True)


def _batched(prog: Program, cfg: str = "edge") -> int:
    """How many loop executions the last fast run batched (plans cached on the program)."""
    return len(decoded(prog, Simulator(cfg).cfg).caches.get("plans", {}))


@pytest.mark.parametrize("params", BATCHED_KERNELS)
def test_batched_paths_are_exercised(params):
    """The compiled-kernel shapes take the batched paths (nested lanes, private copies,
    renamed buffers, reductions), and a second run reuses the cached plans."""
    prog, dram = tiled_kernel(params)
    assert_modes_agree(prog, dram)
    assert _batched(prog) > 0
    first = run_mode(prog, dram, "fast")
    again = run_mode(prog, dram, "fast")
    assert first[1].tobytes() == again[1].tobytes()
    assert first[0].as_dict() == again[0].as_dict()


@pytest.mark.parametrize("cfg", ["edge", "server"])
def test_hand_written_kernels(cfg):
    r = 16 if cfg == "edge" else 128
    for k in (kernels.gemm(cfg, 64, 2 * r, 4 * r, double_buffer=True),
              kernels.gemm(cfg, 32, 4 * r, 2 * r, "bf16", double_buffer=False),
              kernels.gemv(cfg, 2 * r, 2 * r), kernels.softmax(cfg, 64, 128),
              kernels.layernorm(cfg, 64, 128)):
        assert_modes_agree(k.program, k.dram, cfg=cfg)


def test_fault_inside_a_batched_loop_is_the_reference_fault():
    # iteration 5 of 8 reads past the scratchpad: the fast mode reports that instruction
    text = ("li rd=r1, imm=0x3f000\n"
            "loop count=8, body=3\n"
            "  vec.relu dst=0, a=r1+0, rows=1, cols=256, dstride=1024, astride=1024, dt=fp32, at=fp32\n"
            "  addi rd=r1, rs=r1, imm=0x400\n"
            "  nop\n"
            "halt")
    prog = Program.from_asm(text)
    ref, *_ = run_mode(prog, np.zeros(64, np.uint8), "reference")
    fast, *_ = run_mode(prog, np.zeros(64, np.uint8), "fast")
    assert isinstance(ref, SimFault) and ref.kind == "out-of-bounds"
    assert fault_key(fast) == fault_key(ref)


def test_deadlock_before_a_data_fault_is_reported_first():
    prog = Program.from_asm("nop wait=s2\ndma.load dram=0x10000, local=0, n0=4, n1=1, n2=1\nhalt")
    ref, *_ = run_mode(prog, np.zeros(64, np.uint8), "reference")
    fast, *_ = run_mode(prog, np.zeros(64, np.uint8), "fast")
    assert ref.kind == "deadlock" and fault_key(fast) == fault_key(ref)


# a loop whose trip count is read from DRAM: by a runtime-provided table (timing mode can run
# it) or from a word the program itself stores (timing mode refuses: that count is data)
PAGE_LOOP = """
    li rd=r3, imm=0
    {store}
    ld rd=r1, addr=r2+0
    loop count=r1+0, body=3
      dma.load dram=r3+0x100, local=r3+0, n0=16, n1=1, n2=1, signal=s1
      nop wait=s1
      addi rd=r3, rs=r3, imm=16
    halt
"""


def test_timing_mode_runs_loop_counts_from_runtime_tables():
    prog = Program.from_asm(PAGE_LOOP.format(store="nop"))
    dram = np.zeros(1024, np.uint8)
    dram[0:4] = np.frombuffer(np.int32(5).tobytes(), np.uint8)
    ref, *_ = run_mode(prog, dram, "reference", regs={"r2": 0})
    tim, *_ = run_mode(prog, dram, "timing", regs={"r2": 0})
    assert ref.instructions == 3 + 1 + 5 * 3 + 1
    assert (tim.cycles, tim.instructions) == (ref.cycles, ref.instructions)
    assert_modes_agree(prog, dram, regs={"r2": 0})


def test_timing_mode_refuses_loop_counts_the_program_computes():
    prog = Program.from_asm(PAGE_LOOP.format(
        store="dma.store dram=0, local=0x40, n0=4, n1=1, n2=1, signal=s2\nnop wait=s2"))
    tim, *_ = run_mode(prog, np.zeros(1024, np.uint8), "timing", regs={"r2": 0})
    assert isinstance(tim, SimFault) and tim.kind == "data-dependent"
    assert "timing-only mode" in tim.cause and tim.index == 3
    assert_modes_agree(prog, np.zeros(1024, np.uint8), regs={"r2": 0})


# the same loop reading its page table from the scratchpad with `lds` after one DMA of it: the
# trip count and the page numbers are data (the table's copy), so timing-only mode refuses it
LOCAL_PAGE_LOOP = """
    li rd=r3, imm=0
    dma.load dram=r2+0, local=0x800, n0=16, n1=1, n2=1, signal=s2
    nop wait=s2
    lds rd=r1, addr=r0+0x800
    li rd=r5, imm=0x804
    loop count=r1+0, body=6
      lds rd=r4, addr=r5+0
      muli rd=r4, rs=r4, imm=16
      dma.load dram=r4+0x100, local=r3+0, n0=16, n1=1, n2=1, signal=s1
      nop wait=s1
      addi rd=r3, rs=r3, imm=16
      addi rd=r5, rs=r5, imm=4
    dma.store dram=0x300, local=0, n0=48, n1=1, n2=1
    halt
"""


def test_lds_page_loop_agrees_across_modes():
    dram = np.zeros(1024, np.uint8)
    dram[0x40:0x50] = np.frombuffer(np.array([3, 2, 0, 5], np.int32).tobytes(), np.uint8)
    dram[0x100:0x200] = np.arange(256, dtype=np.uint8)
    prog = Program.from_asm(LOCAL_PAGE_LOOP)
    ref, rd, *_ = run_mode(prog, dram, "reference", regs={"r2": 0x40})
    assert not isinstance(ref, SimFault), ref
    assert list(rd[0x300:0x330]) == [*range(32, 48), *range(0, 16), *range(80, 96)]
    assert ref.stalls["scalar_load"] == 4 * Simulator("edge").cfg.scalar.local_load_cycles
    for cfg in ("edge", "server"):  # fast = reference bit for bit and cycle for cycle
        ref, *ref_mem = run_mode(prog, dram, "reference", regs={"r2": 0x40}, cfg=cfg)
        fast, *fast_mem = run_mode(prog, dram, "fast", regs={"r2": 0x40}, cfg=cfg)
        func, *func_mem = run_mode(prog, dram, "functional", regs={"r2": 0x40}, cfg=cfg)
        assert [m.tobytes() for m in fast_mem] == [m.tobytes() for m in ref_mem]
        assert [m.tobytes() for m in func_mem] == [m.tobytes() for m in ref_mem]
        assert fast.as_dict() == ref.as_dict() and fast.events == ref.events
        tim, *_ = run_mode(prog, dram, "timing", regs={"r2": 0x40}, cfg=cfg)
        assert isinstance(tim, SimFault) and tim.kind == "data-dependent" and tim.index == 3
    # a fault of lds (out of the scratchpad) is the same fault in every mode
    bad = Program.from_asm(LOCAL_PAGE_LOOP.replace("li rd=r5, imm=0x804", "li rd=r5, imm=-4"))
    faults = [run_mode(bad, dram, mode, regs={"r2": 0x40})[0]
              for mode in ("reference", "fast", "functional")]
    assert all(isinstance(f, SimFault) and f.kind == "out-of-bounds" for f in faults)
    assert len({fault_key(f) for f in faults}) == 1


def test_modes_and_unknown_mode():
    assert MODES == ("fast", "reference", "functional", "timing")
    with pytest.raises(ValueError, match="unknown simulation mode 'quick'"):
        Simulator("edge").run(Program.from_asm("halt"), np.zeros(4, np.uint8), mode="quick")


# ----------------------------------------------------------------------------- timing extrapolation
def _extrapolated(prog: Program, dram: np.ndarray) -> bool:
    """Whether the fast mode's timing pass skipped loop periods (a repeat record in the log)."""
    c = Simulator("edge").run(prog, dram.copy(), trace=True, mode="timing")
    return any(type(item) is list for item in c.log.items)


# a 64 KiB load (4096 cycles of DRAM time on edge) in flight while a loop runs
IN_FLIGHT = """
    dma.load dram=0, local=0x10000, n0=65536, n1=1, n2=1, signal=s1
    li rd=r1, imm=0
    loop count={count}, body=2
      {body}
      addi rd=r1, rs=r1, imm=0
    nop wait=s1
    halt
"""


def test_loop_beside_a_transfer_in_flight_is_extrapolated():
    """The body never touches the DMA engines: their state (times still in the future) is
    left out of the steady state, so the vector loop repeats while the load runs."""
    prog = Program.from_asm(IN_FLIGHT.format(count=200, body=(
        "vec.relu dst=r1+0x4000, a=r1+0x4000, rows=1, cols=64, dstride=256, astride=256, "
        "dt=fp32, at=fp32")))
    dram = np.random.default_rng(3).integers(0, 256, 1 << 17, dtype=np.uint8)
    assert_modes_agree(prog, dram)
    assert _extrapolated(prog, dram)


def test_loop_repeating_late_is_extrapolated_after_backing_off():
    """Small loads queue behind the big one (DRAM calendar, channels, queue): the state only
    repeats once that completes, long after the first checks; the checks back off and
    still find the period."""
    prog = Program.from_asm(IN_FLIGHT.format(count=400, body=(
        "dma.load dram=r1+0x100, local=r1+0x200, n0=64, n1=1, n2=1")))
    dram = np.zeros(1 << 17, np.uint8)
    assert_modes_agree(prog, dram)
    assert _extrapolated(prog, dram)


def test_semaphore_drain_loop():
    """A body that only consumes tokens (the queue shortens every iteration: no repeat)."""
    prog = Program.from_asm("loop count=300, body=1\n  nop signal=s2\n"
                            "dma.load dram=0, local=0, n0=4096, n1=1, n2=1, signal=s3\n"
                            "loop count=300, body=1\n  nop wait=s2\nnop wait=s3\nhalt")
    assert_modes_agree(prog, np.zeros(8192, np.uint8))


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1))
def test_random_programs_with_long_loops(seed):
    """Random programs whose loops run long enough for the timing pass to look for steady
    states (and back off), with registers that mostly stay put."""
    prog, dram, regs = random_program(seed, length=24, counts=(8, 48), max_depth=2,
                                      strides=(0, 0, 0, 4))
    assert_modes_agree(prog, dram, regs)


def _fp32_emulation_program() -> Program:
    """fp32 emulated as three bf16 passes (x_hi @ w_hi + x_hi @ w_lo + x_lo @ w_hi, what
    compiled fp32 programs do per tile): in a loop over three activation tiles (batched) and
    once more outside any loop."""
    passes = ("  mx.loadw w=r0+0x1000, k=16, n=16, stride=32, dtype=bf16\n"
              "  mx.matmul act={a}+0x0, acc={c}+0x0, m=16, astride=32, cstride=64, dtype=bf16, accum=0\n"
              "  mx.loadw w=r0+0x1200, k=16, n=16, stride=32, dtype=bf16\n"
              "  mx.matmul act={a}+0x0, acc={c}+0x0, m=16, astride=32, cstride=64, dtype=bf16, accum=1\n"
              "  mx.loadw w=r0+0x1000, k=16, n=16, stride=32, dtype=bf16\n"
              "  mx.matmul act={a}+0x200, acc={c}+0x0, m=16, astride=32, cstride=64, dtype=bf16, accum=1\n")
    return Program.from_asm(
        "dma.load dram=r0+0x0, local=r0+0x0, n0=5120, n1=1, n2=1, ds1=0, ds2=0, ls1=0, ls2=0\n"
        "li rd=r1, imm=0\n"
        "li rd=r2, imm=0x2000000\n"
        "loop count=3, body=8\n"
        + passes.format(a="r1", c="r2") +
        "  addi rd=r1, rs=r1, imm=1024\n"
        "  addi rd=r2, rs=r2, imm=1024\n"
        "li rd=r3, imm=0x2000c00\n"
        + passes.format(a="r0", c="r3") +
        "dma.store dram=r0+0x2000, local=r0+0x2000000, n0=4096, n1=1, n2=1, ds1=0, ds2=0, ls1=0, ls2=0\n"
        "halt")


@pytest.mark.parametrize("chained", [True, False])
def test_fp32_emulation_shares_weights_and_nan_checks_exactly(chained, monkeypatch):
    """The fast mode converts a weight tile loaded twice once and makes the NaNs of a tile
    that three matmuls accumulate into the default NaN once (sim_lockstep._share_work, the
    functional engine's flush_nans), and (`chained`) sums the three products in a temporary
    that goes to the accumulator once (sim_lockstep.CHAIN_ACCUMULATIONS); the bits stay the
    reference's, NaN payloads and inf - inf included."""
    from infer.target import sim_lockstep
    from infer.target.sim_dependence import OP_LOADW, OP_MATMUL

    monkeypatch.setattr(sim_lockstep, "CHAIN_ACCUMULATIONS", chained)

    rng = np.random.default_rng(3)
    bits = rng.integers(0, 1 << 16, 2560, dtype=np.uint16)  # any bf16, NaNs included
    bits[rng.integers(0, 2560, 40)] = 0x7F80  # +inf
    bits[rng.integers(0, 2560, 40)] = 0xFF80  # -inf
    bits[rng.integers(0, 2560, 40)] = 0x7FA5  # a signalling NaN with a payload
    dram = np.zeros(0x3000, np.uint8)
    dram[:5120] = bits.view(np.uint8)
    prog = _fp32_emulation_program()
    assert_modes_agree(prog, dram)
    _, out, _, _ = run_mode(prog, dram, "fast")
    result = out[0x2000:0x3000].view(np.uint32)
    assert (result == 0x7FC00000).any() and (np.isnan(result.view(np.float32))
                                            <= (result == 0x7FC00000)).all()
    plans = decoded(prog, Simulator("edge").cfg).caches["plans"]
    (plan,) = plans.values()
    assert [op[4] >= 0 for op in plan.ops if op[0] == OP_LOADW] == [False, False, True]
    assert [op[7] for op in plan.ops if op[0] == OP_MATMUL] == [False, False, True]


def test_bf16_conversion_is_the_ml_dtypes_cast_for_every_bit_pattern():
    """sim_core.converted turns bf16 tiles into C-ordered fp32 (a broadcast lane dimension
    converted once): the bits of ml_dtypes' cast (the reference's) for all 65536 patterns,
    strided and broadcast lanes too."""
    import ml_dtypes

    from infer.target.sim_core import converted

    a = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).reshape(16, 64, 64)
    for v in (a, a[:, 1::2, 3:], a[5], np.broadcast_to(a[7], (3, 64, 64))):
        got = converted(v, np.float32)
        assert got.dtype == np.float32 and got.shape == v.shape
        assert all(got[i].flags.c_contiguous for i in np.ndindex(got.shape[:-2]))
        assert got.view(np.uint32).tobytes() == v.astype(np.float32).view(np.uint32).tobytes()


def test_bf16_store_rounds_like_the_ml_dtypes_cast():
    """sim_core.store_converted rounds fp32 tiles to bf16 into a strided destination: the
    bits of ml_dtypes' cast (the reference's numerics) on random patterns, ties, overflow,
    denormals, infinities and NaNs (which become the default NaN)."""
    import ml_dtypes

    from infer.target.sim_core import store_converted

    rng = np.random.default_rng(11)
    special = np.array([0, 0x80000000, 0x00008000, 0x00018000, 0x3F808000, 0x3F818000,
                        0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F800000, 0xFF800000,
                        0x7FC00000, 0xFFC00001, 0x7F800001, 0x00000001, 0x807FFFFF], np.uint32)
    bits = np.concatenate([special, rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint32)])
    r = bits.view(np.float32).reshape(-1, 16)
    dst = np.zeros((r.shape[0], 32), ml_dtypes.bfloat16)[:, ::2]  # a strided destination
    with np.errstate(all="ignore"):  # as in the simulator: inf and NaN are data
        store_converted(dst, r, 3)
    want = np.where(np.isnan(r), np.array(0x7FC00000, np.uint32).view(np.float32), r)
    assert dst.view(np.uint16).tobytes() == want.astype(ml_dtypes.bfloat16).view(
        np.uint16).tobytes()


def test_nan_test_is_exact():
    """sim_core.may_hold_nan (np.maximum's reduction, which propagates NaNs) is true exactly
    when a float tile holds a NaN: any payload and sign at any position of strided, reversed
    and stacked tiles; infinities of both signs are not NaN; an empty tile holds none."""
    from infer.target.sim_core import may_hold_nan

    rng = np.random.default_rng(12)
    for _ in range(400):
        shape = tuple(int(s) for s in rng.integers(1, 24, rng.integers(1, 4)))
        base = rng.standard_normal(shape[:-1] + (shape[-1] + int(rng.integers(0, 5)),))
        t = base.astype(np.float32)[..., :shape[-1]]
        if rng.random() < 0.5:
            t = t[::-1]
        for inf in (np.inf, -np.inf):
            t[tuple(int(rng.integers(0, s)) for s in shape)] = inf
        assert not may_hold_nan(t)
        nan = np.array(0x7F800001 | int(rng.integers(0, 1 << 22)) | int(rng.integers(0, 2)) << 31,
                       np.uint32).view(np.float32)
        t[tuple(int(rng.integers(0, s)) for s in shape)] = nan
        assert may_hold_nan(t)
        with np.errstate(invalid="ignore"):  # a signalling NaN cast: as in the simulator
            assert may_hold_nan(t.astype(np.float64))
    assert not may_hold_nan(np.zeros((0, 4), np.float32))


def test_timing_kept_per_program_is_copied_per_run():
    """A program run again gets the timing pass's result from the decoded program (sim_fast.
    timing_of): equal to a fresh computation, and each run's counters are its own."""
    k = kernels.gemm("edge", 64, 64, 64, "bf16", double_buffer=True, tm=16)
    first = run_mode(k.program, k.dram, "fast")[0]
    assert decoded(k.program, Simulator("edge").cfg).caches["timing"]
    first.busy[0] += 1
    first.stalls["x"] = 1
    first.profile.count[0] += 1
    first.events.append((0, "x", 0, 0, 0))
    again = run_mode(k.program, k.dram, "fast")[0]
    fresh = run_mode(Program(list(k.program.instrs)), k.dram, "fast")[0]  # decoded anew
    ref = run_mode(k.program, k.dram, "reference")[0]
    for c in (again, fresh):
        assert c.as_dict() == ref.as_dict()
        assert c.profile == ref.profile and c.events == ref.events


# a ping-pong loop (the shape of a transpose): each half loads the next tile into the buffer
# the other half reads, so the first half reads the previous iteration's second load (a
# renamed scratchpad buffer read with a shift); its DRAM store and the second half's load
# touch disjoint DRAM (second=0x4000: the load reads what the store wrote, which must keep
# them in program order: a dependence cycle, not batched)
PING_PONG = """
    li rd=r4, imm=0
    dma.load dram=0, local=0, n0=256, n1=1, n2=1
    loop count=6, body=8
      dma.load dram=r4+0x100, local=0x400, n0=256, n1=1, n2=1
      vec.copy dst=0x800, a=0, rows=16, cols=4, dstride=16, astride=16, dt=fp32, at=fp32
      dma.store dram=r4+0x4000, local=0x800, n0=256, n1=1, n2=1
      dma.load dram=r4+{second}, local=0, n0=256, n1=1, n2=1
      vec.copy dst=0xc00, a=0x400, rows=16, cols=4, dstride=16, astride=16, dt=fp32, at=fp32
      dma.store dram=r4+0x4100, local=0xc00, n0=256, n1=1, n2=1
      addi rd=r4, rs=r4, imm=0x200
      nop
    halt
"""


@pytest.mark.parametrize("second, batched", [("0x200", True), ("0x4000", False)])
def test_ping_pong_loop_orders_only_overlapping_dram_accesses(second, batched):
    prog = Program.from_asm(PING_PONG.format(second=second))
    dram = np.random.default_rng(2).integers(0, 256, 0x6000, dtype=np.uint8)
    assert_modes_agree(prog, dram)
    failed = decoded(prog, Simulator("edge").cfg).caches.get("failed", {})
    assert (2 not in failed) == batched, failed


@pytest.mark.parametrize("op", sorted(LAYOUT_FREE))
@pytest.mark.parametrize("dt", ["fp32", "bf16"])
def test_layout_free_vector_ops_equal_the_copied_operands(op, dt):
    """The ops vector_compute runs on operands in place (VectorSpec.layout_free) give the bits
    of the C-ordered copies, on strided tiles full of NaNs, infinities and subnormals."""
    import dataclasses

    from infer.target.isa import DTYPE_CODE
    from infer.target.sim_core import NP_DTYPES, VectorSpec, vector_compute

    binary = op in ("add", "sub", "mul", "max", "min")
    text = (f"vec.{op} dst=0, a=0, " + ("b=0, bstride=512, bt=fp32, bmode=tile, " if binary else "")
            + f"rows=8, cols=64, dstride=512, astride=512, dt={dt}, at=fp32")
    spec = VectorSpec.of(Program.from_asm(text).instrs[0])
    assert spec.layout_free
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2**32, (3, 8, 128), dtype=np.uint64).astype(np.uint32)
    bits[:, :, ::7] = rng.choice(np.array([0x7F800000, 0xFF800000, 0x7FC00001, 0xFFC12345, 1,
                                           0x80000003, 0], np.uint32), (3, 8, 19))
    x = bits.view(np.float32)
    a, b = x[0, :, ::2], x[1, :, 1::2]  # strided (8, 64) tiles
    out = {}
    for flag in (True, False):
        s = dataclasses.replace(spec, layout_free=flag)
        dst = np.zeros((8, 64), NP_DTYPES[DTYPE_CODE[dt]])
        with np.errstate(all="ignore"):  # as the simulator runs: inf and NaN are data
            vector_compute(s, a, b if binary else None, dst, DTYPE_CODE[dt])
        out[flag] = dst.tobytes()
    assert out[True] == out[False]


# straight-line fp32 emulation steps: the same weight tile is loaded twice; {between} may
# rewrite it (a DMA or a vector op) before the second load, which must then convert it again
TWICE = """
    dma.load dram=0, local=0, n0=2048, n1=1, n2=1
    mx.loadw w=0, k=16, n=16, stride=32, dtype=bf16
    mx.matmul act=0x400, acc=0x2000000, m=16, astride=32, cstride=64, dtype=bf16, accum=0
    mx.loadw w=0x200, k=16, n=16, stride=32, dtype=bf16
    mx.matmul act=0x400, acc=0x2000000, m=16, astride=32, cstride=64, dtype=bf16, accum=1
    {between}
    mx.loadw w=0, k=16, n=16, stride=32, dtype=bf16
    mx.matmul act=0x600, acc=0x2000000, m=16, astride=32, cstride=64, dtype=bf16, accum=1
    dma.store dram=0x1000, local=0x2000000, n0=1024, n1=1, n2=1
    halt
"""


@pytest.mark.parametrize("between", [
    "nop",
    "dma.load dram=0x800, local=0, n0=512, n1=1, n2=1",
    "vec.neg dst=0, a=0, rows=16, cols=16, dstride=32, astride=32, dt=bf16, at=bf16",
])
def test_weights_loaded_twice_instruction_by_instruction(between):
    """The functional engine converts a scratchpad weight tile loaded again with nothing
    written in between once (FunctionalRun.wcache), and again after a write."""
    prog = Program.from_asm(TWICE.format(between=between))
    rng = np.random.default_rng(4)
    dram = np.zeros(0x2000, np.uint8)
    dram[:0x1000] = rng.integers(0x3C00, 0x4000, 0x800, dtype=np.uint16).view(np.uint8)
    assert_modes_agree(prog, dram)
    changed = run_mode(prog, dram, "fast")[1][0x1000:0x2000]
    if between != "nop":
        same = run_mode(Program.from_asm(TWICE.format(between="nop")), dram, "fast")[1]
        assert changed.tobytes() != same[0x1000:0x2000].tobytes()


# a column scatter (the shape of a transpose's inner loop): iteration i writes 4 bytes at
# column i of every row; with a row stride of {dstride} bytes the {count} iterations' columns
# fit in a row (independent) or wrap into the next row (iteration 200 writes where iteration 0
# did: dependent). More lane distances than sim_dependence.MAX_DELTAS to try one by one.
SCATTER = """
    li rd=r1, imm=0
    li rd=r4, imm=0x10000
    loop count={count}, body=3
      vec.copy dst=r1+0, a=r4+0, rows=16, cols=1, dstride={dstride}, astride=4, dt=fp32, at=fp32
      addi rd=r1, rs=r1, imm=4
      addi rd=r4, rs=r4, imm=64
    dma.store dram=0, local=0, n0=20000, n1=1, n2=1
    halt
"""


@pytest.mark.parametrize("dstride, batched", [(1216, True), (800, False)])
def test_column_scatter_with_many_lane_distances(dstride, batched):
    prog = Program.from_asm(SCATTER.format(count=300, dstride=dstride))
    sim = Simulator("edge")
    dram = np.zeros(20000, np.uint8)
    sim.spad[0x10000:0x10000 + 300 * 64] = np.random.default_rng(5).integers(
        0, 256, 300 * 64, dtype=np.uint8)
    assert_modes_agree(prog, dram)
    sim.run(prog, dram, mode="fast")
    failed = decoded(prog, sim.cfg).caches.get("failed", {})
    assert (2 not in failed) == batched, failed


# a 1x1-convolution loop rotated by the compiler (the shape of ResNet-50's on server), in fp32
# emulation: the matmuls read the activation halves (hi at 0, lo at 0x200) the previous
# iteration prefetched into the same buffer (a prologue loads the first), the weight halves are
# reloaded every iteration (a renamed buffer the matmuls read twice: converted once), and the
# epilogue adds a bias row that moves with the iteration. The bias is read-only in the loop,
# so the buffers are renamed (the prefetch feeds the next iteration only). {extra}: nothing, or
# a copy that writes the next iteration's bias row (the moving read then depends on the
# previous iteration: not batched)
ROTATED = """
    li rd=r1, imm=0
    li rd=r4, imm=0
    li rd=r5, imm=0
    dma.load dram=0, local=0, n0=1024, n1=1, n2=1
    dma.load dram=0x2400, local=0x5000, n0=512, n1=1, n2=1
    loop count=6, body={body}
      dma.load dram=0x2000, local=0x4000, n0=1024, n1=1, n2=1
      mx.loadw w=0x4000, k=16, n=16, stride=32, dtype=bf16
      mx.matmul act=0, acc=0x2000000, m=16, astride=32, cstride=64, dtype=bf16, accum=0
      mx.loadw w=0x4200, k=16, n=16, stride=32, dtype=bf16
      mx.matmul act=0, acc=0x2000000, m=16, astride=32, cstride=64, dtype=bf16, accum=1
      mx.loadw w=0x4000, k=16, n=16, stride=32, dtype=bf16
      mx.matmul act=0x200, acc=0x2000000, m=16, astride=32, cstride=64, dtype=bf16, accum=1
      dma.load dram=r1+0x400, local=0, n0=1024, n1=1, n2=1
      vec.add dst=0x6000, a=0x2000000, b=r4+0x5000, rows=16, cols=16, dstride=64, astride=64, bstride=0, dt=fp32, at=fp32, bt=fp32, bmode=row
      {extra}
      dma.store dram=r5+0x3000, local=0x6000, n0=1024, n1=1, n2=1
      addi rd=r1, rs=r1, imm=0x400
      addi rd=r4, rs=r4, imm=64
      addi rd=r5, rs=r5, imm=0x400
    halt
"""


@pytest.mark.parametrize("extra, batched", [
    ("", True),
    ("vec.copy dst=r4+0x5040, a=0x6000, rows=1, cols=16, dstride=64, astride=64, dt=fp32, at=fp32",
     False),
])
def test_rotated_prefetch_with_a_moving_read_only_operand(extra, batched):
    from infer.target.sim_dependence import OP_LOADW

    text = ROTATED.format(body=14 if extra else 13, extra=extra)
    prog = Program.from_asm("\n".join(ln for ln in text.splitlines() if ln.strip()))
    rng = np.random.default_rng(3)
    dram = np.zeros(0x5000, np.uint8)
    dram[:0x2400] = rng.integers(0x3C00, 0x4000, 0x1200, dtype=np.uint16).view(np.uint8)
    dram[0x2400:0x2600] = rng.standard_normal(128).astype(np.float32).view(np.uint8)
    assert_modes_agree(prog, dram)
    dec = decoded(prog, Simulator("edge").cfg)
    loop_pc = next(q for q, ins in enumerate(prog.instrs) if ins.d.name == "loop")
    assert (loop_pc not in dec.caches.get("failed", {})) == batched, dec.caches.get("failed")
    if batched:  # the weight tile read twice from its version array is converted once
        (plan,) = dec.caches["plans"].values()
        assert any(op[0] == OP_LOADW and op[4] >= 0 for op in plan.ops)


# a reduction loop around an inner reduction loop into the same accumulator tile (the K loops
# of ResNet-50's convolutions on edge): renamed across the outer iterations with the inner
# loop unrolled in each. {inner_extra}: nothing, or an in-place vector op on the accumulator
# inside the inner loop (the tile is then no reduction: not batched)
NESTED_REDUCTION = """
    li rd=r2, imm=0x4000
    li rd=r3, imm=0
    vec.mul dst=0x2000000, a=0x2000000, rows=16, cols=16, dstride=64, astride=64, dt=fp32, at=int8, bt=int8, bmode=imm, imm=0.0
    loop count=3, body={outer}
      loop count=2, body={inner}
        mx.loadw w=r2+0, k=16, n=16, stride=32, dtype=bf16
        mx.matmul act=r3+0, acc=0x2000000, m=16, astride=192, cstride=64, dtype=bf16, accum=1
        {inner_extra}
        addi rd=r2, rs=r2, imm=512
        addi rd=r3, rs=r3, imm=32
      mx.loadw w=0x7000, k=16, n=16, stride=32, dtype=bf16
      mx.matmul act=0x8000, acc=0x2000000, m=16, astride=32, cstride=64, dtype=bf16, accum=1
    dma.store dram=0x3000, local=0x2000000, n0=1024, n1=1, n2=1
    halt
"""


@pytest.mark.parametrize("inner_extra, batched", [
    ("", True),
    ("vec.relu dst=0x2000000, a=0x2000000, rows=16, cols=16, dstride=64, astride=64, dt=fp32, at=fp32",
     False),
])
def test_reduction_around_an_inner_reduction(inner_extra, batched):
    inner = 5 if inner_extra else 4
    text = NESTED_REDUCTION.format(outer=inner + 3, inner=inner, inner_extra=inner_extra)
    prog = Program.from_asm("\n".join(ln for ln in text.splitlines() if ln.strip()))
    sim = Simulator("edge")
    rng = np.random.default_rng(6)
    dram = np.zeros(0x4000, np.uint8)
    sim_spad = rng.integers(0x3C00, 0x4000, 0x5000, dtype=np.uint16).view(np.uint8)
    # activations (16 x 96 bf16) at 0, weights (6 tiles) at 0x4000, more at 0x7000 and 0x8000
    setup = Program.from_asm("\n".join([
        "dma.load dram=0, local=0, n0=4096, n1=1, n2=1",
        "dma.load dram=0x1000, local=0x4000, n0=4096, n1=1, n2=1",
        "dma.load dram=0x2000, local=0x7000, n0=4096, n1=1, n2=1",
        "dma.load dram=0x2000, local=0x8000, n0=4096, n1=1, n2=1",
    ]))
    dram[:0x3000] = sim_spad[:0x3000]
    prog = Program(setup.instrs + prog.instrs)
    assert_modes_agree(prog, dram)
    sim.run(prog, dram.copy(), mode="fast")
    dec = decoded(prog, sim.cfg)
    outer_pc = next(q for q, ins in enumerate(prog.instrs) if ins.d.name == "loop")
    assert (outer_pc not in dec.caches.get("failed", {})) == batched, dec.caches.get("failed")


# a loop the functional engine runs one iteration at a time (an `ld` in its body) whose
# instructions run again at the addresses of two iterations before (r1 alternates between two
# buffers, the data changes: the DMA reads a new DRAM block each time), so the second time
# they reuse the operand views the engine kept (FunctionalRun.views); r8 moves one operand by
# {step} bytes per iteration: past the scratchpad in a late iteration when that is big
REUSED_VIEWS = """
    li rd=r1, imm=0
    li rd=r2, imm=0x100
    li rd=r8, imm=0x1000
    li rd=r9, imm=0x800
    loop count=6, body=12
      ld rd=r4, addr=r0+0
      dma.load dram=r2+0, local=r1+0, n0=1024, n1=1, n2=1
      vec.neg dst=r1+0x400, a=r1+0, rows=16, cols=16, dstride=32, astride=32, dt=bf16, at=bf16
      mx.loadw w=r1+0x400, k=16, n=16, stride=32, dtype=bf16
      mx.matmul act=r1+0x200, acc=0x2000000, m=16, astride=32, cstride=64, dtype=bf16, accum=1
      vec.add dst=r1+0x600, a=r1+0x200, b=r8+0, rows=16, cols=16, dstride=32, astride=32, bstride=32, dt=bf16, at=bf16, bt=bf16, bmode=tile
      dma.store dram=r2+0x2000, local=r1+0x600, n0=512, n1=1, n2=1
      dma.store dram=r2+0x4000, local=0x2000000, n0=1024, n1=1, n2=1
      addi rd=r2, rs=r2, imm=0x400
      sub rd=r1, rs=r9, rt=r1
      addi rd=r8, rs=r8, imm={step}
      nop
    halt
"""


@pytest.mark.parametrize("step", [0, 0x10000])
def test_operand_views_kept_across_iterations(step):
    """Instructions run again at the same addresses with new data compute the reference's
    bits; an operand that moves out of the scratchpad faults as in the reference."""
    rng = np.random.default_rng(8)
    dram = np.zeros(0x6000, np.uint8)
    dram[:0x2000] = rng.integers(0x3C00, 0x4000, 0x1000, dtype=np.uint16).view(np.uint8)
    dram[:4] = 0
    prog = Program.from_asm(REUSED_VIEWS.format(step=step))
    assert_modes_agree(prog, dram)
    # the loop ran instruction by instruction (the path that keeps views), not batched
    assert list(decoded(prog, Simulator("edge").cfg).caches["failed"].values()) == [
        "ld in the body"]
    ref = run_mode(prog, dram, "reference")[0]
    assert isinstance(ref, SimFault) == (step > 0)
    if step:
        assert ref.kind == "out-of-bounds" and "operand b" in ref.cause



def test_operand_views_kept_across_runs():
    """A simulator running the same program on the same DRAM buffer again reuses the operand
    views of the last run (Simulator.operand_views): with new data in DRAM and cleared local
    memories every run computes the reference's bits; a run on another DRAM buffer gets views
    of its own, and the buffer of the earlier runs is left alone."""
    rng = np.random.default_rng(9)
    prog = Program.from_asm(REUSED_VIEWS.format(step=0))
    dec = decoded(prog, Simulator("edge").cfg)

    def data() -> np.ndarray:
        d = np.zeros(0x6000, np.uint8)
        d[:0x2000] = rng.integers(0x3C00, 0x4000, 0x1000, dtype=np.uint16).view(np.uint8)
        d[:4] = 0
        return d

    def reference(d: np.ndarray) -> bytes:
        d = d.copy()
        Simulator("edge").run(prog, d, mode="reference")
        return d.tobytes()

    sim = Simulator("edge")
    dram = data()
    views = None
    for _ in range(3):
        dram[:] = data()
        want = reference(dram)
        sim.reset()
        sim.run(prog, dram, mode="fast")
        assert dram.tobytes() == want
        kept = sim.operand_views(dec, dram)
        assert kept and (views is None or kept is views)
        views = kept
    other, before = data(), dram.copy()
    want = reference(other)
    sim.reset()
    sim.run(prog, other, mode="fast")
    assert other.tobytes() == want and dram.tobytes() == before.tobytes()
    assert sim.operand_views(dec, other) is not views


@pytest.mark.parametrize("xs, ws, d", [
    ((3, 5, 4, 28, 16), (3, 5, 4, 16, 16), 2),  # every lane its own weights
    ((5, 4, 28, 16), (16, 16), 1),  # one weight tile for all lanes
    ((3, 1, 28, 16), (3, 4, 16, 16), 1),  # activations broadcast along the reduction
    ((4, 3, 28, 16), (1, 3, 16, 16), 0),  # weights broadcast along it, reduction outermost
])
def test_reduction_product_per_iteration_is_the_stacked_product(xs, ws, d):
    """A reduction chain's products are computed one iteration at a time right before they
    are added (sim_lockstep._iteration): the same bits as that iteration of the whole stacked
    product, broadcast operands included."""
    from infer.target.sim_lockstep import _iteration

    rng = np.random.default_rng(11)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    whole = x @ w
    for j in range(whole.shape[d]):
        at = (slice(None),) * d + (j,)
        assert _iteration((x, w), d, j).tobytes() == whole[at].tobytes()
        assert _iteration(whole, d, j).tobytes() == whole[at].tobytes()


@pytest.mark.parametrize("params", BATCHED_KERNELS)
@pytest.mark.parametrize("per_iteration", [False, True])
def test_reductions_with_products_whole_or_per_iteration(params, per_iteration, monkeypatch):
    """Batched reductions agree with the reference mode whether their products are computed
    as one stack or one iteration at a time (the thresholds choose by size; both forced here)."""
    from infer.target import sim_lockstep

    big = 0 if per_iteration else 1 << 62
    monkeypatch.setattr(sim_lockstep, "ITERATION_PRODUCT_ELEMENTS", big)
    monkeypatch.setattr(sim_lockstep, "WHOLE_PRODUCT_BYTES", big)
    prog, dram = tiled_kernel(params)
    assert_modes_agree(prog, dram)


@pytest.mark.parametrize("chained", [True, False])
def test_replayed_matmul_chains_sum_in_a_temporary_exactly(chained, monkeypatch):
    """A replay sums each chain of float matmuls into one accumulator tile (the three passes of
    fp32 emulation outside any loop) in a temporary written to the tile once
    (sim_replay.chain_matmuls); replayed on new data, NaN payloads and infinities included, every
    run computes the reference's bits."""
    from infer.target import sim_replay

    monkeypatch.setattr(sim_replay, "CHAIN_MATMULS", chained)
    rng = np.random.default_rng(5)
    prog = _fp32_emulation_program()
    dec = decoded(prog, Simulator("edge").cfg)
    sim = Simulator("edge")
    dram = np.zeros(0x3000, np.uint8)
    for _ in range(3):
        bits = rng.integers(0, 1 << 16, 2560, dtype=np.uint16)
        bits[rng.integers(0, 2560, 40)] = 0x7F80
        bits[rng.integers(0, 2560, 40)] = 0xFF80
        bits[rng.integers(0, 2560, 40)] = 0x7FA5
        dram[:] = 0
        dram[:5120] = bits.view(np.uint8)
        want = dram.copy()
        Simulator("edge").run(prog, want, mode="reference")
        sim.reset()
        sim.run(prog, dram, mode="fast")
        assert dram.tobytes() == want.tobytes()
    (trace,) = sim.operand_views(dec, dram)["replay traces"].values()
    firsts = [f for f, _ in trace.chained[1] if f is sim_replay.chain_first]
    assert len(firsts) == (1 if chained else 0)
