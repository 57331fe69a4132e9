"""`graph-constant-fold`: evaluate graph ops whose operands are all constant.

An op whose every operand is a `graph.constant` or a `graph.weight` is
evaluated with the reference interpreter (`evaluate_op`), so folding computes
exactly what the op would compute at run time. Each result becomes
- a `graph.constant` when it has at most `inline-limit` elements or all its
  elements are equal (a splat, printed as one value), or
- a new weight in the module's weight store (`weights_of(module).add`),
  referenced by a `graph.weight` op; the name is derived from the first weight
  operand (`fc.weight` -> `fc.weight.transpose`) or the op (`folded.transpose`).
  The weight is written out with the module (a new `.weights.safetensors`
  file beside the output; see `infer.dialects.weights.save_weights`).

Not folded: `graph.dequantize_linear` (a weight stored quantized stays so: the quantization
passes turn DQ -> op into an integer kernel reading the stored integers),
`graph.dequantize_blocks` (a GGUF weight stays packed: graph-to-tile keeps the blocks packed in
DRAM and expands them on chip, and folds the op itself where a kernel needs dense values),
results with more
than `max-elements` elements, results whose
type has a `?` dimension (run `graph-shape-inference` first), and ops the
interpreter refuses (integer division by zero, out-of-range gather indices,
...), which are left for run time to report (with a warning at the op now).
Constants and weights that no longer have users are erased. A weight operand
missing from the store is an error (`file:line:col: error: 'graph.weight' op
weight 'w' not found ...`).

Options:
  max-elements: do not fold a result with more elements (default 1 << 24).
  inline-limit: results with at most this many elements become graph.constant,
    larger ones become weights (default 16, as the frontends).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern

from infer.dialects import graph as g
from infer.dialects.diagnostics import warn
from infer.dialects.dtypes import dense_attr, is_splat, tensor_type
from infer.dialects.graph_interpreter import InterpreterError, evaluate_op
from infer.dialects.ir_io import IRError, describe_location
from infer.dialects.weight_refs import constant_value
from infer.dialects.weights import WeightStore, WeightStoreError, weights_of

DEFAULT_MAX_ELEMENTS = 1 << 24
DEFAULT_INLINE_LIMIT = 16


def _static(t: object) -> bool:
    return isinstance(t, TensorType) and all(d >= 0 for d in t.get_shape())


@dataclass
class FoldConstantOp(RewritePattern):
    """Evaluate one graph op whose operands are all constants or weights."""

    store: WeightStore
    max_elements: int
    inline_limit: int
    _values: dict[Operation, np.ndarray] = field(default_factory=dict)
    _refused: set[Operation] = field(default_factory=set)

    def _operand_value(self, value: SSAValue) -> np.ndarray | None:
        op = value.owner
        if not isinstance(op, g.ConstantOp | g.WeightOp):
            return None
        if op not in self._values:
            self._values[op] = constant_value(value, self.store)
        return self._values[op]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /):
        if not isinstance(op, g.GraphOp) or isinstance(op, g.ConstantOp | g.WeightOp | g.DequantizeLinearOp
                                                                | g.DequantizeBlocksOp):
            return  # a dequantized weight stays quantized: kernels read the stored integers / blocks
        if not op.operands or not all(_static(r.type) for r in op.results):
            return
        if any(math.prod(r.type.get_shape()) > self.max_elements for r in op.results):  # type: ignore[attr-defined]
            return
        inputs = []
        for value in op.operands:
            array = self._operand_value(value)
            if array is None:
                return
            inputs.append(array)
        try:
            results = evaluate_op(op, inputs, self.store)
        except (InterpreterError, WeightStoreError) as e:
            if op not in self._refused:  # the walker may visit the op again
                self._refused.add(op)
                reason = str(e).removeprefix(f"{op.name}: ")
                warn(op, f"not folded: {reason} (the reference interpreter will fail here at run time)")
            return
        hint = self._hint(op)
        new_ops: list[Operation] = []
        for result, array in zip(op.results, results, strict=True):
            if array.size <= self.inline_limit or is_splat(array):
                new: Operation = g.ConstantOp(dense_attr(array, splat=True))
            else:
                name = self.store.add(hint, array)
                assert isinstance(result.type, TensorType)
                new = g.WeightOp(name, result.type)
            self._values[new] = array
            new_ops.append(new)
        producers = {v.owner for v in op.operands}
        rewriter.replace(op, new_ops, [o.results[0] for o in new_ops])
        for producer in producers:
            assert isinstance(producer, Operation)
            if all(not r.uses for r in producer.results):
                self._values.pop(producer, None)
                rewriter.erase(producer)

    @staticmethod
    def _hint(op: Operation) -> str:
        kind = op.name.split(".", 1)[1]
        for value in op.operands:
            if isinstance(value.owner, g.WeightOp):
                return f"{value.owner.weight_key}.{kind}"
        return f"folded.{kind}"


@dataclass(frozen=True)
class GraphConstantFoldPass(ModulePass):
    """Replace graph ops computed only from constants and weights by their value."""

    name = "graph-constant-fold"

    max_elements: int = DEFAULT_MAX_ELEMENTS
    inline_limit: int = DEFAULT_INLINE_LIMIT

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.max_elements < 0 or self.inline_limit < 0:
            raise ValueError(
                f"graph-constant-fold: max-elements ({self.max_elements}) and "
                f"inline-limit ({self.inline_limit}) must be >= 0"
            )
        pattern = FoldConstantOp(weights_of(op), self.max_elements, self.inline_limit)
        PatternRewriteWalker(pattern, apply_recursively=True).rewrite_module(op)
