"""Replays of the functional engine (target/sim_replay.py): a program run again on the same
simulator and DRAM buffer makes the recorded run's numpy calls again instead of interpreting
it, and still computes the reference engine's bits, counters and faults on new data, with the
instructions whose registers data decides (an embedding gather's token ids) interpreted."""

from __future__ import annotations

import numpy as np
import pytest

from infer.target import sim_replay
from infer.target.asm import Program
from infer.target.sim import SimFault, Simulator
from infer.target.sim_decode import decoded

from helpers.sim_modes import assert_modes_agree, fault_key

# four token ids (int32, DRAM 0x0) gather rows of 16 int8 from a table at 0x100 (lds, then a
# DMA whose address the id decides); an int8 matmul of the gathered [4, 16] by 16x16 weights
# accumulates into int32 partial sums loaded from DRAM 0x500 (saturating when they are near
# the int32 limits); the sums scaled to fp32 are stored
GATHER = """
    dma.load dram=0x0, local=0x0, n0=16, n1=1, n2=1, signal=s1
    nop wait=s1
    li rd=r2, imm=0
    li rd=r3, imm=0x100
    loop count=4, body=6
      lds rd=r1, addr=r2+0
      muli rd=r1, rs=r1, imm=16
      dma.load dram=r1+0x100, local=r3+0, n0=16, n1=1, n2=1, signal=s1
      nop wait=s1
      addi rd=r2, rs=r2, imm=4
      addi rd=r3, rs=r3, imm=16
    li rd=r1, imm=0
    dma.load dram=0x400, local=0x200, n0=256, n1=1, n2=1, signal=s2
    dma.load dram=0x500, local=0x2000000, n0=256, n1=1, n2=1, signal=s3
    nop wait=s2
    nop wait=s3
    mx.loadw w=0x200, k=16, n=16, stride=16, dtype=int8
    mx.matmul act=0x100, acc=0x2000000, m=4, astride=16, cstride=64, dtype=int8, accum=1
    mx.matmul act=0x100, acc=0x2000000, m=4, astride=16, cstride=64, dtype=int8, accum=1
    vec.mul dst=0x300, a=0x2000000, rows=4, cols=16, dstride=64, astride=64, dt=fp32, at=int32, bmode=imm, imm=0.5
    dma.store dram=0x800, local=0x300, n0=256, n1=1, n2=1
    halt
"""


def gather_dram(ids, scale: int, seed: int = 0, partial: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dram = np.zeros(0x1000, np.uint8)
    dram[:16] = np.array(ids, np.int32).view(np.uint8)
    dram[0x100:0x400] = rng.integers(-scale, scale + 1, 0x300).astype(np.int8).view(np.uint8)
    dram[0x400:0x500] = rng.integers(-scale, scale + 1, 0x100).astype(np.int8).view(np.uint8)
    dram[0x500:0x600] = np.full(64, partial, np.int32).view(np.uint8)
    return dram


def runs(prog: Program, drams: list[np.ndarray], cfg: str = "edge") -> list:
    """(Counters or SimFault, DRAM bytes) of fast runs of prog on one simulator and one DRAM
    buffer holding each image in turn."""
    sim, buf = Simulator(cfg), np.zeros_like(drams[0])
    out = []
    for image in drams:
        sim.reset()
        buf[:] = image
        try:
            c = sim.run(prog, buf, mode="fast")
        except SimFault as e:
            c = e
        out.append((c, buf.tobytes()))
    return out


def reference(prog: Program, image: np.ndarray, cfg: str = "edge"):
    d = image.copy()
    try:
        c = Simulator(cfg).run(prog, d, mode="reference")
    except SimFault as e:
        c = e
    return c, d.tobytes()


def traces(sim: Simulator, prog: Program, dram: np.ndarray) -> dict:
    return sim.operand_views(decoded(prog, sim.cfg), dram).get("replay traces", {})


def test_gather_replays_with_other_ids_saturations_and_faults(monkeypatch):
    prog = Program.from_asm(GATHER)
    replayed = []
    monkeypatch.setattr(sim_replay, "replay", lambda fr, t, *rest, f=sim_replay.replay:
                        replayed.append(t) or f(fr, t, *rest))
    images = [gather_dram([0, 1, 2, 3], 2),
              gather_dram([47, 5, 5, 0], 127, seed=1, partial=2**31 - 9),
              gather_dram([3, 2, 1, 300], 2), gather_dram([9, 8, 7, 6], 3, seed=2)]
    got = runs(prog, images)
    assert len(replayed) == 3  # every run after the first
    for image, (c, mem) in zip(images, got, strict=True):
        ref, ref_mem = reference(prog, image)
        if isinstance(ref, SimFault):  # id 300: the gathered row is past the end of DRAM
            assert isinstance(c, SimFault) and fault_key(c) == fault_key(ref)
            assert ref.kind == "out-of-bounds" and ref.index == 7
            continue
        assert mem == ref_mem
        assert c.as_dict() == ref.as_dict()
    assert got[1][0].acc_saturations > 0 and got[0][0].acc_saturations == 0
    for image in images:
        assert_modes_agree(prog, images[0], again=image)


def test_a_trace_is_kept_per_program_buffer_and_registers():
    prog = Program.from_asm(GATHER)
    sim, dram = Simulator("edge"), gather_dram([0, 1, 2, 3], 2)
    sim.run(prog, dram)
    (trace,) = traces(sim, prog, dram).values()
    # the interpreted instructions: four lds and the four DMAs and muli they decide
    interpreted = [args[1] for fn, args in trace.steps if fn is sim_replay.interpret]
    assert interpreted == [5, 6, 7] * 4
    sim.run(prog, dram, regs={"r9": 1})
    assert len(traces(sim, prog, dram)) == 2


@pytest.mark.parametrize("edits", [
    # a trip count data decides (the fourth id)
    [("loop count=4, body=6", "lds rd=r5, addr=r0+12\n    loop count=r5+0, body=6")],
    # a store address data decides (the last id)
    [("li rd=r1, imm=0\n", ""), ("dma.store dram=0x800,", "dma.store dram=r1+0x800,")],
])
def test_runs_whose_control_data_decides_are_not_recorded(edits):
    src = GATHER
    for old, new in edits:
        src = src.replace(old, new)
    prog = Program.from_asm(src)
    images = [gather_dram([0, 1, 2, 3], 2), gather_dram([2, 0, 1, 1], 5, seed=3)]
    sim, dram = Simulator("edge"), images[0].copy()
    sim.run(prog, dram)
    assert traces(sim, prog, dram) == {}
    for image, (c, mem) in zip(images, runs(prog, images), strict=True):
        ref, ref_mem = reference(prog, image)
        assert mem == ref_mem and c.as_dict() == ref.as_dict()


def test_long_runs_are_not_recorded(monkeypatch):
    monkeypatch.setattr(sim_replay, "MAX_STEPS", 5)
    prog = Program.from_asm(GATHER)
    sim, dram = Simulator("edge"), gather_dram([0, 1, 2, 3], 2)
    sim.run(prog, dram)
    assert traces(sim, prog, dram) == {}
    image = gather_dram([3, 3, 1, 0], 9)
    got = runs(prog, [dram, image])
    assert got[1][1] == reference(prog, image)[1]


# a bf16 product leaves its fp32 tile's NaNs pending (made the default NaN once the tile is
# done); an int8 product then accumulates onto the same accumulator bytes as int32: the NaNs
# must be settled before it, in the replay as in the engine
NAN_THEN_INT = """
    dma.load dram=0x0, local=0x0, n0=1536, n1=1, n2=1, signal=s1
    nop wait=s1
    mx.loadw w=0x200, k=16, n=16, stride=32, dtype=bf16
    mx.matmul act=0x0, acc=0x2000000, m=16, astride=32, cstride=64, dtype=bf16, accum=0
    mx.loadw w=0x400, k=16, n=16, stride=16, dtype=int8
    mx.matmul act=0x500, acc=0x2000000, m=16, astride=16, cstride=64, dtype=int8, accum=1
    dma.store dram=0x800, local=0x2000000, n0=1024, n1=1, n2=1
    halt
"""


def test_pending_nans_are_settled_before_an_int_product_on_the_same_bytes():
    prog = Program.from_asm(NAN_THEN_INT)
    rng = np.random.default_rng(4)
    dram = np.zeros(0xC00, np.uint8)
    act = rng.standard_normal(256).astype(np.float32).view(np.uint32) >> 16
    act[::7] = 0x7FC3  # quiet NaNs with a payload
    dram[:0x200] = act.astype(np.uint16).view(np.uint8)
    dram[0x200:0x400] = (rng.standard_normal(256).astype(np.float32).view(np.uint32)
                         >> 16).astype(np.uint16).view(np.uint8)
    dram[0x400:0x600] = rng.integers(-3, 4, 0x200).astype(np.int8).view(np.uint8)
    ref, ref_mem = reference(prog, dram)
    assert (np.frombuffer(ref_mem[0x800:0xC00], np.uint32) >= 0x7FC00000).any()
    for c, mem in runs(prog, [dram, dram]):  # recorded, then replayed
        assert mem == ref_mem and c.as_dict() == ref.as_dict()


# fp32 emulated as three bf16 passes over weights DMAed from a constant DRAM range
# [0x1000, 0x1400) (hi tile at 0x1000, lo at 0x1200): in a batched loop over three activation
# tiles and once outside it. Then a weight tile made from data (w_hi + x, by a vector op on the
# loaded constant) and a constant range overwritten with data and loaded again: conversions a
# replay must make again every run. Last, w_hi DMAed again to 0x1800 and read only by its
# conversion: once that is kept, later replays skip the DMA
_PASSES = """
    mx.loadw w=0x1000, k=16, n=16, stride=32, dtype=bf16
    mx.matmul act={a}+0x0, acc={c}+0x0, m=16, astride=32, cstride=64, dtype=bf16, accum=0
    mx.loadw w=0x1200, k=16, n=16, stride=32, dtype=bf16
    mx.matmul act={a}+0x0, acc={c}+0x0, m=16, astride=32, cstride=64, dtype=bf16, accum=1
    mx.loadw w=0x1000, k=16, n=16, stride=32, dtype=bf16
    mx.matmul act={a}+0x200, acc={c}+0x0, m=16, astride=32, cstride=64, dtype=bf16, accum=1
"""
CONSTANT_WEIGHTS = f"""
    dma.load dram=0x0, local=0x0, n0=3072, n1=1, n2=1, signal=s1
    dma.load dram=0x1000, local=0x1000, n0=1024, n1=1, n2=1, signal=s2
    nop wait=s1
    nop wait=s2
    li rd=r1, imm=0
    li rd=r2, imm=0x2000000
    loop count=3, body=8
{_PASSES.format(a="r1", c="r2")}
      addi rd=r1, rs=r1, imm=1024
      addi rd=r2, rs=r2, imm=1024
    li rd=r3, imm=0x2000c00
{_PASSES.format(a="r0", c="r3")}
    vec.add dst=0x1000, a=0x1000, b=0x0, rows=16, cols=16, dstride=32, astride=32, bstride=32, dt=bf16, at=bf16, bt=bf16, bmode=tile
    mx.loadw w=0x1000, k=16, n=16, stride=32, dtype=bf16
    mx.matmul act=0x0, acc=0x2001000, m=16, astride=32, cstride=64, dtype=bf16, accum=0
    dma.store dram=0x1200, local=0x400, n0=512, n1=1, n2=1, signal=s3
    nop wait=s3
    dma.load dram=0x1200, local=0x1400, n0=512, n1=1, n2=1, signal=s1
    nop wait=s1
    mx.loadw w=0x1400, k=16, n=16, stride=32, dtype=bf16
    mx.matmul act=0x0, acc=0x2001400, m=16, astride=32, cstride=64, dtype=bf16, accum=0
    dma.load dram=0x1000, local=0x1800, n0=512, n1=1, n2=1, signal=s2
    nop wait=s2
    mx.loadw w=0x1800, k=16, n=16, stride=32, dtype=bf16
    mx.matmul act=0x0, acc=0x2001800, m=16, astride=32, cstride=64, dtype=bf16, accum=0
    dma.store dram=0x2000, local=0x2000000, n0=7168, n1=1, n2=1
    halt
"""
CONSTANT = ((0x1000, 0x1400),)


def constant_weights_dram(seed: int) -> np.ndarray:
    """Random bf16 activations (seed) and weights (always the same) for CONSTANT_WEIGHTS."""
    def bf16(rng, n):
        return (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(
            np.uint16).view(np.uint8)
    dram = np.zeros(0x4000, np.uint8)
    dram[:0xC00] = bf16(np.random.default_rng(seed), 0x600)
    dram[0x1000:0x1400] = bf16(np.random.default_rng(99), 0x200)
    return dram


def test_conversions_of_constant_weights_are_kept_and_the_others_made_again(monkeypatch):
    from infer.target import sim_lockstep

    prog = Program.from_asm(CONSTANT_WEIGHTS)
    images = [constant_weights_dram(seed) for seed in range(4)]
    conversions = []  # the replay's conversions outside batched loops (activations too)
    monkeypatch.setattr(sim_replay, "converted",
                        lambda a, dt, f=sim_replay.converted: conversions.append(a) or f(a, dt))
    sim, buf = Simulator("edge"), np.zeros_like(images[0])
    kept_arrays = []
    for i, image in enumerate(images):
        sim.reset()
        buf[:] = image  # the caller keeps [0x1000, 0x1400) the same in every run
        conversions.clear()
        c = sim.run(prog, buf, constant_dram=CONSTANT)
        ref, ref_mem = reference(prog, image)
        assert buf.tobytes() == ref_mem and c.as_dict() == ref.as_dict()
        (trace,) = traces(sim, prog, buf).values()
        if i == 0:
            assert trace.kept_steps is None  # recorded, not replayed
            continue
        kept = [a for fn, a in trace.kept_steps if fn is sim_replay.loadw_kept]
        made = [a for fn, a in trace.kept_steps if fn is sim_replay.loadw_converted]
        plans = [a for fn, a in trace.kept_steps if fn is sim_lockstep._replay_plan_kept]
        # outside the loop: w_hi and w_lo kept (w_hi's second load reuses its conversion);
        # the tile a vector op wrote and the one loaded from overwritten DRAM made every run
        assert [a[3].__array_interface__["data"][0] - sim.spad.ctypes.data for a in kept] == \
            [0x1000, 0x1200, 0x1800]
        assert [a[2].__array_interface__["data"][0] - sim.spad.ctypes.data for a in made] == \
            [0x1000, 0x1400]
        (plan,) = plans
        assert len(plan[2]) == 2  # the batched loop's two weight conversions
        boxes = [a[2][0] for a in kept] + [box[0] for box in plan[2].values()]
        # the copies a replay makes once every kept conversion is made: all but the one
        # only a kept conversion reads
        copies = [a[0].__array_interface__["data"][0] - sim.spad.ctypes.data
                  for fn, a in trace.kept_steps if fn is np.copyto]
        lean = [a[0].__array_interface__["data"][0] - sim.spad.ctypes.data
                for fn, a in trace.lean_steps if fn is np.copyto]
        assert 0x1800 in copies and lean == [c for c in copies if c != 0x1800]
        if i == 1:  # the first replay converts and keeps
            assert all(b is not None for b in boxes)
            kept_arrays = boxes
        else:  # later ones reuse what it kept and convert the others again
            assert all(b is k for b, k in zip(boxes, kept_arrays, strict=True))
            weights = [a.__array_interface__["data"][0] - sim.spad.ctypes.data for a in conversions]
            assert [w for w in weights if w >= 0x1000] == [0x1000, 0x1400]
            # (the lean steps, without the DMA to 0x1800: the same bits as the reference)


def test_without_constant_ranges_nothing_is_kept():
    prog = Program.from_asm(CONSTANT_WEIGHTS)
    images = [constant_weights_dram(seed) for seed in range(3)]
    sim, buf = Simulator("edge"), np.zeros_like(images[0])
    for image in images:
        sim.reset()
        buf[:] = image
        c = sim.run(prog, buf)
        ref, ref_mem = reference(prog, image)
        assert buf.tobytes() == ref_mem and c.as_dict() == ref.as_dict()
    (trace,) = traces(sim, prog, buf).values()
    assert trace.kept_steps is None


def test_constant_and_live_bytes_clear_only_what_they_set():
    """ConstantBytes forgets (LiveBytes makes all live) by clearing (setting) only the range its
    marks can be in, once per interpreted step of a trace: the same flags as clearing all of
    the scratchpad every time, which took the Llama prefill's second run on server from 0.45 to
    2.5 s."""
    from infer.target.sim_constants import ConstantBytes, LiveBytes

    spad = np.zeros(4096, np.uint8)
    dram = np.zeros(1024, np.uint8)
    cb = ConstantBytes(spad, dram, [(0, 512)])
    weights = np.ndarray((4, 16), np.uint16, spad, 1024, (64, 2))
    cb.copied(weights, np.ndarray((4, 16), np.uint16, dram, 0, (32, 2)))
    assert cb.is_constant(weights)
    cb.copied(np.ndarray((8,), np.uint32, spad, 3000, (4,)), np.ndarray((8,), np.uint32, dram, 600, (4,)))
    assert not cb.is_constant(np.ndarray((8,), np.uint32, spad, 3000, (4,)))  # from non-constant DRAM
    cb.forget_local()
    assert not cb.flags.any() and not cb.is_constant(weights)
    cb.copied(weights, np.ndarray((4, 16), np.uint16, dram, 0, (32, 2)))  # marked again after
    assert cb.is_constant(weights)
    cb.forget_all()
    assert not cb.flags.any() and cb.dram_ranges == []

    lb = LiveBytes(spad)
    lb.read_all()
    assert lb.live.all()
    tile = np.ndarray((4, 8), np.float32, spad, 2048, (64, 4))
    lb.killed(tile)
    assert not lb.is_live(tile) and lb.is_live(weights)
    lb.read_all()
    assert lb.live.all() and lb.is_live(tile)
