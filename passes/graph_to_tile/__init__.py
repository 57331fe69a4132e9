"""`graph-to-tile`: lower graph-level functions to the tile dialect (see driver.py)."""

from infer.passes.graph_to_tile.driver import GraphToTilePass

__all__ = ["GraphToTilePass"]
