"""vec.dequant: llama.cpp block-quantized weights expanded on the vector unit. The simulator's
results are checked bit for bit against `gguf.quants.dequantize` (llama.cpp's own Python
reference) on random blocks with odd fp16 scales and extreme codes; the fast engine (a batched
hardware loop) against the reference engine; encoding, assembly and timing against the ISA
table and the config."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from infer.target import isa
from infer.target.asm import AsmError, Builder, parse_instr
from infer.target.hw import load_config
from infer.target.qblocks import BLOCK_BYTES, split_blocks
from infer.target.sim import SimFault, Simulator
from infer.target.sim_decode import decoded

QTYPE = {"q4_0": GGMLQuantizationType.Q4_0, "q4_1": GGMLQuantizationType.Q4_1,
         "q8_0": GGMLQuantizationType.Q8_0}
F32, BF16 = isa.DTYPE_CODE["fp32"], isa.DTYPE_CODE["bf16"]
#: fp16 bit patterns that stress the scale path: +-0, the smallest and largest subnormals, the
#: smallest normal, 1, the largest finite value, negatives, odd mantissas
ODD_SCALES = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0x7BFF, 0xFBFF,
                       0x3555, 0xB3FF, 0x0155, 0x2E66], np.uint16)
CODES, SCALES, OUT = 0x0, 0x8000, 0x10000  # scratchpad regions of the test programs


def random_blocks(fmt: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """GGUF bytes of a rows x cols matrix: random codes with whole blocks of extreme codes
    (all 0, all 15 / -128 / 127, alternating) and scales (and mins) drawn from ODD_SCALES and
    from random finite fp16 bit patterns."""
    nblocks = rows * cols // isa.QBLOCK
    b = rng.integers(0, 256, (nblocks, BLOCK_BYTES[fmt]), dtype=np.uint8)
    sb = isa.qscale_bytes(isa.QFORMAT_CODE[fmt])
    for lo, hi in ((0x00, 0x00), (0xFF, 0xFF), (0x0F, 0xF0), (0x80, 0x7F)):
        i = int(rng.integers(nblocks))
        b[i, sb::2], b[i, sb + 1::2] = lo, hi
    halves = b[:, :sb].copy().view(np.uint16)  # (nblocks, 1 or 2)
    finite = (halves & 0x7C00) != 0x7C00
    halves = np.where(finite, halves, halves & 0xBBFF)  # random but finite
    pick = rng.random(halves.shape) < 0.5
    halves = np.where(pick, rng.choice(ODD_SCALES, halves.shape), halves).astype(np.uint16)
    b[:, :sb] = halves.view(np.uint8).reshape(nblocks, sb)
    return b


def dequant_program(rows: int, cols: int, codes: np.ndarray, scales: np.ndarray, fmt: str,
                    blocks: str, dt: int):
    """DRAM image + program: load both planes, one vec.dequant of the whole tile, store it."""
    esz = 4 if dt == F32 else 2
    dram = np.zeros(0x20000 + rows * cols * esz, np.uint8)
    dram[CODES:CODES + codes.nbytes] = codes.view(np.uint8).reshape(-1)
    dram[SCALES:SCALES + scales.nbytes] = scales.reshape(-1)
    b = Builder()
    b.dma_load(dram=CODES, local=CODES, n0=codes.nbytes, n1=1, n2=1, signal=1)
    b.dma_load(dram=SCALES, local=SCALES, n0=scales.nbytes, n1=1, n2=1, signal=1)
    b.nop(wait=1)
    b.vec_dequant(dst=OUT, q=CODES, s=SCALES, rows=rows, cols=cols, dstride=cols * esz,
                  qstride=codes.shape[1], sstride=scales.shape[1], dt=dt,
                  fmt=isa.QFORMAT_CODE[fmt], blocks=isa.QAXIS_CODE[blocks], wait=1, signal=2)
    b.dma_store(dram=0x20000, local=OUT, n0=rows * cols * esz, n1=1, n2=1, wait=2)
    b.halt()
    return b.program(), dram


def run_dequant(raw: np.ndarray, fmt: str, rows: int, cols: int, blocks: str, dt: int,
                mode: str) -> np.ndarray:
    """The matrix as the NPU expands it (blocks=col: its transpose, the k x n weight tile)."""
    codes, scales = split_blocks(raw, fmt, rows, cols, blocks)
    shape = (cols, rows) if blocks == "col" else (rows, cols)
    prog, dram = dequant_program(*shape, codes, scales, fmt, blocks, dt)
    sim = Simulator("edge")
    sim.run(prog, dram, mode=mode)
    out = dram[0x20000:].view(np.float32 if dt == F32 else ml_dtypes.bfloat16).reshape(shape)
    return out.T if blocks == "col" else out


@pytest.mark.parametrize("fmt", ["q4_0", "q4_1", "q8_0"])
@pytest.mark.parametrize("blocks", ["col", "row"])
def test_bit_identical_to_gguf(fmt, blocks):
    rng = np.random.default_rng(len(fmt) * 7 + len(blocks))
    rows, cols = 24, 128
    raw = random_blocks(fmt, rows, cols, rng)
    ref = dequantize(raw.reshape(rows, -1), QTYPE[fmt])
    assert ref.shape == (rows, cols) and np.isfinite(ref).all()
    for mode in ("reference", "fast"):
        got = run_dequant(raw, fmt, rows, cols, blocks, F32, mode)
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
    # bf16 output: the fp32 value rounded to nearest even
    got = run_dequant(raw, fmt, rows, cols, blocks, BF16, "reference")
    want = ref.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("fmt", sorted(QTYPE))
@pytest.mark.parametrize("axis", [0, 1])
def test_stacked_tiles_in_any_layout_dequantize_as_each_tile(fmt, axis):
    """The fast engine's batched loops hand vec.dequant stacked tiles whose lane axis may have
    any stride: every tile of the stack comes out as it does alone (each block's scale and
    minimum broadcast over its own codes)."""
    from infer.target.sim_core import DequantSpec, dequant_compute

    spec = DequantSpec(isa.QFORMAT_CODE[fmt], axis)
    rng = np.random.default_rng(axis + len(fmt))
    rows, cols, lanes = 64, 96, 3
    bits, entry = isa.qformat_bits(spec.fmt), spec.scale_entry
    codes_shape = (rows * bits // 8, cols) if axis == 0 else (rows, cols * bits // 8)
    scales_shape = (rows // 32, cols * entry) if axis == 0 else (rows, cols // 32 * entry)
    # the lane axis innermost in memory: a stack that is not in C order
    q = np.moveaxis(rng.integers(0, 256, codes_shape + (lanes,), dtype=np.uint8), -1, 0).view(spec.code_dtype)
    s = np.moveaxis(ODD_SCALES[rng.integers(0, len(ODD_SCALES), scales_shape + (lanes,))].view(np.float16), -1, 0)
    assert not q.flags.c_contiguous
    for dt, held in ((F32, np.uint32), (BF16, np.uint16)):
        stacked = np.empty((lanes, rows, cols), np.float32 if dt == F32 else ml_dtypes.bfloat16)
        dequant_compute(spec, q, s, stacked, dt)
        for lane in range(lanes):
            alone = np.empty((rows, cols), stacked.dtype)
            dequant_compute(spec, np.ascontiguousarray(q[lane]), np.ascontiguousarray(s[lane]), alone, dt)
            np.testing.assert_array_equal(stacked[lane].view(held), alone.view(held))


def test_nibble_order_is_llama_cpp():
    """In the 16 code bytes of a q4_1 block, element j is the low nibble of byte j and element
    j + 16 its high nibble (d = 1, m = 0: the values are the codes)."""
    qs = np.arange(16, dtype=np.uint8) | (np.uint8(15) - np.arange(16, dtype=np.uint8)) << 4
    block = np.concatenate([np.array([1.0, 0.0], np.float16).view(np.uint8), qs])
    want = np.concatenate([np.arange(16), 15 - np.arange(16)]).astype(np.float32)
    np.testing.assert_array_equal(dequantize(block[None], QTYPE["q4_1"])[0], want)
    for blocks in ("col", "row"):
        got = run_dequant(block, "q4_1", 1, 32, blocks, F32, "reference")
        np.testing.assert_array_equal(got[0], want)


def test_non_finite_scales_give_the_default_nan():
    """An inf scale times a zero code is NaN: the vector unit writes the default NaN there
    (gguf's NaN payload is the host's), and inf elsewhere exactly as gguf."""
    raw = np.zeros((2, BLOCK_BYTES["q8_0"]), np.uint8)
    raw[:, :2] = np.array([np.inf, -np.inf], np.float16).view(np.uint8).reshape(2, 2)
    raw[:, 2:] = np.arange(32, dtype=np.int8).view(np.uint8)  # code 0 first
    with np.errstate(invalid="ignore"):  # inf * 0
        ref = dequantize(raw, QTYPE["q8_0"]).reshape(1, 64)
    got = run_dequant(raw, "q8_0", 1, 64, "row", F32, "fast")
    nan = np.isnan(ref)
    assert nan.sum() == 2 and (np.isnan(got) == nan).all()
    assert (got[nan].view(np.uint32) == 0x7FC00000).all()
    np.testing.assert_array_equal(got[~nan], ref[~nan])


def tiled_gemm(fmt: str, k: int, n: int, m: int, seed: int):
    """y = x @ W^T with W (n x k) in fmt on the edge array, laid out and synchronised as
    compiled code is: a hardware loop over the k/32 block rows loads the block row's codes,
    scales and activation columns into fixed buffers, expands the 32 x n tile of W^T (one
    block down every column) to bf16 and runs the two 16-row matmuls of that tile."""
    rng = np.random.default_rng(seed)
    raw = random_blocks(fmt, n, k, rng)
    codes, scales = split_blocks(raw, fmt, n, k, "col")  # (k/2 or k) x n, (k/32) x n entries
    x = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    tile_codes = codes.nbytes // (k // 32)  # bytes of codes per block row
    dram = np.zeros(0x40000, np.uint8)
    dram[:codes.nbytes] = codes.view(np.uint8).reshape(-1)
    dram[0x10000:0x10000 + scales.nbytes] = scales.reshape(-1)
    dram[0x20000:0x20000 + x.nbytes] = x.view(np.uint8).reshape(-1)
    qbuf, sbuf, xbuf, wt, acc = 0x0, 0x1000, 0x2000, 0x3000, isa.ACC_BASE
    b = Builder()
    b.vec_mul(dst=acc, a=acc, rows=m, cols=n, dstride=4 * n, astride=4 * n, dt=F32,
              at=isa.DTYPE_CODE["int32"], bt=isa.DTYPE_CODE["int32"], bmode=3, imm=0)
    b.fence()
    for free in (3, 6, 7):  # the weight tile, codes/scales and activation buffers start free
        b.nop(signal=free)
    b.li(rd=1, imm=0)  # DRAM offset of the block row's codes
    b.li(rd=2, imm=0x10000)  # ... of its scales
    b.li(rd=3, imm=0x20000)  # ... of its activation columns
    with b.loop(count=k // 32):
        b.dma_load(dram=0, dram_base=1, local=qbuf, n0=tile_codes, n1=1, n2=1, wait=6)
        b.dma_load(dram=0, dram_base=2, local=sbuf, n0=scales.shape[1], n1=1, n2=1, signal=1)
        b.dma_load(dram=0, dram_base=3, local=xbuf, n0=64, n1=m, n2=1, ds1=2 * k, ls1=64,
                   wait=7, signal=5)
        b.nop(wait=3)  # the front end dispatches the expansion once the weight tile is free
        b.vec_dequant(dst=wt, q=qbuf, s=sbuf, rows=32, cols=n, dstride=2 * n, qstride=n,
                      sstride=scales.shape[1], dt=BF16, fmt=isa.QFORMAT_CODE[fmt], blocks=0,
                      wait=1, signal=2, signal2=6)
        for half in range(2):
            b.mx_loadw(w=wt + half * 16 * 2 * n, k=16, n=n, stride=2 * n, dtype=BF16,
                       wait=2 if half == 0 else 0)
            b.mx_matmul(act=xbuf + half * 32, acc=acc, m=m, astride=64, cstride=4 * n,
                        dtype=BF16, accum=1, wait=5 if half == 0 else 0,
                        signal=3 if half else 0, signal2=7 if half else 0)
        b.addi(rd=1, rs=1, imm=tile_codes)
        b.addi(rd=2, rs=2, imm=scales.shape[1])
        b.addi(rd=3, rs=3, imm=64)
    b.vec_copy(dst=0x8000, a=acc, rows=m, cols=n, dstride=4 * n, astride=4 * n, dt=F32, at=F32,
               wait=3, signal=4)
    b.dma_store(dram=0x38000, local=0x8000, n0=4 * m * n, n1=1, n2=1, wait=4)
    b.halt()
    w = dequantize(raw.reshape(n, -1), QTYPE[fmt]).astype(ml_dtypes.bfloat16).astype(np.float32)
    return b.program(), dram, x.astype(np.float32) @ w.T


@pytest.mark.parametrize("fmt", ["q4_1", "q8_0"])
def test_fast_equals_reference_on_a_quantized_gemm(fmt):
    k, n, m = 128, 16, 8
    prog, dram, want = tiled_gemm(fmt, k, n, m, seed=3)
    runs = {}
    for mode in ("reference", "fast", "functional", "timing"):
        sim = Simulator("edge")
        d = dram.copy()
        runs[mode] = (sim.run(prog, d, mode=mode, trace=mode != "functional"), d, sim.spad.copy(),
                      sim.acc.copy())
    ref, fast = runs["reference"], runs["fast"]
    for i in (1, 2, 3):
        assert runs["fast"][i].tobytes() == ref[i].tobytes()
        assert runs["functional"][i].tobytes() == ref[i].tobytes()
    assert fast[0].as_dict() == ref[0].as_dict()
    assert fast[0].events == ref[0].events and fast[0].profile == ref[0].profile
    assert runs["timing"][0].cycles == ref[0].cycles
    # the fast engine ran the k loop batched (renamed weight buffer, accumulation chain)
    dec = decoded(prog, load_config("edge"))
    loop_pc = next(pc for pc, i in enumerate(prog.instrs) if i.d.name == "loop")
    assert loop_pc not in dec.caches.get("failed", {}), dec.caches.get("failed")
    got = ref[1][0x38000:0x38000 + 4 * m * n].view(np.float32).reshape(m, n)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3 * np.abs(want).max())


@pytest.mark.parametrize("cfg", ["edge", "server"])
def test_occupancy_counts_output_bytes(cfg):
    """vec.dequant occupies the vector unit ceil(rows*cols*esize(dt) / (4*lanes)) * cost
    cycles: two bf16 or one fp32 weight per lane per cycle."""
    hw = load_config(cfg)
    raw = random_blocks("q4_1", 64, 256, np.random.default_rng(0))
    codes, scales = split_blocks(raw, "q4_1", 64, 256, "col")
    for dt, esz in ((F32, 4), (BF16, 2)):
        prog, dram = dequant_program(256, 64, codes, scales, "q4_1", "col", dt)
        c = Simulator(cfg).run(prog, dram, mode="reference")
        want = -(-(256 * 64 * esz) // (4 * hw.vector.lanes)) * hw.vector.cost["dequant"]
        assert c.busy_by_engine()["vector"] == want
        assert c.vector_elements == 256 * 64


def test_faults_match_between_engines():
    """A scale base register that breaks the q4_1 (d, m) alignment, and codes past the end
    of the scratchpad: the same fault in both engines."""
    raw = random_blocks("q4_1", 32, 32, np.random.default_rng(1))
    codes, scales = split_blocks(raw, "q4_1", 32, 32, "row")
    prog, dram = dequant_program(32, 32, codes, scales, "q4_1", "row", F32)
    spad = load_config("edge").memory.scratchpad_bytes
    for regs, kind in (({"r2": 2}, "misaligned"), ({"r1": spad - 8}, "out-of-bounds")):
        ins = prog.instrs[3]
        v = ins.as_dict() | {"s_base": 2, "q_base": 1}
        prog.instrs[3] = isa.make("vec.dequant", wait=ins.wait, signal=ins.signal, **v)
        faults = []
        for mode in ("reference", "fast"):
            with pytest.raises(SimFault) as e:
                Simulator("edge").run(prog, dram.copy(), regs=regs, mode=mode)
            faults.append((e.value.index, e.value.kind, e.value.cause))
        assert faults[0] == faults[1] and faults[0][1] == kind


def test_encoding_and_assembly():
    text = ("vec.dequant dst=r1+0x100, q=r2+0x0, s=r3+0x40, rows=64, cols=16, dstride=32, "
            "qstride=16, sstride=64, dt=bf16, fmt=q4_1, blocks=col, wait=s1, signal=s2")
    ins = parse_instr(text)
    assert isa.decode_word(isa.encode_word(ins)) == ins
    d = isa.BY_NAME["vec.dequant"]
    assert d.engine == "vector" and isa.used_bits(d) <= isa.WORD_BITS
    ok = dict(rows=32, cols=8, dstride=16, dt=BF16, fmt=isa.QFORMAT_CODE["q4_1"])
    for bad, msg in ((dict(rows=48), "not a multiple of the 32-element block"),
                     (dict(blocks=1), "cols = 8 is not a multiple"),
                     (dict(fmt=3), "reserved block format"),
                     (dict(dt=isa.DTYPE_CODE["int8"]), "dt = int8 is not one of fp32, bf16"),
                     (dict(s=2), "not aligned to the 4-byte q4_1 scale entry"),
                     (dict(sstride=6), "sstride = 6 is not aligned")):
        with pytest.raises(isa.EncodingError, match=msg):
            isa.make("vec.dequant", **(ok | bad))
    isa.make("vec.dequant", **(ok | dict(fmt=isa.QFORMAT_CODE["q8_0"], s=2)))  # fp16 d only
    with pytest.raises(AsmError, match=r"unknown qfmt 'q5_0' \(q4_0, q4_1, q8_0\)"):
        parse_instr("vec.dequant rows=32, cols=1, fmt=q5_0")


def test_split_blocks_rejects_bad_shapes():
    with pytest.raises(ValueError, match="not a 2x64 q4_0 matrix"):
        split_blocks(np.zeros(10, np.uint8), "q4_0", 2, 64)
    with pytest.raises(ValueError, match="not a whole number of 32-element blocks"):
        split_blocks(np.zeros(10, np.uint8), "q4_0", 2, 48)
    with pytest.raises(ValueError, match="unknown block format 'q5_1'"):
        split_blocks(np.zeros(10, np.uint8), "q5_1", 2, 64)


# ------------------------------------------------------------------ results kept from run to run
def _memo_case(fmt: str, dt: int, seed: int):
    rng = np.random.default_rng(seed)
    rows, cols = 64, 96
    raw = random_blocks(fmt, rows, cols, rng)
    codes, scales = split_blocks(raw, fmt, rows, cols, "col")
    prog, dram = dequant_program(cols, rows, codes, scales, fmt, "col", dt)
    return prog, dram, cols * rows * (4 if dt == F32 else 2)


def _expanded(sim: Simulator, prog, dram: np.ndarray, nbytes: int, mode: str = "fast") -> bytes:
    d = dram.copy()
    sim.run(prog, d, mode=mode)
    return d[0x20000:0x20000 + nbytes].tobytes()


@pytest.mark.parametrize("fmt", sorted(QTYPE))
@pytest.mark.parametrize("dt", [F32, BF16])
def test_a_kept_expansion_gives_the_bits_of_computing_it(fmt, dt):
    """A simulator keeps a vec.dequant's operands and result when it computes that expansion a
    second time (sim_memo); a later run whose codes and scales are byte for byte the same writes
    the kept result: the reference engine's bits, and the expansion is not computed again."""
    prog, dram, nbytes = _memo_case(fmt, dt, seed=len(fmt) + dt)
    want = _expanded(Simulator("edge"), prog, dram, nbytes, mode="reference")
    sim = Simulator("edge")
    runs = [_expanded(sim, prog, dram, nbytes) for _ in range(4)]
    assert runs == [want] * 4
    memo = sim.dequant_memo
    assert (memo.hits, memo.misses) == (2, 2) and 0 < memo.used <= memo.budget


def test_changed_codes_or_scales_are_expanded_again():
    """Equality is checked on every byte of both operands, as bits: a code nibble or a scale's
    sign of zero (fp16 -0 == +0 as values) that the candidate sample does not see still makes the
    memo compute the expansion again, and the result follows the new operands."""
    prog, dram, nbytes = _memo_case("q4_0", BF16, seed=11)
    sim = Simulator("edge")
    _expanded(sim, prog, dram, nbytes)
    changed = []
    d = dram.copy()
    d[CODES + 64 + 39] ^= 0x10  # a high nibble of codes row 1, off the sample's grid
    changed.append(d)
    d = dram.copy()
    scales = d[SCALES:SCALES + 2 * 96 * 2].view(np.uint16)
    scales[[5, 96 + 33]] = [0x0000, 0x8000]  # a block's scale +0, another's -0 ...
    changed.append(d.copy())
    scales[[5, 96 + 33]] = [0x8000, 0x0000]  # ... and swapped: equal values, other bits
    changed.append(d)
    for i, d in enumerate(changed):
        want = _expanded(Simulator("edge"), prog, d, nbytes, mode="reference")
        assert _expanded(sim, prog, d, nbytes) == want
        assert sim.dequant_memo.misses == 2 + i
    assert sim.dequant_memo.hits == 0
    # the two sign-of-zero cases expand to different bits: the memo could not have served either
    assert _expanded(Simulator("edge"), prog, changed[1], nbytes) != \
        _expanded(Simulator("edge"), prog, changed[2], nbytes)


def test_the_memo_keeps_at_most_its_budget(monkeypatch):
    """INFER_SIM_MEMO_MB bounds the bytes kept (operands and results); 0 turns the memo off. The
    results do not depend on it."""
    from infer.target.sim_memo import MEMO_ENV

    prog, dram, nbytes = _memo_case("q4_1", F32, seed=5)
    want = _expanded(Simulator("edge"), prog, dram, nbytes, mode="reference")
    for mb, kept in (("0", False), ("0.01", False), ("1", True)):
        monkeypatch.setenv(MEMO_ENV, mb)
        sim = Simulator("edge")
        assert [_expanded(sim, prog, dram, nbytes) for _ in range(3)] == [want] * 3
        memo = sim.dequant_memo
        assert memo.used <= memo.budget and (memo.hits == 1) == kept
    monkeypatch.setenv(MEMO_ENV, "lots")
    with pytest.raises(ValueError, match="INFER_SIM_MEMO_MB='lots': expected a number of megabytes"):
        Simulator("edge")


def test_the_memo_drops_the_least_recently_used_expansion(monkeypatch):
    """Past its budget the memo drops the expansion used least recently: a session's decode
    steps, which use their tiles again every step, displace the prefill chunks' tiles."""
    from infer.target.sim_memo import MEMO_ENV

    cases = {name: _memo_case("q4_1", F32, seed=s) for name, s in (("a", 21), ("b", 22), ("c", 23))}
    entry = 3072 + 768 + 96 * 64 * 4  # codes, scales and the fp32 result of one expansion
    want = {name: _expanded(Simulator("edge"), *case[:2], case[2], mode="reference") for name, case in cases.items()}
    monkeypatch.setenv(MEMO_ENV, str((2 * entry + 100) / (1 << 20)))  # room for two
    sim = Simulator("edge")
    memo = sim.dequant_memo
    order = "aabbaccab"  # kept on the second sight; "a" used again before "c" comes in
    hits = []
    for name in order:
        assert _expanded(sim, *cases[name]) == want[name]
        hits.append(memo.hits)
    # a hit at the fifth run (a) and the eighth (a again); b, the least recently used, was
    # dropped for c and is computed again at the ninth
    assert hits == [0, 0, 0, 0, 1, 1, 1, 2, 2]
    assert (memo.misses, memo.evictions) == (7, 1) and memo.used == 2 * entry


def test_cli_rejects_a_bad_memo_budget(tmp_path, monkeypatch, capsys):
    """`infer run` checks INFER_SIM_MEMO_MB before loading the artifact: one error naming the
    variable, exit status 1 (not a complaint about the artifact's hardware config)."""
    from infer.target.sim_memo import MEMO_ENV
    from infer.tools.cli import main

    monkeypatch.setenv(MEMO_ENV, "lots")
    assert main(["run", str(tmp_path / "missing.npu")]) == 1
    err = capsys.readouterr().err
    assert "INFER_SIM_MEMO_MB='lots': expected a number of megabytes" in err and "artifact" not in err
