"""graph.conv2d_integer on the matrix unit's int8 path, with the integer epilogue
(integer_epilogue.py).

The kernel is conv.py's (conv.ConvKernel: windows of the stride-phase planes loaded once per
channel step and shared by every tap, "pixels" or "channels" orientation, tile sizes and loop
order by tiling_cost.choose_conv) on int8 operands: the windows are int8 tiles built on chip
(windows.WindowLoader: a DMA of whole input rows, the column phases split on the vector unit,
no element-wise DMA), the pre-packed weight blocks int8, and the int8 matmuls accumulate
exactly into int32 tiles. A padded input is first an int8 DRAM copy bordered with the input
zero point (copies.padded_copy), read as an unpadded input, so padded taps contribute
(zx - zx) * w = 0 and the zero point folds into the bias: sum (x - zx) w + b = sum x w +
(b - zx * sum w). Output channels are the tile's rows, so the folded bias and the requantize
multipliers are columns (bmode=col, loaded once for every output channel): requantize is
`vec.mul` into the int32 tile then a saturating copy / zero-point add into int8 (the `requant`
instruction takes per-column scales only).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import f32, i8, i32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of
from infer.dialects.ir_io import LoweringError
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.context import STAGE, LoweringContext, error
from infer.passes.graph_to_tile.conv import ConvKernel, IntegerConvParts, fastest_groups
from infer.passes.graph_to_tile.grouped_conv import MergedGroups, merged_weights
from infer.passes.graph_to_tile.copies import padded_copy
from infer.passes.graph_to_tile.elementwise import TileFrame
from infer.passes.graph_to_tile.integer_epilogue import (
    IntegerEpilogue,
    emit_epilogue,
    epilogue_scratchpad,
    int_output_buffer,
    parse_epilogue,
    require_signed_int8,
)
from infer.passes.graph_to_tile.integer_gemm import folded_bias
from infer.passes.graph_to_tile.planes import Planes


def lower_integer_conv(ctx: LoweringContext, op: Operation, epilogue: Sequence[Operation], result: SSAValue) -> None:
    assert isinstance(op, g.Conv2dIntegerOp)
    require_signed_int8(op, op.input, op.weight)
    if "int8" not in ctx.hw.matrix.dtypes:
        raise error(op, f"target '{ctx.hw.name}' has no int8 matrix unit")
    w = ctx.constant(op.weight)
    bias = ctx.constant(op.bias) if op.bias is not None else None
    if w is None or (op.bias is not None and bias is None):
        raise error(op, "conv2d_integer needs a compile-time weight and bias")
    if op.weight_zero_point.value.data != 0:
        raise error(op, f"weight zero point {op.weight_zero_point.value.data}: the NPU lowering takes symmetric "
                    "weights (zero point 0)")
    x_zp = op.input_zero_point.value.data
    N, C, H, W = shape_of(op.input)
    O, Cg, KH, KW = shape_of(op.weight)
    groups = op.groups.value.data
    stride = tuple(g.i64_values(op.stride))
    dilation = tuple(g.i64_values(op.dilation))
    top, left, bottom, right = g.i64_values(op.padding)
    _, _, OH, OW = shape_of(op.results[0])
    epi = parse_epilogue(ctx, op, epilogue, result, O, 1)
    w = np.asarray(w, np.int8)
    bias = folded_bias(op, w.reshape(O, -1).T, bias, x_zp)
    xp = padded_copy(ctx, ctx.buffer(op.input), N * C, H, W, (top, left, bottom, right), float(x_zp), i8)
    # the padded copy is the kernel's (unpadded) input
    p = Planes(H + top + bottom, W + left + right, KH, KW, stride, dilation, (0, 0, 0, 0), OH, OW)  # type: ignore[arg-type]
    name = ctx.kernel_name()
    frame_groups = ((N,), (O,), (OH, OW))
    out_shape = shape_of(result)
    produced = {r for e in epi.float_ops for r in e.results}
    parts = IntegerConvParts(
        epilogue_bytes=epilogue_scratchpad(ctx, epi, result, frame_groups, bias is not None),
        vectors=(bias is not None) + (epi.scale is not None),
        epi_cost=epi.vector_cost(ctx, bias is not None, per_row=True),
        epi_tiles=sum(1 for e in epi.float_ops for v in e.operands
                      if shape_of(v) == out_shape and v not in produced and v is not epi.quant_result),
        out_bytes=epi.stored_bytes)
    override = ctx.override(name, 3)
    if override is not None and override[1] % OW:
        raise LoweringError(f"error: {STAGE}: {name}: the pixel tile (TN) must be a multiple of OW = {OW}")
    memo = ctx.session.rankings_for(ctx.hw)
    # int8 sums are exact: the merged groups' zero weights change no bit of the result
    view, spec, merge = fastest_groups(ctx, op, epilogue, result, p, override is None, memo, parts)
    if merge > 1:
        w = merged_weights(w, groups, merge)
        O, Cg, KH, KW = shape_of(view.weight)
        groups = view.groups.value.data
    choice = tiling_cost.choose_conv(ctx.hw, spec, override=override and (override[0], override[1] // OW, override[2]),
                                     memo=memo)
    ctx.predict(choice.best.cycles)
    ctx.debug(tiling_cost.describe_conv(name, f"(int8) O={O // groups} P={OH}x{OW} C={Cg} taps={KH}x{KW}"
                                        + (f" stride={stride[0]}x{stride[1]}" if stride != (1, 1) else "")
                                        + (f" groups={groups}" if groups > 1 else "")
                                        + (f" ({merge} merged in each)" if merge > 1 else "") + f" batch={N}", choice))
    IntegerConvKernel(ctx, name, view, epilogue, result, p, choice.tiles, w, xp, epi, bias, x_zp).emit()


class IntegerConvKernel(ConvKernel):
    """conv.ConvKernel on int8 windows and weights into int32 accumulators, the input read
    from its zero-point-padded copy, the integer epilogue (see the module docstring)."""

    operand_type = i8
    accumulator_type = i32
    stores_deferrable = False  # (its requantized int8 tiles are stored by integer_epilogue.py)

    def __init__(self, ctx: LoweringContext, name: str, op: g.Conv2dIntegerOp | MergedGroups, epilogue: Sequence[Operation],
                 result: SSAValue, p: Planes, tiles: tiling_cost.ConvTiles, w: np.ndarray, source: SSAValue,
                 epi: IntegerEpilogue, bias: np.ndarray | None, zero_point: int):
        self.source, self.epi, self.folded, self.zero_point = source, epi, bias, zero_point
        super().__init__(ctx, name, op, epilogue, result, p, tiles, w)  # type: ignore[arg-type]

    def operand_copies(self) -> int:
        return 1

    def prepares_planes(self) -> bool:
        return False  # the padded copy is an unpadded input: windows built on chip

    def prepare_input(self) -> list[SSAValue] | None:
        return None

    def input_source(self) -> SSAValue:
        return self.source

    def border(self) -> float:
        return float(self.zero_point)

    def output_buffer(self) -> SSAValue:
        return int_output_buffer(self.ctx, self.result)

    def weight_parts(self, hint: str, packed: np.ndarray) -> list[SSAValue]:
        return [self.ctx.weight(hint, packed.astype(np.int8), i8)]

    def _hint(self) -> str:
        owner = self.op.weight.owner
        return owner.weight_key if isinstance(owner, g.WeightOp) else f"{self.name}.weight"

    def alloc_vectors(self) -> None:
        em, O = self.em, self.O
        self.bias = em.alloc((O, 1), i32, "spad") if self.folded is not None else None
        self.scale = em.alloc((O, 1), f32, "spad") if self.epi.scale is not None else None

    def load_vectors(self) -> None:
        em, O, z = self.em, self.O, [0, 0]
        if self.bias is not None and self.folded is not None:
            column = self.ctx.weight(f"{self._hint()}.bias_folded", self.folded.reshape(O, 1), i32)
            em.dma(column, z, self.bias, z, [O, 1])
        if self.scale is not None and self.epi.scale is not None:
            column = self.ctx.weight(f"{self.name}.{self.epi.kind}_scale", self.epi.scale.reshape(O, 1), f32)
            em.dma(column, z, self.scale, z, [O, 1])

    bias_in_transpose = False  # (its int32 bias belongs to the integer epilogue)
    bias_in_im2col = False

    def rows_rounded_in_products(self, to: int, toh: int) -> str | None:
        return None  # (its epilogue requantizes the int32 accumulator: `epilogue`)

    def epilogue(self, tile: SSAValue, frame: TileFrame, to: int, tq: int, bias_added: bool = False) -> SSAValue:
        out_tile = (self.em.alloc((to, tq), self.epi.out_element(), "spad", 2) if self.epi.kind != "acc"
                    else None)
        return emit_epilogue(self.ctx, self.epi, tile, to, tq, self.bias, self.scale, out_tile, "col", frame,
                             self.result, vector_at=(frame.row0, 0))
