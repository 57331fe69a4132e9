"""The energy and area model (target/energy.py) against a hand count on a small hand-written
program, and the validation of the config's [energy] and [area] sections."""

import tomllib
from pathlib import Path

import numpy as np
import pytest

from infer.target.asm import Program
from infer.target.energy import EnergyModelError, area_breakdown, energy_of
from infer.target.hw import ConfigError, from_dict, load_config
from infer.target.sim import Simulator

TARGET = Path(__file__).resolve().parents[3] / "target"
ACC = 0x2000000

# Three k=16 x n=8 bf16 weight tiles, each used by one matmul of m=4 rows (accumulating after
# the first), a relu over the 4x8 fp32 result written back to the accumulator, a row sum into
# the scratchpad, a store of the 4x8 result, and a q4_0 weight tile (32 x 8, blocks down the
# columns) expanded to fp32 by vec.dequant.
PROGRAM = f"""
    dma.load dram=r0+0, local=r0+0, n0=128, n1=4, n2=1, ds1=128, ls1=128, signal=s1
    dma.load dram=r0+512, local=r0+1024, n0=16, n1=48, n2=1, ds1=16, ls1=16, signal=s2
    nop wait=s1
    nop wait=s2
    li rd=r1, imm=0
    li rd=r2, imm=0
    mx.loadw w=r1+1024, k=16, n=8, stride=16, dtype=bf16
    mx.matmul act=r0+0, acc=r0+{ACC}, m=4, astride=128, cstride=32, dtype=bf16, accum=0
    loop count=r0+2, body=4
      addi rd=r1, rs=r1, imm=256
      addi rd=r2, rs=r2, imm=32
      mx.loadw w=r1+1024, k=16, n=8, stride=16, dtype=bf16
      mx.matmul act=r2+0, acc=r0+{ACC}, m=4, astride=128, cstride=32, dtype=bf16, accum=1, signal=s3
    vec.relu dst=r0+{ACC}, a=r0+{ACC}, rows=4, cols=8, dstride=32, astride=32, dt=fp32, at=fp32, wait=s3
    vec.rsum dst=r0+4096, a=r0+{ACC}, rows=4, cols=8, dstride=4, astride=32, dt=fp32, at=fp32
    dma.store dram=r0+2048, local=r0+{ACC}, n0=32, n1=4, n2=1, ds1=32, ls1=32
    vec.dequant dst=r0+8192, q=r0+6144, s=r0+7168, rows=32, cols=8, dstride=32, qstride=8, sstride=16, dt=fp32, fmt=q4_0, blocks=col
    halt
"""


def test_energy_hand_count():
    cfg = load_config("edge")
    prog = Program.from_asm(PROGRAM)
    c = Simulator(cfg).run(prog, np.zeros(4096, np.uint8), trace=True, mode="fast")
    e, a = cfg.energy, cfg.area
    # hand count of the events
    macs = 3 * 4 * 16 * 8
    dram = 128 * 4 + 16 * 48 + 32 * 4
    spad = (128 * 4 + 16 * 48          # the two loads land in the scratchpad
            + 3 * 16 * 8 * 2           # three weight tiles read by mx.loadw
            + 3 * 4 * 16 * 2           # three times 4 activation rows of k=16 bf16
            + 4 * 4                    # the row sums written
            + 16 * 8 + 1 * 8 * 2       # dequant: 4-bit codes of 32 x 8, one fp16 scale per column block
            + 32 * 8 * 4)              # and its fp32 result
    acc = (4 * 8 * 4 + 2 * 2 * 4 * 8 * 4  # matmul results: written, then read + written twice
           + 2 * 4 * 8 * 4             # relu reads and writes the tile
           + 4 * 8 * 4                 # rsum reads it
           + 4 * 8 * 4)                # the store reads it
    vector = (4 * 8 * cfg.vector.cost["relu"] + 4 * 8 * cfg.vector.cost["rsum"]
              + 32 * 8 * cfg.vector.cost["dequant"])
    assert c.macs == macs and c.dram_read_bytes + c.dram_write_bytes == dram
    spad_pj = e.sram_pj_per_byte * (cfg.memory.scratchpad_bytes / 4 / 32768) ** e.sram_bank_exponent
    acc_pj = e.sram_pj_per_byte * (cfg.memory.accumulator_bytes / 2 / 32768) ** e.sram_bank_exponent
    area = (16 * 16 * a.pe_mm2 + 16 * a.vector_lane_mm2
            + (256 + 64) * a.sram_mm2_per_kib + a.fixed_mm2)
    static_pj = e.static_mw_per_mm2 * 1e-3 * area * c.cycles / (cfg.clock_ghz * 1e9) * 1e12
    want = {"matrix": macs * e.mac_pj["bf16"], "vector": vector * e.vector_pj_per_element,
            "scratchpad": spad * spad_pj, "accumulator": acc * acc_pj,
            "dram": dram * e.dram_pj_per_byte, "static": static_pj}
    got = energy_of(c, prog, cfg)
    assert got.by_component == pytest.approx(want, rel=1e-12)
    assert got.total_pj == pytest.approx(sum(want.values()), rel=1e-12)
    assert got.average_power_w == pytest.approx(sum(want.values()) * 1e-12 / (c.cycles * 1e-9), rel=1e-12)
    assert area_breakdown(cfg)["total"] == pytest.approx(area, rel=1e-12)
    assert sum(got.per_pc) == pytest.approx(got.dynamic_pj, rel=1e-12)
    # the timing-only mode gives the same energy (its profile and cycles equal the fast mode's)
    ct = Simulator(cfg).run(prog, np.zeros(4096, np.uint8), trace=True, mode="timing")
    assert energy_of(ct, prog, cfg).by_component == pytest.approx(want, rel=1e-12)
    with pytest.raises(EnergyModelError, match="trace=True"):
        energy_of(Simulator(cfg).run(prog, np.zeros(4096, np.uint8)), prog, cfg)


def _server_dict():
    return tomllib.loads((TARGET / "server.toml").read_text())


@pytest.mark.parametrize("mutate,msg", [
    (lambda d: d["energy"]["mac_pj"].pop("bf16"), "server.toml: energy.mac_pj.bf16 is missing"),
    (lambda d: d["energy"]["mac_pj"].update(int3=1.0), "energy.mac_pj.int3 is not a known config field"),
    (lambda d: d["energy"].update(dram_pj_per_byte=-1), "energy.dram_pj_per_byte must be a non-negative number"),
    (lambda d: d["energy"].pop("static_mw_per_mm2"), "energy.static_mw_per_mm2 is missing"),
    (lambda d: d["energy"].update(sram_reference_bank_bytes=0), "energy.sram_reference_bank_bytes must be a positive"),
    (lambda d: d["area"].update(pe_mm2="big"), "area.pe_mm2 must be a non-negative number, got 'big'"),
    (lambda d: d["area"].update(bogus=1.0), "area.bogus is not a known config field"),
])
def test_invalid_energy_sections(mutate, msg):
    d = _server_dict()
    mutate(d)
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(")):
        from_dict(d, "server.toml")


def test_sections_optional():
    d = _server_dict()
    del d["energy"], d["area"]
    cfg = from_dict(d, "old.toml")
    assert cfg.energy is None and cfg.area is None
    with pytest.raises(EnergyModelError, match="no \\[area\\] section"):
        area_breakdown(cfg)


def test_run_report_energy_by_op():
    """The run report of an artifact: energy per inference, power, the per-op column and JSON,
    hand-counted for relu(x + b) on a 4x16 fp32 tile (all in the scratchpad)."""
    from infer.runtime.executable import Executable

    from helpers.runtime_artifacts import bias_relu_artifact

    exe = Executable(bias_relu_artifact("edge"))
    exe.run([np.zeros((4, 16), np.float32)])
    rep, cfg = exe.last_report, exe.config
    e = cfg.energy
    spad_pj = e.sram_pj_per_byte * (cfg.memory.scratchpad_bytes / 4 / 32768) ** e.sram_bank_exponent
    # bias_add: load b (64 B) and x (256 B); vec.add reads x (256 B) and b (a row, 64 B), writes 256 B
    add = (64 + 256) * (e.dram_pj_per_byte + spad_pj) + (256 + 64 + 256) * spad_pj \
        + 64 * cfg.vector.cost["add"] * e.vector_pj_per_element
    # relu: reads and writes 256 B, then the store reads 256 B and writes them to DRAM
    relu = (256 + 256 + 256) * spad_pj + 256 * e.dram_pj_per_byte + 64 * cfg.vector.cost["relu"] * e.vector_pj_per_element
    assert [o.energy_pj for o in rep.ops] == pytest.approx([add, relu], rel=1e-12)
    assert rep.energy.dynamic_pj == pytest.approx(add + relu, rel=1e-12)
    d = rep.as_dict()
    assert d["energy"]["total_uj"] == pytest.approx(rep.energy.total_pj * 1e-6)
    assert d["ops"][1]["energy_uj"] == pytest.approx(relu * 1e-6)
    assert "energy per inference" in rep.summary() and "dyn nJ" in rep.summary()
    exe.run([np.zeros((4, 16), np.float32)], mode="functional")
    assert exe.last_report.energy is None
    assert exe.last_report.as_dict()["energy_note"] == "functional mode has no timing model"
