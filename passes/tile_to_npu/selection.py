"""Instruction selection: one function per tile op, dispatched by `SELECTION` (keyed by op type).

| tile op | instructions |
|---|---|
| tile.dma | dma.load / dma.store (contiguous run n0, up to two strided dims; more: one transfer per outer index, the long outer dims in hardware loops beyond MAX_DMA_SPLIT transfers) |
| tile.matmul | mx.loadw (skipped when the same weight tile is still loaded) + mx.matmul |
| tile.vector | vec.<op> (bmode=imm with an integer `a`: bt = at) |
| tile.fill | vec.mul by integer 0, then vec.add of the value (or vec.mul by -1.0 for -0.0) |
| tile.dequant | vec.dequant (codes ui8/i8 and f16 scales tiles, format and block axis as they are) |
| tile.gather_rows | per row: ld (lds: indices in the scratchpad) + muli (+ add) + dma.load (vec.copy: a scratchpad table); rows 0..n-2 in a hardware loop; a one-row gather at the index the previous one-row gather read reuses its row register (no second ld) |
| tile.scatter_rows | per row: ld (lds: slots in the scratchpad) + muli (+ add) + dma.store |
| tile.load_index | nothing itself: the scf.for it bounds reads it with `ld` (`lds` from the scratchpad) into its count register |
| tile.alloc / tile.weight / tile.view | no instruction: the buffer's address |

Each function computes addresses (addressing.py) and the byte ranges the instructions touch,
and hands every instruction to `CodeGenerator.emit`, which synchronises it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from xdsl.dialects import scf
from xdsl.ir import Operation

from infer.dialects import tile as t
from infer.dialects.dtypes import num_elements
from infer.passes.tile_to_npu.addressing import AffineIndex, Address, TileBuffer, affine_of
from infer.passes.tile_to_npu.common import fail, memref_info
from infer.passes.tile_to_npu.dependencies import AccessRequest, RingSlot
from infer.passes.tile_to_npu.program_tree import Instruction
from infer.target import isa

if TYPE_CHECKING:
    from infer.passes.tile_to_npu.codegen import CodeGenerator

# tile element type -> the ISA's dtype code
ISA_DTYPE = {"i8": isa.DTYPE_CODE["int8"], "i32": isa.DTYPE_CODE["int32"],
             "f32": isa.DTYPE_CODE["fp32"], "bf16": isa.DTYPE_CODE["bf16"]}
MAX_DMA_RUN = (1 << 20) - 1  # the longest contiguous run (n0) of one DMA
MAX_DMA_SPLIT = 256  # straight-line transfers one tile.dma may be split into (more: long dims loop)


@dataclass
class LoadedWeightTile:
    """The weight tile the matrix array holds, while it is known (the same straight-line
    block, and its bytes not overwritten since): mx.loadw of that tile again is skipped."""

    key: tuple | None = None
    span: tuple[str, int, int] = ("", 0, 0)  # (space, low, high) of its bytes

    def forget(self) -> None:
        self.key = None

    def note_write(self, space: str, low: int, high: int) -> None:
        if self.key is not None and space == self.span[0] and low < self.span[2] and self.span[1] < high:
            self.key = None


class Operand(NamedTuple):
    """A strided operand: address register + immediate, and the bytes it spans (with `pitch`,
    only the first `width` bytes of each `pitch` from `low`: a box of rows; 0: all of them)."""

    register: int
    immediate: int
    space: str  # dram | local
    low: int
    high: int
    pitch: int = 0
    width: int = 0
    steps: tuple = ()  # (the address's register key: AccessRequest.steps)

    def access(self, writes: bool, ring: RingSlot | None) -> AccessRequest:
        return AccessRequest(self.space, self.low, self.high, writes, ring, self.pitch, self.width, self.steps)


class OpFields:
    """A tile op's operands and attributes, each read through xDSL once: a loop body is emitted
    many times (body copies, peeled and inlined iterations, kernels compiled again) and xDSL's
    getter of a variadic operand decodes the op's segment sizes on every read."""

    def __init__(self, op: Operation) -> None:
        self._op = op

    def __getattr__(self, name: str):
        value = getattr(self._op, name)
        setattr(self, name, value)  # (found in the instance next time: no __getattr__)
        return value


def fields_of(codegen: CodeGenerator, op: Operation):
    """op's OpFields, kept for this compilation (the IR does not change under it)."""
    fields = codegen.op_fields.get(id(op))
    if fields is None:
        fields = codegen.op_fields[id(op)] = OpFields(op)
    return fields


def _operand(codegen: CodeGenerator, buffer: TileBuffer, index: AffineIndex, rows: int,
             row_stride: int, row_bytes: int) -> Operand:
    address = codegen.resolve(index)
    low = address.low + min(0, (rows - 1) * row_stride)
    high = address.high + max(0, (rows - 1) * row_stride) + row_bytes
    space = "dram" if buffer.space == "dram" else "local"
    # the rows' column range (over the hardware loops' iterations too) when it stays within a
    # row: an access to other columns of the same rows does not conflict (a product's first
    # column tiles and the next kernel's prologue reading them)
    width = address.high - address.low + row_bytes
    boxed = rows > 1 and 0 < width < row_stride
    return Operand(codegen.registers.register_for(address.register_key), address.immediate,
                   space, low, high, row_stride if boxed else 0, width if boxed else 0, address.register_key)


# ------------------------------------------------------------------ declarations (no code)
def declare_alloc(codegen: CodeGenerator, op: t.AllocOp) -> None:
    if op.offset is None:
        raise fail(op, "the alloc has no offset: run tile-plan-memory first")
    shape, element, element_bytes = memref_info(op.buffer.type)  # type: ignore[arg-type]
    space = t.space_of(op.buffer)
    offset = op.offset.value.data
    base = {"dram": codegen.layout.arena_offset + offset, "spad": offset,
            "acc": isa.ACC_BASE + offset}[space]
    rotating = op if op in codegen.plan.rotation_loop_of else None
    codegen.buffers[op.buffer] = TileBuffer(space, base, shape, element_bytes, element, rotating,
                                            num_elements(shape) * element_bytes)


def declare_weight(codegen: CodeGenerator, op: t.WeightOp) -> None:
    shape, element, element_bytes = memref_info(op.buffer.type)  # type: ignore[arg-type]
    offset = op.attributes["tile.offset"].value.data  # type: ignore[union-attr]
    codegen.buffers[op.buffer] = TileBuffer("dram", codegen.layout.weights_offset + offset, shape,
                                            element_bytes, element)


def declare_view(codegen: CodeGenerator, op: t.ViewOp) -> None:
    source = codegen.buffers[op.source]
    shape, element, element_bytes = memref_info(op.result.type)  # type: ignore[arg-type]
    codegen.buffers[op.result] = TileBuffer(source.space, source.base, shape, element_bytes,
                                            element, source.rotating_alloc, source.half_bytes)


# ------------------------------------------------------------------ tile.dma
def select_dma(codegen: CodeGenerator, op: t.DmaOp) -> None:
    """dma.load / dma.store: the innermost contiguous bytes n0 (dims merged while contiguous on
    both sides), up to two strided dims; a box needing more dims is split into several DMAs."""
    f = fields_of(codegen, op)
    src, dst = codegen.buffers[f.src], codegen.buffers[f.dst]
    box = tuple(int(n) for n in f.shape.get_values())
    element_bytes = src.element_bytes
    load = f.is_load
    src_strides = [s * step * element_bytes for s, step in zip(src.strides, op.steps())]
    dst_strides = [s * element_bytes for s in dst.strides]
    dram_strides, local_strides = (src_strides, dst_strides) if load else (dst_strides, src_strides)
    dims = [(n, ds, ls) for n, ds, ls in zip(box, dram_strides, local_strides) if n != 1]
    run = element_bytes
    if dims and dims[-1][1] == element_bytes and dims[-1][2] == element_bytes:
        run = dims[-1][0] * element_bytes
        dims.pop()
        while dims and dims[-1][1] == run and dims[-1][2] == run:
            run *= dims[-1][0]
            dims.pop()
    if run > MAX_DMA_RUN and len(dims) < 2:  # one long contiguous run: split it into rows
        chunk = next(c for c in range(MAX_DMA_RUN - MAX_DMA_RUN % element_bytes, 0, -element_bytes)
                     if run % c == 0)
        dims.append((run // chunk, chunk, chunk))
        run = chunk
    src_address = codegen.tile_address(src, f.src_indices, op)
    dst_address = codegen.tile_address(dst, f.dst_indices, op)
    dram_address, local_address = (src_address, dst_address) if load else (dst_address, src_address)
    outer = dims[:-2] if len(dims) > 2 else []
    inner = dims[-2:] if len(dims) >= 2 else dims
    n1, ds1, ls1 = inner[-1] if inner else (1, 0, 0)
    n2, ds2, ls2 = inner[0] if len(inner) == 2 else (1, 0, 0)
    looped = _looped_dims(outer, codegen.hw.scalar.loop_depth - len(codegen.cursor.loops))
    transfers = math.prod(3 if i in looped else n for i, (n, _, _) in enumerate(outer))
    if transfers > MAX_DMA_SPLIT:
        raise fail(op, f"the DMA box {list(box)} needs {transfers} transfers: more strided dims than "
                   f"the hardware loops left in this nest can step (scalar.loop_depth = "
                   f"{codegen.hw.scalar.loop_depth})")
    name, engine = ("dma.load", "dma_load") if load else ("dma.store", "dma_store")
    local = dst if load else src
    full = (codegen.double_buffering.full_semaphore_of.get(dst.rotating_alloc)  # type: ignore[arg-type]
            if op in codegen.double_buffering.early_loads else None)

    def transfer(dram: Address, local_at: Address, first_part: bool, last_part: bool) -> None:
        """One DMA of the two inner strided dims at these addresses."""
        dram_register = codegen.registers.register_for(dram.register_key)
        local_register = codegen.registers.register_for(local_at.register_key)
        dram_low, dram_high = _hull(dram, n1, ds1, n2, ds2, run)
        local_low, local_high = _hull(local_at, n1, ls1, n2, ls2, run)
        fields = dict(dram_base=dram_register, dram=dram.immediate, local_base=local_register,
                      local=local_at.immediate, n0=run, n1=n1, n2=n2, ds1=ds1, ds2=ds2, ls1=ls1,
                      ls2=ls2)
        dram_pitch, dram_width = _box_rows(dram, n1, ds1, n2, run)
        local_pitch, local_width = _box_rows(local_at, n1, ls1, n2, run)
        accesses = [AccessRequest("dram", dram_low, dram_high, not load, None, dram_pitch, dram_width,
                                  dram.register_key),
                    AccessRequest("local", local_low, local_high, load, codegen.double_buffering.slot(local),
                                  local_pitch, local_width, local_at.register_key)]
        inst = codegen.emit(op, name, engine, fields, accesses, first_part=first_part, last_part=last_part)
        if full is not None and last_part:  # a split load signals the loop's full semaphore once
            codegen.tracker.add_signal(inst, full)

    def level(i: int, dram: Address, local_at: Address, first_part: bool, last_part: bool) -> None:
        """The transfers of outer dims i.. : a looped dim runs its first and last index
        straight-line around a hardware loop over the others (so the op's first and last
        instruction, which take and release its tokens, are outside the loop)."""
        if i == len(outer):
            transfer(dram, local_at, first_part, last_part)
            return
        n, ds, ls = outer[i]
        if i not in looped:
            for k in range(n):
                level(i + 1, _shifted(dram, k * ds), _shifted(local_at, k * ls),
                      first_part and k == 0, last_part and k == n - 1)
            return
        level(i + 1, dram, local_at, first_part, False)
        loop, outer_block = codegen.open_loop(n - 2)
        level(i + 1, _stepped(dram, loop, ds), _stepped(local_at, loop, ls), False, False)
        codegen.close_loop(loop, outer_block, op)
        level(i + 1, _shifted(dram, (n - 1) * ds), _shifted(local_at, (n - 1) * ls), False, last_part)

    level(0, codegen.resolve(dram_address), codegen.resolve(local_address), True, True)


MIN_LOOPED_DIM = 4  # an outer DMA dim this long may run in a hardware loop (its middle n - 2 indices)


def _looped_dims(outer: list[tuple[int, int, int]], loops_left: int) -> set[int]:
    """The outer dims of a split DMA that run in hardware loops: none while the transfers fit
    MAX_DMA_SPLIT straight-line DMAs (a loop costs two address registers, which deep kernel
    nests may not have), else the longest ones until they do or the loop nest is full."""
    def straight_line(looped: set[int]) -> int:
        return math.prod(3 if i in looped else n for i, (n, _, _) in enumerate(outer))

    candidates = sorted((i for i, (n, _, _) in enumerate(outer) if n >= MIN_LOOPED_DIM),
                        key=lambda i: -outer[i][0])
    looped: set[int] = set()
    for i in candidates:
        if straight_line(looped) <= MAX_DMA_SPLIT or len(looped) >= loops_left:
            break
        looped.add(i)
    return looped


def _hull(address: Address, n1: int, stride1: int, n2: int, stride2: int, run: int) -> tuple[int, int]:
    """The bytes a DMA touches on one side: every iteration of the address's loops, two strided dims."""
    return (address.low + min(0, (n1 - 1) * stride1) + min(0, (n2 - 1) * stride2),
            address.high + max(0, (n1 - 1) * stride1) + max(0, (n2 - 1) * stride2) + run)


def _box_rows(address: Address, n1: int, stride1: int, n2: int, run: int) -> tuple[int, int]:
    """(pitch, width) of one side of a DMA of `n1` rows of `run` bytes `stride1` apart (no
    second strided dim), as `_operand` gives a vector operand's box: the rows' byte range
    within a row over the hardware loops' iterations, when it stays within one; (0, 0)
    otherwise (the hull counts). A store of a tile's columns of a wide buffer then does not
    conflict with a copy into other columns of the same rows."""
    width = address.high - address.low + run
    if n2 == 1 and n1 > 1 and 0 < width < stride1:
        return stride1, width
    return 0, 0


def _shifted(address: Address, offset: int) -> Address:
    return Address(address.register_key, address.immediate + offset, address.low + offset,
                   address.high + offset)


def _stepped(address: Address, loop, stride: int) -> Address:
    """The address of indices 1 .. loop.count of a dim with this stride, stepped by `loop`."""
    span = stride * (loop.count - 1)
    return Address(address.register_key + ((loop, stride),), address.immediate + stride,
                   address.low + stride + min(0, span), address.high + stride + max(0, span))


# ------------------------------------------------------------------ tile.matmul
def select_matmul(codegen: CodeGenerator, op: t.MatmulOp) -> None:
    f = fields_of(codegen, op)
    lhs, rhs, acc = codegen.buffers[f.lhs], codegen.buffers[f.rhs], codegen.buffers[f.acc]
    m, k, n = f.m.value.data, f.k.value.data, f.n.value.data
    dtype = ISA_DTYPE[lhs.element]
    element_bytes = lhs.element_bytes
    weight_stride = rhs.shape[1] * element_bytes
    trans = int(bool(f.transpose_rhs.value.data))  # (stored as the n x k transpose)
    stored_rows, stored_cols = isa.loadw_stored_shape(k, n, trans)
    weights = _operand(codegen, rhs, codegen.tile_address(rhs, f.rhs_indices, op), stored_rows,
                       weight_stride, stored_cols * element_bytes)
    weight_key = (weights.register, weights.immediate, k, n, weight_stride, dtype, trans)
    rhs_slot = codegen.double_buffering.slot(rhs)
    plan = codegen.plan
    still_loaded = codegen.weight_tile.key == weight_key and not (
        rhs_slot and (plan.first_use[rhs.rotating_alloc] is op  # type: ignore[index]
                      or plan.last_use[rhs.rotating_alloc] is op))  # type: ignore[index]
    if not still_loaded:
        codegen.double_buffering.take_earlier_load_first(rhs_slot, codegen.double_buffering.slot(lhs))
        codegen.emit(op, "mx.loadw", "matrix",
                     dict(w_base=weights.register, w=weights.immediate, k=k, n=n,
                          stride=weight_stride, dtype=dtype, trans=trans),
                     [weights.access(False, rhs_slot)])
        codegen.weight_tile.key = weight_key
        codegen.weight_tile.span = (weights.space, weights.low, weights.high)
    act_stride = lhs.shape[1] * element_bytes
    acc_stride = acc.shape[1] * 4
    activations = _operand(codegen, lhs, codegen.tile_address(lhs, f.lhs_indices, op), m,
                           act_stride, k * element_bytes)
    accumulator = _operand(codegen, acc, codegen.tile_address(acc, f.acc_indices, op), m,
                           acc_stride, n * 4)
    codegen.emit(op, "mx.matmul", "matrix",
                 dict(act_base=activations.register, act=activations.immediate,
                      acc_base=accumulator.register, acc=accumulator.immediate, m=m,
                      astride=act_stride, cstride=acc_stride, dtype=dtype,
                      accum=int(bool(f.accumulate.value.data))),
                 [activations.access(False, codegen.double_buffering.slot(lhs)),
                  accumulator.access(True, codegen.double_buffering.slot(acc))])


# ------------------------------------------------------------------ tile.vector
def select_vector(codegen: CodeGenerator, op: t.VectorOp) -> None:
    f = fields_of(codegen, op)
    name = f.op.data
    vop = t.VectorOp.OPS[name]
    rows, cols = f.rows.value.data, f.cols.value.data
    dst, a = codegen.buffers[f.dst], codegen.buffers[f.a]
    dst_cols = 1 if vop.reduces_rows else cols
    dst_stride = dst.shape[1] * dst.element_bytes
    a_stride = a.shape[1] * a.element_bytes
    dst_operand = _operand(codegen, dst, codegen.tile_address(dst, f.dst_indices, op), rows,
                           dst_stride, dst_cols * dst.element_bytes)
    a_operand = _operand(codegen, a, codegen.tile_address(a, f.a_indices, op), rows, a_stride,
                         cols * a.element_bytes)
    fields = dict(dst_base=dst_operand.register, dst=dst_operand.immediate,
                  a_base=a_operand.register, a=a_operand.immediate, rows=rows, cols=cols,
                  dstride=dst_stride, astride=a_stride, dt=ISA_DTYPE[dst.element],
                  at=ISA_DTYPE[a.element])
    accesses = [a_operand.access(False, codegen.double_buffering.slot(a))]
    if vop.reads_b:
        bmode = f.bmode.data if f.bmode is not None else "tile"
        fields["bmode"] = isa.BMODE_CODE[bmode]
        if bmode == "imm":
            imm = float(f.imm.value.data) if f.imm is not None else 0.0
            fields.update(b_base=0, b=0, bstride=0, imm=isa.f32_bits(imm))
            # an integral immediate computes in exact integer math, as the tile interpreter does
            fields["bt"] = (ISA_DTYPE[a.element] if a.element in ("i8", "i32") and name != "requant"
                            else ISA_DTYPE["f32"])
        else:
            b = codegen.buffers[f.b[0]]
            b_stride = b.shape[1] * b.element_bytes
            b_rows, b_cols = {"tile": (rows, cols), "row": (1, cols), "col": (rows, 1)}[bmode]
            b_operand = _operand(codegen, b, codegen.tile_address(b, f.b_indices, op), b_rows,
                                 b_stride, b_cols * b.element_bytes)
            fields.update(b_base=b_operand.register, b=b_operand.immediate,
                          bstride=0 if bmode == "row" else b_stride, bt=ISA_DTYPE[b.element], imm=0)
            accesses.append(b_operand.access(False, codegen.double_buffering.slot(b)))
    accesses.append(dst_operand.access(True, codegen.double_buffering.slot(dst)))
    codegen.emit(op, "vec." + name, "vector", fields, accesses)


# ------------------------------------------------------------------ tile.fill
def select_fill(codegen: CodeGenerator, op: t.FillOp) -> None:
    """vec.mul of the destination viewed as int8 by the integer immediate 0 (exact zero
    whatever the old bytes, NaN included), then vec.add of the value (vec.mul by -1.0 for
    -0.0); the op takes its free token on the first and releases it on the last."""
    f = fields_of(codegen, op)
    dst = codegen.buffers[f.dst]
    rows, cols = f.rows.value.data, f.cols.value.data
    value = float(f.value.value.data)
    dst_stride = dst.shape[1] * dst.element_bytes
    target = _operand(codegen, dst, codegen.tile_address(dst, f.dst_indices, op), rows,
                      dst_stride, cols * dst.element_bytes)
    dtype = ISA_DTYPE[dst.element]
    accesses = [target.access(True, codegen.double_buffering.slot(dst))]
    base = dict(dst_base=target.register, dst=target.immediate, a_base=target.register,
                a=target.immediate, b_base=0, b=0, rows=rows, cols=cols, dstride=dst_stride,
                astride=dst_stride, bstride=0, dt=dtype, bmode=isa.BMODE_CODE["imm"])
    is_int = dst.element in ("i8", "i32")
    zero_only = value == 0.0 and (is_int or math.copysign(1.0, value) > 0)
    int8 = ISA_DTYPE["i8"]
    codegen.emit(op, "vec.mul", "vector", dict(base, at=int8, bt=int8, imm=isa.f32_bits(0.0)),
                 accesses, last_part=zero_only)
    if zero_only:
        return
    if value == 0.0:  # -0.0
        fields = dict(base, at=dtype, bt=ISA_DTYPE["f32"], imm=isa.f32_bits(-1.0))
        codegen.emit(op, "vec.mul", "vector", fields, accesses, first_part=False)
        return
    bt = dtype if is_int and float(value).is_integer() else ISA_DTYPE["f32"]
    codegen.emit(op, "vec.add", "vector", dict(base, at=dtype, bt=bt, imm=isa.f32_bits(value)),
                 accesses, first_part=False)


# ------------------------------------------------------------------ tile.dequant
def select_dequant(codegen: CodeGenerator, op: t.DequantOp) -> None:
    """vec.dequant: the codes and scales boxes of the tile op (op.boxes(), in elements of
    their memrefs) are the instruction's codes and scale tiles."""
    rows, cols = op.rows.value.data, op.cols.value.data
    dst, codes, scales = (codegen.buffers[v] for v in (op.dst, op.codes, op.scales))
    fmt, axis = op.isa_codes()
    (code_rows, code_cols), (scale_rows, scale_cols) = op.boxes()

    def operand(buffer: TileBuffer, indices, box_rows: int, box_cols: int) -> Operand:
        stride = buffer.shape[1] * buffer.element_bytes
        return _operand(codegen, buffer, codegen.tile_address(buffer, indices, op), box_rows, stride,
                        box_cols * buffer.element_bytes)

    d = operand(dst, op.dst_indices, rows, cols)
    q = operand(codes, op.codes_indices, code_rows, code_cols)
    s = operand(scales, op.scales_indices, scale_rows, scale_cols)
    fields = dict(dst_base=d.register, dst=d.immediate, q_base=q.register, q=q.immediate,
                  s_base=s.register, s=s.immediate, rows=rows, cols=cols,
                  dstride=dst.shape[1] * dst.element_bytes, qstride=codes.shape[1] * codes.element_bytes,
                  sstride=scales.shape[1] * scales.element_bytes, dt=ISA_DTYPE[dst.element], fmt=fmt,
                  blocks=axis)
    slot = codegen.double_buffering.slot
    codegen.emit(op, "vec.dequant", "vector", fields,
                 [q.access(False, slot(codes)), s.access(False, slot(scales)), d.access(True, slot(dst))])


# ------------------------------------------------------------------ tile.gather_rows
def select_gather_rows(codegen: CodeGenerator, op: t.GatherRowsOp) -> None:
    """dst[d0 + k, d1:d1+cols] = table[idx[i0 + k], c0:c0+cols]: per row the front end
    reads the index with `ld` (an i64 index: its low word; `lds` when the indices are in the
    scratchpad), scales it by the table's row
    pitch and issues one row DMA whose DRAM base is that register (a scratchpad table: one
    `vec.copy` of the row whose source base is that register). Rows 0..n-2 run in a
    hardware loop stepping the index and destination registers (registers keyed by the
    loop like any address stream); the last row is peeled after the loop, so a consumer
    synchronises with that one DMA (DMAs complete in issue order)."""
    buffers = codegen.buffers
    table, indices, dst = buffers[op.table], buffers[op.indices], buffers[op.dst]
    if dst.space == "dram":
        raise fail(op, "a DRAM destination is not supported (gather into a local buffer "
                   "and store it with tile.dma)")
    rows, cols = op.rows.value.data, op.cols.value.data
    element_bytes, index_bytes = table.element_bytes, indices.element_bytes
    pitch = table.shape[1] * element_bytes
    dst_pitch = dst.shape[1] * dst.element_bytes
    row_bytes = cols * element_bytes
    table_index = (AffineIndex(table.base, {})
                   + affine_of(op.table_indices[0], op).scaled(element_bytes))
    table_at = codegen.resolve(table_index)
    table_span = (table_at.low, table_at.high + (table.shape[0] - 1) * pitch + row_bytes)
    index_at = codegen.resolve(codegen.tile_address(indices, op.index_indices, op))
    # indices in the scratchpad (paged attention's block table): `lds`, a scratchpad latency
    index_load, index_space = ("ld", "dram") if indices.space == "dram" else ("lds", "local")
    dst_at = codegen.resolve(codegen.tile_address(dst, op.dst_indices, op))
    # one row at the index the previous gather read (paged attention's K and V blocks): its
    # register still holds index * pitch, so the front end does not stall on a second `ld`
    shared = codegen.shared_gather_row
    codegen.shared_gather_row = None
    reuse = shared is not None and shared[0] is op and not table_at.register_key
    row_register = shared[1] if shared is not None and shared[0] is op else codegen.registers.take_scratch(op)
    cursor = codegen.cursor

    def row(index_key: tuple, index_imm: int, dst_key: tuple, dst_imm: int, dst_span: int,
            first_part: bool, last_part: bool) -> None:
        if reuse:
            emit_dma(dst_key, dst_imm, dst_span, first_part, last_part)
            return
        ld = Instruction(index_load, dict(rd=row_register,
                                          addr_base=codegen.registers.register_for(index_key),
                                          addr=index_imm), "scalar", cursor.loops,
                         codegen.next_sequence())
        codegen.tracker.synchronise_scalar_read(ld, index_at.low,
                                                index_at.high + rows * index_bytes, index_space)
        cursor.block.append(ld)
        ld.home_block = cursor.block
        cursor.block.append(Instruction("muli", dict(rd=row_register, rs=row_register, imm=pitch),
                                        "scalar", cursor.loops))
        if table_at.register_key:
            column_register = codegen.registers.register_for(table_at.register_key)
            cursor.block.append(Instruction("add", dict(rd=row_register, rs=row_register,
                                                        rt=column_register), "scalar",
                                            cursor.loops))
        emit_dma(dst_key, dst_imm, dst_span, first_part, last_part)

    def emit_dma(dst_key: tuple, dst_imm: int, dst_span: int, first_part: bool, last_part: bool) -> None:
        local_low = dst_at.low + dst_imm - dst_at.immediate
        local_high = dst_at.high + dst_imm - dst_at.immediate + dst_span + row_bytes
        if table.space != "dram":  # a scratchpad table: the row is one vector copy
            codegen.emit(op, "vec.copy", "vector",
                         dict(dst_base=codegen.registers.register_for(dst_key), dst=dst_imm,
                              a_base=row_register, a=table_at.immediate, rows=1, cols=cols,
                              dstride=dst_pitch, astride=pitch, dt=ISA_DTYPE[dst.element],
                              at=ISA_DTYPE[table.element]),
                         [AccessRequest("local", table_span[0], table_span[1], False, None),
                          AccessRequest("local", local_low, local_high, True,
                                        codegen.double_buffering.slot(dst))],
                         first_part=first_part, last_part=last_part)
            return
        fields = dict(dram_base=row_register, dram=table_at.immediate,
                      local_base=codegen.registers.register_for(dst_key), local=dst_imm,
                      n0=row_bytes, n1=1, n2=1, ds1=0, ds2=0, ls1=0, ls2=0)
        codegen.emit(op, "dma.load", "dma_load", fields,
                     [AccessRequest("dram", table_span[0], table_span[1], False, None),
                      AccessRequest("local", local_low, local_high, True,
                                    codegen.double_buffering.slot(dst))],
                     first_part=first_part, last_part=last_part)

    looped = (rows - 1 if rows - 1 >= 2 and len(cursor.loops) + 1 <= codegen.hw.scalar.loop_depth
              else 0)
    if looped:
        loop, outer_block = codegen.open_loop(looped)
        row(index_at.register_key + ((loop, index_bytes),), index_at.immediate,
            dst_at.register_key + ((loop, dst_pitch),), dst_at.immediate,
            (looped - 1) * dst_pitch, True, False)
        codegen.close_loop(loop, outer_block, op)
    for k in range(looped, rows):
        row(index_at.register_key, index_at.immediate + k * index_bytes, dst_at.register_key,
            dst_at.immediate + k * dst_pitch, 0, k == 0, k == rows - 1)
    following = op.next_op
    if (rows == 1 and not table_at.register_key and isinstance(following, t.GatherRowsOp)
            and following.rows.value.data == 1 and following.indices is op.indices
            and list(following.index_indices) == list(op.index_indices)
            and buffers[following.table].shape[1] * buffers[following.table].element_bytes == pitch):
        codegen.shared_gather_row = (following, row_register)  # reset by the next gather
        return
    # registers are 0 when not in use
    cursor.block.append(Instruction("li", dict(rd=row_register, imm=0), "scalar", cursor.loops))
    codegen.registers.give_back_scratch(row_register, codegen.clock)


# ------------------------------------------------------------------ tile.scatter_rows
def select_scatter_rows(codegen: CodeGenerator, op: t.ScatterRowsOp) -> None:
    """table[idx[i0 + k], c0:c0+cols] = src[s0 + k, s1:s1+cols]: per row the front end reads
    the slot with `ld` (`lds` when the slots are in the scratchpad), scales it by the table's row pitch and issues one row `dma.store` whose
    DRAM base is that register (rows in order: a repeated slot keeps the later row). The rows
    are emitted one by one (a KV write has a few; the scratch register is reused)."""
    buffers = codegen.buffers
    src, indices, table = buffers[op.src], buffers[op.indices], buffers[op.table]
    if src.space == "dram":
        raise fail(op, "the source rows must be in a local buffer")
    rows, cols = op.rows.value.data, op.cols.value.data
    element_bytes, index_bytes = table.element_bytes, indices.element_bytes
    pitch = table.shape[1] * element_bytes
    src_pitch = src.shape[1] * src.element_bytes
    row_bytes = cols * element_bytes
    table_index = (AffineIndex(table.base, {})
                   + affine_of(op.table_indices[0], op).scaled(element_bytes))
    table_at = codegen.resolve(table_index)
    table_span = (table_at.low, table_at.high + (table.shape[0] - 1) * pitch + row_bytes)
    index_at = codegen.resolve(codegen.tile_address(indices, op.index_indices, op))
    src_at = codegen.resolve(codegen.tile_address(src, op.src_indices, op))
    row_register = codegen.registers.take_scratch(op)
    cursor = codegen.cursor
    # slots in the scratchpad (a fused KV append): `lds`, a scratchpad latency
    index_load, index_space = ("ld", "dram") if indices.space == "dram" else ("lds", "local")
    for k in range(rows):
        ld = Instruction(index_load, dict(rd=row_register,
                                          addr_base=codegen.registers.register_for(index_at.register_key),
                                          addr=index_at.immediate + k * index_bytes), "scalar",
                         cursor.loops, codegen.next_sequence())
        codegen.tracker.synchronise_scalar_read(ld, index_at.low, index_at.high + rows * index_bytes,
                                                index_space)
        cursor.block.append(ld)
        ld.home_block = cursor.block
        cursor.block.append(Instruction("muli", dict(rd=row_register, rs=row_register, imm=pitch),
                                        "scalar", cursor.loops))
        if table_at.register_key:
            column_register = codegen.registers.register_for(table_at.register_key)
            cursor.block.append(Instruction("add", dict(rd=row_register, rs=row_register,
                                                        rt=column_register), "scalar", cursor.loops))
        fields = dict(dram_base=row_register, dram=table_at.immediate,
                      local_base=codegen.registers.register_for(src_at.register_key),
                      local=src_at.immediate + k * src_pitch,
                      n0=row_bytes, n1=1, n2=1, ds1=0, ds2=0, ls1=0, ls2=0)
        local_low = src_at.low + k * src_pitch
        codegen.emit(op, "dma.store", "dma_store", fields,
                     [AccessRequest("local", local_low, src_at.high + k * src_pitch + row_bytes, False,
                                    codegen.double_buffering.slot(src)),
                      AccessRequest("dram", table_span[0], table_span[1], True, None)],
                     first_part=k == 0, last_part=k == rows - 1)
    cursor.block.append(Instruction("li", dict(rd=row_register, imm=0), "scalar", cursor.loops))
    codegen.registers.give_back_scratch(row_register, codegen.clock)


def declare_load_index(codegen: CodeGenerator, op: t.LoadIndexOp) -> None:
    """No instruction here: the loop whose bound it is reads it with `ld` (codegen.emit_for)."""
    if any(not (isinstance(use.operation, scf.ForOp) and use.operation.ub is op.result)
           for use in op.result.uses):
        raise fail(op, "a run-time index may only be the upper bound of scf.for loops")


SELECTION: dict[type[Operation], Callable] = {
    t.AllocOp: declare_alloc,
    t.WeightOp: declare_weight,
    t.ViewOp: declare_view,
    t.DmaOp: select_dma,
    t.MatmulOp: select_matmul,
    t.VectorOp: select_vector,
    t.FillOp: select_fill,
    t.GatherRowsOp: select_gather_rows,
    t.ScatterRowsOp: select_scatter_rows,
    t.LoadIndexOp: declare_load_index,
    t.DequantOp: select_dequant,
}
