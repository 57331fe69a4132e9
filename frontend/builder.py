"""GraphBuilder: the one way frontends emit graph-level IR.

    b = GraphBuilder()
    x = b.input("x", (1, 3, 224, 224), np.float32)
    w = b.weight("conv1.weight", array)           # goes to the weight store, not the text
    y = b.op(graph.Conv2dOp, [x, w], stride=graph.i64_array([2, 2]))
    module = b.finish([y], ["logits"])

Result types come from each op's own shape inference, so a frontend states
only operands and attributes; ops whose result type is their meaning (cast,
reshape, broadcast) take `result_type=`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DictionaryAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    f32,
)
from xdsl.ir import Attribute, Block, Region, SSAValue

from infer.dialects import graph
from infer.dialects.dtypes import dense_attr, dense_to_numpy, from_numpy_dtype, tensor_type
from infer.dialects.weights import WeightStore, attach_weights

NAME_ATTR = "graph.name"
"""Argument/result attribute holding the model's own input/output name."""

INLINE_CONSTANT_LIMIT = 16
"""Constants with more elements than this become weights (kept out of the text)."""


class GraphBuilder:
    def __init__(self, store: WeightStore | None = None):
        self.store = store or WeightStore()
        self.block = Block()
        self.input_names: list[str] = []

    # -- values ----------------------------------------------------------
    def input(self, name: str, shape: Sequence[int], dtype: np.dtype | type | Attribute) -> SSAValue:
        elem = dtype if isinstance(dtype, Attribute) else from_numpy_dtype(dtype)
        arg = self.block.insert_arg(TensorType(elem, list(shape)), len(self.block.args))
        self.input_names.append(name)
        return arg

    def weight(self, name: str, array: np.ndarray) -> SSAValue:
        """Add `array` to the weight store (fresh name if taken) and reference it."""
        key = self.store.add(name, np.asarray(array))
        op = graph.WeightOp(key, tensor_type(array.shape, array.dtype))
        self.block.add_op(op)
        return op.output

    def file_weight(self, name: str, shape: Sequence[int], dtype: np.dtype | type) -> SSAValue:
        """Reference a weight already in the store's backing file (no copy)."""
        op = graph.WeightOp(name, tensor_type(tuple(shape), dtype))
        self.block.add_op(op)
        return op.output

    def constant(self, array: np.ndarray | float | int, dtype: np.dtype | type | None = None, name: str = "const") -> SSAValue:
        array = np.asarray(array, dtype=dtype)
        if array.size > INLINE_CONSTANT_LIMIT:
            return self.weight(name, array)
        op = graph.ConstantOp(dense_attr(array))
        self.block.add_op(op)
        return op.output

    def op(
        self,
        op_type: type[graph.GraphOp],
        operands: Sequence[SSAValue | None],
        result_type: Attribute | None = None,
        **properties: Attribute,
    ) -> SSAValue:
        """Append a graph op; its result type is inferred unless given."""
        # An absent optional operand (e.g. a bias) is passed as None; each op
        # has at most one optional operand, so dropping it is unambiguous.
        present = [o for o in operands if o is not None]
        result_types = [result_type or TensorType(f32, [])]
        op = op_type.create(operands=present, result_types=result_types, properties=dict(properties))
        if result_type is None:
            inferred = op.infer_result_types()
            op.drop_all_references()  # the probe op must not stay a user of its operands
            op = op_type.create(operands=present, result_types=inferred, properties=dict(properties))
        self.block.add_op(op)
        return op.results[0]

    # -- finishing -------------------------------------------------------
    def finish(self, outputs: Sequence[SSAValue], output_names: Sequence[str] | None = None, func_name: str = "main") -> ModuleOp:
        output_names = list(output_names or [f"output{i}" for i in range(len(outputs))])
        self.block.add_op(func.ReturnOp(*outputs))
        fn = func.FuncOp(
            func_name,
            ([a.type for a in self.block.args], [o.type for o in outputs]),
            Region(self.block),
            arg_attrs=_name_attrs(self.input_names),
            res_attrs=_name_attrs(output_names),
        )
        module = ModuleOp([fn])
        attach_weights(module, self.store)
        module.verify()
        return module


def _name_attrs(names: Sequence[str]):
    from xdsl.dialects.builtin import ArrayAttr

    return ArrayAttr([DictionaryAttr({NAME_ATTR: StringAttr(n)}) for n in names])


__all__ = ["GraphBuilder", "NAME_ATTR", "dense_attr", "dense_to_numpy"]
