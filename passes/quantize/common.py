"""Helpers the quantization passes share: constant values of operands, building scale
constants, the output-channel axis of each quantizable op."""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import dense_attr, dense_to_numpy, tensor_type
from infer.dialects.ir_io import IRError, describe_location
from infer.dialects.weights import WeightStore, WeightStoreError
from infer.passes.quantize.naming import NAME_ATTR

INLINE_LIMIT = 16  # parameters with more elements become weights (as the frontends do)

QUANTIZABLE: dict[str, type[g.GraphOp]] = {"conv2d": g.Conv2dOp, "linear": g.LinearOp, "matmul": g.MatmulOp}
"""Op kinds the int8 quantization handles (`ops=` of graph-quantize)."""


def constant_value(value: SSAValue, store: WeightStore) -> np.ndarray | None:
    """The value of a `graph.constant` / `graph.weight` result, else None."""
    op = value.owner
    if isinstance(op, g.ConstantOp):
        return dense_to_numpy(op.value)
    if isinstance(op, g.WeightOp):
        try:
            return np.asarray(store.get(op.weight_key))
        except WeightStoreError as e:
            raise IRError(f"{describe_location(op)}: error: '{op.name}' op {e}") from None
    return None


def parameter(array: np.ndarray, store: WeightStore, hint: str) -> Operation:
    """A `graph.constant` for a small array, else a new weight named after `hint`."""
    array = np.ascontiguousarray(array)
    if array.size <= INLINE_LIMIT:
        return g.ConstantOp(dense_attr(array))
    return g.WeightOp(store.add(hint, array), tensor_type(array.shape, array.dtype))


def with_type(t: TensorType, elem) -> TensorType:
    return TensorType(elem, t.get_shape())


def weight_base_name(value: SSAValue, layer: str, what: str) -> str:
    """A store name for a derived parameter: the weight's own name, else `<layer>.<what>`."""
    op = value.owner
    return op.weight_key if isinstance(op, g.WeightOp) else f"{layer}.{what}"


def output_channel_axis(op: Operation) -> int:
    """The axis of the op's result that indexes output channels (per-channel scales)."""
    rank = len(op.results[0].type.get_shape())  # type: ignore[attr-defined]
    return 1 if isinstance(op, g.Conv2dOp | g.Conv2dIntegerOp) else rank - 1


def weight_channel_axis(op: Operation) -> int | None:
    """The axis of the op's weight (constant operand) along which its output channels run:
    0 for conv2d (OIHW) and linear ([out, in]); the rhs's last axis for matmul (its
    second-to-last with transpose_b), None when the rhs is not a matrix (per tensor)."""
    if isinstance(op, g.Conv2dOp | g.LinearOp):
        return 0
    rank = len(op.operands[1].type.get_shape())  # type: ignore[attr-defined]
    if rank < 2:
        return None
    return rank - 2 if bool(op.transpose_b.value.data) else rank - 1  # type: ignore[attr-defined]


def location_prefix(op: Operation) -> str:
    """`file:line:col: ` when the op was parsed from a file, else nothing."""
    where = describe_location(op)
    return "" if where.startswith("<") else f"{where}: "


def stamp(op: Operation, name: str) -> Operation:
    op.attributes[NAME_ATTR] = StringAttr(name)
    return op


def module_entry(module: ModuleOp, entry: str):
    from infer.dialects.signature import entry_function

    return entry_function(module, entry)


__all__ = [
    "INLINE_LIMIT", "QUANTIZABLE", "constant_value", "location_prefix", "module_entry", "output_channel_axis", "parameter", "stamp",
    "weight_base_name", "weight_channel_axis", "with_type",
]
