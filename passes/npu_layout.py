"""The DRAM layout contract between `tile-to-npu` and the runtime (`npu.layout`).

See docs/codegen.md for the attribute's keys. `NpuLayout.from_module(module)` reads it,
`dram_image(inputs, weights)` builds the initial DRAM, `read_outputs(dram)` reads the outputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    i1,
    i64,
)
from xdsl.ir import Attribute

from infer.dialects.dtypes import parse_element_type, to_numpy_dtype

LAYOUT_ATTR = "npu.layout"
LAYOUT_VERSION = 1
# op markers: [{name, kind, start, end[, values]}] instruction ranges [start, end); `values`
# (optional) = [{layer | output, offset, shape, dtype}]: graph-level values whose DRAM bytes are
# final when the marker ends (docs/codegen.md, "Op markers")
OPS_ATTR = "npu.ops"


def _value_to_attr(v: Mapping) -> DictionaryAttr:
    d: dict[str, Attribute] = {}
    for k, x in v.items():
        if k == "shape":
            d[k] = DenseArrayBase.from_list(i64, [int(n) for n in x])
        elif isinstance(x, str):
            d[k] = StringAttr(x)
        else:
            d[k] = IntegerAttr(int(x), i64)
    return DictionaryAttr(d)


def ops_to_attr(ops: Sequence[Mapping]) -> ArrayAttr:
    """Op markers (graph-level kernels' instruction ranges) -> the `npu.ops` attribute."""
    out = []
    for o in ops:
        d: dict[str, Attribute] = {"name": StringAttr(o["name"]), "kind": StringAttr(o["kind"]),
                                   "start": IntegerAttr(o["start"], i64), "end": IntegerAttr(o["end"], i64)}
        if o.get("values"):
            d["values"] = ArrayAttr([_value_to_attr(v) for v in o["values"]])
        out.append(DictionaryAttr(d))
    return ArrayAttr(out)


def _value_from_attr(a: Attribute) -> dict:
    assert isinstance(a, DictionaryAttr)
    out: dict = {}
    for k, x in a.data.items():
        if isinstance(x, DenseArrayBase):
            out[k] = [int(n) for n in x.get_values()]
        elif isinstance(x, StringAttr):
            out[k] = x.data
        else:
            assert isinstance(x, IntegerAttr)
            out[k] = int(x.value.data)
    return out


def ops_from_module(module: ModuleOp) -> list[dict]:
    """The `npu.ops` markers of a lowered module as plain dictionaries ([] when absent)."""
    attr = module.attributes.get(OPS_ATTR)
    if not isinstance(attr, ArrayAttr):
        return []
    out = []
    for d in attr.data:
        assert isinstance(d, DictionaryAttr)
        v = d.data
        o = {"name": v["name"].data, "kind": v["kind"].data,  # type: ignore[attr-defined]
             "start": v["start"].value.data, "end": v["end"].value.data}  # type: ignore
        if isinstance(v.get("values"), ArrayAttr):
            o["values"] = [_value_from_attr(x) for x in v["values"].data]  # type: ignore[union-attr]
        out.append(o)
    return out


def align_up(x: int, a: int) -> int:
    return -(-x // a) * a


@dataclass
class Region:
    """One argument or weight in DRAM."""

    name: str
    offset: int
    shape: tuple[int, ...]
    dtype: str
    index: int = -1  # argument position (-1 for weights)
    output: bool = False

    @property
    def np_dtype(self) -> np.dtype:
        return to_numpy_dtype(parse_element_type(self.dtype))

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * self.np_dtype.itemsize


@dataclass
class NpuLayout:
    target: str
    entry: str
    alignment: int
    args: list[Region] = field(default_factory=list)
    weights: list[Region] = field(default_factory=list)
    weights_offset: int = 0
    weights_bytes: int = 0
    arena_offset: int = 0
    arena_bytes: int = 0
    dram_bytes: int = 0

    @property
    def inputs(self) -> list[Region]:
        return [a for a in self.args if not a.output]

    @property
    def outputs(self) -> list[Region]:
        return [a for a in self.args if a.output]

    # ------------------------------------------------------------------ attribute
    def to_attr(self) -> DictionaryAttr:
        def num(v: int) -> IntegerAttr:
            return IntegerAttr(v, i64)

        def region(r: Region, arg: bool) -> DictionaryAttr:
            d: dict[str, Attribute] = {}
            if arg:
                d["index"] = num(r.index)
            d["name"] = StringAttr(r.name)
            if arg:
                d["output"] = IntegerAttr(int(r.output), i1)
            d["offset"] = num(r.offset)
            d["bytes"] = num(r.bytes)
            d["shape"] = DenseArrayBase.from_list(i64, list(r.shape))
            d["dtype"] = StringAttr(r.dtype)
            return DictionaryAttr(d)

        return DictionaryAttr({
            "version": num(LAYOUT_VERSION),
            "target": StringAttr(self.target),
            "entry": StringAttr(self.entry),
            "alignment": num(self.alignment),
            "dram_bytes": num(self.dram_bytes),
            "args": ArrayAttr([region(a, True) for a in self.args]),
            "weights_offset": num(self.weights_offset),
            "weights_bytes": num(self.weights_bytes),
            "weights": ArrayAttr([region(w, False) for w in self.weights]),
            "arena_offset": num(self.arena_offset),
            "arena_bytes": num(self.arena_bytes),
        })

    @staticmethod
    def from_attr(attr: DictionaryAttr) -> NpuLayout:
        d = attr.data

        def i(a: Attribute) -> int:
            assert isinstance(a, IntegerAttr)
            return int(a.value.data)

        def s(a: Attribute) -> str:
            assert isinstance(a, StringAttr)
            return a.data

        def region(a: Attribute) -> Region:
            assert isinstance(a, DictionaryAttr)
            r = a.data
            shape = r["shape"]
            assert isinstance(shape, DenseArrayBase)
            return Region(s(r["name"]), i(r["offset"]), tuple(int(x) for x in shape.get_values()),
                          s(r["dtype"]), i(r["index"]) if "index" in r else -1,
                          bool(i(r["output"])) if "output" in r else False)

        args, weights = d["args"], d["weights"]
        assert isinstance(args, ArrayAttr) and isinstance(weights, ArrayAttr)
        return NpuLayout(s(d["target"]), s(d["entry"]), i(d["alignment"]),
                         [region(a) for a in args.data], [region(w) for w in weights.data],
                         i(d["weights_offset"]), i(d["weights_bytes"]), i(d["arena_offset"]),
                         i(d["arena_bytes"]), i(d["dram_bytes"]))

    @staticmethod
    def from_module(module: ModuleOp) -> NpuLayout:
        attr = module.attributes.get(LAYOUT_ATTR)
        if not isinstance(attr, DictionaryAttr):
            raise ValueError(f"the module has no {LAYOUT_ATTR} attribute (run tile-to-npu)")
        return NpuLayout.from_attr(attr)

    # ------------------------------------------------------------------ runtime helpers
    def dram_image(self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray],
                   weights: object = None, extra: int = 0) -> np.ndarray:
        """A zeroed DRAM image of `dram_bytes` (+ extra) bytes with the inputs (by position or
        by name) and the weights (a WeightStore or a name -> array mapping) copied in."""
        dram = np.zeros(self.dram_bytes + extra, np.uint8)
        ins = self.inputs
        if isinstance(inputs, Mapping):
            values = [inputs[r.name] for r in ins]
        else:
            values = list(inputs)
            if len(values) != len(ins):
                raise ValueError(f"expected {len(ins)} inputs, got {len(values)}")
        for r, v in zip(ins, values):
            self._put(dram, r, np.asarray(v))
        for w in self.weights:
            if weights is None:
                raise ValueError("the program reads weights: pass the weight store")
            arr = weights.get(w.name) if hasattr(weights, "get") else weights[w.name]  # type: ignore[index]
            self._put(dram, w, np.asarray(arr))
        return dram

    @staticmethod
    def _put(dram: np.ndarray, r: Region, v: np.ndarray) -> None:
        if v.dtype != r.np_dtype or tuple(v.shape) != r.shape:
            raise ValueError(f"'{r.name}': expected {r.dtype} {r.shape}, got {v.dtype} {v.shape}")
        raw = np.ascontiguousarray(v).view(np.uint8).reshape(-1)
        dram[r.offset:r.offset + raw.size] = raw

    def read(self, dram: np.ndarray, r: Region) -> np.ndarray:
        raw = dram[r.offset:r.offset + r.bytes]
        return raw.view(r.np_dtype).reshape(r.shape).copy()

    def read_outputs(self, dram: np.ndarray) -> list[np.ndarray]:
        return [self.read(dram, r) for r in self.outputs]


__all__ = ["LAYOUT_ATTR", "NpuLayout", "Region", "align_up"]
