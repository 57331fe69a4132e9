"""ISA table, encoding and the assembly round trip, for every instruction."""

import random

import pytest

from infer.target import isa
from infer.target.asm import AsmError, Program, assemble, disassemble, load_program, parse_instr
from infer.target.isa import EncodingError


def random_instr(d: isa.InstrDef, rng: random.Random) -> isa.Instr:
    for _ in range(1000):
        vals = {}
        for f in d.fields:
            if f.kind == "dtype":
                allowed = isa.MATMUL_DTYPES[:-1] if d.engine == "matrix" else isa.VECTOR_DTYPES
                v = isa.DTYPE_CODE[rng.choice(allowed)]
            elif f.kind in ("local_off", "stride", "dram_off") or f.name in ("w", "a", "b", "dst"):
                v = rng.randint(f.lo // 4, f.hi // 4) * 4
            elif f.name == "body":
                v = 1  # so the single-instruction program + a nop is well-formed
            elif f.kind == "count":
                v = rng.randint(1, f.hi)
            else:
                v = rng.randint(f.lo, f.hi)
            vals[f.name] = v
        sync = [rng.randint(0, isa.MAX_SEMAPHORES) for _ in range(4)]  # wait, signal, signal2, wait2
        if not isa.check(d, vals, *sync):
            return isa.Instr(d, tuple(vals[f.name] for f in d.fields), *sync)
    raise AssertionError(f"could not generate a valid {d.name}")


def test_table_is_consistent():
    assert len({d.opcode for d in isa.INSTRUCTIONS}) == len(isa.INSTRUCTIONS)
    for d in isa.INSTRUCTIONS:
        assert isa.used_bits(d) <= isa.WORD_BITS
        assert d.engine in isa.ENGINES
        names = [f.name for f in d.fields]
        assert len(names) == len(set(names)), d.name
        for f in d.fields:
            if f.base:
                assert d.field(f.base).kind == "reg"


@pytest.mark.parametrize("d", isa.INSTRUCTIONS, ids=lambda d: d.name)
def test_every_instruction_roundtrips(d):
    rng = random.Random(d.opcode)
    for _ in range(20):
        ins = random_instr(d, rng)
        w = isa.encode_word(ins)
        assert w < 1 << isa.WORD_BITS
        assert isa.decode_word(w) == ins
        text = Program([ins]).to_asm()
        assert parse_instr(text) == ins
        if d.name == "loop":
            text += "  nop\n"
        assert disassemble(assemble(text)) == text


def test_bad_encodings():
    with pytest.raises(EncodingError, match="unknown opcode 0xff"):
        isa.decode_word(0xFF)
    with pytest.raises(EncodingError, match="reserved bits set"):
        isa.decode_word(0x01 | (1 << 200))
    with pytest.raises(EncodingError, match="reserved dtype"):
        w = isa.encode_word(isa.make("vec.relu", rows=1, cols=1))
        d = isa.BY_NAME["vec.relu"]
        pos = dict((f.name, p) for f, p in d.layout)["dt"]
        isa.decode_word(w | (7 << pos))
    with pytest.raises(EncodingError, match="not an NPU binary"):
        Program.from_bytes(b"hello")
    with pytest.raises(EncodingError, match="truncated"):
        Program.from_bytes(assemble("halt\n")[:-1])
    # a version-1 binary (its header before `wait2`) is refused, not decoded into other fields
    old = bytearray(assemble("halt\n"))
    old[8:12] = (1).to_bytes(4, "little")
    with pytest.raises(EncodingError, match="unsupported NPU binary version 1 .*reads version 2"):
        Program.from_bytes(bytes(old))


def test_make_checks_ranges_and_alignment():
    with pytest.raises(EncodingError, match=r"m = 0 .*|m must be positive"):
        isa.make("mx.matmul", m=0)
    with pytest.raises(EncodingError, match="not aligned to 4 bytes"):
        isa.make("mx.matmul", m=1, acc=2)
    with pytest.raises(EncodingError, match="out of range"):
        isa.make("li", rd=32)
    with pytest.raises(EncodingError, match="requant needs dt = int8"):
        isa.make("vec.requant", rows=1, cols=1, dt=isa.DTYPE_CODE["fp32"])
    # a second wait only beside a first (the engines take `wait`, then `wait2`)
    with pytest.raises(EncodingError, match="wait2 = s3 without a wait"):
        isa.make("vec.relu", wait2=3, rows=1, cols=1)
    with pytest.raises(AsmError, match="line 1: .*wait2 = s3 without a wait"):
        Program.from_asm("vec.relu dst=0, a=0, rows=1, cols=1, wait2=s3")
    assert isa.make("vec.relu", wait=1, wait2=3, rows=1, cols=1).wait2 == 3


def test_asm_errors_name_the_line():
    with pytest.raises(AsmError, match="line 2: unknown instruction 'frob'"):
        Program.from_asm("nop\nfrob x=1\n")
    with pytest.raises(AsmError, match="line 1: li has no field 'x'"):
        Program.from_asm("li x=1")
    with pytest.raises(AsmError, match="register like r1"):
        Program.from_asm("li rd=7")
    with pytest.raises(EncodingError, match="loop body runs past the end"):
        Program.from_asm("loop count=2, body=3\nnop\n")


def test_asm_syntax_forms():
    p = Program.from_asm("""
        # comment
        li rd=r3, imm=0x10          ; trailing comment
        dma.load dram=0x40, local=r3+16, n0=4, n1=1, n2=1
        vec.mul dst=0, a=0, rows=1, cols=1, dt=fp32, at=fp32, bt=fp32, bmode=imm, imm=-inf
        """)
    assert p.instrs[1]["dram"] == 0x40 and p.instrs[1]["local_base"] == 3
    assert "imm=0xff800000" in p.to_asm()
    assert load_program(p.to_hex()).to_asm() == p.to_asm()
    assert load_program(p.to_bytes()).to_asm() == p.to_asm()


def test_docs_encoding_section_matches_table():
    from pathlib import Path

    from infer.target import isa_doc

    doc = Path(__file__).resolve().parents[3] / "docs" / "isa.md"
    assert isa_doc.generated_section(doc.read_text()) == isa_doc.render(), (
        "docs/isa.md is stale: run python -m infer.target.isa_doc docs/isa.md")
    for d in isa.INSTRUCTIONS:
        assert f"`{d.name}` — opcode `{d.opcode:#04x}`" in doc.read_text()
