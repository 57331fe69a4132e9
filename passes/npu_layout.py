"""Transitional re-export: the DRAM layout contract moved to `infer.target.layout` (the data:
`DramLayout`, `DramRegion`, `align_up`) and `infer.dialects.npu_attrs` (its attribute form:
`LAYOUT_ATTR`, `layout_to_attr`, `layout_from_module`, `OPS_ATTR`, `ops_to_attr`,
`ops_from_module`).

Only passes/tile_to_npu.py still imports this module (its call sites are being split into
stages); once they construct `DramLayout`/`DramRegion` and call `layout_to_attr(layout)`,
delete this file. `NpuLayout` and `Region` are the old names of the same classes, kept only
for those call sites.
"""

from __future__ import annotations

from infer.dialects.npu_attrs import (
    LAYOUT_ATTR,
    OPS_ATTR,
    layout_from_attr,
    layout_from_module,
    layout_to_attr,
    ops_from_module,
    ops_to_attr,
)
from infer.target.layout import DramLayout, DramRegion, align_up


class NpuLayout(DramLayout):
    """`DramLayout` with the attribute helpers as methods, as tile_to_npu.py calls them."""

    def to_attr(self):
        return layout_to_attr(self)

    @staticmethod
    def from_attr(attr) -> DramLayout:
        return layout_from_attr(attr)

    @staticmethod
    def from_module(module) -> DramLayout:
        return layout_from_module(module)


Region = DramRegion  # the old name, for tile_to_npu.py's call sites only

__all__ = ["LAYOUT_ATTR", "OPS_ATTR", "DramLayout", "DramRegion", "NpuLayout", "Region", "align_up",
           "layout_from_module", "layout_to_attr", "ops_from_module", "ops_to_attr"]
