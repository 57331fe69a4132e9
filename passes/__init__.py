"""infer.passes: transformations between and within the IR levels.

`infer_passes()` maps every registered pass name (its `-p` spelling) to a
factory, the way xDSL's multiverse does, so `infer-opt -p NAME{opt=val}`,
`infer compile --graph-passes`, `compile-npu`'s stages and Python pipelines
(`infer.passes.testing`) all find the same passes. Named pipelines are passes
too: each runs a fixed list of passes (see `infer.passes.pipelines`).

Passes written outside the tree (plugins) join the registry through the Python
entry point group `infer.passes`: a distribution declares

    [project.entry-points."infer.passes"]
    my-pass = "my_package.passes:MyPass"

(the entry point's name is the pass's `-p` name, its value the `ModulePass`
class), and once it is installed every tool sees `my-pass`
(docs/writing-a-pass.md, "A pass written outside the tree"). Plugin modules are
imported only when their pass is used. A plugin that reuses a name of infer's
own passes or of another plugin, names a class that does not exist, or a class
that is not a `ModulePass` whose `name` is the entry point's name, is a
`PluginError` naming the distribution.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.passes import ModulePass

PLUGIN_GROUP = "infer.passes"

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


class PluginError(Exception):
    """A pass plugin (entry point in the `infer.passes` group) that cannot be used:
    the message is one line naming the distribution and the entry point."""


@dataclass(frozen=True)
class PassEntry:
    """One registered pass: its `-p` name, where it comes from ("infer" for the
    passes in this package, else the plugin's distribution name) and the
    `module:Class` it loads."""

    name: str
    origin: str
    target: str
    load: Callable[[], type[ModulePass]]


def _builtin_loader(spec: str) -> Callable[[], type[ModulePass]]:
    def load() -> type[ModulePass]:
        module, cls = spec.split(":")
        return getattr(importlib.import_module(module), cls)

    return load


def _plugin_loader(ep, origin: str) -> Callable[[], type[ModulePass]]:
    where = f"pass plugin '{ep.name}' (entry point '{ep.name} = {ep.value}' of distribution '{origin}')"

    @functools.cache
    def load() -> type[ModulePass]:
        try:
            cls = ep.load()
        except Exception as e:  # an import error of someone else's package: report, don't crash
            detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise PluginError(f"{where} cannot be loaded: {type(e).__name__}: {detail}") from None
        if not (isinstance(cls, type) and issubclass(cls, ModulePass)):
            raise PluginError(f"{where} is not a ModulePass subclass (got {cls!r})")
        if getattr(cls, "name", None) != ep.name:
            raise PluginError(f"{where}: the class's name is '{getattr(cls, 'name', None)}', "
                              f"expected '{ep.name}' (the entry point name is the -p name)")
        return cls

    return load


@functools.cache
def _plugin_entries() -> tuple[PassEntry, ...]:
    """Entry points of the `infer.passes` group, in a stable order. Scanned once per
    process: installing a plugin takes effect in the next process, as with xDSL."""
    from importlib.metadata import entry_points

    found = []
    for ep in entry_points(group=PLUGIN_GROUP):
        origin = ep.dist.name if ep.dist is not None else "<unknown distribution>"
        found.append(PassEntry(ep.name, origin, ep.value, _plugin_loader(ep, origin)))
    return tuple(sorted(found, key=lambda e: (e.name, e.origin)))


def registered_passes() -> dict[str, PassEntry]:
    """Every pass: infer's own (in `_PASSES` order), then plugins (by name)."""
    entries = {name: PassEntry(name, "infer", spec, _builtin_loader(spec)) for name, spec in _PASSES.items()}
    for e in _plugin_entries():
        if e.name in entries:
            other = entries[e.name]
            owner = "infer's own pass" if other.origin == "infer" else f"the pass of distribution '{other.origin}'"
            raise PluginError(f"pass plugin '{e.name}' of distribution '{e.origin}' ({e.target}) has the "
                              f"name of {owner} ({other.target}); rename one of them")
        entries[e.name] = e
    return entries


def infer_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Pass name -> factory returning the pass class: infer's passes and plugins."""
    return {name: e.load for name, e in registered_passes().items()}
