"""infer.dialects: the IR levels of infer (graph -> tile -> npu).

`infer_dialects()` lists every dialect infer defines, as (name, factory) pairs,
so drivers can register them lazily the way xDSL's multiverse does.
"""

from collections.abc import Callable

from xdsl.ir import Dialect


def _graph() -> Dialect:
    from infer.dialects.graph import Graph

    return Graph


def _npu() -> Dialect:
    from infer.dialects.npu import NPU

    return NPU


def _tile() -> Dialect:
    from infer.dialects.tile import Tile

    return Tile


def infer_dialects() -> dict[str, Callable[[], Dialect]]:
    """Name -> factory for every infer dialect (registered by infer-opt)."""
    return {"graph": _graph, "tile": _tile, "npu": _npu}
