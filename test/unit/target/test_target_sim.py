"""Simulator semantics, every fault kind, timing model and counters."""

import json
import math

import ml_dtypes
import numpy as np
import pytest

from infer.target import isa, kernels
from infer.target.asm import AsmError, Program
from infer.target.sim import SimFault, Simulator

ACC = isa.ACC_BASE


def run(text, dram=None, cfg="edge", **kw):
    s = Simulator(cfg)
    return s, s.run(Program.from_asm(text), dram if dram is not None else np.zeros(4096, np.uint8),
                    **kw)


def fault(text, kind, match, dram=None, cfg="edge", **kw):
    with pytest.raises(SimFault) as e:
        run(text, dram, cfg, **kw)
    assert e.value.kind == kind
    msg = str(e.value)
    assert "at instruction" in msg and match in msg, msg
    return e.value


# ------------------------------------------------------------------ faults
def test_fault_out_of_bounds_dram():
    f = fault("nop\ndma.load dram=0xff0, local=0, n0=32, n1=1, n2=1\n", "out-of-bounds",
              "outside DRAM")
    assert f.index == 1 and f.text.startswith("dma.load dram=r0+0xff0")


def test_fault_out_of_bounds_local():
    fault("dma.load dram=0, local=0x3fff0, n0=32, n1=1, n2=1\n", "out-of-bounds",
          "outside the scratchpad")
    fault("vec.relu dst=0x2010000, a=0, rows=1, cols=4, dt=fp32, at=fp32", "out-of-bounds",
          "exceeds the accumulator")


def test_fault_out_of_bounds_via_register():
    fault("li rd=r1, imm=-64\ndma.store dram=r1+0, local=0, n0=4, n1=1, n2=1",
          "out-of-bounds", "outside DRAM")


def test_fault_misaligned():
    f = fault("li rd=r1, imm=2\nvec.relu dst=0, a=r1+0, rows=1, cols=4, dt=fp32, at=fp32",
              "misaligned", "not aligned to 4 bytes")
    assert f.index == 1
    fault("li rd=r1, imm=2\nld rd=r2, addr=r1+0", "misaligned", "not 4-byte aligned")


def test_fault_bad_encoding():
    prog = Program.from_asm("halt").to_bytes()
    bad = prog[:16] + b"\xee" + prog[17:]
    with pytest.raises(SimFault) as e:
        Simulator("edge").run(bad, np.zeros(16, np.uint8))
    assert e.value.kind == "bad-encoding" and e.value.index == 0
    assert "at instruction 0 (undecodable word 0x" in str(e.value)
    assert str(e.value).endswith("unknown opcode 0xee")
    good = Program.from_asm("nop\nhalt").to_bytes()
    bad2 = good[:16 + 32 + 20] + b"\x01" + good[16 + 32 + 21:]  # reserved bit of halt
    with pytest.raises(SimFault, match=r"instruction 1 .*halt: reserved bits set"):
        Simulator("edge").run(bad2, np.zeros(16, np.uint8))


def test_fault_deadlock():
    f = fault("dma.load dram=0, local=0, n0=4, n1=1, n2=1, wait=s3\nhalt", "deadlock",
              "wait on s3 can never be satisfied")
    assert f.index == 0
    # a token can be consumed only once
    fault("nop signal=s1\nnop wait=s1\nnop wait=s1", "deadlock", "s1")


def test_fault_register_out_of_range(tmp_path):
    text = (__import__("pathlib").Path(isa.__file__).parent / "edge.toml").read_text()
    p = tmp_path / "small.toml"
    p.write_text(text.replace("registers = 32", "registers = 8").replace(
        "semaphores = 16", "semaphores = 4"))
    fault("nop\nli rd=r9, imm=1", "register", "r9 out of range", cfg=str(p))
    fault("nop signal=s5", "register", "s5 out of range", cfg=str(p))
    fault("li rd=r1, imm=0x7fffffffffff\nmul rd=r1, rs=r1, rt=r1\nmul rd=r1, rs=r1, rt=r1",
          "register", "overflows 64-bit register r1")
    with pytest.raises(ValueError, match="register 'r40' out of range"):
        run("halt", regs={"r40": 1})


def test_fault_matrix_state_and_shape():
    fault("mx.matmul m=1, acc=0x2000000, dtype=int8", "state", "before any mx.loadw")
    fault("mx.loadw k=32, n=16, stride=16, dtype=int8", "shape", "exceeds the 16x16 array")
    fault("mx.loadw k=16, n=16, stride=16, dtype=fp8e4m3", "unsupported", "fp8e4m3 not supported")


def test_fault_loop_depth():
    fault("loop count=2, body=5\nloop count=2, body=4\nloop count=2, body=3\nloop count=2, body=2"
          "\nloop count=2, body=1\nnop", "loop", "loop_depth = 4")


# ------------------------------------------------------------------ semantics
def test_scalar_registers_and_loops():
    dram = np.zeros(256, np.uint8)
    dram[64:68] = np.frombuffer(np.int32(7).tobytes(), np.uint8)
    s, c = run("""
        ld rd=r1, addr=r2+0            # r2 = 64 from the runtime: r1 = 7
        li rd=r3, imm=0
        loop count=r1+1, body=1        # 8 iterations
          addi rd=r3, rs=r3, imm=3
        muli rd=r4, rs=r3, imm=2
        sub rd=r5, rs=r4, rt=r1
        loop count=0, body=1           # zero-trip loop skips its body
          addi rd=r5, rs=r5, imm=1000
        vec.copy dst=0, a=0, rows=1, cols=1, dt=int32, at=int32
        halt
        """, dram, regs={"r2": 64})
    assert c.instructions == 2 + 1 + 8 + 2 + 1 + 2
    # r5 = 2 * 24 - 7 = 41: observe it through a DMA address
    s.spad[0] = 0xAB
    s.run(Program.from_asm("dma.store dram=r5+0, local=0, n0=1, n1=1, n2=1"), dram,
          regs={"r5": 41})
    assert dram[41] == 0xAB
    s.spad[0] = 0xCD
    s.run(Program.from_asm("""
        li rd=r3, imm=24
        muli rd=r4, rs=r3, imm=2
        li rd=r1, imm=7
        sub rd=r5, rs=r4, rt=r1
        mul rd=r6, rs=r1, rt=r1       # 49
        add rd=r5, rs=r5, rt=r6       # 90
        dma.store dram=r5+0, local=0, n0=1, n1=1, n2=1
        """), dram)
    assert dram[90] == 0xCD


def test_paged_dma_addressing_with_runtime_registers():
    # page table at 0: [3, 1]; pages of 16 bytes at 0x100 + 16*p; gather 2 pages by table
    dram = np.zeros(1024, np.uint8)
    dram[0:8] = np.frombuffer(np.array([3, 1], np.int32).tobytes(), np.uint8)
    for p in range(4):
        dram[0x100 + 16 * p:0x110 + 16 * p] = p + 1
    text = """
        li rd=r3, imm=0                # local cursor
        loop count=r1+0, body=6        # r1 = number of pages (runtime)
          ld rd=r4, addr=r2+0          # r2 = page-table pointer (runtime)
          muli rd=r4, rs=r4, imm=16
          dma.load dram=r4+0x100, local=r3+0, n0=16, n1=1, n2=1, signal=s1
          nop wait=s1
          addi rd=r2, rs=r2, imm=4
          addi rd=r3, rs=r3, imm=16
        dma.store dram=0x200, local=0, n0=32, n1=1, n2=1
        halt
    """
    run(text, dram, regs={"r1": 2, "r2": 0})
    assert list(dram[0x200:0x220]) == [4] * 16 + [2] * 16


def test_dma_3d_and_negative_strides():
    dram = np.arange(256, dtype=np.uint8)
    run("""
        dma.load dram=0, local=0, n0=2, n1=3, n2=2, ds1=8, ds2=64, ls1=2, ls2=6
        dma.store dram=0x80, local=0, n0=12, n1=1, n2=1
        dma.store dram=0xc0, local=10, n0=2, n1=6, n2=1, ls1=-2, ds1=2
        halt""", dram)
    exp = np.array([0, 1, 8, 9, 16, 17, 64, 65, 72, 73, 80, 81], np.uint8)
    assert list(dram[0x80:0x8c]) == list(exp)
    assert list(dram[0xc0:0xcc]) == list(exp.reshape(6, 2)[::-1].ravel())


def vec_run(op, a, b=None, bmode="tile", imm=0.0, dt="fp32", at="fp32", bt=None,
            cfg="edge", mode="fast"):
    s = Simulator(cfg)
    rows, cols = a.shape
    npd = kernels.NPD
    a = a.astype(npd[at])
    s.spad[0:a.nbytes] = a.view(np.uint8).ravel()
    kw = ""
    if b is not None or bmode == "imm":
        bt = bt or at
        if b is not None:
            b = b.astype(npd[bt])
            s.spad[4096:4096 + b.nbytes] = b.view(np.uint8).ravel()
        bs = b.strides[0] if b is not None and b.ndim == 2 and bmode != "col" else (
            b.itemsize if b is not None else 0)
        kw = f", b=4096, bstride={bs}, bt={bt}, bmode={bmode}, imm={imm}"
    red = isa.VECTOR_OP_BY_NAME[op].reduces_rows
    esz = np.dtype(npd[dt]).itemsize
    dst_cols = 1 if red else cols
    s.run(Program.from_asm(f"vec.{op} dst=8192, a=0, rows={rows}, cols={cols}, "
                           f"dstride={dst_cols * esz}, astride={a.strides[0]}, dt={dt}, at={at}"
                           f"{kw}\nhalt"), np.zeros(64, np.uint8), mode=mode)
    n = rows * dst_cols * esz
    return s.spad[8192:8192 + n].view(npd[dt]).reshape(rows, dst_cols)


def test_vector_ops_match_numpy():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 33)).astype(np.float32)
    y = rng.standard_normal((5, 33)).astype(np.float32)
    r = rng.standard_normal((1, 33)).astype(np.float32)
    c = rng.standard_normal((5, 1)).astype(np.float32)
    np.testing.assert_array_equal(vec_run("add", x, y), x + y)
    np.testing.assert_array_equal(vec_run("max", x, r, "row"), np.maximum(x, r))
    np.testing.assert_array_equal(vec_run("sub", x, c, "col"), x - c)
    np.testing.assert_array_equal(vec_run("mul", x, None, "imm", imm=0.25), x * np.float32(0.25))
    np.testing.assert_array_equal(vec_run("relu", x), np.maximum(x, 0))
    np.testing.assert_allclose(vec_run("exp", x), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(vec_run("silu", x), x / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)
    gelu_erf = 0.5 * x * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))
    np.testing.assert_allclose(vec_run("gelu", x), gelu_erf, atol=1e-3)
    np.testing.assert_allclose(vec_run("rsum", x), x.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(vec_run("rmax", x), x.max(1, keepdims=True))
    np.testing.assert_allclose(vec_run("rsqrt", np.abs(x) + 1), 1 / np.sqrt(np.abs(x) + 1),
                               rtol=1e-6)
    # casts: fp32 -> bf16 rounds to nearest even
    np.testing.assert_array_equal(vec_run("copy", x, dt="bf16").view(np.uint16),
                                  x.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_erf_and_gelu_erf_are_the_float64_values_rounded_once():
    """vec.erf / vec.gelu_erf: math.erf's value (float64) rounded to fp32, over the range where
    erf moves (the A&S sequence they replace was 1.5e-7 off), signed zeros, infinities, NaN."""
    x = np.concatenate([np.linspace(-6, 6, 1023), [0.0, -0.0, 1e-30, 30.0, -30.0]]).astype(np.float32)
    x = np.concatenate([x, [np.inf, -np.inf, np.nan]]).astype(np.float32)[None, :]
    x64 = x.astype(np.float64)[0]
    erf64 = np.array([math.erf(v) if np.isfinite(v) else np.sign(v) for v in x64])
    erf64[np.isnan(x64)] = np.nan
    got = vec_run("erf", x)[0]
    np.testing.assert_array_equal(got[:-1], erf64[:-1].astype(np.float32))
    assert np.isnan(got[-1]) and np.signbit(got[x64 == 0]).tolist() == np.signbit(x64[x64 == 0]).tolist()
    finite = np.isfinite(x64)
    gelu64 = 0.5 * x64[finite] * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x64[finite]]))
    got = vec_run("gelu_erf", x)[0]
    np.testing.assert_array_equal(got[finite], gelu64.astype(np.float32))
    assert got[~finite][0] == np.inf and np.isnan(got[~finite][1:]).all()  # -inf * (1 + -1): NaN, as the formula



def test_erf_of_an_array_is_erf_of_each_element():
    """special.erf (scipy's, elementwise): the value of each element of an array of several
    gelu_erf blocks (the old rational regions' boundaries, signed zeros, infinities, NaN,
    subnormals, random values to 40) is its value alone, and within 2.3e-16 of math.erf."""
    from infer.target.special import _ERF_CHUNK, erf

    edges = np.array([0.0, -0.0, 0.5, -0.5, 4.0, -4.0, 27.0, -27.0, np.inf, -np.inf, np.nan,
                      5e-324, -5e-324, 1e-300, 1e300, -1e300])
    edges = np.concatenate([edges, np.nextafter(edges, np.inf), np.nextafter(edges, -np.inf)])
    rng = np.random.default_rng(7)
    spread = np.concatenate([rng.uniform(-6, 6, 2 * _ERF_CHUNK + 121), rng.uniform(-40, 40, 1000)])
    rng.shuffle(spread)
    x = np.concatenate([edges, spread])  # the edges and ~3 K random values checked alone
    whole = erf(x.reshape(3, -1)).reshape(-1)
    alone = np.array([erf(v[None])[0] for v in x[:3000]])
    assert whole[:3000].tobytes() == alone.tobytes()
    finite = np.isfinite(x)
    want = np.array([math.erf(v) for v in x[finite]])
    np.testing.assert_allclose(whole[finite], want, rtol=0, atol=2.3e-16)
    assert np.isnan(whole[np.isnan(x)]).all()
    assert (whole[np.isposinf(x)] == 1.0).all() and (whole[np.isneginf(x)] == -1.0).all()
    assert np.signbit(whole[(x == 0) & np.signbit(x)]).all()


def test_gelu_erf_by_blocks_is_the_whole_array_formula():
    """special.gelu_erf (the vector unit's `gelu_erf`) runs block by block: bit for bit
    0.5 x (1 + erf(x / sqrt 2)) evaluated in float64 on the whole array and rounded once to
    fp32, on arrays of several blocks with random fp32 bit patterns (NaN, infinities,
    subnormals) and every region's edges, in any shape."""
    from infer.target.special import _ERF_CHUNK, erf, gelu_erf

    rng = np.random.default_rng(11)
    bits = rng.integers(0, 2**32, 3 * _ERF_CHUNK + 77, dtype=np.uint64).astype(np.uint32)
    edges = np.array([0.0, -0.0, 0.5, -0.5, 4.0, -4.0, 27.0, -27.0, 1e-40, -1e-40], np.float32)
    edges = edges * np.float32(math.sqrt(2))  # erf's region edges, as gelu_erf scales them
    x = np.concatenate([bits.view(np.float32), edges, np.nextafter(edges, np.float32(np.inf)),
                        rng.standard_normal(_ERF_CHUNK).astype(np.float32) * 3])
    with np.errstate(all="ignore"):
        x64 = x.astype(np.float64)
        want = (0.5 * x64 * (1.0 + erf(x64 * (1.0 / math.sqrt(2.0))))).astype(np.float32)
        got = gelu_erf(x)
        assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
        assert gelu_erf(x[: 6 * 1000].reshape(2, 3, 1000)).tobytes() == want[: 6 * 1000].tobytes()


@pytest.mark.parametrize("mode", ["fast", "reference"])
def test_rdot_is_a_mul_then_an_rsum(mode):
    """vec.rdot's bits are those of a `mul` into an fp32 tile followed by an `rsum` (products
    rounded to fp32, summed as rsum sums), for a tile, a broadcast row (a decode step's query
    against its keys), a column and an immediate b, bf16 operands, and specials (inf - inf is
    NaN, which is the default NaN; -0 products)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((9, 64)).astype(np.float32)
    y = rng.standard_normal((9, 64)).astype(np.float32)
    x[0, :3] = [np.inf, -0.0, 3e38]
    y[0, :3] = [-1.0, 5.0, 3e38]  # -inf, -0 and an overflow to inf: the row sums to NaN
    x[1, 5], y[1, 5] = np.nan, 1.0
    x[2] = -0.0  # a row of -0 products: rsum gives +0 from its initial value, and so must rdot
    row = rng.standard_normal((1, 64)).astype(np.float32)
    col = rng.standard_normal((9, 1)).astype(np.float32)

    def mul_then_rsum(b, bmode, imm=0.0, at="fp32", bt=None):
        products = vec_run("mul", x, b, bmode, imm, at=at, bt=bt, mode=mode)
        return vec_run("rsum", products, mode=mode)

    for b, bmode, imm in ((y, "tile", 0.0), (row, "row", 0.0), (col, "col", 0.0), (None, "imm", 0.375)):
        got = vec_run("rdot", x, b, bmode, imm, mode=mode)
        assert got.tobytes() == mul_then_rsum(b, bmode, imm).tobytes(), bmode
    assert np.isnan(vec_run("rdot", x, y, mode=mode)[:2]).all()
    got = vec_run("rdot", x, y, at="bf16", bt="bf16", mode=mode)
    assert got.tobytes() == mul_then_rsum(y, "tile", at="bf16", bt="bf16").tobytes()
    finite = np.isfinite(x).all(1) & np.isfinite(y).all(1)
    np.testing.assert_allclose(vec_run("rdot", x, y, mode=mode)[finite, 0],
                               (x.astype(np.float64) * y).sum(1)[finite], rtol=1e-5, atol=1e-5)


def test_a_config_without_rdot_gives_it_rsums_cost():
    """A hardware config written before vec.rdot existed loads: rdot costs what rsum does."""
    import tomllib

    from infer.target.hw import config_path, from_dict

    data = tomllib.loads(config_path("edge").read_text())
    data["vector"]["cost"]["rsum"] = 3
    del data["vector"]["cost"]["rdot"]
    assert from_dict(data, "old.toml").vector.cost["rdot"] == 3


def test_log_and_comparisons():
    x = np.array([[1.0, 0.5, 0.0, -1.0, np.inf, np.nan, 2.0, -0.0]], np.float32)
    y = np.array([[1.0, 1.5, -0.0, -2.0, np.inf, np.nan, np.nan, 0.0]], np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(vec_run("log", x), np.log(x))
    # 1 where the comparison holds, 0 elsewhere (NaN compares false; -0 == +0)
    np.testing.assert_array_equal(vec_run("eq", x, y), (x == y).astype(np.float32))
    np.testing.assert_array_equal(vec_run("lt", x, y), (x < y).astype(np.float32))
    np.testing.assert_array_equal(vec_run("le", x, y), (x <= y).astype(np.float32))
    np.testing.assert_array_equal(vec_run("lt", x, None, "imm", imm=0.5), (x < 0.5).astype(np.float32))
    c = np.array([[0.5]], np.float32)
    np.testing.assert_array_equal(vec_run("le", x, c, "col"), (x <= 0.5).astype(np.float32))
    # integers compare exactly
    a = np.array([[2**31 - 1, -5, 7]], np.int64)
    b = np.array([[2**31 - 2, -5, 8]], np.int64)
    assert vec_run("lt", a, b, dt="int32", at="int32").tolist() == [[0, 0, 1]]
    assert vec_run("eq", a, b, dt="int32", at="int32").tolist() == [[0, 1, 0]]


@pytest.mark.parametrize("mode", ["fast", "reference"])
def test_mask_keeps_a_where_b_is_nonzero_and_writes_minus_zero_elsewhere(mode):
    """vec.mask: a where b != 0 (NaN counts), -0 elsewhere, whatever a holds there (inf, NaN);
    the sum of two complementary masks is an exact select, signed zeros and infinities kept."""
    x = np.array([[1.5, np.inf, np.nan, -0.0, -np.inf, 3e38, 2.0, -7.0]], np.float32)
    y = np.array([[np.inf, 2.0, -0.0, 5.0, np.nan, -1.0, -0.0, 0.0]], np.float32)
    c = np.array([[1.0, 0.0, 0.0, 1.0, 1.0, -0.0, np.nan, 2.0]], np.float32)
    take = np.array([True, False, False, True, True, False, True, True])
    kept = vec_run("mask", x, c, mode=mode)
    want = np.where(take, x, np.float32(-0.0))
    assert kept.tobytes() == want.tobytes()
    others = vec_run("mask", y, vec_run("eq", c, None, "imm", imm=0.0, mode=mode), mode=mode)
    selected = vec_run("add", kept, others, mode=mode)
    assert selected.tobytes() == np.where(take, x, y).tobytes()  # no 0 * inf = NaN, -0 kept
    # a row and a column condition, an immediate, a bf16 destination, integers
    row = np.array([[0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0]], np.float32)
    x2 = np.vstack([x, x[:, ::-1]])
    assert vec_run("mask", x2, row, "row", mode=mode).tobytes() == np.where(
        row != 0, x2, np.float32(-0.0)).tobytes()
    col = np.array([[0.0], [1.0]], np.float32)
    assert vec_run("mask", x2, col, "col", mode=mode).tobytes() == np.where(
        col != 0, x2, np.float32(-0.0)).tobytes()
    assert vec_run("mask", x, None, "imm", imm=0.0, mode=mode).tobytes() == np.full_like(x, -0.0).tobytes()
    half = vec_run("mask", x, c, dt="bf16", mode=mode).astype(np.float32)
    assert half.tobytes() == want.astype(ml_dtypes.bfloat16).astype(np.float32).tobytes()
    a = np.array([[2**31 - 1, -5, 7]], np.int64)
    assert vec_run("mask", a, np.array([[3, 0, -1]], np.int64), dt="int32", at="int32",
                   mode=mode).tolist() == [[2**31 - 1, 0, 7]]


def test_a_config_without_mask_gives_it_muls_cost():
    """A hardware config written before vec.mask existed loads: mask costs what mul does."""
    import tomllib

    from infer.target.hw import config_path, from_dict

    data = tomllib.loads(config_path("server").read_text())
    data["vector"]["cost"]["mul"] = 2
    del data["vector"]["cost"]["mask"]
    assert from_dict(data, "old.toml").vector.cost["mask"] == 2


@pytest.mark.parametrize("mode", ["fast", "reference"])
def test_add_relu_is_an_add_into_fp32_then_a_relu(mode):
    """vec.add_relu: the bits of `add` into an fp32 tile followed by `relu` of it, for every b
    mode and a bf16 destination: NaN sums the default NaN, infinities, signed zeros, sums that
    round to fp32 (1 + 2^-30 is 1) before the max."""
    x = np.array([[1.5, np.inf, np.nan, -0.0, -np.inf, 3e38, 1.0, -7.0],
                  [-1.5, -np.inf, 2.0, -0.0, np.inf, 3e38, -1.0, 7.0]], np.float32)
    y = np.array([[-1.5, -np.inf, 1.0, -0.0, 5.0, 3e38, 2.0**-30, 6.0],
                  [1.0, 2.0, -0.0, 0.0, -np.inf, -3e38, 1.0, -8.0]], np.float32)
    row, col = y[:1], y[:, :1]
    for b, bmode, imm in ((y, "tile", 0.0), (row, "row", 0.0), (col, "col", 0.0), (None, "imm", -1.25)):
        for dt in ("fp32", "bf16"):
            total = vec_run("add", x, b, bmode, imm=imm, mode=mode)
            want = vec_run("relu", total, dt=dt, mode=mode)
            got = vec_run("add_relu", x, b, bmode, imm=imm, dt=dt, mode=mode)
            assert got.tobytes() == want.tobytes(), (bmode, dt, got, want)
    assert vec_run("add_relu", x, y, mode=mode)[0, 6] == np.float32(1.0)  # (the sum rounded first)


def test_a_config_without_add_relu_gives_it_adds_cost():
    import tomllib

    from infer.target.hw import config_path, from_dict

    data = tomllib.loads(config_path("edge").read_text())
    data["vector"]["cost"]["add"] = 3
    del data["vector"]["cost"]["add_relu"]
    assert from_dict(data, "old.toml").vector.cost["add_relu"] == 3


def test_int_ops_saturate_and_requant():
    a = np.array([[2**31 - 10, -(2**31) + 5, 100, -7]], np.int64)
    out = vec_run("add", a, np.array([[100, -100, 1, 1]]), dt="int32", at="int32")
    assert out.tolist() == [[2**31 - 1, -(2**31), 101, -6]]
    acc = np.array([[1000, -1000, 250, 3], [5, 6, 7, 8]], np.int64)
    sc = np.array([[0.1, 0.2, 0.5, 0.5]], np.float32)
    q = vec_run("requant", acc, sc, "row", dt="int8", at="int32", bt="fp32")
    ref = np.clip(np.rint(acc.astype(np.float32) * sc), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(q, ref)
    assert q[0].tolist() == [100, -128, 125, 2]  # 1.5 -> 2 (half to even)


def test_matmul_int8_saturates_and_counts():
    s = Simulator("edge")
    s.spad[0:256] = np.full(256, 127, np.uint8).view(np.uint8)  # int8 127
    s.acc[0:64] = np.full(16, 2**31 - 100, np.int32).view(np.uint8)
    c = s.run(Program.from_asm(
        "mx.loadw w=0, k=16, n=16, stride=16, dtype=int8\n"
        f"mx.matmul act=0, acc={ACC:#x}, m=1, astride=16, cstride=64, dtype=int8, accum=1\nhalt"),
        np.zeros(16, np.uint8))
    assert c.acc_saturations == 16
    assert (s.acc[0:64].view(np.int32) == 2**31 - 1).all()


# ------------------------------------------------------------------ timing
@pytest.mark.parametrize("cfg,int8_rows_per_cycle", [("server", 2), ("edge", 1)])
def test_matmul_streams_at_the_dtype_mac_rate(cfg, int8_rows_per_cycle):
    """matrix.macs_per_pe: an int8 matmul streams its rows at the config's int8 rate
    (twice bf16 on the server); its weight tile loads in half the bytes of bf16."""
    m = 512

    def busy(dtype):
        esz = 1 if dtype == "int8" else 2
        _, c = run(f"mx.loadw w=0, k=16, n=16, stride={16 * esz}, dtype={dtype}\n"
                   f"mx.matmul act=0, acc={ACC:#x}, m={m}, astride={16 * esz}, cstride=64, dtype={dtype}, accum=0\n"
                   "halt", np.zeros(16, np.uint8), cfg)
        return c.busy_by_engine()["matrix"], c.weight_load_cycles

    (bf16_busy, bf16_load), (int8_busy, int8_load) = busy("bf16"), busy("int8")
    hw = Simulator(cfg).cfg
    assert bf16_busy - int8_busy == m * hw.matrix.cycles_per_row - m * hw.matrix.cycles_per_row // int8_rows_per_cycle
    assert bf16_busy >= m * hw.matrix.cycles_per_row
    assert int8_load == -(-256 // hw.matrix.weight_load_bytes_per_cycle)
    assert bf16_load == -(-512 // hw.matrix.weight_load_bytes_per_cycle)


@pytest.mark.parametrize("mode", ["reference", "timing"])
def test_matrix_utilization_is_against_the_dtype_peak(mode):
    """A matmul stream on the server config keeps the array at its int8 peak (twice the bf16
    one): utilisation is measured against the dtype's own peak, so int8 stays below 100 %
    and a bf16 and an int8 stream of the same shape both read as the same busy array."""
    hw = Simulator("server").cfg
    k = n = hw.matrix.rows
    m, reps = 512, 16

    def counters(dtype):
        esz = 1 if dtype == "int8" else 2
        body = (f"mx.matmul act=0, acc={ACC:#x}, m={m}, astride={k * esz}, cstride={4 * n}, dtype={dtype}, "
                "accum=1\n") * reps
        _, c = run(f"mx.loadw w=0, k={k}, n={n}, stride={n * esz}, dtype={dtype}\n{body}halt",
                   np.zeros(k * n * esz, np.uint8), "server", mode=mode)
        return c

    bf16, int8 = counters("bf16"), counters("int8")
    assert int8.macs == bf16.macs == reps * m * k * n
    assert int8.macs_by_dtype == {"int8": int8.macs} and bf16.macs_by_dtype == {"bf16": bf16.macs}
    assert int8.cycles < bf16.cycles
    assert int8.macs / (hw.peak_macs_per_cycle * int8.cycles) > 1  # what the bf16 peak said
    assert int8.matrix_utilization == pytest.approx(int8.macs / (hw.macs_per_cycle("int8") * int8.cycles))
    assert bf16.matrix_utilization == pytest.approx(bf16.macs / (hw.macs_per_cycle("bf16") * bf16.cycles))
    assert 0.9 < int8.matrix_utilization <= 1 and 0.9 < bf16.matrix_utilization <= 1


def test_double_buffering_is_faster_and_gemm_near_peak():
    k2 = kernels.gemm("edge", 256, 128, 256, double_buffer=True)
    k1 = kernels.gemm("edge", 256, 128, 256, double_buffer=False)
    c2 = Simulator("edge").run(k2.program, k2.dram)
    c1 = Simulator("edge").run(k1.program, k1.dram)
    assert c1.cycles > 1.1 * c2.cycles
    assert c2.matrix_utilization > 0.85
    assert c2.macs == c1.macs == 256 * 128 * 256


def test_dram_bandwidth_bound_transfer():
    cfg = Simulator("edge").cfg
    n = 64 * 1024
    _, c = run(f"dma.load dram=0, local=0, n0={n}, n1=1, n2=1\nhalt",
               np.zeros(n, np.uint8))
    ideal = n / cfg.dram.bytes_per_cycle
    assert ideal <= c.cycles <= ideal + cfg.dram.latency_cycles + 20
    assert c.dram_read_bytes == n
    # short rows pay whole bursts
    _, c2 = run(f"dma.load dram=0, local=0, n0=16, n1={n // 16}, n2=1, ds1=16, ls1=16\nhalt",
                np.zeros(n, np.uint8))
    assert c2.cycles > 3 * c.cycles


def test_semaphore_serialises_engines():
    base = "dma.load dram=0, local=0, n0=4096, n1=1, n2=1{}\n" \
           "vec.relu dst=0x2000, a=0, rows=64, cols=16, dstride=64, astride=64, dt=fp32, " \
           "at=fp32{}\nhalt"
    _, free = run(base.format("", ""), np.zeros(4096, np.uint8))
    _, synced = run(base.format(", signal=s1", ", wait=s1"), np.zeros(4096, np.uint8))
    assert synced.cycles > free.cycles
    assert synced.stalls.get("semaphore_vector", 0) > 0


@pytest.mark.parametrize("mode", ["reference", "fast", "timing"])
def test_second_wait_holds_its_engine_not_the_front_end(mode):
    """`wait2`: the vector op waits for both loads' tokens (it starts after the long load
    completes and computes on its data), and the front end goes on dispatching: an independent
    store after it starts before the long load completes. With the second wait as a front-end
    `nop wait=` instead, that store waits for the long load too."""
    long_load = "dma.load dram=0, local=0, n0=4096, n1=1, n2=1, signal=s1\n"
    short_load = "dma.load dram=4096, local=0x1000, n0=64, n1=1, n2=1, signal=s2\n"
    relu = ("vec.relu dst=0x2000, a=0, rows=64, cols=16, dstride=64, astride=64, dt=fp32, "
            "at=fp32, wait=s2{}, signal=s3\n")
    stores = ("dma.store dram=8192, local=0x3000, n0=64, n1=1, n2=1\n"
              "dma.store dram=12288, local=0x2000, n0=4096, n1=1, n2=1, wait=s3\nhalt")
    values = np.linspace(-1, 1, 1024, dtype=np.float32)
    dram = np.zeros(16384, np.uint8)
    dram[:4096] = np.frombuffer(values.tobytes(), np.uint8)
    timelines = {}
    for name, text in (("wait2", long_load + short_load + relu.format(", wait2=s1") + stores),
                       ("nop", long_load + short_load + "nop wait=s1\n" + relu.format("") + stores)):
        d = dram.copy()
        c = Simulator("edge").run(Program.from_asm(text), d, trace=True, mode=mode)
        timelines[name] = {pc: (start, start + duration) for _, _, start, duration, pc in c.log.expand()}
        if mode != "timing":
            assert d[12288:].tobytes() == np.maximum(values, 0).tobytes()
    w2, nop = timelines["wait2"], timelines["nop"]
    long_done = w2[0][1]
    assert w2[2][0] >= long_done  # the relu waited for the long load's token
    assert w2[3][0] < long_done  # the independent store was dispatched meanwhile
    assert nop[4][0] >= nop[0][1]  # behind the front-end nop, it waited for the long load


def test_counters_and_trace(tmp_path):
    k = kernels.gemv("edge", 64, 64)
    c = Simulator("edge").run(k.program, k.dram, trace=True)
    d = c.as_dict()
    assert d["macs"] == 64 * 64 and d["dram_read_bytes"] >= 64 * 64
    assert d["busy_cycles"]["matrix"] > 0 and d["cycles"] == c.cycles
    assert "MACs" in c.summary()
    path = tmp_path / "t.json"
    c.to_chrome_trace(path)
    doc = json.loads(path.read_text())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"scalar", "dma_load", "dma_store", "matrix", "vector"}
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == sum(c.per_engine_instructions[1:])
    assert all(e["dur"] > 0 for e in xs)


# ------------------------------------------------------------------ lds: an index from local memory
def test_lds_reads_local_int32_at_scratchpad_latency():
    """`lds` loads the sign-extended int32 at a scratchpad or accumulator address into a
    register; the front end spends 1 + scalar.local_load_cycles on it instead of `ld`'s
    1 + dram.latency_cycles, and it reads no DRAM."""
    dram = np.zeros(1024, np.uint8)
    dram[0:8] = np.frombuffer(np.array([-5, 3], np.int32).tobytes(), np.uint8)
    text = """
        dma.load dram=0, local=0x40, n0=8, n1=1, n2=1, signal=s1
        nop wait=s1
        {load} rd=r1, addr={first}
        {load} rd=r2, addr={second}
        addi rd=r1, rs=r1, imm=0x105     # 0x100: -5 + 0x105
        muli rd=r2, rs=r2, imm=16        # 48
        vec.copy dst=r2+0, a=0x40, rows=1, cols=2, dt=int32, at=int32
        dma.store dram=r1+0, local=r2+0, n0=8, n1=1, n2=1
        halt
    """
    sim, c = run(text.format(load="lds", first="r0+0x40", second="r3+0x44"), dram,
                 regs={"r3": 0})
    assert list(np.frombuffer(dram[0x100:0x108].tobytes(), np.int32)) == [-5, 3]
    cfg = sim.cfg
    # the same program reading the two words from DRAM with `ld`: the two front-end loads
    # differ by exactly the latencies (everything after them waits for them)
    dram2 = dram.copy()
    dram2[0x100:0x108] = 0
    _, c_ld = run(text.format(load="ld", first="r0+0", second="r3+4"), dram2, regs={"r3": 0})
    assert dram2[0x100:0x108].tobytes() == dram[0x100:0x108].tobytes()
    assert c_ld.cycles - c.cycles == 2 * (cfg.dram.latency_cycles - cfg.scalar.local_load_cycles)
    assert c_ld.dram_read_bytes - c.dram_read_bytes == 8
    assert c.stalls["scalar_load"] == 2 * cfg.scalar.local_load_cycles
    # the accumulator is local memory too
    s2 = Simulator("edge")
    s2.acc[16:20] = np.frombuffer(np.int32(-2).tobytes(), np.uint8)
    s2.run(Program.from_asm(f"lds rd=r1, addr={ACC + 16:#x}\naddi rd=r1, rs=r1, imm=66\n"
                            "dma.store dram=r1+0, local=0, n0=1, n1=1, n2=1"), dram)
    assert dram[64] == s2.spad[0]


def test_lds_faults():
    fault("li rd=r1, imm=2\nlds rd=r2, addr=r1+0x40", "misaligned", "lds address 0x42")
    with pytest.raises(AsmError, match="addr = 262142 is not aligned to 4 bytes"):
        Program.from_asm("lds rd=r2, addr=0x3fffe")  # the encoding's own check
    fault("li rd=r1, imm=0x40000\nlds rd=r2, addr=r1+0", "out-of-bounds",
          "exceeds the scratchpad")
    fault("li rd=r1, imm=-8\nlds rd=r2, addr=r1+0", "out-of-bounds", "negative")
