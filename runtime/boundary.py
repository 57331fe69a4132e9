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
The runtime imports no compiler code: this table is the contract.

Integer inputs that select rows of a table (gather indices: token ids, token types) carry the
table's size in the layout (`DramRegion.index_bound`). The compiled gathers read indices as they
are, so `gather_indices` checks each one against it: an index past the table would read other
DRAM bytes, a negative one fault. Negative indices count from the end (ONNX's Gather) and are
wrapped here when nothing but gathers reads the input (`DramRegion.index_wraps`); else they are
refused, like indices past the end. The write slots of a paged KV cache are checked the same way
against the pool, and a paged attention's context lengths and the blocks each sequence uses
against the block table and the pool (`paged_metadata`), as the reference interpreter does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


def to_region(name: str, array: np.ndarray, region: Any) -> np.ndarray:
    """Input `name` as its DRAM `region` (a `DramRegion`) holds it: gather indices checked
    against their table (and wrapped, `gather_indices`), then converted (`to_dram`)."""
    if region.index_bound:
        array = gather_indices(name, array, region.index_bound, region.index_wraps)
    return to_dram(name, array, region.np_dtype)


def paged_metadata(inputs: Sequence[tuple[Any, str, np.ndarray]]) -> None:
    """Check the context lengths and block tables among a run's inputs ((region, name, array)
    each, the region a `DramRegion`): each length within `length_bound`, each block a sequence
    uses (its first ceil(length / block size) table entries) within the pool; BoundaryError
    naming the first that is not."""
    by_index = {region.index: array for region, _, array in inputs}
    for region, name, array in inputs:  # the lengths first: they say which blocks are used
        if region.length_bound:
            bad = (array < 0) | (array > region.length_bound)
            if bad.any():
                seq = int(np.argwhere(bad.reshape(-1))[0, 0])
                raise BoundaryError(f"input '{name}': length {int(array.reshape(-1)[seq])} of sequence {seq} is "
                                    f"outside 0 .. {region.length_bound} (the tokens a block-table row holds)")
    for region, name, array in inputs:
        if region.block_table is not None:
            blocks, block_size, lens_index = region.block_table
            if lens_index not in by_index:  # (not an input of this run: a resident buffer)
                continue
            lens = by_index[lens_index].reshape(-1)
            table = array.reshape(len(lens), -1)
            for seq, n in enumerate(lens):
                used = table[seq, :-(-int(n) // block_size)]
                bad = (used < 0) | (used >= blocks)
                if bad.any():
                    raise BoundaryError(f"input '{name}': sequence {seq} uses block {int(used[bad][0])}, outside "
                                        f"the pool's 0 .. {blocks - 1}")


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


__all__ = ["BoundaryError", "EXACT_INTEGER_LIMIT", "converts", "from_dram", "gather_indices", "paged_metadata",
           "to_dram", "to_region"]
