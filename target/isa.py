"""The NPU instruction set, defined once.

Every instruction is one `InstrDef` in `INSTRUCTIONS`: mnemonic, opcode, engine, an ordered list
of bit fields (width, signedness, kind) and a doc string. The encoder/decoder, the assembler and
disassembler (`infer.target.asm`), the simulator (`infer.target.sim`), the xDSL `npu` dialect
(`infer.dialects.npu`) and docs/isa.md all read this table.

Encoding: every instruction is one 256-bit word (32 bytes, little-endian in memory).
    bits [0, 8)    opcode
    bits [8, 13)   wait:   semaphore to wait on (decrement) before starting, 0 = none
    bits [13, 18)  signal: semaphore to signal (increment) on completion, 0 = none
    bits [18, 23)  signal2: a second semaphore to signal on completion, 0 = none
    bits [23, 28)  wait2:  a second semaphore to wait on before starting, 0 = none
    bits [28, ...) the instruction's fields, packed LSB-first in table order
All bits above the last field are reserved and must be zero.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

WORD_BITS = 256
WORD_BYTES = WORD_BITS // 8
HEADER_BITS = 28
OPCODE_BITS = 8
SEM_BITS = 5
MAX_SEMAPHORES = (1 << SEM_BITS) - 1  # s1..s31, s0 = "none"
REG_BITS = 5
MAX_REGISTERS = 1 << REG_BITS  # r0 (always zero) .. r31
LOCAL_ADDR_BITS = 26
#: Local (on-chip) address space: scratchpad at [0, ACC_BASE), accumulator at [ACC_BASE, 2*ACC_BASE)
ACC_BASE = 1 << 25
REG_MIN, REG_MAX = -(1 << 63), (1 << 63) - 1

ENGINES = ("scalar", "dma_load", "dma_store", "matrix", "vector")

# ----------------------------------------------------------------------------- data types
#: code -> (name, element bytes or None if not byte-addressable/reserved)
DTYPES: dict[int, tuple[str, int | None]] = {
    0: ("int8", 1),
    1: ("int32", 4),
    2: ("fp32", 4),
    3: ("bf16", 2),
    4: ("fp8e4m3", 1),
    5: ("fp8e5m2", 1),
    6: ("int4", None),  # reserved: packed int4 weights (two per byte), not yet implemented
    7: ("reserved7", None),
}
DTYPE_CODE = {name: code for code, (name, _) in DTYPES.items()}
MATMUL_DTYPES = ("int8", "bf16", "fp8e4m3", "fp8e5m2", "int4")  # int4 reserved
VECTOR_DTYPES = ("int8", "int32", "fp32", "bf16", "fp8e4m3", "fp8e5m2")


def dtype_size(code: int) -> int | None:
    return DTYPES.get(code, ("?", None))[1]


#: vector broadcast modes for operand b
BMODES = {0: "tile", 1: "row", 2: "col", 3: "imm"}
BMODE_CODE = {v: k for k, v in BMODES.items()}

# ----------------------------------------------------------------------------- block quantization
#: llama.cpp / GGUF block formats `vec.dequant` expands (docs/isa.md, "Block-quantized weights")
QFORMATS = {0: "q4_0", 1: "q4_1", 2: "q8_0", 3: "reserved3"}
QFORMAT_CODE = {v: k for k, v in QFORMATS.items()}
#: elements per quantization block (one scale, and for q4_1 one minimum, per block)
QBLOCK = 32
#: which way a block runs in the destination tile: down one column (32 consecutive rows: the
#: k x n weight tile mx.loadw takes) or along one row (32 consecutive columns: GGUF's own order)
QAXES = {0: "col", 1: "row"}
QAXIS_CODE = {v: k for k, v in QAXES.items()}
#: field kind -> {code: name} for the fields assembly spells by name
ENUM_KINDS = {"bmode": BMODES, "qfmt": QFORMATS, "qaxis": QAXES}


def qformat_bits(fmt: int) -> int:
    """Bits per code of a block format: 4 (q4_0, q4_1) or 8 (q8_0)."""
    return 8 if QFORMATS[fmt] == "q8_0" else 4


def qscale_bytes(fmt: int) -> int:
    """Bytes of one block's scale entry: fp16 d, or for q4_1 the pair (fp16 d, fp16 m)."""
    return 4 if QFORMATS[fmt] == "q4_1" else 2


def dequant_shapes(fmt: int, axis: int, rows: int, cols: int) -> tuple[tuple[int, int],
                                                                       tuple[int, int]]:
    """(codes tile (rows, bytes per row), scale tile (rows, entries per row)) of a
    `vec.dequant` producing a rows x cols tile (block dimension a multiple of QBLOCK)."""
    half = qformat_bits(fmt) == 4
    if QAXES[axis] == "col":
        return (rows // 2 if half else rows, cols), (rows // QBLOCK, cols)
    return (rows, cols // 2 if half else cols), (rows, cols // QBLOCK)

# ----------------------------------------------------------------------------- vector ops
#: the vector op forms with an operand b (tile, row or column vector, or an immediate), and
#: those writing one value per row (a column vector)
FORMS_WITH_B = frozenset(("binary", "requant", "dot"))
ROW_REDUCING_FORMS = frozenset(("reduce", "dot"))


@dataclass(frozen=True)
class VecOpDef:
    name: str
    form: str  # "binary" | "unary" | "reduce" | "dot" | "requant"
    doc: str
    #: the op whose cost a config written before this op existed gives it (target/hw.py); None:
    #: every config states it
    cost_default: str | None = None

    @property
    def reads_b(self) -> bool:
        return self.form in FORMS_WITH_B

    @property
    def reduces_rows(self) -> bool:
        return self.form in ROW_REDUCING_FORMS


VECTOR_OPS: tuple[VecOpDef, ...] = (
    VecOpDef("add", "binary", "d = a + b"),
    VecOpDef("sub", "binary", "d = a - b"),
    VecOpDef("mul", "binary", "d = a * b"),
    VecOpDef("max", "binary", "d = max(a, b)"),
    VecOpDef("min", "binary", "d = min(a, b)"),
    VecOpDef("copy", "unary", "d = a (converting a's dtype to d's dtype: the cast instruction)"),
    VecOpDef("neg", "unary", "d = -a"),
    VecOpDef("abs", "unary", "d = |a|"),
    VecOpDef("relu", "unary", "d = max(a, 0)"),
    VecOpDef("gelu", "unary", "d = 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))) (fp32)"),
    VecOpDef("silu", "unary", "d = a * sigmoid(a) (fp32)"),
    VecOpDef("sigmoid", "unary", "d = 1 / (1 + exp(-a)) (fp32)"),
    VecOpDef("tanh", "unary", "d = tanh(a) (fp32)"),
    VecOpDef("exp", "unary", "d = exp(a) (fp32)"),
    VecOpDef("sqrt", "unary", "d = sqrt(a) (fp32)"),
    VecOpDef("rsqrt", "unary", "d = 1 / sqrt(a) (fp32)"),
    VecOpDef("recip", "unary", "d = 1 / a (fp32)"),
    VecOpDef("rsum", "reduce", "row reduction: d[i] = sum_j a[i, j] (d is a column vector)"),
    VecOpDef("rmax", "reduce", "row reduction: d[i] = max_j a[i, j] (d is a column vector)"),
    VecOpDef(
        "requant",
        "requant",
        "d = saturate_int8(round_half_even(fp32(a) * b)), b = fp32 per-column scales "
        "(bmode=row) or an fp32 immediate (bmode=imm)",
    ),
    VecOpDef("log", "unary", "d = ln(a) (fp32; -inf at 0, NaN below)"),
    VecOpDef("eq", "binary", "d = 1 if a == b else 0 (NaN compares unequal)"),
    VecOpDef("lt", "binary", "d = 1 if a < b else 0 (false with a NaN)"),
    VecOpDef("le", "binary", "d = 1 if a <= b else 0 (false with a NaN)"),
    # the error function and the exact (erf) GELU of BERT-family FFNs: as one instruction each
    # instead of a 24-instruction Abramowitz & Stegun sequence of the ops above
    VecOpDef("erf", "unary", "d = erf(a) (fp32: the float64 value rounded once)"),
    VecOpDef("gelu_erf", "unary", "d = 0.5 a (1 + erf(a / sqrt 2)) (fp32: the float64 value rounded once)"),
    # a row's dot product with one instruction instead of a `mul` pass and an `rsum` pass: the
    # products feed the row-reduction tree `rsum` already has (attention scores of a decode
    # step, sums of squares of the norms)
    VecOpDef("rdot", "dot", "row dot product: d[i] = sum_j fp32(a[i, j] * b[i, j]) (each product "
             "rounded to fp32, summed as rsum sums them: the bits of a `mul` into fp32 then an "
             "`rsum`; d is a column vector)", cost_default="rsum"),
    # an exact select: `where` as mask(x, c) + mask(y, 1 - c) holds whatever the branch not
    # taken holds (inf, NaN), where c*x + (1-c)*y gives NaN for 0*inf; -0 is IEEE addition's
    # identity (x + -0 is x for every x, -0 included), so the sum is the taken value's bits
    VecOpDef("mask", "binary", "d = a where b != 0, else -0.0 (NaN b counts as nonzero; the "
             "sum of two tiles masked by complementary conditions is an exact select)",
             cost_default="mul"),
    # a bias or residual add and the relu after it in one pass: the sum, rounded to fp32, goes
    # through the max stage on its way to the destination (a conv's epilogue was two passes
    # over each output tile on the in-order vector unit, the second waiting for the first)
    VecOpDef("add_relu", "binary", "d = max(a + b, 0) (the sum in the compute type, as `add` "
             "into an fp32 tile then `relu`: the bits of those two ops in one pass)",
             cost_default="add"),
)
VECTOR_OP_BY_NAME = {v.name: v for v in VECTOR_OPS}
#: weight decompression on the vector unit: not an elementwise op of the `tile.vector` family
#: (its operands are packed codes and per-block scales), so kept out of VECTOR_OPS
DEQUANT_OP = VecOpDef(
    "dequant", "dequant",
    "expand llama.cpp block-quantized codes: d[i, j] = fp32(code(i, j)) * fp32(scale) "
    "(+ fp32(min) for q4_1), one fp16 scale (and min) per block of 32 elements, converted to dt")
#: every op of the vector unit, each with a cost in the config's [vector.cost]
VECTOR_UNIT_OPS: tuple[VecOpDef, ...] = (*VECTOR_OPS, DEQUANT_OP)


# ----------------------------------------------------------------------------- fields
@dataclass(frozen=True)
class FieldDef:
    """One bit field. kind: reg | sem | imm | count | stride | dtype | bmode | qfmt | qaxis |
    f32 | flag | dram_off | local_off. Offsets (`*_off`) pair with a base register field named `<base>`
    and print in assembly as `name=rB+off`."""

    name: str
    bits: int
    signed: bool = False
    kind: str = "imm"
    doc: str = ""
    base: str | None = None  # for *_off kinds: the name of the base-register field
    # assembly prints the field only when it is not 0 (a later addition whose 0 is the
    # behaviour before it: programs written without it read the same)
    omit_zero: bool = False

    @functools.cached_property  # (checked for every field of every instruction made or decoded)
    def lo(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @functools.cached_property
    def hi(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1


#: constraint(values) -> error message or None. values maps field name -> int.
Constraint = Callable[[dict[str, int]], "str | None"]


@dataclass(frozen=True)
class InstrDef:
    name: str
    opcode: int
    engine: str
    fields: tuple[FieldDef, ...]
    doc: str
    constraints: tuple[Constraint, ...] = ()
    vop: VecOpDef | None = None
    # derived
    layout: tuple[tuple[FieldDef, int], ...] = field(default=(), compare=False)

    def field(self, name: str) -> FieldDef:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @functools.cached_property  # (read per instruction made, checked and looked up)
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @functools.cached_property
    def field_index(self) -> dict[str, int]:
        return {f.name: i for i, f in enumerate(self.fields)}


def _reg(name: str, doc: str) -> FieldDef:
    return FieldDef(name, REG_BITS, kind="reg", doc=doc)


def _dram(name: str, doc: str) -> tuple[FieldDef, FieldDef]:
    return (
        FieldDef(name + "_base", REG_BITS, kind="reg", doc=f"base register of {doc}"),
        FieldDef(name, 32, True, "dram_off", f"{doc}: byte offset added to the base register",
                 base=name + "_base"),
    )


def _local(name: str, doc: str) -> tuple[FieldDef, FieldDef]:
    return (
        FieldDef(name + "_base", REG_BITS, kind="reg", doc=f"base register of {doc}"),
        FieldDef(name, LOCAL_ADDR_BITS, False, "local_off",
                 f"{doc}: local address (scratchpad, or accumulator at {ACC_BASE:#x}+) "
                 "added to the base register", base=name + "_base"),
    )


def _aligned(fieldname: str, dtype_field: str | None, fixed: int | None = None) -> Constraint:
    def check(v: dict[str, int]) -> str | None:
        size = fixed if fixed is not None else dtype_size(v[dtype_field])  # type: ignore[index]
        if size and v[fieldname] % size:
            return f"{fieldname} = {v[fieldname]} is not aligned to {size} bytes"
        return None

    return check


def _dtype_in(fieldname: str, allowed: tuple[str, ...]) -> Constraint:
    def check(v: dict[str, int]) -> str | None:
        name = DTYPES[v[fieldname]][0]
        if name not in allowed:
            return f"{fieldname} = {name} is not one of {', '.join(allowed)}"
        return None

    return check


def _positive(*names: str) -> Constraint:
    def check(v: dict[str, int]) -> str | None:
        for n in names:
            if v[n] <= 0:
                return f"{n} must be positive, got {v[n]}"
        return None

    return check


def _dma_fields() -> tuple[FieldDef, ...]:
    return (
        *_dram("dram", "DRAM address"),
        *_local("local", "local address"),
        FieldDef("n0", 20, kind="count", doc="bytes per row (contiguous burst)"),
        FieldDef("n1", 16, kind="count", doc="rows per plane"),
        FieldDef("n2", 12, kind="count", doc="planes"),
        FieldDef("ds1", 32, True, "stride", "DRAM byte stride between rows"),
        FieldDef("ds2", 32, True, "stride", "DRAM byte stride between planes"),
        FieldDef("ls1", 24, True, "stride", "local byte stride between rows"),
        FieldDef("ls2", 24, True, "stride", "local byte stride between planes"),
    )


_IMM48 = FieldDef("imm", 48, True, "imm", "signed immediate")


def loadw_stored_shape(k: int, n: int, trans: int) -> tuple[int, int]:
    """(rows, columns) of an mx.loadw weight tile as it is stored: k x n, or n x k with trans
    (the weight path's transposer then loads its transpose)."""
    return (n, k) if trans else (k, n)

_defs: list[InstrDef] = [
    # ---------------------------------------------------------------- scalar / control
    InstrDef("nop", 0x00, "scalar", (), "No operation (its wait/signal still act: `nop signal=s1` "
             "pre-loads a token)."),
    InstrDef("halt", 0x01, "scalar", (), "End of program: waits until every engine is idle."),
    InstrDef("li", 0x02, "scalar", (_reg("rd", "destination"), _IMM48), "rd = imm"),
    InstrDef("addi", 0x03, "scalar", (_reg("rd", "destination"), _reg("rs", "source"), _IMM48),
             "rd = rs + imm"),
    InstrDef("add", 0x04, "scalar",
             (_reg("rd", "destination"), _reg("rs", "source 1"), _reg("rt", "source 2")),
             "rd = rs + rt"),
    InstrDef("sub", 0x05, "scalar",
             (_reg("rd", "destination"), _reg("rs", "source 1"), _reg("rt", "source 2")),
             "rd = rs - rt"),
    InstrDef("mul", 0x06, "scalar",
             (_reg("rd", "destination"), _reg("rs", "source 1"), _reg("rt", "source 2")),
             "rd = rs * rt"),
    InstrDef("muli", 0x07, "scalar", (_reg("rd", "destination"), _reg("rs", "source"), _IMM48),
             "rd = rs * imm"),
    InstrDef("ld", 0x08, "scalar", (_reg("rd", "destination"), *_dram("addr", "DRAM address")),
             "rd = sign-extended little-endian int32 at DRAM[addr] (4-byte aligned); stalls the "
             "front end for the DRAM latency (page-table lookups).",
             (_aligned("addr", None, 4),)),
    InstrDef("lds", 0x0B, "scalar", (_reg("rd", "destination"), *_local("addr", "local address")),
             "rd = sign-extended little-endian int32 at local[addr] (4-byte aligned; the "
             "scratchpad, or the accumulator at its base): an index the program keeps on chip "
             "(a block table), read in scalar.local_load_cycles instead of a DRAM latency.",
             (_aligned("addr", None, 4),)),
    InstrDef("loop", 0x09, "scalar",
             (_reg("count_base", "base register of the trip count"),
              FieldDef("count", 32, True, "imm", "trip count = count_base + count",
                       base="count_base"),
              FieldDef("body", 16, kind="count", doc="number of instructions in the body, which "
                       "follows the loop instruction")),
             "Hardware loop: runs the next `body` instructions `count` times (zero iterations "
             "skip the body). Zero overhead per iteration; nests up to scalar.loop_depth.",
             (_positive("body"),)),
    InstrDef("fence", 0x0A, "scalar", (), "The front end waits until every engine is idle."),
    # ---------------------------------------------------------------- DMA
    InstrDef("dma.load", 0x10, "dma_load", _dma_fields(),
             "3-D strided copy DRAM -> local: for p < n2, r < n1: copy n0 bytes from "
             "dram + p*ds2 + r*ds1 to local + p*ls2 + r*ls1.", (_positive("n0", "n1", "n2"),)),
    InstrDef("dma.store", 0x11, "dma_store", _dma_fields(),
             "3-D strided copy local -> DRAM (same shape fields as dma.load).",
             (_positive("n0", "n1", "n2"),)),
    # ---------------------------------------------------------------- matrix
    InstrDef("mx.loadw", 0x20, "matrix",
             (*_local("w", "weight tile (row-major k x n; n x k with trans)"),
              FieldDef("k", 12, kind="count", doc="rows of the weight tile (<= matrix.rows)"),
              FieldDef("n", 12, kind="count", doc="columns of the weight tile (<= matrix.cols)"),
              FieldDef("stride", 20, kind="stride", doc="byte stride between the stored rows"),
              FieldDef("dtype", 3, kind="dtype", doc="weight/activation type"),
              FieldDef("trans", 1, kind="flag",
                       doc="1: the tile is stored transposed (n rows of k elements) and the weight "
                           "path's transposer loads W = its transpose", omit_zero=True)),
             "Load a k x n weight tile into the systolic array's next weight buffer "
             "(weight-stationary; double-buffered so it overlaps the previous matmul); with "
             "trans=1 from its transpose as stored (a key tile [n, k] for q.K^T).",
             (_positive("k", "n"), _dtype_in("dtype", MATMUL_DTYPES), _aligned("w", "dtype"),
              _aligned("stride", "dtype"))),
    InstrDef("mx.matmul", 0x21, "matrix",
             (*_local("act", "activations (m x k, row-major)"),
              *_local("acc", "accumulator output (m x n, 4-byte elements)"),
              FieldDef("m", 20, kind="count", doc="activation rows streamed through the array"),
              FieldDef("astride", 20, kind="stride", doc="byte stride between activation rows"),
              FieldDef("cstride", 20, kind="stride", doc="byte stride between output rows"),
              FieldDef("dtype", 3, kind="dtype", doc="activation type (must match the weights)"),
              FieldDef("accum", 1, kind="flag", doc="1: add into the accumulator, 0: overwrite")),
             "acc[m x n] (+)= act[m x k] @ W[k x n] with the most recently loaded weights; int8 "
             "-> int32 (exact, saturating), bf16/fp8 -> fp32.",
             (_positive("m"), _dtype_in("dtype", MATMUL_DTYPES), _aligned("act", "dtype"),
              _aligned("astride", "dtype"), _aligned("acc", None, 4),
              _aligned("cstride", None, 4))),
]


def _vec_fields(form: str) -> tuple[FieldDef, ...]:
    fs: list[FieldDef] = [*_local("dst", "destination tile")]
    fs += _local("a", "operand a tile")
    if form in FORMS_WITH_B:
        fs += _local("b", "operand b (tile, row vector, column vector; unused for bmode=imm)")
    fs += [
        FieldDef("rows", 16, kind="count", doc="tile rows"),
        FieldDef("cols", 16, kind="count", doc="tile columns"),
        FieldDef("dstride", 20, kind="stride", doc="destination byte stride between rows"),
        FieldDef("astride", 20, kind="stride", doc="operand a byte stride between rows"),
    ]
    if form in FORMS_WITH_B:
        fs += [FieldDef("bstride", 20, kind="stride",
                        doc="operand b byte stride between rows (bmode=tile) or elements (col)")]
    fs += [FieldDef("dt", 3, kind="dtype", doc="destination dtype"),
           FieldDef("at", 3, kind="dtype", doc="operand a dtype")]
    if form in FORMS_WITH_B:
        fs += [FieldDef("bt", 3, kind="dtype", doc="operand b dtype"),
               FieldDef("bmode", 2, kind="bmode", doc="b broadcast: tile | row (one value per "
                        "column) | col (one value per row) | imm"),
               FieldDef("imm", 32, kind="f32", doc="fp32 immediate (bmode=imm)")]
    return tuple(fs)


def _vec_constraints(form: str) -> tuple[Constraint, ...]:
    cs: list[Constraint] = [_positive("rows", "cols"), _dtype_in("dt", VECTOR_DTYPES),
                            _dtype_in("at", VECTOR_DTYPES), _aligned("dst", "dt"),
                            _aligned("a", "at"), _aligned("dstride", "dt"), _aligned("astride", "at")]
    if form in FORMS_WITH_B:
        cs += [_dtype_in("bt", VECTOR_DTYPES), _aligned("b", "bt"), _aligned("bstride", "bt")]
    if form == "requant":
        def rq(v: dict[str, int]) -> str | None:
            if DTYPES[v["dt"]][0] != "int8" or DTYPES[v["bt"]][0] != "fp32":
                return "requant needs dt = int8 and bt = fp32"
            if BMODES[v["bmode"]] not in ("row", "imm"):
                return "requant needs bmode = row or imm"
            return None
        cs.append(rq)
    return tuple(cs)


for _i, _v in enumerate(VECTOR_OPS):
    _defs.append(InstrDef("vec." + _v.name, 0x40 + _i, "vector", _vec_fields(_v.form),
                          "Vector unit: " + _v.doc + ".", _vec_constraints(_v.form), vop=_v))


def _dequant_ok(v: dict[str, int]) -> str | None:
    fmt, axis = v["fmt"], v["blocks"]
    if QFORMATS[fmt].startswith("reserved"):
        return f"fmt = {fmt} is a reserved block format code"
    along = "rows" if QAXES[axis] == "col" else "cols"
    if v[along] % QBLOCK:
        return (f"{along} = {v[along]} is not a multiple of the {QBLOCK}-element block "
                f"(blocks={QAXES[axis]})")
    size = qscale_bytes(fmt)
    for name in ("s", "sstride"):
        if v[name] % size:
            return f"{name} = {v[name]} is not aligned to the {size}-byte {QFORMATS[fmt]} scale entry"
    return None


_defs.append(InstrDef(
    "vec.dequant", 0x60, "vector",
    (*_local("dst", "destination tile (rows x cols of dt)"),
     *_local("q", "packed codes (q4: two 4-bit codes per byte; q8_0: one int8 per byte)"),
     *_local("s", "block scales (per block fp16 d; q4_1: fp16 d, fp16 m)"),
     FieldDef("rows", 16, kind="count", doc="destination rows"),
     FieldDef("cols", 16, kind="count", doc="destination columns"),
     FieldDef("dstride", 20, kind="stride", doc="destination byte stride between rows"),
     FieldDef("qstride", 20, kind="stride", doc="codes byte stride between rows"),
     FieldDef("sstride", 20, kind="stride", doc="scales byte stride between rows"),
     FieldDef("dt", 3, kind="dtype", doc="destination dtype (fp32 or bf16)"),
     FieldDef("fmt", 2, kind="qfmt", doc="block format: q4_0, q4_1 or q8_0"),
     FieldDef("blocks", 1, kind="qaxis", doc="col: a block is 32 consecutive rows of one "
              "column (k x n weight tiles); row: 32 consecutive columns of one row")),
    "Vector unit, weight decompression: expand llama.cpp block-quantized codes (q4_0: "
    "(q - 8) * d; q4_1: q * d + m; q8_0: q * d) into a rows x cols tile of dt; the products "
    "are exact, q4_1's sum rounds once in fp32 (docs/isa.md, \"Block-quantized weights\").",
    (_positive("rows", "cols"), _dtype_in("dt", ("fp32", "bf16")), _aligned("dst", "dt"),
     _aligned("dstride", "dt"), _dequant_ok),
    vop=DEQUANT_OP))


def _with_layout(d: InstrDef) -> InstrDef:
    pos = HEADER_BITS
    layout = []
    for f in d.fields:
        layout.append((f, pos))
        pos += f.bits
    assert pos <= WORD_BITS, f"{d.name} needs {pos} bits"
    return InstrDef(d.name, d.opcode, d.engine, d.fields, d.doc, d.constraints, d.vop,
                    tuple(layout))


INSTRUCTIONS: tuple[InstrDef, ...] = tuple(_with_layout(d) for d in _defs)
BY_NAME: dict[str, InstrDef] = {d.name: d for d in INSTRUCTIONS}
BY_OPCODE: dict[int, InstrDef] = {d.opcode: d for d in INSTRUCTIONS}
assert len(BY_NAME) == len(BY_OPCODE) == len(INSTRUCTIONS)


def used_bits(d: InstrDef) -> int:
    return HEADER_BITS + sum(f.bits for f in d.fields)


_USED_BITS: dict[int, int] = {d.opcode: used_bits(d) for d in INSTRUCTIONS}  # by opcode, for decode_word


# ----------------------------------------------------------------------------- instructions
class EncodingError(ValueError):
    """A field value out of range, a violated constraint, or an undecodable word.
    When raised while decoding a program: `index` and `word` name the instruction."""

    index: int | None = None
    word: int | None = None
    cause: str = ""


@dataclass(frozen=True)
class Instr:
    """One decoded instruction: definition + field values (ints) + sync semaphores."""

    d: InstrDef
    values: tuple[int, ...]
    wait: int = 0
    signal: int = 0
    signal2: int = 0
    #: a second semaphore the instruction's engine waits on before starting it (an instruction
    #: with two dependencies: its buffer's "free" token and its operand's "full" one). A
    #: front-end `nop wait=` in its place would hold every later instruction's dispatch.
    wait2: int = 0

    @property
    def name(self) -> str:
        return self.d.name

    def __getitem__(self, name: str) -> int:
        return self.values[self.d.field_index[name]]

    def as_dict(self) -> dict[str, int]:
        return dict(zip(self.d.field_names, self.values))


def check(d: InstrDef, values: dict[str, int], wait: int = 0, signal: int = 0,
          signal2: int = 0, wait2: int = 0) -> list[str]:
    """All problems with these field values (range, then constraints); empty if valid."""
    errs: list[str] = []
    for name, s in (("wait", wait), ("signal", signal), ("signal2", signal2), ("wait2", wait2)):
        if not 0 <= s <= MAX_SEMAPHORES:
            errs.append(f"{name} = {s} out of range [0, {MAX_SEMAPHORES}]")
    if wait2 and not wait:
        errs.append(f"wait2 = s{wait2} without a wait (an instruction's first wait is `wait`)")
    for f in d.fields:
        if f.name not in values:
            errs.append(f"missing field {f.name}")
            continue
        v = values[f.name]
        if not f.lo <= v <= f.hi:
            errs.append(f"{f.name} = {v} out of range [{f.lo}, {f.hi}] ({f.bits}-bit "
                        f"{'signed' if f.signed else 'unsigned'})")
        elif f.kind == "dtype" and DTYPES[v][1] is None and not (
                d.engine == "matrix" and DTYPES[v][0] == "int4"):
            errs.append(f"{f.name} = {v} is a reserved dtype code")
    extra = values.keys() - d.field_index.keys()
    if extra:
        errs.append(f"unknown field(s) {', '.join(sorted(extra))}")
    if errs:
        return errs
    for c in d.constraints:
        msg = c(values)
        if msg:
            errs.append(msg)
    return errs


def make(name: str, wait: int = 0, signal: int = 0, signal2: int = 0, wait2: int = 0,
         **values: int) -> Instr:
    """Build a checked instruction; missing fields default to 0."""
    d = BY_NAME.get(name)
    if d is None:
        raise EncodingError(f"unknown instruction '{name}'")
    full = {f.name: 0 for f in d.fields}
    full.update(values)
    errs = check(d, full, wait, signal, signal2, wait2)
    if errs:
        raise EncodingError(f"{name}: " + "; ".join(errs))
    return Instr(d, tuple(full[f.name] for f in d.fields), wait, signal, signal2, wait2)


def encode_word(ins: Instr) -> int:
    w = ins.d.opcode | (ins.wait << 8) | (ins.signal << 13) | (ins.signal2 << 18) | (ins.wait2 << 23)
    for (f, pos), v in zip(ins.d.layout, ins.values):
        w |= (v & ((1 << f.bits) - 1)) << pos
    return w


def decode_word(w: int) -> Instr:
    """Decode one 256-bit word; raises EncodingError (unknown opcode, reserved bits, invalid
    field values)."""
    op = w & 0xFF
    d = BY_OPCODE.get(op)
    if d is None:
        raise EncodingError(f"unknown opcode {op:#04x}")
    if w >> _USED_BITS[op]:
        raise EncodingError(f"{d.name}: reserved bits set")
    wait = (w >> 8) & 0x1F
    signal = (w >> 13) & 0x1F
    signal2 = (w >> 18) & 0x1F
    wait2 = (w >> 23) & 0x1F
    vals = []
    for f, pos in d.layout:
        v = (w >> pos) & ((1 << f.bits) - 1)
        if f.signed and v >> (f.bits - 1):
            v -= 1 << f.bits
        vals.append(v)
    errs = check(d, dict(zip(d.field_names, vals)), wait, signal, signal2, wait2)
    if errs:
        raise EncodingError(f"{d.name}: " + "; ".join(errs))
    return Instr(d, tuple(vals), wait, signal, signal2, wait2)


def encode(instrs: list[Instr]) -> bytes:
    """Raw words, little-endian, 32 bytes each (no header)."""
    return b"".join(encode_word(i).to_bytes(WORD_BYTES, "little") for i in instrs)


def decode(raw: bytes) -> list[Instr]:
    """The instructions of raw words. A word that repeats (loop bodies emitted again, the
    same DMA or sync pattern: ~3/4 of ResNet-50's words) is decoded and checked once; its
    Instr, a value, is shared."""
    if len(raw) % WORD_BYTES:
        raise EncodingError(f"code size {len(raw)} is not a multiple of {WORD_BYTES} bytes")
    out = []
    decoded: dict[bytes, Instr] = {}
    for i in range(0, len(raw), WORD_BYTES):
        chunk = raw[i:i + WORD_BYTES]
        ins = decoded.get(chunk)
        if ins is None:
            w = int.from_bytes(chunk, "little")
            try:
                ins = decoded[chunk] = decode_word(w)
            except EncodingError as e:
                err = EncodingError(f"instruction {i // WORD_BYTES}: {e}")
                err.index, err.word, err.cause = i // WORD_BYTES, w, str(e)
                raise err from None
        out.append(ins)
    return out


def f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bits_f32(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b))[0]
