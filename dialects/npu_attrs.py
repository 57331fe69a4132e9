"""The module attributes tile-to-npu leaves for the runtime, as builtin attributes.

* `npu.layout`: the DRAM layout contract (`infer.target.layout.DramLayout`, docs/codegen.md),
  stored as its JSON form: `layout_to_attr(layout)`, `layout_from_attr(attr)`,
  `layout_from_module(module)`.
* `npu.ops`: the op markers, one per graph-level kernel: `{name, kind, start, end[, macs, bytes,
  weight_bytes, predicted, class][, values]}` (`macs`...: the kernel's algorithmic roofline record
  and the cost model's prediction, docs/performance.md),
  the instruction range [start, end) and, optionally, `values` = `[{layer | output, offset,
  shape, dtype}]`: graph-level values whose DRAM bytes are final when the marker ends
  (docs/codegen.md, "Op markers"; the per-layer check reads them): `ops_to_attr(ops)`,
  `ops_from_module(module)`.

The encoding is one generic codec between JSON-able values and builtin attributes
(`json_to_attr`, `attr_to_json`): dict -> dictionary, list -> array, str -> string,
bool -> i1, int -> i64, and a list under the key `shape` -> `array<i64: ...>`. The compile
driver turns both attributes back into JSON with `attr_to_json` and stores that in the artifact.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from xdsl.dialects import builtin as b
from xdsl.ir import Attribute

from infer.target.layout import DramLayout

LAYOUT_ATTR = "npu.layout"
OPS_ATTR = "npu.ops"
ROOFLINE_KEYS = ("macs", "bytes", "weight_bytes", "predicted", "class")  # a marker's roofline record


def json_to_attr(value: Any, key: str = "") -> Attribute:
    """A JSON-able value -> builtin attributes (the encoding of `npu.layout` and `npu.ops`)."""
    if isinstance(value, Mapping):
        return b.DictionaryAttr({k: json_to_attr(v, k) for k, v in value.items()})
    if key == "shape":
        return b.DenseArrayBase.from_list(b.i64, [int(n) for n in value])
    if isinstance(value, str):
        return b.StringAttr(value)
    if isinstance(value, bool):
        return b.IntegerAttr(int(value), b.i1)
    if isinstance(value, numbers.Integral):  # numpy integers too
        return b.IntegerAttr(int(value), b.i64)
    if isinstance(value, Sequence):
        return b.ArrayAttr([json_to_attr(v) for v in value])
    raise TypeError(f"json_to_attr: cannot encode {type(value).__name__} under '{key}'")


def attr_to_json(attr: Attribute) -> Any:
    """Builtin attributes (dictionary, array, integer, string, ...) -> JSON-able Python."""
    if isinstance(attr, b.DictionaryAttr):
        return {k: attr_to_json(v) for k, v in attr.data.items()}
    if isinstance(attr, b.ArrayAttr):
        return [attr_to_json(v) for v in attr.data]
    if isinstance(attr, b.DenseArrayBase):
        return list(attr.get_values())
    if isinstance(attr, b.IntegerAttr):
        v = attr.value.data
        return bool(v) if isinstance(attr.type, b.IntegerType) and attr.type.width.data == 1 else v
    if isinstance(attr, b.FloatAttr):
        return attr.value.data
    if isinstance(attr, b.UnitAttr):
        return True
    if isinstance(attr, b.StringAttr):
        text = attr.data
        if text[:1] in "{[":
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                pass
        return text
    return str(attr)


# ----------------------------------------------------------------------------- npu.layout
def layout_to_attr(layout: DramLayout) -> b.DictionaryAttr:
    attr = json_to_attr(layout.to_json())
    assert isinstance(attr, b.DictionaryAttr)
    return attr


def layout_from_attr(attr: Attribute) -> DramLayout:
    return DramLayout.from_json(attr_to_json(attr))


def layout_from_module(module: b.ModuleOp) -> DramLayout:
    attr = module.attributes.get(LAYOUT_ATTR)
    if not isinstance(attr, b.DictionaryAttr):
        raise ValueError(f"the module has no {LAYOUT_ATTR} attribute (run tile-to-npu)")
    return layout_from_attr(attr)


# ----------------------------------------------------------------------------- npu.ops
def ops_to_attr(ops: Sequence[Mapping]) -> b.ArrayAttr:
    """Op markers (graph-level kernels' instruction ranges) -> the `npu.ops` attribute."""
    out = []
    for o in ops:
        marker = {"name": o["name"], "kind": o["kind"], "start": o["start"], "end": o["end"]}
        for key in ROOFLINE_KEYS:
            if key in o:
                marker[key] = o[key]
        if o.get("values"):
            marker["values"] = o["values"]
        out.append(json_to_attr(marker))
    return b.ArrayAttr(out)


def ops_from_module(module: b.ModuleOp) -> list[dict]:
    """The `npu.ops` markers of a lowered module as plain dictionaries ([] when absent)."""
    attr = module.attributes.get(OPS_ATTR)
    return attr_to_json(attr) if isinstance(attr, b.ArrayAttr) else []


__all__ = ["LAYOUT_ATTR", "OPS_ATTR", "attr_to_json", "json_to_attr", "layout_from_attr", "layout_from_module",
           "layout_to_attr", "ops_from_module", "ops_to_attr"]
