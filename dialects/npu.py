"""The `npu` dialect: one op per NPU instruction, generated from the ISA table
(`infer.target.isa.INSTRUCTIONS`), inside an `npu.program` container.

    npu.program {
      npu.li rd=r1, imm=5
      npu.loop count=r1+0, body=1
      npu.mx.matmul act=r1+0x0, acc=r0+0x2000000, m=16, ..., wait=s1, signal=s2
      npu.halt
    }

Every instruction field is an i64 integer property (enums by their code; fp32 immediates by
their bit pattern); `wait`/`signal`/`signal2` are optional properties (absent = 0). The custom
syntax is the assembly syntax of `infer.target.asm`. Hardware loops are the flat `npu.loop`
instruction (body = the next `body` ops), exactly as in the binary, so IR <-> binary is 1:1.

Emission: `emit_npu_asm(module, stream)` writes assembly text (one block per program);
`emit_npu_bin(module, stream)` writes each instruction's 256-bit word as 64 hex digits per line
(the raw .bin container is `Program.to_bytes()`).
"""

from __future__ import annotations

import functools

from typing import IO, ClassVar

from xdsl.dialects.builtin import I64, IntegerAttr, IntegerType, ModuleOp
from xdsl.ir import Block, Dialect, Operation, Region
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    region_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, NoTerminator
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.mlir_lexer import MLIRTokenKind

from infer.target import isa
from infer.target.asm import AsmError, Program, format_operands, parse_value
from infer.target.isa import EncodingError, Instr

_SYNC = ("wait", "signal", "signal2", "wait2")


@functools.lru_cache(maxsize=1 << 16)
def _i64(v: int) -> IntegerAttr:
    # attributes are immutable, so one instance per value serves every instruction (building and
    # verifying a fresh IntegerAttr per field was most of tile-to-npu's time on ResNet-50)
    return IntegerAttr(v, IntegerType(64))


class NpuInstrOp(IRDLOperation):
    """One instruction: an op generated from its `infer.target.isa.InstrDef`, whose
    fields are the op's i64 properties, printed and parsed in the assembly syntax."""

    ISA_DEF: ClassVar[isa.InstrDef]

    # ---------------------------------------------------------------- ISA view
    def field_values(self) -> dict[str, int]:
        out = {}
        for f in self.ISA_DEF.fields:
            a = self.properties.get(f.name)
            if not isinstance(a, IntegerAttr):
                raise VerifyException(f"{self.name}: missing integer property '{f.name}'")
            out[f.name] = a.value.data
        return out

    def sync(self) -> tuple[int, int, int, int]:
        props = self.properties
        vals = []
        for s in _SYNC:
            a = props.get(s)
            vals.append(0 if a is None else a.value.data if a.__class__ is IntegerAttr or isinstance(a, IntegerAttr)
                        else 0)
        return vals[0], vals[1], vals[2], vals[3]

    def to_instr(self) -> Instr:
        props = self.properties
        values = []
        for name in self.ISA_DEF.field_names:  # (per instruction of a program: kept lean)
            a = props.get(name)
            if a.__class__ is not IntegerAttr and not isinstance(a, IntegerAttr):  # missing: field_values' error
                v = self.field_values()
                values = [v[f.name] for f in self.ISA_DEF.fields]
                break
            values.append(a.value.data)
        w, s, s2, w2 = self.sync()
        return Instr(self.ISA_DEF, tuple(values), w, s, s2, w2)

    @classmethod
    def from_instr(cls, ins: Instr) -> NpuInstrOp:
        return cls.create(properties=_properties(ins))

    def verify_(self) -> None:
        """Every field fits its bit width and kind, and the instruction's own constraints
        (alignment, ranges) hold: `infer.target.isa.check`, the assembler's check."""
        w, s, s2, w2 = self.sync()
        errs = isa.check(self.ISA_DEF, self.field_values(), w, s, s2, w2)
        if errs:
            raise VerifyException(f"{self.name}: " + "; ".join(errs))

    # ---------------------------------------------------------------- custom syntax
    def print(self, printer: Printer) -> None:
        ops = format_operands(self.to_instr())
        if ops:
            printer.print_string(" " + _mlir_floats(ops))

    @classmethod
    def parse(cls, parser: Parser) -> NpuInstrOp:
        d = cls.ISA_DEF
        bases = {f.base for f in d.fields if f.base}
        keys = [f.name for f in d.fields if f.name not in bases] + list(_SYNC)
        values: dict[str, int] = {}
        first = True
        while True:
            pos = parser.pos
            key = parser.parse_optional_keyword_in(keys)
            if key is None:
                if not first:
                    parser.raise_error(f"expected a field of {d.name} (one of "
                                       f"{', '.join(keys)})")
                break
            first = False
            parser.parse_punctuation("=")
            text = _parse_operand_text(parser)
            if key in values:
                parser.raise_error(f"field '{key}' given twice", pos, parser.pos)
            try:
                values.update(parse_value(d, key, text))
            except AsmError as e:
                parser.raise_error(str(e), pos, parser.pos)
            if parser.parse_optional_punctuation(",") is None:
                break
        props = {f.name: _i64(values.get(f.name, 0)) for f in d.fields}
        for s in _SYNC:
            if values.get(s):
                props[s] = _i64(values[s])
        return cls.create(properties=props)


NpuInstrOp.__annotations__["ISA_DEF"] = ClassVar[isa.InstrDef]


def _properties(ins: Instr) -> dict[str, IntegerAttr]:
    """An instruction's op properties: every field, and the semaphores that are set."""
    props = dict(zip(ins.d.field_names, map(_i64, ins.values)))
    for s, v in zip(_SYNC, (ins.wait, ins.signal, ins.signal2, ins.wait2)):
        if v:
            props[s] = _i64(v)
    return props


def _mlir_floats(text: str) -> str:
    """repr() floats like 1e-05 are not MLIR float literals: spell them 1.0e-05."""
    import re

    return re.sub(r"(?<![\w.])(\d+)e([+-]?\d+)", r"\1.0e\2", text)


def _parse_operand_text(parser: Parser) -> str:
    """One operand: `ident`, `ident (+|-) number`, `[-] number`; returns its source text."""
    tok = parser._current_token  # noqa: SLF001 (spelling of hex vs decimal matters)
    parts: list[str] = []
    num = (MLIRTokenKind.INTEGER_LIT, MLIRTokenKind.FLOAT_LIT)
    if tok.kind == MLIRTokenKind.BARE_IDENT:
        parts.append(tok.text)
        parser._consume_token()  # noqa: SLF001
        tok = parser._current_token  # noqa: SLF001
        if tok.kind not in (MLIRTokenKind.PLUS, MLIRTokenKind.MINUS):
            return parts[0]
    if tok.kind in (MLIRTokenKind.PLUS, MLIRTokenKind.MINUS):
        parts.append(tok.text)
        parser._consume_token()  # noqa: SLF001
        tok = parser._current_token  # noqa: SLF001
    if tok.kind not in num:
        parser.raise_error("expected an operand value (register, number, or rN+offset)")
    parts.append(tok.text)
    parser._consume_token()  # noqa: SLF001
    return "".join(parts)


def _class_name(name: str) -> str:
    return "".join(p.capitalize() for p in name.replace(".", "_").split("_")) + "Op"


def _make_op(d: isa.InstrDef) -> type[NpuInstrOp]:
    ns: dict[str, object] = {"name": "npu." + d.name, "ISA_DEF": d,
                             "__annotations__": {"ISA_DEF": ClassVar[isa.InstrDef]},
                             "__doc__": f"{d.name} ({d.engine} engine, opcode {d.opcode:#04x}): "
                                        f"{d.doc}",
                             "traits": traits_def(HasParent(ProgramOp))}
    for f in d.fields:
        ns["f_" + f.name] = prop_def(IntegerAttr[I64], prop_name=f.name)
    for s in _SYNC:
        ns["f_" + s] = opt_prop_def(IntegerAttr[I64], prop_name=s)
    cls = type(_class_name(d.name), (NpuInstrOp,), ns)
    cls.__module__ = __name__
    return irdl_op_definition(cls)


@irdl_op_definition
class ProgramOp(IRDLOperation):
    """A whole NPU program: a single block of npu instruction ops, in program order."""

    name = "npu.program"
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(self, ops: list[Operation] | None = None,
                 attributes: dict | None = None) -> None:
        super().__init__(regions=[Region(Block(ops or []))], attributes=attributes or {})

    def instrs(self) -> list[NpuInstrOp]:
        return [op for op in self.body.block.ops if isinstance(op, NpuInstrOp)]

    def to_program(self) -> Program:
        return Program([op.to_instr() for op in self.instrs()],
                       {k: str(v) for k, v in self.attributes.items()})

    @staticmethod
    def from_program(p: Program) -> ProgramOp:
        # the properties of an instruction that repeats (~3/4 of ResNet-50's) are built once
        # (each op copies the dict it is given)
        properties: dict[tuple, dict[str, IntegerAttr]] = {}
        ops = []
        for i in p.instrs:
            key = (i.d.opcode, i.values, i.wait, i.signal, i.signal2, i.wait2)
            props = properties.get(key)
            if props is None:
                props = properties[key] = _properties(i)
            ops.append(INSTR_OPS[i.d.name].create(properties=props))
        return ProgramOp(ops)

    def verify_(self) -> None:
        """Only npu instructions, and a well-formed program (hardware loops nest and end
        inside the program: `Program.check_structure`)."""
        for op in self.body.block.ops:
            if not isinstance(op, NpuInstrOp):
                raise VerifyException(f"npu.program may only contain npu instructions, found "
                                      f"{op.name}")
        try:
            self.to_program().check_structure()
        except EncodingError as e:
            raise VerifyException(str(e)) from None

    def print(self, printer: Printer) -> None:
        if self.attributes:
            printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False,
                             print_empty_block=False)

    @classmethod
    def parse(cls, parser: Parser) -> ProgramOp:
        attrs = parser.parse_optional_attr_dict_with_keyword()
        region = parser.parse_region()
        if not region.blocks:
            region.add_block(Block())
        op = cls.create(regions=[region], attributes=attrs.data if attrs else {})
        return op


INSTR_OPS: dict[str, type[NpuInstrOp]] = {d.name: _make_op(d) for d in isa.INSTRUCTIONS}
globals().update({cls.__name__: cls for cls in INSTR_OPS.values()})

NPU = Dialect("npu", [ProgramOp, *INSTR_OPS.values()], [])


# ----------------------------------------------------------------------------- emission
def _programs(module: Operation) -> list[ProgramOp]:
    return [op for op in module.walk() if isinstance(op, ProgramOp)]


def emit_npu_asm(module: ModuleOp | Operation, stream: IO[str]) -> None:
    """Assembly text of every npu.program in the module (a `# program N` line before each
    when there are several)."""
    progs = _programs(module)
    for n, p in enumerate(progs):
        if len(progs) > 1:
            stream.write(f"# program {n}\n")
        stream.write(p.to_program().to_asm())


def emit_npu_bin(module: ModuleOp | Operation, stream: IO[str]) -> None:
    """Machine code as hex text: one 256-bit instruction word per line (64 hex digits, most
    significant first); `# program N` lines separate several programs."""
    progs = _programs(module)
    for n, p in enumerate(progs):
        if len(progs) > 1:
            stream.write(f"# program {n}\n")
        stream.write(p.to_program().to_hex())
