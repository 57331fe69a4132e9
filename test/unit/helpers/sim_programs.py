"""Random NPU programs for the simulation-mode equivalence tests
(test/unit/target/test_sim_modes.py).

- `tiled_kernel(params, seed)`: the shape compiled kernels have (an outer loop over output
  tiles; a reduction loop that DMAs an activation tile and a weight strip, optionally
  software-pipelined over two buffers; an inner loop over column tiles of matmuls
  accumulating into the accumulator; a vector epilogue and a store), with every structural
  choice a parameter, including ones that make iterations depend on each other.
- `random_program(seed)`: any instruction of the ISA table (`isa.INSTRUCTIONS`) with random
  fields, in hardware loops whose bodies step address registers, with semaphores that may or
  may not balance: programs that fault (out of bounds, deadlock, misaligned) as well.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from infer.target import isa
from infer.target.asm import Builder, Program
from infer.target.hw import load_config

ACC = isa.ACC_BASE
DT = isa.DTYPE_CODE
DRAM_BYTES = 1 << 16

#: the parameter space of tiled_kernel (hypothesis draws from these)
TILED_PARAMS = {
    "dtype": ["int8", "bf16"],
    "k": [4, 8, 16],
    "n": [4, 8, 16],
    "m": [1, 3, 8, 16],
    "nk": [1, 2, 3, 5],
    "nout": [1, 2, 4],
    "ncol": [1, 2, 3],
    "pipelined": [False, True],
    "out_moves": [True, False],  # False: every outer iteration stores to the same tile
    "epilogue": ["relu", "bias", "requant", "bf16", "none"],
    "clear": ["mul0", "accum0"],  # zero the accumulator by vec.mul 0 or the first matmul
}


#: tiled_kernel parameters whose loops take every batched path of the fast mode (nested lanes,
#: private copies, renamed buffers, reductions; bf16 and saturating int8)
BATCHED_KERNELS = [
    dict(dtype="bf16", k=16, n=16, m=16, nk=5, nout=4, ncol=3, pipelined=True, out_moves=True,
         epilogue="bias", clear="mul0"),
    dict(dtype="int8", k=8, n=16, m=8, nk=3, nout=2, ncol=2, pipelined=False, out_moves=True,
         epilogue="requant", clear="accum0"),
]

def tiled_kernel(p: dict, seed: int = 0) -> tuple[Program, np.ndarray]:
    """A tiled GEMM-like kernel for the edge config; returns (program, DRAM image)."""
    rng = np.random.default_rng(seed)
    dtype, k, n, m = p["dtype"], p["k"], p["n"], p["m"]
    nk, nout, ncol = p["nk"], p["nout"], p["ncol"]
    pipelined = p["pipelined"] and nk >= 2
    esz = 1 if dtype == "int8" else 2
    dt = DT[dtype]
    wcols = ncol * n
    # DRAM: A tiles [nout][m][nk*k], W [nk*k][wcols], bias [wcols] fp32, out [nout][m][wcols]
    a_off, a_tile = 0, m * nk * k * esz
    w_off = a_off + (nout + 1) * a_tile  # one spare tile: the prefetch past the end stays inside
    b_off = w_off + nk * k * wcols * esz
    o_off = b_off + wcols * 4
    assert o_off + nout * m * wcols * 4 <= DRAM_BYTES
    dram = np.zeros(DRAM_BYTES, np.uint8)
    if dtype == "int8":
        a = rng.integers(-128, 128, (nout + 1) * m * nk * k, dtype=np.int8)
        w = rng.integers(-128, 128, nk * k * wcols, dtype=np.int8)
    else:
        a = rng.standard_normal((nout + 1) * m * nk * k).astype(ml_dtypes.bfloat16)
        w = rng.standard_normal(nk * k * wcols).astype(ml_dtypes.bfloat16)
    bias = rng.standard_normal(wcols).astype(np.float32)
    for off, arr in ((a_off, a), (w_off, w), (b_off, bias)):
        raw = np.frombuffer(arr.tobytes(), np.uint8)
        dram[off:off + raw.size] = raw
    # local memory: two activation buffers, a weight strip, the bias row, an epilogue tile
    abuf = [0, 0x1000]
    wbuf, bbuf, ebuf = 0x2000, 0x6000, 0x8000
    acc = ACC
    rA, rO, rW, rC, rCa = 1, 2, 3, 4, 5
    odt = DT["int32"] if dtype == "int8" else DT["fp32"]
    b = Builder()
    b.dma_load(dram=b_off, local=bbuf, n0=wcols * 4, n1=1, n2=1, signal=6)
    b.nop(wait=6)
    b.li(rd=rA, imm=a_off)
    b.li(rd=rO, imm=o_off)
    with b.loop(count=nout):
        if p["clear"] == "mul0":
            b.vec_mul(dst=acc, a=acc, rows=m, cols=wcols, dstride=wcols * 4, astride=wcols * 4,
                      dt=odt, at=DT["int8"], bt=DT["int8"], bmode=3, imm=0)
        b.li(rd=rW, imm=w_off)

        def k_step(buf: int, first: bool) -> None:
            b.dma_load(dram_base=rW, dram=0, local=wbuf, n0=wcols * esz, n1=k, n2=1,
                       ds1=wcols * esz, ls1=wcols * esz, signal=2)
            b.nop(wait=2)
            b.li(rd=rC, imm=wbuf)
            b.li(rd=rCa, imm=acc)
            with b.loop(count=ncol):
                b.mx_loadw(w_base=rC, w=0, k=k, n=n, stride=wcols * esz, dtype=dt)
                b.mx_matmul(act=abuf[buf], acc_base=rCa, acc=0, m=m, astride=k * esz,
                            cstride=wcols * 4, dtype=dt,
                            accum=0 if first and p["clear"] == "accum0" else 1)
                b.addi(rd=rC, rs=rC, imm=n * esz)
                b.addi(rd=rCa, rs=rCa, imm=n * 4)
            b.addi(rd=rW, rs=rW, imm=k * wcols * esz)

        def load_a(buf: int, step: int) -> None:
            b.dma_load(dram_base=rA, dram=step * k * esz, local=abuf[buf], n0=k * esz, n1=m,
                       n2=1, ds1=nk * k * esz, ls1=k * esz, signal=1)
            b.nop(wait=1)

        if p["clear"] == "accum0":  # the first step overwrites: outside the reduction loop
            load_a(0, 0)
            k_step(0, True)
            steps = nk - 1
            base_step = 1
        else:
            steps, base_step = nk, 0
        if pipelined and steps >= 2:
            load_a(0, base_step)
            with b.loop(count=steps // 2):
                load_a(1, base_step + 1)  # the odd step's tile, then the next even one
                k_step(0, False)
                load_a(0, base_step + 2)  # prefetch (past the end on the last iteration)
                k_step(1, False)
                b.addi(rd=rA, rs=rA, imm=2 * k * esz)
            b.addi(rd=rA, rs=rA, imm=-2 * k * esz * (steps // 2))
            if steps % 2:
                k_step(0, False)
        elif steps:
            with b.loop(count=steps):
                load_a(0, base_step)
                k_step(0, False)
                b.addi(rd=rA, rs=rA, imm=k * esz)
            b.addi(rd=rA, rs=rA, imm=-k * esz * steps)
        src, sdt = acc, odt
        ep = p["epilogue"]
        tile = dict(rows=m, cols=wcols, astride=wcols * 4)
        if ep == "relu":
            b.vec_relu(dst=acc, a=acc, dstride=wcols * 4, dt=odt, at=odt, **tile)
        elif ep == "bias":
            b.vec_add(dst=ebuf, a=acc, b=bbuf, dstride=wcols * 4, bstride=0, dt=DT["fp32"], at=odt,
                      bt=DT["fp32"], bmode=1, **tile)
            src, sdt = ebuf, DT["fp32"]
        elif ep == "requant":
            b.vec_requant(dst=ebuf, a=acc, b=bbuf, dstride=wcols, bstride=0, dt=DT["int8"], at=odt,
                          bt=DT["fp32"], bmode=1, **tile)
            src, sdt = ebuf, DT["int8"]
        elif ep == "bf16":
            b.vec_copy(dst=ebuf, a=acc, dstride=wcols * 2, dt=DT["bf16"], at=odt, **tile)
            src, sdt = ebuf, DT["bf16"]
        ssz = isa.DTYPES[sdt][1]
        b.nop(signal=3)
        b.dma_store(dram_base=rO, dram=0, local=src, n0=wcols * ssz, n1=m, n2=1,
                    ds1=wcols * ssz, ls1=wcols * ssz, wait=3, signal=4)
        b.nop(wait=4)
        b.addi(rd=rA, rs=rA, imm=a_tile)
        if p["out_moves"]:
            b.addi(rd=rO, rs=rO, imm=m * wcols * 4)
    b.halt()
    return b.program(), dram


# ----------------------------------------------------------------------------- any instruction
_LOCAL_SPAN = 0x800  # random local addresses stay in [0, span) of the scratchpad / accumulator


def _field_value(rng: np.random.Generator, d: isa.InstrDef, f: isa.FieldDef,
                 regs: list[int], mdt: int) -> int:
    if f.kind == "reg":  # address bases: r0..r2 (r3 is a loop count)
        return int(rng.choice(regs[:3]))
    if f.kind == "local_off":
        base = ACC if f.name == "acc" or rng.random() < 0.35 else 0
        return base + 4 * int(rng.integers(0, _LOCAL_SPAN // 4))
    if f.kind == "dram_off":
        return 4 * int(rng.integers(0, DRAM_BYTES // 8))
    if f.kind == "count":
        return int(rng.integers(1, 9))
    if f.kind == "stride":
        return 4 * int(rng.integers(0, 33))
    if f.kind == "dtype":
        if d.engine == "matrix":
            return mdt
        return DT[str(rng.choice(("int8", "int32", "fp32", "bf16")))]
    if f.kind == "bmode":
        return int(rng.integers(0, 4))
    if f.kind in ("qfmt", "qaxis"):
        return int(rng.integers(0, len(isa.ENUM_KINDS[f.kind]) - (f.kind == "qfmt")))
    if f.kind == "f32":
        return isa.f32_bits(float(rng.choice([0.0, 0.5, -2.0, 3.0, 1.25])))
    if f.kind == "flag":
        return int(rng.integers(0, 2))
    if d.name == "muli":
        return int(rng.choice([0, 1, 2]))
    return 4 * int(rng.integers(-8, 65))  # li / addi: aligned addresses, mostly in range


def _random_instr(rng: np.random.Generator, regs: list[int], nsem: int, mdt: int) -> isa.Instr:
    candidates = [d for d in isa.INSTRUCTIONS if d.name not in ("halt", "loop", "ld", "lds")]
    for _ in range(100):
        d = candidates[int(rng.integers(len(candidates)))]
        vals = {f.name: _field_value(rng, d, f, regs, mdt) for f in d.fields}
        if d.name in ("li", "addi", "add", "sub", "mul", "muli"):
            vals["rd"] = int(rng.choice(regs[1:3]))  # r3 (a loop count) is only read
            for src in ("rs", "rt"):
                if src in vals:
                    vals[src] = int(rng.choice(regs[:3]))
        if d.name == "vec.dequant":  # the block dimension is whole 32-element blocks
            along = "rows" if isa.QAXES[vals["blocks"]] == "col" else "cols"
            vals[along] = isa.QBLOCK * int(rng.integers(1, 3))
        wait = int(rng.integers(1, nsem + 1)) if rng.random() < 0.06 else 0
        sig = int(rng.integers(1, nsem + 1)) if rng.random() < 0.3 else 0
        if not isa.check(d, vals, wait, sig, 0):
            return isa.make(d.name, wait=wait, signal=sig, **vals)
    return isa.make("nop")


#: with `loads`, random programs `ld` their address registers and loop count from this
#: many int32 words at the end of DRAM (`table_words` fills them)
TABLE_WORDS = 16


def table_words(rng: np.random.Generator) -> np.ndarray:
    """Values for the `ld` table: small multiples of 4 (addresses in range), some negative."""
    return (4 * rng.integers(-2, 64, TABLE_WORDS)).astype(np.int32)


def random_program(seed: int, length: int = 40, counts: tuple[int, int] = (0, 6),
                   max_depth: int | None = None, strides: tuple[int, ...] | None = None,
                   loads: bool = False) -> tuple[Program, np.ndarray, dict[str, int]]:
    """Random instructions from the ISA table in random loop nests; returns (program, DRAM
    image, initial registers). Constant trip counts are drawn from range(*counts), loops
    nest up to max_depth (default: the config's loop depth), and the address registers move
    by a choice of `strides` bytes per iteration (default: -32..64). With `loads`, one
    instruction in eight is an `ld` of an address register or the loop-count register from
    the table at the end of DRAM (`table_words`) or an `lds` of one from the scratchpad:
    registers that data decides."""
    rng = np.random.default_rng(seed)
    cfg = load_config("edge")
    nsem = 4
    regs = [0, 1, 2, 3]
    mdt = DT[str(rng.choice(["int8", "bf16"]))]  # one matmul type per program
    b = Builder()
    b.mx_loadw(w=4 * int(rng.integers(0, 64)), k=int(rng.integers(1, 17)),
               n=int(rng.integers(1, 17)), stride=64, dtype=mdt)
    for s in range(1, nsem + 1):  # pre-loaded tokens, as compiled code starts
        for _ in range(int(rng.integers(0, 4))):
            b.nop(signal=s)

    def block(budget: int, depth: int) -> None:
        while budget > 0:
            r = rng.random()
            if r < 0.2 and depth < (max_depth or cfg.scalar.loop_depth) and budget > 3:
                inner = int(rng.integers(2, min(budget, 12) + 1))
                with b.loop(count=int(rng.integers(*counts)),
                            count_base=int(rng.choice([0, 0, 0, 3]))):
                    block(inner - 1, depth + 1)
                    for reg in regs[1:3]:
                        if rng.random() < 0.7:
                            step = (4 * int(rng.integers(-8, 17)) if strides is None
                                    else int(rng.choice(strides)))
                            b.addi(rd=reg, rs=reg, imm=step)
                budget -= inner
            elif loads and r > 0.875:
                rd = int(rng.choice(regs[1:4]))
                if rng.random() < 0.8:
                    b.ld(rd=rd, addr=DRAM_BYTES - 4 * TABLE_WORDS
                         + 4 * int(rng.integers(0, TABLE_WORDS)))
                else:
                    b.lds(rd=rd, addr=4 * int(rng.integers(0, 1024)))
                budget -= 1
            else:
                b.instrs.append(_random_instr(rng, regs, nsem, mdt))
                budget -= 1

    block(length, 0)
    b.halt()
    dram = rng.integers(0, 256, DRAM_BYTES, dtype=np.uint8)
    dram[:DRAM_BYTES // 2].view(np.float32)[::3] = 0.5  # some finite floats among the noise
    if loads:
        dram[DRAM_BYTES - 4 * TABLE_WORDS:] = table_words(rng).view(np.uint8)
    return b.program(), dram, {"r1": 4 * int(rng.integers(0, 64)), "r2": 0,
                               "r3": int(rng.integers(0, 4))}
