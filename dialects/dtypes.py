"""Mapping between builtin MLIR element types and numpy dtypes.

One table serves the graph dialect (constants), the weight store, the
interpreters and the frontends, so a dtype is spelled the same everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    MemRefType,
    Signedness,
    TensorType,
)
from xdsl.ir import Attribute, SSAValue

_TO_NUMPY: dict[str, np.dtype] = {
    "f64": np.dtype(np.float64),
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "i1": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "ui8": np.dtype(np.uint8),
    "ui16": np.dtype(np.uint16),
    "ui32": np.dtype(np.uint32),
    "ui64": np.dtype(np.uint64),
}

SUPPORTED_ELEMENT_TYPES = tuple(_TO_NUMPY)


def element_type_name(t: Attribute) -> str:
    """Short MLIR spelling of an element type: f32, bf16, i8, ui8, ..."""
    if isinstance(t, Float64Type):
        return "f64"
    if isinstance(t, Float32Type):
        return "f32"
    if isinstance(t, Float16Type):
        return "f16"
    if isinstance(t, BFloat16Type):
        return "bf16"
    if isinstance(t, IntegerType):
        prefix = "ui" if t.signedness.data == Signedness.UNSIGNED else "i"
        return f"{prefix}{t.width.data}"
    return str(t)


def to_numpy_dtype(t: Attribute) -> np.dtype:
    name = element_type_name(t)
    if name not in _TO_NUMPY:
        raise ValueError(
            f"element type {name} has no numpy equivalent "
            f"(supported: {', '.join(SUPPORTED_ELEMENT_TYPES)})"
        )
    return _TO_NUMPY[name]


def from_numpy_dtype(dtype: np.dtype | type) -> Attribute:
    dtype = np.dtype(dtype)
    for name, candidate in _TO_NUMPY.items():
        if candidate == dtype:
            return parse_element_type(name)
    raise ValueError(
        f"numpy dtype {dtype} is not supported "
        f"(supported: {', '.join(str(d) for d in _TO_NUMPY.values())})"
    )


def parse_element_type(name: str) -> Attribute:
    match name:
        case "f64":
            return Float64Type()
        case "f32":
            return Float32Type()
        case "f16":
            return Float16Type()
        case "bf16":
            return BFloat16Type()
        case _ if name.startswith("ui"):
            return IntegerType(int(name[2:]), Signedness.UNSIGNED)
        case _ if name.startswith("i"):
            return IntegerType(int(name[1:]))
    raise ValueError(f"unknown element type '{name}'")


def tensor_type(shape: tuple[int, ...] | list[int], dtype: np.dtype | type) -> TensorType:
    return TensorType(from_numpy_dtype(dtype), list(shape))


def is_float(t: Attribute) -> bool:
    return isinstance(t, Float16Type | BFloat16Type | Float32Type | Float64Type)


def is_integer(t: Attribute) -> bool:
    return isinstance(t, IntegerType) and t.width.data > 1


def is_bool(t: Attribute) -> bool:
    return isinstance(t, IntegerType) and t.width.data == 1


def dense_attr(array: np.ndarray) -> DenseIntOrFPElementsAttr:
    """A builtin dense attribute holding `array` (any supported dtype)."""
    array = np.ascontiguousarray(array).reshape(np.shape(array))  # keep 0-d arrays 0-d
    t = tensor_type(array.shape, array.dtype)
    if array.dtype == np.bool_:
        return DenseIntOrFPElementsAttr.from_list(t, [int(v) for v in array.reshape(-1)])
    return DenseIntOrFPElementsAttr(t, BytesAttr(array.tobytes()))


def dense_to_numpy(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    t = attr.type
    assert isinstance(t, TensorType)
    dtype = to_numpy_dtype(t.get_element_type())
    shape = t.get_shape()
    if dtype == np.bool_:
        return np.array([bool(v) for v in attr.get_values()], dtype=np.bool_).reshape(shape)
    data = np.frombuffer(attr.data.data, dtype=dtype)
    if data.size == 1 and int(np.prod(shape)) != 1:  # splat
        return np.full(shape, data[0], dtype=dtype)
    return data.reshape(shape).copy()


# -- shapes and element types of SSA values (tensors at the graph level, memrefs below) ------


def shape_of(value: SSAValue | Attribute) -> tuple[int, ...]:
    """The static shape of a tensor or memref value (or of the type itself)."""
    t = value.type if isinstance(value, SSAValue) else value
    assert isinstance(t, TensorType | MemRefType), f"not a shaped type: {t}"
    return tuple(t.get_shape())


def element_type_of(value: SSAValue | Attribute) -> Attribute:
    """The element type of a tensor or memref value (or of the type itself)."""
    t = value.type if isinstance(value, SSAValue) else value
    assert isinstance(t, TensorType | MemRefType), f"not a shaped type: {t}"
    return t.get_element_type()


def element_name_of(value: SSAValue | Attribute) -> str:
    """The MLIR spelling of a shaped value's element type: "f32", "bf16", "i8", ..."""
    return element_type_name(element_type_of(value))


def num_elements(shape: Sequence[int]) -> int:
    """The number of elements of a static shape (1 for a scalar)."""
    return math.prod(shape)
