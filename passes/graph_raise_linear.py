"""`graph-raise-linear`: a matmul by a compile-time weight, plus a bias, becomes `graph.linear`.

torch.onnx writes `nn.Linear` on activations of rank 3 or more (every transformer's
projections, a ConvNeXt's channels-last MLP) as `MatMul(x, W^T) + b`, since ONNX's Gemm takes
2-D operands only. As `graph.matmul` and an `add` the bias is an epilogue pass over every output
tile; `graph.linear` starts the accumulator from the bias rows and takes the paths written for
linear layers (resident weights, norm epilogues). The weight is stored transposed once, as
graph-fold-batch-norm stores its folded weights (`<name>.linear`), unless the matmul already
reads it transposed (`transpose_b`).

Matched: `graph.matmul` without transpose_a, a float lhs of rank >= 2 and a 2-D compile-time
rhs (`graph.weight` or `graph.constant`); a bias is the other operand of an `add` that is the
product's only user, a compile-time [N] or [1, N] of the product's element type (any other add
stays an epilogue op). The weight and bias ops left without users are removed.

Numerics: `rounding` (the bias joins the sum before the products instead of after them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.transforms.dead_code_elimination import region_dce

from infer.dialects import graph as g
from infer.dialects.dtypes import element_type_of, is_float, shape_of
from infer.dialects.weight_refs import constant_value
from infer.dialects.weights import WeightStore, weights_of


def _name(value: SSAValue, suffix: str) -> str:
    op = value.owner
    return f"{op.weight_key}.{suffix}" if isinstance(op, g.WeightOp) else f"linear.{suffix}"


@dataclass
class RaiseLinear(RewritePattern):
    store: WeightStore

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.MatmulOp, rewriter: PatternRewriter, /):
        x, rhs = op.lhs, op.rhs
        if op.transpose_a.value.data or len(shape_of(x.type)) < 2 or not is_float(element_type_of(x.type)):
            return
        if len(shape_of(rhs.type)) != 2 or element_type_of(rhs.type) != element_type_of(x.type):
            return
        w = constant_value(rhs, self.store)
        if w is None:
            return
        transposed = bool(op.transpose_b.value.data)
        n = w.shape[0] if transposed else w.shape[1]
        new_ops = []
        if transposed:  # already [N, K]
            weight = rhs
        else:
            w_op = g.WeightOp(self.store.add(_name(rhs, "linear"), np.ascontiguousarray(w.T)),
                              TensorType(element_type_of(rhs.type), [n, w.shape[0]]))
            w_op.output.name_hint = rhs.name_hint
            new_ops.append(w_op)
            weight = w_op.output
        last, bias = op, None
        product = op.results[0]
        if product.has_one_use() and isinstance(add := next(iter(product.uses)).operation, g.AddOp):
            other = add.rhs if add.lhs is product else add.lhs
            b = constant_value(other, self.store) if other is not product else None
            if b is not None and b.shape in ((n,), (1, n)) and element_type_of(other.type) == element_type_of(x.type) \
                    and add.results[0].type == product.type:
                b_op = g.WeightOp(self.store.add(_name(other, "bias") if isinstance(other.owner, g.WeightOp)
                                                 else _name(rhs, "bias"), np.ascontiguousarray(b.reshape(n))),
                                  TensorType(element_type_of(other.type), [n]))
                b_op.output.name_hint = "bias"
                new_ops.append(b_op)
                bias, last = b_op.output, add
        linear = g.LinearOp.inferred([x, weight] + ([bias] if bias is not None else []), {})
        if linear.results[0].type != last.results[0].type:
            for made in reversed(new_ops + [linear]):
                made.erase()
            return
        linear.results[0].name_hint = last.results[0].name_hint
        rewriter.replace(last, new_ops + [linear])
        if last is not op:
            rewriter.erase(op)


@dataclass(frozen=True)
class GraphRaiseLinearPass(ModulePass):
    """Replace matmuls by a compile-time weight (and their bias add) by graph.linear, then
    remove what they leave unused."""

    name = "graph-raise-linear"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(RaiseLinear(weights_of(op)), apply_recursively=False).rewrite_module(op)
        region_dce(op.body)
