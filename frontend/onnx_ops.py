"""The ONNX op table and what its handlers share.

`handler("Relu", attrs=(...))` registers a function `(importer, node) -> outputs` for op
types of the default domain in `HANDLERS`; the handlers live in onnx_elementwise.py,
onnx_nn.py and onnx_structure.py, and `infer.frontend.onnx_import.Importer` calls them
node by node. An output is an SSA value (emitted through `importer.b`, the GraphBuilder)
or a numpy array (a value known at import time). A handler raises `NodeProblem` for
something it cannot import; the importer reports it with the node's name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper
from xdsl.ir import SSAValue

from infer.dialects.dtypes import from_numpy_dtype, numpy_dtype_of

if TYPE_CHECKING:
    from infer.frontend.onnx_import import Importer


# --------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------


class NodeProblem(Exception):
    """Something about one node cannot be imported (collected per node)."""


class NeedsInputValue(NodeProblem):
    """A node needs the value of a graph input at import time (a shape, axes, ...).

    The ONNX reference backend catches this and imports again once the input's
    value is known (`static_inputs=`)."""

    def __init__(self, input_name: str, message: str):
        super().__init__(message)
        self.input_name = input_name


# --------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------

Handler = Callable[["Importer", onnx.NodeProto], Sequence[Any]]


@dataclass
class OpSpec:
    """How one op type is imported: `fn`, the attributes it reads (any other attribute is
    refused), and whether a node whose inputs are all known may be folded at import time."""

    fn: Handler
    attrs: frozenset[str]
    fold: bool = True


HANDLERS: dict[str, OpSpec] = {}
"""ONNX op type -> how to import it; keyed by the op type for the default domain, by
`domain:op_type` for another domain (`handler_key`)."""


def handler_key(domain: str, op_type: str) -> str:
    return op_type if domain in ("", "ai.onnx") else f"{domain}:{op_type}"


def domain_ops(domain: str) -> list[str]:
    """The op types of a non-default `domain` that have a handler."""
    return sorted(k.split(":", 1)[1] for k in HANDLERS if k.startswith(f"{domain}:"))


def handler(*op_types: str, attrs: Sequence[str] = (), fold: bool = True, domain: str = ""):
    """Register the decorated function for `op_types` (of `domain`) in HANDLERS."""

    def register(fn: Handler) -> Handler:
        for t in op_types:
            HANDLERS[handler_key(domain, t)] = OpSpec(fn, frozenset(attrs), fold)
        return fn

    return register


# --------------------------------------------------------------------------
# Element types, constants, attributes
# --------------------------------------------------------------------------


def numpy_dtype_for(elem_type: int, what: str) -> np.dtype:
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        dt = None
    name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)
    if dt is None or elem_type in _UNSUPPORTED_ELEM:
        raise NodeProblem(f"{what} has element type {name}, which the graph dialect does not support")
    try:
        from_numpy_dtype(dt)
    except ValueError:
        raise NodeProblem(f"{what} has element type {name}, which the graph dialect does not support") from None
    return dt


_UNSUPPORTED_ELEM = {
    getattr(TensorProto, n)
    for n in (
        "STRING", "COMPLEX64", "COMPLEX128",
    )
    if hasattr(TensorProto, n)
}


def constant_node_value(node: onnx.NodeProto) -> np.ndarray:
    for a in node.attribute:
        if a.name == "value":
            numpy_dtype_for(a.t.data_type, "the constant")
            return numpy_helper.to_array(a.t)
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64)
        if a.name in ("value_string", "value_strings"):
            raise NodeProblem("string constants are not supported")
        if a.name == "sparse_value":
            raise NodeProblem("sparse constants are not supported")
    raise NodeProblem("the constant has no value attribute")


def attribute(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                return v.decode()
            if a.type == AttributeProto.INTS:
                return [int(x) for x in v]
            if a.type == AttributeProto.FLOATS:
                return [float(x) for x in v]
            return v
    return default


def input_name(node: onnx.NodeProto, i: int) -> str:
    return node.input[i] if i < len(node.input) and node.input[i] else ""


def ints_of(imp: Importer, node: onnx.NodeProto, attr_name: str, input_index: int, what: str) -> list[int] | None:
    """An int list given as an attribute (old opsets) or a constant input (new)."""
    v = attribute(node, attr_name)
    if v is not None:
        return [int(x) for x in v]
    name = input_name(node, input_index)
    if not name:
        return None
    return [int(x) for x in np.asarray(imp.static(name, what)).reshape(-1)]


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise NodeProblem(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def is_bfloat16(dt: np.dtype) -> bool:
    return dt.name == "bfloat16"


def is_float_dtype(dt: np.dtype) -> bool:
    return dt.kind == "f" or is_bfloat16(dt)


def require_float(x: SSAValue, what: str) -> None:
    if not is_float_dtype(numpy_dtype_of(x)):
        raise NodeProblem(f"{what} of {numpy_dtype_of(x)} is not supported (float types only)")
