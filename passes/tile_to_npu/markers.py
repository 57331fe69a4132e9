"""Op markers (`npu.ops`): which instructions belong to which graph-level kernel, and which
graph-level values are final in DRAM when a kernel ends (docs/codegen.md, "Op markers").

Kernels are the groups of top-level ops graph-to-tile emits (its allocs, then its code); a
group is named by the `kernelN.` prefix of the weights it reads, otherwise by counting on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr
from xdsl.ir import Operation, SSAValue

from infer.dialects import tile as t
from infer.target.layout import DramLayout
from infer.passes.tile_to_npu.addressing import TileBuffer
from infer.passes.tile_to_npu.common import root_buffer
from infer.passes.tile_to_npu.program_tree import FlatInstruction

# the marker kind each instruction-emitting tile op contributes
_KIND_OF_OP = {
    t.MatmulOp: lambda op: "matmul",
    t.VectorOp: lambda op: op.op.data,
    t.DmaOp: lambda op: "dma",
    t.GatherRowsOp: lambda op: "gather",
    t.ScatterRowsOp: lambda op: "scatter",
    t.DequantOp: lambda op: "dequant",
}


@dataclass
class KernelGroup:
    """The top-level ops of one graph-level kernel, as far as the markers need them."""

    emitted: bool = False  # has an op of the group been emitted (a later alloc starts a new one)
    kernel_names: list[str] = field(default_factory=list)  # `kernelN` prefixes of weights read
    # the same, of the next kernel's weight prefetches emitted in this one (prefetch_hoist.py)
    names_for_next: list[str] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)  # matmul, dma, gather, vector op names
    layer_allocs: list[t.AllocOp] = field(default_factory=list)  # DRAM allocs with tile.layer
    written: list[SSAValue] = field(default_factory=list)  # buffers its DMAs write
    roofline: dict[str, int | str] = field(default_factory=dict)  # graph-to-tile's tile.roofline records, summed


@dataclass
class OpMarker:
    name: str
    kind: str
    start: int
    end: int
    group: int
    values: list[dict] = field(default_factory=list)
    roofline: dict[str, int | str] = field(default_factory=dict)  # macs, bytes, weight_bytes, predicted, class

    def to_dict(self) -> dict:
        out: dict = {"name": self.name, "kind": self.kind, "start": self.start, "end": self.end}
        out.update(self.roofline)
        if self.values:
            out["values"] = self.values
        return out


class KernelGroups:
    """Top-level ops gathered into kernel groups as the code generator meets them."""

    def __init__(self) -> None:
        self.groups: list[KernelGroup] = []
        self.ops_of_group: dict[int, list[Operation]] = {}

    @property
    def current(self) -> int:
        return len(self.groups) - 1

    def forget_after(self, count: int) -> None:
        """Forget the groups after the first `count` (kernels compiled again)."""
        for group in range(count, len(self.groups)):
            del self.ops_of_group[group]
        del self.groups[count:]

    def add_top_level_op(self, op: Operation) -> None:
        """A tile.alloc after instructions were emitted starts a new group: graph-to-tile emits
        each kernel as its allocs followed by its code."""
        if not self.groups or (isinstance(op, t.AllocOp) and self.groups[-1].emitted):
            before = self.groups[-1].names_for_next if self.groups else []
            self.groups.append(KernelGroup(kernel_names=list(before)))
        group = self.groups[-1]
        self.ops_of_group.setdefault(self.current, []).append(op)
        if isinstance(op, t.AllocOp) and isinstance(op.attributes.get(t.LAYER_ATTR), IntegerAttr):
            group.layer_allocs.append(op)  # graph-to-tile: holds the result of graph op #tile.layer
        if isinstance(op, (t.AllocOp, t.ViewOp, t.WeightOp)):
            return
        group.emitted = True
        record = op.attributes.get(t.ROOFLINE_ATTR)
        if isinstance(record, DictionaryAttr):
            _add_record(group.roofline, {k: v.value.data if isinstance(v, IntegerAttr) else v.data
                                         for k, v in record.data.items() if isinstance(v, IntegerAttr | StringAttr)})
        names = (group.names_for_next if t.PREFETCH_FOR_NEXT_ATTR in op.attributes
                 else [] if t.PREFETCH_FOR_LATER_ATTR in op.attributes else group.kernel_names)
        for inner in op.walk():
            if isinstance(inner, t.DmaOp) and root_buffer(inner.dst) not in group.written:
                group.written.append(root_buffer(inner.dst))
            for operand in inner.operands:
                weight = root_buffer(operand).owner
                if isinstance(weight, t.WeightOp):
                    name = weight.weight_key.split(".")[0]
                    if name.startswith("kernel") and name[6:].isdigit() and name not in names:
                        names.append(name)
            kind = _KIND_OF_OP.get(type(inner))
            if kind is not None:
                group.kinds.add(kind(inner))


def op_markers(program: list[FlatInstruction], kernel_groups: KernelGroups,
               buffers: dict[SSAValue, TileBuffer], layout: DramLayout,
               fn: func.FuncOp) -> list[dict]:
    """[{name, kind, start, end[, macs, bytes, weight_bytes, predicted, class][, values]}]: one per
    graph-level kernel, in program order, covering the whole program; `macs`/`bytes`/
    `weight_bytes` are graph-to-tile's algorithmic roofline record of the kernel
    (`tile.roofline`, summed over its groups), `predicted` the cost model's cycles, `class` the
    kernel class. `values` lists the graph-level values whose DRAM bytes are
    final when the marker ends (for the per-layer check): the buffers graph-to-tile tagged
    `tile.layer` ({layer, offset, shape, dtype}) and the output arguments ({output, offset,
    shape, dtype}), each at the marker of the last group that writes it."""
    groups = kernel_groups.groups
    values = _values_by_group(groups, buffers, layout, fn)
    markers: list[OpMarker] = []
    for i, inst in enumerate(program):
        if markers and inst.group <= markers[-1].group:  # groups come in order
            markers[-1].end = i + 1
            continue
        kinds = groups[inst.group].kinds if inst.group < len(groups) else set()
        kind = "matmul" if "matmul" in kinds else ("+".join(sorted(kinds - {"dma", "copy"}))
                                                   or ("copy" if "copy" in kinds else "dma"))
        markers.append(OpMarker("", kind, i, i + 1, inst.group))
    # a group without instructions hands its values to the marker before it
    ordered_values = sorted(values.items())
    for marker, following in zip(markers, [*markers[1:], None], strict=True):
        end_group = following.group if following is not None else len(groups)
        marker.values = [v for g, vs in ordered_values if marker.group <= g < end_group for v in vs]
        for group in groups[marker.group:end_group]:
            _add_record(marker.roofline, group.roofline)
    _name_markers(markers, groups)
    merged: list[OpMarker] = []
    for marker in markers:  # a kernel's prologue group (e.g. padding) takes the kernel's name
        if merged and merged[-1].name == marker.name:
            into = merged[-1]
            into.end = marker.end
            if marker.kind == "matmul" or into.kind in ("dma", "copy"):
                into.kind = marker.kind
            into.values = into.values + marker.values
            _add_record(into.roofline, marker.roofline)
        else:
            merged.append(marker)
    return [marker.to_dict() for marker in merged]


def _add_record(into: dict[str, int | str], record: dict[str, int | str]) -> None:
    """Sum the numbers of a roofline record into another (a string, the class, is kept)."""
    for key, value in record.items():
        if isinstance(value, str):
            into.setdefault(key, value)
        else:
            into[key] = int(into.get(key, 0)) + value


def _values_by_group(groups: list[KernelGroup], buffers: dict[SSAValue, TileBuffer],
                     layout: DramLayout, fn: func.FuncOp) -> dict[int, list[dict]]:
    """group -> the graph-level values final at its end (at the last group writing each)."""
    last_write: dict[SSAValue, int] = {}
    for g, group in enumerate(groups):
        for buffer in group.written:
            last_write[buffer] = g
    values: dict[int, list[dict]] = {}
    for g, group in enumerate(groups):
        for alloc in group.layer_allocs:
            buffer = buffers.get(alloc.buffer)
            if buffer is not None and buffer.space == "dram":
                values.setdefault(last_write.get(alloc.buffer, g), []).append(
                    {"layer": alloc.attributes[t.LAYER_ATTR].value.data,  # type: ignore[union-attr]
                     "offset": buffer.base, "shape": list(buffer.shape), "dtype": buffer.element})
    outputs = [region for region in layout.args if region.output]
    for j, region in enumerate(outputs):
        arg = fn.body.block.args[region.index]
        if arg in last_write:
            values.setdefault(last_write[arg], []).append(
                {"output": j, "offset": region.offset, "shape": list(region.shape),
                 "dtype": region.dtype})
    return values


def _name_markers(markers: list[OpMarker], groups: list[KernelGroup]) -> None:
    """The kernelN prefix of the weights read, else counting on; when graph-to-tile tagged the
    values, a group completing no value (e.g. a pool's padding copy) leaves its kernel open and
    the next unnamed group continues it instead of counting on."""
    tagged = any(group.layer_allocs for group in groups)
    previous = -1
    closed = True
    for marker in markers:
        names = groups[marker.group].kernel_names if marker.group < len(groups) else []
        if names:
            marker.name = names[0]
            previous = int(marker.name[6:])
        else:
            if closed or not tagged:
                previous += 1
            marker.name = f"kernel{previous}"
        closed = bool(marker.values)
