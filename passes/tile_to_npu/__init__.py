"""`tile-to-npu`: lower a planned tile-level module to one `npu.program` (docs/codegen.md).

Stages, one module each: driver (the pass, DRAM layout, compiling kernels again with less
overlap), codegen (IR walk, hardware loops, emission), selection (tile op -> instructions),
addressing (affine addresses, address registers), dependencies (hazards, waits, signals),
rotation (double buffering, software pipelining), semaphores (virtual -> physical), markers
(op markers), program_tree (the emitted code and its flattening).
"""

from infer.dialects.ir_io import LoweringError
from infer.passes.tile_to_npu.driver import TileToNpuPass, compute_layout

__all__ = ["LoweringError", "TileToNpuPass", "compute_layout"]
