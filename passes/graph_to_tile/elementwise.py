"""Elementwise ops on the vector unit: alone, and as the epilogue of a matrix kernel.

An output tile is a `TileFrame`: the output shape split into three groups, batch + rows +
columns, and a [rows x cols] window of it. Every operand of an elementwise op must be, on that
frame, full (a `tile`, DMA'd per tile), a row vector (`row`, broadcast down the rows), a
column vector (`col`, broadcast along the rows) or a compile-time scalar (`imm`); these are
the vector unit's `bmode`s. Standalone elementwise ops and anchor-less `graph.kernel
"elementwise"` regions (`lower_elementwise`) pick the group split that makes every operand one
of these and walk the output in row tiles [TR, TC] (tiling_cost.choose_rows).

The epilogue of a matmul/conv kernel (`apply_epilogue`) runs the kernel's trailing elementwise
ops on its accumulator tile before the one DMA store: `fusable_chain` finds them when no
`graph.kernel` region names them. `epilogue_footprint` mirrors the buffers `apply_epilogue`
allocates, so the cost model sizes tiles with the epilogue included.

Vector sequences: erf-GELU uses Abramowitz & Stegun 7.1.26 (|err| < 1.5e-7); leaky_relu, elu,
hard_sigmoid, clip, div (reciprocal and multiply) and pow with exponents 2, 3, +-0.5, +-1 are
short sequences of vector ops; `where` with a compile-time condition is x*c + y*(1-c) on the
tile (exact for finite values). Other elementwise ops (comparisons, logic, log, erf, sin, ...)
have no lowering.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import f32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Emitter, Index
from infer.passes.graph_to_tile.context import LoweringContext, error

UNARY_VECTOR_OPS: dict[type[Operation], str] = {
    g.ReluOp: "relu", g.NegOp: "neg", g.AbsOp: "abs", g.ExpOp: "exp", g.SqrtOp: "sqrt",
    g.RsqrtOp: "rsqrt", g.ReciprocalOp: "recip", g.TanhOp: "tanh", g.SigmoidOp: "sigmoid",
    g.SiluOp: "silu"}
"""Unary graph ops that are one vector op."""
BINARY_VECTOR_OPS: dict[type[Operation], str] = {
    g.AddOp: "add", g.SubOp: "sub", g.MulOp: "mul", g.MaximumOp: "max", g.MinimumOp: "min",
    g.DivOp: "div"}
"""Binary graph ops that are one vector op (div: a reciprocal, then a multiply)."""
COMMUTATIVE = ("add", "mul", "max", "min")
POW_EXPONENTS = (2.0, 0.5, 1.0, -1.0, -0.5, 3.0)  # compile-time exponents graph.pow lowers
ERF_GELU_COST = 20  # vector ops of the A&S erf-GELU sequence (cost-model estimate)

# Abramowitz & Stegun 7.1.26: erf(a) = 1 - t (p1 + t (p2 + ...)) e^{-a^2}, t = 1 / (1 + p a), |err| < 1.5e-7
_AS_P = 0.3275911
_AS = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)

Groups = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]  # batch, row and column dims
Operand = tuple[str, object]  # (bmode, local buffer) or ("imm", float)
ORIGIN = (0, 0)  # local tiles are addressed from their first element


@dataclass
class TileFrame:
    """An output tile in a 3-group view of the output shape batch + rows + cols:
    batch index `batch` (over prod(batch_shape)), rows [row0, row0 + rows) of
    prod(row_shape), columns [col0, col0 + cols) of prod(col_shape)."""

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
        raise error(op, f"operand of shape {shape_of(value)} broadcasts onto the output "
                    f"{frame.shape} in a way the tile lowering does not support")
    if not kinds[1] and not kinds[2]:
        raise error(op, "a runtime scalar operand is not supported (only compile-time scalars)")
    return _load_buffer(ctx.emitter, ctx.buffer(value), shape_of(value), frame)


def _load_buffer(em: Emitter, src: SSAValue, shape: tuple[int, ...], frame: TileFrame) -> Operand:
    kinds = classify(frame.groups, shape)
    assert kinds is not None
    full_batch, full_rows, full_cols = kinds
    assert full_rows or full_cols
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


def apply_epilogue(ctx: LoweringContext, ops: Sequence[Operation], tiles: dict[SSAValue, SSAValue],
                   frame: TileFrame, result: SSAValue) -> SSAValue:
    """Apply elementwise ops to local tiles; `tiles` maps tensors already on the tile (the
    anchor's result) to [rows x cols] fp32 local buffers at [0, 0]. Returns the tile of `result`."""
    em, rows, cols, z = ctx.emitter, frame.rows, frame.cols, ORIGIN

    def operand(value: SSAValue, op: Operation) -> Operand:
        if value in tiles:
            return "tile", tiles[value]
        return load_operand(ctx, value, frame, op)

    for op in ops:
        out = op.results[0]
        if shape_of(out) != frame.shape:
            raise error(op, f"result {shape_of(out)} is not the kernel's output shape {frame.shape}")
        dst = em.alloc((rows, cols), f32, "spad", 2)
        if isinstance(op, g.WhereOp):
            _where(ctx, op, dst, frame, operand)
        elif isinstance(op, g.UnaryOp):
            kind, x = operand(op.operands[0], op)
            if kind != "tile":  # broadcast operand: materialize it on the tile
                x = _broadcast_tile(em, kind, x, frame)
            _unary(em, op, dst, x, rows, cols)  # type: ignore[arg-type]
        elif isinstance(op, g.BinaryOp):
            kind_a, a = operand(op.lhs, op)
            kind_b, b = operand(op.rhs, op)
            name = BINARY_VECTOR_OPS.get(type(op))
            if name is None:
                if isinstance(op, g.PowOp) and kind_b == "imm" and b in POW_EXPONENTS:
                    if kind_a != "tile":
                        a = _broadcast_tile(em, kind_a, a, frame)
                    _pow(em, dst, a, b, rows, cols)  # type: ignore[arg-type]
                    tiles[out] = dst
                    continue
                raise error(op, "this elementwise op has no vector-unit lowering")
            if kind_a != "tile":
                if name in COMMUTATIVE:
                    kind_a, a, kind_b, b = kind_b, b, kind_a, a
                else:
                    a = _broadcast_tile(em, kind_a, a, frame)
                    kind_a = "tile"
            if kind_a != "tile":
                a = _broadcast_tile(em, kind_a, a, frame)
            if name == "div":
                if kind_b == "imm":
                    em.vec("mul", dst, z, a, z, rows, cols, bmode="imm", imm=1.0 / b)  # type: ignore[operator]
                else:
                    shape = {"tile": (rows, cols), "row": (1, cols), "col": (rows, 1)}[kind_b]
                    reciprocal = em.alloc(shape, f32, "spad", 2)
                    em.vec("recip", reciprocal, z, b, z, *shape)  # type: ignore[arg-type]
                    em.vec("mul", dst, z, a, z, rows, cols, reciprocal, z, bmode=kind_b)  # type: ignore[arg-type]
            elif kind_b == "imm":
                em.vec(name, dst, z, a, z, rows, cols, bmode="imm", imm=b)  # type: ignore[arg-type]
            else:
                em.vec(name, dst, z, a, z, rows, cols, b, z, bmode=kind_b)  # type: ignore[arg-type]
        else:
            raise error(op, "only elementwise unary/binary ops can follow a kernel's anchor")
        tiles[out] = dst
    if result not in tiles:
        kind, x = operand(result, ops[-1] if ops else result.owner)  # type: ignore[arg-type]
        return _broadcast_tile(em, kind, x, frame)
    return tiles[result]


def _where(ctx: LoweringContext, op: g.WhereOp, dst: SSAValue, frame: TileFrame,
           operand: Callable[[SSAValue, Operation], Operand]) -> None:
    """where(c, x, y) with a compile-time condition: x*c + y*(1-c) on the tile
    (exact for finite values); a compile-time branch is masked at compile time."""
    em, rows, cols, z = ctx.emitter, frame.rows, frame.cols, ORIGIN
    condition = ctx.constant(op.condition)
    if condition is None:
        raise error(op, "where needs a compile-time condition (runtime i1 tensors are not lowered)")
    take_lhs = np.asarray(condition).astype(np.bool_)
    terms: list[SSAValue] = []
    for value, mask in ((op.lhs, take_lhs), (op.rhs, ~take_lhs)):
        if not mask.any():
            continue
        array = ctx.constant(value)
        if array is not None:  # the masked branch is a constant: fold it
            masked = np.where(mask, np.asarray(array, np.float32), np.float32(0)).astype(np.float32)
            terms.append(_broadcast_tile(em, *load_array(ctx, masked, frame), frame))
            continue
        kind, x = operand(value, op)
        x = _broadcast_tile(em, kind, x, frame)
        if mask.all():
            terms.append(x)
            continue
        mask_kind, mask_buffer = load_array(ctx, mask.astype(np.float32), frame)
        product = em.alloc((rows, cols), f32, "spad", 2)
        em.vec("mul", product, z, x, z, rows, cols, mask_buffer, z, bmode=mask_kind)  # type: ignore[arg-type]
        terms.append(product)
    if not terms:
        em.fill(dst, z, rows, cols, 0.0)
    elif len(terms) == 1:
        em.vec("copy", dst, z, terms[0], z, rows, cols)
    else:
        em.vec("add", dst, z, terms[0], z, rows, cols, terms[1], z, bmode="tile")


def _pow(em: Emitter, dst: SSAValue, a: SSAValue, exponent: float, rows: int, cols: int) -> None:
    z = ORIGIN
    if exponent == 2.0:
        em.vec("mul", dst, z, a, z, rows, cols, a, z, bmode="tile")
    elif exponent == 3.0:
        em.vec("mul", dst, z, a, z, rows, cols, a, z, bmode="tile")
        em.vec("mul", dst, z, dst, z, rows, cols, a, z, bmode="tile")
    elif exponent == 0.5:
        em.vec("sqrt", dst, z, a, z, rows, cols)
    elif exponent == -0.5:
        em.vec("rsqrt", dst, z, a, z, rows, cols)
    elif exponent == -1.0:
        em.vec("recip", dst, z, a, z, rows, cols)
    else:
        em.vec("copy", dst, z, a, z, rows, cols)


# -- unary ops that are vector sequences --------------------------------------------------------


def _gelu(em: Emitter, op: g.GeluOp, dst: SSAValue, x: SSAValue, rows: int, cols: int) -> None:
    z = ORIGIN
    if op.approximate.data == "tanh":
        em.vec("gelu", dst, z, x, z, rows, cols)
        return
    # 0.5 (x + |x| erf(|x| / sqrt 2)) with A&S 7.1.26 for erf on a >= 0
    a = em.alloc((rows, cols), f32, "spad", 1)
    t = em.alloc((rows, cols), f32, "spad", 1)
    p = em.alloc((rows, cols), f32, "spad", 1)
    em.vec("abs", a, z, x, z, rows, cols)
    em.vec("mul", a, z, a, z, rows, cols, bmode="imm", imm=1 / math.sqrt(2))  # a = |x|/sqrt2
    em.vec("mul", t, z, a, z, rows, cols, bmode="imm", imm=_AS_P)
    em.vec("add", t, z, t, z, rows, cols, bmode="imm", imm=1.0)
    em.vec("recip", t, z, t, z, rows, cols)  # t
    em.vec("mul", p, z, t, z, rows, cols, bmode="imm", imm=_AS[4])
    for coef in reversed(_AS[:4]):
        em.vec("add", p, z, p, z, rows, cols, bmode="imm", imm=coef)
        em.vec("mul", p, z, p, z, rows, cols, t, z, bmode="tile")  # p = t * poly(t)
    em.vec("mul", t, z, a, z, rows, cols, a, z, bmode="tile")
    em.vec("neg", t, z, t, z, rows, cols)
    em.vec("exp", t, z, t, z, rows, cols)  # e^{-a^2}
    em.vec("mul", p, z, p, z, rows, cols, t, z, bmode="tile")
    em.vec("sub", p, z, p, z, rows, cols, bmode="imm", imm=1.0)  # -(erf(a))
    em.vec("abs", a, z, x, z, rows, cols)
    em.vec("mul", p, z, p, z, rows, cols, a, z, bmode="tile")  # -|x| erf
    em.vec("sub", dst, z, x, z, rows, cols, p, z, bmode="tile")
    em.vec("mul", dst, z, dst, z, rows, cols, bmode="imm", imm=0.5)


def _clip(em: Emitter, op: g.ClipOp, dst: SSAValue, x: SSAValue, rows: int, cols: int) -> None:
    z = ORIGIN
    src = x
    if op.min is not None:
        em.vec("max", dst, z, src, z, rows, cols, bmode="imm", imm=op.min.value.data)
        src = dst
    if op.max is not None:
        em.vec("min", dst, z, src, z, rows, cols, bmode="imm", imm=op.max.value.data)
        src = dst
    if src is x:
        em.vec("copy", dst, z, x, z, rows, cols)


def _leaky_relu(em: Emitter, op: g.LeakyReluOp, dst: SSAValue, x: SSAValue, rows: int, cols: int) -> None:
    z = ORIGIN
    negative = em.alloc((rows, cols), f32, "spad", 1)
    em.vec("min", negative, z, x, z, rows, cols, bmode="imm", imm=0.0)
    em.vec("mul", negative, z, negative, z, rows, cols, bmode="imm", imm=op.alpha.value.data)
    em.vec("relu", dst, z, x, z, rows, cols)
    em.vec("add", dst, z, dst, z, rows, cols, negative, z, bmode="tile")


def _elu(em: Emitter, op: g.EluOp, dst: SSAValue, x: SSAValue, rows: int, cols: int) -> None:
    z = ORIGIN
    negative = em.alloc((rows, cols), f32, "spad", 1)
    em.vec("min", negative, z, x, z, rows, cols, bmode="imm", imm=0.0)
    em.vec("exp", negative, z, negative, z, rows, cols)
    em.vec("add", negative, z, negative, z, rows, cols, bmode="imm", imm=-1.0)
    em.vec("mul", negative, z, negative, z, rows, cols, bmode="imm", imm=op.alpha.value.data)
    em.vec("relu", dst, z, x, z, rows, cols)
    em.vec("add", dst, z, dst, z, rows, cols, negative, z, bmode="tile")


def _hard_sigmoid(em: Emitter, op: g.HardSigmoidOp, dst: SSAValue, x: SSAValue, rows: int, cols: int) -> None:
    z = ORIGIN
    em.vec("mul", dst, z, x, z, rows, cols, bmode="imm", imm=op.alpha.value.data)
    em.vec("add", dst, z, dst, z, rows, cols, bmode="imm", imm=op.beta.value.data)
    em.vec("max", dst, z, dst, z, rows, cols, bmode="imm", imm=0.0)
    em.vec("min", dst, z, dst, z, rows, cols, bmode="imm", imm=1.0)


UNARY_SEQUENCES: dict[type[Operation], Callable] = {
    g.GeluOp: _gelu, g.ClipOp: _clip, g.LeakyReluOp: _leaky_relu, g.EluOp: _elu,
    g.HardSigmoidOp: _hard_sigmoid}
"""Unary graph ops that are a sequence of vector ops: (emitter, op, dst, x, rows, cols)."""
EPILOGUE_OPS = (*UNARY_VECTOR_OPS, *UNARY_SEQUENCES, *BINARY_VECTOR_OPS)
"""Elementwise ops the lowering fuses after a matmul/conv anchor by itself (`fusable_chain`)."""
ELEMENTWISE_OPS = (*EPILOGUE_OPS, g.PowOp, g.WhereOp)
"""Elementwise ops with a vector-unit lowering (graph.pow: compile-time exponents in POW_EXPONENTS)."""


def _unary(em: Emitter, op: Operation, dst: SSAValue, x: SSAValue, rows: int, cols: int) -> None:
    vector_op = UNARY_VECTOR_OPS.get(type(op))
    if vector_op is not None:
        em.vec(vector_op, dst, ORIGIN, x, ORIGIN, rows, cols)
        return
    sequence = UNARY_SEQUENCES.get(type(op))
    if sequence is None:
        raise error(op, "this elementwise op has no vector-unit lowering")
    sequence(em, op, dst, x, rows, cols)


def _temporaries(op: Operation) -> int:
    """[rows, cols] single-buffered temporaries the unary op's vector sequence allocates."""
    if isinstance(op, g.GeluOp):
        return 3 if op.approximate.data != "tanh" else 0
    return 1 if isinstance(op, g.LeakyReluOp | g.EluOp) else 0


# -- what an epilogue costs ------------------------------------------------------------------------


def epilogue_footprint(ctx: LoweringContext, ops: Sequence[Operation], result: SSAValue,
                       on_tile: Sequence[SSAValue], groups: Groups) -> Callable[[int, int], int]:
    """Scratchpad bytes of the local buffers `apply_epilogue(ops, ...)` allocates for a
    [rows, cols] output tile (it mirrors the allocation decisions of `apply_epilogue`,
    `_where`, the unary sequences, `_load_buffer` and `_broadcast_tile`): (rows, cols) -> bytes."""
    counts = {"tile": 0, "row": 0, "col": 0}  # fp32 [rows, cols] tiles, [1, cols] rows, [rows, 1] columns
    tiles = set(on_tile)

    def kind_of(shape: tuple[int, ...], const_scalar: bool) -> str:
        if const_scalar:
            return "imm"
        kinds = classify(groups, shape)
        if kinds is None or not (kinds[1] or kinds[2]):
            return "tile"
        return "tile" if kinds[1] and kinds[2] else ("row" if kinds[2] else "col")

    def load(kind: str) -> None:  # double-buffered
        if kind in counts:
            counts[kind] += 2

    def operand(value: SSAValue) -> str:
        if value in tiles:
            return "tile"
        array = ctx.constant(value)
        kind = kind_of(shape_of(value), array is not None and array.size == 1)
        load(kind)
        return kind

    def broadcast(kind: str) -> str:
        if kind != "tile":
            counts["tile"] += 2
        return "tile"

    for op in ops:
        counts["tile"] += 2  # dst
        if isinstance(op, g.WhereOp):
            condition = ctx.constant(op.condition)
            take_lhs = np.asarray(condition).astype(np.bool_) if condition is not None else np.ones((1,), np.bool_)
            for value, mask in ((op.lhs, take_lhs), (op.rhs, ~take_lhs)):
                if not mask.any():
                    continue
                array = ctx.constant(value)
                if array is not None:
                    masked_shape = np.broadcast_shapes(np.shape(array), mask.shape)
                    kind = kind_of(tuple(masked_shape), num_elements(masked_shape) == 1)
                    broadcast(kind)
                    load(kind)
                    continue
                broadcast(operand(value))
                if mask.all():
                    continue
                load(kind_of(tuple(mask.shape), mask.size == 1))
                counts["tile"] += 2
        elif isinstance(op, g.UnaryOp):
            broadcast(operand(op.operands[0]))
            counts["tile"] += _temporaries(op)
        elif isinstance(op, g.BinaryOp):
            kind_a, kind_b = operand(op.lhs), operand(op.rhs)
            name = BINARY_VECTOR_OPS.get(type(op))
            if name is None:
                broadcast(kind_a)
            else:
                if kind_a != "tile":
                    if name in COMMUTATIVE:
                        kind_a, kind_b = kind_b, kind_a
                    else:
                        kind_a = broadcast(kind_a)
                broadcast(kind_a)
                if name == "div" and kind_b != "imm":
                    load(kind_b)
        tiles.update(op.results)
    if result not in tiles:
        broadcast(operand(result))
    tile_count, row_count, col_count = counts["tile"], counts["row"], counts["col"]
    return lambda rows, cols: 4 * (tile_count * rows * cols + row_count * cols + col_count * rows)


def epilogue_cost(ctx: LoweringContext, ops: Sequence[Operation]) -> int:
    """Vector-unit cost units of the ops per output element (tiling_cost's epi_cost)."""
    cost = ctx.hw.vector.cost
    total = 0
    for op in ops:
        if isinstance(op, g.GeluOp) and op.approximate.data == "none":
            total += ERF_GELU_COST
        else:
            total += cost.get(UNARY_VECTOR_OPS.get(type(op), BINARY_VECTOR_OPS.get(type(op), "add")), 1)
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

    def fits(groups: Groups, value: SSAValue) -> bool:  # full, row, column or compile-time scalar
        kinds = classify(groups, shape_of(value))
        if kinds is None:
            return False
        return not (not kinds[1] and not kinds[2] and ctx.constant(value) is None
                    and num_elements(shape_of(value)) == 1)

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
    if split is None:
        split = ((), out_shape[:-1] if out_shape else (), out_shape[-1:] if out_shape else (1,))
    batch_shape, row_shape, col_shape = split
    if not col_shape:
        col_shape = (1,)
    batches, rows_total, cols_total = num_elements(batch_shape), num_elements(row_shape), num_elements(col_shape)
    name = ctx.kernel_name()
    out2 = em.view(ctx.output_buffer(result), (batches * rows_total, cols_total))
    full_inputs = [v for v in inputs if (kinds := classify(split, shape_of(v))) and kinds[1] and kinds[2]]
    footprint = epilogue_footprint(ctx, ops, result, [], (batch_shape, row_shape, col_shape))
    override = ctx.override(name, 1)
    choice = tiling_cost.choose_rows(
        ctx.hw, batches * rows_total, cols_total, bytes_in=4 * max(1, len(full_inputs)), bytes_out=4,
        vec_cost=max(1, epilogue_cost(ctx, ops)), live_tiles=2 + len(full_inputs) + len(ops),
        override=override[0] if override else None, footprint=footprint)
    choice.rows = min(choice.rows, rows_total)
    ctx.predict(choice.cycles)
    ctx.debug(tiling_cost.describe_rows(name, "elementwise " + "+".join(o.name.split(".")[1] for o in ops),
                                        "x".join(map(str, out_shape)), choice))

    def body(batch: Index, row0: Index, rows: int, col0: Index, cols: int) -> None:
        frame = TileFrame(batch_shape, row_shape, col_shape, batch, row0, col0, rows, cols)
        tile = apply_epilogue(ctx, ops, {}, frame, result)
        em.dma(tile, ORIGIN, out2, [em.add(em.mul(batch, rows_total), row0), col0], [rows, cols])

    em.range(batches, lambda b: em.tiles(
        rows_total, choice.rows, lambda r0, rows: em.tiles(cols_total, choice.cols, lambda c0, cols: body(b, r0, rows, c0, cols))))


def lower_elementwise_op(ctx: LoweringContext, op: Operation) -> None:
    """One elementwise op on its own."""
    lower_elementwise(ctx, [op], op.results[0])
