"""Ops that name a tensor of the module's weight store, and reading what they name.

`graph.weight` and `tile.weight` are one idea at two levels: a symbol naming a weight
(`@name`), one result whose type declares what the store must hold there (a tensor at the
graph level, a DRAM memref at the tile level), no operands, no side effects. They share
`WeightReference` and keep their own names and textual forms.

Everything that reads a weight or a constant at compile or run time goes through here:

    weight_store_for(op, module)    the store of `module`, or of the module holding `op`
    stored_weight(op, store)        the array a weight op names, checked against its type
    constant_value(value, store)    the value of a constant or weight result, else None
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp, SymbolRefAttr
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import prop_def
from xdsl.traits import ConstantLike

from infer.dialects.dtypes import (
    dense_to_numpy,
    element_type_name,
    element_type_of,
    format_shape,
    shape_of,
    to_numpy_dtype,
)
from infer.dialects.ir_io import IRError, describe_location
from infer.dialects.weights import WeightStore, WeightStoreError, weights_of


class WeightReference:
    """Mixed into an IRDL op with one result: the `name` property naming a weight of the
    module's store (printed `@name`), the constructor and `weight_key`.

    Traits stay with each op (`traits_def(Pure())` there): xDSL shares one traits object
    between an op and the single base that declares it, so a trait added to one dialect's
    ops (the graph canonicalization patterns) would reach the other's."""

    weight_name = prop_def(SymbolRefAttr, prop_name="name")

    def __init__(self, name: str, type: Attribute):
        super().__init__(result_types=[type], properties={"name": SymbolRefAttr(name)})  # type: ignore[call-arg]

    @property
    def weight_key(self) -> str:
        """The name of the weight in the store."""
        return self.weight_name.root_reference.data


def weight_store_for(op: Operation, module: ModuleOp | None = None) -> WeightStore:
    """The weight store of `module`, or (when None) of the module `op` is inside; a
    WeightStoreError when there is no such module."""
    if module is None:
        top = op.get_toplevel_object()
        module = top if isinstance(top, ModuleOp) else None
    if module is None:
        raise WeightStoreError("no weight store given and the op is not inside a module")
    return weights_of(module)


def stored_weight(op: Operation, store: WeightStore) -> np.ndarray:
    """The array that weight op `op` names in `store`. A missing weight, or one whose dtype or
    shape differs from the op's result type, is a WeightStoreError saying which."""
    assert isinstance(op, WeightReference)
    array = np.asarray(store.get(op.weight_key))
    declared = op.results[0].type
    dtype, shape = to_numpy_dtype(element_type_of(declared)), shape_of(declared)
    if array.dtype != dtype or tuple(array.shape) != shape:
        raise WeightStoreError(
            f"the store holds {array.dtype} {format_shape(array.shape)}, but the op declares "
            f"{dtype} {format_shape(shape)} ({element_type_name(element_type_of(declared))})"
        )
    return array


def constant_value(value: SSAValue, store: WeightStore) -> np.ndarray | None:
    """The compile-time value of `value` when a constant op (`graph.constant`) or a weight op
    defines it, else None. A weight the store cannot give is an IRError at the op's location."""
    op = value.owner
    if isinstance(op, WeightReference):
        try:
            return stored_weight(op, store)
        except WeightStoreError as e:
            raise IRError(f"{describe_location(op)}: error: '{op.name}' op {e}") from None
    if isinstance(op, Operation) and op.has_trait(ConstantLike):
        attr = getattr(op, "value", None)
        if isinstance(attr, DenseIntOrFPElementsAttr):
            return dense_to_numpy(attr)
    return None
