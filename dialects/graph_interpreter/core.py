"""What every graph-interpreter kernel shares: the error type, the dtype helpers that round a
kernel's values to its result types, the per-run environment (weight store, constant cache) and
the kernel table (op class -> function) that `kernel_for` fills and `runner` dispatches on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    ModuleOp,
    TensorType,
)
from xdsl.ir import Operation

from infer.dialects import graph as g
from infer.dialects.dtypes import format_shape, to_numpy_dtype
from infer.dialects.weight_refs import weight_store_for
from infer.dialects.weights import WeightStore, WeightStoreError


INPUT_NAME_ATTR = "graph.name"
"""Function argument attribute naming an input for `run_module(inputs={...})`."""


class InterpreterError(Exception):
    """The graph interpreter cannot evaluate a program on the given inputs."""


# --------------------------------------------------------------------------
# dtype helpers
# --------------------------------------------------------------------------

LOW_PRECISION = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
F32 = np.dtype(np.float32)


def is_float_dtype(dt: np.dtype) -> bool:
    return dt in LOW_PRECISION or np.issubdtype(dt, np.floating)


def upcast(x: np.ndarray) -> np.ndarray:
    """Upcast f16/bf16 to the f32 compute type; other dtypes unchanged."""
    return x.astype(F32) if x.dtype in LOW_PRECISION else x


def result_type(op: Operation, i: int = 0) -> TensorType:
    t = op.results[i].type
    if not isinstance(t, TensorType):
        raise InterpreterError(f"{op.name}: result #{i} is not a tensor (type {t})")
    return t


def out_dtype(op: Operation, i: int = 0) -> np.dtype:
    t = result_type(op, i)
    try:
        return to_numpy_dtype(t.get_element_type())
    except ValueError as e:
        raise InterpreterError(f"{op.name}: {e}") from None


def shape_matches(actual: Sequence[int], declared: Sequence[int]) -> bool:
    return len(actual) == len(declared) and all(d < 0 or d == a for a, d in zip(actual, declared))


def finish(op: Operation, values: Sequence[Any]) -> list[np.ndarray]:
    """Round each value to its result element type and check its shape."""
    if len(values) != len(op.results):
        raise InterpreterError(
            f"{op.name}: produced {len(values)} values for {len(op.results)} results"
        )
    out: list[np.ndarray] = []
    for i, v in enumerate(values):
        dt = out_dtype(op, i)
        arr = np.asarray(v)
        if arr.dtype != dt:
            if arr.dtype in LOW_PRECISION and not is_float_dtype(dt):
                arr = arr.astype(F32)
            arr = arr.astype(dt)
        declared = result_type(op, i).get_shape()
        if not shape_matches(arr.shape, declared):
            raise InterpreterError(
                f"{op.name}: result #{i} evaluates to shape {format_shape(arr.shape)} but its type "
                f"declares {format_shape(declared)}"
            )
        out.append(arr)
    return out


def scalar(x: np.ndarray, value: float) -> Any:
    """A float attribute as a scalar of x's dtype (so f32 math stays f32)."""
    return x.dtype.type(value)


def float_of(attr: Any) -> float:
    return float(attr.value.data)


def int_of(attr: Any) -> int:
    return int(attr.value.data)


def bool_of(attr: Any) -> bool:
    return bool(attr.value.data)
# --------------------------------------------------------------------------
# Kernels: op class -> function(op, inputs, env) -> value or list of values
# --------------------------------------------------------------------------


class ConstantCache:
    """Values that depend only on weights and constants, kept across runs of one
    unchanged module (`run_module(..., constant_cache=cache)`): weights read from
    the store, dequantized weights, casts of weights, ... Ops that compute the
    same op on the same weights share one value, also across the module's
    functions (the dequantization of a weight in @prefill and in @decode)."""

    def __init__(self) -> None:
        self._keys: dict[Operation, tuple] = {}
        self._values: dict[tuple, tuple[np.ndarray, ...]] = {}

    def key(self, op: Operation) -> tuple | None:
        """The op's identity by value, or None if it depends on a function argument.
        Ops run in order, so an op is a function of weights and constants alone
        exactly when every operand comes from an op that already has a key."""
        found = self._keys.get(op)
        if found is not None:
            return found or None  # () marks an op that depends on an argument
        if isinstance(op, g.WeightOp):
            key: tuple = ("weight", op.weight_key, op.output.type)
        elif isinstance(op, g.ConstantOp):
            key = ("constant", op)
        else:
            operands = []
            for v in op.operands:
                owner_key = self._keys.get(v.owner) if isinstance(v.owner, Operation) else None
                if not owner_key:
                    self._keys[op] = ()
                    return None
                operands.append((owner_key, v.index))
            key = (op.name, tuple(op.properties.items()), tuple(operands), tuple(r.type for r in op.results))
        self._keys[op] = key
        return key

    def get(self, key: tuple) -> tuple[np.ndarray, ...] | None:
        return self._values.get(key)

    def put(self, key: tuple, values: tuple[np.ndarray, ...]) -> None:
        self._values[key] = values

    def __contains__(self, op: Operation) -> bool:
        key = self._keys.get(op)
        return bool(key) and key in self._values

    def __len__(self) -> int:
        return len(self._values)


class Env:
    """What a kernel may need beyond its operands (the weight store), and the
    optional cache of values that depend only on weights and constants."""

    def __init__(self, weights: WeightStore | None, module: ModuleOp | None,
                 constant_cache: ConstantCache | None = None):
        self._weights = weights
        self._module = module
        self.constant_cache = constant_cache

    def weights(self, op: Operation) -> WeightStore:
        if self._weights is None:
            try:
                self._weights = weight_store_for(op, self._module)
            except WeightStoreError as e:
                raise InterpreterError(f"{op.name}: {e}") from None
        return self._weights


Kernel = Callable[[Any, list[np.ndarray], Env], Any]
KERNELS: dict[type[Operation], Kernel] = {}


def kernel_for(*op_types: type[Operation]) -> Callable[[Kernel], Kernel]:
    def register(fn: Kernel) -> Kernel:
        for t in op_types:
            KERNELS[t] = fn
        return fn

    return register
