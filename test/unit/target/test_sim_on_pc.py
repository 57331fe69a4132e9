"""`Simulator.run(on_pc={pc: callback})`: callbacks when the front end reaches an instruction
at loop depth 0 (DRAM snapshots between kernels for the per-layer check)."""

import numpy as np
import pytest

from infer.target.asm import Program
from infer.target.sim import Simulator

# store the scratchpad byte 0 to DRAM 0, change it, store it to DRAM 1; a loop in between
PROGRAM = """
    li rd=r1, imm=0
    vec.copy dst=0, a=64, rows=1, cols=1, dt=int8, at=int8, signal=s1
    dma.store dram=0, local=0, n0=1, n1=1, n2=1, wait=s1
    loop count=3, body=2
      addi rd=r1, rs=r1, imm=1
      nop
    vec.copy dst=0, a=65, rows=1, cols=1, dt=int8, at=int8, signal=s1
    dma.store dram=1, local=0, n0=1, n1=1, n2=1, wait=s1
    halt
"""


def _sim() -> Simulator:
    s = Simulator("edge")
    s.spad[64], s.spad[65] = 11, 22
    return s


def test_callbacks_see_every_earlier_effect_and_none_later():
    prog = Program.from_asm(PROGRAM)
    seen: list[tuple[int, bytes]] = []

    def snap(pc: int, dram: np.ndarray) -> None:
        seen.append((pc, bytes(dram[:2])))

    dram = np.zeros(64, np.uint8)
    c = _sim().run(prog, dram, on_pc={0: snap, 3: snap, 7: snap, 8: snap, len(prog.instrs): snap})
    # pc 3 (the loop) and 8 (halt) are reached at depth 0; 4 would be inside the loop
    assert seen == [(0, b"\0\0"), (3, b"\x0b\0"), (7, b"\x0b\0"), (8, b"\x0b\x16"),
                    (len(prog.instrs), b"\x0b\x16")]
    # the same run without hooks: identical counters (the hook costs nothing in simulated time)
    c2 = _sim().run(prog, np.zeros(64, np.uint8))
    assert (c.cycles, c.instructions) == (c2.cycles, c2.instructions)


def test_callback_inside_a_loop_body_never_fires_and_can_modify_dram():
    prog = Program.from_asm(PROGRAM)
    fired = []

    def corrupt(pc: int, dram: np.ndarray) -> None:
        fired.append(pc)
        dram[0] = 99

    dram = np.zeros(64, np.uint8)
    _sim().run(prog, dram, on_pc={4: lambda pc, d: fired.append(pc), 6: corrupt})
    assert fired == [6] and dram[0] == 99 and dram[1] == 22


def test_bad_pc_is_an_error():
    prog = Program.from_asm(PROGRAM)
    with pytest.raises(ValueError, match="outside the program"):
        _sim().run(prog, np.zeros(64, np.uint8), on_pc={len(prog.instrs) + 1: lambda pc, d: None})
