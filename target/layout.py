"""The DRAM layout contract between the compiler and the runtime (`npu.layout`).

tile-to-npu decides where every argument and weight of a compiled program lives in DRAM and
records it; the runtime builds the DRAM image from the same record. Both sides use the classes
here, so the contract has one set of names:

    DramLayout(target, entry, alignment, args, weights, weights_offset, weights_bytes,
               arena_offset, arena_bytes, dram_bytes)
    DramRegion(name, offset, shape, dtype, index, output)   # one argument or weight

`DramLayout.to_json()` / `DramLayout.from_json(d)` convert to and from the JSON form (the keys
of docs/codegen.md; the artifact header holds it as `layout`). The compiler stores the same
JSON form as the module attribute `npu.layout` (builtin attributes; the codec is
`infer.dialects.npu_attrs`). `dram_image` / `read_outputs` build a DRAM image and read the
outputs back (steps 1-2 and 4 of docs/codegen.md).

This module lives in target/ (the bottom layer) because passes/ and runtime/ both import it;
it needs numpy only, so a compiled artifact still runs without the compiler.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

LAYOUT_VERSION = 1


class LayoutError(ValueError):
    """A layout (JSON form) that breaks the contract. One line."""


# ----------------------------------------------------------------------------- dtypes
# Every dtype a layout or an artifact names, by its numpy spelling ...
DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "float64": np.dtype(np.float64),
    "bfloat16": np.dtype(ml_dtypes.bfloat16), "int8": np.dtype(np.int8), "uint8": np.dtype(np.uint8),
    "int16": np.dtype(np.int16), "int32": np.dtype(np.int32), "int64": np.dtype(np.int64),
    "uint16": np.dtype(np.uint16), "uint32": np.dtype(np.uint32), "uint64": np.dtype(np.uint64),
    "bool": np.dtype(np.bool_),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn), "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
}
# ... and the spellings the compiler uses (MLIR element types in layouts, ISA names).
DTYPE_ALIASES = {"f32": "float32", "fp32": "float32", "f16": "float16", "fp16": "float16", "bf16": "bfloat16",
                 "f64": "float64", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "i1": "bool",
                 "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
                 "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


def lookup_dtype(name: str) -> np.dtype | None:
    """A dtype name (numpy spelling, or an MLIR/ISA alias) -> numpy dtype; None if unknown."""
    return DTYPES.get(DTYPE_ALIASES.get(str(name), str(name)))


def dtype_of(name: str) -> np.dtype:
    dt = lookup_dtype(name)
    if dt is None:
        raise LayoutError(f"unsupported dtype '{name}'")
    return dt


def align_up(x: int, alignment: int) -> int:
    return -(-x // alignment) * alignment


# ----------------------------------------------------------------------------- the contract
@dataclass
class DramRegion:
    """One function argument or weight in DRAM: dense row-major (C order), little-endian."""

    name: str
    offset: int  # absolute DRAM byte address
    shape: tuple[int, ...]
    dtype: str  # MLIR spelling as the compiler writes it: f32, bf16, i8, i32, ui8, ...
    index: int = -1  # argument position (-1 for weights)
    output: bool = False  # an output argument (the program writes it); key "output" in the JSON form
    alias_of: int = -1  # an output written in place: the index of the input whose region it is
    # an integer input of gather indices: the table size they must stay below (0: none), and
    # whether negative ones count from the end (the runtime wraps them; runtime/boundary.py)
    index_bound: int = 0
    index_wraps: bool = False
    # a paged attention's context lengths: the most tokens a block-table row holds (0: none);
    # its block tables: (pool blocks, block size, the lengths' argument index) or None
    length_bound: int = 0
    block_table: tuple[int, int, int] | None = None

    @property
    def np_dtype(self) -> np.dtype:
        return dtype_of(self.dtype)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.np_dtype.itemsize

    def to_json(self, argument: bool) -> dict[str, Any]:
        """The JSON form (key order as tile-to-npu has always written it)."""
        d: dict[str, Any] = {"index": self.index} if argument else {}
        d["name"] = self.name
        if argument:
            d["output"] = self.output
            if self.alias_of >= 0:
                d["alias_of"] = self.alias_of
            if self.index_bound:
                d["index_bound"] = self.index_bound
                d["index_wraps"] = self.index_wraps
            if self.length_bound:
                d["length_bound"] = self.length_bound
            if self.block_table is not None:
                d["block_table"] = list(self.block_table)
        d.update(offset=self.offset, bytes=self.nbytes, shape=list(self.shape), dtype=self.dtype)
        return d

    @staticmethod
    def from_json(d: Any, where: str, index: int = -1) -> DramRegion:
        if not isinstance(d, dict) or not isinstance(d.get("shape"), list):
            raise LayoutError(f"layout: {where} must be an object with a shape")
        shape = d["shape"]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            raise LayoutError(f"layout: {where}.shape must list non-negative integers, got {shape!r}")
        dtype = str(d.get("dtype", "?"))
        dtype_of(dtype)
        region = DramRegion(str(d.get("name", f"arg{index}")), _int(d, "offset", f"{where}."), tuple(shape), dtype,
                            index if index >= 0 else -1, bool(d.get("output", False)),
                            _int(d, "alias_of", f"{where}.") if "alias_of" in d else -1)
        if "index_bound" in d:
            region.index_bound = _int(d, "index_bound", f"{where}.")
            region.index_wraps = d.get("index_wraps") is True
        if "length_bound" in d:
            region.length_bound = _int(d, "length_bound", f"{where}.")
        if "block_table" in d:
            table = d["block_table"]
            if not (isinstance(table, list) and len(table) == 3
                    and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in table)):
                raise LayoutError(f"layout: {where}.block_table must be [pool blocks, block size, lengths "
                                  f"argument], got {table!r}")
            region.block_table = (table[0], table[1], table[2])
        if "bytes" in d and _int(d, "bytes", f"{where}.") != region.nbytes:
            raise LayoutError(f"layout: {where} '{region.name}' says {d['bytes']} bytes, but {dtype}"
                              f"{list(region.shape)} is {region.nbytes}")
        return region


@dataclass
class DramLayout:
    """Where a compiled program's arguments, weights and activation arena live in DRAM:
    [arguments, in order, each aligned] [weight region] [arena] (docs/codegen.md)."""

    target: str
    entry: str
    alignment: int
    args: list[DramRegion] = field(default_factory=list)
    weights: list[DramRegion] = field(default_factory=list)
    weights_offset: int = 0
    weights_bytes: int = 0
    arena_offset: int = 0
    arena_bytes: int = 0
    dram_bytes: int = 0

    @property
    def inputs(self) -> list[DramRegion]:
        return [a for a in self.args if not a.output]

    @property
    def outputs(self) -> list[DramRegion]:
        return [a for a in self.args if a.output]

    @property
    def aliases(self) -> dict[str, str]:
        """{output name: input name} of the outputs written in place (the input's region is the
        output's: a runtime keeps such buffers resident and copies nothing in or out)."""
        by_index = {a.index: a for a in self.args}
        return {a.name: by_index[a.alias_of].name for a in self.outputs
                if a.alias_of >= 0 and a.alias_of in by_index}

    @property
    def total_bytes(self) -> int:
        """The size of the DRAM image the program needs (= dram_bytes)."""
        return self.dram_bytes

    # ------------------------------------------------------------------ JSON form
    def to_json(self) -> dict[str, Any]:
        return {
            "version": LAYOUT_VERSION, "target": self.target, "entry": self.entry, "alignment": self.alignment,
            "dram_bytes": self.dram_bytes,
            "args": [a.to_json(argument=True) for a in self.args],
            "weights_offset": self.weights_offset, "weights_bytes": self.weights_bytes,
            "weights": [w.to_json(argument=False) for w in self.weights],
            "arena_offset": self.arena_offset, "arena_bytes": self.arena_bytes,
        }

    @staticmethod
    def from_json(d: Any) -> DramLayout:
        """Check and normalise the JSON form (version 1); LayoutError names what is wrong."""
        if not isinstance(d, dict):
            raise LayoutError("layout: expected an object")
        if d.get("version", LAYOUT_VERSION) != LAYOUT_VERSION:
            raise LayoutError(f"layout: unsupported npu.layout version {d.get('version')!r} "
                              f"(this runtime reads {LAYOUT_VERSION})")
        args_raw, weights_raw = d.get("args"), d.get("weights", [])
        if not isinstance(args_raw, list):
            raise LayoutError("layout: 'args' must be a list")
        if not isinstance(weights_raw, list):
            raise LayoutError("layout: 'weights' must be a list")
        args = []
        for i, a in enumerate(args_raw):
            index = a.get("index", i) if isinstance(a, dict) else i
            args.append(DramRegion.from_json(a, f"args[{i}]", index if isinstance(index, int) else i))
        weights = []
        for i, w in enumerate(weights_raw):
            if not isinstance(w, dict) or not isinstance(w.get("name"), str):
                raise LayoutError(f"layout: weights entry {i} must be an object with a name")
            weights.append(DramRegion.from_json(w, f"weights[{i}]"))
        return DramLayout(str(d.get("target", "")), str(d.get("entry", "main")), max(1, _int(d, "alignment", "", 1)),
                          args, weights, _int(d, "weights_offset", "", 0), _int(d, "weights_bytes", "", 0),
                          _int(d, "arena_offset", "", 0), _int(d, "arena_bytes", "", 0), _int(d, "dram_bytes", ""))

    # ------------------------------------------------------------------ DRAM images
    def dram_image(self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray],
                   weights: object = None, extra: int = 0) -> np.ndarray:
        """A zeroed DRAM image of `dram_bytes` (+ extra) bytes with the inputs (by position or
        by name) and the weights (anything with `.get(name)`, e.g. a weight store, or a name ->
        array mapping) copied in."""
        dram = np.zeros(self.dram_bytes + extra, np.uint8)
        ins = self.inputs
        if isinstance(inputs, Mapping):
            values = [inputs[r.name] for r in ins]
        else:
            values = list(inputs)
            if len(values) != len(ins):
                raise ValueError(f"expected {len(ins)} inputs, got {len(values)}")
        for r, v in zip(ins, values, strict=True):
            self._put(dram, r, np.asarray(v))
        for w in self.weights:
            if weights is None:
                raise ValueError("the program reads weights: pass the weight store")
            arr = weights.get(w.name) if hasattr(weights, "get") else weights[w.name]  # type: ignore[index]
            self._put(dram, w, np.asarray(arr))
        return dram

    @staticmethod
    def _put(dram: np.ndarray, r: DramRegion, v: np.ndarray) -> None:
        if v.dtype != r.np_dtype or tuple(v.shape) != r.shape:
            raise ValueError(f"'{r.name}': expected {r.dtype} {r.shape}, got {v.dtype} {v.shape}")
        raw = np.ascontiguousarray(v).view(np.uint8).reshape(-1)
        dram[r.offset:r.offset + raw.size] = raw

    def read(self, dram: np.ndarray, r: DramRegion) -> np.ndarray:
        raw = dram[r.offset:r.offset + r.nbytes]
        return raw.view(r.np_dtype).reshape(r.shape).copy()

    def read_outputs(self, dram: np.ndarray) -> list[np.ndarray]:
        return [self.read(dram, r) for r in self.outputs]


def _int(d: dict[str, Any], key: str, what: str, default: int | None = None) -> int:
    v = d.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise LayoutError(f"layout: {what}{key} must be a non-negative integer, got {v!r}")
    return v


__all__ = ["DTYPES", "DTYPE_ALIASES", "LAYOUT_VERSION", "DramLayout", "DramRegion", "LayoutError", "align_up",
           "dtype_of", "lookup_dtype"]
