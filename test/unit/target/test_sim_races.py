"""The simulator's race checker (`Simulator.run(..., check_races=True)`): a missing semaphore
between engines (or between an engine and the front end's `ld`) faults as kind "race" naming
both instructions, the space and the overlapping bytes; synchronised programs run unchanged."""

import re

import numpy as np
import pytest

from infer.target import isa
from infer.target.asm import Program
from infer.target.sim import SimFault, Simulator, _overlap

ACC = isa.ACC_BASE


def dram_in() -> np.ndarray:
    d = np.zeros(4096, np.uint8)
    d[:256] = np.frombuffer(np.linspace(-4, 4, 64, dtype=np.float32).tobytes(), np.uint8)
    return d


def run(text: str, check: bool = True, dram=None):
    sim = Simulator("edge")
    d = dram_in() if dram is None else dram
    c = sim.run(Program.from_asm(text), d, check_races=check)
    return sim, d, c


def race(text: str, dram=None) -> SimFault:
    with pytest.raises(SimFault) as e:
        run(text, dram=dram)
    assert e.value.kind == "race", str(e.value)
    assert "\n" not in str(e.value)
    return e.value


def pcs(f: SimFault) -> list[int]:
    return [int(p) for p in re.findall(r"pc (\d+) ", f.cause)]


# load a[0:16] f32 into spad 0, relu it into spad 0x100, store it to DRAM 0x400
RAW = """
dma.load dram=0, local=0, n0=64, n1=1, n2=1{sig}
vec.relu dst=0x100, a=0, rows=1, cols=16, dt=fp32, at=fp32{wait}
dma.store dram=0x400, local=0x100, n0=64, n1=1, n2=1{wait2}
halt
"""
RAW_RACY = RAW.format(sig="", wait=", signal=s2", wait2=", wait=s2")
RAW_SYNCED = RAW.format(sig=", signal=s1", wait=", wait=s1, signal=s2", wait2=", wait=s2")


def test_read_after_write_race_names_both_instructions():
    f = race(RAW_RACY)
    assert f.index == 1 and f.text.startswith("vec.relu")
    assert pcs(f) == [1, 0, 0, 1]
    assert "scratchpad [0x0, 0x40)" in f.cause
    assert "pc 1 vec.relu (vector, cycles [" in f.cause and "reads it" in f.cause
    assert "pc 0 dma.load (dma_load, cycles [" in f.cause and "writes it" in f.cause
    assert str(f).startswith("fault [race] at instruction 1 (vec.relu")


def test_synchronised_program_has_no_race_and_identical_results():
    sim_on, d_on, c_on = run(RAW_SYNCED, check=True)
    sim_off, d_off, c_off = run(RAW_SYNCED, check=False)
    want = np.maximum(np.linspace(-4, 4, 64, dtype=np.float32)[:16], 0)
    np.testing.assert_array_equal(d_on[0x400:0x440].view(np.float32), want)
    assert d_on.tobytes() == d_off.tobytes()
    assert sim_on.spad.tobytes() == sim_off.spad.tobytes()
    assert c_on.as_dict() == c_off.as_dict()


def test_check_off_runs_the_racy_program_as_before():
    sim_a, d_a, c_a = run(RAW_RACY, check=False)
    sim_b = Simulator("edge")
    d_b = dram_in()
    c_b = sim_b.run(Program.from_asm(RAW_RACY), d_b)  # default: no checking
    # functional results are computed in program order, so even the racy program gives them
    want = np.maximum(np.linspace(-4, 4, 64, dtype=np.float32)[:16], 0)
    np.testing.assert_array_equal(d_a[0x400:0x440].view(np.float32), want)
    assert d_a.tobytes() == d_b.tobytes() and sim_a.spad.tobytes() == sim_b.spad.tobytes()
    assert c_a.as_dict() == c_b.as_dict()
    # the unsynchronised vector op started before its data arrived: the racy schedule is shorter
    assert c_a.cycles < run(RAW_SYNCED, check=False)[2].cycles


def test_write_after_read_race():
    # the vector op reads spad 0 while a later DMA load overwrites it
    text = """
    dma.load dram=0, local=0, n0=256, n1=1, n2=1, signal=s1
    vec.relu dst=0x400, a=0, rows=4, cols=16, dstride=64, astride=64, dt=fp32, at=fp32, wait=s1{sig}
    dma.load dram=0x100, local=0x40, n0=64, n1=1, n2=1{wait}
    halt
    """
    f = race(text.format(sig="", wait=""))
    assert f.index == 2 and pcs(f)[:2] == [2, 1]
    assert "scratchpad [0x40, 0x80)" in f.cause
    assert "pc 2 dma.load (dma_load" in f.cause and "writes it" in f.cause
    assert "pc 1 vec.relu (vector" in f.cause and "reads it" in f.cause
    run(text.format(sig=", signal=s2", wait=", wait=s2"))


def test_write_after_write_race_in_the_accumulator():
    text = """
    dma.load dram=0, local=0, n0=512, n1=1, n2=1, signal=s1
    mx.loadw w=0, k=16, n=16, stride=32, dtype=bf16, wait=s1
    mx.matmul act=0, acc=0x2000000, m=8, astride=32, cstride=64, dtype=bf16, accum=0{sig}
    vec.mul dst=0x2000040, a=0x2000, rows=1, cols=16, dt=fp32, at=fp32, bmode=imm, imm=2.0{wait}
    halt
    """
    zeros = np.zeros(4096, np.uint8)
    f = race(text.format(sig="", wait=""), dram=zeros)
    assert f.index == 3 and pcs(f)[:2] == [3, 2]
    assert f"accumulator [{ACC + 0x40:#x}, {ACC + 0x80:#x})" in f.cause
    assert "pc 2 mx.matmul (matrix" in f.cause
    run(text.format(sig=", signal=s2", wait=", wait=s2"), dram=zeros)


def test_dram_race_between_store_and_front_end_ld():
    text = """
    li rd=r1, imm=7
    dma.store dram=0x800, local=0, n0=64, n1=1, n2=1{sig}
    ld rd=r2, addr=r0+0x820{wait}
    halt
    """
    f = race(text.format(sig="", wait=""))
    assert f.index == 2 and "dram [0x820, 0x824)" in f.cause
    assert "pc 2 ld (scalar" in f.cause and "pc 1 dma.store (dma_store" in f.cause
    run(text.format(sig=", signal=s1", wait=", wait=s1"))


def test_scratchpad_race_between_engine_write_and_front_end_lds():
    """`lds` reads the scratchpad on the front end: an engine's write of those bytes must be
    ordered before it (here a DMA load still in flight), like `ld`'s DRAM words."""
    text = """
    dma.load dram=0, local=0x100, n0=64, n1=1, n2=1{sig}
    lds rd=r2, addr=r0+0x120{wait}
    halt
    """
    f = race(text.format(sig="", wait=""))
    assert f.index == 1 and "scratchpad [0x120, 0x124)" in f.cause
    assert "pc 1 lds (scalar" in f.cause and "pc 0 dma.load (dma_load" in f.cause
    run(text.format(sig=", signal=s1", wait=", wait=s1"))


def test_dram_race_between_store_and_load_engines():
    text = """
    dma.store dram=0x800, local=0, n0=64, n1=4, n2=1, ds1=128, ls1=64{sig}
    dma.load dram=0x880, local=0x1000, n0=32, n1=1, n2=1{wait}
    halt
    """
    f = race(text.format(sig="", wait=""))
    assert "dram [0x880, 0x8a0)" in f.cause and pcs(f)[:2] == [1, 0]
    run(text.format(sig=", signal=s1", wait=", wait=s1"))


def test_strided_accesses_are_exact_rows():
    # the store writes DRAM rows [0x800 + 128i, +64) from spad rows [128i, +64); the load reads
    # the DRAM gaps in between and the vector op writes the spad gaps: no race
    run("""
    dma.store dram=0x800, local=0, n0=64, n1=4, n2=1, ds1=128, ls1=128
    dma.load dram=0x840, local=0x1000, n0=64, n1=4, n2=1, ds1=128, ls1=64
    vec.relu dst=0x40, a=0x2000, rows=4, cols=16, dstride=128, astride=64, dt=fp32, at=fp32
    halt
    """)
    # ... but a vector op writing spad rows [0x20 + 128i, +32) overlaps the store's source
    f = race("""
    dma.store dram=0x800, local=0, n0=64, n1=4, n2=1, ds1=128, ls1=128
    vec.relu dst=0x20, a=0x2000, rows=2, cols=8, dstride=128, astride=64, dt=fp32, at=fp32
    halt
    """)
    assert "scratchpad [0x20, 0x40)" in f.cause and pcs(f)[:2] == [1, 0]
    # and one writing [0x60 + 128i, +32) overlaps row 1 of the source only
    f = race("""
    dma.store dram=0x800, local=0, n0=64, n1=4, n2=1, ds1=128, ls1=128
    vec.relu dst=0x60, a=0x2000, rows=2, cols=8, dstride=32, astride=64, dt=fp32, at=fp32
    halt
    """)
    assert "scratchpad [0x80, 0x80)" not in f.cause and "scratchpad [0x80, 0xa0)" in f.cause


def test_same_engine_and_read_read_pairs_never_race():
    run("""
    dma.load dram=0, local=0, n0=256, n1=1, n2=1
    dma.load dram=0x100, local=0, n0=256, n1=1, n2=1
    vec.relu dst=0x400, a=0x800, rows=1, cols=16, dt=fp32, at=fp32
    vec.relu dst=0x400, a=0x800, rows=1, cols=16, dt=fp32, at=fp32
    mx.loadw w=0x800, k=16, n=16, stride=32, dtype=bf16
    halt
    """)


def test_fence_and_halt_order_everything():
    run("""
    dma.load dram=0, local=0, n0=64, n1=1, n2=1
    fence
    vec.relu dst=0x100, a=0, rows=1, cols=16, dt=fp32, at=fp32
    halt
    """)


def test_overlap_helper():
    contig = (1, True, 0x100, 0x200, 1, 0x100, 0)
    rows = (1, False, 0x80, 0x80 + 3 * 0x100 + 0x40, 4, 0x40, 0x100)  # [0x80+256i, +64)
    assert _overlap(contig, rows) == (0x180, 0x1c0)
    assert _overlap(rows, contig) == (0x180, 0x1c0)
    gaps = (1, False, 0xc0, 0xc0 + 3 * 0x100 + 0x40, 4, 0x40, 0x100)
    assert _overlap(rows, gaps) is None
    odd = (1, False, 0x0, 0x0 + 9 * 0x60 + 0x20, 10, 0x20, 0x60)  # [96i, 96i+32)
    # rows [0x80+256i, +64) vs [96i, +32): first common byte at 0x180 (i=4: [0x180, 0x1a0))
    assert _overlap(rows, odd) == (0x180, 0x1a0)
    assert _overlap(odd, rows) == (0x180, 0x1a0)


def test_race_checker_handles_100k_dynamic_instructions():
    # double-buffered stream: load tile -> relu -> store, 25k iterations of 4 engine instrs; the
    # checker's counters equal an unchecked run's (no timing assertion: a wall-clock bound
    # failed at load 10 on 2 cores; the checker runs on the reference engine, whose speed
    # bench/bench_simulator.py measures)
    text = """
    nop signal=s3
    nop signal=s4
    loop count=r0+12500, body=8
    dma.load dram=0, local=0, n0=64, n1=1, n2=1, wait=s3, signal=s1
    vec.relu dst=0x1000, a=0, rows=1, cols=16, dt=fp32, at=fp32, wait=s1, signal=s3, signal2=s5
    dma.store dram=0x400, local=0x1000, n0=64, n1=1, n2=1, wait=s5, signal=s6
    nop wait=s6
    dma.load dram=0x100, local=0x100, n0=64, n1=1, n2=1, wait=s4, signal=s2
    vec.relu dst=0x1100, a=0x100, rows=1, cols=16, dt=fp32, at=fp32, wait=s2, signal=s4, signal2=s7
    dma.store dram=0x500, local=0x1100, n0=64, n1=1, n2=1, wait=s7, signal=s8
    nop wait=s8
    halt
    """
    prog = Program.from_asm(text)
    c = Simulator("edge").run(prog, dram_in(), check_races=True)
    assert c.instructions > 100_000
    c2 = Simulator("edge").run(prog, dram_in())
    assert c.as_dict() == c2.as_dict()
