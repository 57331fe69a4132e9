"""Assembly text, binary container and the `Program` object.

Assembly syntax, one instruction per line (`#` or `;` start a comment):

    mnemonic field=value, field=value, ... [, wait=sN] [, signal=sN]

Values by field kind: registers `r5`; semaphores `s3`; a base-register + offset pair prints
as one operand `name=r3+0x100` (`name=0x100` means base r0); dtypes by name (`int8`, `bf16`,
`fp32`, ...); bmode `tile|row|col|imm`, block format `q4_0|q4_1|q8_0` and block axis
`col|row` by name; fp32 immediates as a decimal float (`1.5`, `-inf`) or
`0x...` raw bits; everything else an integer (decimal or 0x hex). Omitted fields are 0.

Binary container (`.bin`): 16-byte header `b"NPUBIN\\0\\0"`, u32 format version (1), u32
instruction count, then one 32-byte little-endian word per instruction (see isa.py).
Hex text (`emit_npu_bin`): one instruction per line, the 256-bit word as 64 hex digits, most
significant digit first.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from infer.target import isa
from infer.target.isa import EncodingError, Instr

MAGIC = b"NPUBIN\0\0"
#: 2 since the instruction header gained `wait2` (its fields moved up 5 bits): a version-1
#: binary decodes to other instructions, so it is refused
VERSION = 2
HEADER = struct.Struct("<8sII")


class AsmError(ValueError):
    pass


# ----------------------------------------------------------------------------- formatting
def format_value(f: isa.FieldDef, v: int, base: int | None = None) -> str:
    if f.base is not None:
        off = hex(v) if f.kind in ("dram_off", "local_off") else str(v)
        if off.startswith("-"):
            return f"r{base}-{off[1:]}"
        return f"r{base}+{off}"
    if f.kind == "reg":
        return f"r{v}"
    if f.kind == "sem":
        return f"s{v}"
    if f.kind == "dtype":
        return isa.DTYPES[v][0]
    if f.kind in isa.ENUM_KINDS:
        return isa.ENUM_KINDS[f.kind][v]
    if f.kind == "f32":
        x = isa.bits_f32(v)
        if math.isfinite(x) and isa.f32_bits(x) == v:
            short = str(np.float32(x))  # shortest text that round-trips through fp32
            return short if isa.f32_bits(float(short)) == v else repr(x)
        return hex(v)
    return str(v)


def format_operands(ins: Instr) -> str:
    """The operand part of an instruction's assembly (shared with the npu dialect)."""
    vals = ins.as_dict()
    parts = []
    for f in ins.d.fields:
        if f.kind == "reg" and any(g.base == f.name for g in ins.d.fields):
            continue
        if f.omit_zero and not vals[f.name]:
            continue
        parts.append(f"{f.name}={format_value(f, vals[f.name], vals.get(f.base or ''))}")
    if ins.wait:
        parts.append(f"wait=s{ins.wait}")
    if ins.wait2:
        parts.append(f"wait2=s{ins.wait2}")
    if ins.signal:
        parts.append(f"signal=s{ins.signal}")
    if ins.signal2:
        parts.append(f"signal2=s{ins.signal2}")
    return ", ".join(parts)


def format_instr(ins: Instr) -> str:
    ops = format_operands(ins)
    return f"{ins.d.name} {ops}" if ops else ins.d.name


# ----------------------------------------------------------------------------- parsing
_REG_RE = re.compile(r"^r(\d+)$")
_SEM_RE = re.compile(r"^s(\d+)$")
_PAIR_RE = re.compile(r"^(?:r(\d+))?\s*(?:([+-])?\s*([0-9][0-9a-fA-Fx_]*))?$")


def parse_value(d: isa.InstrDef, name: str, text: str) -> dict[str, int]:
    """Parse one `name=value` operand into field values (a pair yields two fields)."""
    text = text.strip()
    if name in ("wait", "wait2", "signal", "signal2"):
        m = _SEM_RE.match(text)
        if not m:
            raise AsmError(f"{name} expects a semaphore like s1, got '{text}'")
        return {name: int(m.group(1))}
    try:
        f = d.field(name)
    except KeyError:
        raise AsmError(f"{d.name} has no field '{name}' (fields: "
                       f"{', '.join(_visible_fields(d))})") from None
    try:
        if f.base is not None:
            m = _PAIR_RE.match(text)
            if not m or (m.group(1) is None and m.group(3) is None):
                raise AsmError(f"{name} expects rN+offset, got '{text}'")
            reg = int(m.group(1) or 0)
            off = int(m.group(3), 0) if m.group(3) else 0
            if m.group(2) == "-":
                off = -off
            elif m.group(1) is not None and m.group(3) is not None and m.group(2) is None:
                raise AsmError(f"{name} expects rN+offset, got '{text}'")
            return {f.base: reg, name: off}
        if f.kind == "reg":
            m = _REG_RE.match(text)
            if not m:
                raise AsmError(f"{name} expects a register like r1, got '{text}'")
            return {name: int(m.group(1))}
        if f.kind == "dtype":
            if text not in isa.DTYPE_CODE:
                raise AsmError(f"{name}: unknown dtype '{text}'")
            return {name: isa.DTYPE_CODE[text]}
        if f.kind in isa.ENUM_KINDS:
            names = isa.ENUM_KINDS[f.kind]
            codes = {n: c for c, n in names.items() if not n.startswith("reserved")}
            if text not in codes:
                raise AsmError(f"{name}: unknown {f.kind} '{text}' ({', '.join(codes)})")
            return {name: codes[text]}
        if f.kind == "f32":
            if text.lower().startswith("0x"):
                return {name: int(text, 16)}
            return {name: isa.f32_bits(float(text))}
        return {name: int(text, 0)}
    except (ValueError, OverflowError) as e:
        if isinstance(e, AsmError):
            raise
        raise AsmError(f"{name}: bad value '{text}'") from None


def _visible_fields(d: isa.InstrDef) -> list[str]:
    bases = {f.base for f in d.fields if f.base}
    return [f.name for f in d.fields if f.name not in bases]


def parse_instr(line: str) -> Instr:
    line = line.strip()
    mnemonic, _, rest = line.partition(" ")
    d = isa.BY_NAME.get(mnemonic)
    if d is None:
        raise AsmError(f"unknown instruction '{mnemonic}'")
    values: dict[str, int] = {f.name: 0 for f in d.fields}
    seen: set[str] = set()
    rest = rest.strip()
    if rest:
        for item in rest.split(","):
            key, eq, val = item.partition("=")
            key = key.strip()
            if not eq or not key:
                raise AsmError(f"expected name=value, got '{item.strip()}'")
            if key in seen:
                raise AsmError(f"field '{key}' given twice")
            seen.add(key)
            values.update(parse_value(d, key, val))
    wait = values.pop("wait", 0)
    signal = values.pop("signal", 0)
    signal2 = values.pop("signal2", 0)
    wait2 = values.pop("wait2", 0)
    errs = isa.check(d, values, wait, signal, signal2, wait2)
    if errs:
        raise AsmError(f"{d.name}: " + "; ".join(errs))
    return Instr(d, tuple(values[f.name] for f in d.fields), wait, signal, signal2, wait2)


# ----------------------------------------------------------------------------- program
@dataclass
class Program:
    """A decoded NPU program: the instruction list plus free-form metadata."""

    instrs: list[Instr] = field(default_factory=list)
    meta: dict[str, object] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.instrs)

    # text
    @staticmethod
    def from_asm(text: str) -> Program:
        out: list[Instr] = []
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = re.split(r"[#;]", raw, maxsplit=1)[0].strip()
            if not line:
                continue
            try:
                out.append(parse_instr(line))
            except AsmError as e:
                raise AsmError(f"line {lineno}: {e}") from None
        p = Program(out)
        p.check_structure()
        return p

    def to_asm(self) -> str:
        lines = []
        depth_ends: list[int] = []
        for i, ins in enumerate(self.instrs):
            while depth_ends and depth_ends[-1] <= i:
                depth_ends.pop()
            lines.append("  " * len(depth_ends) + format_instr(ins))
            if ins.d.name == "loop":
                depth_ends.append(i + 1 + ins["body"])
        return "\n".join(lines) + "\n"

    # binary
    def code(self) -> bytes:
        return isa.encode(self.instrs)

    def to_bytes(self) -> bytes:
        return HEADER.pack(MAGIC, VERSION, len(self.instrs)) + self.code()

    @staticmethod
    def from_bytes(data: bytes) -> Program:
        if len(data) < HEADER.size or data[:8] != MAGIC:
            raise EncodingError("not an NPU binary (bad magic)")
        _, version, count = HEADER.unpack_from(data)
        if version != VERSION:
            raise EncodingError(f"unsupported NPU binary version {version} (this infer reads version "
                                f"{VERSION}, whose instruction header holds `wait2`); assemble or compile it again")
        body = data[HEADER.size:]
        if len(body) != count * isa.WORD_BYTES:
            raise EncodingError(f"NPU binary truncated: header says {count} instructions, "
                                f"{len(body)} bytes follow")
        p = Program(isa.decode(body))
        p.check_structure()
        return p

    def to_hex(self) -> str:
        return "".join(f"{isa.encode_word(i):064x}\n" for i in self.instrs)

    @staticmethod
    def from_hex(text: str) -> Program:
        words = []
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.split("//")[0].split("#")[0].strip()
            if not line:
                continue
            if not re.fullmatch(r"[0-9a-fA-F]{1,64}", line):
                raise EncodingError(f"line {lineno}: expected a 256-bit hex word, got '{line}'")
            words.append(int(line, 16))
        out = []
        for i, w in enumerate(words):
            try:
                out.append(isa.decode_word(w))
            except EncodingError as e:
                err = EncodingError(f"instruction {i}: {e}")
                err.index, err.word, err.cause = i, w, str(e)
                raise err from None
        p = Program(out)
        p.check_structure()
        return p

    def check_structure(self) -> None:
        """Loops must end inside the program and nest properly."""
        ends: list[int] = []
        n = len(self.instrs)
        for i, ins in enumerate(self.instrs):
            while ends and ends[-1] <= i:
                ends.pop()
            if ins.d.name == "loop":
                end = i + 1 + ins["body"]
                if end > n:
                    raise EncodingError(f"instruction {i} ({format_instr(ins)}): loop body runs "
                                        f"past the end of the program ({n} instructions)")
                if ends and end > ends[-1]:
                    raise EncodingError(f"instruction {i} ({format_instr(ins)}): loop body "
                                        "crosses the end of the enclosing loop")
                ends.append(end)


def assemble(text: str) -> bytes:
    """Assembly text -> binary container bytes."""
    return Program.from_asm(text).to_bytes()


def disassemble(data: bytes) -> str:
    """Binary container bytes (or hex text) -> assembly text."""
    if data[:8] == MAGIC:
        return Program.from_bytes(data).to_asm()
    return Program.from_hex(data.decode("ascii", errors="replace")).to_asm()


def load_program(data: bytes | str) -> Program:
    """Binary container, hex text, or assembly text -> Program."""
    if isinstance(data, bytes):
        if data[:8] == MAGIC:
            return Program.from_bytes(data)
        data = data.decode("utf-8", errors="replace")
    stripped = [ln.strip() for ln in data.splitlines() if ln.strip() and not ln.startswith("#")]
    if stripped and all(re.fullmatch(r"[0-9a-fA-F]{64}", ln) for ln in stripped):
        return Program.from_hex(data)
    return Program.from_asm(data)


# ----------------------------------------------------------------------------- builder
class Builder:
    """Python-side program construction: `b.emit("mx.matmul", act=..., ...)`,
    `with b.loop(count=4): ...`."""

    def __init__(self) -> None:
        self.instrs: list[Instr] = []

    def emit(self, name: str, wait: int = 0, signal: int = 0, signal2: int = 0, wait2: int = 0,
             **values: int) -> int:
        self.instrs.append(isa.make(name, wait, signal, signal2, wait2, **values))
        return len(self.instrs) - 1

    def __getattr__(self, name: str):  # b.dma_load(...), b.vec_add(...), b.mx_matmul(...)
        mnem = name.replace("_", ".", 1) if name.split("_", 1)[0] in ("dma", "mx", "vec") \
            else name
        if mnem not in isa.BY_NAME:
            raise AttributeError(name)
        return lambda **kw: self.emit(mnem, **kw)

    @contextmanager
    def loop(self, count: int = 0, count_base: int = 0) -> Iterator[None]:
        idx = self.emit("loop", count=count, count_base=count_base, body=1)
        yield
        body = len(self.instrs) - idx - 1
        if body == 0:
            self.emit("nop")
            body = 1
        self.instrs[idx] = isa.make("loop", count=count, count_base=count_base, body=body)

    def program(self, **meta: object) -> Program:
        p = Program(list(self.instrs), dict(meta))
        p.check_structure()
        return p
