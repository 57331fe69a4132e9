"""Compiling a function kernel by kernel: a kernel that runs out of semaphores is taken back and
compiled again with less overlap, the kernels before it stay as they are.

The reference is the whole-function loop (`driver.compile_function_again`): compile the
function, allocate the semaphores, raise the degrade level (rotation.DegradeLevel) of the top-
level ops of every op-marker group (kernel) that did not fit, compile the whole function again,
until it fits. On ResNet-50 that compiled the function twice or more. Here the kernels (the op-
marker groups, markers.KernelGroups) are emitted one after the other with a checkpoint before
each; after a kernel, the semaphores of a window of the program are allocated on their own
(semaphores.allocate; first `semaphores.fits` counts the most virtuals live at any top-level
item, which decides the same without flattening, and a window that fits stops there): from
the kernel before it, or from the kernel of the earliest
instruction it gave a signal to if that is earlier, and further back to where the semaphores
of the kernels in that window start (the earliest instruction each of them gave a signal to).
A virtual semaphore lives over top-level items of the kernel that created it and of the earlier
kernels whose instructions signal it, so inside the window every overlap of live ranges is the
one the whole program has. The kernels
that did not fit get the reference's rule, one degrade level more for each of their top-level
ops below SHARED_PAIR_SEMAPHORES (none left: that kernel stays as it is, and when no failed kernel
has one the reference fails), and the code generator goes back to the checkpoint of the first
kernel raised (or of an earlier kernel holding a double-buffered alloc whose rotation plan
changed) and emits from there. The program is that of the reference compiling the function at
the final levels (the rollback restores every piece of state the emission carries from kernel
to kernel); the final levels are the reference's when a kernel's fit does not depend on the
levels of the kernels before it, which holds on the stock configs (programs byte-identical,
bench/program_hashes.py) and is what the test on a few-semaphore config checks. (A failure is
blamed on the op-marker group of the top-level item where the failing virtual's range starts; a
relay nop inserted among earlier items while a later op is emitted is an item labelled group 0,
so the loop then raises kernel 0: the window does the same.) When the window cannot decide like
the reference (no failed kernel can go lower) `KernelByKernel.run` raises NotDecided and the
driver falls back to the reference loop. When every window fitted but the whole program's
allocation fails (a semaphore live across windows), the kernels it names get the same rule and
are emitted again from the first of them, instead of compiling the whole function again from
level 0. (Windows that began at the kernel before, not reaching back to where that kernel's
semaphores start, left the Llama prefill's attention on edge to that whole-program failure:
~80 of its 86 kernels were then emitted again, ~1 s of its compile time; the test with short
windows keeps that path checked.)

A kernel of the same shape as one that fitted only at raised levels (`kernel_shape`: the same
ops, attributes and types, in other DRAM places) starts at those levels
(`KernelByKernel._start_like_before`) instead of being emitted at each level below them first:
a prediction, so its final levels are the reference's when a repeat fails where its model did,
as on the stock configs (bench/program_hashes.py unchanged); `repeats_start_alike=False` turns
it off (the test against the reference on a few-semaphore config).
"""

from __future__ import annotations

import bisect
from collections import Counter

from xdsl.dialects import func
from xdsl.ir import Operation, SSAValue

from infer.dialects import tile as t
from infer.passes.tile_to_npu.codegen import _NO_CODE, CodeGenerator
from infer.passes.tile_to_npu.common import top_level_op, users_through_views
from infer.passes.tile_to_npu.program_tree import flatten
from infer.passes.tile_to_npu.rotation import (
    DegradeLevel,
    RotationPlan,
    double_buffered_allocs,
    plan_rotation,
)
from infer.passes.tile_to_npu.semaphores import OutOfSemaphores, allocate, fits
from infer.target import isa
from infer.target.asm import Program


class NotDecided(Exception):
    """Kernel by kernel cannot decide the degrade levels like the whole-function loop."""


def kernels_of(fn: func.FuncOp) -> list[list[Operation]]:
    """fn's top-level ops split into op-marker groups (the rule of
    markers.KernelGroups.add_top_level_op: a tile.alloc after code starts a new group); ops that
    emit nothing go with the group before them."""
    kernels: list[list[Operation]] = []
    emitted = False
    for op in fn.body.block.ops:
        if not isinstance(op, _NO_CODE) and (not kernels or (isinstance(op, t.AllocOp) and emitted)):
            kernels.append([])
            emitted = False
        if not kernels:
            kernels.append([])
        kernels[-1].append(op)
        if not isinstance(op, (_NO_CODE, t.AllocOp, t.ViewOp, t.WeightOp)):
            emitted = True
    return kernels


def kernel_shape(ops: list[Operation]) -> tuple:
    """What a kernel is, without where it is: each op's name, properties and attributes (a
    DRAM alloc's offset, a weight's offset, layer labels and the labels of prefetch moves and
    semaphore fallbacks left out), result types, and which
    values its operands are (numbered in order of first appearance). Kernels of one shape
    differ only in their DRAM buffers' places."""
    numbers: dict[SSAValue, int] = {}

    def number(value: SSAValue) -> int:
        n = numbers.get(value)
        if n is None:
            n = numbers[value] = len(numbers)
        return n

    shape = []
    for top in ops:
        for op in top.walk():
            dram_alloc = isinstance(op, t.AllocOp) and t.space_of(op.buffer) == "dram"
            fields = tuple((name, value) for name, value in (*op.properties.items(), *op.attributes.items())
                           if name not in _PLACEMENT and not (dram_alloc and name == "offset"))
            shape.append((op.name, fields, tuple(number(v) for v in op.operands),
                          tuple(r.type for r in op.results),
                          tuple(number(a) for region in op.regions for block in region.blocks
                                for a in block.args)))
            for r in op.results:
                number(r)
    return tuple(shape)


# (kernel_shape leaves them out: where a kernel is, and labels that name it or its moves)
_PLACEMENT = frozenset({"tile.layer", "tile.offset", t.HOISTED_ATTR, t.HOIST_ORIGIN_ATTR, t.SEMAPHORE_FALLBACK_ATTR})


class KernelByKernel:
    """One compilation of a function kernel by kernel (module docstring). `emissions` counts
    how often each kernel was emitted (1 + the times it was taken back)."""

    def __init__(self, codegen: CodeGenerator, pipelining: bool, repeats_start_alike: bool = True):
        self.codegen = codegen
        self.fn = codegen.fn
        self.pipelining = pipelining
        self.kernels = kernels_of(self.fn)
        self.kernel_of: dict[Operation, int] = {op: k for k, ops in enumerate(self.kernels)
                                                for op in ops}
        # double-buffered allocs by the top-level ops using them (their plan entries depend on
        # those ops' levels), in IR order
        self.allocs_used_in: dict[Operation, list[t.AllocOp]] = {}
        for alloc in double_buffered_allocs(self.fn):
            for top in dict.fromkeys(top_level_op(user, self.fn)
                                     for user in users_through_views(alloc.buffer)):
                self.allocs_used_in.setdefault(top, []).append(alloc)
        self.emissions: Counter[int] = Counter()
        # kernel_shape (numbered) -> the degrade levels of its top-level ops when a kernel of
        # that shape last fitted (`_start_like_before`); None: every kernel starts at the levels
        # it has
        self.levels_by_shape: dict[int, tuple[int, ...]] | None = {} if repeats_start_alike else None
        self.numbers_of_shapes: dict[tuple, int] = {}  # kernel_shape -> its number (_shape_of)
        self.shape_numbers: list[int | None] = [None] * len(self.kernels)
        # kernel j -> the kernels k >= j whose ops and double-buffered allocs are all in
        # kernels j .. k, with j the earliest (raising k's levels plans nothing before j again)
        self.first_emitted_of: dict[int, list[int]] = {}
        for k, ops in enumerate(self.kernels):
            first = min((self.kernel_of[top_level_op(alloc, self.fn)] for op in ops
                         for alloc in self.allocs_used_in.get(op, ())), default=k)
            self.first_emitted_of.setdefault(min(first, k), []).append(k)
        self.semaphore_count = min(codegen.hw.scalar.semaphores, isa.MAX_SEMAPHORES)
        self.item_before: list = []  # (while running) the top-level item before each kernel
        # (while running) per kernel that fitted: the earliest kernel it gave a signal to (or
        # itself), where the virtuals it created start
        self.reach: list[int] = []

    def run(self) -> tuple[Program, list[dict]]:
        codegen = self.codegen
        codegen.tracker.undo_log = []
        codegen.start()
        checkpoints: list[tuple] = []
        first_sequence: list[int] = []  # of each kernel's first engine instruction
        first_virtual: list[int] = []  # virtual semaphores created before each kernel
        self.reach = []
        self.item_before = []
        k = 0
        while True:
            while k < len(self.kernels):
                if k == len(checkpoints):
                    self._start_like_before(k)
                    checkpoints.append(codegen.checkpoint())
                    first_sequence.append(codegen.sequence + 1)
                    first_virtual.append(len(codegen.semaphores))
                    self.item_before.append(codegen.cursor.block[-1] if codegen.cursor.block else None)
                codegen.tracker.earliest_signalled = codegen.sequence + 1
                codegen.emit_kernel(self.kernels[k])
                self.emissions[k] += 1
                # the window: from the kernel before it, or from the kernel of the earliest
                # instruction it added a signal to (an overlap of semaphores there grew)
                reach = min(k, bisect.bisect_right(first_sequence, codegen.tracker.earliest_signalled) - 1)
                first = self._window(k, max(min(k - 1, reach), 0))
                # (the window's items use only virtuals created since: as few as physical ones fit)
                fits = len(codegen.semaphores) - first_virtual[first] <= self.semaphore_count
                failed = set() if fits else self._window_failures(first)
                if not failed:
                    del self.reach[k:]
                    self.reach.append(reach)
                    self._learn_levels(k)
                    k += 1
                    continue
                k = self._take_back(failed, checkpoints, first_sequence, first_virtual)
            try:
                result = codegen.finish()
            except OutOfSemaphores as e:
                # every window fitted but the whole program does not (a semaphore lives across
                # windows): the reference's rule on the kernels it names, and emit from there
                failed = {self.kernel_of[op] for op in e.items if op in self.kernel_of}
                if not failed:
                    raise NotDecided from None
                k = self._take_back(failed, checkpoints, first_sequence, first_virtual)
                continue
            codegen.tracker.undo_log = None
            return result

    def _shape_of(self, k: int) -> int:
        """Kernel k's shape as a number (kernels of one `kernel_shape` share it), made once:
        the shape tuple hashes every attribute of the kernel's ops."""
        number = self.shape_numbers[k]
        if number is None:
            number = self.shape_numbers[k] = self.numbers_of_shapes.setdefault(
                kernel_shape(self.kernels[k]), len(self.numbers_of_shapes))
        return number

    def _learn_levels(self, k: int) -> None:
        """Kernel k fitted: remember its ops' levels for the kernels of its shape after it."""
        if self.levels_by_shape is not None:
            degrade = self.codegen.degrade
            self.levels_by_shape[self._shape_of(k)] = tuple(
                degrade.get(op, 0) for op in self.kernels[k])

    def _start_like_before(self, j: int) -> None:
        """Before kernel j is first emitted: each kernel k that j is the first of
        (`first_emitted_of`) starts at the levels an earlier kernel of its shape
        (`kernel_shape`: ResNet's repeated blocks, a decoder's layers) fitted at, instead of
        failing its way up to them emission by emission (ResNet-50 on edge emitted 15 of its
        73 kernels three times: ~20 % of tile-to-npu). Now is the last moment k's levels can
        change without planning again an alloc of a kernel already emitted. The levels are a
        prediction: the window still checks that k fits, and raises it further if not."""
        if self.levels_by_shape is None:
            return
        codegen = self.codegen
        for k in self.first_emitted_of.get(j, ()):
            levels = self.levels_by_shape.get(self._shape_of(k))
            raised = [(op, level) for op, level in zip(self.kernels[k], levels or ())
                      if level > codegen.degrade.get(op, 0)]
            if not raised:
                continue
            for op, level in raised:
                codegen.degrade[op] = level
            allocs = list(dict.fromkeys(a for op, _ in raised for a in self.allocs_used_in.get(op, ())))
            if allocs:
                codegen.use_plan(_replace_entries(codegen.plan, plan_rotation(
                    self.fn, codegen.degrade_level, self.pipelining, allocs,
                    vector_queue=codegen.hw.queue_depth("vector")), allocs))

    def _window(self, k: int, first: int) -> int:
        """The first kernel of kernel k's window: from `first` (the kernel before k, or the
        kernel of the earliest instruction k gave a signal to) back to the reach of the
        kernels from `first` on: the virtuals those kernels created start there (a
        virtual of kernel j signalling an instruction of kernel i < j lives from i on), and a
        window cutting such a range short misses its overlap with what k added to their items.
        (Without this, a kernel whose dependency reached one kernel back fitted its window,
        the next kernel added a drain to its items in a window beginning with it, and the
        out-of-semaphores surfaced only in the whole program: the Llama prefill on edge then
        emitted 80 kernels again.)"""
        return min((self.reach[j] for j in range(first, min(k, len(self.reach)))), default=first)

    def _take_back(self, failed: set[int], checkpoints: list[tuple], first_sequence: list[int],
                   first_virtual: list[int]) -> int:
        """Degrade the failed kernels and roll the code generator back to the first kernel to
        emit again; returns that kernel."""
        back_to = self._degrade(failed)
        self.codegen.rollback(checkpoints[back_to])
        del checkpoints[back_to:], first_sequence[back_to:], first_virtual[back_to:]
        del self.item_before[back_to:], self.reach[back_to:]
        return back_to

    def _window_failures(self, first_kernel: int) -> set[int]:
        """The kernels from first_kernel on that do not fit, allocating the semaphores of
        their top-level items alone. (Items of earlier kernels are found by identity: relays
        inserted among them later are items of their own, labelled group 0 like main's.)"""
        block = self.codegen.cursor.block
        before = self.item_before[first_kernel]
        start = len(block)
        while start > 0 and block[start - 1] is not before:
            start -= 1
        if fits(block[start:], self.semaphore_count):  # (most windows: no flattening)
            return set()
        window: list = []
        flatten(block[start:], self.codegen.hw.scalar.loop_depth, window)
        return allocate(window, self.codegen.semaphores, self.semaphore_count).failed_groups

    def _degrade(self, failed: set[int]) -> int:
        """Raise the level of the failed kernels' top-level ops (below SHARED_PAIR_SEMAPHORES) and
        plan their allocs again; returns the kernel to emit again from."""
        codegen = self.codegen
        raised: list[Operation] = []
        back_to = len(self.kernels)
        for k in sorted(failed):  # (a kernel at the last level is left as it is, like the loop does)
            worse = [op for op in self.kernels[k]
                     if codegen.degrade.get(op, 0) < DegradeLevel.SHARED_PAIR_SEMAPHORES]
            for op in worse:
                codegen.degrade[op] = codegen.degrade.get(op, 0) + 1
            raised += worse
            back_to = min(back_to, k) if worse else back_to
        if not raised:  # (the loop fails here, with its own message)
            raise NotDecided
        allocs = list(dict.fromkeys(a for op in raised for a in self.allocs_used_in.get(op, ())))
        if allocs:
            old = codegen.plan
            new = _replace_entries(old, plan_rotation(self.fn, codegen.degrade_level, self.pipelining,
                                                      allocs, vector_queue=codegen.hw.queue_depth("vector")), allocs)
            for alloc in allocs:
                if _entries(old, alloc) != _entries(new, alloc):
                    back_to = min(back_to, self.kernel_of[top_level_op(alloc, self.fn)])
            codegen.use_plan(new)
        return back_to


def _entries(plan: RotationPlan, alloc: t.AllocOp) -> tuple:
    loop = plan.rotation_loop_of.get(alloc)
    return (loop, plan.first_use.get(alloc), plan.last_use.get(alloc),
            plan.ring_group_of.get(alloc), alloc in plan.token_takers, alloc in plan.token_givers,
            None if loop is None else tuple(plan.pipelined_loads.get(loop, ())),
            None if loop is None else tuple(plan.pipelined_preparation.get(loop, ())))


def _replace_entries(old: RotationPlan, part: RotationPlan, allocs: list[t.AllocOp]) -> RotationPlan:
    """old with the entries of `allocs` (and of their rotation loops) from `part`, a plan made
    for them alone: the plan of the whole function at the new levels. (An alloc's entries keep
    their order relative to the other allocs of its rotation loop, which all are in `allocs`:
    the order ring semaphores are created in.)"""
    gone = set(allocs)
    loops = {old.rotation_loop_of[a] for a in allocs if a in old.rotation_loop_of}
    plan = RotationPlan()
    for alloc, loop in old.rotation_loop_of.items():
        if alloc not in gone:
            plan.rotation_loop_of[alloc] = loop
            plan.first_use[alloc], plan.last_use[alloc] = old.first_use[alloc], old.last_use[alloc]
            if alloc in old.ring_group_of:
                plan.ring_group_of[alloc] = old.ring_group_of[alloc]
    plan.rotation_loops = (old.rotation_loops - loops) | part.rotation_loops
    plan.token_takers = (old.token_takers - gone) | part.token_takers
    plan.token_givers = (old.token_givers - gone) | part.token_givers
    plan.pipelined_loads = {loop: loads for loop, loads in old.pipelined_loads.items()
                            if loop not in loops}
    plan.pipelined_preparation = {loop: ops for loop, ops in old.pipelined_preparation.items()
                                  if loop not in loops}
    plan.rotation_loop_of.update(part.rotation_loop_of)
    plan.first_use.update(part.first_use)
    plan.last_use.update(part.last_use)
    plan.ring_group_of.update(part.ring_group_of)
    plan.pipelined_loads.update(part.pipelined_loads)
    plan.pipelined_preparation.update(part.pipelined_preparation)
    return plan
