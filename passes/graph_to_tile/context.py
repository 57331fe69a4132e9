"""What a kernel-family lowering of graph-to-tile works with: `LoweringContext`.

The driver (driver.py) makes one `LoweringContext` per function and hands it to each lowering
function of the table (lowerings.py). It holds:

* `emitter`: the tile IR builder of the function body (builder.py);
* `hw`: the target's hardware description; `matmul_passes` / `bf16_copies`: the precision;
* the value map: `buffer(v)` is the DRAM memref holding tensor v (a compile-time value becomes
  a `tile.weight` on first use), `output_buffer(v)` allocates (or takes the function output
  given as the destination of) the buffer a lowering writes v into; `buffers` and
  `destinations` are the maps themselves; `masks` the i1 attention masks held as additive f32
  buffers;
* compile-time values: `constant(v)` (weights, constants and graph ops of those, folded with
  the reference interpreter), `weight(hint, array, elem)` (a new pre-packed weight);
* kernel bookkeeping: `kernel_name()` (the stable `kernel<N>` of the op being lowered, which
  overrides key and debug-tiling prints), `override`, `debug`, and `stage(...)`, one loop nest
  whose local buffers are checked against the target's scratchpad and accumulator.
"""

from __future__ import annotations

import contextlib
from typing import Any
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import ml_dtypes
import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp, TensorType, bf16, f32
from xdsl.ir import Attribute, Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.dialects.dtypes import dense_to_numpy, element_type_name, num_elements, shape_of
from infer.dialects.graph_interpreter import evaluate_op
from infer.dialects.ir_io import LoweringError, lowering_error
from infer.dialects.weights import weights_of
from infer.passes.graph_to_tile import storage
from infer.passes.graph_to_tile.builder import Emitter
from infer.target.hw import HardwareConfig, load_config

STAGE = "graph-to-tile"
NEG_INF = -1.0e30  # "minus infinity" of attention masks and running maxima (finite: no inf - inf)
# where a maximum starts and what pads its windows (reductions, max pooling, argmax): -inf, max's
# identity. No subtraction follows there, and a finite stand-in made a row of -inf (a fully masked
# attention bias row) or of values below it reduce to -1e30
MAX_IDENTITY = float("-inf")
#: a kernel's local buffers get bytes apart from the kernel before's where both fit in this share
#: of the scratchpad and of the accumulator (`LoweringContext.stage`; the planner's best fit does
#: not always reach the peak of live bytes). 0.8 (was 0.75): the Llama prefill's gated FFN
#: projections (6.3 MB of scratchpad each on server) are apart from each other, 321.8 K ->
#: 319.4 K cycles; ResNet-50 server 519.0 K -> 517.8 K; the other bench models unchanged
KERNEL_OVERLAP_SHARE = 0.8
#: one-tile results kept in the accumulator for later kernels (`keep_on_chip`) take at most this
#: share of it: the kernels before their last reader size their tiles in the rest
KEPT_ACCUMULATOR_SHARE = 0.5
#: an elementwise kernel, a reduction or a cast whose whole result is one local tile keeps it on
#: chip for the kernels named within this many names after it (`keep_on_chip`)
KEPT_TILE_READERS = 3
#: a kept scratchpad tile of at most this many bytes (a row of 1,024 f32) is kept for every later
#: kernel, whatever `next_kernels` says: it costs next to no scratchpad while it stays live, and a
#: pooled sentence embedding's mean row is read again by the last of the four kernels after it
#: (its L2 normalisation), which had loaded it back behind its store (~1 K cycles on server)
KEPT_TINY_BYTES = 4096
#: the DRAM's bandwidth-delay product (bytes in flight to cover one latency) from which the
#: kernels' buffers are kept apart: there a round trip is long against a tile's transfer and the
#: overlap hides it; below (edge: 1.6 KB) the DRAM is the bottleneck and a kernel's early loads
#: take bandwidth from the kernel before (measured: the Llama prefill on edge 0.01 % slower)
LATENCY_BOUND_BYTES = 64 * 1024
FOLD_LIMIT = 1 << 26  # elements: larger results of constant ops are not folded at compile time


def latency_bound(hw: HardwareConfig) -> bool:
    """Whether the target's DRAM latency is long against its bandwidth (`LATENCY_BOUND_BYTES`)."""
    return hw.dram.latency_cycles * hw.dram.bytes_per_cycle >= LATENCY_BOUND_BYTES


def latency_bound_target(pass_name: str, target: str) -> bool:
    """`latency_bound` of the config a graph pass's `target` option names; a config that does not
    load is one IRError naming the pass (what the target-dependent graph passes check first)."""
    from infer.dialects.ir_io import IRError
    from infer.target.hw import ConfigError

    try:
        hw = load_config(target)
    except ConfigError as e:
        raise IRError(f"error: {pass_name}: target '{target}': {e}") from None
    return latency_bound(hw)


def error(op: Operation, message: str) -> LoweringError:
    """`file:line:col: error: 'graph.x' op graph-to-tile: MESSAGE`."""
    return lowering_error(op, STAGE, message)


def no_lowering_error(op: Operation) -> LoweringError:
    return error(op, "this op has no tile lowering (supported: linear, matmul, conv2d, elementwise ops and "
                 "comparisons, logic, casts, where, pooling, batch/layer/rms norm, softmax, log_softmax, "
                 "attention, reshape, transpose, slice, concat, broadcast, pad, reductions, argmax/argmin, "
                 "top_k, gather, rotary)")


def local_bytes(alloc: t.AllocOp) -> int:
    """Bytes a local alloc takes in the memory plan (all its buffers; each rounded up to
    4 bytes so the planner's element alignment never pushes a fitting nest over)."""
    ty = alloc.buffer.type
    assert isinstance(ty, MemRefType)
    size = num_elements(ty.get_shape()) * t.elem_bytes(alloc.buffer)
    return -(-size // 4) * 4 * alloc.buffers.value.data


@dataclass
class LoweringSession:
    """One run of graph-to-tile over a module: the target, the precision, the tile-size
    overrides and debug flag, the kernel counter (kernel<N> names count lowered ops over all
    functions) and the debug-tiling log."""

    hw: HardwareConfig
    precision: str
    overrides: dict[str, tuple[int, ...]]
    debug: bool
    module: ModuleOp
    counter: int = 0
    log: list[str] = field(default_factory=list)
    # autotuning (autotune.py): the target's name for the single-kernel compiles, the top N
    # candidates to simulate (0: off), the cache directory ("": the default) and this run's picks
    target: str = ""
    autotune: int = 0
    autotune_cache: str = ""
    autotune_memo: dict[str, dict[int, str]] = field(default_factory=dict)
    # tiling_cost.choose_conv's rankings by ConvSpec, per (scratchpad, accumulator) capacity a
    # kernel is sized for (this run's hw less the kept tiles it must leave room for:
    # `LoweringContext.memory_for_next_kernel`): equal conv kernels (ResNet's repeated blocks)
    # are ranked once
    conv_rankings: dict[Any, Any] = field(default_factory=dict)

    def rankings_for(self, hw: HardwareConfig) -> dict[Any, Any]:
        """The conv rankings for kernels sized for `hw` (this run's config, its memories maybe
        less the kept tiles)."""
        return self.conv_rankings.setdefault((hw.memory.scratchpad_bytes, hw.memory.accumulator_bytes), {})


@dataclass(frozen=True)
class NestRecord:
    """The last top-level loop nest (kernel) emitted: its block and the scratchpad and
    accumulator bytes its nests (the kernel and its helper nests) hold at most at once. The next
    kernel's buffers live from its start (`Emitter.live_from_previous`) only if they leave
    room for it."""

    block: Any
    spad: int
    acc: int


class LoweringContext:
    """The state of lowering one function that kernel families read and extend (see the
    module docstring)."""

    def __init__(self, session: LoweringSession, function: func.FuncOp, emitter: Emitter):
        self.session = session
        self.hw = session.hw
        # (bytes, last kernel number that may read it) of the kept tiles in the accumulator, and
        # of those in the scratchpad charged to the kernels up to their last reader
        self.kept_in_accumulator: list[tuple[int, int]] = []
        self.kept_in_scratchpad: list[tuple[int, int]] = []
        self.emitter = emitter
        self.store = weights_of(session.module)
        self.buffers: dict[SSAValue, SSAValue] = {}  # tensor -> DRAM memref holding it
        self.destinations: dict[SSAValue, SSAValue] = {}  # tensor -> function output to write it into
        self.masks: set[SSAValue] = set()  # i1 attention masks held as additive f32 buffers
        self.in_place: set[SSAValue] = set()  # kv_cache_write results whose output IS the cache argument
        # values computed once and used by several kernels: DRAM buffers derived from the
        # function's arguments (paged attention's block counts, the same for every layer),
        # packed weight planes and the buffers a look-ahead prefetched them into (packed_gemm.py)
        self.derived: dict[tuple, Any] = {}
        self.resident_products = 0  # packed_gemm.py: resident products lowered so far (buffer halves)
        # ops of the kernel being lowered that its lowering leaves to loop nests of their own
        # after it (`defer`: gemm.py's norm epilogue where whole rows are not worth it)
        self.deferred: list[Operation] = []
        self._function = function
        self._constants: dict[SSAValue, np.ndarray] = {}
        self._constness: dict[SSAValue, bool] = {}  # is_constant's answers
        self._constant_sources: dict[SSAValue, SSAValue] = {}  # share_constant's arguments
        self._weights: dict[tuple, SSAValue] = {}
        self._weight_sources: list[np.ndarray] = []  # `_weights` keys on id(array): keep them alive
        self._current_op: Operation = function  # the op being lowered (error locations)
        self._last_kernel_name: str | None = None
        self.prediction = 0  # the cost model's cycles for the graph op being lowered (`predict`)
        self.previous_prediction = 0  # `prediction` of the last graph op that emitted code
        # whether that op's code ends in vector work after its last product (an epilogue the next
        # kernel's preparation moves ahead of: prefetch_hoist.ends_in_vector_epilogue)
        self.previous_epilogue = False
        # whether it ends in its products, nothing after its last matmul on the vector unit
        # (prefetch_hoist.ends_in_products), and its results' DRAM buffers
        self.previous_drains = False
        self.previous_outputs: list[SSAValue] = []
        self.previous_nest: NestRecord | None = None  # the last top-level nest (`stage`)
        self._stage_depth = 0
        self._nest_spad = self._nest_acc = 0  # the current top-level nest's local bytes so far

    # -- precision ------------------------------------------------------------
    @property
    def matmul_passes(self) -> int:
        """bf16 products per fp32 product: 3 (hi*hi + hi*lo + lo*hi) for fp32, 1 for bf16."""
        return 3 if self.session.precision == "fp32" else 1

    @property
    def bf16_copies(self) -> int:
        """bf16 parts of each matrix operand: hi and lo for fp32 emulation, hi alone for bf16."""
        return 2 if self.matmul_passes == 3 else 1

    @property
    def staging_tile_elements(self) -> int:
        """Elements of one data-movement staging tile: a quarter of the scratchpad over two buffers."""
        return max(1, self.hw.memory.scratchpad_bytes // (4 * 2 * 4))

    # -- compile-time values ----------------------------------------------------
    def constant(self, value: SSAValue) -> np.ndarray | None:
        """The compile-time value of a tensor (weights, constants, ops of those), or None."""
        if value in self._constants:
            return self._constants[value]
        source = self._constant_sources.get(value)
        if source is not None:  # a kernel region's argument (share_constant)
            array = self.constant(source)
            if array is not None:
                self._constants[value] = array
            return array
        op = value.owner
        array: np.ndarray | None = None
        if isinstance(op, g.WeightOp):
            array = np.asarray(self.store.get(op.weight_key))
        elif isinstance(op, g.ConstantOp):
            array = dense_to_numpy(op.value)
        elif (isinstance(op, g.GraphOp) and not isinstance(op, g.KernelOp) and op.operands
              and isinstance(value.type, TensorType)):
            inputs = [self.constant(o) for o in op.operands]
            if all(x is not None for x in inputs) and num_elements(shape_of(value)) <= FOLD_LIMIT:
                array = evaluate_op(op, inputs, self.store)[list(op.results).index(value)]
        if array is not None:
            self._constants[value] = array
        return array

    def is_constant(self, value: SSAValue) -> bool:
        """Whether `constant(value)` is an array, without evaluating it: a weight, a constant,
        or a graph op (not a kernel) of such values whose result is within FOLD_LIMIT. The
        driver asks this of every op; evaluating answered it by dequantizing every packed
        weight of a GGUF model at compile time for nothing (SmolLM2: 2 s and ~0.5 GB), since
        the packed products read the packed operands of the dequantization."""
        known = self._constness.get(value)
        if known is not None:
            return known
        op = value.owner
        if value in self._constants or isinstance(op, (g.WeightOp, g.ConstantOp)):
            known = True
        elif (isinstance(op, g.GraphOp) and not isinstance(op, g.KernelOp) and op.operands
              and isinstance(value.type, TensorType)):
            known = (num_elements(shape_of(value)) <= FOLD_LIMIT
                     and all(self.is_constant(o) for o in op.operands))
        else:
            known = False
        self._constness[value] = known
        return known

    def share_constant(self, arg: SSAValue, value: SSAValue) -> None:
        """A kernel region's argument `arg` takes the compile-time value of the outer `value`,
        if it has one, evaluated when first asked (as `value`'s own)."""
        if self.is_constant(value):
            self._constant_sources[arg] = value
            self._constness[arg] = True

    def set_constant(self, value: SSAValue, array: np.ndarray) -> None:
        """Record the compile-time value of a tensor (a kernel region's arguments and constants)."""
        self._constants[value] = array
        self._constness[value] = True

    def weight(self, hint: str, array: np.ndarray, elem: Attribute) -> SSAValue:
        """A `tile.weight` holding `array` as `elem` (f32, bf16, i32 or i8), added to the module's
        weight store under a name made from `hint`; one weight per array and type."""
        key = (hint, id(array), array.shape, str(elem))
        if key not in self._weights:
            self._weight_sources.append(array)
            if element_type_name(elem) == "bf16":
                data = np.ascontiguousarray(array.astype(ml_dtypes.bfloat16))
            elif element_type_name(elem) == "i32":
                data = np.ascontiguousarray(np.asarray(array, dtype=np.int32))
            elif element_type_name(elem) == "i8":
                data = np.ascontiguousarray(np.asarray(array, dtype=np.int8))
            else:
                data = np.ascontiguousarray(np.asarray(array, dtype=np.float32))
            name = self.store.add(hint, data)
            self._weights[key] = self.emitter.hoist(
                t.WeightOp(name, t.memref(data.shape, elem, "dram"))).results[0]
        return self._weights[key]

    # -- buffers ------------------------------------------------------------------
    def buffer(self, value: SSAValue) -> SSAValue:
        """The DRAM memref holding tensor `value` (constants become weights on first use)."""
        if value in self.buffers:
            return self.buffers[value]
        array = self.constant(value)
        if array is None:
            raise error(value.owner if isinstance(value.owner, Operation) else self._function,
                        "value has no buffer")
        shape = shape_of(value)
        owner = value.owner
        if isinstance(owner, g.WeightOp) and array.dtype == np.float32 and array.shape == shape:
            op = t.WeightOp(owner.weight_key, t.memref(shape, f32, "dram"))
            self.buffers[value] = self.emitter.hoist(op).results[0]
            return self.buffers[value]
        hint = owner.weight_key if isinstance(owner, g.WeightOp) else "const"
        held = storage.held_constant(np.broadcast_to(array, shape))
        if held is None:
            raise error(owner if isinstance(owner, Operation) else self._function,
                        f"the compile-time {array.dtype} value cannot be held exactly as f32 (integers "
                        f"beyond +-2^24, f64 values f32 cannot represent)")
        broadcast = held
        self.buffers[value] = self.weight(hint, np.ascontiguousarray(broadcast), f32)
        return self.buffers[value]

    def output_buffer(self, value: SSAValue) -> SSAValue:
        """The DRAM memref a lowering writes tensor `value` into: its function output when it
        is one, else a new DRAM buffer."""
        if value in self.destinations:
            buffer = self.destinations[value]
        else:
            buffer = self.emitter.alloc(shape_of(value), f32, "dram")
        self.buffers[value] = buffer
        return buffer

    def narrow_output_buffer(self, value: SSAValue) -> SSAValue:
        """`output_buffer`, but held as bf16 in bf16 precision when its consumers read it only
        as matrix-unit activations (storage.read_only_as_bf16_activations); on targets short of
        DRAM latency rather than bandwidth (server) only when they are all convs (on server the
        bytes a linear's input saved bought nothing and the transformer block of
        bench_compiler_gemm.py ran 0.8 K cycles slower; ResNet-50's convs gained 3.6 %). The
        producer stores its f32 tile through a conversion to bf16 (`is_bf16_buffer` tells it
        to)."""
        if self.narrows(value):
            self.buffers[value] = self.emitter.alloc(shape_of(value), bf16, "dram")
            return self.buffers[value]
        return self.output_buffer(value)

    def narrows(self, value: SSAValue) -> bool:
        """Will `narrow_output_buffer(value)` hold `value` as bf16 (asked before the buffer is
        made: conv.py's cost model counts the narrowed store)?"""
        return (self.bf16_copies == 1 and value not in self.destinations
                and storage.read_only_as_bf16_activations(value)
                and (not latency_bound(self.hw) or storage.read_only_as_bf16_activations(
                    value, storage.CONV_ACTIVATION_OPERAND)))

    def held_as_bf16(self, value: SSAValue) -> bool:
        """Is tensor `value` already held in a bf16 DRAM buffer (its producer narrowed it)?"""
        buffer = self.buffers.get(value)
        return buffer is not None and self.is_bf16_buffer(buffer)

    @staticmethod
    def is_bf16_buffer(buffer: SSAValue) -> bool:
        """Is the DRAM memref `buffer` held as bf16 (a narrowed activation)?"""
        return isinstance(buffer.type, MemRefType) and buffer.type.element_type == bf16

    def keep_on_chip(self, dram: SSAValue, tile: SSAValue, next_kernels: int | None = None,
                     charged: bool = False) -> None:
        """Record that local `tile` holds exactly the bytes a kernel stored into DRAM buffer
        `dram` (row-major, the same number of elements), so a later kernel reading all of
        `dram` may copy `tile` instead of loading it (`on_chip`): its load would wait for that
        store and a DRAM latency of its own. Only the kernel that made `tile` writes it, and the
        later kernel's read keeps it live (tile-plan-memory), so it still holds those bytes.
        `next_kernels`: only the kernels named within that many names from now may read it (the
        tile stays live to the last reader, so the scratchpad it holds is bounded); a scratchpad
        tile of at most KEPT_TINY_BYTES is kept for every later kernel. `charged`: a scratchpad
        tile is charged like a kept accumulator tile (`memory_for_next_kernel`): the kernels up to
        its last possible reader are sized without its bytes (a conv's whole output: up to a
        quarter of the scratchpad, read by convs sized for all of it otherwise)."""
        while isinstance(dram.owner, t.ViewOp):  # (recorded for the buffer the views stand for)
            dram = dram.owner.operands[0]
        alloc = tile.owner
        while isinstance(alloc, t.ViewOp):
            alloc = alloc.operands[0].owner
        nbytes = (num_elements(shape_of(alloc.buffer)) * t.elem_bytes(alloc.buffer) * alloc.buffers.value.data
                  if isinstance(alloc, t.AllocOp) else None)
        if t.space_of(tile) == "spad" and nbytes is not None and nbytes <= KEPT_TINY_BYTES:
            next_kernels = None
        until = None if next_kernels is None else self.session.counter + next_kernels
        if t.space_of(tile) == "acc" and until is not None:
            assert nbytes is not None
            # the kernels up to the last reader size their tiles without these bytes
            # (`memory_for_next_kernel`); kept ones take at most KEPT_ACCUMULATOR_SHARE.
            # (A tile kept for any later kernel, paged attention's output for the o projection
            # right after it, is not charged.)
            if self.kept_accumulator_bytes(self.session.counter) + nbytes > \
                    KEPT_ACCUMULATOR_SHARE * self.session.hw.memory.accumulator_bytes:
                return
            self.kept_in_accumulator.append((nbytes, until))
        elif t.space_of(tile) == "spad" and until is not None and charged:
            assert nbytes is not None
            self.kept_in_scratchpad.append((nbytes, until))
        self.derived[("on chip", dram)] = (tile, until)
        self.derived[("kept charged", dram)] = charged

    def kept_charged(self, dram: SSAValue) -> bool:
        """Was the tile `on_chip` finds for `dram` kept with `charged` (the kernels up to its
        last reader leave room for it)?"""
        while isinstance(dram.owner, t.ViewOp):
            dram = dram.owner.operands[0]
        return bool(self.derived.get(("kept charged", dram)))

    def kept_accumulator_bytes(self, kernel: int) -> int:
        """The accumulator bytes of kept tiles (`keep_on_chip`) that kernel number `kernel` may
        still read: they stay live through it."""
        return sum(nbytes for nbytes, until in self.kept_in_accumulator if kernel + 1 <= until)

    def memory_for_next_kernel(self) -> None:
        """Give the kernel about to be named the accumulator (and the scratchpad) less the kept
        (charged) tiles it or a later kernel may read (`self.hw`, which the tilings and capacity
        checks read): a kept tile stays live to its last reader, so the kernels before that
        reader must leave its bytes free. Two attention-shaped blocks of 80x80 in a row on edge
        (bf16) needed 76.8 KiB of its 64 KiB accumulator with the kernels in between sized for
        all of it."""
        hw = self.session.hw
        kept = self.kept_accumulator_bytes(self.session.counter)
        kept_spad = sum(nbytes for nbytes, until in self.kept_in_scratchpad if self.session.counter + 1 <= until)
        self.hw = hw if not (kept or kept_spad) else replace(hw, memory=replace(
            hw.memory, accumulator_bytes=hw.memory.accumulator_bytes - kept,
            scratchpad_bytes=hw.memory.scratchpad_bytes - kept_spad))

    def on_chip(self, dram: SSAValue) -> SSAValue | None:
        """The local tile recorded by `keep_on_chip` for `dram` (or the buffer a view of it
        stands for), else None."""
        while True:
            kept = self.derived.get(("on chip", dram))
            if kept is not None:
                tile, until = kept
                return tile if until is None or self.session.counter <= until else None
            owner = dram.owner
            if not isinstance(owner, t.ViewOp):
                return None
            dram = owner.operands[0]

    def held_whole(self, dram: SSAValue, shape: Sequence[int]) -> SSAValue | None:
        """The tile `on_chip` finds for `dram` when it holds exactly as many elements as
        `shape` (the whole buffer), else None."""
        tile = self.on_chip(dram)
        if tile is None or num_elements(shape_of(tile)) != num_elements(shape):
            return None
        return tile

    def on_chip_as(self, dram: SSAValue, shape: Sequence[int]) -> SSAValue | None:
        """A `shape` view of the tile `held_whole` finds, else None."""
        tile = self.held_whole(dram, shape)
        return None if tile is None else self.emitter.view(tile, tuple(shape))

    # -- kernels ------------------------------------------------------------------
    def kernel_name(self) -> str:
        """The next stable kernel name, `kernel<N>` (overrides and debug-tiling use it)."""
        name = f"kernel{self.session.counter}"
        self.session.counter += 1
        self._last_kernel_name = name
        return name

    def override(self, name: str, count: int, optional: int = 0) -> tuple[int, ...] | None:
        """The tile sizes the `overrides` option gives kernel `name` (count of them, or up to
        `optional` more), or None."""
        sizes = self.session.overrides.get(name)
        if sizes is not None and not count <= len(sizes) <= count + optional:
            needs = f"{count}" + (f" to {count + optional}" if optional else "")
            raise LoweringError(f"error: {STAGE}: override for {name} needs {needs} sizes, got {len(sizes)}")
        return sizes

    def defer(self, op: Operation) -> None:
        """Have the driver lower graph op `op` (of the kernel being lowered, its inputs in
        `buffers`) as a kernel of its own right after this one."""
        self.deferred.append(op)

    def predict(self, cycles: int) -> None:
        """Add the cost model's estimate of a loop nest to the graph op being lowered (its
        kernel and helper nests); the driver records the sum beside the op's roofline."""
        self.prediction += int(cycles)

    def debug(self, text: str) -> None:
        if self.session.debug:
            print(text, file=sys.stderr)
        self.session.log.append(text)

    @contextlib.contextmanager
    def stage(self, op: Operation | None = None, what: str = "") -> Iterator[None]:
        """One loop nest (a kernel, or a helper nest of it such as a padded copy): its
        local buffers are allocated before the nest and are all live together, and no
        buffer outlives it. On exit the buffers are summed per memory and checked
        against the target's capacities: a kernel whose own tiling does not fit is a
        located error (a cost-model bug, never left to the memory planner)."""
        saved_op, saved_name = self._current_op, self._last_kernel_name
        if op is not None:
            self._current_op = op
        self._last_kernel_name = None
        top = self._stage_depth == 0
        block = self.emitter.insert_point.block
        if top:
            self._nest_spad = self._nest_acc = 0
        self._stage_depth += 1
        try:
            with self.emitter.loop_nest() as allocs:
                yield
            kernel = self._last_kernel_name or f"kernel{self.session.counter}"
            where = self._current_op
        finally:
            self._stage_depth -= 1
            self._current_op = saved_op
            self._last_kernel_name = saved_name or self._last_kernel_name
        self._check_local(allocs, where, kernel + (f" ({what})" if what else ""))
        # helper nests may overlap the kernel's buffers: the sum bounds what is live at once
        self._nest_spad += sum(local_bytes(a) for a in allocs if t.space_of(a.buffer) == "spad")
        self._nest_acc += sum(local_bytes(a) for a in allocs if t.space_of(a.buffer) == "acc")
        if top:
            self._apart_from_previous(allocs, block)
            self.previous_nest = NestRecord(block, self._nest_spad, self._nest_acc)

    def _apart_from_previous(self, allocs: Sequence[t.AllocOp], block) -> None:
        """Give a kernel's local buffers bytes the kernel before does not use, where both fit in
        KERNEL_OVERLAP_SHARE of each memory: its allocs are live from that kernel's start
        (`tile.live_from_previous`). Without it the planner reuses the bytes the kernel before
        just freed, and the kernel's first writes of them (a weight or parameter load, the
        accumulator's fill) wait for that kernel's last readers (its epilogue and store): the
        loads that read nothing the kernel before writes then run while it still computes,
        and only the first load of its result waits for its store."""
        if not allocs or not latency_bound(self.hw):
            return
        if not self.room_beside_previous(block, self._nest_spad, self._nest_acc, KERNEL_OVERLAP_SHARE):
            return
        for a in allocs:
            if a.parent_block() is block:
                self.emitter.live_from_previous(a.buffer)

    def room_beside_previous(self, block, spad: int, acc: int, share: float) -> bool:
        """Whether the last top-level nest was emitted in `block` and `spad` / `acc` more bytes fit
        beside its buffers within `share` of the scratchpad / accumulator (what buffers live
        from that nest's start may take: `Emitter.live_from_previous`)."""
        prev = self.previous_nest
        mem = self.hw.memory
        return (prev is not None and prev.block is block
                and prev.spad + spad <= share * mem.scratchpad_bytes
                and prev.acc + acc <= share * mem.accumulator_bytes)

    def _check_local(self, allocs: Sequence[t.AllocOp], op: Operation, kernel: str) -> None:
        capacities = {"spad": ("scratchpad", self.hw.memory.scratchpad_bytes),
                      "acc": ("accumulator", self.hw.memory.accumulator_bytes)}
        for space, (memory, capacity) in capacities.items():
            in_space = [a for a in allocs if t.space_of(a.buffer) == space]
            sizes = [local_bytes(a) for a in in_space]
            need = sum(sizes)
            if need <= capacity:
                continue
            largest = sorted(zip(sizes, in_space), key=lambda p: -p[0])[:4]
            listing = ", ".join(f"{size} B {a.buffer.type}" + (" x2" if a.buffers.value.data == 2 else "")
                                for size, a in largest)
            raise error(op, f"{kernel}: the local buffers of its loop nest need {need} bytes of {memory} but "
                        f"target '{self.hw.name}' holds {capacity} bytes (the chosen tiles do not fit: a tiling "
                        f"cost-model bug unless they come from an override); largest: {listing}")
