"""The table of graph-to-tile: graph op type -> the function that lowers it.

The driver looks each op up by its exact type (`lowering_for`). An entry is one of

* `Lowering(alone=f)`: `f(ctx, op)` lowers the op by itself;
* `Lowering(with_epilogue=f)`: `f(ctx, op, epilogue, result)` lowers the op as the anchor of a
  kernel whose elementwise `epilogue` ops run on each output tile before `result` is stored
  (matmul/linear, conv2d); the driver finds the epilogue in the op's `graph.kernel` region or,
  without one, with `elementwise.fusable_chain`.

The driver refuses non-f32 results before calling a lowering unless its entry says
`f32_only=False` (casts and reshapes, which also carry integer model inputs). An op type
missing here has no tile lowering: a located error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.passes.graph_to_tile import (
    attention,
    casts,
    conv,
    copies,
    elementwise,
    gather,
    gemm,
    integer_conv,
    integer_epilogue,
    integer_gemm,
    norms,
    pooling,
    reductions,
    rotary,
    transpose,
)
from infer.passes.graph_to_tile.context import LoweringContext

OpLowering = Callable[[LoweringContext, Operation], None]
AnchorLowering = Callable[[LoweringContext, Operation, Sequence[Operation], SSAValue], None]


@dataclass(frozen=True)
class Lowering:
    """How ops of one type lower (see the module docstring): exactly one of `alone` and
    `with_epilogue`."""

    alone: OpLowering | None = None
    with_epilogue: AnchorLowering | None = None
    f32_only: bool = True

    def __post_init__(self) -> None:
        assert (self.alone is None) != (self.with_epilogue is None), "give exactly one lowering function"


LOWERINGS: dict[type[Operation], Lowering] = {
    # matrix unit (gemm.py, conv.py), with the elementwise ops after them as the epilogue
    g.LinearOp: Lowering(with_epilogue=gemm.lower_gemm),
    g.MatmulOp: Lowering(with_epilogue=gemm.lower_gemm),
    g.Conv2dOp: Lowering(with_epilogue=conv.lower_conv),
    g.AttentionOp: Lowering(attention.lower_attention),
    # the int8 path (integer_gemm.py, integer_conv.py): int32 accumulation, requantize/dequantize epilogue
    g.LinearIntegerOp: Lowering(with_epilogue=integer_gemm.lower_integer_gemm, f32_only=False),
    g.MatmulIntegerOp: Lowering(with_epilogue=integer_gemm.lower_integer_gemm, f32_only=False),
    g.Conv2dIntegerOp: Lowering(with_epilogue=integer_conv.lower_integer_conv, f32_only=False),
    g.RequantizeOp: Lowering(integer_epilogue.lower_quantization_op, f32_only=False),
    g.DequantizeLinearOp: Lowering(integer_epilogue.lower_quantization_op, f32_only=False),
    # vector unit: pooling, row-wise norms and softmax, elementwise
    g.MaxPool2dOp: Lowering(pooling.lower_window_pool),
    g.AvgPool2dOp: Lowering(pooling.lower_window_pool),
    g.GlobalAvgPoolOp: Lowering(pooling.lower_global_pool),
    g.GlobalMaxPoolOp: Lowering(pooling.lower_global_pool),
    g.LayerNormOp: Lowering(norms.lower_rowwise),
    g.RmsNormOp: Lowering(norms.lower_rowwise),
    g.SoftmaxOp: Lowering(norms.lower_rowwise),
    g.LogSoftmaxOp: Lowering(norms.lower_rowwise),
    g.BatchNormOp: Lowering(norms.lower_batch_norm),
    **{op_type: Lowering(elementwise.lower_elementwise_op) for op_type in elementwise.ELEMENTWISE_OPS},
    g.RotaryOp: Lowering(rotary.lower_rotary),
    g.ReduceSumOp: Lowering(reductions.lower_reduce),
    g.ReduceMeanOp: Lowering(reductions.lower_reduce),
    g.ReduceMaxOp: Lowering(reductions.lower_reduce),
    g.ReduceMinOp: Lowering(reductions.lower_reduce),
    g.ReduceProdOp: Lowering(reductions.lower_reduce),
    # data movement
    g.ReshapeOp: Lowering(copies.lower_reshape, f32_only=False),
    g.CastOp: Lowering(casts.lower_cast, f32_only=False),
    g.TransposeOp: Lowering(transpose.lower_transpose),
    g.SliceOp: Lowering(copies.lower_slice),
    g.ConcatOp: Lowering(copies.lower_concat),
    g.BroadcastOp: Lowering(copies.lower_broadcast),
    g.PadOp: Lowering(copies.lower_pad),
    g.GatherOp: Lowering(gather.lower_gather),
}


def lowering_for(op: Operation) -> Lowering | None:
    return LOWERINGS.get(type(op))
