"""graph.cast: f32 -> bf16 -> f32 and f32 -> i32 -> f32 round trips (and casts of integer inputs).

A cast f32 -> bf16/i32 whose every use casts back to f32 is lowered together with the cast
back, as one kernel, on row tiles:

* bf16: a vector copy to a bf16 tile and back (round to nearest even);
* i32: truncation toward zero, trunc(x) = t(relu(x)) - t(relu(-x)) with
  t(a) = r - rint(r - a + 0.5), r = rint(a) (the vector unit's f32 -> i32 conversion rounds
  half to even); exact for |x| < 2^31 (the vector unit saturates beyond).

Casts of integer model inputs lower in integer_inputs.py. Every other cast works on f32-held
values (storage.py): one that keeps the value (float -> float, int/bool -> float, widening
integers) aliases its input's buffer; the others (to bf16, float -> integer, narrowing
integers, to i1) are elementwise sequences (vector_math.emit_cast).
"""

from __future__ import annotations

from xdsl.dialects.builtin import bf16, f32, i32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import element_name_of, num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile import elementwise, integer_inputs
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import LoweringContext
from infer.passes.graph_to_tile.copies import copy_dram
from infer.passes.graph_to_tile.vector_math import cast_kind

ROUND_TRIP = ("bf16", "i32")  # the element types an f32 value may make a round trip through


def is_inner_round_trip(op: Operation) -> bool:
    """A cast f32 -> bf16/i32 whose every use casts back to f32 (lowered by the user)."""
    if not isinstance(op, g.CastOp) or element_name_of(op.input) != "f32" \
            or element_name_of(op.output) not in ROUND_TRIP:
        return False
    uses = list(op.output.uses)
    return bool(uses) and all(isinstance(u.operation, g.CastOp) and element_name_of(u.operation.output) == "f32"
                              for u in uses)


def is_outer_round_trip(op: Operation) -> bool:
    """The cast back to f32 of an inner round-trip cast."""
    return (isinstance(op, g.CastOp) and element_name_of(op.output) == "f32"
            and isinstance(op.input.owner, g.CastOp) and is_inner_round_trip(op.input.owner))


def lower_cast(ctx: LoweringContext, op: Operation) -> None:
    if integer_inputs.lower_if_integer(ctx, op):
        return
    if is_inner_round_trip(op):
        return  # lowered with the cast back to f32
    if is_outer_round_trip(op):
        _lower_round_trip(ctx, op)
        return
    if cast_kind(op) == "copy":  # the f32-held value is the result's value (storage.py): alias it
        ctx.buffers[op.output] = ctx.buffer(op.input)
        if op.output in ctx.destinations:
            copy_dram(ctx, ctx.buffers[op.output], ctx.destinations[op.output], shape_of(op.output))
        return
    elementwise.lower_elementwise_op(ctx, op)


def _lower_round_trip(ctx: LoweringContext, op: Operation) -> None:
    """y = f32(via(x)) for via = bf16 or i32 (see the module docstring)."""
    assert isinstance(op, g.CastOp)
    em = ctx.emitter
    inner = op.input.owner
    assert isinstance(inner, g.CastOp)
    via = element_name_of(inner.output)
    shape = shape_of(op.output)
    N = shape[-1] if shape else 1
    M = num_elements(shape) // N
    name = ctx.kernel_name()
    choice = tiling_cost.choose_rows(
        ctx.hw, M, N, bytes_in=4, bytes_out=4, vec_cost=2 if via == "bf16" else 14, live_tiles=5,
        footprint=lambda tr, tcn: tr * tcn * (20 if via == "bf16" else 40))  # x, y, low (, a, r) x2
    ctx.predict(choice.cycles)
    ctx.debug(tiling_cost.describe_rows(name, f"cast f32->{via}->f32", "x".join(map(str, shape)), choice))
    x2 = em.view(ctx.buffer(inner.input), (M, N))
    out2 = em.view(ctx.output_buffer(op.output), (M, N))
    TR, TC = min(choice.rows, M), choice.cols
    x_tile = em.alloc((TR, TC), f32, "spad", 2)
    y_tile = em.alloc((TR, TC), f32, "spad", 2)
    low = em.alloc((TR, TC), bf16 if via == "bf16" else i32, "spad", 2)
    a = em.alloc((TR, TC), f32, "spad", 2) if via == "i32" else None
    r = em.alloc((TR, TC), f32, "spad", 2) if via == "i32" else None
    z = [0, 0]

    def truncate_positive(dst: SSAValue, rows: int, cols: int) -> None:  # dst = t(a)
        assert a is not None and r is not None
        em.vec("copy", low, z, a, z, rows, cols)
        em.vec("copy", dst, z, low, z, rows, cols)
        em.vec("sub", r, z, dst, z, rows, cols, a, z, bmode="tile")
        em.vec("add", r, z, r, z, rows, cols, bmode="imm", imm=0.5)
        em.vec("copy", low, z, r, z, rows, cols)
        em.vec("copy", r, z, low, z, rows, cols)
        em.vec("sub", dst, z, dst, z, rows, cols, r, z, bmode="tile")

    def tile(r0: Index, rows: int, c0: Index, cols: int) -> None:
        em.dma(x2, [r0, c0], x_tile, z, [rows, cols])
        if via == "bf16":
            em.vec("copy", low, z, x_tile, z, rows, cols)
            em.vec("copy", y_tile, z, low, z, rows, cols)
        else:
            assert a is not None
            em.vec("relu", a, z, x_tile, z, rows, cols)
            truncate_positive(y_tile, rows, cols)
            em.vec("neg", a, z, x_tile, z, rows, cols)
            em.vec("relu", a, z, a, z, rows, cols)
            truncate_positive(x_tile, rows, cols)
            em.vec("sub", y_tile, z, y_tile, z, rows, cols, x_tile, z, bmode="tile")
        em.dma(y_tile, z, out2, [r0, c0], [rows, cols])

    em.tiles(M, TR, lambda r0, rows: em.tiles(N, TC, lambda c0, cols: tile(r0, rows, c0, cols)))
