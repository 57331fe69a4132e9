"""The `tile-to-npu` pass: target, entry function, DRAM layout, and compiling again with less
overlap the kernels that ran out of semaphores.

    tile-to-npu{target=edge entry=main pipeline=true}

Input: a tile-level module after `tile-plan-memory` (offsets on every `tile.alloc`,
`tile.offset` on every `tile.weight`, module attributes `tile.target`, `tile.arena_bytes`,
`tile.weights_bytes`). Output: the function is replaced by an `npu.program` and the module
gets the DRAM layout contract `npu.layout` (target/layout.py, docs/codegen.md) and the op
markers `npu.ops`.

Several entry points of one module (a decoder's prefill chunk and decode step) share one
weight region and keep some arguments (the KV-cache pools) at one address in every entry:
the compile driver then sets the module attribute `npu.placement` = {"args": {NAME: offset},
"weights_offset": N} before running this pass once per entry (`entry=`); `compute_layout`
puts each argument (outputs by `out:NAME`) at the given offset and the weight region at
`weights_offset` (both aligned; they must leave the arguments disjoint, which the driver's
joint placement does). Without the attribute the layout is the single-entry one.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, MemRefType, ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from infer.dialects import tile as t
from infer.dialects.dtypes import num_elements
from infer.dialects.ir_io import LoweringError
from infer.dialects.npu_attrs import LAYOUT_ATTR, OPS_ATTR, layout_to_attr, ops_to_attr
from infer.passes.tile_to_npu.addressing import affine_cache
from infer.passes.tile_to_npu.codegen import CodeGenerator
from infer.passes.tile_to_npu.dependencies import loops_to_peel
from infer.passes.tile_to_npu.hoisted import sink_hoisted
from infer.passes.tile_to_npu.kernels import KernelByKernel, NotDecided
from infer.passes.tile_to_npu.common import argument_attributes, fail, is_output_flag, memref_info
from infer.passes.tile_to_npu.rotation import DegradeLevel
from infer.passes.tile_to_npu.semaphores import OutOfSemaphores
from infer.target.asm import Program
from infer.target.hw import HardwareConfig, load_config
from infer.target.layout import DramLayout, DramRegion, align_up

PLACEMENT_ATTR = "npu.placement"


@dataclass(frozen=True)
class TileToNpuPass(ModulePass):
    """Lower a planned tile-level module to an npu.program (+ the npu.layout DRAM contract).

    Options:
      target: the hardware config ("edge", "server" or a TOML path); empty: the module's
        tile.target attribute.
      entry: the function to lower; empty: the only function, or @main among several.
      pipeline: software-pipeline double-buffered loops (false: for comparison).
    """

    name = "tile-to-npu"

    target: str = ""
    entry: str = ""
    pipeline: bool = True  # software-pipeline double-buffered loops (false: for comparison)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from infer.dialects.npu import ProgramOp

        with gc_paused():
            fn, program, layout, markers = self._compile(op)
            program_op = ProgramOp.from_program(program)

        op.attributes[LAYOUT_ATTR] = layout_to_attr(layout)
        op.attributes[OPS_ATTR] = ops_to_attr(markers)
        fn.detach()
        fn.erase()
        op.body.block.add_op(program_op)

    def lower(self, op: ModuleOp) -> tuple[Program, DramLayout, list[dict]]:
        """What `apply` puts into the module, as Python objects: the program, the DRAM layout
        and the op markers, the module left as it is. For the compile driver, which packages
        them: building ~45 k npu instruction ops for ResNet-50 only to read the program back
        from them cost ~1 s of its compile time."""
        with gc_paused():
            _, program, layout, markers = self._compile(op)
        return program, layout, markers

    def _compile(self, op: ModuleOp) -> tuple[func.FuncOp, Program, DramLayout, list[dict]]:
        hw = target_config(op, self.target)
        fn = entry_function(op, self.entry)
        layout = compute_layout(op, fn, hw)
        program, markers = compile_function(hw, layout, fn, self.pipeline)
        return fn, program, layout, markers


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: code generation allocates millions of small
    objects that all stay alive until the program is built (instructions, accesses, loops, the
    npu ops), and every collection the allocations trigger traverses them and the whole IR again
    for nothing (~20 % of tile-to-npu's CPU time on ResNet-50). After, what was allocated goes
    to the oldest generation (freeze + unfreeze), where the next full collection finds the
    cycles of a kernel taken back: else the first young collection would traverse millions of
    objects at once."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if enabled:
            gc.enable()


def compile_function(hw: HardwareConfig, layout: DramLayout, fn: func.FuncOp,
                     pipelining: bool) -> tuple[Program, list[dict]]:
    """The program and op markers of fn. A kernel (op-marker group) that needs more semaphores
    than the target has is compiled again with less overlap (rotation.DegradeLevel): first
    without double buffering on loops that contain another double-buffered loop, then without
    software pipelining, then single-buffered, then with one pair semaphore per engine pair for
    its straight-line instructions. The function is compiled kernel by kernel and
    only a kernel that did not fit is compiled again (kernels.py); where that cannot decide
    like the whole-function loop (`compile_function_again`), the loop decides. Where a kernel
    does not fit at the last level, the next kernel's prefetch that graph-to-tile moved into it
    goes back to its own kernel (hoisted.py: the one change this makes to fn) and the function
    is compiled again."""
    while True:
        peeled_loops = loops_to_peel(fn)  # (what does not depend on the degrade levels: once)
        try:
            try:
                return _compile_function(hw, layout, fn, pipelining, peeled_loops, True)
            except OutOfSemaphores:
                # a peeled first iteration's semaphores can be live in a later kernel, which then
                # fails at every degrade level of its own (MiniLM fp32 on server at sequence 32)
                return _compile_function(hw, layout, fn, pipelining, peeled_loops, False)
        except OutOfSemaphores as e:
            # the next kernel's prefetch graph-to-tile moved into a kernel that does not fit
            # goes back to its own kernel (or, none in the failing kernels, every such move),
            # and the function is compiled again (hoisted.py; each round puts back at least
            # one move, so this ends)
            if not sink_hoisted(fn.body.block, e.items):
                raise _with_fallbacks(e) from None


def _with_fallbacks(e: OutOfSemaphores) -> OutOfSemaphores:
    """e with the fallback overrides graph-to-tile gave the kernels that did not fit
    (`tile.semaphore_fallback`), named in its message for a user running the passes."""
    fallbacks = sorted({attr.data for op in e.items
                        if isinstance(attr := op.attributes.get(t.SEMAPHORE_FALLBACK_ATTR), StringAttr)})
    if not fallbacks:
        return e
    return OutOfSemaphores(f"{e}; graph-to-tile{{overrides=\"{','.join(fallbacks)}\"}} lowers the kernels that "
                           "did not fit with less overlap (infer compile does so itself)", e.items, fallbacks)


def _compile_function(hw: HardwareConfig, layout: DramLayout, fn: func.FuncOp, pipelining: bool,
                      peeled_loops: set, peel_first_rotating: bool) -> tuple[Program, list[dict]]:
    with affine_cache():
        try:
            return KernelByKernel(CodeGenerator(hw, layout, fn, pipelining, {}, peeled_loops,
                                                peel_first_rotating), pipelining).run()
        except NotDecided:
            return compile_function_again(hw, layout, fn, pipelining, peeled_loops, peel_first_rotating)


def compile_function_again(hw: HardwareConfig, layout: DramLayout, fn: func.FuncOp, pipelining: bool,
                           peeled_loops: set | None = None,
                           peel_first_rotating: bool = True) -> tuple[Program, list[dict]]:
    """The reference for compile_function: the whole function is compiled, and compiled again
    as long as kernels do not fit, every kernel that did not fit one degrade level lower in
    the next attempt (the levels are kept per top-level op). Raises OutOfSemaphores when a
    kernel does not fit at the last level."""
    degrade: dict[Operation, int] = {}
    peeled_loops = loops_to_peel(fn) if peeled_loops is None else peeled_loops
    with affine_cache():
        while True:
            try:
                return CodeGenerator(hw, layout, fn, pipelining, degrade, peeled_loops,
                                     peel_first_rotating).run()
            except OutOfSemaphores as e:
                worse = [o for o in e.items if degrade.get(o, 0) < DegradeLevel.SHARED_PAIR_SEMAPHORES]
                if not worse:
                    raise
                for o in worse:
                    degrade[o] = degrade.get(o, 0) + 1


def target_config(module: ModuleOp, name: str) -> HardwareConfig:
    attr = module.attributes.get(t.TARGET_ATTR)
    current = attr.data if isinstance(attr, StringAttr) else None
    if name and current and name != current:
        raise LoweringError(f"tile-to-npu: target={name} but the module is for "
                            f"{t.TARGET_ATTR} = \"{current}\"")
    name = name or current or ""
    if not name:
        raise LoweringError("tile-to-npu: no target: pass target=edge|server or set tile.target")
    return load_config(name)


def entry_function(module: ModuleOp, entry: str) -> func.FuncOp:
    fns = [o for o in module.body.block.ops if isinstance(o, func.FuncOp) and not o.is_declaration]
    if entry:
        fns = [f for f in fns if f.sym_name.data == entry]
    elif len(fns) > 1:
        fns = [f for f in fns if f.sym_name.data == "main"] or fns
    if len(fns) != 1:
        raise LoweringError(f"tile-to-npu: expected one function{' @' + entry if entry else ''} "
                            f"to lower, found {len(fns)}")
    return fns[0]


def compute_layout(module: ModuleOp, fn: func.FuncOp, hw: HardwareConfig) -> DramLayout:
    """The DRAM layout contract: arguments in order, then the weight region, then the arena,
    each aligned to the target's DRAM burst (docs/codegen.md)."""
    alignment = hw.dram.burst_bytes
    for key in ("tile.arena_bytes", "tile.weights_bytes"):
        if not isinstance(module.attributes.get(key), IntegerAttr):
            raise LoweringError(f"tile-to-npu: the module has no {key}: run tile-plan-memory first")
    arena_bytes = module.attributes["tile.arena_bytes"].value.data  # type: ignore[union-attr]
    weights_bytes = module.attributes["tile.weights_bytes"].value.data  # type: ignore[union-attr]
    target = module.attributes.get(t.TARGET_ATTR)
    layout = DramLayout(target.data if isinstance(target, StringAttr) else hw.name,
                       fn.sym_name.data, alignment)
    attributes = argument_attributes(fn)
    placement = _placement(module)
    end = 0
    for i, ty in enumerate(fn.function_type.inputs.data):
        if not isinstance(ty, MemRefType):
            raise fail(fn, f"argument #{i} is {ty}, not a memref (not a tile-level function)")
        shape, element, element_bytes = memref_info(ty)
        attrs = attributes[i] if i < len(attributes) else {}
        name = attrs.get("graph.name")
        arg_name = name.data if isinstance(name, StringAttr) else f"arg{i}"
        tied = attrs.get(t.ALIAS_ATTR)
        if isinstance(tied, IntegerAttr):  # written in place: the input's own region
            j = tied.value.data
            if not (0 <= j < i and not layout.args[j].output and layout.args[j].shape == shape
                    and layout.args[j].dtype == element):
                raise fail(fn, f"argument #{i}: {t.ALIAS_ATTR} = {j} is not an earlier input of its type")
            layout.args.append(DramRegion(arg_name, layout.args[j].offset, shape, element, i, True, j))
            continue
        output = is_output_flag(attrs.get("tile.output"))
        offset = end
        if placement is not None:
            key = ("out:" if output else "") + arg_name
            if key not in placement[0]:
                raise fail(fn, f"{PLACEMENT_ATTR} places no argument '{key}'")
            offset = placement[0][key]
        region = DramRegion(arg_name, offset, shape, element, i, output)
        bound = attrs.get(t.INDEX_BOUND_ATTR)
        if isinstance(bound, IntegerAttr) and not output:
            region.index_bound, region.index_wraps = bound.value.data, t.INDEX_WRAPS_ATTR in attrs
        lengths, table = attrs.get(t.LENGTH_BOUND_ATTR), attrs.get(t.BLOCK_TABLE_ATTR)
        if isinstance(lengths, IntegerAttr) and not output:
            region.length_bound = lengths.value.data
        if isinstance(table, DenseArrayBase) and not output:
            blocks, block_size, lens = table.get_values()
            region.block_table = (int(blocks), int(block_size), int(lens))
        layout.args.append(region)
        end = align_up(max(end, offset + num_elements(shape) * element_bytes), alignment)
    if placement is not None:
        if placement[1] < end or placement[1] % alignment:
            raise fail(fn, f"{PLACEMENT_ATTR}: weights_offset {placement[1]} overlaps the arguments (they end at "
                           f"{end}) or is not aligned to {alignment}")
        end = placement[1]
    layout.weights_offset = end
    layout.weights_bytes = weights_bytes
    seen: set[str] = set()
    for weight in fn.walk():
        if isinstance(weight, t.WeightOp):
            offset = weight.attributes.get("tile.offset")
            if not isinstance(offset, IntegerAttr):
                raise fail(weight, "the weight has no tile.offset: run tile-plan-memory first")
            shape, element, _ = memref_info(weight.buffer.type)  # type: ignore[arg-type]
            if weight.weight_key not in seen:
                seen.add(weight.weight_key)
                layout.weights.append(DramRegion(weight.weight_key, end + offset.value.data, shape,
                                             element))
    end = align_up(end + weights_bytes, alignment)
    layout.arena_offset = end
    layout.arena_bytes = arena_bytes
    layout.dram_bytes = max(align_up(end + arena_bytes, alignment), alignment)
    return layout


def _placement(module: ModuleOp) -> tuple[dict[str, int], int] | None:
    """The driver's joint placement of several entry points ({argument: offset}, weights offset),
    or None."""
    from infer.dialects.npu_attrs import attr_to_json

    attr = module.attributes.get(PLACEMENT_ATTR)
    if attr is None:
        return None
    d = attr_to_json(attr)
    if not isinstance(d, dict) or not isinstance(d.get("args"), dict) or not isinstance(d.get("weights_offset"), int):
        raise LoweringError(f"tile-to-npu: {PLACEMENT_ATTR} must be {{args: {{name: offset}}, weights_offset}}")
    return {str(k): int(v) for k, v in d["args"].items()}, int(d["weights_offset"])
