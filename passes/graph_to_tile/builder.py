"""The tile IR builder of graph-to-tile: index arithmetic, loops and tile ops in one function body.

Kernel families build their loop nests through an `Emitter`:

* index arithmetic (`add`, `sub`, `mul`) folds when its operands are compile-time ints, so a
  tile origin (`Index`) is an int until a loop variable enters it; constants are hoisted to the
  function entry, one `arith.constant` per value;
* loops: `loop` is one `scf.for`; `tiles(extent, tile, body)` is one `scf.for` over the full
  tiles and one statically sized remainder tile after it (never unrolled over tiles, so the IR
  does not grow with the problem); `range(n, body)` loops over n indices;
* tile ops: `alloc`, `view`, `dma`, `matmul`, `vec`, `fill`, `gather_rows`, `scatter_rows`,
  `load_index` (a run-time loop bound);
* loop nests: inside `with emitter.loop_nest() as allocs:` local (spad/acc) buffers are
  allocated before the nest starts, so they are live together for the whole nest and no
  buffer outlives it; `allocs` lists them for the local-memory check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import Float32Type, FloatAttr, IndexType, IntegerAttr, MemRefType, StringAttr, UnitAttr, i1, i64
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint

from infer.dialects import tile as t
from infer.passes.tile_memory_plan import LIVE_FROM_PREVIOUS, LIVE_INTO_NEXT
from infer.target import isa

Index = int | SSAValue  # a tile origin: a compile-time int or an index value

# the largest box one vector instruction encodes (the ISA's field widths)
_VECTOR_ROWS = isa.BY_NAME["vec.copy"].field("rows").hi
_VECTOR_COLS = isa.BY_NAME["vec.copy"].field("cols").hi


def tile_extents(total: int, tile: int) -> list[int]:
    """The tile extents `Emitter.tiles(total, tile, ...)` emits code for: the full tile and, when
    tile does not divide total, the remainder (each emission allocates its own buffers)."""
    tile = max(1, min(tile, total))
    return [tile] + ([total % tile] if total % tile else [])


class Emitter:
    """Builds tile IR into one function body; constants are hoisted to its entry."""

    def __init__(self, block: Block):
        self.block = block
        self.insert_point = InsertPoint.at_end(block)
        self._constants: dict[int, SSAValue] = {}
        self._alloc_after: Operation | None = None  # local buffers go after it, before the nest's loops
        self._local_allocs: list[t.AllocOp] = []  # spad/acc allocs of the current loop nest
        self._pool: tuple[dict, dict, bool] | None = None  # (pool, taken counts, single-buffered)

    def hoist(self, op: Operation) -> Operation:
        """Insert at the function entry (constants, weights)."""
        first = self.block.first_op
        if first is None:
            self.block.add_op(op)
        else:
            self.block.insert_op_before(op, first)
        return op

    def insert(self, op: Operation) -> Operation:
        block = self.insert_point.block
        if self.insert_point.insert_before is not None:
            block.insert_op_before(op, self.insert_point.insert_before)
        else:
            block.add_op(op)
        return op

    @contextlib.contextmanager
    def loop_nest(self) -> Iterator[list[t.AllocOp]]:
        """Local buffers allocated inside go here, before the nest's loops; yields the list of
        them (a nested loop nest keeps its own). The position is held by a marker op, erased
        on exit."""
        saved = (self._alloc_after, self._local_allocs)
        marker = arith.ConstantOp(IntegerAttr(0, IndexType()))
        self.insert(marker)
        self._alloc_after = marker
        self._local_allocs = []
        try:
            yield self._local_allocs
        finally:
            marker.detach()
            marker.erase()
            self._alloc_after, self._local_allocs = saved

    @contextlib.contextmanager
    def alloc_pool(self, pool: dict, single: bool = False) -> Iterator[None]:
        """Local allocs inside take their buffers from `pool`: the i-th alloc of a given shape,
        type and space inside one `alloc_pool` block is the same buffer in every block using
        the same pool (code emitted more than once, e.g. peeled tiles, shares its buffers);
        `single`: they are single-buffered."""
        saved = self._pool
        self._pool = (pool, {}, single)
        try:
            yield
        finally:
            self._pool = saved

    @contextlib.contextmanager
    def no_pool(self) -> Iterator[None]:
        """Allocs inside are ordinary (outside any `alloc_pool`)."""
        saved = self._pool
        self._pool = None
        try:
            yield
        finally:
            self._pool = saved

    # -- index arithmetic (folded when static) --
    def constant(self, value: int) -> SSAValue:
        if value not in self._constants:
            op = arith.ConstantOp(IntegerAttr(value, IndexType()))
            self.hoist(op)
            self._constants[value] = op.result
        return self._constants[value]

    def index_value(self, index: Index) -> SSAValue:
        return self.constant(index) if isinstance(index, int) else index

    def add(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if isinstance(a, int) and a == 0:
            return b
        if isinstance(b, int) and b == 0:
            return a
        return self.insert(arith.AddiOp(self.index_value(a), self.index_value(b))).results[0]

    def sub(self, a: Index, b: Index) -> Index:
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        if isinstance(b, int) and b == 0:
            return a
        return self.insert(arith.SubiOp(self.index_value(a), self.index_value(b))).results[0]

    def mul(self, a: Index, factor: int) -> Index:
        if isinstance(a, int):
            return a * factor
        if factor == 1:
            return a
        if factor == 0:
            return 0
        return self.insert(arith.MuliOp(a, self.constant(factor))).results[0]

    def _indices(self, indices: Sequence[Index]) -> list[SSAValue]:
        return [self.index_value(i) for i in indices]

    # -- loops --
    def loop(self, lower: Index, upper: Index, step: int, body: Callable[[SSAValue], None]) -> None:
        block = Block(arg_types=[IndexType()])
        op = scf.ForOp(self.index_value(lower), self.index_value(upper), self.constant(step), [], Region(block))
        self.insert(op)
        saved = self.insert_point
        self.insert_point = InsertPoint.at_end(block)
        body(block.args[0])
        self.insert(scf.YieldOp())
        self.insert_point = saved

    def after_first(self, iv: SSAValue, lower: Index, body: Callable[[], None]) -> None:
        """body() in every iteration of the loop of induction variable `iv` (counting from
        `lower`) but its first: one `scf.if` on `iv != lower` (tile-to-npu peels that first
        iteration and emits the body in the others unconditionally)."""
        cond = self.insert(arith.CmpiOp(iv, self.index_value(lower), "ne")).results[0]
        block = Block()
        op = scf.IfOp(cond, [], Region(block))
        self.insert(op)
        saved = self.insert_point
        self.insert_point = InsertPoint.at_end(block)
        body()
        self.insert(scf.YieldOp())
        self.insert_point = saved

    def tiles(self, extent: int, tile: int, body: Callable[[Index, int], None]) -> None:
        """body(origin, size) over [0, extent) in tiles: one scf.for over the full
        tiles (never unrolled) and the remainder tile after it, sizes static."""
        tile = max(1, min(tile, extent))
        full, rem = divmod(extent, tile)
        if full == 1:
            body(0, tile)
        elif full > 1:
            self.loop(0, full * tile, tile, lambda iv: body(iv, tile))
        if rem:
            body(full * tile, rem)

    def counted_tiles(self, extent: int, tile: int, body: Callable[[Index, Index, int], None]) -> None:
        """body(number, origin, size) over [0, extent) in tiles of `tile`: the scf.for counts
        tiles (so per-tile data, such as a packed weight row, is affine in it) and the
        remainder tile comes after it, sizes static."""
        full, rem = divmod(extent, tile)
        if full == 1:
            body(0, 0, tile)
        elif full > 1:
            self.loop(0, full, 1, lambda j: body(j, self.mul(j, tile), tile))
        if rem:
            body(full, full * tile, rem)

    def range(self, n: int, body: Callable[[Index], None]) -> None:
        if n == 1:
            body(0)
        elif n > 1:
            self.loop(0, n, 1, body)

    # -- tile ops --
    def alloc(self, shape: Sequence[int], elem: Attribute, space: str, buffers: int = 1) -> SSAValue:
        if self._pool is not None and space != "dram":
            pool, taken, single = self._pool
            key = (tuple(shape), str(elem), space, 1 if single else buffers)
            index = taken.get(key, 0)
            taken[key] = index + 1
            if (key, index) not in pool:
                self._pool = None
                pool[(key, index)] = self.alloc(shape, elem, space, 1 if single else buffers)
                self._pool = (pool, taken, single)
            return pool[(key, index)]
        op = t.AllocOp(t.memref(shape, elem, space), buffers=buffers)
        if space != "dram":
            self._local_allocs.append(op)
        if space != "dram" and self._alloc_after is not None:
            self._alloc_after.parent_block().insert_op_after(op, self._alloc_after)
            self._alloc_after = op
            return op.results[0]
        return self.insert(op).results[0]

    def discard_unused_alloc(self, buffer: SSAValue) -> None:
        """Erase the local alloc of `buffer` if nothing uses it any more (an op that wrote it
        now writes another buffer), so it takes no bytes of its nest: out of the pools and the
        nest's local allocs too."""
        op = buffer.owner
        if not isinstance(op, t.AllocOp) or op.results[0].uses:
            return
        if self._pool is not None:
            pool = self._pool[0]
            for key in [k for k, v in pool.items() if v is buffer]:
                del pool[key]
        if op in self._local_allocs:
            self._local_allocs.remove(op)
        if self._alloc_after is op:
            self._alloc_after = op.prev_op
        op.detach()
        op.erase()

    @staticmethod
    def live_from_previous(buffer: SSAValue) -> None:
        """Mark a local buffer of the current kernel live from the start of the kernel before
        (`tile.live_from_previous`, tile-plan-memory): it gets bytes that kernel does not use."""
        op = buffer.owner
        assert isinstance(op, t.AllocOp)
        op.attributes[LIVE_FROM_PREVIOUS] = UnitAttr()

    @staticmethod
    def live_into_next(buffer: SSAValue) -> None:
        """Mark a local buffer live to the end of the kernel after its last use
        (`tile.live_into_next`, tile-plan-memory): a tile stored to DRAM last, so the next
        kernel does not write its bytes while the store is in flight (a DMA retires a DRAM
        latency after it read them)."""
        op = buffer.owner
        if isinstance(op, t.AllocOp):
            op.attributes[LIVE_INTO_NEXT] = UnitAttr()

    def view(self, src: SSAValue, shape: Sequence[int]) -> SSAValue:
        ty = src.type
        assert isinstance(ty, MemRefType)
        if tuple(ty.get_shape()) == tuple(shape):
            return src
        out = t.memref_type(tuple(shape), ty.get_element_type(), ty.memory_space)
        return self.insert(t.ViewOp.build(operands=[src], result_types=[out])).results[0]

    def dma(self, src: SSAValue, src_index: Sequence[Index], dst: SSAValue, dst_index: Sequence[Index],
            shape: Sequence[int], src_steps: Sequence[int] | None = None) -> None:
        if 0 in shape:
            # an empty box copies nothing (a window's stride phase with no input column: the
            # border fill writes the whole phase); npu DMAs move at least one element
            return
        props: dict[str, Attribute] = {"shape": t.i64_array(shape)}
        if src_steps is not None and any(s != 1 for s in src_steps):
            props["src_steps"] = t.i64_array(src_steps)
        self.insert(t.DmaOp.build(operands=[src, self._indices(src_index), dst, self._indices(dst_index)],
                                  properties=props))

    def matmul(self, lhs: SSAValue, lhs_index: Sequence[Index], rhs: SSAValue, rhs_index: Sequence[Index],
               acc: SSAValue, acc_index: Sequence[Index], m: int, k: int, n: int, accumulate: bool = True,
               transpose_rhs: bool = False) -> None:
        """acc (+)= lhs @ rhs; `accumulate=False` overwrites the accumulator box;
        `transpose_rhs`: rhs_index starts an n x k box holding rhs transposed."""
        properties = {"m": IntegerAttr(m, i64), "k": IntegerAttr(k, i64), "n": IntegerAttr(n, i64),
                      "accumulate": IntegerAttr(1 if accumulate else 0, i1)}
        if transpose_rhs:
            properties["transpose_rhs"] = IntegerAttr(1, i1)
        self.insert(t.MatmulOp.build(
            operands=[lhs, self._indices(lhs_index), rhs, self._indices(rhs_index), acc, self._indices(acc_index)],
            properties=properties))

    def vec(self, op: str, dst: SSAValue, dst_index: Sequence[Index], a: SSAValue, a_index: Sequence[Index],
            rows: int, cols: int, b: SSAValue | None = None, b_index: Sequence[Index] = (),
            bmode: str | None = None, imm: float | None = None) -> None:
        """One vector op; a box with more rows or columns than one instruction encodes (the
        ISA's `rows`/`cols` fields) becomes several ops over row or column chunks."""
        max_rows, max_cols = _VECTOR_ROWS, _VECTOR_COLS
        if rows == 0 or (cols == 0 and not t.VectorOp.OPS[op].reduces_rows):
            return  # an empty box (see dma); a row reduction over no column still writes its rows
        if rows > max_rows or cols > max_cols:
            reduce = t.VectorOp.OPS[op].reduces_rows
            if cols > max_cols and reduce:
                raise ValueError(f"a row reduction over {cols} columns does not fit one vector instruction")
            for r0 in range(0, rows, max_rows):
                for c0 in range(0, cols, max_cols):
                    r, c = min(max_rows, rows - r0), min(max_cols, cols - c0)
                    shift = lambda idx, dr, dc: [self.add(idx[0], dr), self.add(idx[1], dc)]  # noqa: E731
                    b_at = list(b_index)
                    if b is not None and bmode in ("tile", "row", "col"):
                        b_at = shift(b_index, r0 if bmode != "row" else 0, c0 if bmode != "col" else 0)
                    self.vec(op, dst, shift(dst_index, r0, 0 if reduce else c0), a, shift(a_index, r0, c0), r, c,
                             b, b_at, bmode, imm)
            return
        props: dict[str, Attribute] = {"op": StringAttr(op), "rows": IntegerAttr(rows, i64),
                                       "cols": IntegerAttr(cols, i64)}
        if bmode is not None:
            props["bmode"] = StringAttr(bmode)
        if imm is not None:
            props["imm"] = FloatAttr(float(np.float32(imm)), Float32Type())
        self.insert(t.VectorOp.build(
            operands=[dst, self._indices(dst_index), a, self._indices(a_index),
                      [b] if b is not None else [], self._indices(b_index)],
            properties=props))

    def round_parts(self, src: SSAValue, src_index: Sequence[Index], hi: SSAValue, lo: SSAValue | None,
                    dst_index: Sequence[Index], rows: int, cols: int,
                    lo_index: Sequence[Index] | None = None) -> None:
        """hi = round(src) (to hi's type) and, with `lo` (fp32 emulation's second bf16 part), lo =
        bf16(src - hi): the residual of rounding to fewer significand bits is exact in fp32, so
        the `sub` writes it rounded straight into lo, the bits of an fp32 `sub` then a `copy`
        in one pass; src is only read. `lo_index`: where lo goes (default `dst_index`; the rows
        below hi's in one tile for a stacked two-pass operand, packed_gemm)."""
        self.vec("copy", hi, dst_index, src, src_index, rows, cols)
        if lo is not None:
            self.vec("sub", lo, dst_index if lo_index is None else lo_index, src, src_index, rows, cols, hi,
                     dst_index, bmode="tile")

    def fill(self, dst: SSAValue, dst_index: Sequence[Index], rows: int, cols: int, value: float) -> None:
        if rows == 0 or cols == 0:
            return  # an empty box (see dma)
        if rows > _VECTOR_ROWS or cols > _VECTOR_COLS:  # several instructions' worth: in chunks
            for r0 in range(0, rows, _VECTOR_ROWS):
                for c0 in range(0, cols, _VECTOR_COLS):
                    self.fill(dst, [self.add(dst_index[0], r0), self.add(dst_index[1], c0)],
                              min(_VECTOR_ROWS, rows - r0), min(_VECTOR_COLS, cols - c0), value)
            return
        self.insert(t.FillOp.build(operands=[dst, self._indices(dst_index)],
                                   properties={"rows": IntegerAttr(rows, i64), "cols": IntegerAttr(cols, i64),
                                               "value": FloatAttr(float(value), Float32Type())}))

    def gather_rows(self, table: SSAValue, table_col: Index, ids: SSAValue, first_id: Index, dst: SSAValue,
                    dst_index: Sequence[Index], rows: int, cols: int) -> None:
        """dst[i, :cols] = table[ids[first_id + i], table_col:] for i < rows (runtime row addresses)."""
        self.insert(t.GatherRowsOp.build(
            operands=[table, [self.index_value(table_col)], ids, [self.index_value(first_id)], dst,
                      self._indices(dst_index)],
            properties={"rows": IntegerAttr(rows, i64), "cols": IntegerAttr(cols, i64)}))

    def scatter_rows(self, src: SSAValue, src_index: Sequence[Index], ids: SSAValue, first_id: Index,
                     table: SSAValue, table_col: Index, rows: int, cols: int) -> None:
        """table[ids[first_id + i], table_col:table_col+cols] = src[i, :cols] for i < rows."""
        self.insert(t.ScatterRowsOp.build(
            operands=[src, self._indices(src_index), ids, [self.index_value(first_id)], table,
                      [self.index_value(table_col)]],
            properties={"rows": IntegerAttr(rows, i64), "cols": IntegerAttr(cols, i64)}))

    def load_index(self, buffer: SSAValue, at: Sequence[Index], bound: int) -> SSAValue:
        """An index value in 0..bound read at run time from an i32 DRAM element (a run-time
        loop bound)."""
        return self.insert(t.LoadIndexOp.build(operands=[buffer, self._indices(at)],
                                               properties={"bound": IntegerAttr(bound, i64)},
                                               result_types=[IndexType()])).results[0]
