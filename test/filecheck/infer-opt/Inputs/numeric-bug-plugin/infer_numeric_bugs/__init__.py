"""Deliberately wrong passes, one per IR level, for the lit test of
`infer-opt --verify-each-numerically` (test/filecheck/infer-opt/verify-each-numerically.mlir).
They are a plugin of the test only, put on the path with PYTHONPATH: never part of infer's
pass registry."""

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from infer.dialects import graph, npu, tile
from infer.dialects.dtypes import dense_attr, dense_to_numpy


@dataclass(frozen=True)
class ReluToLeakyPass(ModulePass):
    """Wrong (graph level): rewrites relu(x) as leaky_relu(x, 0.01), and claims to be exact."""

    name = "test-relu-to-leaky"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for relu in [o for o in op.walk() if isinstance(o, graph.ReluOp)]:
            leaky = graph.LeakyReluOp.create(operands=[relu.input], result_types=[relu.output.type])
            relu.parent_block().insert_op_before(leaky, relu)
            relu.output.replace_all_uses_with(leaky.results[0])
            relu.detach()
            relu.erase()


@dataclass(frozen=True)
class ScaleConstantsPass(ModulePass):
    """Multiplies every f32 graph.constant by `factor`; declares that it only rounds
    differently, so the numeric check holds it to the rounding tolerance, not to bit-exactness."""

    name = "test-scale-constants"
    numerics = "rounding"

    factor: float = 1.0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for c in [o for o in op.walk() if isinstance(o, graph.ConstantOp)]:
            value = dense_to_numpy(c.value)
            if value.dtype == np.float32:
                c.properties["value"] = dense_attr((value * np.float32(self.factor)).astype(np.float32))


@dataclass(frozen=True)
class TileReluToAbsPass(ModulePass):
    """Wrong (tile level): every vector relu becomes abs."""

    name = "test-tile-relu-to-abs"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for v in op.walk():
            if isinstance(v, tile.VectorOp) and v.op.data == "relu":
                v.properties["op"] = StringAttr("abs")


@dataclass(frozen=True)
class NpuDropWaitPass(ModulePass):
    """Wrong (npu level): the first instruction that waits for a semaphore no longer does."""

    name = "test-npu-drop-wait"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for ins in op.walk():
            if isinstance(ins, npu.NpuInstrOp) and "wait" in ins.properties:
                del ins.properties["wait"]
                return
