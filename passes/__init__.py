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

import dataclasses
import difflib
import functools
import importlib
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import ArgSpec, parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError

PLUGIN_GROUP = "infer.passes"

# name -> "module:ClassName"; imported lazily so infer-opt starts fast.
_PASSES: dict[str, str] = {
    "graph-canonicalize": "infer.passes.graph_canonicalize:GraphCanonicalizePass",
    "graph-constant-fold": "infer.passes.graph_constant_fold:GraphConstantFoldPass",
    "graph-dce": "infer.passes.graph_dce:GraphDCEPass",
    "graph-cse": "infer.passes.graph_cse:GraphCSEPass",
    "graph-shape-inference": "infer.passes.graph_shape_inference:GraphShapeInferencePass",
    "graph-fold-double-transpose": "infer.passes.graph_fold_double_transpose:GraphFoldDoubleTransposePass",
    "graph-fold-batch-norm": "infer.passes.graph_fold_batch_norm:GraphFoldBatchNormPass",
    "graph-raise-activations": "infer.passes.graph_raise_activations:GraphRaiseActivationsPass",
    "graph-raise-rms-norm": "infer.passes.graph_raise_rms_norm:GraphRaiseRmsNormPass",
    "graph-raise-rotary": "infer.passes.graph_raise_rotary:GraphRaiseRotaryPass",
    "graph-raise-attention": "infer.passes.graph_raise_attention:GraphRaiseAttentionPass",
    "graph-raise-linear": "infer.passes.graph_raise_linear:GraphRaiseLinearPass",
    "graph-fuse": "infer.passes.graph_fuse:GraphFusePass",
    "graph-defer-paged-query": "infer.passes.graph_defer_paged_query:GraphDeferPagedQueryPass",
    "graph-fuse-norm-prologue": "infer.passes.graph_fuse_prologue:GraphFuseNormProloguePass",
    "graph-fuse-activation-prologue": "infer.passes.graph_fuse_activation_prologue:GraphFuseActivationProloguePass",
    "graph-subsample-strided-conv": "infer.passes.graph_subsample_strided_conv:GraphSubsampleStridedConvPass",
    "graph-merge-summed-convs": "infer.passes.graph_merge_summed_convs:GraphMergeSummedConvsPass",
    "graph-lower-runtime-conv": "infer.passes.graph_lower_runtime_conv:GraphLowerRuntimeConvPass",
    "graph-quantize": "infer.passes.quantize.insert:GraphQuantizePass",
    "graph-quantize-kernels": "infer.passes.quantize.kernels:GraphQuantizeKernelsPass",
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


# --------------------------------------------------------------------------- -p specs

class PassSpecError(ValueError):
    """A pass pipeline spec that cannot be built: the message is one line naming the pass
    or option at fault and, for an option, the valid ones."""


def dashed(field_name: str) -> str:
    return field_name.replace("_", "-")


def type_name(hint: object) -> str:
    """int -> int, str -> string, tuple[str, ...] -> string,string,..., int | None -> int, optional."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        inner = " | ".join(type_name(a) for a in args)
        return f"{inner}, optional" if len(args) < len(typing.get_args(hint)) else inner
    if origin is tuple:
        args = typing.get_args(hint)
        base = type_name(args[0]) if args else "value"
        return f"{base},{base},..."
    if isinstance(hint, type):
        return {"str": "string"}.get(hint.__name__, hint.__name__)
    return str(hint)


def format_value(value: object) -> str:
    """A default as it is written in a spec."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):  # a list option: comma-separated, strings unquoted when they can be
        return ",".join(v if isinstance(v, str) and v.replace("-", "").replace("_", "").isalnum()
                        else format_value(v) for v in value) or '""'
    return str(value)


def option_fields(cls: type) -> list[dataclasses.Field]:
    """The dataclass fields of a pass that are its `-p` options."""
    if not dataclasses.is_dataclass(cls):
        return []
    return [f for f in dataclasses.fields(cls) if f.init and f.name != "name"]


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def parse_spec(spec: str) -> list[ArgSpec]:
    try:
        return list(parse_pipeline(spec))
    except ArgSpecParseError as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise PassSpecError(f"malformed pass pipeline '{spec}': {lines[-1] if lines else e}") from None


def _options_help(name: str, cls: type[ModulePass]) -> str:
    fields = option_fields(cls)
    if not fields:
        return f"'{name}' takes no options"
    hints = _hints(cls)
    parts = []
    for f in fields:
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        parts.append(f"{dashed(f.name)}=<{type_name(hints.get(f.name, f.type))}>"
                     + ("" if default is None else f" (default {format_value(default)})"))
    return f"the options of '{name}' are: " + ", ".join(parts) + f" (infer-opt --help-pass {name})"


def instantiate(spec: ArgSpec, cls: type[ModulePass]) -> ModulePass:
    """`cls` with the spec's options; a bad option names itself and lists the valid ones."""
    name = spec.name
    params = spec.normalize_parameter_names().parameters
    valid = {f.name for f in option_fields(cls)}
    for key in params:
        if key not in valid:
            close = difflib.get_close_matches(key, sorted(valid), n=1)
            hint = f" (did you mean '{dashed(close[0])}'?)" if close else ""
            raise PassSpecError(f"pass '{name}' has no option '{dashed(key)}'{hint}; {_options_help(name, cls)}")
    try:
        return cls.from_spec(spec)
    except (ValueError, TypeError) as whole:
        # Find the option at fault: try each given option alone.
        hints = _hints(cls)
        for key, value in spec.parameters.items():
            try:
                cls.from_spec(ArgSpec(name, {key: value}))
            except (ValueError, TypeError) as e:
                if "requires argument" in str(e):
                    continue
                field_name = key.replace("-", "_")
                shown = ",".join(str(v) for v in value) if value else "(no value)"
                expects = type_name(hints[field_name]) if field_name in hints else "another value"
                raise PassSpecError(f"pass '{name}': option '{dashed(field_name)}' expects <{expects}>, got "
                                    f"'{shown}'; {_options_help(name, cls)}") from None
        raise PassSpecError(f"pass '{name}': {_first_line(whole)}; {_options_help(name, cls)}") from None


def _hints(cls: type) -> dict[str, object]:
    try:
        return typing.get_type_hints(cls)
    except Exception:
        return {}


def build_pipeline(spec: str, available: dict[str, Callable[[], type[ModulePass]]] | None = None) -> list[ModulePass]:
    """The passes of a `-p` spec ("a,b{opt=1 other=x}") with their options, looked up in
    `available` (default: `infer_passes()`); a `PassSpecError` names what is wrong."""
    if available is None:
        available = infer_passes()
    passes = []
    for arg in parse_spec(spec):
        factory = available.get(arg.name)
        if factory is None:
            close = difflib.get_close_matches(arg.name, sorted(available), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise PassSpecError(f"unknown pass '{arg.name}'{hint}; `infer-opt --list-passes` lists them")
        passes.append(instantiate(arg, factory()))
    return passes
