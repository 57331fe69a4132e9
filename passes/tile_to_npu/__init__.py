"""`tile-to-npu`: lower a planned tile-level module to one `npu.program` (docs/codegen.md)."""

from infer.dialects.ir_io import LoweringError
from infer.passes.tile_to_npu.driver import TileToNpuPass, compute_layout

__all__ = ["LoweringError", "TileToNpuPass", "compute_layout"]
