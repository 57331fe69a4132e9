"""The npu dialect: generated from the ISA table, custom/generic round trip, verifiers,
emitters (parsed with xDSL's Context + Parser directly)."""

import io

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError, VerifyException

from infer.dialects.npu import INSTR_OPS, NPU, ProgramOp, emit_npu_asm, emit_npu_bin
from infer.target import isa, kernels
from infer.target.asm import Program


def ctx() -> Context:
    c = Context()
    c.load_dialect(Builtin)
    c.load_dialect(NPU)
    return c


def parse(text):
    m = Parser(ctx(), text).parse_module()
    m.verify()
    return m


def show(op, generic=False):
    s = io.StringIO()
    Printer(stream=s, print_generic_format=generic).print_op(op)
    return s.getvalue()


def test_one_op_per_instruction():
    assert set(INSTR_OPS) == {d.name for d in isa.INSTRUCTIONS}
    assert {op.name for op in NPU.operations} == {"npu.program"} | {
        "npu." + d.name for d in isa.INSTRUCTIONS}


@pytest.mark.parametrize("cfg", ["edge", "server"])
def test_kernel_program_roundtrips_through_ir(cfg):
    prog = kernels.gemm(cfg, 32 if cfg == "edge" else 128, 64 if cfg == "edge" else 256,
                        32 if cfg == "edge" else 128).program
    op = ProgramOp.from_program(prog)
    op.verify()
    text = show(op)
    m = parse(text)
    assert show(m.body.block.first_op) == text
    m2 = parse(show(m, generic=True))
    assert show(m2.body.block.first_op) == text
    back = m2.body.block.first_op.to_program()
    assert back.to_bytes() == prog.to_bytes()
    s = io.StringIO()
    emit_npu_asm(m2, s)
    assert s.getvalue() == prog.to_asm()
    s = io.StringIO()
    emit_npu_bin(m2, s)
    assert Program.from_hex(s.getvalue()).to_bytes() == prog.to_bytes()


def test_verifier_messages():
    with pytest.raises(VerifyException, match="m must be positive"):
        parse("npu.program {\n npu.mx.matmul acc=0x2000000, m=0, dtype=int8\n}")
    with pytest.raises(VerifyException, match="not aligned to 4 bytes"):
        parse("npu.program {\n npu.mx.matmul acc=0x2000001, m=1, dtype=int8\n}")
    with pytest.raises(VerifyException, match="loop body runs past the end"):
        parse("npu.program {\n npu.loop count=2, body=2\n npu.nop\n}")


def test_parse_errors():
    with pytest.raises(ParseError, match="li has no field 'x'|expected"):
        parse("npu.program {\n npu.li rd=r1, x=2\n}")
    with pytest.raises(ParseError, match="register like r1"):
        parse("npu.program {\n npu.li rd=3\n}")
