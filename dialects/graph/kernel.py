"""Fusion groups: `graph.kernel` (like an IREE dispatch region) and its `graph.yield`, and the
tables of which ops may anchor a kernel or join one."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.ir import Attribute, Operation, Region, SSAValue
from xdsl.irdl import irdl_op_definition, prop_def, region_def, traits_def, var_operand_def, var_result_def
from xdsl.traits import (
    HasParent,
    IsolatedFromAbove,
    IsTerminator,
    Pure,
    RecursiveMemoryEffect,
    RecursivelySpeculatable,
)
from xdsl.utils.exceptions import VerifyException

from infer.dialects.dtypes import shape_of
from infer.dialects.graph.base import GraphOp
from infer.dialects.graph.values import ConstantOp
from infer.dialects.graph.elementwise import BinaryOp, CastOp, UnaryOp, WhereOp
from infer.dialects.graph.nn import (
    AvgPool2dOp,
    Conv2dOp,
    GlobalAvgPoolOp,
    GlobalMaxPoolOp,
    LayerNormOp,
    LinearOp,
    LogSoftmaxOp,
    MatmulOp,
    MaxPool2dOp,
    RmsNormOp,
    SoftmaxOp,
)
from infer.dialects.graph.transformer import AttentionOp
from infer.dialects.graph.quant import Conv2dIntegerOp, LinearIntegerOp, MatmulIntegerOp, QUANTIZATION_OPS


# --------------------------------------------------------------------------
# Fusion groups
# --------------------------------------------------------------------------

ELEMENTWISE_OPS: tuple[type[GraphOp], ...] = (UnaryOp, BinaryOp, WhereOp, CastOp, *QUANTIZATION_OPS)
"""Op classes (and their subclasses) a kernel may hold besides its anchor."""

KERNEL_ANCHORS: dict[str, tuple[type[GraphOp], ...]] = {
    "matmul": (MatmulOp, LinearOp, MatmulIntegerOp, LinearIntegerOp),
    "conv": (Conv2dOp, Conv2dIntegerOp),
    "norm": (LayerNormOp, RmsNormOp),
    "softmax": (SoftmaxOp, LogSoftmaxOp),
    "attention": (AttentionOp,),
    "pool": (MaxPool2dOp, AvgPool2dOp, GlobalAvgPoolOp, GlobalMaxPoolOp),
    "elementwise": (),
}
"""Kernel kind -> the op classes that may anchor a kernel of that kind."""

ANCHOR_OPS: tuple[type[GraphOp], ...] = tuple(c for cs in KERNEL_ANCHORS.values() for c in cs)


def kernel_kind_of(op: Operation) -> str | None:
    """The kernel kind `op` anchors, or None if it is not an anchor op."""
    for kind, classes in KERNEL_ANCHORS.items():
        if isinstance(op, classes):
            return kind
    return None


@irdl_op_definition
class KernelOp(GraphOp):
    """A fusion group (like an IREE dispatch region): the region computes the
    results from the operands and nothing else.

        %r = graph.kernel "matmul" (%x, %w, %b) : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32> {
        ^bb0(%a: tensor<4x8xf32>, %wa: tensor<16x8xf32>, %ba: tensor<16xf32>):
          %y = graph.linear %a, %wa, %ba : (...) -> tensor<4x16xf32>
          %z = graph.gelu %y : (tensor<4x16xf32>) -> tensor<4x16xf32>
          graph.yield %z : tensor<4x16xf32>
        }

    The region is isolated from above and has one block whose arguments are the
    operands (same types, same order); `graph.yield` returns the results. `kind`
    names the kernel class the lowering uses (see `KERNEL_ANCHORS`): every kind
    but "elementwise" holds exactly one anchor op of that kind; all other ops
    are elementwise (`ELEMENTWISE_OPS`) or `graph.constant`, except in a "matmul"
    kernel
    - its prologue: a `graph.rms_norm` first in the region whose only use is
      the anchor's activation operand (graph-fuse-norm-prologue; the lowering
      normalises the rows on chip where the product's activations are loaded),
      or an elementwise activation there (graph-fuse-activation-prologue; the
      lowering applies it where it stages the activations);
    - its norm epilogue: a `graph.layer_norm` / `graph.rms_norm` over the last
      dim, last in the region, of the value before it, its result yielded
      (after that value when the kernel returns it too: a pre-norm block's
      residual sum) (graph-fuse; the lowering normalises whole output rows
      before the store where the cost model finds it faster, else runs the norm
      as a kernel of its own after the product).
    """

    name = "graph.kernel"
    kind = prop_def(StringAttr)
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), RecursiveMemoryEffect(), RecursivelySpeculatable())
    assembly_format = "$kind ` ` `(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs) $body"

    def __init__(
        self,
        kind: str,
        inputs: Sequence[SSAValue | Operation],
        result_types: Sequence[Attribute],
        body: Region,
    ):
        super().__init__(
            operands=[[SSAValue.get(v) for v in inputs]],
            result_types=[list(result_types)],
            properties={"kind": StringAttr(kind)},
            regions=[body],
        )

    @property
    def yield_op(self) -> YieldOp | None:
        block = self.body.block
        last = block.last_op
        return last if isinstance(last, YieldOp) else None

    def anchor(self) -> Operation | None:
        """The kernel's anchor op (None for an "elementwise" kernel)."""
        classes = KERNEL_ANCHORS.get(self.kind.data) or ANCHOR_OPS
        return next((o for o in self.body.block.ops if isinstance(o, classes)), None)

    def norm_epilogue(self) -> LayerNormOp | RmsNormOp | None:
        """A "matmul" kernel's norm epilogue (the norm last in the region), or None."""
        if self.kind.data != "matmul":
            return None
        yield_op = self.yield_op
        last = yield_op.prev_op if yield_op is not None else None
        return last if isinstance(last, LayerNormOp | RmsNormOp) and last is not self.anchor() else None

    def prologue(self) -> list[Operation]:
        """The ops before the anchor that feed it (a "matmul" kernel's rms_norm prologue)."""
        anchor = self.anchor()
        ops: list[Operation] = []
        for o in self.body.block.ops:
            if o is anchor:
                return ops
            if not isinstance(o, ConstantOp):
                ops.append(o)
        return []

    def infer_result_types(self) -> list[TensorType]:
        yield_op = self.yield_op
        if yield_op is None:
            raise VerifyException("the body must end with graph.yield")
        return [v.type for v in yield_op.values]

    def verify_(self) -> None:
        """`kind` is a known kernel class, there is at least one result, the block's
        arguments have the operands' types, the body ends with `graph.yield` returning the
        result types, and it holds one anchor of `kind` (none for "elementwise") besides
        elementwise ops and constants; then the checks of every graph op."""
        kind = self.kind.data
        if kind not in KERNEL_ANCHORS:
            raise VerifyException(
                f"unknown kernel kind \"{kind}\" (expected one of "
                + ", ".join(f'"{k}"' for k in KERNEL_ANCHORS) + ")"
            )
        if not self.outputs:
            raise VerifyException("a kernel must have at least one result")
        block = self.body.block
        arg_types = [a.type for a in block.args]
        operand_types = [v.type for v in self.inputs]
        if arg_types != operand_types:
            raise VerifyException(
                "the body's arguments must match the operands: got ("
                + ", ".join(str(t) for t in arg_types) + "), operands are ("
                + ", ".join(str(t) for t in operand_types) + ")"
            )
        yield_op = self.yield_op
        if yield_op is None:
            raise VerifyException("the body must end with graph.yield")
        yielded = [v.type for v in yield_op.values]
        results = [r.type for r in self.outputs]
        if yielded != results:
            raise VerifyException(
                "graph.yield returns (" + ", ".join(str(t) for t in yielded)
                + ") but the kernel's results are (" + ", ".join(str(t) for t in results) + ")"
            )
        anchors = [o for o in block.ops if isinstance(o, ANCHOR_OPS)]
        expected = KERNEL_ANCHORS[kind]
        if kind == "matmul" and len(anchors) == 2 and isinstance(anchors[0], RmsNormOp):
            norm, anchor = anchors
            uses = [u for u in norm.results[0].uses]
            if (not isinstance(anchor, expected) or len(uses) != 1 or uses[0].operation is not anchor
                    or uses[0].index != 0):
                raise VerifyException(
                    "a \"matmul\" kernel's rms_norm prologue must feed only the anchor's first operand"
                )
            anchors = [anchor]
        norm = self.norm_epilogue()
        if norm is not None and len(anchors) == 2 and anchors[-1] is norm:
            x = norm.input
            rank = len(shape_of(x))
            others = [u.operation for u in x.uses if u.operation is not norm]
            if (norm.axis.value.data % rank != rank - 1 or x.owner is not norm.prev_op
                    or list(yield_op.values) not in ([norm.results[0]], [x, norm.results[0]])
                    or others not in ([], [yield_op])):
                raise VerifyException(
                    "a \"matmul\" kernel's norm epilogue must normalise the last dim of the value "
                    "just before it and be the kernel's result (after that value, if it is a result too)"
                )
            anchors = anchors[:-1]
        if kind == "elementwise":
            if anchors:
                raise VerifyException(
                    f"an \"elementwise\" kernel holds no anchor op, found {anchors[0].name}"
                )
        elif len(anchors) != 1 or not isinstance(anchors[0], expected):
            raise VerifyException(
                f"a \"{kind}\" kernel must hold exactly one anchor op ("
                + " or ".join(c.name for c in expected) + "), found "
                + (", ".join(o.name for o in anchors) or "none")
            )
        for o in block.ops:
            if o is yield_op or isinstance(o, ANCHOR_OPS + ELEMENTWISE_OPS + (ConstantOp,)):
                continue
            raise VerifyException(
                f"{o.name} cannot be part of a kernel (only its anchor, elementwise ops "
                "and graph.constant)"
            )
        super().verify_()


@irdl_op_definition
class YieldOp(GraphOp):
    """Terminator of `graph.kernel`: its operands are the kernel's results."""

    name = "graph.yield"
    values = var_operand_def(TensorType)
    traits = traits_def(IsTerminator(), HasParent(KernelOp), Pure())
    assembly_format = "attr-dict ($values^ `:` type($values))?"

    def __init__(self, *values: SSAValue | Operation):
        super().__init__(operands=[[SSAValue.get(v) for v in values]])

    def infer_result_types(self) -> list[TensorType]:
        return []
