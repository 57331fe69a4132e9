"""infer.passes: transformations between and within the IR levels.

`infer_passes()` maps every registered pass name (its `-p` spelling) to a
factory, the way xDSL's multiverse does, so `infer-opt -p NAME{opt=val}` and
Python pipelines find the same passes. Named pipelines are passes too: each
runs a fixed list of passes (see `infer.passes.pipelines`).
"""

from collections.abc import Callable

from xdsl.passes import ModulePass

# name -> "module:ClassName"; imported lazily so infer-opt starts fast.
_PASSES: dict[str, str] = {
    "graph-canonicalize": "infer.passes.graph_canonicalize:GraphCanonicalizePass",
    "graph-constant-fold": "infer.passes.graph_constant_fold:GraphConstantFoldPass",
    "graph-dce": "infer.passes.graph_dce:GraphDCEPass",
    "graph-shape-inference": "infer.passes.graph_shape_inference:GraphShapeInferencePass",
    "graph-fold-double-transpose": "infer.passes.graph_fold_double_transpose:GraphFoldDoubleTransposePass",
    "graph-fold-batch-norm": "infer.passes.graph_fold_batch_norm:GraphFoldBatchNormPass",
    "graph-fuse": "infer.passes.graph_fuse:GraphFusePass",
    "graph-subsample-strided-conv": "infer.passes.graph_subsample_strided_conv:GraphSubsampleStridedConvPass",
    "graph-optimize": "infer.passes.pipelines:GraphOptimizePass",
    "graph-prepare-tiling": "infer.passes.pipelines:GraphPrepareTilingPass",
    "lower-to-tile": "infer.passes.pipelines:LowerToTilePass",
    "graph-to-tile": "infer.passes.graph_to_tile:GraphToTilePass",
    "tile-plan-memory": "infer.passes.tile_memory_plan:TilePlanMemoryPass",
    "tile-to-npu": "infer.passes.tile_to_npu:TileToNpuPass",
    "compile-npu": "infer.passes.pipelines_npu:CompileNpuPass",
}


def _loader(spec: str) -> Callable[[], type[ModulePass]]:
    def load() -> type[ModulePass]:
        import importlib

        module, cls = spec.split(":")
        return getattr(importlib.import_module(module), cls)

    return load


def infer_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    return {name: _loader(spec) for name, spec in _PASSES.items()}
