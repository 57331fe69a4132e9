"""What the int8 matrix kernels (integer_gemm.py, integer_conv.py) and the standalone
quantization ops share: the integer epilogue on the int32 accumulator, and
`graph.requantize` / `graph.dequantize_linear` as row-tiled vector kernels.

The matrix unit multiplies int8 x int8 into an int32 accumulator exactly (saturating). A
kernel's epilogue (its `graph.kernel` region after the integer anchor) is, in order:

* the int32 bias (`vec.add`, bias row/column per output channel), into which the input zero
  point is folded at compile time: (x - zx) @ W + b = x @ W + (b - zx * sum_k W);
* optional `graph.relu` on the int32 accumulator (`vec.relu`, exact);
* `graph.requantize` to int8 -- the result -- computed as the reference does,
  sat(rne(fp32(acc) * multiplier) + zero_point): per-column multipliers and zero point 0 are
  one `vec.requant` (bmode=row); per-row multipliers (conv: output channels are the rows) or a
  nonzero zero point are `vec.mul` into the int32 tile (fp32 product, rounded half to even,
  saturated to int32) then `vec.add` of the zero point into the int8 tile (integer add,
  saturated to int8): the same bits, since sat8(sat32(r) + zp) = sat8(r + zp) for |zp| < 2^8;
* or `graph.dequantize_linear` to f32 (`vec.mul` by the per-channel scale: fp32(acc) * scale,
  one rounding, as the reference), after which the remaining float ops run as an ordinary
  epilogue (elementwise.apply_epilogue) on the f32 tile, optionally ending in a per-tensor
  `graph.requantize` of that f32 tile to int8 (the next layer's input: `vec.requant` by the
  immediate, or for a zero point `vec.mul` into the int32 tile, free by then, and the add).

The vector unit's numerics are the simulator's and the tile interpreter's (store_converted:
float -> int rounds half to even and saturates), so graph interpreter, tile interpreter and
simulator agree bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import f32, i8, i32
from xdsl.ir import Attribute, Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import element_name_of, num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import LoweringContext, error
from infer.passes.graph_to_tile.elementwise import (
    EpilogueBytes,
    TileFrame,
    apply_epilogue,
    epilogue_cost,
    epilogue_footprint,
    fusable_chain,
)

INT_ELEMENTS = {"i8": i8, "i32": i32}


def require_signed_int8(op: Operation, *values: SSAValue) -> None:
    """The matrix unit multiplies signed int8 only (ui8 operands: not yet)."""
    for v in values:
        if element_name_of(v) != "i8":
            raise error(op, f"the int8 matrix unit takes i8 operands, got {element_name_of(v)} (ui8 inputs "
                        "and weights are not supported by the NPU lowering yet)")


def int_output_buffer(ctx: LoweringContext, value: SSAValue) -> SSAValue:
    """A DRAM buffer of value's element type (f32 values: the usual output buffer)."""
    name = element_name_of(value)
    if name == "f32":
        return ctx.output_buffer(value)
    if name not in INT_ELEMENTS or value in ctx.destinations:
        raise error(value.owner if isinstance(value.owner, Operation) else None,  # type: ignore[arg-type]
                    f"a {name} tensor cannot be a model output (int8 models end in dequantize_linear)")
    buffer = ctx.emitter.alloc(shape_of(value), INT_ELEMENTS[name], "dram")
    ctx.buffers[value] = buffer
    return buffer


def int_input_buffer(ctx: LoweringContext, value: SSAValue) -> SSAValue:
    """The DRAM buffer an int8-path lowering reads `value` from, in value's own element type:
    a compile-time i8 / i32 value (a quantized bias, a weight) as a weight of that type, since
    `ctx.buffer` holds constants as f32 values, which an integer tile would read as raw bits."""
    name = element_name_of(value)
    if name in INT_ELEMENTS and value not in ctx.buffers:
        array = ctx.constant(value)
        if array is not None:
            owner = value.owner
            hint = owner.weight_key if isinstance(owner, g.WeightOp) else "const"
            return ctx.weight(hint, np.ascontiguousarray(np.broadcast_to(array, shape_of(value))), INT_ELEMENTS[name])
    return ctx.buffer(value)


def channel_vector(ctx: LoweringContext, op: Operation, value: SSAValue, channels: int, axis: int | None,
                   channel_axis: int) -> np.ndarray:
    """A per-tensor or per-channel f32 constant (multiplier / scale) as [channels]."""
    array = ctx.constant(value)
    if array is None:
        raise error(op, "the multiplier / scale must be a compile-time constant")
    array = np.asarray(array, np.float32).reshape(-1)
    if array.size == 1:
        return np.full(channels, array[0], np.float32)
    if axis != channel_axis or array.size != channels:
        raise error(op, f"per-channel parameters must run along the output channel axis {channel_axis} "
                    f"({channels} channels), got axis {axis} with {array.size} values")
    return array


@dataclass
class IntegerEpilogue:
    """The parsed epilogue of an integer kernel (see the module docstring)."""

    relu: bool = False
    kind: str = "acc"  # "requant" (i8 result), "dequant" (f32), "acc" (the i32 accumulator)
    scale: np.ndarray | None = None  # [channels] f32: requant multiplier or dequant scale
    zero_point: int = 0
    quant_result: SSAValue | None = None
    float_ops: list[Operation] = field(default_factory=list)
    final_requantize: g.RequantizeOp | None = None  # after the float ops: f32 -> i8, per tensor

    def out_element(self) -> Attribute:
        return {"requant": i8, "dequant": f32, "acc": i32}[self.kind]

    @property
    def stored_bytes(self) -> int:
        """Bytes per element of the stored result."""
        return 1 if self.kind == "requant" or self.final_requantize is not None else 4

    def vector_cost(self, ctx: LoweringContext, has_bias: bool, per_row: bool) -> int:
        cost = ctx.hw.vector.cost
        total = (cost["add"] if has_bias else 0) + (cost["relu"] if self.relu else 0)
        if self.kind == "requant":
            total += cost["mul"] + cost["add"] if per_row or self.zero_point else cost["requant"]
        elif self.kind == "dequant":
            total += cost["mul"] + epilogue_cost(ctx, self.float_ops)
            if self.final_requantize is not None:
                total += cost["requant"] + (cost["add"] if self.final_requantize.zero_point.value.data else 0)
        return total


def parse_epilogue(ctx: LoweringContext, anchor: Operation, epilogue: Sequence[Operation], result: SSAValue,
                   channels: int, channel_axis: int) -> IntegerEpilogue:
    """Split an integer kernel's epilogue into its integer part and the float ops after a
    dequantize_linear; anything else is a located error."""
    epi = IntegerEpilogue()
    current = anchor.results[0]
    ops = list(epilogue)
    while ops:
        op = ops.pop(0)
        if op.operands[0] is not current:
            raise error(op, "an integer kernel's epilogue must be a chain on the accumulator")
        if isinstance(op, g.ReluOp) and epi.kind == "acc":
            epi.relu = True
        elif isinstance(op, g.RequantizeOp) and element_name_of(op.output) == "i8":
            epi.kind, epi.quant_result = "requant", op.output
            epi.scale = channel_vector(ctx, op, op.multiplier, channels, _axis(op), channel_axis)
            epi.zero_point = op.zero_point.value.data
        elif isinstance(op, g.DequantizeLinearOp) and element_name_of(op.output) == "f32":
            if op.zero_point is not None and np.any(ctx.constant(op.zero_point)):
                raise error(op, "dequantizing an int32 accumulator takes zero point 0")
            epi.kind, epi.quant_result = "dequant", op.output
            epi.scale = channel_vector(ctx, op, op.scale, channels, _axis(op), channel_axis)
            current = op.results[0]
            requantizes = [i for i, o in enumerate(ops) if isinstance(o, g.QUANTIZATION_OPS)]
            if requantizes:
                final = ops[requantizes[0]]
                if not (isinstance(final, g.RequantizeOp) and requantizes[0] == len(ops) - 1
                        and element_name_of(final.output) == "i8"):
                    raise error(final, "only one requantize to i8, at the end, may follow the float ops of an "
                                "integer kernel")
                multiplier = ctx.constant(final.multiplier)
                if multiplier is None or np.unique(np.asarray(multiplier)).size != 1:
                    raise error(final, "a requantize after float ops must be per tensor (one constant multiplier)")
                epi.final_requantize = final
                ops = ops[:-1]
            epi.float_ops = ops
            if ops:
                current = ops[-1].results[0]
            if epi.final_requantize is not None:
                if epi.final_requantize.input is not current:
                    raise error(epi.final_requantize, "the requantize must take the float ops' result")
                current = epi.final_requantize.output
            break
        else:
            raise error(op, f"'{op.name}' after an integer kernel has no int8 lowering (supported: relu on the "
                        "int32 accumulator, then requantize to i8 or dequantize_linear to f32 and float ops)")
        current = op.results[0]
        if epi.kind == "requant" and ops:
            raise error(ops[0], "ops after an int8 requantize in the same kernel are not supported")
    if current is not result:
        raise error(anchor, "the kernel's result is not the end of its epilogue chain")
    return epi


def integer_chain(ctx: LoweringContext, anchor: Operation) -> list[Operation]:
    """Without a graph.kernel region: the single-use chain after an integer anchor that
    `parse_epilogue` takes (relu, then requantize, or dequantize_linear and the float ops
    elementwise.fusable_chain finds after it)."""
    chain: list[Operation] = []
    value = anchor.results[0]
    while len(list(value.uses)) == 1 and value not in ctx.destinations:
        user = next(iter(value.uses)).operation
        if user.parent_block() is not anchor.parent_block() or user.operands[0] is not value:
            break
        if isinstance(user, g.ReluOp) and not chain:
            chain.append(user)
        elif isinstance(user, g.RequantizeOp | g.DequantizeLinearOp) and all(
                ctx.constant(o) is not None for o in user.operands[1:]):
            chain.append(user)
            if isinstance(user, g.DequantizeLinearOp):
                chain += fusable_chain(ctx, user)
            break
        else:
            break
        value = user.results[0]
    return chain


def _axis(op: Operation) -> int | None:
    axis = op.axis  # type: ignore[attr-defined]
    return None if axis is None else axis.value.data


@dataclass(frozen=True)
class IntegerEpilogueBytes:
    """(rows, cols) -> scratchpad bytes of an int8 epilogue's buffers for one output tile size:
    `per_element` bytes per output element (the double-buffered output tiles) plus the float
    ops' buffers (a dequant epilogue). A value (hashable), like EpilogueBytes."""

    per_element: int
    float_bytes: EpilogueBytes | None

    def __call__(self, rows: int, cols: int) -> int:
        out = self.per_element * rows * cols
        return out + (self.float_bytes(rows, cols) if self.float_bytes is not None else 0)


def epilogue_scratchpad(ctx: LoweringContext, epi: IntegerEpilogue, result: SSAValue, frame_groups,
                        has_bias: bool) -> IntegerEpilogueBytes:
    """(rows, cols) -> scratchpad bytes of the epilogue's buffers for one output tile size
    (channel vectors counted by the caller)."""
    float_result = epi.final_requantize.input if epi.final_requantize is not None else result
    float_bytes = (epilogue_footprint(ctx, epi.float_ops, float_result, [epi.quant_result], frame_groups)
                   if epi.kind == "dequant" else None)
    per_element = 2 * {"requant": 1, "dequant": 4, "acc": 0}[epi.kind]
    if epi.final_requantize is not None:
        per_element += 2
    return IntegerEpilogueBytes(per_element, float_bytes)


def emit_epilogue(ctx: LoweringContext, epi: IntegerEpilogue, acc: SSAValue, rows: int, cols: int,
                  bias_tile: SSAValue | None, scale_tile: SSAValue | None, out_tile: SSAValue | None,
                  channel_mode: str, frame: TileFrame, result: SSAValue,
                  vector_at: tuple[Index, Index] = (0, 0)) -> SSAValue:
    """The epilogue on the [rows, cols] int32 accumulator tile; `channel_mode` "row" (channels
    along columns: bias/scale tiles [1, cols]) or "col" (channels along rows: [rows, 1]), the
    tile's channels starting at `vector_at` in them. Returns the tile to store."""
    em, z = ctx.emitter, [0, 0]
    v = list(vector_at)
    if bias_tile is not None:
        em.vec("add", acc, z, acc, z, rows, cols, bias_tile, v, bmode=channel_mode)
    if epi.relu:
        em.vec("relu", acc, z, acc, z, rows, cols)
    if epi.kind == "acc":
        return acc
    assert scale_tile is not None and out_tile is not None
    if epi.kind == "requant":
        if channel_mode == "row" and epi.zero_point == 0:
            em.vec("requant", out_tile, z, acc, z, rows, cols, scale_tile, v, bmode="row")
        else:
            em.vec("mul", acc, z, acc, z, rows, cols, scale_tile, v, bmode=channel_mode)
            if epi.zero_point:
                em.vec("add", out_tile, z, acc, z, rows, cols, bmode="imm", imm=float(epi.zero_point))
            else:
                em.vec("copy", out_tile, z, acc, z, rows, cols)
        return out_tile
    em.vec("mul", out_tile, z, acc, z, rows, cols, scale_tile, v, bmode=channel_mode)
    assert epi.quant_result is not None
    final = epi.final_requantize
    if final is None:
        return apply_epilogue(ctx, epi.float_ops, {epi.quant_result: out_tile}, frame, result)
    floats = apply_epilogue(ctx, epi.float_ops, {epi.quant_result: out_tile}, frame, final.input)
    multiplier = float(np.asarray(ctx.constant(final.multiplier)).reshape(-1)[0])
    zero_point = final.zero_point.value.data
    int8_tile = em.alloc((rows, cols), i8, "spad", 2)
    if zero_point:  # rne(fp32 * m) into the int32 tile (free now), + zero point saturating to int8
        em.vec("mul", acc, z, floats, z, rows, cols, bmode="imm", imm=multiplier)
        em.vec("add", int8_tile, z, acc, z, rows, cols, bmode="imm", imm=float(zero_point))
    else:
        em.vec("requant", int8_tile, z, floats, z, rows, cols, bmode="imm", imm=multiplier)
    return int8_tile


# -- standalone requantize / dequantize_linear ----------------------------------------------------


def lower_quantization_op(ctx: LoweringContext, op: Operation) -> None:
    """graph.requantize (f32 or i32 -> i8) and graph.dequantize_linear (i8 or i32 -> f32) alone:
    row tiles of the tensor viewed [rows, last dim], one or two vector ops per tile. Scales are
    per tensor (an immediate) or per channel along the last dim (a row)."""
    em = ctx.emitter
    x, y = op.operands[0], op.results[0]
    shape = shape_of(y)
    N = shape[-1] if shape else 1
    M = num_elements(shape) // N
    in_name, out_name = element_name_of(x), element_name_of(y)
    if isinstance(op, g.RequantizeOp):
        if out_name != "i8" or in_name not in ("f32", "i32"):
            raise error(op, f"requantize {in_name} -> {out_name} has no lowering (f32/i32 -> i8)")
        scale_value, zero_point = op.multiplier, op.zero_point.value.data
    else:
        assert isinstance(op, g.DequantizeLinearOp)
        if out_name != "f32" or in_name not in ("i8", "i32"):
            raise error(op, f"dequantize_linear {in_name} -> {out_name} has no lowering (i8/i32 -> f32)")
        scale_value = op.scale
        zp = ctx.constant(op.zero_point) if op.zero_point is not None else np.zeros(1, np.int64)
        if zp is None or np.unique(np.asarray(zp)).size != 1:
            raise error(op, "the zero point must be one compile-time value")
        zero_point = int(np.asarray(zp).reshape(-1)[0])
    scale = channel_vector(ctx, op, scale_value, N, _axis(op), len(shape) - 1)
    # an immediate scale unless per channel, or integral on an integer input (the vector unit
    # would then multiply in integers, not as fp32(x) * scale)
    per_tensor = bool(np.all(scale == scale[0])) and not (in_name != "f32" and float(scale[0]).is_integer())
    name = ctx.kernel_name()
    in_bytes, out_bytes = (4 if in_name != "i8" else 1), (1 if out_name == "i8" else 4)
    two_steps = zero_point != 0
    choice = tiling_cost.choose_rows(
        ctx.hw, M, N, bytes_in=in_bytes, bytes_out=out_bytes, vec_cost=2 if two_steps else 1, live_tiles=3,
        footprint=lambda tr, tc: 2 * tr * tc * (in_bytes + out_bytes + (4 if two_steps else 0)) + 2 * tc * 4)
    ctx.debug(tiling_cost.describe_rows(name, op.name.split(".")[1], "x".join(map(str, shape)), choice))
    TR, TC = min(choice.rows, M, tiling_cost.dma_box_limits()[1]), choice.cols  # rows: one DMA box
    x2 = em.view(int_input_buffer(ctx, x), (M, N))
    out2 = em.view(int_output_buffer(ctx, y), (M, N))
    x_tile = em.alloc((TR, TC), x.type.get_element_type(), "spad", 2)  # type: ignore[attr-defined]
    y_tile = em.alloc((TR, TC), y.type.get_element_type(), "spad", 2)  # type: ignore[attr-defined]
    tmp = em.alloc((TR, TC), i32, "spad", 2) if two_steps else None
    scale_row = scale_tile = None
    if not per_tensor:
        scale_row = ctx.weight(f"{name}.scale", scale.reshape(1, N), f32)
        scale_tile = em.alloc((1, TC), f32, "spad", 2)
    z = [0, 0]

    def times_scale(dst: SSAValue, src: SSAValue, rows: int, cols: int, vop: str = "mul") -> None:
        if scale_tile is not None:
            em.vec(vop, dst, z, src, z, rows, cols, scale_tile, z, bmode="row")
        else:
            em.vec(vop, dst, z, src, z, rows, cols, bmode="imm", imm=float(scale[0]))

    def tile(r0: Index, rows: int, c0: Index, cols: int) -> None:
        em.dma(x2, [r0, c0], x_tile, z, [rows, cols])
        if scale_row is not None and scale_tile is not None:
            em.dma(scale_row, [0, c0], scale_tile, z, [1, cols])
        if isinstance(op, g.RequantizeOp):
            if tmp is None:  # zero point 0: requant (fp32 product, rne, sat8)
                times_scale(y_tile, x_tile, rows, cols, "requant")
            else:  # rne(fp32(x) * m) into int32, then + zero point saturating to int8
                times_scale(tmp, x_tile, rows, cols)
                em.vec("add", y_tile, z, tmp, z, rows, cols, bmode="imm", imm=float(zero_point))
        else:
            src = x_tile
            if tmp is not None:  # x - zero point, exact in int32
                em.vec("sub", tmp, z, x_tile, z, rows, cols, bmode="imm", imm=float(zero_point))
                src = tmp
            times_scale(y_tile, src, rows, cols)
        em.dma(y_tile, z, out2, [r0, c0], [rows, cols])

    em.tiles(M, TR, lambda r0, rows: em.tiles(N, TC, lambda c0, cols: tile(r0, rows, c0, cols)))
