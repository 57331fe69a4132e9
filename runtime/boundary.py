"""Model inputs and outputs whose dtype differs from what DRAM holds: the conversions at the
boundary between the host and a compiled program.

graph-to-tile keeps a model's signature (the graph's dtypes) but may hold a tensor in DRAM as
another type (the artifact's layout says which; docs/tiling.md "Element types"):

| signature (host) | DRAM | input conversion | output conversion |
|---|---|---|---|
| int64 | int32 | range-checked narrowing (gather indices, masks) | - |
| bool | float32 | 0.0 / 1.0 | x != 0 |
| int8 .. int64, uint8 .. uint64 | float32 | exact: values must lie in [-2^24, 2^24] | round to an integer, wrap to the type as numpy does |
| float16, bfloat16 | float32 | exact | round to nearest even |
| float64 | float32 | round to nearest (graph-to-tile only does this when the argument's uses are casts to f32/f16/bf16, which round the same way) | exact |

Every conversion here is exact or is the rounding the graph itself specifies; an input that
cannot be converted exactly is a `BoundaryError` naming it, never a silently wrong value.

Integer inputs that select rows of a table (gather indices: token ids, token types) carry the
table's size in the layout (`DramRegion.index_bound`). The compiled gathers read indices as they
are, so `gather_indices` checks each one against it: an index past the table would read other
DRAM bytes, a negative one fault. Negative indices count from the end (ONNX's Gather) and are
wrapped here when nothing but gathers reads the input (`DramRegion.index_wraps`); else they are
refused, like indices past the end.
The runtime imports no compiler code: this table is the contract.
"""

from __future__ import annotations

import numpy as np

EXACT_INTEGER_LIMIT = 1 << 24
"""Integers held as float32 are exact up to this magnitude (float32 has a 24-bit significand)."""


class BoundaryError(ValueError):
    """An input value the compiled program cannot hold exactly."""


def _is_int(dt: np.dtype) -> bool:
    return dt.kind in "iu"


def _is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt.name == "bfloat16"


def converts(host: np.dtype, dram: np.dtype, what: str) -> bool:
    """Whether a `what` ("input" or "output") of dtype `host` may be held in DRAM as `dram`."""
    host, dram = np.dtype(host), np.dtype(dram)
    if host == dram:
        return True
    if what == "input" and host == np.int64 and dram == np.int32:
        return True
    if dram == np.float32:
        return host == np.bool_ or _is_int(host) or _is_float(host)
    return False


def to_dram(name: str, array: np.ndarray, dram: np.dtype) -> np.ndarray:
    """Input `name` as DRAM holds it (see the module docstring); raises BoundaryError when a
    value cannot be held exactly."""
    dram = np.dtype(dram)
    if array.dtype == dram:
        return array
    if dram == np.int32 and array.dtype == np.int64:
        info = np.iinfo(np.int32)
        if array.size and (array.min() < info.min or array.max() > info.max):
            bad = array[(array < info.min) | (array > info.max)].ravel()[0]
            raise BoundaryError(f"input '{name}': int64 value {int(bad)} is outside the int32 range "
                                f"[{info.min}, {info.max}] (the accelerator holds int64 inputs as int32)")
        return np.ascontiguousarray(array.astype(np.int32))
    if dram != np.float32 or not converts(array.dtype, dram, "input"):
        raise BoundaryError(f"input '{name}': {array.dtype} cannot be held as {dram}")
    if _is_int(array.dtype) and array.size:
        wide = array.astype(np.int64) if array.dtype != np.uint64 else array
        outside = (wide > EXACT_INTEGER_LIMIT) | ((wide < -EXACT_INTEGER_LIMIT) if array.dtype.kind == "i" else False)
        if np.any(outside):
            bad = array[outside].ravel()[0]
            raise BoundaryError(f"input '{name}': {array.dtype} value {int(bad)} is outside [-2^24, 2^24], which "
                                "the accelerator holds exactly (integer tensors are held as float32)")
    return np.ascontiguousarray(array.astype(np.float32))


def gather_indices(name: str, array: np.ndarray, bound: int, wraps: bool) -> np.ndarray:
    """Integer input `name` of gather indices into a table of `bound` rows, checked (and with
    `wraps`, negative ones counted from the end); BoundaryError naming the first bad index."""
    if not array.size:
        return array
    low = -bound if wraps else 0
    lo, hi = array.min(), array.max()
    if lo < low or hi >= bound:
        where = tuple(int(i) for i in np.argwhere((array < low) | (array >= bound))[0])
        allowed = f"[{low}, {bound})" + (" (negative ones count from the end)" if wraps else "")
        raise BoundaryError(f"input '{name}': index {int(array[where])} at {list(where)} is outside {allowed}: it "
                            f"selects rows of a table of {bound}")
    if lo < 0:
        return np.where(array < 0, array + bound, array).astype(array.dtype)
    return array


def from_dram(array: np.ndarray, host: np.dtype) -> np.ndarray:
    """Output values read from DRAM as the signature's dtype (see the module docstring)."""
    host = np.dtype(host)
    if array.dtype == host:
        return array
    if host == np.bool_:
        return array != 0
    if _is_int(host):
        with np.errstate(invalid="ignore"):
            whole = np.nan_to_num(np.rint(array.astype(np.float64)), nan=0.0, posinf=0.0, neginf=0.0)
        return whole.astype(np.int64).astype(host)  # wraps to narrow types, as numpy's integer ops do
    return array.astype(host)


__all__ = ["BoundaryError", "EXACT_INTEGER_LIMIT", "converts", "from_dram", "gather_indices", "to_dram"]
