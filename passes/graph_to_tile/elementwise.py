"""Elementwise ops on the vector unit: alone, and as the epilogue of a matrix kernel.

An output tile is a `TileFrame`: the output shape split into three groups, batch + rows +
columns, and a [rows x cols] window of it. Every operand of an elementwise op must be, on that
frame, full (a `tile`, DMA'd per tile), a row vector (`row`, broadcast down the rows), a
column vector (`col`, broadcast along the rows), a runtime scalar (DMA'd once and spread down a
column) or a compile-time scalar (`imm`); these are the vector unit's `bmode`s. Standalone
elementwise ops and anchor-less `graph.kernel "elementwise"` regions (`lower_elementwise`) pick
the group split that makes every operand one of these and walk the output in row tiles
[TR, TC] (tiling_cost.choose_rows).

The epilogue of a matmul/conv kernel (`apply_epilogue`) runs the kernel's trailing elementwise
ops on its accumulator tile before the one DMA store: `fusable_chain` finds them when no
`graph.kernel` region names them. `epilogue_footprint` mirrors the buffers `apply_epilogue`
allocates, so the cost model sizes tiles with the epilogue included.

Each op is the instruction sequence its rule in `vector_math.RULES` emits (one vector op, or a
sequence: erf-GELU, comparisons, logic, rounding, casts, integer division, pow, ...; exactness
is documented there). `where` selects on the tile: each branch is masked (`vec.mask`: the lanes
not taken become -0, whatever the branch holds there) and the two are added, exact for every
value (an inf or NaN in the branch not taken does not leak, as it would through c*x); with a
compile-time condition the mask is a compile-time array and a constant branch is masked at
compile time; with a runtime condition it is the condition tile (`Seq.select`), or min/max
against +-inf when a branch is the constant +-inf (attention masks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import f32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Emitter, Index, tile_extents
from infer.passes.graph_to_tile.context import KEPT_TILE_READERS, LoweringContext, error, latency_bound
from infer.passes.graph_to_tile.copies import copy_box
from infer.passes.graph_to_tile.vector_math import RULES, Seq, int_temp_type

EPILOGUE_OPS = (g.ReluOp, g.NegOp, g.AbsOp, g.ExpOp, g.SqrtOp, g.RsqrtOp, g.ReciprocalOp, g.TanhOp,
                g.SigmoidOp, g.SiluOp, g.GeluOp, g.ClipOp, g.LeakyReluOp, g.EluOp, g.HardSigmoidOp,
                g.AddOp, g.SubOp, g.MulOp, g.MaximumOp, g.MinimumOp, g.DivOp)
"""Elementwise ops the lowering fuses after a matmul/conv anchor by itself (`fusable_chain`;
graph-fuse's kernels may hold any op of `ELEMENTWISE_OPS`)."""
ELEMENTWISE_OPS = (*RULES, g.WhereOp)
"""Elementwise ops with a vector-unit lowering."""

Groups = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]  # batch, row and column dims
Operand = tuple[str, object]  # (bmode, local buffer) or ("imm", float)
ORIGIN = (0, 0)  # local tiles are addressed from their first element


@dataclass
class TileFrame:
    """An output tile in a 3-group view of the output shape batch + rows + cols:
    batch index `batch` (over prod(batch_shape)), rows [row0, row0 + rows) of
    prod(row_shape), columns [col0, col0 + cols) of prod(col_shape). With `batch_count` > 1
    the tile holds that many consecutive batch entries, each with all its rows, stacked
    (row0 = 0, rows = batch_count * prod(row_shape)): a standalone elementwise kernel whose
    batch entries are small tiles (`lower_elementwise`)."""

    batch_shape: tuple[int, ...]
    row_shape: tuple[int, ...]
    col_shape: tuple[int, ...]
    batch: Index
    row0: Index
    col0: Index
    rows: int
    cols: int
    # padded-width tiles (conv.py): the column group is (OH, OW) and the tile holds
    # cols // pitch output rows of `pitch` columns, the first OW of each valid, starting at
    # output row `pixel_row0` (col0 = pixel_row0 . OW); 0: the columns are contiguous
    pitch: int = 0
    pixel_row0: Index = 0
    batch_count: int = 1

    @property
    def groups(self) -> Groups:
        return self.batch_shape, self.row_shape, self.col_shape

    @property
    def shape(self) -> tuple[int, ...]:
        return self.batch_shape + self.row_shape + self.col_shape


def classify(groups: Groups, shape: Sequence[int]) -> tuple[bool, bool, bool] | None:
    """How a tensor of `shape` broadcasts onto the grouped output shape, per group:
    True = full (same as the output), False = broadcast (all ones); None = neither."""
    out_shape = groups[0] + groups[1] + groups[2]
    if len(shape) > len(out_shape):
        return None
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    out = []
    pos = 0
    for group in groups:
        segment = padded[pos:pos + len(group)]
        pos += len(group)
        if tuple(segment) == tuple(group):
            out.append(True)
        elif all(d == 1 for d in segment):
            out.append(False)
        else:
            return None
    return out[0], out[1], out[2]


def fusable_chain(ctx: LoweringContext, anchor: Operation) -> list[Operation]:
    """Elementwise ops that only consume the anchor's result (a chain of single
    uses, same shape, other operands already available): fused as the epilogue."""
    chain: list[Operation] = []
    value = anchor.results[0]
    while len(list(value.uses)) == 1:
        user = next(iter(value.uses)).operation
        if type(user) not in EPILOGUE_OPS:
            break
        if shape_of(user.results[0]) != shape_of(value) or user.parent_block() is not anchor.parent_block():
            break
        others = [o for o in user.operands if o is not value]
        if not all(o in ctx.buffers or ctx.constant(o) is not None for o in others):
            break
        if value in ctx.destinations:
            break
        chain.append(user)
        value = user.results[0]
    return chain


# -- operands onto the tile ------------------------------------------------------------------


def load_operand(ctx: LoweringContext, value: SSAValue, frame: TileFrame, op: Operation) -> Operand:
    """Bring tensor `value` onto the tile: ("imm", float) | (bmode, local buffer)."""
    array = ctx.constant(value)
    if array is not None and array.size == 1:
        return "imm", float(array.reshape(()))
    kinds = classify(frame.groups, shape_of(value))
    if kinds is None:
        if array is not None:  # broadcast at compile time (as epilogue_footprint counts it)
            return load_array(ctx, array, frame)
        full = ctx.derived.get(("full copy", value, frame.shape))
        if full is None:
            raise error(op, f"operand of shape {shape_of(value)} broadcasts onto the output "
                        f"{frame.shape} in a way the tile lowering does not support")
        return _load_buffer(ctx.emitter, full, frame.shape, frame)  # materialize_misfits' copy
    kept = _kept_operand(ctx, value, kinds, frame)
    if kept is not None:
        return kept
    return _load_buffer(ctx.emitter, ctx.buffer(value), shape_of(value), frame)


def _kept_operand(ctx: LoweringContext, value: SSAValue, kinds: tuple[bool, bool, bool],
                  frame: TileFrame) -> Operand | None:
    """On a latency-bound target, a runtime operand the kernel before left whole in a local
    tile (`LoweringContext.keep_on_chip`) read there in place, when the tile frame covers all of
    it (one batch, the first rows and columns): its load would wait for that kernel's store and a
    DRAM latency of its own. A full-size operand of which the frame is a block (a conv's
    output-channel tile reading the residual the downsampling conv before kept whole) is copied
    out of the kept tile by one vector op instead of loaded. None otherwise, and where the frame
    stacks several batch entries (`batch_count`): the operand, one entry broadcast over them, is
    then loaded once per entry (a DMA source step of 0); read in place, an op over the 80 rows of
    5 stacked [16, 9] entries read 80 rows of the 16-row kept tile (fuzz seed 276, server)."""
    full_batch, full_rows, full_cols = kinds
    if (not latency_bound(ctx.hw) or not (full_rows or full_cols) or frame.pitch or frame.batch_count > 1
            or (full_batch and num_elements(frame.batch_shape) != 1)):
        return None
    rows = num_elements(frame.row_shape) if full_rows else 1
    cols = num_elements(frame.col_shape) if full_cols else 1
    kept = ctx.on_chip_as(ctx.buffer(value), (rows, cols))
    if kept is None:
        return None
    if (full_rows and (frame.row0 != 0 or frame.rows != rows)) or (full_cols and (frame.col0 != 0 or frame.cols != cols)):
        return kept_block(ctx.emitter, kept, frame) if full_rows and full_cols else None
    return ("tile" if full_rows and full_cols else "col" if full_rows else "row"), kept


def _held_whole(ctx: LoweringContext, value: SSAValue, split: Groups, batches: int) -> bool:
    """Whether a one-tile kernel over the whole output (one batch entry per tile) reads
    runtime operand `value` in place from the tile the kernel before left on chip
    (`_kept_operand`'s conditions for a frame at the origin that covers everything)."""
    kinds = classify(split, shape_of(value))
    if kinds is None or ctx.constant(value) is not None or value not in ctx.buffers:
        return False
    full_batch, full_rows, full_cols = kinds
    if not (full_rows or full_cols) or (full_batch and batches != 1):
        return False
    rows = num_elements(split[1]) if full_rows else 1
    cols = num_elements(split[2] or (1,)) if full_cols else 1
    return ctx.held_whole(ctx.buffer(value), (rows, cols)) is not None


def kept_block(em: Emitter, kept: SSAValue, frame: TileFrame) -> Operand | None:
    """The frame's block of a full-size operand kept whole on chip, copied into a tile of its
    own by one vector op (a few dozen cycles where a load from DRAM waits its latency and the
    kernel before's store)."""
    block = em.alloc((frame.rows, frame.cols), f32, "spad", 2)
    em.vec("copy", block, [0, 0], kept, [frame.row0, frame.col0], frame.rows, frame.cols)
    return "tile", block


def materialize_misfits(ctx: LoweringContext, ops: Sequence[Operation], on_tile: Sequence[SSAValue],
                        groups: Groups) -> None:
    """Before an anchor's nest: a runtime operand of its epilogue `ops` that broadcasts onto
    the output in a way no tile kind serves (a [19, 1] input times a [2, 31, 19, 1] linear,
    whose frame groups all but the last dimension as rows) is copied once to the full output
    shape in DRAM (`_broadcast_full`, its own loop nest); `load_operand` then loads that copy
    as a full tile, which `epilogue_footprint` counts already. Compile-time operands broadcast
    at compile time instead (`load_array`)."""
    shape = groups[0] + groups[1] + groups[2]
    produced = set(on_tile) | {r for o in ops for r in o.results}
    for op in ops:
        for value in op.operands:
            if (value in produced or classify(groups, shape_of(value)) is not None
                    or ctx.is_constant(value) or ("full copy", value, shape) in ctx.derived):
                continue
            ctx.derived[("full copy", value, shape)] = _broadcast_full(ctx, value, shape)


def _load_buffer(em: Emitter, src: SSAValue, shape: tuple[int, ...], frame: TileFrame) -> Operand:
    kinds = classify(frame.groups, shape)
    assert kinds is not None
    full_batch, full_rows, full_cols = kinds
    if frame.batch_count > 1 and (full_rows or full_cols or full_batch) and not (full_batch and full_rows):
        return _load_stacked(em, src, kinds, frame)
    batches = num_elements(frame.batch_shape) if full_batch else 1
    rows, cols = num_elements(frame.row_shape), num_elements(frame.col_shape)
    batch = frame.batch if full_batch else 0
    if full_cols and frame.pitch:  # padded-width tile: [rows, pixel rows, OW] boxes
        height, width = frame.col_shape[-2], frame.col_shape[-1]
        lines = frame.cols // frame.pitch
        tile_rows = frame.rows if full_rows else 1
        local = em.alloc((tile_rows, frame.cols), f32, "spad", 2)
        view = em.view(src, ((batches * rows if full_rows else batches), height, width))
        first = em.add(em.mul(batch, rows), frame.row0) if full_rows else batch
        em.dma(view, [first, frame.pixel_row0, 0], em.view(local, (tile_rows, lines, frame.pitch)), [0, 0, 0],
               [tile_rows, lines, width])
        return ("tile" if full_rows else "row"), local
    if not full_rows and not full_cols:  # a runtime scalar (per batch): spread down a column
        one = em.alloc((1, 1), f32, "spad", 2)
        em.dma(em.view(src, (batches, 1)), [batch, 0], one, [0, 0], [1, 1])
        column = em.alloc((frame.rows, 1), f32, "spad", 2)
        em.fill(column, [0, 0], frame.rows, 1, 0.0)
        em.vec("add", column, [0, 0], column, [0, 0], frame.rows, 1, one, [0, 0], bmode="row")
        return "col", column
    if full_rows and full_cols:
        view = em.view(src, (batches * rows, cols))
        local = em.alloc((frame.rows, frame.cols), f32, "spad", 2)
        em.dma(view, [em.add(em.mul(batch, rows), frame.row0), frame.col0], local, [0, 0],
               [frame.rows, frame.cols])
        return "tile", local
    if full_cols:  # row vector
        view = em.view(src, (batches, cols))
        local = em.alloc((1, frame.cols), f32, "spad", 2)
        em.dma(view, [batch, frame.col0], local, [0, 0], [1, frame.cols])
        return "row", local
    view = em.view(src, (batches * rows, 1))
    local = em.alloc((frame.rows, 1), f32, "spad", 2)
    em.dma(view, [em.add(em.mul(batch, rows), frame.row0), 0], local, [0, 0], [frame.rows, 1])
    return "col", local


def _load_stacked(em: Emitter, src: SSAValue, kinds: tuple[bool, bool, bool], frame: TileFrame) -> Operand:
    """An operand onto a tile of `frame.batch_count` stacked batch entries, where the batch
    entries' rows are not consecutive in DRAM: one DMA box [entries, rows, cols] whose
    broadcast dims have a source step of 0 (the same DRAM rows read again). A row vector per
    entry becomes a tile; an entry's scalar, or a column shared by the entries, a column; a
    row shared by every entry stays a row. (Full operands, and columns per entry, are
    consecutive rows: `_load_buffer` loads them as one tile.)"""
    full_batch, full_rows, full_cols = kinds
    if not full_batch and not full_rows:  # one row for every entry
        view = em.view(src, (1, num_elements(frame.col_shape)))
        local = em.alloc((1, frame.cols), f32, "spad", 2)
        em.dma(view, [0, frame.col0], local, [0, 0], [1, frame.cols])
        return "row", local
    entries, rows = frame.batch_count, num_elements(frame.row_shape)
    width = frame.cols if full_cols else 1
    view = em.view(src, (num_elements(frame.batch_shape) if full_batch else 1, rows if full_rows else 1,
                         num_elements(frame.col_shape) if full_cols else 1))
    local = em.alloc((frame.rows, width), f32, "spad", 2)
    em.dma(view, [frame.batch if full_batch else 0, 0, frame.col0 if full_cols else 0],
           em.view(local, (entries, rows, width)), [0, 0, 0], [entries, rows, width],
           src_steps=[1 if full_batch else 0, 1 if full_rows else 0, 1])
    return ("tile" if full_cols else "col"), local


def load_array(ctx: LoweringContext, array: np.ndarray, frame: TileFrame) -> Operand:
    """A compile-time array onto the tile: ("imm", float) | (bmode, local buffer)."""
    if array.size == 1:
        return "imm", float(array.reshape(()))
    kinds = classify(frame.groups, tuple(array.shape))
    if kinds is None or not (kinds[1] or kinds[2]):
        array = np.broadcast_to(array, frame.shape)
    return _load_buffer(ctx.emitter, ctx.weight("const", np.ascontiguousarray(array, np.float32), f32),
                        tuple(array.shape), frame)


def _broadcast_tile(em: Emitter, kind: str, x: object, frame: TileFrame) -> SSAValue:
    """A [rows, cols] tile holding an operand of any kind."""
    if kind == "tile":
        return x  # type: ignore[return-value]
    dst = em.alloc((frame.rows, frame.cols), f32, "spad", 2)
    em.fill(dst, ORIGIN, frame.rows, frame.cols, 0.0)
    if kind == "imm":
        em.vec("add", dst, ORIGIN, dst, ORIGIN, frame.rows, frame.cols, bmode="imm", imm=x)  # type: ignore[arg-type]
    else:
        em.vec("add", dst, ORIGIN, dst, ORIGIN, frame.rows, frame.cols, x, ORIGIN, bmode=kind)  # type: ignore[arg-type]
    return dst


# -- the epilogue ----------------------------------------------------------------------------------


def _arrange(em: Emitter, op: Operation, xs: list[Operand], frame: TileFrame) -> list[Operand]:
    """Operands as the op's rule takes them: a commutative op takes a broadcast first operand
    second; operands the rule needs as full tiles are broadcast onto the tile."""
    rule = RULES[type(op)]
    if rule.commutative and len(xs) == 2 and xs[0][0] != "tile" and xs[1][0] == "tile":
        xs = [xs[1], xs[0]]
    return [("tile", _broadcast_tile(em, *x, frame)) if i in rule.tile_operands(op) and x[0] != "tile" else x
            for i, x in enumerate(xs)]


def relu_of_sum(ops: Sequence[Operation], i: int, result: SSAValue | None) -> g.ReluOp | None:
    """The relu that is ops[i + 1] and the only use of ops[i]'s sum (an add; `result`, the value
    the epilogue returns, is not that sum), or None: with `apply_epilogue(fuse_relu=True)` the
    pair lowers to one `add_relu` (relu_alone)."""
    if i + 1 >= len(ops) or not isinstance(ops[i], g.AddOp):
        return None
    relu, total = ops[i + 1], ops[i].results[0]
    if not isinstance(relu, g.ReluOp) or relu.operands[0] is not total or total is result or not total.has_one_use():
        return None
    return relu


def relu_alone(ops: Sequence[Operation], value: SSAValue) -> g.ReluOp | None:
    """The epilogue `ops` when it is a relu of `value` alone (an anchor's result nothing else
    reads), or None: a bias add before it and the relu lower to one `add_relu` (the bits of the
    add into an fp32 tile and the relu of it, in one vector pass instead of two, the second of
    which waited for the first on the in-order vector unit)."""
    if len(ops) != 1 or not isinstance(ops[0], g.ReluOp) or ops[0].operands[0] is not value:
        return None
    return ops[0] if value.has_one_use() else None


def apply_epilogue(ctx: LoweringContext, ops: Sequence[Operation], tiles: dict[SSAValue, SSAValue],
                   frame: TileFrame, result: SSAValue, loaded: dict[SSAValue, Operand] | None = None,
                   fuse_relu: bool = False) -> SSAValue:
    """Apply elementwise ops to local tiles; `tiles` maps tensors already on the tile (the
    anchor's result) to [rows x cols] fp32 local buffers at [0, 0]; `loaded` maps operands
    brought on chip earlier (`preload_operands`) to what `load_operand` returned for them.
    With `fuse_relu`, an add and the relu of its sum alone (`relu_of_sum`) are one `add_relu`:
    for a caller whose tiles in `tiles` a vector op wrote (an accumulator read by that op, its
    last reader, would need one more signal: conv.py `ConvKernel.epilogue`). Returns the tile
    of `result`."""
    em, rows, cols = ctx.emitter, frame.rows, frame.cols
    seq = Seq(em, rows, cols)

    def operand(value: SSAValue, op: Operation) -> Operand:
        if value in tiles:
            return "tile", tiles[value]
        if loaded is not None and value in loaded:
            return loaded[value]
        return load_operand(ctx, value, frame, op)

    fused: Operation | None = None  # a relu computed by the add before it
    for i, op in enumerate(ops):
        if op is fused:
            continue
        out = op.results[0]
        if shape_of(out) != frame.shape and not (shape_of(out) == () and frame.shape == (1,)):  # 0-d: one column
            raise error(op, f"result {shape_of(out)} is not the kernel's output shape {frame.shape}")
        rule = RULES.get(type(op))
        if rule is None and not isinstance(op, g.WhereOp):
            raise error(op, "this elementwise op has no vector-unit lowering")
        dst = em.alloc((rows, cols), f32, "spad", 2)
        if isinstance(op, g.WhereOp):
            _where(ctx, op, dst, frame, operand)
        else:
            assert rule is not None
            xs = _arrange(em, op, [operand(v, op) for v in op.operands], frame)
            n_temps, n_ints, n_b = rule.temp_count(op)
            temps = [em.alloc((rows, cols), f32, "spad", 1) for _ in range(n_temps)]
            if n_b and xs[1][0] != "imm":
                shape = {"tile": (rows, cols), "row": (1, cols), "col": (rows, 1)}[xs[1][0]]
                temps += [em.alloc(shape, f32, "spad", 2) for _ in range(n_b)]
            ints = [em.alloc((rows, cols), int_temp_type(op), "spad", 1) for _ in range(n_ints)]
            fused = relu_of_sum(ops, i, result) if fuse_relu else None
            if fused is not None:
                seq.v("add_relu", dst, xs[0][1], xs[1])  # type: ignore[arg-type]
                tiles[fused.results[0]] = dst
            else:
                rule.emit(seq, op, dst, xs, temps, ints)
        tiles[out] = dst
    if result not in tiles:
        kind, x = operand(result, ops[-1] if ops else result.owner)  # type: ignore[arg-type]
        return _broadcast_tile(em, kind, x, frame)
    return tiles[result]


def preload_operands(ctx: LoweringContext, ops: Sequence[Operation], on_tile: Iterable[SSAValue],
                     frame: TileFrame) -> dict[SSAValue, Operand]:
    """The DMAs of the epilogue operands `apply_epilogue` would load from DRAM (those not on
    the tile already, `on_tile`, and not computed by the epilogue itself), emitted here, so a
    kernel can issue them early: at the epilogue they would wait for the DRAM latency after the
    kernel's last matmul (and for the readers of whatever bytes the planner gives them there).
    Returns the `loaded` argument of `apply_epilogue`. (`where` ops keep their own loads.)"""
    skip = set(on_tile) | {r for op in ops for r in op.results}
    loaded: dict[SSAValue, Operand] = {}
    for op in ops:
        if isinstance(op, g.WhereOp):
            continue
        for value in op.operands:
            if value in skip or value in loaded:
                continue
            loaded[value] = load_operand(ctx, value, frame, op)
    return loaded


def _where(ctx: LoweringContext, op: g.WhereOp, dst: SSAValue, frame: TileFrame,
           operand: Callable[[SSAValue, Operation], Operand]) -> None:
    """where(c, x, y) on the tile (see the module docstring)."""
    em, rows, cols, z = ctx.emitter, frame.rows, frame.cols, ORIGIN
    condition = ctx.constant(op.condition)
    if condition is None:
        _where_runtime(ctx, op, dst, frame, operand)
        return
    take_lhs = np.asarray(condition).astype(np.bool_)
    terms: list[SSAValue] = []
    for value, mask in ((op.lhs, take_lhs), (op.rhs, ~take_lhs)):
        if not mask.any():
            continue
        array = ctx.constant(value)
        if array is not None:  # the masked branch is a constant: fold it (-0: see below)
            masked = np.where(mask, np.asarray(array, np.float32), np.float32(-0.0)).astype(np.float32)
            terms.append(_broadcast_tile(em, *load_array(ctx, masked, frame), frame))
            continue
        kind, x = operand(value, op)
        x = _broadcast_tile(em, kind, x, frame)
        if mask.all():
            terms.append(x)
            continue
        # the lanes not taken become -0, whatever x holds there (inf, NaN): -0 is addition's
        # identity, so the sum of the two branches below is the taken value, bit for bit
        mask_kind, mask_buffer = load_array(ctx, mask.astype(np.float32), frame)
        masked = em.alloc((rows, cols), f32, "spad", 2)
        em.vec("mask", masked, z, x, z, rows, cols, mask_buffer, z, bmode=mask_kind)  # type: ignore[arg-type]
        terms.append(masked)
    if not terms:
        em.fill(dst, z, rows, cols, 0.0)
    elif len(terms) == 1:
        em.vec("copy", dst, z, terms[0], z, rows, cols)
    else:
        em.vec("add", dst, z, terms[0], z, rows, cols, terms[1], z, bmode="tile")


def infinite_branch(ctx: LoweringContext, op: g.WhereOp) -> tuple[int, float] | None:
    """(branch index 0/1, +-inf) when one branch of a runtime-condition where is the
    compile-time scalar +-inf (selected with min/max), else None."""
    for index, value in enumerate((op.lhs, op.rhs)):
        array = ctx.constant(value)
        if array is not None and array.size == 1 and np.isinf(float(array.reshape(()))):
            return index, float(array.reshape(()))
    return None


def _where_runtime(ctx: LoweringContext, op: g.WhereOp, dst: SSAValue, frame: TileFrame,
                   operand: Callable[[SSAValue, Operation], Operand]) -> None:
    em = ctx.emitter
    seq = Seq(em, frame.rows, frame.cols)
    c = _broadcast_tile(em, *operand(op.condition, op), frame)
    scratch = em.alloc((frame.rows, frame.cols), f32, "spad", 1)
    special = infinite_branch(ctx, op)
    if special is not None:
        index, infinity = special
        other = _broadcast_tile(em, *operand((op.rhs, op.lhs)[index], op), frame)
        # t = infinity where the infinite branch is taken, -infinity elsewhere: (2 sel - 1) inf
        seq.imm("mul", scratch, c, 2.0 if index == 0 else -2.0)
        seq.imm("add", scratch, scratch, -1.0 if index == 0 else 1.0)
        seq.imm("mul", scratch, scratch, infinity)
        seq.tile("max" if infinity > 0 else "min", dst, other, scratch)
        return
    x = _broadcast_tile(em, *operand(op.lhs, op), frame)
    y = _broadcast_tile(em, *operand(op.rhs, op), frame)
    seq.select(dst, c, x, y, scratch)


# -- what an epilogue costs ------------------------------------------------------------------------


@dataclass(frozen=True)
class EpilogueBytes:
    """Scratchpad bytes of an epilogue's local buffers per [rows, cols] output tile: f32
    [rows, cols] tiles, [1, cols] rows, [rows, 1] columns and scalars. A value (hashable,
    compared by its counts), so a cost-model spec that holds it can key a cache."""

    tiles: int
    rows: int
    cols: int
    ones: int

    def __call__(self, rows: int, cols: int) -> int:
        return 4 * (self.tiles * rows * cols + self.rows * cols + self.cols * rows + self.ones)


def epilogue_footprint(ctx: LoweringContext, ops: Sequence[Operation], result: SSAValue,
                       on_tile: Sequence[SSAValue], groups: Groups) -> EpilogueBytes:
    """Scratchpad bytes of the local buffers `apply_epilogue(ops, ...)` allocates for a
    [rows, cols] output tile (it mirrors the allocation decisions of `apply_epilogue`,
    `_arrange`, `_where`, `_load_buffer` and `_broadcast_tile`): (rows, cols) -> bytes."""
    counts = {"tile": 0, "row": 0, "col": 0, "one": 0}  # f32 [rows, cols] tiles, rows, columns, scalars
    tiles = set(on_tile)

    def kind_of(shape: tuple[int, ...], const_scalar: bool) -> str:
        if const_scalar:
            return "imm"
        kinds = classify(groups, shape)
        if kinds is None:
            return "tile"
        if not (kinds[1] or kinds[2]):
            return "scalar"
        return "tile" if kinds[1] and kinds[2] else ("row" if kinds[2] else "col")

    def load(kind: str) -> str:  # double-buffered
        if kind == "scalar":  # a [1, 1] buffer spread down a column
            counts["one"] += 2
            counts["col"] += 2
            return "col"
        if kind in counts:
            counts[kind] += 2
        return kind

    def operand(value: SSAValue) -> str:
        if value in tiles:
            return "tile"
        array = ctx.constant(value)
        if array is not None and kind_of(shape_of(value), array.size == 1) not in ("imm", "tile", "row", "col"):
            return load("tile")  # a compile-time array broadcast (load_array)
        return load(kind_of(shape_of(value), array is not None and array.size == 1))

    def broadcast(kind: str) -> str:
        if kind != "tile":
            counts["tile"] += 2
        return "tile"

    for op in ops:
        counts["tile"] += 2  # dst
        if isinstance(op, g.WhereOp):
            condition = ctx.constant(op.condition)
            if condition is None:
                broadcast(operand(op.condition))
                counts["tile"] += 1  # scratch
                special = infinite_branch(ctx, op)
                values = [(op.rhs, op.lhs)[special[0]]] if special is not None else [op.lhs, op.rhs]
                for value in values:
                    broadcast(operand(value))
                continue
            take_lhs = np.asarray(condition).astype(np.bool_)
            for value, mask in ((op.lhs, take_lhs), (op.rhs, ~take_lhs)):
                if not mask.any():
                    continue
                array = ctx.constant(value)
                if array is not None:
                    masked_shape = np.broadcast_shapes(np.shape(array), mask.shape)
                    kind = kind_of(tuple(masked_shape), num_elements(masked_shape) == 1)
                    kind = "tile" if kind == "scalar" else kind
                    broadcast(kind)
                    load(kind)
                    continue
                broadcast(operand(value))
                if mask.all():
                    continue
                load(kind_of(tuple(mask.shape), mask.size == 1))
                counts["tile"] += 2
        elif type(op) in RULES:
            rule = RULES[type(op)]
            kinds = [operand(v) for v in op.operands]
            if rule.commutative and len(kinds) == 2 and kinds[0] != "tile" and kinds[1] == "tile":
                kinds = [kinds[1], kinds[0]]
            for i in rule.tile_operands(op):
                if i < len(kinds):
                    kinds[i] = broadcast(kinds[i])
            n_temps, n_ints, n_b = rule.temp_count(op)
            counts["tile"] += n_temps + n_ints  # single-buffered (int scratch: 4 bytes or fewer)
            if n_b and len(kinds) > 1 and kinds[1] != "imm":
                for _ in range(n_b):
                    load(kinds[1])
        tiles.update(op.results)
    if result not in tiles:
        broadcast(operand(result))
    return EpilogueBytes(counts["tile"], counts["row"], counts["col"], counts["one"])


class _CostSeq(Seq):
    """A Seq that emits nothing and sums the target's cost (`vector.cost`) of each vector
    instruction a rule's sequence would emit (a fill: one `mul`)."""

    def __init__(self, cost: dict[str, int]):
        super().__init__(None, 1, 1)  # type: ignore[arg-type]
        self.cost, self.total = cost, 0

    def v(self, name, dst, a, b=None) -> None:  # type: ignore[override]
        self.total += self.cost.get(name, 1)

    def fill(self, dst, value) -> None:  # type: ignore[override]
        self.total += self.cost.get("mul", 1)


def rule_cost(ctx: LoweringContext, op: Operation, rule) -> int:
    """Vector-unit cost units per element of one op's instruction sequence: the sum of the
    target's costs of the instructions its rule emits (operands as tiles), or the rule's own
    estimate when the sequence depends on more than the op."""
    seq = _CostSeq(ctx.hw.vector.cost)
    n_temps, n_ints, n_b = rule.temp_count(op)
    xs = [("tile", object()) for _ in op.operands]
    try:
        rule.emit(seq, op, object(), xs, [object() for _ in range(n_temps + n_b)],
                  [object() for _ in range(n_ints)])
    except Exception:  # noqa: BLE001 - e.g. a sequence chosen by operand kinds: the rule's estimate
        return rule.cost(op) if callable(rule.cost) else rule.cost
    return max(1, seq.total)


def epilogue_cost(ctx: LoweringContext, ops: Sequence[Operation]) -> int:
    """Vector-unit cost units of the ops per output element (tiling_cost's epi_cost), read from
    the target's per-instruction costs."""
    cost = ctx.hw.vector.cost
    total = 0
    for op in ops:
        rule = RULES.get(type(op))
        if rule is None:
            total += cost.get("add", 1)
        elif rule.vector_op is not None:
            total += cost.get(rule.vector_op, 1)
        else:
            total += rule_cost(ctx, op, rule)
    return total


# -- standalone elementwise kernels ------------------------------------------------------------


def lower_elementwise(ctx: LoweringContext, ops: Sequence[Operation], result: SSAValue) -> None:
    """A chain of elementwise ops (one op, or an anchor-less `graph.kernel "elementwise"`) in
    row tiles of the output; `result` is the value it stores."""
    em = ctx.emitter
    out_shape = shape_of(result)
    inputs: list[SSAValue] = []
    produced = {r for o in ops for r in o.results}
    for op in ops:
        for value in op.operands:
            if value not in produced and value not in inputs:
                inputs.append(value)

    def fits(groups: Groups, value: SSAValue) -> bool:  # full, row, column or scalar
        return classify(groups, shape_of(value)) is not None

    split = None
    rank = len(out_shape)
    for i in range(rank):
        for j in range(rank - 1, i - 1, -1):
            groups = (out_shape[:i], out_shape[i:j], out_shape[j:])
            if all(fits(groups, v) for v in inputs):
                split = groups
                break
        if split:
            break
    materialized: dict[SSAValue, SSAValue] = {}
    if split is None:  # some operand broadcasts in a way no split serves: copy it to the full shape
        split = ((), out_shape[:-1] if out_shape else (), out_shape[-1:] if out_shape else (1,))
        for value in inputs:
            if not fits(split, value):
                materialized[value] = _broadcast_full(ctx, value, out_shape)
    batch_shape, row_shape, col_shape = split
    if not col_shape:
        col_shape = (1,)
    batches, rows_total, cols_total = num_elements(batch_shape), num_elements(row_shape), num_elements(col_shape)
    name = ctx.kernel_name()
    out2 = em.view(ctx.output_buffer(result), (batches * rows_total, cols_total))
    full_inputs = [v for v in inputs if v in materialized
                   or ((kinds := classify(split, shape_of(v))) and kinds[1] and kinds[2])]
    on_tile = epilogue_footprint(ctx, ops, result, list(materialized), (batch_shape, row_shape, col_shape))
    # tiles of several whole batch entries (when the cost model wants more rows than one entry
    # has): an operand that was a row vector of its entry is a tile there, so those count as
    # the operands of the flattened view do (a misfit there: a tile)
    on_stacked = epilogue_footprint(ctx, ops, result, list(materialized), ((), batch_shape + row_shape, col_shape))

    def footprint(rows: int, cols: int) -> int:  # + the materialized operands' tiles, x2
        # each emitted tile shape (the full tile and a remainder, in rows and in columns)
        # allocates its own buffers (Emitter.tiles), so all of them count
        if rows > rows_total:
            return sum(on_stacked(r, c) + 2 * 4 * r * c * len(materialized)
                       for r in tile_extents(batches * rows_total, rows - rows % rows_total)
                       for c in tile_extents(cols_total, cols))
        return sum(on_tile(r, c) + 2 * 4 * r * c * len(materialized)
                   for r in tile_extents(rows_total, rows) for c in tile_extents(cols_total, cols))

    override = ctx.override(name, 1)
    costs = dict(bytes_out=4, vec_cost=max(1, epilogue_cost(ctx, ops)), live_tiles=2 + len(full_inputs) + len(ops),
                 footprint=footprint,
                 pipelined=len(full_inputs) <= 1)  # tile-to-npu pipelines loads whose first consumers differ
    choice = tiling_cost.choose_rows(ctx.hw, batches * rows_total, cols_total, bytes_in=4 * max(1, len(full_inputs)),
                                     override=override[0] if override else None, **costs)
    # Several whole batch entries per tile where one entry is fewer rows than the tile the cost
    # model chose and it predicts that faster than one tile per entry (a loop of tiny tiles,
    # each a DRAM round trip, was latency-bound on server: Mamba's [L, D, N] discretization, a
    # MoE layer's rows spread over experts). Stacked, an operand that is a row or a shared tile
    # of each entry is a whole tile, its DRAM rows read again for every row.
    entries = 1
    if override:
        entries = min(batches, choice.rows // rows_total) if choice.cols >= cols_total else 1
    elif batches > 1 and choice.rows > rows_total and choice.cols >= cols_total:
        repeated = sum(1 for v in inputs if v not in materialized and (k := classify(split, shape_of(v))) is not None
                       and k[2] and (k[0] != k[1]))
        per_entry = tiling_cost.choose_rows(ctx.hw, batches * rows_total, cols_total,
                                            bytes_in=4 * max(1, len(full_inputs)), override=rows_total, **costs)
        stacked = tiling_cost.choose_rows(ctx.hw, batches * rows_total, cols_total,
                                          bytes_in=4 * max(1, len(full_inputs) + repeated), **costs)
        if stacked.rows > rows_total and stacked.cols >= cols_total and stacked.cycles < per_entry.cycles:
            choice, entries = stacked, min(batches, stacked.rows // rows_total)
    choice.rows = min(choice.rows, rows_total)
    ctx.debug(tiling_cost.describe_rows(name, "elementwise " + "+".join(o.name.split(".")[1] for o in ops),
                                        "x".join(map(str, out_shape)), choice))

    # the whole result in one tile: the next kernels may read it there (`KEPT_TILE_READERS`)
    one_tile = (latency_bound(ctx.hw) and max(entries, 1) >= batches and choice.rows >= rows_total
                and choice.cols >= cols_total)
    # the operands the kernel before left whole on chip are read in place (`_kept_operand`):
    # the estimate loads only the others (none: the vector work, then the store)
    held = [v for v in inputs if v not in materialized and _held_whole(ctx, v, split, batches)] \
        if one_tile and entries <= 1 else []
    if held:
        loaded = [v for v in full_inputs if v not in held]
        tensors = [v for v in inputs if (array := ctx.constant(v)) is None or array.size > 1]  # not immediates
        bytes_in = 0 if all(v in held for v in tensors) else 4 * max(1, len(loaded))
        ctx.predict(tiling_cost.choose_rows(ctx.hw, batches * rows_total, cols_total, bytes_in=bytes_in,
                                            override=choice.rows, **costs).cycles)
    else:
        ctx.predict(choice.cycles)

    def body(batch: Index, row0: Index, rows: int, col0: Index, cols: int, count: int = 1) -> None:
        frame = TileFrame(batch_shape, row_shape, col_shape, batch, row0, col0, rows, cols, batch_count=count)
        on_tile: dict[SSAValue, SSAValue] = {}
        for value, full in materialized.items():
            on_tile[value] = _load_buffer(em, full, out_shape, frame)[1]  # type: ignore[assignment]
        tile = apply_epilogue(ctx, ops, on_tile, frame, result)
        em.dma(tile, ORIGIN, out2, [em.add(em.mul(batch, rows_total), row0), col0], [rows, cols])
        if one_tile:
            ctx.keep_on_chip(out2, tile, next_kernels=KEPT_TILE_READERS)

    if entries > 1:
        em.tiles(batches, entries, lambda b0, count: body(b0, 0, count * rows_total, 0, cols_total, count))
        return
    em.range(batches, lambda b: em.tiles(
        rows_total, choice.rows, lambda r0, rows: em.tiles(cols_total, choice.cols, lambda c0, cols: body(b, r0, rows, c0, cols))))


def _broadcast_full(ctx: LoweringContext, value: SSAValue, shape: tuple[int, ...]) -> SSAValue:
    """A DRAM copy of `value` broadcast to `shape` (copies.copy_box, a loop nest of its own)."""
    in_shape = (1,) * (len(shape) - len(shape_of(value))) + shape_of(value)
    full = ctx.emitter.alloc(shape, f32, "dram")
    src = ctx.emitter.view(ctx.buffer(value), in_shape) if in_shape else ctx.buffer(value)
    steps = [0 if (a == 1 and b != 1) else 1 for a, b in zip(in_shape, shape, strict=True)]
    copy_box(ctx, src, in_shape, [0] * len(shape), steps, full, shape, [0] * len(shape), shape)
    return full


def lower_elementwise_op(ctx: LoweringContext, op: Operation) -> None:
    """One elementwise op on its own."""
    lower_elementwise(ctx, [op], op.results[0])
