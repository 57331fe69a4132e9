"""The `tile-to-npu` pass: target, entry function, DRAM layout, and compiling again with less
overlap the kernels that ran out of semaphores.

    tile-to-npu{target=edge entry=main pipeline=true}

Input: a tile-level module after `tile-plan-memory` (offsets on every `tile.alloc`,
`tile.offset` on every `tile.weight`, module attributes `tile.target`, `tile.arena_bytes`,
`tile.weights_bytes`). Output: the function is replaced by an `npu.program` and the module
gets the DRAM layout contract `npu.layout` (passes/npu_layout.py, docs/codegen.md) and the op
markers `npu.ops`.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from infer.dialects import tile as t
from infer.dialects.dtypes import num_elements
from infer.dialects.ir_io import LoweringError
from infer.passes.npu_layout import LAYOUT_ATTR, OPS_ATTR, NpuLayout, Region, align_up, ops_to_attr
from infer.passes.tile_to_npu.codegen import _Codegen, MAX_DEGRADE
from infer.passes.tile_to_npu.semaphores import OutOfSemaphores
from infer.passes.tile_to_npu.common import argument_attributes, fail, is_output_flag, memref_info
from infer.target.hw import HardwareConfig, load_config


@dataclass(frozen=True)
class TileToNpuPass(ModulePass):
    """Lower a planned tile-level module to an npu.program (+ the npu.layout DRAM contract)."""

    name = "tile-to-npu"

    target: str = ""
    entry: str = ""
    pipeline: bool = True  # software-pipeline double-buffered loops (false: for comparison)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = _target(op, self.target)
        fn = _entry(op, self.entry)
        layout = compute_layout(op, fn, hw)
        # A loop nest that needs more semaphores than the target has is compiled again with
        # less overlap: first without double buffering on loops that contain another
        # double-buffered loop, then without software pipelining, then single-buffered.
        degrade: dict[Operation, int] = {}
        while True:
            cg = _Codegen(hw, layout, fn, self.pipeline, degrade)
            try:
                prog = cg.run()
                break
            except OutOfSemaphores as e:
                worse = [o for o in e.items if degrade.get(o, 0) < MAX_DEGRADE]
                if not worse:
                    raise LoweringError(str(e)) from None
                for o in worse:
                    degrade[o] = degrade.get(o, 0) + 1
        from infer.dialects.npu import ProgramOp

        program = ProgramOp.from_program(prog)
        op.attributes[LAYOUT_ATTR] = layout.to_attr()
        op.attributes[OPS_ATTR] = ops_to_attr(cg.ops)
        fn.detach()
        fn.erase()
        op.body.block.add_op(program)


def _target(module: ModuleOp, name: str) -> HardwareConfig:
    attr = module.attributes.get(t.TARGET_ATTR)
    current = attr.data if isinstance(attr, StringAttr) else None
    if name and current and name != current:
        raise LoweringError(f"tile-to-npu: target={name} but the module is for "
                            f"{t.TARGET_ATTR} = \"{current}\"")
    name = name or current or ""
    if not name:
        raise LoweringError("tile-to-npu: no target: pass target=edge|server or set tile.target")
    return load_config(name)


def _entry(module: ModuleOp, entry: str) -> func.FuncOp:
    fns = [o for o in module.body.block.ops if isinstance(o, func.FuncOp) and not o.is_declaration]
    if entry:
        fns = [f for f in fns if f.sym_name.data == entry]
    elif len(fns) > 1:
        fns = [f for f in fns if f.sym_name.data == "main"] or fns
    if len(fns) != 1:
        raise LoweringError(f"tile-to-npu: expected one function{' @' + entry if entry else ''} "
                            f"to lower, found {len(fns)}")
    return fns[0]


def compute_layout(module: ModuleOp, fn: func.FuncOp, hw: HardwareConfig) -> NpuLayout:
    align = hw.dram.burst_bytes
    for key in ("tile.arena_bytes", "tile.weights_bytes"):
        if not isinstance(module.attributes.get(key), IntegerAttr):
            raise LoweringError(f"tile-to-npu: the module has no {key}: run tile-plan-memory first")
    arena = module.attributes["tile.arena_bytes"].value.data  # type: ignore[union-attr]
    wbytes = module.attributes["tile.weights_bytes"].value.data  # type: ignore[union-attr]
    target = module.attributes.get(t.TARGET_ATTR)
    layout = NpuLayout(target.data if isinstance(target, StringAttr) else hw.name,
                       fn.sym_name.data, align)
    attrs = argument_attributes(fn)
    top = 0
    for i, ty in enumerate(fn.function_type.inputs.data):
        if not isinstance(ty, MemRefType):
            raise fail(fn, f"argument #{i} is {ty}, not a memref (not a tile-level function)")
        shape, elem, esize = memref_info(ty)
        a = attrs[i] if i < len(attrs) else {}
        nm = a.get("graph.name")
        is_out = is_output_flag(a.get("tile.output"))
        r = Region(nm.data if isinstance(nm, StringAttr) else f"arg{i}", top, shape, elem, i, is_out)
        layout.args.append(r)
        top = align_up(top + num_elements(shape) * esize, align)
    layout.weights_offset = top
    layout.weights_bytes = wbytes
    seen: dict[str, Region] = {}
    for w in fn.walk():
        if isinstance(w, t.WeightOp):
            off = w.attributes.get("tile.offset")
            if not isinstance(off, IntegerAttr):
                raise fail(w, "the weight has no tile.offset: run tile-plan-memory first")
            shape, elem, esize = memref_info(w.buffer.type)  # type: ignore[arg-type]
            if w.weight_key not in seen:
                seen[w.weight_key] = Region(w.weight_key, top + off.value.data, shape, elem)
                layout.weights.append(seen[w.weight_key])
    top = align_up(top + wbytes, align)
    layout.arena_offset = top
    layout.arena_bytes = arena
    layout.dram_bytes = max(align_up(top + arena, align), align)
    return layout
