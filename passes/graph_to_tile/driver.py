"""The graph-to-tile driver: the pass, the function boundary, and the walk over each body.

Each func.func becomes a destination-passing function on DRAM memrefs (`FunctionLowering`):
its tensor arguments become DRAM memrefs, each result becomes one more DRAM memref argument
marked `tile.output` (model names stay in `graph.name`, default `output`/`output<i>`), and the
function returns nothing. A result produced by a lowered op is written straight into its
output argument; results that are inputs or constants get a copy. Only f32 tensors cross the
boundary, except integer model inputs (integer_inputs.py; an i64 argument with a non-gather
use becomes i32 with the arg attr `tile.host_dtype = "i64"`).

The body is lowered op by op in program order, each op one loop nest (`LoweringContext.stage`):
values computable at compile time (weights, constants and ops of those) are folded and become
`tile.weight`s only where a kernel reads them; a `graph.kernel` region (from graph-fuse) is
unpacked here into its anchor and epilogue; every other op goes to its entry in the table
(lowerings.py). Last, each DRAM buffer an op's result lives in is tagged with the op's index
(`tile.LAYER_ATTR`) for the per-layer check of `infer run --check`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    FunctionType,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    UnitAttr,
    UnknownLoc,
    f32,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.dialects.dtypes import dense_to_numpy, element_name_of, element_type_name, num_elements, shape_of
from infer.dialects.ir_io import LoweringError
from infer.dialects.weights import weights_of
from infer.passes import tiling_tuning
from infer.passes.graph_to_tile import (
    autotune,
    casts,
    elementwise,
    integer_epilogue,
    integer_inputs,
    packed_siblings,
    roofline,
    storage,
)
from infer.passes.graph_to_tile.builder import Emitter
from infer.passes.graph_to_tile.context import (
    STAGE,
    LoweringContext,
    LoweringSession,
    error,
    latency_bound,
    no_lowering_error,
)
from infer.passes.graph_to_tile.copies import copy_dram
from infer.passes.graph_to_tile.gather_overlap import hoist_loads_around_row_gathers
from infer.passes.graph_to_tile.prefetch_hoist import ends_in_products, ends_in_vector_epilogue, hoist_weight_prefetches
from infer.passes.graph_to_tile.lowerings import check_types, lowering_for
from infer.target.hw import load_config

_NO_CODE_OPS = (t.AllocOp, t.WeightOp, t.ViewOp)  # top-level ops that emit no instruction


def in_place_cache(value: SSAValue, body: Block) -> int | None:
    """The input position of the cache argument a returned `graph.kv_cache_write` may update in
    place (the write is its only use and the types agree: a donated buffer), else None."""
    op = value.owner
    if not isinstance(op, g.KvCacheWriteOp) or value.type != op.cache.type:
        return None
    cache = op.cache
    if not isinstance(cache, BlockArgument) or cache.block is not body:
        return None
    if len(list(cache.uses)) != 1:
        return None
    return cache.index


class FunctionLowering:
    """Lowers one func.func: `FunctionLowering(session, function).run()` is the new function."""

    def __init__(self, session: LoweringSession, function: func.FuncOp):
        self.function = function
        self.fused: set[Operation] = set()  # epilogue ops lowered with their anchor
        self._lowering = False  # inside lower_op (nested calls lower a kernel's ops one by one)
        self.in_types, self.out_types, self.host_dtypes = self._signature()
        self.index_bounds = self._index_bounds()
        self.paged_bounds = self._paged_bounds()
        self.aliases: dict[int, int] = {}  # output argument -> the input argument it is (in place)
        self.block = Block(arg_types=self.in_types + self.out_types)
        self.ctx = LoweringContext(session, function, Emitter(self.block))

    def _signature(self) -> tuple[list[Attribute], list[Attribute], dict[int, str]]:
        """The DRAM memref types of the inputs and outputs, and the graph type of each one DRAM
        holds as another type (i64 inputs narrowed to i32, other types held as f32: storage.py)."""
        fn = self.function
        ftype = fn.function_type
        old_args = list(fn.body.block.args)
        ret = fn.body.block.last_op
        results = list(ret.operands) if isinstance(ret, func.ReturnOp) else []
        in_types: list[Attribute] = []
        out_types: list[Attribute] = []
        host_dtypes: dict[int, str] = {}
        inputs = list(ftype.inputs.data)
        for i, ty in enumerate(inputs + list(ftype.outputs.data)):
            if not isinstance(ty, TensorType):
                raise error(fn, f"only tensor arguments and results are supported, got {ty}")
            elem_name = element_type_name(ty.get_element_type())
            is_input = i < len(inputs)
            elem: Attribute = f32
            if elem_name == "f32":
                pass
            elif (is_input and elem_name in integer_inputs.INDEX_TYPES
                  and integer_inputs.accepts_integer_input(old_args[i])):
                # integer inputs that feed gather indices, casts to f32 or attention masks
                elem = ty.get_element_type()
                if elem_name == "i64" and not integer_inputs.is_index_source(old_args[i]):
                    # narrowed: DRAM holds int32 for the vector unit, the runtime converts (range-checked);
                    # i64 arguments that only feed gathers stay i64 (gather_rows reads the low word)
                    elem = i32
                    host_dtypes[i] = "i64"
            elif elem_name in storage.HELD or (elem_name == "f64" and (
                    storage.f64_argument_held(old_args[i]) if is_input
                    else storage.f64_result_held(results[i - len(inputs)]))):
                host_dtypes[i] = elem_name  # held as f32 (storage.py); the runtime converts
            elif elem_name != "f64":  # the storage-only 8/4/2-bit types (dtypes.STORAGE_ONLY_TYPES)
                what = f"argument #{i}" if is_input else f"result #{i - len(inputs)}"
                raise error(fn, f"{what} is {ty}: {elem_name} tensors are not supported by the NPU lowering "
                            f"(f32, f16, bf16, integer and i1 tensors are, and f64 at the boundary)")
            else:
                what = f"argument #{i}" if is_input else f"result #{i - len(inputs)}"
                raise error(fn, f"{what} is {ty}: f64 tensors are supported only at the boundary (arguments "
                            f"whose uses are all casts to f32/f16/bf16, results that are casts to f64); "
                            f"f32, f16, bf16, integer and i1 tensors are supported")
            (in_types if is_input else out_types).append(t.memref(shape_of(ty), elem, "dram"))
        return in_types, out_types, host_dtypes

    def _index_bounds(self) -> dict[int, tuple[int, bool]]:
        """Per integer input that gather indices or KV-cache write slots come from: the size of
        the (smallest) table or pool they select rows of, and whether the runtime may wrap
        negative indices (ONNX counts gather indices from the end): only when the input feeds
        nothing but gathers, so no other use sees the wrapped value, of tables of one size, so
        one wrap serves them all (a negative slot is an error, as in the reference interpreter).
        Recorded as `tile.index_bound` / `tile.index_wraps` for the runtime's check
        (runtime/boundary.py)."""
        bounds = {}
        for i, arg in enumerate(self.function.body.block.args):
            if element_name_of(arg) in integer_inputs.INDEX_TYPES:
                tables, pools = integer_inputs.gather_table_sizes(arg), integer_inputs.kv_pool_sizes(arg)
                if tables or pools:
                    wraps = not pools and len(tables) == 1 and integer_inputs.is_index_source(arg)
                    bounds[i] = (min(tables | pools), wraps)
        return bounds

    def _paged_bounds(self) -> dict[int, dict[str, Attribute]]:
        """Per input argument that is a `graph.paged_attention`'s context lengths or block
        tables: what the runtime checks before a run (runtime/boundary.py), as the reference
        interpreter does: each length within the MB.BS tokens a table row can hold
        (`tile.length_bound`), each block a sequence uses (its first ceil(len / BS) entries)
        within the pool (`tile.block_table` = [pool blocks, BS, the lengths' argument]). The
        compiled attention reads them as they are: a block past the pool would read other
        DRAM bytes as keys and values."""
        body = self.function.body.block
        out: dict[int, dict[str, Attribute]] = {}

        def argument(v: SSAValue) -> int | None:
            return v.index if isinstance(v, BlockArgument) and v.block is body else None

        for op in body.walk():
            if not isinstance(op, g.PagedAttentionOp):
                continue
            bs = op.block_size_value
            blocks = shape_of(op.key_cache)[0] // bs
            capacity = shape_of(op.block_tables)[1] * bs
            lens, tables = argument(op.context_lens), argument(op.block_tables)
            if lens is None:
                continue
            seen = out.setdefault(lens, {}).get(t.LENGTH_BOUND_ATTR)
            bound = min(capacity, seen.value.data) if isinstance(seen, IntegerAttr) else capacity
            out[lens][t.LENGTH_BOUND_ATTR] = IntegerAttr(bound, i64)
            if tables is not None:
                seen = out.setdefault(tables, {}).get(t.BLOCK_TABLE_ATTR)
                if isinstance(seen, DenseArrayBase):
                    blocks = min(blocks, seen.get_values()[0])
                out[tables][t.BLOCK_TABLE_ATTR] = DenseArrayBase.from_list(i64, [blocks, bs, lens])
        return out

    def run(self) -> func.FuncOp:
        ctx, fn = self.ctx, self.function
        old = fn.body.block
        for arg, new_arg in zip(old.args, self.block.args[:len(self.in_types)], strict=True):
            ctx.buffers[arg] = new_arg
        ret = old.last_op
        assert isinstance(ret, func.ReturnOp)
        outputs = list(self.block.args[len(self.in_types):])
        pending_copies: list[tuple[SSAValue, SSAValue]] = []
        for value, output in zip(ret.arguments, outputs, strict=True):
            if value in ctx.destinations or value in ctx.buffers or ctx.constant(value) is not None:
                pending_copies.append((value, output))
            else:
                ctx.destinations[value] = output
                tied = in_place_cache(value, old)
                if tied is not None:
                    ctx.in_place.add(value)
                    self.aliases[len(self.in_types) + outputs.index(output)] = tied
        for op in list(old.ops):
            if op is ret or op in self.fused:
                continue
            if op.results and all(ctx.is_constant(r) for r in op.results):
                continue  # folded at compile time, evaluated and materialized on use
            self.lower_op(op)
        for value, output in pending_copies:
            with ctx.stage(ret, "result copy"):
                copy_dram(ctx, ctx.buffer(value), output, shape_of(value))
        self._tag_layers(old)
        if latency_bound(ctx.hw):
            hoist_weight_prefetches(self.block, queue_depth=ctx.hw.matrix.queue_depth,
                                    lead_cycles=ctx.hw.dram.latency_cycles,
                                    bytes_per_cycle=ctx.hw.dram.bytes_per_cycle,
                                    scratchpad_bytes=ctx.hw.memory.scratchpad_bytes)
            hoist_loads_around_row_gathers(self.block, ctx.hw.dma.channels + ctx.hw.dma.queue_depth,
                                           ctx.hw.memory.scratchpad_bytes)
        ctx.emitter.insert(func.ReturnOp())
        new = func.FuncOp(fn.sym_name.data, FunctionType.from_lists(self.in_types + self.out_types, []),
                          Region(self.block), fn.sym_visibility)
        new.arg_attrs = ArrayAttr(self._arg_attrs())
        return new

    def _tag_layers(self, body: Block) -> None:
        """The per-layer check (runtime/check.py) reads op #i's result from the DRAM buffer tagged i."""
        for i, op in enumerate(body.ops):
            buffer = self.ctx.buffers.get(op.results[0]) if op.results else None
            while buffer is not None and isinstance(buffer.owner, t.ViewOp):
                buffer = buffer.owner.source
            if buffer is not None and isinstance(buffer.owner, t.AllocOp) and t.LAYER_ATTR not in buffer.owner.attributes:
                buffer.owner.attributes[t.LAYER_ATTR] = IntegerAttr(i, i64)

    def _arg_attrs(self) -> list[DictionaryAttr]:
        fn = self.function
        attrs = []
        old_arg_attrs = list(fn.arg_attrs.data) if fn.arg_attrs is not None else [DictionaryAttr({})] * len(self.in_types)
        for i, arg_attrs in enumerate(old_arg_attrs):
            if i in self.host_dtypes:
                arg_attrs = DictionaryAttr({**arg_attrs.data, "tile.host_dtype": StringAttr(self.host_dtypes[i])})
            if i in self.index_bounds:
                bound, wraps = self.index_bounds[i]
                extra: dict[str, Attribute] = {t.INDEX_BOUND_ATTR: IntegerAttr(bound, i64)}
                if wraps:
                    extra[t.INDEX_WRAPS_ATTR] = UnitAttr()
                arg_attrs = DictionaryAttr({**arg_attrs.data, **extra})
            if i in self.paged_bounds:
                arg_attrs = DictionaryAttr({**arg_attrs.data, **self.paged_bounds[i]})
            attrs.append(arg_attrs)
        old_res_attrs = list(fn.res_attrs.data) if fn.res_attrs is not None else [DictionaryAttr({})] * len(self.out_types)
        for i, res_attrs in enumerate(old_res_attrs):
            entries = dict(res_attrs.data)
            entries.setdefault("graph.name", StringAttr(f"output{i}" if len(old_res_attrs) > 1 else "output"))
            entries["tile.output"] = UnitAttr()
            if len(self.in_types) + i in self.aliases:
                entries[t.ALIAS_ATTR] = IntegerAttr(self.aliases[len(self.in_types) + i], i64)
            if len(self.in_types) + i in self.host_dtypes:
                entries["tile.host_dtype"] = StringAttr(self.host_dtypes[len(self.in_types) + i])
            attrs.append(DictionaryAttr(entries))
        return attrs

    # -- dispatch -------------------------------------------------------------------
    def lower_op(self, op: Operation) -> None:
        """Lower one op (or graph.kernel) as one loop nest; the outermost call records the op's
        algorithmic roofline on the last top-level op it emitted (roofline.py). An op whose
        results are all empty (a zero-size dim) has nothing to compute."""
        results = [r for r in op.results if isinstance(r.type, TensorType)]
        if results and all(num_elements(shape_of(r)) == 0 for r in results):
            for r in results:
                self.ctx.output_buffer(r)
            return
        if self.ctx.derived.pop((packed_siblings.LOWERED_WITH, op), False):
            return  # lowered with an earlier product on the same activations
        outermost = not self._lowering
        self._lowering = True
        if outermost:
            self.ctx.prediction = 0
            self.ctx.memory_for_next_kernel()
        fused_before = set(self.fused)
        last_before = self.block.last_op
        picks = (autotune.picks_for(self.ctx, op, f"kernel{self.ctx.session.counter}")
                 if outermost and self.ctx.session.autotune and autotune.tunable(op) else {})
        try:
            with self.ctx.stage(op), (tiling_tuning.tuning(tiling_tuning.Tuning(picks)) if picks
                                      else contextlib.nullcontext()):
                if isinstance(op, g.KernelOp):
                    self._lower_kernel(op)
                else:
                    self._lower_by_table(op)
        finally:
            self._lowering = not outermost
        self._locate(last_before, op)
        if outermost:
            last = self.block.last_op
            emitted = last if last is not last_before and not isinstance(last, _NO_CODE_OPS) else None
            fused = [o for o in op.parent_block().ops if o in self.fused and o not in fused_before] \
                if op.parent_block() is not None else []
            deferred, self.ctx.deferred = self.ctx.deferred, []
            roofline.tag(emitted, roofline.record_for(self.ctx, op, fused, without=deferred), self.ctx.prediction,
                         roofline.kernel_class(op))
            if emitted is not None:
                self.ctx.previous_prediction = self.ctx.prediction
                ops, at = [], emitted
                while at is not None and at is not last_before:
                    ops.append(at)
                    at = at.prev_op
                self.ctx.previous_epilogue = ends_in_vector_epilogue(ops[::-1])
                self.ctx.previous_drains = ends_in_products(ops[::-1])
                self.ctx.previous_outputs = [self.ctx.buffers[r] for r in op.results if r in self.ctx.buffers]
            for later in deferred:  # (a kernel's op its lowering left to a kernel of its own)
                self.lower_op(later)
            if deferred and isinstance(op, g.KernelOp) and op.yield_op is not None:
                self._bind_result(op)

    def _locate(self, before: Operation | None, op: Operation) -> None:
        """The tile ops op lowered to (after `before`) carry its location, so a tile-to-npu error
        names the graph op (or model node) it came from."""
        location = op.location
        if isinstance(op, g.KernelOp) and isinstance(location, UnknownLoc):  # graph-fuse's region
            anchor = op.anchor() or next(iter(op.body.block.ops), None)
            location = anchor.location if anchor is not None else location
        if isinstance(location, UnknownLoc):
            return
        new = before.next_op if before is not None else self.block.first_op
        while new is not None:
            for nested in new.walk():
                if isinstance(nested.location, UnknownLoc):
                    nested.location = location
            new = new.next_op

    def _lower_by_table(self, op: Operation) -> None:
        lowering = lowering_for(op)
        if lowering is None:
            raise no_lowering_error(op)
        check_types(op, lowering)
        if lowering.with_epilogue is not None:
            if isinstance(op, g.INTEGER_KERNEL_OPS):
                chain = integer_epilogue.integer_chain(self.ctx, op)
            else:
                chain = elementwise.fusable_chain(self.ctx, op)
            self.fused.update(chain)
            lowering.with_epilogue(self.ctx, op, chain, (chain[-1] if chain else op).results[0])
        else:
            assert lowering.alone is not None
            lowering.alone(self.ctx, op)

    def _lower_shared(self, kernel: g.KernelOp, op: Operation) -> None:
        """Lower an op of a kernel's prologue standalone, once for every kernel that holds the
        same op on the same inputs (graph-fuse-norm-prologue copies a norm into each product
        that reads it; a product that does not take it on chip reuses the first result)."""
        outside = dict(zip(kernel.body.block.args, kernel.inputs, strict=True))
        key = ("shared prologue", op.name, str(op.properties), str(op.attributes),
               tuple(outside.get(v, v) for v in op.operands))
        if key in self.ctx.derived:
            for r, buffer in zip(op.results, self.ctx.derived[key], strict=True):
                self.ctx.buffers[r] = buffer
            return
        self.lower_op(op)
        self.ctx.derived[key] = [self.ctx.buffers[r] for r in op.results]

    def _lower_kernel(self, kernel: g.KernelOp) -> None:
        """A graph.kernel region: its anchor with the other ops as the epilogue, an anchor-less
        elementwise chain, or (ops feeding the anchor, cast round trips) op by op."""
        ctx = self.ctx
        if integer_inputs.lower_if_integer(ctx, kernel):
            return  # a lone cast of an integer model input, wrapped by graph-fuse
        block = kernel.body.block
        yield_op = kernel.yield_op
        assert yield_op is not None
        anchor = kernel.anchor()
        ops = [o for o in block.ops if o is not yield_op]
        for o in ops:  # constants inside the region are plain constants
            if isinstance(o, g.ConstantOp):
                ctx.set_constant(o.output, dense_to_numpy(o.value))
        ops = [o for o in ops if not isinstance(o, g.ConstantOp)]
        for o in ops:
            lowering = lowering_for(o)
            if lowering is not None:
                check_types(o, lowering)
        for arg, value in zip(block.args, kernel.inputs, strict=True):
            if value in ctx.buffers:
                ctx.buffers[arg] = ctx.buffers[value]
            if value in ctx.masks:
                ctx.masks.add(arg)
            ctx.share_constant(arg, value)
        norm = kernel.norm_epilogue()
        if len(yield_op.values) != 1 and (norm is None or len(yield_op.values) != 2):
            raise error(kernel, "kernels with several results are not supported yet (but for a norm "
                        "epilogue's input and result)")
        result = yield_op.values[-1]  # (the other: the rows a norm epilogue normalises, gemm.py)
        for output, value in zip(kernel.outputs, yield_op.values, strict=True):
            if output in ctx.destinations:
                ctx.destinations[value] = ctx.destinations[output]
        quantization = [i for i, o in enumerate(ops) if isinstance(o, g.QUANTIZATION_OPS)]
        if anchor is None and (quantization or any(casts.is_inner_round_trip(o) or casts.is_outer_round_trip(o)
                                                   for o in ops)):
            for o in ops:  # cast round trips and quantization ops (their own kernels): op by op
                self.lower_op(o)
        elif anchor is None:
            elementwise.lower_elementwise(ctx, ops, result)
        else:
            epilogue = [o for o in ops if o is not anchor]
            anchor_index = ops.index(anchor)
            lowering = lowering_for(anchor)
            if anchor_index != 0:  # ops before the anchor feed it: on chip by the anchor's
                epilogue = ops[anchor_index + 1:]  # lowering, or standalone first
                prologue = ops[:anchor_index]
                if lowering is None or lowering.prologue is None or \
                        not lowering.prologue(ctx, anchor, prologue, epilogue, result):
                    for o in prologue:
                        self._lower_shared(kernel, o)
            after: list[Operation] = []
            if not isinstance(anchor, g.INTEGER_KERNEL_OPS) and quantization and quantization[-1] > anchor_index:
                # a float kernel's result quantized to int8: the float epilogue, then the
                # quantization ops (and what follows them) as kernels of their own
                first = next(i for i in quantization if i > anchor_index)
                epilogue, after = ops[anchor_index + 1:first], ops[first:]
            if lowering is not None and lowering.with_epilogue is not None:
                lowering.with_epilogue(ctx, anchor, epilogue, (epilogue[-1] if epilogue else anchor).results[0]
                                       if after else result)
                for o in after:
                    self.lower_op(o)
            else:
                self.lower_op(anchor)
                for o in epilogue + after:
                    self.lower_op(o)
        self._bind_result(kernel)

    def _bind_result(self, kernel: g.KernelOp) -> None:
        """The kernel's results live where its region's yielded values were written."""
        assert kernel.yield_op is not None
        for output, value in zip(kernel.outputs, kernel.yield_op.values, strict=True):
            if value in self.ctx.buffers:  # (a result only sibling products read stays on chip)
                self.ctx.buffers[output] = self.ctx.buffers[value]


def parse_overrides(text: str) -> dict[str, tuple[int, ...]]:
    """`kernel3=64x64x32,kernel5=8` -> {"kernel3": (64, 64, 32), "kernel5": (8,)}."""
    out: dict[str, tuple[int, ...]] = {}
    for item in filter(None, (s.strip() for s in text.replace(";", ",").split(","))):
        if "=" not in item:
            raise LoweringError(f"error: {STAGE}: override '{item}' must be NAME=TMxTNxTK")
        name, value = item.split("=", 1)
        try:
            sizes = tuple(int(x) for x in value.lower().split("x"))
        except ValueError:
            raise LoweringError(f"error: {STAGE}: override '{item}': sizes must be integers") from None
        if any(s < 1 for s in sizes):
            raise LoweringError(f"error: {STAGE}: override '{item}': sizes must be positive")
        out[name.strip()] = sizes
    return out


@dataclass(frozen=True)
class GraphToTilePass(ModulePass):
    """Lower graph functions to tile-level DRAM functions with cost-model tiling.

    Options:
      target: the hardware config whose tiles and memories the kernels are sized for
        ("edge", "server" or a TOML path).
      precision: "fp32" (matmul products as three bf16 passes), "int8" (float kernels of a
        quantized module as bf16; integer kernels always take the int8 path) or "bf16" (bf16 inputs,
        fp32 accumulation).
      overrides: tile sizes that replace the cost model's choice, per kernel:
        "kernel3=64x64x32,kernel5=8" (names as printed by debug-tiling).
      debug-tiling: print why each kernel's tile sizes were chosen (on stderr).
      autotune: 0 (off) or N: per distinct GEMM-shaped kernel (linear, matmul, conv, attention),
        simulate the cost model's top N tilings as a single-kernel program in timing mode and
        keep the fastest (autotune.py; docs/tiling.md "Autotuning").
      autotune-cache: the directory of the autotuning results ("": $XDG_CACHE_HOME/infer/autotune,
        default ~/.cache/infer/autotune).
    """

    name = "graph-to-tile"

    target: str = "edge"
    precision: str = "fp32"
    overrides: str = ""
    debug_tiling: bool = False
    autotune: int = 0
    autotune_cache: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.precision not in ("fp32", "bf16", "int8"):
            raise LoweringError(f"error: {STAGE}: precision must be fp32, bf16 or int8, got '{self.precision}'")
        try:
            hw = load_config(self.target)
        except Exception as e:
            raise LoweringError(f"error: {STAGE}: {e}") from None
        if "bf16" not in hw.matrix.dtypes:
            raise LoweringError(f"error: {STAGE}: target '{hw.name}' has no bf16 matrix unit")
        if self.autotune < 0:
            raise LoweringError(f"error: {STAGE}: autotune must be 0 (off) or the number of candidates, got {self.autotune}")
        session = LoweringSession(hw, self.precision, parse_overrides(self.overrides), self.debug_tiling, op,
                                  target=self.target, autotune=self.autotune, autotune_cache=self.autotune_cache)
        weights_of(op)  # open the module's weight store now, even when no function needs it
        for fn in list(op.ops):
            if not isinstance(fn, func.FuncOp) or fn.is_declaration:
                continue
            new = FunctionLowering(session, fn).run()
            op.body.block.insert_op_before(new, fn)
            fn.detach()
            fn.erase()
        op.attributes[t.TARGET_ATTR] = StringAttr(self.target)
