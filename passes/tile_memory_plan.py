"""`tile-plan-memory`: static memory planning of tile-level IR.

Every `tile.alloc` gets its `offset` (bytes, relative to the start of its region)
and the module records the sizes the runtime must reserve:

- DRAM activation arena: every `tile.alloc` in "dram" (intermediate activations).
  Liveness is computed over the function's op order (pre-order walk): a buffer is
  live from its first touch to its last touch, where a touch inside a loop that
  does not contain the alloc stretches to the whole loop (the loop runs every
  iteration) and touches through `tile.view` results, `scf.for` iter_args and
  `scf.yield` count for the buffer they alias; a buffer reaching `func.return`
  lives to the end of the function. Starting at the first touch (not at the alloc
  op) keeps the plan independent of where a lowering puts its allocs. Offsets
  are then assigned like TFLite's/XLA's heap simulators: greedy with best-fit
  placement, run for several buffer orders (size, live-range length x size,
  start) and the smallest arena kept. Module attribute `tile.arena_bytes` = the
  largest arena over the module's functions (one function runs at a time).
  Function arguments (inputs/outputs) are placed by the runtime: not planned.
- Weights: each distinct `tile.weight @name` gets a discardable attribute
  `tile.offset` (bytes in the weight region; ops naming the same weight share
  it), laid out in first-use order. Module attribute `tile.weights_bytes`.
- Local memories ("spad", "acc"): same liveness, except that a buffer allocated
  inside a tile loop nest is live for the whole nest (so double buffering and
  engine overlap across iterations never see a false dependency); buffers of
  different loop nests may share bytes. `buffers = 2` reserves twice the size.
  Module attributes `tile.spad_bytes` / `tile.acc_bytes` = the bytes used. A top-level
  local alloc carrying the unit attribute `tile.live_from_previous` is live from the first
  op of the kernel before its own (kernels as tile-to-npu's op markers group the top-level
  ops: a `tile.alloc` after ops that emit code starts the next), so it shares no bytes
  with that kernel's buffers (cross-kernel prefetch and overlap, graph_to_tile/context.py,
  matrix_unit.py; where that plan does not fit, the attribute is ignored: it only moves
  overlap, never correctness). A top-level local alloc carrying `tile.live_into_next` is
  live to the end of the kernel after the one of its last touch: a tile a kernel stores to
  DRAM last, whose bytes the next kernel would otherwise write while the store is in flight
  (a DMA retires a DRAM latency after it read them: a write-after-read wait; graph_to_tile's
  resident packed products; ignored where that plan does not fit, as above). On a
  latency-bound target (the server config) each local buffer is first planned live from the
  start of its kernel to the end of the `KEEP_APART_KERNELS`-th kernel after its last touch,
  so it shares no bytes with the buffers of its own kernel and of its neighbours (then
  with fewer kernels, down to its own), and the first of those plans that fits is kept:
  there kernels overlap (prefetched weights, stores in flight while the next kernel starts),
  and bytes a buffer shares with another one of the same or a neighbouring kernel make the
  later access wait for the earlier one, a false dependency (MiniLM on server: 174.2 K ->
  169.0 K cycles); a buffer of at most `TINY_BUFFER_BYTES` is kept apart from
  `TINY_APART_EXTRA` more kernels each side (tiny kernels pass while a store is in flight).
  Such a plan only has to fit, so its first buffer order that fits is kept. A plan
  that does not fit the target's scratchpad/accumulator is an error naming the
  alloc (file:line:col) that ends past the capacity, and the capacity.

Alignment: `alignment=0` (default) means DRAM offsets and sizes are multiples of
the target's `dram.burst_bytes`, local offsets multiples of the buffer's element
size (4 bytes in the accumulator). A nonzero `alignment` is used for DRAM and
combined (lcm) with the element size for local buffers. The runtime must place
the arena and weight regions at addresses aligned to the same value.

`target` names the hardware config ("edge", "server" or a TOML path); empty means
the module's `tile.target` attribute (which the pass sets when it was missing).
`print-plan=true` prints the plan as a table on stderr.

Existing offsets are recomputed: running the pass twice gives the same plan.
The planner itself is `plan_intervals(intervals) -> (offsets, arena_bytes)`.
"""

from __future__ import annotations

import bisect
import math
import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, StringAttr, i64
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from infer.dialects.diagnostics import note_line
from infer.dialects.ir_io import IRError, describe_location
from infer.dialects.tile import TARGET_ATTR, AllocOp, ViewOp, WeightOp, elem_bytes, space_of

ARENA_ATTR = "tile.arena_bytes"
WEIGHTS_ATTR = "tile.weights_bytes"
WEIGHT_OFFSET_ATTR = "tile.offset"
LOCAL_USED_ATTR = {"spad": "tile.spad_bytes", "acc": "tile.acc_bytes"}
LIVE_FROM_PREVIOUS = "tile.live_from_previous"
LIVE_INTO_NEXT = "tile.live_into_next"
#: on latency-bound targets, a local buffer shares no bytes with the buffers of its own kernel and
#: of the kernels this many before and after it, where that fits (module docstring). Measured on
#: server with 0 / 1 / 2 / 3 (cycles): MiniLM bf16 169.4 K / 165.3 K / 166.3 K / 166.3 K, fp32
#: 393.1 K / 399.8 K / 392.6 K / 392.6 K, the Llama prefill 323.2 K / 316.4 K / 316.4 K / 316.4 K,
#: the transformer block of bench_compiler_gemm 12.7 K / 12.2 K / 12.2 K / 13.1 K: placement moves
#: each by a few per cent either way, 2 is the best over all four
KEEP_APART_KERNELS = 2
#: a local buffer of at most TINY_BUFFER_BYTES is kept apart from TINY_APART_EXTRA more kernels on
#: each side (where keeping apart is on at all): a tiny kernel (a pooled embedding's sums, clamps
#: and divides: a vector op or two) lasts a few cycles, so several pass while a store of an earlier
#: one is in flight, and reusing its bytes waits for that store to retire (a DRAM latency: 500
#: cycles on server). Costs next to no memory. MiniLM on server (bf16): 124,837 -> 124,329 cycles
#: with 2 or more, unchanged from 2 to 10
TINY_BUFFER_BYTES = 4096
TINY_APART_EXTRA = 4
# top-level ops that emit no code: they do not end a kernel's allocs (markers.py's rule)
_NO_CODE = (AllocOp, ViewOp, WeightOp)
_LOOPS = (scf.ForOp, scf.WhileOp)
_RANDOM_ORDERS = 32
_RANDOM_ORDERS_MAX_BUFFERS = 400


# --------------------------------------------------------------------------- planner


@dataclass(frozen=True)
class Interval:
    """A buffer of `size` bytes live over program points [start, end] (inclusive)."""

    start: int
    end: int
    size: int
    align: int = 1

    def overlaps(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end


def _align_up(x: int, a: int) -> int:
    return -(-x // a) * a


def peak_live_bytes(intervals: Sequence[Interval]) -> int:
    """The theoretical minimum arena: max over program points of the live bytes."""
    events: list[tuple[int, int]] = []
    for iv in intervals:
        events.append((iv.start, iv.size))
        events.append((iv.end + 1, -iv.size))
    events.sort(key=lambda e: (e[0], e[1]))  # frees before allocations at the same point
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


def _breadth(intervals: Sequence[Interval]) -> list[int]:
    """For each interval, the most bytes live at any point of its lifetime (TFLite's
    "greedy by breadth": buffers that are live at the peak are placed first)."""
    points = sorted({iv.start for iv in intervals})
    live = {p: 0 for p in points}
    for iv in intervals:
        for p in points[bisect.bisect_left(points, iv.start):bisect.bisect_right(points, iv.end)]:
            live[p] += iv.size
    return [max(live[p] for p in points[bisect.bisect_left(points, iv.start):bisect.bisect_right(points, iv.end)])
            for iv in intervals]


def _best_fit(intervals: Sequence[Interval], order: Iterable[int]) -> tuple[list[int], int]:
    """Place buffers one by one (in `order`) into the smallest gap between the
    already placed buffers whose live ranges overlap, or on top of them."""
    offsets = [-1] * len(intervals)
    placed: list[int] = []
    arena = 0
    for i in order:
        iv = intervals[i]
        busy = sorted((offsets[j], offsets[j] + intervals[j].size) for j in placed if intervals[j].overlaps(iv))
        best: int | None = None
        best_gap = math.inf
        top = 0
        for lo, hi in busy:
            start = _align_up(top, iv.align)
            if lo - start >= iv.size and lo - top < best_gap:
                best, best_gap = start, lo - top
            top = max(top, hi)
        offset = best if best is not None else _align_up(top, iv.align)
        offsets[i] = offset
        placed.append(i)
        arena = max(arena, offset + iv.size)
    return offsets, arena


def plan_intervals(intervals: Sequence[Interval], enough: int | None = None) -> tuple[list[int], int]:
    """Offsets for `intervals` such that buffers live at the same time never
    overlap, each offset a multiple of its interval's `align`; returns the offsets
    and the arena size (the end of the highest buffer). Tries several orders
    (greedy by breadth, by size, by size x lifetime (and its square root), by lifetime, by start, and some
    seeded size-weighted random orders when there are few buffers) and keeps the
    smallest arena, stopping early when one reaches the peak live bytes (or `enough` bytes)."""
    n = len(intervals)
    if n == 0:
        return [], 0
    idx = range(n)
    breadth = _breadth(intervals)

    def lifetime(i: int) -> int:
        return intervals[i].end - intervals[i].start + 1

    orders = [
        sorted(idx, key=lambda i: (-breadth[i], -intervals[i].size, intervals[i].start)),
        sorted(idx, key=lambda i: (-intervals[i].size, intervals[i].start)),
        sorted(idx, key=lambda i: (-intervals[i].size * lifetime(i), -intervals[i].size, intervals[i].start)),
        sorted(idx, key=lambda i: (-intervals[i].size * math.sqrt(lifetime(i)), intervals[i].start)),
        sorted(idx, key=lambda i: (-(intervals[i].end - intervals[i].start), -intervals[i].size)),
        sorted(idx, key=lambda i: (intervals[i].start, -intervals[i].size)),
    ]
    # A few seeded, size-weighted random orders for what the fixed orders miss
    # (deterministic: the same input always gets the same plan).
    rng = random.Random(n)
    for _ in range(_RANDOM_ORDERS if n <= _RANDOM_ORDERS_MAX_BUFFERS else 0):
        noise = [intervals[i].size * rng.uniform(0.5, 1.5) for i in idx]
        orders.append(sorted(idx, key=lambda i: -noise[i]))
    lower = max(peak_live_bytes(intervals), enough or 0)
    best: tuple[list[int], int] | None = None
    for order in orders:
        if best is not None and best[1] <= lower:
            break
        result = _best_fit(intervals, order)
        if best is None or result[1] < best[1]:
            best = result
    assert best is not None
    return best


# --------------------------------------------------------------------------- liveness


@dataclass
class _Numbering:
    """Pre-order index of every op in a function and the last index inside it."""

    index: dict[Operation, int] = field(default_factory=dict)
    last: dict[Operation, int] = field(default_factory=dict)

    @staticmethod
    def of(fn: func.FuncOp) -> _Numbering:
        n = _Numbering()
        counter = 0

        def visit(op: Operation) -> None:
            nonlocal counter
            n.index[op] = counter
            counter += 1
            for region in op.regions:
                for block in region.blocks:
                    for child in block.ops:
                        visit(child)
            n.last[op] = counter - 1

        for block in fn.body.blocks:
            for op in block.ops:
                visit(op)
        n.last[fn] = counter - 1
        return n


def _ancestors(op: Operation, fn: func.FuncOp) -> list[Operation]:
    """op's enclosing ops, innermost first, up to (excluding) the function."""
    out: list[Operation] = []
    parent = op.parent_op()
    while parent is not None and parent is not fn:
        out.append(parent)
        parent = parent.parent_op()
    return out


def _contains(outer: Operation, op: Operation) -> bool:
    return outer.is_ancestor(op)


def _aliases(value: SSAValue) -> list[tuple[Operation, list[SSAValue]]]:
    """(user, values that alias `value` through that user) for each use."""
    out = []
    for use in value.uses:
        user = use.operation
        more: list[SSAValue] = []
        if isinstance(user, ViewOp):
            more.append(user.result)
        elif isinstance(user, scf.ForOp) and use.index >= 3:
            k = use.index - 3
            more += [user.body.block.args[1 + k], user.results[k]]
        elif isinstance(user, scf.YieldOp) and user.parent_op() is not None:
            parent = user.parent_op()
            assert parent is not None
            if use.index < len(parent.results):
                more.append(parent.results[use.index])
        out.append((user, more))
    return out


def kernel_starts(fn: func.FuncOp, numbering: _Numbering) -> list[int]:
    """The program points where the function's kernels start (a top-level `tile.alloc` after
    ops that emit code starts the next, the rule of tile-to-npu's op markers), in order."""
    starts: list[int] = []
    emitted = True
    for block in fn.body.blocks:
        for op in block.ops:
            if isinstance(op, AllocOp) and emitted:
                starts.append(numbering.index[op])
                emitted = False
            elif not isinstance(op, (*_NO_CODE, arith.ConstantOp)):
                emitted = True
    return starts


def previous_kernel_starts(fn: func.FuncOp, numbering: _Numbering) -> dict[Operation, int]:
    """For each top-level alloc of a kernel after the first: the program point where the
    kernel before it starts."""
    starts = kernel_starts(fn, numbering)
    out: dict[Operation, int] = {}
    for block in fn.body.blocks:
        for op in block.ops:
            if isinstance(op, AllocOp):
                k = bisect.bisect_right(starts, numbering.index[op]) - 1
                if k >= 1:
                    out[op] = starts[k - 1]
    return out


def next_kernel_end(starts: Sequence[int], point: int, fn_last: int) -> int:
    """The last program point of the kernel after the one holding `point` (`starts`:
    `kernel_starts`)."""
    k = bisect.bisect_right(starts, point) - 1
    return starts[k + 2] - 1 if k + 2 < len(starts) else fn_last


def kernels_around(starts: Sequence[int], lo: int, hi: int, apart: int, fn_last: int) -> tuple[int, int]:
    """[lo, hi] widened to whole kernels (`starts`: `kernel_starts`): from the start of the
    kernel holding `lo` to the end of the kernel `apart` kernels after the one holding `hi`. Two
    buffers so widened overlap when their kernels are at most `apart` apart."""
    first = bisect.bisect_right(starts, lo) - 1
    last = bisect.bisect_right(starts, hi) + apart
    return (starts[first] if first >= 0 else lo, starts[last] - 1 if last < len(starts) else fn_last)


def live_range(alloc: Operation, fn: func.FuncOp, numbering: _Numbering, whole_nest: bool,
               live_from: int | None = None) -> tuple[int, int]:
    """[first, last] program points (pre-order op indices) at which alloc's buffer
    is live; see the module docstring. `whole_nest`: a buffer allocated inside a
    loop nest is live for the whole outermost loop of that nest. `live_from`: live
    from this point too (`tile.live_from_previous`)."""
    start = end = None

    def touch(lo: int, hi: int) -> None:
        nonlocal start, end
        start = lo if start is None else min(start, lo)
        end = hi if end is None else max(end, hi)

    if live_from is not None:
        touch(live_from, live_from)
    seen: set[SSAValue] = set()
    work: list[SSAValue] = [alloc.results[0]]
    while work:
        value = work.pop()
        if value in seen:
            continue
        seen.add(value)
        for user, more in _aliases(value):
            work.extend(more)
            if isinstance(user, ViewOp):
                continue  # a view is free: only the uses of its result touch the bytes
            lo, hi = numbering.index[user], numbering.last[user]
            for anc in _ancestors(user, fn):
                if isinstance(anc, _LOOPS) and not _contains(anc, alloc):
                    lo, hi = numbering.index[anc], numbering.last[anc]
            if isinstance(user, func.ReturnOp):
                hi = numbering.last[fn]
            touch(lo, hi)
    if whole_nest:
        loops = [a for a in _ancestors(alloc, fn) if isinstance(a, _LOOPS)]
        if loops:
            touch(numbering.index[loops[-1]], numbering.last[loops[-1]])
    if start is None or end is None:
        here = numbering.index[alloc]
        return here, here
    return start, end


# --------------------------------------------------------------------------- the pass


def _fail(op: Operation, message: str) -> IRError:
    return IRError(f"{describe_location(op)}: error: '{op.name}' op {message}")


def _module_error(module: ModuleOp, message: str) -> IRError:
    where = describe_location(module)
    if where.startswith("<") and module.body.block.first_op is not None:  # implicit module
        where = describe_location(module.body.block.first_op)
    return IRError(f"{where}: error: tile-plan-memory: {message}")


def _memref_bytes(op: Operation) -> int:
    t = op.results[0].type
    assert isinstance(t, MemRefType)
    shape = t.get_shape()
    if any(d < 0 for d in shape):
        raise _fail(op, f"memory planning needs a static shape, got {t}")
    return math.prod(shape) * elem_bytes(op.results[0])


def _buffer_name(op: Operation) -> str:
    hint = op.results[0].name_hint
    return f"%{hint}" if hint else f"<{describe_location(op)}>"


@dataclass
class PlanRow:
    func: str
    name: str
    space: str
    offset: int
    size: int
    start: int
    end: int
    location: str


@dataclass(frozen=True)
class TilePlanMemoryPass(ModulePass):
    """Assign offsets to every tile.alloc (DRAM arena, scratchpad, accumulator) and tile.weight.

    Options:
      target: the hardware config ("edge", "server" or a TOML path); empty: the module's
        tile.target attribute.
      alignment: byte alignment of DRAM offsets and sizes; 0: the target's DRAM burst.
      print-plan: print the plan as a table on stderr.
    """

    name = "tile-plan-memory"

    target: str = ""
    alignment: int = 0
    print_plan: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from infer.passes.graph_to_tile.context import latency_bound  # (it imports this module)

        hw = self._target(op)
        if self.alignment < 0 or (self.alignment and self.alignment & (self.alignment - 1)):
            raise _module_error(op, f"alignment must be 0 (from the target) or a power of two, "
                          f"got {self.alignment}")
        dram_align = self.alignment or hw.dram.burst_bytes
        capacity = {"spad": hw.memory.scratchpad_bytes, "acc": hw.memory.accumulator_bytes}
        rows: list[PlanRow] = []

        weights_bytes = self._plan_weights(op, dram_align, rows)
        arena = 0
        used = {"spad": 0, "acc": 0}
        for fn in op.walk():
            if not isinstance(fn, func.FuncOp) or fn.is_declaration:
                continue
            numbering = _Numbering.of(fn)
            allocs: dict[str, list[AllocOp]] = {"dram": [], "spad": [], "acc": []}
            for inner in fn.body.walk():
                if isinstance(inner, AllocOp):
                    allocs[space_of(inner.buffer)].append(inner)
            for space, ops in allocs.items():
                if not ops:
                    continue
                local = space != "dram"
                previous = previous_kernel_starts(fn, numbering) if local else {}
                early = {a: previous[a] for a in ops if LIVE_FROM_PREVIOUS in a.attributes and a in previous}
                late = {a for a in ops if LIVE_INTO_NEXT in a.attributes} if local else set()
                starts = kernel_starts(fn, numbering) if late else []
                kernels = kernel_starts(fn, numbering) if local and latency_bound(hw) else []

                def plan(from_previous: bool, apart: int | None = None) -> tuple[list[Interval], list[int], int]:
                    # (buffers kept apart need a plan that fits, not the smallest: the first one)
                    intervals = []
                    for a in ops:
                        size = _memref_bytes(a) * a.buffers.value.data
                        eb = elem_bytes(a.buffer)
                        align = math.lcm(self.alignment or eb, eb) if local else dram_align
                        lo, hi = live_range(a, fn, numbering, whole_nest=local,
                                            live_from=early.get(a) if from_previous else None)
                        if from_previous and a in late:
                            hi = max(hi, next_kernel_end(starts, hi, numbering.last[fn]))
                        if apart is not None:
                            wider = apart + TINY_APART_EXTRA if apart and size <= TINY_BUFFER_BYTES else apart
                            lo, hi = kernels_around(kernels, lo, hi, wider, numbering.last[fn])
                        intervals.append(Interval(lo, hi, size if local else _align_up(size, align), align))
                    return intervals, *plan_intervals(intervals, capacity[space] if apart is not None else None)

                planned = None
                for apart in range(KEEP_APART_KERNELS, -1, -1) if kernels else ():
                    planned = plan(True, apart)
                    if planned[2] <= capacity[space]:
                        break
                    planned = None
                intervals, offsets, total = planned or plan(True)
                if local and total > capacity[space] and (early or late):
                    # the buffers kept apart from the kernel before (a cross-kernel prefetch) do
                    # not fit as placed: plan them as ordinary buffers (correct, less overlap)
                    intervals, offsets, total = plan(False)
                if local:
                    self._check_fits(space, ops, intervals, offsets, capacity[space], hw.name)
                    used[space] = max(used[space], total)
                else:
                    arena = max(arena, total)
                for a, iv, off in zip(ops, intervals, offsets, strict=True):
                    a.offset = IntegerAttr(off, i64)
                    rows.append(PlanRow(fn.sym_name.data, _buffer_name(a), space, off,
                                        _memref_bytes(a) * a.buffers.value.data, iv.start, iv.end,
                                        describe_location(a)))
        if weights_bytes + arena > hw.memory.dram_bytes:
            raise _module_error(op, f"weights ({weights_bytes} bytes) and the activation arena "
                          f"({arena} bytes) do not fit the {hw.memory.dram_bytes}-byte DRAM of target '{hw.name}'")
        op.attributes[ARENA_ATTR] = IntegerAttr(arena, i64)
        op.attributes[WEIGHTS_ATTR] = IntegerAttr(weights_bytes, i64)
        for space, attr in LOCAL_USED_ATTR.items():
            op.attributes[attr] = IntegerAttr(used[space], i64)
        if self.print_plan:
            _print_plan(rows, arena, weights_bytes, used, capacity, sys.stderr)

    def _target(self, module: ModuleOp):
        from infer.target.hw import load_config

        attr = module.attributes.get(TARGET_ATTR)
        current = attr.data if isinstance(attr, StringAttr) else None
        name = self.target or current
        if not name:
            raise _module_error(module, f"no target: pass target=edge|server|<config.toml> or set the "
                          f"module attribute {TARGET_ATTR}")
        if self.target and current and self.target != current:
            raise _module_error(module, f"target={self.target} but the module is for {TARGET_ATTR} = "
                          f"\"{current}\"")
        try:
            hw = load_config(name)
        except Exception as e:
            raise _module_error(module, f"target '{name}': {e}") from None
        if current is None:
            module.attributes[TARGET_ATTR] = StringAttr(name)
        return hw

    @staticmethod
    def _plan_weights(module: ModuleOp, align: int, rows: list[PlanRow]) -> int:
        offsets: dict[str, tuple[int, int]] = {}
        top = 0
        for w in module.walk():
            if not isinstance(w, WeightOp):
                continue
            key = w.weight_key
            size = _memref_bytes(w)
            if key not in offsets:
                offsets[key] = (top, size)
                rows.append(PlanRow("", f"@{key}", "weights", top, size, 0, 0, describe_location(w)))
                top = _align_up(top + size, align)
            elif size > offsets[key][1]:
                raise _fail(w, f"weight @{key} is read as {size} bytes here but {offsets[key][1]} bytes before")
            w.attributes[WEIGHT_OFFSET_ATTR] = IntegerAttr(offsets[key][0], i64)
        return top

    @staticmethod
    def _check_fits(space: str, ops: list[AllocOp], intervals: list[Interval], offsets: list[int],
                    capacity: int, target: str) -> None:
        what = {"spad": "scratchpad", "acc": "accumulator"}[space]
        for a, iv, off in sorted(zip(ops, intervals, offsets), key=lambda t: (t[2] + t[1].size, t[1].start)):
            if off + iv.size <= capacity:
                continue
            live = sum(o.size for o in intervals if o.overlaps(iv))
            copies = " (2 buffers)" if a.buffers.value.data == 2 else ""
            if iv.size > capacity:
                why = "the buffer alone is larger than the memory"
            else:
                why = f"{live} bytes of {what} buffers are live at the same time"
            error = _fail(a, f"does not fit: {space} buffer of {iv.size} bytes{copies} would need bytes "
                             f"[{off}, {off + iv.size}) but the {what} of target '{target}' holds {capacity} "
                             f"bytes ({why})")
            # One note per other buffer live at the same time: what to shrink or split.
            others = [note_line(b, f"live at the same time: {space} buffer of {biv.size} bytes at "
                                   f"[{boff}, {boff + biv.size})")
                      for b, biv, boff in zip(ops, intervals, offsets) if b is not a and biv.overlaps(iv)]
            raise IRError("\n".join([str(error), *others]))


def _print_plan(rows: list[PlanRow], arena: int, weights: int, used: dict[str, int],
                capacity: dict[str, int], out) -> None:
    header = ("func", "buffer", "space", "offset", "size", "live", "location")
    table = [header] + [
        (r.func, r.name, r.space, str(r.offset), str(r.size),
         "-" if r.space == "weights" else f"[{r.start}, {r.end}]", r.location)
        for r in rows
    ]
    widths = [max(len(row[c]) for row in table) for c in range(len(header))]
    print("tile-plan-memory:", file=out)
    for row in table:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip(), file=out)
    print(f"  dram arena {arena} bytes, weights {weights} bytes, spad {used['spad']}/{capacity['spad']} bytes, "
          f"acc {used['acc']}/{capacity['acc']} bytes", file=out)


__all__ = ["LIVE_FROM_PREVIOUS", "Interval", "TilePlanMemoryPass", "live_range", "peak_live_bytes", "plan_intervals"]
