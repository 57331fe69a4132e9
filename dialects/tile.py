"""The `tile` dialect: the tensor level, between model ops and instructions.

Each op is work one engine of the accelerator does on one tile; loops are
`scf.for`, index arithmetic is `arith`, and buffers are builtin memrefs whose
memory space says where they live. A loop's lower bound and step are constants;
its upper bound is a constant, a `tile.load_index`, or affine in enclosing
loops' induction variables (a triangular nest: causal attention's key tiles
`scf.for %j = %c0 to %q0 + TQ step %TKV`, each term a multiple of the step):

    "dram"  main memory (function arguments, weights, the activation arena)
    "spad"  the on-chip scratchpad (matmul operands, vector tiles)
    "acc"   the accumulator memory (matmul results, fp32/int32)

Ops
- `tile.alloc`: a buffer. In "spad"/"acc" it is a tile buffer of one tile loop
  (`buffers = 2` reserves two copies for double buffering); in "dram" it is an
  intermediate activation. `offset` (bytes) is set by memory planning.
- `tile.weight @name`: a weight in DRAM, already in the layout the kernel reads
  (pre-packed at compile time), from the module's weight store.
- `tile.view`: the same bytes seen with another (row-major) shape; free.
- `tile.dma`: copy a box of `shape` elements between DRAM and a local memory
  (one DMA instruction: up to 3 dimensions, source steps for strided reads).
- `tile.matmul`: acc[m x n] (+)= lhs[m x k] @ rhs[k x n] with k <= array rows and
  n <= array columns: one weight tile through the systolic array (`transpose_rhs`: rhs
  given as its n x k transpose).
- `tile.vector`: one vector-unit op (`op` is an ISA vector op name) on a
  rows x cols tile; binary ops take b as a tile, a row vector, a column vector
  or an immediate (`bmode`).
- `tile.fill`: set a local tile to a constant (vector unit).
- `tile.dequant`: expand llama.cpp block-quantized codes and their per-block
  fp16 scales into an f32/bf16 tile (vector unit: one `vec.dequant`).
- `tile.gather_rows`: copy table rows picked by a runtime index memref (i32/i64)
  to DRAM or a local buffer (embedding lookup; data-dependent DMA addresses).
- `tile.scatter_rows`: its mirror, local rows stored to DRAM table rows picked by a
  runtime i32 index memref (paged KV-cache writes).
- `tile.load_index`: an index value read from an i32 DRAM element at run time (a
  loop bound that follows a sequence's actual length).

Every op addresses its memrefs with index operands giving the tile's origin in
elements (`%buf[%i, %j]`), so a loop nest of tile ops reads like the program the
hardware runs. Limits that depend on the hardware (array shape, memory sizes)
are checked against the config named by the module attribute `tile.target`
("edge", "server" or a TOML path), loaded through `infer.target.hw`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from infer.dialects.dtypes import element_name_of, shape_of
from infer.dialects.weight_refs import WeightReference
from infer.target import isa
from infer.target.isa import VECTOR_OP_BY_NAME

SPACES = ("dram", "spad", "acc")
LOCAL_SPACES = ("spad", "acc")
TARGET_ATTR = "tile.target"
# On a DRAM `tile.alloc`: the index, in its function body, of the top-level graph op whose
# result the buffer holds. graph-to-tile writes it; tile-to-npu turns it into the op markers
# the per-layer check reads.
LAYER_ATTR = "tile.layer"
# On an output argument of a tile function: the position of the input argument whose buffer the
# output IS (a result written in place, e.g. a KV pool: docs/paged-kv.md). The tile interpreter
# binds both to one array; tile-to-npu gives both one DRAM region.
ALIAS_ATTR = "tile.alias_of"
# On an integer input argument whose values select rows of a table (gather indices): the table's
# size, and (unit attr) whether the runtime may wrap negative indices (+ size, ONNX's meaning)
# because nothing else reads the input. tile-to-npu copies them into the DRAM layout; the
# runtime checks the input against them (runtime/boundary.py): the compiled gathers read
# indices as they are, so one past the table would read other bytes.
INDEX_BOUND_ATTR = "tile.index_bound"
INDEX_WRAPS_ATTR = "tile.index_wraps"
# On the context-lengths argument of a paged attention: the most tokens a block-table row holds
# (MB * BS); on its block-tables argument: array<i64: pool blocks, BS, the lengths' argument
# index>. The runtime checks each length and each block a sequence uses against them.
LENGTH_BOUND_ATTR = "tile.length_bound"
BLOCK_TABLE_ATTR = "tile.block_table"
# On a kernel's last top-level tile op: {macs, bytes, weight_bytes} of the graph op it lowers, as
# the model defines it (passes/graph_to_tile/roofline.py); tile-to-npu copies it into the op
# markers for the run report's algorithmic roofline.
#: on a top-level tile.dma: a weight prefetch of the next kernel, emitted in this one
#: (graph_to_tile/prefetch_hoist.py); op markers name the next kernel by its weights
PREFETCH_FOR_NEXT_ATTR = "tile.prefetch_for_next"
#: on a top-level tile.dma: a load of a later kernel, emitted in this one around its row gather
#: (graph_to_tile/gather_overlap.py); it names no kernel
PREFETCH_FOR_LATER_ATTR = "tile.prefetch_for_later"
#: on every top-level op prefetch_hoist.py moved into the kernel before (allocs, index
#: constants and views, DMAs, preparation): the number N of that move; on the first own alloc
#: of the kernel they came from, `tile.hoist_origin = N`. tile-to-npu puts a move back where
#: the kernel it went into cannot fit the semaphores (tile_to_npu/hoisted.py)
HOISTED_ATTR = "tile.hoisted"
HOIST_ORIGIN_ATTR = "tile.hoist_origin"
#: on a top-level tile.alloc: the graph-to-tile override (`NAME=...`) that lowers its kernel with
#: less overlap (an attention with fewer heads interleaved), for when tile-to-npu cannot fit the
#: kernel in the semaphores at its last degrade level; the compile driver lowers again with it
SEMAPHORE_FALLBACK_ATTR = "tile.semaphore_fallback"
ROOFLINE_ATTR = "tile.roofline"

# Element types each engine reads/writes (graph-level names).
MATMUL_INPUT_TYPES = {"bf16": "bf16", "i8": "int8"}
ACC_TYPES = ("f32", "i32")
VECTOR_TYPES = ("f32", "bf16", "i8", "i32")
BMODES = ("tile", "row", "col", "imm")


def space_of(value: SSAValue) -> str:
    t = value.type
    assert isinstance(t, MemRefType)
    ms = t.memory_space
    return ms.data if isinstance(ms, StringAttr) else "dram"


def memref(shape: Sequence[int], element_type: Attribute, space: str) -> MemRefType:
    return memref_type(tuple(shape), element_type, StringAttr(space))


@functools.lru_cache(maxsize=4096)
def memref_type(shape: tuple[int, ...], element_type: Attribute, memory_space: Attribute) -> MemRefType:
    """A memref type, built once per (shape, element type, memory space): attributes are
    immutable values, and building one (its generic parameter checks) costs ~0.1 ms, paid
    per buffer and view the lowering makes."""
    return MemRefType(element_type, list(shape), memory_space=memory_space)


def elem_bytes(value: SSAValue) -> int:
    t = value.type
    assert isinstance(t, MemRefType)
    return _ELEM_BYTES[element_name_of(t)]


_ELEM_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "i8": 1, "i32": 4, "i64": 8, "f64": 8, "i1": 1, "ui8": 1}


def root_buffer(value: SSAValue) -> SSAValue:
    """The buffer a (chain of) tile.view(s) looks into."""
    while isinstance(value.owner, ViewOp):
        value = value.owner.source
    return value


def _ints(attr: DenseArrayBase | None) -> tuple[int, ...]:
    return () if attr is None else tuple(int(v) for v in attr.get_values())


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


@functools.lru_cache(maxsize=8)
def _load_target(name: str):
    from infer.target.hw import load_config

    return load_config(name)


def target_of(op: Operation):
    """The hardware config named by the enclosing module's `tile.target`, or None."""
    parent = op
    while parent is not None and not isinstance(parent, ModuleOp):
        parent = parent.parent_op()
    if parent is None:
        return None
    attr = parent.attributes.get(TARGET_ATTR)
    if not isinstance(attr, StringAttr):
        return None
    try:
        return _load_target(attr.data)
    except Exception as e:  # ConfigError: name the attribute
        raise VerifyException(f"module attribute {TARGET_ATTR} = \"{attr.data}\": {e}") from None


def _check_space(value: SSAValue, what: str, spaces: Sequence[str]) -> str:
    space = space_of(value)
    if space not in spaces:
        raise VerifyException(f"{what} must be in {' or '.join(spaces)}, got a {space} memref")
    return space


def _check_box(what: str, buf: SSAValue, indices: Sequence[SSAValue], box: Sequence[int]) -> None:
    shape = shape_of(buf)
    if len(indices) != len(shape):
        raise VerifyException(f"{what} has rank {len(shape)} but is indexed with {len(indices)} indices")
    if len(box) != len(shape):
        raise VerifyException(f"{what}: the tile has {len(box)} dims but the memref has rank {len(shape)}")
    for d, (extent, size) in enumerate(zip(box, shape, strict=True)):
        if extent < 1 or extent > size:
            raise VerifyException(f"{what}: tile extent {extent} in dim {d} must be in 1..{size} (the buffer's size)")


class TileOp(IRDLOperation):
    irdl_options = (ParsePropInAttrDict(),)


@irdl_op_definition
class AllocOp(TileOp):
    """A buffer in one memory space; `offset` (bytes) is assigned by memory planning."""

    name = "tile.alloc"
    buffer = result_def(MemRefType)
    offset = opt_prop_def(IntegerAttr[I64])
    buffers = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    assembly_format = "attr-dict `:` type($buffer)"

    def __init__(self, type: MemRefType, buffers: int = 1, offset: int | None = None):
        props: dict[str, Attribute] = {"buffers": IntegerAttr(buffers, i64)}
        if offset is not None:
            props["offset"] = IntegerAttr(offset, i64)
        super().__init__(result_types=[type], properties=props)

    @property
    def size_bytes(self) -> int:
        return math.prod(shape_of(self.buffer)) * elem_bytes(self.buffer) * self.buffers.value.data

    def verify_(self) -> None:
        """The space is dram, spad or acc; `buffers` is 1 or 2; accumulator buffers hold
        f32 or i32; `offset` >= 0; in spad/acc the buffer fits the target's memory."""
        space = _check_space(self.buffer, "a tile.alloc", SPACES)
        if self.buffers.value.data not in (1, 2):
            raise VerifyException(f"buffers must be 1 or 2 (double buffering), got {self.buffers.value.data}")
        if space == "acc" and element_name_of(self.buffer) not in ACC_TYPES:
            raise VerifyException(f"accumulator buffers hold {' or '.join(ACC_TYPES)}, got {element_name_of(self.buffer)}")
        offset = self.offset.value.data if self.offset is not None else 0
        if offset < 0:
            raise VerifyException(f"offset must be >= 0, got {offset}")
        hw = target_of(self)
        if hw is not None and space in LOCAL_SPACES:
            capacity = hw.memory.scratchpad_bytes if space == "spad" else hw.memory.accumulator_bytes
            if offset + self.size_bytes > capacity:
                raise VerifyException(
                    f"{space} buffer of {self.size_bytes} bytes at offset {offset} does not fit the "
                    f"{capacity}-byte {space} of target '{hw.name}'"
                )


@irdl_op_definition
class WeightOp(WeightReference, TileOp):
    """A weight in DRAM from the module's weight store, in the layout kernels read."""

    name = "tile.weight"
    buffer = result_def(MemRefType)
    traits = traits_def(Pure())
    assembly_format = "$name attr-dict `:` type($buffer)"

    def verify_(self) -> None:
        """Weights live in DRAM."""
        _check_space(self.buffer, "a weight", ("dram",))


@irdl_op_definition
class ViewOp(TileOp):
    """The same bytes with another row-major shape (and element count) in the same space."""

    name = "tile.view"
    source = operand_def(MemRefType)
    result = result_def(MemRefType)
    traits = traits_def(Pure())
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def verify_(self) -> None:
        """Same memory space, element type and element count as the source."""
        if space_of(self.source) != space_of(self.result):
            raise VerifyException("a view cannot change the memory space")
        if element_name_of(self.source) != element_name_of(self.result):
            raise VerifyException("a view cannot change the element type")
        if math.prod(shape_of(self.source)) != math.prod(shape_of(self.result)):
            raise VerifyException(
                f"a view must keep the element count: {math.prod(shape_of(self.source))} vs "
                f"{math.prod(shape_of(self.result))}"
            )


@irdl_op_definition
class DmaOp(TileOp):
    """Copy `shape` elements from src (origin src_indices, stepping `src_steps`
    elements per dim) to dst (origin dst_indices): dst[j + b] = src[i + b * step].
    One side is DRAM, the other local (DRAM -> local is a load, local -> DRAM a store).
    The box has at most 3 dimensions (one DMA instruction). A load's step may be 0: the
    same source elements repeated along that dim (a broadcast, as the DMA engine reads a
    DRAM row again for a stride of 0)."""

    name = "tile.dma"
    src = operand_def(MemRefType)
    src_indices = var_operand_def(IndexType)
    dst = operand_def(MemRefType)
    dst_indices = var_operand_def(IndexType)
    shape = prop_def(DenseArrayBase)
    src_steps = opt_prop_def(DenseArrayBase)
    irdl_options = (ParsePropInAttrDict(), AttrSizedOperandSegments(as_property=True))
    assembly_format = (
        "$src `[` $src_indices `]` `,` $dst `[` $dst_indices `]` attr-dict `:` type($src) `,` type($dst)"
    )

    @property
    def is_load(self) -> bool:
        return space_of(self.src) == "dram"

    def steps(self) -> tuple[int, ...]:
        return _ints(self.src_steps) or (1,) * len(_ints(self.shape))

    def verify_(self) -> None:
        """One side in DRAM, the other local; the same element type; a box of 1 to 3
        dimensions with positive source steps (or 0, for a load); both boxes inside their
        memrefs."""
        box = _ints(self.shape)
        spaces = (space_of(self.src), space_of(self.dst))
        if (spaces[0] == "dram") == (spaces[1] == "dram"):
            raise VerifyException(f"a DMA moves data between DRAM and a local memory, got {spaces[0]} -> {spaces[1]}")
        if element_name_of(self.src) != element_name_of(self.dst):
            raise VerifyException(f"a DMA copies bytes: element types differ ({element_name_of(self.src)} vs {element_name_of(self.dst)})")
        if not 1 <= len(box) <= 3:
            raise VerifyException(f"a DMA box has 1 to 3 dimensions, got {len(box)}")
        steps = self.steps()
        if self.is_load and (len(steps) != len(box) or any(s < 0 for s in steps)):
            raise VerifyException(f"src_steps must be {len(box)} non-negative integers, got {list(steps)}")
        if not self.is_load and (len(steps) != len(box) or any(s < 1 for s in steps)):
            raise VerifyException(f"src_steps must be {len(box)} positive integers (0 for a load only), got {list(steps)}")
        src_extent = [(b - 1) * s + 1 for b, s in zip(box, steps, strict=True)]
        _check_box("the source", self.src, self.src_indices, src_extent)
        _check_box("the destination", self.dst, self.dst_indices, box)


@irdl_op_definition
class MatmulOp(TileOp):
    """acc[m x n] (+)= lhs[m x k] @ rhs[k x n]: one weight tile (rhs, k <= array
    rows, n <= array columns) with m activation rows streamed through the array.
    `transpose_rhs`: rhs is given as its transpose, an n x k box (the weight path's
    transposer loads it: `mx.loadw trans=1`), e.g. a key tile [keys, d] for q.K^T."""

    name = "tile.matmul"
    lhs = operand_def(MemRefType)
    lhs_indices = var_operand_def(IndexType)
    rhs = operand_def(MemRefType)
    rhs_indices = var_operand_def(IndexType)
    acc = operand_def(MemRefType)
    acc_indices = var_operand_def(IndexType)
    m = prop_def(IntegerAttr[I64])
    k = prop_def(IntegerAttr[I64])
    n = prop_def(IntegerAttr[I64])
    accumulate = prop_def(IntegerAttr, default_value=IntegerAttr(0, 1))
    transpose_rhs = prop_def(IntegerAttr, default_value=IntegerAttr(0, 1))
    irdl_options = (ParsePropInAttrDict(), AttrSizedOperandSegments(as_property=True))
    assembly_format = (
        "$lhs `[` $lhs_indices `]` `,` $rhs `[` $rhs_indices `]` `,` $acc `[` $acc_indices `]` "
        "attr-dict `:` type($lhs) `,` type($rhs) `,` type($acc)"
    )

    def verify_(self) -> None:
        """lhs and rhs in the scratchpad, acc in the accumulator, all 2-D; bf16 inputs
        accumulate in f32, i8 in i32; the m x k, k x n and m x n boxes lie inside their
        memrefs; the weight tile fits the target's array, which has the input type."""
        m, k, n = self.m.value.data, self.k.value.data, self.n.value.data
        _check_space(self.lhs, "lhs", ("spad",))
        _check_space(self.rhs, "rhs (the weight tile)", ("spad",))
        _check_space(self.acc, "acc", ("acc",))
        for what, buf in (("lhs", self.lhs), ("rhs", self.rhs), ("acc", self.acc)):
            if len(shape_of(buf)) != 2:
                raise VerifyException(f"{what} must be a 2-D memref, got rank {len(shape_of(buf))}")
        if element_name_of(self.lhs) != element_name_of(self.rhs) or element_name_of(self.lhs) not in MATMUL_INPUT_TYPES:
            raise VerifyException(
                f"lhs and rhs must both be bf16 or both i8, got {element_name_of(self.lhs)} and {element_name_of(self.rhs)}"
            )
        expected_acc = "f32" if element_name_of(self.lhs) == "bf16" else "i32"
        if element_name_of(self.acc) != expected_acc:
            raise VerifyException(f"{element_name_of(self.lhs)} products accumulate in {expected_acc}, got {element_name_of(self.acc)}")
        _check_box("lhs", self.lhs, self.lhs_indices, (m, k))
        _check_box("rhs", self.rhs, self.rhs_indices, (n, k) if self.transpose_rhs.value.data else (k, n))
        _check_box("acc", self.acc, self.acc_indices, (m, n))
        hw = target_of(self)
        if hw is not None:
            if k > hw.matrix.rows or n > hw.matrix.cols:
                raise VerifyException(
                    f"the weight tile {k}x{n} exceeds the {hw.matrix.rows}x{hw.matrix.cols} array of target '{hw.name}'"
                )
            if MATMUL_INPUT_TYPES[element_name_of(self.lhs)] not in hw.matrix.dtypes:
                raise VerifyException(f"target '{hw.name}' has no {element_name_of(self.lhs)} matrix unit")


@irdl_op_definition
class VectorOp(TileOp):
    """One vector-unit op on a rows x cols tile: dst = op(a[, b]). `bmode` says how
    b broadcasts: "tile" (rows x cols), "row" (1 x cols: one value per column),
    "col" (rows x 1: one value per row) or "imm" (the `imm` constant, no b).
    Reductions (rsum, rmax) write dst as a rows x 1 column."""

    name = "tile.vector"
    OPS: ClassVar = VECTOR_OP_BY_NAME
    dst = operand_def(MemRefType)
    dst_indices = var_operand_def(IndexType)
    a = operand_def(MemRefType)
    a_indices = var_operand_def(IndexType)
    b = var_operand_def(MemRefType)
    b_indices = var_operand_def(IndexType)
    op = prop_def(StringAttr)
    rows = prop_def(IntegerAttr[I64])
    cols = prop_def(IntegerAttr[I64])
    bmode = opt_prop_def(StringAttr)
    imm = opt_prop_def(FloatAttr)
    irdl_options = (ParsePropInAttrDict(), AttrSizedOperandSegments(as_property=True))
    assembly_format = (
        "$op $dst `[` $dst_indices `]` `,` $a `[` $a_indices `]` (`,` $b^ `[` $b_indices `]`)? "
        "attr-dict `:` type($dst) `,` type($a) (`,` type($b)^)?"
    )

    @property
    def form(self) -> str:
        return self.OPS[self.op.data].form

    def verify_(self) -> None:
        """`op` is a vector op of the ISA; dst, a (and b) are 2-D local memrefs of a type
        the vector unit reads; the boxes lie inside them; binary ops have a `bmode` and a b
        operand (or `imm` for bmode = imm), unary ops neither; requant writes i8 from f32
        scales by row or immediate."""
        name = self.op.data
        if name not in self.OPS:
            raise VerifyException(f"unknown vector op '{name}' (the vector unit has: {', '.join(self.OPS)})")
        vop = self.OPS[name]
        rows, cols = self.rows.value.data, self.cols.value.data
        for what, buf in (("dst", self.dst), ("a", self.a), *(("b", b) for b in self.b)):
            _check_space(buf, what, LOCAL_SPACES)
            if len(shape_of(buf)) != 2:
                raise VerifyException(f"{what} must be a 2-D memref, got rank {len(shape_of(buf))}")
            if element_name_of(buf) not in VECTOR_TYPES:
                raise VerifyException(f"{what}: the vector unit reads {', '.join(VECTOR_TYPES)}, got {element_name_of(buf)}")
        _check_box("a", self.a, self.a_indices, (rows, cols))
        _check_box("dst", self.dst, self.dst_indices, (rows, 1) if vop.reduces_rows else (rows, cols))
        bmode = self.bmode.data if self.bmode is not None else None
        if vop.reads_b:
            if bmode not in BMODES:
                raise VerifyException(f"binary op '{name}' needs bmode = tile, row, col or imm")
            if bmode == "imm":
                if self.b or self.imm is None:
                    raise VerifyException("bmode = imm takes the `imm` attribute and no b operand")
            else:
                if len(self.b) != 1:
                    raise VerifyException(f"bmode = {bmode} needs one b operand")
                box = {"tile": (rows, cols), "row": (1, cols), "col": (rows, 1)}[bmode]
                _check_box("b", self.b[0], self.b_indices, box)
        elif self.b or bmode is not None:
            raise VerifyException(f"'{name}' takes no b operand or bmode")
        if self.imm is not None and bmode != "imm":
            raise VerifyException("the `imm` attribute is only used with bmode = imm")
        if name == "requant":
            if element_name_of(self.dst) != "i8":
                raise VerifyException("requant writes i8")
            if bmode not in ("row", "imm"):
                raise VerifyException("requant needs bmode = row (per-column scales) or imm")
            if self.b and element_name_of(self.b[0]) != "f32":
                raise VerifyException(f"requant scales must be f32, got {element_name_of(self.b[0])}")


GATHER_INDEX_TYPES = ("i32", "i64")


@irdl_op_definition
class GatherRowsOp(TileOp):
    """Data-dependent row gather (embedding lookup):

        dst[d0 + k, d1 : d1 + cols] = table[indices[i0 + k], c0 : c0 + cols]   for k < rows

    `table` is a 2-D DRAM or scratchpad memref, `indices` a 1-D DRAM or scratchpad memref of i32 or i64
    (an i64 index is read as its low 32 bits, little endian, sign-extended: what the ISA's
    `ld`, or `lds` from the scratchpad, reads at the element's address), `dst` is DRAM or
    local with the table's
    element type. Indices must lie in [0, table rows): there is no wrap-around of
    negative indices (the hardware has no compare), an index outside is an error of
    the interpreter and an out-of-bounds fault of the simulator. Each row moves
    `row_bytes = cols * element size` contiguous bytes (one DMA per row whose DRAM
    address is `ld`'s register times the table's row pitch; from a scratchpad table, one
    vector copy per row into a local dst)."""

    name = "tile.gather_rows"
    table = operand_def(MemRefType)
    table_indices = var_operand_def(IndexType)
    indices = operand_def(MemRefType)
    index_indices = var_operand_def(IndexType)
    dst = operand_def(MemRefType)
    dst_indices = var_operand_def(IndexType)
    rows = prop_def(IntegerAttr[I64])
    cols = prop_def(IntegerAttr[I64])
    irdl_options = (ParsePropInAttrDict(), AttrSizedOperandSegments(as_property=True))
    assembly_format = (
        "$table `[` $table_indices `]` `,` $indices `[` $index_indices `]` `,` $dst `[` $dst_indices `]` "
        "attr-dict `:` type($table) `,` type($indices) `,` type($dst)"
    )

    @property
    def row_bytes(self) -> int:
        return self.cols.value.data * elem_bytes(self.table)

    def verify_(self) -> None:
        """A 2-D DRAM or scratchpad table indexed by its first column (a scratchpad table with a
        local dst), a 1-D DRAM or scratchpad memref of
        i32/i64 indices, a 2-D dst of the table's element type; 1 <= cols <= the table's columns,
        1 <= rows <= the number of indices; the dst box inside dst."""
        rows, cols = self.rows.value.data, self.cols.value.data
        table_space = _check_space(self.table, "the table", ("dram", "spad"))
        _check_space(self.indices, "the indices", ("dram", "spad"))
        if table_space == "spad" and space_of(self.dst) == "dram":
            raise VerifyException("a scratchpad table needs a local dst (its rows are vector copies)")
        if len(shape_of(self.table)) != 2:
            raise VerifyException(f"the table must be a 2-D memref, got rank {len(shape_of(self.table))}")
        if len(self.table_indices) != 1:
            raise VerifyException("the table takes one index (the first column)")
        if len(shape_of(self.indices)) != 1 or len(self.index_indices) != 1:
            raise VerifyException("the indices must be a 1-D memref indexed with one index")
        if element_name_of(self.indices) not in GATHER_INDEX_TYPES:
            raise VerifyException(f"the indices must be i32 or i64, got {element_name_of(self.indices)}")
        if len(shape_of(self.dst)) != 2:
            raise VerifyException(f"dst must be a 2-D memref, got rank {len(shape_of(self.dst))}")
        if element_name_of(self.dst) != element_name_of(self.table):
            raise VerifyException(f"dst and table element types differ ({element_name_of(self.dst)} vs {element_name_of(self.table)})")
        V, C = shape_of(self.table)
        if cols < 1 or cols > C:
            raise VerifyException(f"cols = {cols} must be in 1..{C} (the table's columns)")
        if rows < 1 or rows > shape_of(self.indices)[0]:
            raise VerifyException(f"rows = {rows} must be in 1..{shape_of(self.indices)[0]} (the number of indices)")
        _check_box("dst", self.dst, self.dst_indices, (rows, cols))


@irdl_op_definition
class ScatterRowsOp(TileOp):
    """Data-dependent row scatter (the mirror of `tile.gather_rows`: a KV-cache write):

        table[indices[i0 + k], c0 : c0 + cols] = src[s0 + k, s1 : s1 + cols]   for k < rows

    `table` is a 2-D DRAM memref, `indices` a 1-D DRAM or scratchpad memref of i32 (read with
    `ld` or `lds`), `src` a 2-D local memref of the table's element type. Indices must lie in [0, table rows) (an error of the
    interpreter, an out-of-bounds fault of the simulator). Each row is one DMA store of
    `cols * element size` contiguous bytes whose DRAM address is `ld`'s register times the
    table's row pitch. Two equal indices: the later row wins (stores issue in order)."""

    name = "tile.scatter_rows"
    src = operand_def(MemRefType)
    src_indices = var_operand_def(IndexType)
    indices = operand_def(MemRefType)
    index_indices = var_operand_def(IndexType)
    table = operand_def(MemRefType)
    table_indices = var_operand_def(IndexType)
    rows = prop_def(IntegerAttr[I64])
    cols = prop_def(IntegerAttr[I64])
    irdl_options = (ParsePropInAttrDict(), AttrSizedOperandSegments(as_property=True))
    assembly_format = (
        "$src `[` $src_indices `]` `,` $indices `[` $index_indices `]` `,` $table `[` $table_indices `]` "
        "attr-dict `:` type($src) `,` type($indices) `,` type($table)"
    )

    def verify_(self) -> None:
        """A 2-D local src, a 1-D DRAM or scratchpad memref of i32 indices, a 2-D DRAM table of src's element
        type indexed by its first column; 1 <= cols <= the table's columns, 1 <= rows <= the
        number of indices; the src box inside src."""
        rows, cols = self.rows.value.data, self.cols.value.data
        _check_space(self.src, "the source rows", LOCAL_SPACES)
        _check_space(self.indices, "the indices", ("dram", "spad"))
        _check_space(self.table, "the table", ("dram",))
        if len(shape_of(self.table)) != 2 or len(self.table_indices) != 1:
            raise VerifyException("the table must be a 2-D memref indexed with one index (the first column)")
        if len(shape_of(self.indices)) != 1 or len(self.index_indices) != 1:
            raise VerifyException("the indices must be a 1-D memref indexed with one index")
        if element_name_of(self.indices) != "i32":
            raise VerifyException(f"the indices must be i32, got {element_name_of(self.indices)}")
        if len(shape_of(self.src)) != 2:
            raise VerifyException(f"src must be a 2-D memref, got rank {len(shape_of(self.src))}")
        if element_name_of(self.src) != element_name_of(self.table):
            raise VerifyException(f"src and table element types differ ({element_name_of(self.src)} vs {element_name_of(self.table)})")
        C = shape_of(self.table)[1]
        if cols < 1 or cols > C:
            raise VerifyException(f"cols = {cols} must be in 1..{C} (the table's columns)")
        if rows < 1 or rows > shape_of(self.indices)[0]:
            raise VerifyException(f"rows = {rows} must be in 1..{shape_of(self.indices)[0]} (the number of indices)")
        _check_box("src", self.src, self.src_indices, (rows, cols))


@irdl_op_definition
class LoadIndexOp(TileOp):
    """An index value read at run time from an i32 DRAM element (the ISA's `ld`) or scratchpad
    element (`lds`, a scratchpad latency instead of a DRAM one), e.g. the
    trip count of a loop over a sequence's KV blocks: `scf.for %j = %c0 to %n step %c1`.
    `bound` is the largest value it may take (addresses are checked against it at compile
    time; a larger value is an error of the interpreter)."""

    name = "tile.load_index"
    buffer = operand_def(MemRefType)
    buffer_indices = var_operand_def(IndexType)
    bound = prop_def(IntegerAttr[I64])
    result = result_def(IndexType)
    assembly_format = "$buffer `[` $buffer_indices `]` attr-dict `:` type($buffer)"

    def verify_(self) -> None:
        """A DRAM or scratchpad memref of i32 indexed with one index per dimension."""
        _check_space(self.buffer, "the buffer", ("dram", "spad"))
        if element_name_of(self.buffer) != "i32":
            raise VerifyException(f"tile.load_index reads i32, got {element_name_of(self.buffer)}")
        _check_box("the buffer", self.buffer, self.buffer_indices, (1,) * len(shape_of(self.buffer)))


@irdl_op_definition
class FillOp(TileOp):
    """dst[rows x cols] = value (vector unit)."""

    name = "tile.fill"
    dst = operand_def(MemRefType)
    dst_indices = var_operand_def(IndexType)
    rows = prop_def(IntegerAttr[I64])
    cols = prop_def(IntegerAttr[I64])
    value = prop_def(FloatAttr)
    assembly_format = "$dst `[` $dst_indices `]` attr-dict `:` type($dst)"

    def verify_(self) -> None:
        """dst is a 2-D local memref of a type the vector unit writes; the box lies inside it."""
        _check_space(self.dst, "dst", LOCAL_SPACES)
        if len(shape_of(self.dst)) != 2:
            raise VerifyException("dst must be a 2-D memref")
        if element_name_of(self.dst) not in VECTOR_TYPES:
            raise VerifyException(f"dst: the vector unit writes {', '.join(VECTOR_TYPES)}, got {element_name_of(self.dst)}")
        _check_box("dst", self.dst, self.dst_indices, (self.rows.value.data, self.cols.value.data))


@irdl_op_definition
class DequantOp(TileOp):
    """dst[rows x cols] = the block-quantized codes times their blocks' scales (plus the
    minimum for q4_1), as `vec.dequant` computes them (docs/isa.md, "Block-quantized
    weights"). `format` is q4_0, q4_1 or q8_0; `blocks` says which way a 32-element block
    runs in dst: "col" (32 consecutive rows of a column: a k x n weight tile) or "row" (32
    consecutive columns of a row). `codes` holds the codes in the plane layout of
    `infer.target.qblocks.split_blocks` (ui8, two 4-bit codes a byte; i8 for q8_0), `scales`
    the blocks' fp16 entries (d; q4_1: d, m), one scale row per 32 rows (blocks = col) or per
    row (blocks = row)."""

    name = "tile.dequant"
    dst = operand_def(MemRefType)
    dst_indices = var_operand_def(IndexType)
    codes = operand_def(MemRefType)
    codes_indices = var_operand_def(IndexType)
    scales = operand_def(MemRefType)
    scales_indices = var_operand_def(IndexType)
    rows = prop_def(IntegerAttr[I64])
    cols = prop_def(IntegerAttr[I64])
    format = prop_def(StringAttr)
    blocks = prop_def(StringAttr)
    irdl_options = (ParsePropInAttrDict(), AttrSizedOperandSegments(as_property=True))
    assembly_format = (
        "$dst `[` $dst_indices `]` `,` $codes `[` $codes_indices `]` `,` $scales `[` $scales_indices `]` "
        "attr-dict `:` type($dst) `,` type($codes) `,` type($scales)"
    )

    def isa_codes(self) -> tuple[int, int]:
        """(fmt, blocks) as `vec.dequant` encodes them."""
        return isa.QFORMAT_CODE[self.format.data], isa.QAXIS_CODE[self.blocks.data]

    def boxes(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """The (rows, cols) boxes of codes and scales (elements of their memrefs)."""
        fmt, axis = self.isa_codes()
        (qr, qc), (sr, sc) = isa.dequant_shapes(fmt, axis, self.rows.value.data, self.cols.value.data)
        return (qr, qc), (sr, sc * isa.qscale_bytes(fmt) // 2)

    def verify_(self) -> None:
        """A known format and block axis; whole blocks along the block axis; dst a 2-D local
        f32/bf16 memref, codes ui8 (q8_0: i8) and scales f16, all 2-D local; every box inside
        its buffer."""
        name, axis = self.format.data, self.blocks.data
        formats = [f for f in isa.QFORMAT_CODE if not f.startswith("reserved")]
        if name not in formats:
            raise VerifyException(f"unknown block format '{name}' (supported: {', '.join(formats)})")
        if axis not in isa.QAXIS_CODE:
            raise VerifyException(f"blocks must be \"col\" or \"row\", got \"{axis}\"")
        rows, cols = self.rows.value.data, self.cols.value.data
        along, n = ("rows", rows) if axis == "col" else ("cols", cols)
        if n < 1 or n % isa.QBLOCK:
            raise VerifyException(f"{along} = {n} must be a positive multiple of the {isa.QBLOCK}-element block (blocks = {axis})")
        code_type = "i8" if name == "q8_0" else "ui8"
        for what, buf, types in (("dst", self.dst, ("f32", "bf16")), ("codes", self.codes, (code_type,)),
                                 ("scales", self.scales, ("f16",))):
            _check_space(buf, what, LOCAL_SPACES)
            if len(shape_of(buf)) != 2:
                raise VerifyException(f"{what} must be a 2-D memref, got rank {len(shape_of(buf))}")
            if element_name_of(buf) not in types:
                raise VerifyException(f"{what} of {name} must be {' or '.join(types)}, got {element_name_of(buf)}")
        codes_box, scales_box = self.boxes()
        _check_box("dst", self.dst, self.dst_indices, (rows, cols))
        _check_box("codes", self.codes, self.codes_indices, codes_box)
        _check_box("scales", self.scales, self.scales_indices, scales_box)


Tile = Dialect("tile", [AllocOp, WeightOp, ViewOp, DmaOp, MatmulOp, VectorOp, FillOp, GatherRowsOp, ScatterRowsOp, LoadIndexOp, DequantOp], [])

__all__ = ["Tile", "memref", "space_of", "target_of", "Float32Type"]
