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
    Float4E2M1FNType,
    Float8E4M3FNType,
    Float8E4M3FNUZType,
    Float8E5M2FNUZType,
    Float8E5M2Type,
    Float8E8M0FNUType,
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
    # Storage types (ONNX's 8-, 4- and 2-bit types, one byte per element in numpy via
    # ml_dtypes): the graph level holds, casts and moves them; arithmetic is on the wider
    # types (see STORAGE_ONLY_TYPES).
    "f8E4M3FN": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f8E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "f8E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8E8M0FNU": np.dtype(ml_dtypes.float8_e8m0fnu),
    "f4E2M1FN": np.dtype(ml_dtypes.float4_e2m1fn),
    "i4": np.dtype(ml_dtypes.int4),
    "ui4": np.dtype(ml_dtypes.uint4),
    "i2": np.dtype(ml_dtypes.int2),
    "ui2": np.dtype(ml_dtypes.uint2),
}

_NARROW_FLOAT_TYPES = {
    "f8E4M3FN": Float8E4M3FNType,
    "f8E4M3FNUZ": Float8E4M3FNUZType,
    "f8E5M2": Float8E5M2Type,
    "f8E5M2FNUZ": Float8E5M2FNUZType,
    "f8E8M0FNU": Float8E8M0FNUType,
    "f4E2M1FN": Float4E2M1FNType,
}

_NARROW_INT_BYTES = {
    np.dtype(ml_dtypes.int4): np.dtype(np.int8), np.dtype(ml_dtypes.int2): np.dtype(np.int8),
    np.dtype(ml_dtypes.uint4): np.dtype(np.uint8), np.dtype(ml_dtypes.uint2): np.dtype(np.uint8),
}
"""The byte a 4- or 2-bit integer is stored as in a dense attribute."""

STORAGE_ONLY_TYPES = frozenset({*_NARROW_FLOAT_TYPES, "i4", "ui4", "i2", "ui2"})
"""Element types a graph value may have, but that no arithmetic op takes: they are cast
to and from the wider types (graph.cast), quantized to (graph.quantize_linear) and moved
(reshape, transpose, ...). `is_float` / `is_integer` are false for them."""

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
    for name, cls in _NARROW_FLOAT_TYPES.items():
        if isinstance(t, cls):
            return name
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
        case _ if name in _NARROW_FLOAT_TYPES:
            return _NARROW_FLOAT_TYPES[name]()
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
    """i8 and wider, signed or unsigned (the 4- and 2-bit types are storage only)."""
    return isinstance(t, IntegerType) and t.width.data >= 8


def is_bool(t: Attribute) -> bool:
    return isinstance(t, IntegerType) and t.width.data == 1


def is_splat(array: np.ndarray) -> bool:
    """All elements equal (bitwise, so -0.0 vs 0.0 and NaN payloads count as different)."""
    if array.size <= 1:
        return True
    flat = np.ascontiguousarray(array).reshape(-1)
    raw = flat.view(np.uint8).reshape(flat.size, -1)
    return bool(np.all(raw == raw[0]))


def dense_attr(array: np.ndarray, *, splat: bool = False) -> DenseIntOrFPElementsAttr:
    """A builtin dense attribute holding `array` (any supported dtype; a 0-d array stays 0-d).

    The data is little-endian with one byte per i1 (0xff for true, as xDSL's parser
    writes it). With `splat`, an array whose elements are all equal is stored as one
    element (printed as one value)."""
    array = np.asarray(array)
    t = tensor_type(array.shape, array.dtype)
    if splat and is_splat(array):
        array = array.reshape(-1)[:1]
    if array.dtype == np.bool_:
        data = np.where(array, np.uint8(0xFF), np.uint8(0))
    elif array.dtype in _NARROW_INT_BYTES:  # one (sign-extended) byte each, as xDSL's parser writes
        data = array.astype(_NARROW_INT_BYTES[array.dtype])
    else:
        data = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return DenseIntOrFPElementsAttr(t, BytesAttr(np.ascontiguousarray(data).tobytes()))


def dense_to_numpy(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The value of a dense elements attribute as a new numpy array.

    The raw data is read as little-endian whatever the host (xDSL packs it with `<`
    formats); an i1 element is one byte, any non-zero byte meaning true (xDSL and
    `dense_attr` write 0xff, other writers 0x01); one stored element for a larger shape
    is a splat. Raises ValueError when the data holds another element count."""
    t = attr.type
    assert isinstance(t, TensorType)
    dtype = to_numpy_dtype(t.get_element_type())
    shape = tuple(t.get_shape())
    raw = attr.data.data
    if dtype == np.bool_:
        flat = np.frombuffer(raw, dtype=np.uint8) != 0
    elif dtype in _NARROW_INT_BYTES:
        flat = np.frombuffer(raw, dtype=_NARROW_INT_BYTES[dtype]).astype(dtype)
    else:
        flat = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype)
    if flat.size == num_elements(shape):
        return flat.reshape(shape)
    if flat.size == 1:
        return np.full(shape, flat[0], dtype=dtype)
    raise ValueError(
        f"dense attribute holds {flat.size} elements for shape {format_shape(shape)}"
    )


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


def numpy_dtype_of(value: SSAValue | Attribute) -> np.dtype:
    """The numpy dtype of a shaped value's element type (see `to_numpy_dtype`)."""
    return to_numpy_dtype(element_type_of(value))


def format_shape(shape: Sequence[int]) -> str:
    """A shape as MLIR spells it in a type: "2x3", "?x4" (negative = dynamic), "scalar"."""
    return "x".join("?" if d < 0 else str(d) for d in shape) or "scalar"
