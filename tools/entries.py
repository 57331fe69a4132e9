"""Several entry points of one module in one artifact (the compile driver's multi-entry path).

A decoder imported for paged KV decoding has `@prefill_chunk` and `@decode` (docs/paged-kv.md):
two programs that must read ONE copy of the weights and the same KV-cache pools, resident in
device DRAM across calls. The driver therefore lowers every selected function of the module
together down to the planned tile level (graph-to-tile lowers each function; tile-plan-memory
gives each distinct weight one offset in a module-wide weight region and sizes the activation
arena for the largest function), then runs tile-to-npu once per entry on a copy of that module,
with a joint placement of the arguments (`npu.placement`, passes/tile_to_npu/driver.py):

- an argument that several entries have with the same name, shape and dtype (a KV pool) gets
  one address, the same in every entry, at the start of DRAM;
- every other argument is placed after those, per entry (the entries' private arguments
  overlap: one entry runs at a time);
- an output that is an alias of an input (`tile.alias_of` on the output argument, written by
  graph-to-tile for results updated in place) is placed at its input's address;
- the weight region starts after the largest entry's arguments, so it has one address for all.

`select_entries` picks the functions (`--entry`, default all), `joint_placement` computes the
placement, `lower_entries` returns each entry's (program, layout, ops, aliases).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr

ALIAS_ATTR = "tile.alias_of"
"""On an output argument of a tile-level function: the position of the input argument whose
buffer it is (graph-to-tile writes it for results updated in place; infer.dialects.tile)."""


class EntryError(Exception):
    """A requested entry point the module does not have (one line)."""


def share_identical_weights(module: ModuleOp) -> int:
    """Point every `tile.weight` whose array equals another weight's (same dtype, shape and
    bytes) at one name, so the weight region holds it once: graph-to-tile derives the
    constants a kernel reads (bf16 hi/lo planes of an fp32 weight, packed quantized planes) per
    kernel, i.e. once per function that uses the weight. Returns how many names were merged."""
    import hashlib

    import numpy as np
    from xdsl.dialects.builtin import SymbolRefAttr

    from infer.dialects.tile import WeightOp
    from infer.dialects.weights import weights_of

    store = weights_of(module)
    ops = [op for op in module.walk() if isinstance(op, WeightOp)]
    names = sorted({op.weight_key for op in ops})
    by_kind: dict[tuple, list[str]] = {}
    for name in names:
        a = store.get(name)
        by_kind.setdefault((np.asarray(a).dtype.str, np.shape(a)), []).append(name)
    canonical: dict[str, str] = {}
    for group in by_kind.values():
        if len(group) < 2:
            continue
        first: dict[str, str] = {}
        for name in group:
            digest = hashlib.sha256(np.ascontiguousarray(store.get(name)).tobytes()).hexdigest()
            canonical[name] = first.setdefault(digest, name)
    merged = 0
    for op in ops:
        target = canonical.get(op.weight_key, op.weight_key)
        if target != op.weight_key:
            op.properties["name"] = SymbolRefAttr(target)
            merged += 1
    return merged


def function_names(module: ModuleOp) -> list[str]:
    return [op.sym_name.data for op in module.body.block.ops if isinstance(op, func.FuncOp) and not op.is_declaration]


def select_entries(module: ModuleOp, entries: str | Sequence[str] | None) -> list[str]:
    """The functions to compile: the ones asked for (checked), or by default @main when the module
    has it, else every function."""
    names = function_names(module)
    if entries is None:
        return ["main"] if "main" in names or not names else names
    asked = [entries] if isinstance(entries, str) else list(entries)
    missing = [e for e in asked if e not in names]
    if missing:
        raise EntryError(f"the module has no function @{missing[0]} (its functions: "
                         f"{', '.join('@' + n for n in names) or 'none'})")
    if len(set(asked)) != len(asked):
        raise EntryError(f"entry points named twice: {', '.join(asked)}")
    return asked


def keep_functions(module: ModuleOp, keep: Sequence[str]) -> None:
    """Drop the functions of `module` that are not compiled (in place)."""
    for op in list(module.body.block.ops):
        if isinstance(op, func.FuncOp) and op.sym_name.data not in keep:
            op.detach()
            op.erase()


def _arguments(fn: func.FuncOp) -> list[tuple[str, int, tuple]]:
    """(placement key, bytes, identity) of each argument of a tile-level function: the key is
    its name, `out:NAME` for outputs; the identity (key, shape, dtype) says which arguments of
    different entries are the same buffer."""
    from infer.dialects.dtypes import num_elements
    from infer.passes.tile_to_npu.common import argument_attributes, is_output_flag, memref_info

    attributes = argument_attributes(fn)
    out = []
    for i, ty in enumerate(fn.function_type.inputs.data):
        shape, element, element_bytes = memref_info(ty)
        attrs = attributes[i] if i < len(attributes) else {}
        name = attrs.get("graph.name")
        key = ("out:" if is_output_flag(attrs.get("tile.output")) else "") + (
            name.data if isinstance(name, StringAttr) else f"arg{i}")
        out.append((key, num_elements(shape) * element_bytes, (key, tuple(shape), str(element))))
    return out


def function_aliases(fn: func.FuncOp) -> dict[str, str]:
    """{output name: input name} of a tile-level function: its output arguments that graph-to-tile
    marked `tile.alias_of = <input position>` (results written in place: the output IS that
    input's buffer); {} when it has none."""
    from xdsl.dialects.builtin import IntegerAttr

    from infer.passes.tile_to_npu.common import argument_attributes

    attributes = argument_attributes(fn)

    def name(i: int) -> str:
        n = attributes[i].get("graph.name") if i < len(attributes) else None
        return n.data if isinstance(n, StringAttr) else f"arg{i}"

    return {name(i): name(int(a.value.data)) for i, attrs in enumerate(attributes)
            if isinstance(a := attrs.get(ALIAS_ATTR), IntegerAttr)}


def entry_aliases(module: ModuleOp, entry: str) -> dict[str, str]:
    """function_aliases of the tile-level function `entry` of `module` ({} if it has none)."""
    for op in module.body.block.ops:
        if isinstance(op, func.FuncOp) and op.sym_name.data == entry:
            return function_aliases(op)
    return {}


def joint_placement(functions: Sequence[func.FuncOp], alignment: int) -> tuple[dict[str, dict[str, int]], int]:
    """({entry: {argument key: offset}}, weights offset): see the module docstring."""
    from infer.target.layout import align_up

    args = {fn.sym_name.data: _arguments(fn) for fn in functions}
    aliases = {fn.sym_name.data: function_aliases(fn) for fn in functions}
    seen: dict[tuple, int] = {}
    for entry_args in args.values():
        for ident in {a[2] for a in entry_args}:
            seen[ident] = seen.get(ident, 0) + 1
    shared: dict[tuple, int] = {}
    end = 0
    for name, entry_args in args.items():  # shared buffers first, in order of first appearance
        for key, nbytes, ident in entry_args:
            aliased = key.startswith("out:") and key[4:] in aliases[name]
            if seen[ident] > 1 and ident not in shared and not aliased:
                shared[ident] = end
                end = align_up(end + nbytes, alignment)
    private_start, weights_offset = end, end
    placement: dict[str, dict[str, int]] = {}
    for name, entry_args in args.items():
        places: dict[str, int] = {}
        end = private_start
        for key, nbytes, ident in entry_args:
            if key.startswith("out:") and key[4:] in aliases[name]:
                continue
            if ident in shared:
                places[key] = shared[ident]
            else:
                places[key] = end
                end = align_up(end + nbytes, alignment)
        for out, src in aliases[name].items():  # outputs updated in place: their input's address
            if f"out:{out}" in {a[0] for a in entry_args}:
                places[f"out:{out}"] = places[src]
        placement[name] = places
        weights_offset = max(weights_offset, end)
    return placement, align_up(weights_offset, alignment)


def lower_entries(module: ModuleOp, entries: Sequence[str], target: str,
                  lowered_parts) -> list[tuple[str, bytes, dict[str, Any], list[dict[str, Any]], dict[str, str]]]:
    """Run tile-to-npu once per entry on a copy of the planned tile-level `module` with the
    joint placement; returns (entry, program bytes, layout JSON, op markers, aliases) each.
    `lowered_parts(tile_to_npu_pass, module)` lowers the module's entry to (program, layout, ops)."""
    from infer.dialects.npu_attrs import json_to_attr
    from infer.passes.tile_to_npu.driver import PLACEMENT_ATTR, TileToNpuPass
    from infer.target.hw import load_config

    functions = {op.sym_name.data: op for op in module.body.block.ops if isinstance(op, func.FuncOp)}
    placement, weights_offset = joint_placement([functions[e] for e in entries], load_config(target).dram.burst_bytes)
    out = []
    # `lowered_parts` reads the module (TileToNpuPass.lower builds no IR), so each entry runs on
    # `module` itself with its placement set for the call: copying the module per entry cost a
    # decoder's compile seconds (SmolLM2: two 26-28 K-op functions copied for each of its two
    # entries, 6.8 s of a 45 s compile)
    saved = module.attributes.get(PLACEMENT_ATTR)
    try:
        for entry in entries:
            aliases = function_aliases(functions[entry])
            module.attributes[PLACEMENT_ATTR] = json_to_attr({"args": placement[entry],
                                                              "weights_offset": weights_offset})
            program, layout, ops = lowered_parts(TileToNpuPass(target=target, entry=entry), module)
            out.append((entry, program, layout, ops, aliases))
    finally:
        if saved is None:
            module.attributes.pop(PLACEMENT_ATTR, None)
        else:
            module.attributes[PLACEMENT_ATTR] = saved
    return out


__all__ = ["ALIAS_ATTR", "EntryError", "entry_aliases", "function_names", "joint_placement", "keep_functions",
           "lower_entries", "select_entries", "share_identical_weights"]
