"""The table of graph-to-tile: graph op type -> the function that lowers it.

The driver looks each op up by its exact type (`lowering_for`). An entry is one of

* `Lowering(alone=f)`: `f(ctx, op)` lowers the op by itself;
* `Lowering(with_epilogue=f)`: `f(ctx, op, epilogue, result)` lowers the op as the anchor of a
  kernel whose elementwise `epilogue` ops run on each output tile before `result` is stored
  (matmul/linear, conv2d); the driver finds the epilogue in the op's `graph.kernel` region or,
  without one, with `elementwise.fusable_chain`. Such an entry may also take a `prologue`:
  `prologue(ctx, op, ops, epilogue, result)` answers whether its lowering computes `ops` (the
  ops before the anchor in its kernel, e.g. an rms_norm from graph-fuse-norm-prologue or an
  activation from graph-fuse-activation-prologue) on chip
  itself; if not, the driver lowers them first, as kernels of their own.

Every tensor is held in DRAM as f32 values whatever its graph element type (storage.py); an
entry's `types` are the element types its lowering computes exactly, and the driver refuses an
op reading or writing another type before calling it (`check_types`; default: the float types,
which compute in f32). An op type missing here has no tile lowering: a located error.
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
    packed_gemm,
    paged_kv,
    pooling,
    reductions,
    rotary,
    storage,
    top_k,
    transpose,
)
from infer.passes.graph_to_tile.context import LoweringContext, error
from infer.passes.graph_to_tile.vector_math import RULES

ANY = storage.HELD | {"f64"}  # casts and reshapes also carry integer model inputs and f64 at the boundary

OpLowering = Callable[[LoweringContext, Operation], None]
AnchorLowering = Callable[[LoweringContext, Operation, Sequence[Operation], SSAValue], None]
PrologueCheck = Callable[[LoweringContext, Operation, Sequence[Operation], Sequence[Operation], SSAValue], bool]


@dataclass(frozen=True)
class Lowering:
    """How ops of one type lower (see the module docstring): exactly one of `alone` and
    `with_epilogue`."""

    alone: OpLowering | None = None
    with_epilogue: AnchorLowering | None = None
    prologue: PrologueCheck | None = None
    types: frozenset[str] = storage.FLOATS
    operand_types: frozenset[str] = frozenset()  # more element types its operands may have

    def __post_init__(self) -> None:
        assert (self.alone is None) != (self.with_epilogue is None), "give exactly one lowering function"


INT8_PATH = frozenset({"f32", "i8", "i32"})
"""Element types of the int8 kernels and quantization ops (integer_epilogue.py)."""

LOWERINGS: dict[type[Operation], Lowering] = {
    # matrix unit (gemm.py, conv.py), with the elementwise ops after them as the epilogue;
    # a packed GGUF weight (graph.dequantize_blocks of a weight) stays packed (packed_gemm.py)
    g.LinearOp: Lowering(with_epilogue=packed_gemm.lower_gemm_or_packed, prologue=packed_gemm.takes_prologue),
    g.MatmulOp: Lowering(with_epilogue=packed_gemm.lower_gemm_or_packed, prologue=packed_gemm.takes_prologue),
    g.Conv2dOp: Lowering(with_epilogue=conv.lower_conv),
    g.AttentionOp: Lowering(attention.lower_attention, operand_types=storage.BOOL),
    # the int8 path (integer_gemm.py, integer_conv.py): int8 operands and results in int8 DRAM
    # buffers of their own (not held as f32), int32 accumulation, requantize/dequantize epilogue
    g.LinearIntegerOp: Lowering(with_epilogue=integer_gemm.lower_integer_gemm, types=INT8_PATH),
    g.MatmulIntegerOp: Lowering(with_epilogue=integer_gemm.lower_integer_gemm, types=INT8_PATH),
    g.Conv2dIntegerOp: Lowering(with_epilogue=integer_conv.lower_integer_conv, types=INT8_PATH),
    g.RequantizeOp: Lowering(integer_epilogue.lower_quantization_op, types=INT8_PATH),
    g.DequantizeLinearOp: Lowering(integer_epilogue.lower_quantization_op, types=INT8_PATH),
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
    **{op_type: Lowering(elementwise.lower_elementwise_op, types=rule.types, operand_types=rule.operand_types)
       for op_type, rule in RULES.items()},
    g.WhereOp: Lowering(elementwise.lower_elementwise_op, types=storage.HELD, operand_types=storage.BOOL),
    g.RotaryOp: Lowering(rotary.lower_rotary),
    g.ReduceSumOp: Lowering(reductions.lower_reduce, types=storage.NUMBERS),
    g.ReduceMeanOp: Lowering(reductions.lower_reduce),
    g.ReduceMaxOp: Lowering(reductions.lower_reduce, types=storage.NUMBERS | storage.BOOL),
    g.ReduceMinOp: Lowering(reductions.lower_reduce, types=storage.NUMBERS | storage.BOOL),
    g.ReduceProdOp: Lowering(reductions.lower_reduce, types=storage.NUMBERS),
    g.ArgmaxOp: Lowering(reductions.lower_arg_reduce, types=storage.INTEGERS, operand_types=storage.NUMBERS),
    g.ArgminOp: Lowering(reductions.lower_arg_reduce, types=storage.INTEGERS, operand_types=storage.NUMBERS),
    g.TopKOp: Lowering(top_k.lower_top_k, types=storage.INTEGERS, operand_types=storage.NUMBERS),
    # data movement
    g.ReshapeOp: Lowering(copies.lower_reshape, types=ANY),
    g.CastOp: Lowering(casts.lower_cast, types=ANY),
    g.TransposeOp: Lowering(transpose.lower_transpose, types=storage.HELD),
    g.SliceOp: Lowering(copies.lower_slice, types=storage.HELD),
    g.ConcatOp: Lowering(copies.lower_concat, types=storage.HELD),
    g.BroadcastOp: Lowering(copies.lower_broadcast, types=storage.HELD),
    g.PadOp: Lowering(copies.lower_pad, types=storage.HELD),
    g.GatherOp: Lowering(gather.lower_gather, types=storage.HELD, operand_types=storage.INTEGERS),
    g.KvCacheWriteOp: Lowering(paged_kv.lower_kv_cache_write, operand_types=frozenset({"i32"})),
    g.PagedAttentionOp: Lowering(paged_kv.lower_paged_attention, operand_types=frozenset({"i32"})),
}


def lowering_for(op: Operation) -> Lowering | None:
    return LOWERINGS.get(type(op))


def check_types(op: Operation, lowering: Lowering) -> None:
    """Refuse an op reading or writing an element type its lowering does not compute exactly."""
    bad = storage.unsupported_types(op, lowering.types, lowering.types | lowering.operand_types)
    if bad:
        raise error(op, f"{', '.join(bad)} tensors are not supported by this op's tile lowering "
                    f"(it supports {', '.join(sorted(lowering.types))})")
