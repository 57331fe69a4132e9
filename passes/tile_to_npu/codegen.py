"""The code generator of one tile function: walks the IR, turns each scf.for into hardware
loops (or inlined iterations), hands each tile op to instruction selection and every emitted
instruction to dependency tracking; then flattens the code, allocates the semaphores and
builds the op markers.

Stages (one module each): selection.py (tile op -> instructions), addressing.py (affine
addresses, address registers), dependencies.py (hazards, waits and signals), rotation.py
(double buffering, ring groups, software pipelining), semaphores.py (virtual -> physical),
markers.py (op markers), program_tree.py (the emitted code and its flattening).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from xdsl.dialects import arith, func, scf
from xdsl.ir import BlockArgument, Operation, SSAValue

from infer.dialects import tile as t
from infer.target.layout import DramLayout
from infer.passes.tile_to_npu.addressing import (
    Address,
    AddressRegisters,
    AffineIndex,
    LoopBinding,
    TileBuffer,
    constant_of,
    resolve,
    trip_index_of,
)
from infer.dialects.ir_io import LoweringError
from infer.passes.tile_to_npu.common import STAGE, CheckedInstructions, fail, memref_info, top_level_op
from infer.passes.tile_to_npu.dependencies import (
    Access,
    AccessRequest,
    DependencyTracker,
    loops_to_peel,
)
from infer.passes.tile_to_npu.markers import KernelGroups, op_markers
from infer.passes.tile_to_npu.program_tree import (
    EmissionCursor,
    FlatInstruction,
    HardwareLoop,
    Instruction,
    Item,
    flatten,
)
from infer.passes.tile_to_npu.rotation import DegradeLevel, DoubleBuffering, RotationPlan, plan_rotation
from infer.passes.tile_to_npu.selection import SELECTION, LoadedWeightTile
from infer.passes.tile_to_npu.semaphores import OutOfSemaphores, VirtualSemaphores, assign_physical_semaphores
from infer.target import isa
from infer.target.asm import Program
from infer.target.hw import HardwareConfig

MAX_INLINED_TRIP = 16  # longest loop emitted iteration by iteration when nesting runs out
# ops that emit nothing themselves (index arithmetic is folded into addresses)
_NO_CODE = (arith.ConstantOp, arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.CmpiOp, scf.YieldOp,
            func.ReturnOp)
_NO_CODE_TYPES = frozenset(_NO_CODE)


class CodeGenerator:
    """One compilation of a tile function at given degrade levels (top-level op -> level:
    rotation.DegradeLevel); `run` raises OutOfSemaphores naming the kernels that did not fit.
    kernels.py drives it kernel by kernel instead (`start`, `emit_kernel`, `checkpoint`,
    `rollback`, `finish`), taking back only a kernel that ran out of semaphores."""

    def __init__(self, hw: HardwareConfig, layout: DramLayout, fn: func.FuncOp,
                 pipelining: bool = True, degrade: dict[Operation, int] | None = None,
                 peeled_loops: set[scf.ForOp] | None = None, peel_first_rotating: bool = True):
        self.hw, self.layout, self.fn = hw, layout, fn
        # short outermost rotating loops emit their first iteration before the hardware loop
        # (emit_for; the driver compiles a function that runs out of semaphores without it)
        self.peel_first_rotating = peel_first_rotating
        self.degrade = degrade or {}
        self.buffers: dict[SSAValue, TileBuffer] = {}
        self.bindings: dict[scf.ForOp, LoopBinding] = {}
        self.innermost_loops: dict[int, bool] = {}  # id(scf.for) -> has no loop inside (_innermost)
        self.trips: dict[scf.ForOp, int | None] = {}  # each loop's trip count while emitted (None: varies)
        # loops holding ops guarded against their first iteration (`emit_if`): they peel it
        self.after_first_loops = {loop for o in fn.walk() if isinstance(o, scf.IfOp)
                                  if (loop := after_first_iteration(o)) is not None}
        self.cursor = EmissionCursor()
        self.sequence = 0  # of the last engine instruction emitted
        self.last_matrix_instruction: Instruction | None = None  # (a deferred epilogue's signal)
        self.clock = 0  # advances with every engine instruction and loop opened
        self.registers = AddressRegisters(hw.scalar.registers)
        self.semaphores = VirtualSemaphores()
        self.tracker = DependencyTracker(self.semaphores, self.cursor)
        self.weight_tile = LoadedWeightTile()
        # (the next tile.gather_rows op, the register holding its row offset): selection.py
        self.shared_gather_row: tuple[Operation, int] | None = None
        self.kernel_groups = KernelGroups()
        self.plan = plan_rotation(fn, self.degrade_level, pipelining, vector_queue=hw.queue_depth("vector"))
        self.double_buffering = DoubleBuffering(self.plan, self.semaphores, self.tracker,
                                                self.cursor, self.bindings, fn)
        self.peeled_loops = loops_to_peel(fn) if peeled_loops is None else peeled_loops
        self.checked = CheckedInstructions()
        self.op_fields: dict[int, object] = {}  # id(op) -> selection.OpFields

    def degrade_level(self, op: Operation) -> int:
        """The degrade level of the top-level op (kernel part) containing op."""
        return self.degrade.get(top_level_op(op, self.fn), 0)

    def run(self) -> tuple[Program, list[dict]]:
        """The program and its op markers."""
        self.start()
        self._emit_block(self.fn.body.block.ops, top_level=True)
        return self.finish()

    def start(self) -> None:
        """The function's arguments are DRAM buffers."""
        for i, arg in enumerate(self.fn.body.block.args):
            region = self.layout.args[i]
            shape, element, element_bytes = memref_info(arg.type)  # type: ignore[arg-type]
            self.buffers[arg] = TileBuffer("dram", region.offset, shape, element_bytes, element)

    def emit_kernel(self, ops: Iterable[Operation]) -> None:
        """Emit the top-level ops of one kernel (after `start` and the kernels before it)."""
        self._emit_block(ops, top_level=True)

    def checkpoint(self) -> tuple:
        """The state between two kernels, for `rollback` (after `tracker.undo_log` is set)."""
        assert not self.cursor.loops and not self.bindings
        return (dict(self.buffers), len(self.cursor.block), self.sequence, self.clock,
                self.registers.checkpoint(), len(self.semaphores), self.tracker.checkpoint(),
                (self.weight_tile.key, self.weight_tile.span), self.shared_gather_row,
                len(self.kernel_groups.groups), self.double_buffering.checkpoint())

    def rollback(self, state: tuple) -> None:
        """Forget everything emitted since `state` was taken: as if the kernels after it had
        never been emitted."""
        (buffers, items, self.sequence, self.clock, registers, semaphores, tracker,
         (self.weight_tile.key, self.weight_tile.span), self.shared_gather_row, groups,
         double_buffering) = state
        self.buffers.clear()
        self.buffers.update(buffers)
        self.tracker.rollback(tracker)  # (removes relays inserted among earlier items first)
        del self.cursor.block[items:]
        self.registers.rollback(registers)
        self.semaphores.forget_after(semaphores)
        self.kernel_groups.forget_after(groups)
        self.double_buffering.rollback(double_buffering)

    def use_plan(self, plan: RotationPlan) -> None:
        """Emit what follows with this rotation plan."""
        self.plan = plan
        self.double_buffering.use_plan(plan)

    def finish(self) -> tuple[Program, list[dict]]:
        """Flatten, allocate the semaphores, build the op markers."""
        program = [FlatInstruction("li", 0, 0, 0, dict(rd=reg, imm=0), 0, i)
                   for i, reg in enumerate(sorted(self.registers.used))]
        flatten(self.cursor.block, self.hw.scalar.loop_depth, program)
        program.append(FlatInstruction("halt", 0, 0, 0, {}, max(self.kernel_groups.current, 0),
                                       len(program)))
        program = assign_physical_semaphores(
            program, self.semaphores, min(self.hw.scalar.semaphores, isa.MAX_SEMAPHORES),
            self.kernel_groups.ops_of_group)
        make = self.checked.make
        instructions = [make(inst.name, inst.fields, inst.wait, inst.signal, inst.signal2, inst.wait2)
                        for inst in program]
        markers = op_markers(program, self.kernel_groups, self.buffers, self.layout, self.fn)
        out = Program(instructions)
        out.check_structure()
        return out, markers

    # ------------------------------------------------------------------ IR walk
    def _emit_block(self, ops: Iterable[Operation], top_level: bool = False) -> None:
        for op in ops:
            if type(op) in _NO_CODE_TYPES:  # (not isinstance: per op of every copy, ABC checks)
                continue
            if not top_level:
                self._lower(op)
                continue
            block = self.cursor.block
            tail = block[-1] if block else None
            self._start_top_level_item(op)
            self._lower(op)
            self._label_group(tail)

    def _start_top_level_item(self, op: Operation) -> None:
        """A top-level op joins (or starts) an op-marker group and starts a new live range for
        pair, drain and ring semaphores (except the pair semaphores a kernel's straight-line
        instructions share at DegradeLevel.SHARED_PAIR_SEMAPHORES: within one kernel, so a
        kernel's window of the allocation sees where they start)."""
        group = self.kernel_groups.current
        self.kernel_groups.add_top_level_op(op)
        self.tracker.start_top_level_item(
            shared_pairs=self.kernel_groups.current == group and not isinstance(op, scf.ForOp)
            and self.degrade_level(op) >= DegradeLevel.SHARED_PAIR_SEMAPHORES)
        self.double_buffering.start_top_level_item()

    def _label_group(self, tail: Item | None) -> None:
        """The top-level items after the previous op's last one (`tail`) are this op's, except
        fan-out relays of that last instruction (add_signal inserts relays after their
        producer, also while a later op is emitted: an index-based range would shift)."""
        relays = tail.relays if isinstance(tail, Instruction) and tail.relays else []
        previous = [] if tail is None else [tail, *relays]
        for item in reversed(self.cursor.block):
            if any(item is p for p in previous):
                item.group = tail.group  # type: ignore[union-attr]
                if item is tail:
                    break
                continue
            item.group = self.kernel_groups.current

    def _lower(self, op: Operation) -> None:
        lower = _LOWERING.get(type(op))
        if lower is None:
            raise fail(op, "unsupported op in a tile-level function")
        try:
            lower(self, op)
        except LoweringError as e:  # a stage's error naming no op (out of registers, ...): locate it
            message = str(e)
            if isinstance(e, OutOfSemaphores) or ": error: " in message:
                raise
            raise fail(op, message.removeprefix(f"{STAGE}: ")) from None

    # ------------------------------------------------------------------ loops
    def emit_for(self, op: scf.ForOp) -> None:
        """scf.for with constant bounds: trip 0 is dropped, short loops and loops beyond the
        nesting depth are inlined, others become a hardware loop (a rotation loop's body is
        emitted twice, one copy per half; the first and/or last iterations may be peeled)."""
        if op.iter_args:
            raise fail(op, "loops with iter_args are not supported")
        if isinstance(op.ub.owner, t.LoadIndexOp):
            self._emit_runtime_for(op, op.ub.owner)
            return
        trip_index = trip_index_of(op)
        trips = self.resolve(trip_index)  # fixed enclosing iterations fold into the immediate
        if trips.register_key:  # the trip count varies with an enclosing hardware loop
            self._emit_affine_for(op, trip_index, trips)
            return
        trip = max(0, trips.immediate)
        self.trips[op] = trip
        body = list(op.body.block.ops)
        unroll = 2 if op in self.plan.rotation_loops else 1
        rings = self.double_buffering.enter_rotation_loop(op)
        loop_depth = self.hw.scalar.loop_depth
        # ops guarded by `scf.if iv != lower bound` (`after_first_iteration`) are skipped in the
        # first iteration only: it is peeled, so every copy of the body decides statically
        after_first = op in self.after_first_loops
        if (op in self.plan.pipelined_loads and trip >= 4 and len(self.cursor.loops) + 1 <= loop_depth
                and not after_first and (self.plan.pipelined_loads[op] or op in self.plan.pipelined_preparation
                                         or self._defers_epilogue(op, trip, 0))):
            self._emit_pipelined_for(op, trip, body)
            self.double_buffering.leave_rotation_loop(rings)
            return
        # innermost non-rotating loops and short outermost rotating ones (peel_first_rotating):
        # the first iteration goes before the hardware loop, so a dependency entering the loop
        # is a semaphore pair, not a front-end wait (a wait for every iteration's producers
        # before the first iteration: a kernel's k loop reading the kernel before's result by
        # column blocks waited for all of it, MiniLM's FFN down projection on server). Not in
        # nests: every enclosing iteration would copy the body once more (the edge GEMM of
        # test_tile_to_npu.py: 170 -> 310 instructions).
        peeled_first = 1 if ((unroll == 1 and trip >= 3 and self._innermost(op)) or after_first
                             or (self.peel_first_rotating and unroll == 2 and trip >= 4
                                 and not self.cursor.loops and self._body_ops(op) <= PEELED_BODY_OPS)) else 0
        hardware_trips = (trip - peeled_first) // unroll
        if op in self.peeled_loops and hardware_trips >= 1:
            hardware_trips -= 1  # the last iteration(s) follow the loop: exit dependencies stay local
        too_deep = len(self.cursor.loops) + 1 > loop_depth
        if trip == 0:
            pass
        elif hardware_trips <= 1 or (too_deep and trip <= MAX_INLINED_TRIP):
            # (a short loop beyond the hardware's nesting depth is emitted iteration by
            # iteration: bounded code growth instead of a failed compile)
            for iteration in range(trip):
                self.weight_tile.forget()
                self._emit_iteration(op, iteration, body)
        else:
            for iteration in range(peeled_first):
                self.weight_tile.forget()
                self._emit_iteration(op, iteration, body)
            if too_deep:
                raise fail(op, f"loop nest deeper than scalar.loop_depth = {loop_depth} "
                           "(after inlining single-iteration loops)")
            loop, outer_block = self.open_loop(hardware_trips, op)
            for copy in range(unroll):
                self.weight_tile.forget()
                self.bindings[op] = LoopBinding(hardware_loop=loop, unroll=unroll,
                                                offset=copy + peeled_first, round=object(), trip=trip)
                self._emit_block(body)
            self.close_loop(loop, outer_block, op)
            self.weight_tile.forget()
            for iteration in range(peeled_first + hardware_trips * unroll, trip):
                self._emit_iteration(op, iteration, body)
        self.bindings.pop(op, None)
        self.double_buffering.leave_rotation_loop(rings)

    def emit_if(self, op: scf.IfOp) -> None:
        """`scf.if %iv != %lower` of an enclosing scf.for (`Emitter.after_first`): the
        then-block where this copy of the loop's body is not its first iteration, which every
        copy knows statically (the loop peels its first iteration); the else-block otherwise."""
        loop = after_first_iteration(op)
        if loop is None:
            raise fail(op, "scf.if is supported only on `iv != lower bound` of an enclosing scf.for")
        binding = self.bindings.get(loop)
        if binding is None:
            raise fail(op, "scf.if outside the emission of its loop")
        if binding.iteration is not None:
            first = binding.iteration == 0
        elif binding.hardware_loop is not None and binding.from_end == 0 and binding.offset >= 1:
            first = False
        else:
            raise fail(op, "scf.if on a loop's first iteration in a copy that may be the first")
        region = op.false_region if first else op.true_region
        if region.blocks:
            self._emit_block(list(region.block.ops))

    def _body_ops(self, op: scf.ForOp) -> int:
        """How many tile ops op's body holds (nested loops' bodies counted once)."""
        return sum(1 for o in op.body.walk() if isinstance(o, t.TileOp))

    def _innermost(self, op: scf.ForOp) -> bool:
        """Is op a loop with no loop inside (asked per emitted copy of it: kept)?"""
        innermost = self.innermost_loops.get(id(op))
        if innermost is None:
            innermost = self.innermost_loops[id(op)] = not any(
                isinstance(o, scf.ForOp) for o in op.body.walk())
        return innermost

    def _emit_runtime_for(self, op: scf.ForOp, bound: t.LoadIndexOp) -> None:
        """scf.for 0 .. tile.load_index step 1: `ld` (`lds`) the trip count into a register, one
        hardware loop `loop count=rC` (never unrolled, peeled, pipelined or inlined; the
        address registers it steps are reset by `muli`/`add` of the count). Dependencies
        leaving it would need a run-time number of drain waits: a `fence` after it instead
        (everything it issued is complete), so nothing after it synchronises with its body."""
        if constant_of(op.lb, op, "lower bound") != 0 or constant_of(op.step, op, "step") != 1:
            raise fail(op, "a loop with a run-time bound must count from 0 in steps of 1")
        if len(self.cursor.loops) + 1 > self.hw.scalar.loop_depth:
            raise fail(op, f"loop nest deeper than scalar.loop_depth = {self.hw.scalar.loop_depth}")
        source = self.buffers[bound.buffer]
        at = self.resolve(self.tile_address(source, list(bound.buffer_indices), bound))
        count_register = self.registers.take_scratch(op)
        reset_register = self.registers.take_scratch(op)
        local = source.space != "dram"  # a count kept in the scratchpad: `lds`
        ld = Instruction("lds" if local else "ld",
                         dict(rd=count_register, addr_base=self.registers.register_for(at.register_key),
                              addr=at.immediate), "scalar", self.cursor.loops, self.next_sequence())
        self.tracker.synchronise_scalar_read(ld, at.low, at.high + 4, "local" if local else "dram")
        self.cursor.block.append(ld)
        ld.home_block = self.cursor.block
        loop, outer_block = self.open_loop(bound.bound.value.data, op)
        loop.count_register, loop.reset_register = count_register, reset_register
        self.weight_tile.forget()
        self.bindings[op] = LoopBinding(hardware_loop=loop, unroll=1, offset=0, round=object())
        self._emit_block(list(op.body.block.ops))
        self.close_loop(loop, outer_block, op)
        if loop.exit_drains or loop.exit_signals:
            raise fail(op, "a dependency leaves a loop with a run-time bound through a drain "
                       "semaphore (not supported)")
        self.weight_tile.forget()
        self.bindings.pop(op, None)
        self.clock += 1
        self.cursor.block.append(Instruction("fence", {}, "scalar", self.cursor.loops))
        for access in self.tracker.accesses[loop.first_access:]:
            inside = access.instruction
            self.tracker.cover_all_engines(inside)
            if inside.drain_loop is None:
                inside.drain_loop = loop
        for register in (count_register, reset_register):  # registers are 0 when not in use
            self.cursor.block.append(Instruction("li", dict(rd=register, imm=0), "scalar",
                                                 self.cursor.loops))
            self.registers.give_back_scratch(register, self.clock)

    def _emit_affine_for(self, op: scf.ForOp, trip_index: AffineIndex, trips: Address) -> None:
        """A loop whose trip count is affine in enclosing hardware loops (a triangular nest:
        causal attention's key tiles up to the query tile). One hardware loop whose count is
        `count_base + count` (count_base: an address register the enclosing loops step), kept
        a rotation / software-pipelined loop: iteration 0 is a fixed copy before it (so is
        iteration 1's loads when pipelined), the last `tail` iterations fixed copies after it,
        counted from the end (their addresses are affine in the enclosing loops too), and the
        hardware loop runs the `unroll`-sized groups between. The count must grow by multiples
        of `unroll` (so every copy keeps its double-buffer half) and be >= 1 + tail. A `fence`
        follows the hardware loop: the dependencies leaving it would otherwise need a drain
        of a run-time number of tokens (everything it issued is complete after the fence)."""
        unroll = 2 if op in self.plan.rotation_loops else 1
        first_trip = trips.immediate  # at the first iteration of every varying enclosing loop
        tail = (first_trip - 2) % unroll + 1
        if any(c <= 0 or c % unroll for _, c in trips.register_key):
            raise fail(op, f"a loop bound affine in enclosing loops must grow by a positive multiple "
                       f"of {unroll} iterations per enclosing iteration (double-buffer halves)")
        if first_trip < 1 + tail:
            raise fail(op, f"a loop bound affine in enclosing loops needs at least {1 + tail} "
                       f"iterations, got {first_trip}")
        if len(self.cursor.loops) + 1 > self.hw.scalar.loop_depth:
            raise fail(op, f"loop nest deeper than scalar.loop_depth = {self.hw.scalar.loop_depth}")
        self.trips[op] = None
        body = list(op.body.block.ops)
        rings = self.double_buffering.enter_rotation_loop(op)
        loads = self.plan.pipelined_loads.get(op, [])
        pipelined = bool(loads)  # (preparation without loads is planned for constant bounds only)
        rest = [o for o in body if o not in loads]
        count_register = self.registers.register_for(
            tuple((loop, c // unroll) for loop, c in trips.register_key))
        reset_register = self.registers.take_scratch(op)
        self.weight_tile.forget()
        if pipelined:
            self.double_buffering.start_pipelined_loop(loads)
            declarations = [o for o in body if isinstance(o, (t.AllocOp, t.ViewOp, t.WeightOp))]
            self._emit_iteration(op, 0, declarations + loads)
            self.weight_tile.forget()
            self._emit_iteration(op, 1, loads)
            self.weight_tile.forget()
            self._emit_iteration(op, 0, rest)
            groups = [[(loads, copy + 2), (rest, copy + 1)] for copy in range(2)]
        else:
            self._emit_iteration(op, 0, body)
            groups = [[(body, copy + 1)] for copy in range(unroll)]
        loop, outer_block = self.open_loop((trips.high - 1 - tail) // unroll, op)
        loop.count_register, loop.reset_register = count_register, reset_register
        loop.count_immediate = (first_trip - 1 - tail) // unroll
        for group in groups:
            for ops, offset in group:
                self.weight_tile.forget()
                self.bindings[op] = LoopBinding(hardware_loop=loop, unroll=unroll, offset=offset,
                                                round=object())
                self._emit_block(ops)
        self.close_loop(loop, outer_block, op)
        if loop.exit_drains or loop.exit_signals:
            raise fail(op, "a dependency leaves a loop with a varying trip count through a drain "
                       "semaphore (not supported)")
        self.clock += 1
        self.cursor.block.append(Instruction("fence", {}, "scalar", self.cursor.loops))
        for access in self.tracker.accesses[loop.first_access:]:
            self.tracker.cover_all_engines(access.instruction)
            if access.instruction.drain_loop is None:
                access.instruction.drain_loop = loop
        self.cursor.block.append(Instruction("li", dict(rd=reset_register, imm=0), "scalar",
                                             self.cursor.loops))
        self.registers.give_back_scratch(reset_register, self.clock)

        def from_end(k: int, ops: list[Operation]) -> None:
            self.weight_tile.forget()
            self.bindings[op] = LoopBinding(from_end=k, trip_index=trip_index,
                                            parity=(first_trip - k) % 2, round=object())
            self._emit_block(ops)

        for k in range(tail, 0, -1):
            if pipelined:
                if k > 1:
                    from_end(k - 1, loads)
                from_end(k, rest)
            else:
                from_end(k, body)
        if pipelined:
            self.double_buffering.end_pipelined_loop(loads)
        self.bindings.pop(op, None)
        self.double_buffering.leave_rotation_loop(rings)

    def _emit_iteration(self, op: scf.ForOp, iteration: int, ops: list[Operation],
                        round_: object | None = None) -> None:
        """One inlined (or peeled) iteration of op's body, or of some of its ops."""
        self.bindings[op] = LoopBinding(iteration=iteration,
                                        round=object() if round_ is None else round_,
                                        trip=self.trips.get(op))
        self._emit_block(ops)

    def _emit_pipelined_for(self, op: scf.ForOp, trip: int, body: list[Operation]) -> None:
        """Software-pipelined rotation loop: the DMA loads of iteration t+1 are issued before
        the rest of iteration t (into the other half of their double buffer), so they land
        while iteration t computes however deep the engine queues hold the front end.

            prologue:  loads(0)
            loop J x:  loads(2j+1) rest(2j)  loads(2j+2) rest(2j+1)   (halves 1,0 / 0,1)
            epilogue:  [loads(t+1)] rest(t) for t = 2J .. trip-1

        Each load signals the loop's "full" semaphore once; the first consumer of its buffer in
        the matching iteration waits for it once (loads and first consumers are in the same
        order, so the FIFO tokens pair up). Reuse of a half is still guarded by its "free"
        semaphore: loads(t+1) writes the half that rest(t-1) released.

        With pipelined preparation (rotation.pipelinable_preparation; docs/codegen.md): the
        loads go two iterations ahead and their vector preparation one,

            prologue:  loads(0) loads(1) prep(0)
            loop J x:  loads(2j+2) prep(2j+1) rest(2j)  loads(2j+3) prep(2j+2) rest(2j+1)
            epilogue:  [loads(t+2)] [prep(t+1)] rest(t) for t = 2J .. trip-1

        the preparation taking the loads' tokens, and the first matrix instruction of rest(t)
        reading a prepared buffer the token of prep(t)'s last op. Preparation without loads
        (of data on chip before the loop: the output the kernel before kept there) is the same
        without the loads' stage: prep(0), then prep(t+1) rest(t).

        With a deferred epilogue (rotation.deferrable_epilogue; docs/codegen.md, "Deferred
        epilogue") the ops after the body's last matrix op go one iteration behind,

            loop J x:  loads(t+1) compute(t) epilogue(t-1)

        each iteration's last matrix instruction signalling a "computed" semaphore that the
        epilogue's first vector op on the accumulator tiles takes. The stages are emitted by a
        virtual iteration v (each stage's ops for iteration v + its lead, where that is one of
        the loop's); the hardware loop holds the v's whose every stage is."""
        loads = self.plan.pipelined_loads[op]
        preparation = self.plan.pipelined_preparation.get(op, [])
        rest = [o for o in body if o not in loads and o not in preparation]
        self.double_buffering.start_pipelined_loop(loads, preparation)
        declarations = [o for o in body if isinstance(o, (t.AllocOp, t.ViewOp, t.WeightOp))]
        # stages by iterations ahead of the matrix ops: the loads (and their preparation)
        # ahead, a deferred epilogue one behind
        stages: list[tuple[list, int]] = [(loads, 1)] if loads else []
        if preparation:  # (without loads: the data it prepares was on chip before the loop)
            stages = ([(loads, 2)] if loads else []) + [(preparation, 1)]
        # (neither: a loop planned for its deferred epilogue alone)
        ahead = stages[0][1] if stages else 0
        epilogue = self.plan.deferred_epilogue.get(op) if self._defers_epilogue(op, trip, ahead) else None
        computed = 0
        if epilogue is not None:
            rest = [o for o in rest if o not in epilogue.ops]
            computed = self.double_buffering.start_deferred_epilogue(epilogue)
        stages.append((rest, 0))
        if epilogue is not None:
            stages.append((epilogue.ops, -1))
        behind = -stages[-1][1]

        def emit_stage(ops: list, binding: LoopBinding, head: Sequence[Operation] = ()) -> None:
            self.weight_tile.forget()
            self.bindings[op] = binding
            matrix_before = self.last_matrix_instruction
            self._emit_block([*head, *ops])
            if computed and ops is rest:  # the iteration's last matrix instruction signals
                last = self.last_matrix_instruction
                if last is None or last is matrix_before or len(last.loops) != len(self.cursor.loops):
                    raise fail(op, "a deferred epilogue needs its iteration's last matrix "
                               "instruction outside nested hardware loops")
                self.tracker.add_signal(last, computed)

        pending = [declarations]  # emitted with the first stage

        def emit_fixed(v: int) -> None:
            """The stages of virtual iteration v that are iterations of the loop."""
            for ops, lead in stages:
                if 0 <= v + lead < trip:
                    emit_stage(ops, LoopBinding(iteration=v + lead, round=object(), trip=self.trips.get(op)),
                               pending.pop() if pending else ())

        for v in range(-ahead, behind):  # the prologue: loads(0) [loads(1) prep(0)] [rest(0)]
            emit_fixed(v)
        hardware_trips = (trip - ahead - behind) // 2
        loop, outer_block = self.open_loop(hardware_trips, op)
        for copy in range(2):
            for ops, lead in stages:
                emit_stage(ops, LoopBinding(hardware_loop=loop, unroll=2, offset=copy + behind + lead,
                                            round=object(), trip=trip))
        self.close_loop(loop, outer_block, op)
        for v in range(behind + 2 * hardware_trips, trip + behind):
            emit_fixed(v)
        self.bindings.pop(op, None)
        if epilogue is not None:
            self.double_buffering.end_deferred_epilogue()
        self.double_buffering.end_pipelined_loop(loads, preparation)

    def _defers_epilogue(self, op: scf.ForOp, trip: int, ahead: int) -> bool:
        """Whether the pipelined loop op (its stages `ahead` iterations ahead of the matrix ops)
        issues its planned deferred epilogue one iteration behind. Not an epilogue the vector
        queue holds: it does not keep the front end from the next iteration's matmuls, and
        deferred it would start late, releasing the accumulator half the iteration after next
        needs (ResNet-50's 1x1 256->512 at stride 2 on edge: two vector ops behind 112 matmuls,
        587,932 -> 623,940 cycles). Nor without a hardware loop left: the copies would be the
        program."""
        epilogue = self.plan.deferred_epilogue.get(op)
        return (epilogue is not None and epilogue.vector_ops > self.hw.queue_depth("vector")
                and (trip - ahead - 1) // 2 >= 1)

    def open_loop(self, count: int, source_loop: scf.ForOp | None = None
                  ) -> tuple[HardwareLoop, list[Item]]:
        """Start emitting a hardware loop's body; returns the loop and the enclosing block."""
        self.clock += 1
        loop = HardwareLoop(count, len(self.cursor.loops) + 1,
                            first_access=len(self.tracker.accesses), source_loop=source_loop,
                            opened_at=self.clock)
        self.cursor.block.append(loop)
        outer_block, self.cursor.block = self.cursor.block, loop.body
        self.cursor.loops = self.cursor.loops + (loop,)
        return loop, outer_block

    def close_loop(self, loop: HardwareLoop, outer_block: list[Item], op: Operation) -> None:
        """Finish a hardware loop: loop-carried dependencies, then its registers are free."""
        self.tracker.synchronise_loop_carried(loop, op, self.plan.rotation_loop_of)
        self.cursor.loops = self.cursor.loops[:-1]
        self.cursor.block = outer_block
        self.registers.release_loop(loop, self.clock)

    # ------------------------------------------------------------------ addresses
    def tile_address(self, buffer: TileBuffer, indices, op: Operation) -> AffineIndex:
        """The byte address of buffer[indices] in the body copy being emitted (the half of a
        double buffer this copy uses)."""
        address = buffer.element_address(indices, op)
        if buffer.rotating_alloc is not None:
            address = address + AffineIndex(self.double_buffering.half_offset(buffer), {})
        return address

    def resolve(self, index: AffineIndex) -> Address:
        return resolve(index, self.bindings)

    def next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence

    # ------------------------------------------------------------------ emission
    def emit(self, op: Operation, name: str, engine: str, fields: dict[str, int],
             requests: list[AccessRequest], first_part: bool = True,
             last_part: bool = True) -> Instruction:
        """Append one engine instruction of op, synchronised after every conflicting earlier
        access of the other engines. `first_part`/`last_part`: is it the first/last
        instruction of op (an op emitted as several takes double-buffer tokens on its first
        and releases them on its last)."""
        inst = Instruction(name, fields, engine, self.cursor.loops, self.next_sequence())
        self.clock += 1
        if engine == "matrix":
            self.last_matrix_instruction = inst
        releases: list[tuple[int, t.AllocOp]] = []
        accesses: list[Access] = []
        for request in requests:
            writes = request.writes
            if request.ring is not None:
                round_edge, release = self.double_buffering.on_access(
                    inst, op, request.ring, first_part, last_part)
                writes = writes or round_edge
                if release is not None:
                    releases.append(release)
            accesses.append(Access(request.low, request.high, request.space, writes, inst,
                                   request.ring, request.pitch, request.width, request.steps))
            if writes:  # the array's weight tile may have been overwritten in memory
                self.weight_tile.note_write(request.space, request.low, request.high)
        self.tracker.synchronise_with_earlier(inst, accesses)
        try:
            self.checked.make(name, fields)
        except isa.EncodingError as e:
            raise fail(op, f"cannot encode {name}: {e}") from None
        self.cursor.block.append(inst)
        inst.home_block = self.cursor.block
        self.tracker.record(accesses)
        for semaphore, alloc in releases:
            self.double_buffering.release(inst, semaphore, alloc)
        prepared = self.double_buffering.preparation_signals.get(op)
        if prepared is not None and last_part:  # (pipelined preparation: its matmuls wait)
            self.tracker.add_signal(inst, prepared)
        return inst


_LOWERING = {scf.ForOp: CodeGenerator.emit_for, scf.IfOp: CodeGenerator.emit_if, **SELECTION}


def after_first_iteration(op: scf.IfOp) -> scf.ForOp | None:
    """The loop whose first iteration `op` tests for (`scf.if %iv != %lower`, no results), if
    that is its condition."""
    cond = op.cond.owner
    if op.results or not isinstance(cond, arith.CmpiOp) or cond.predicate.value.data != 1:  # ne
        return None
    for iv, lower in ((cond.lhs, cond.rhs), (cond.rhs, cond.lhs)):
        loop = iv.owner.parent_op() if isinstance(iv, BlockArgument) else None
        if isinstance(loop, scf.ForOp) and iv is loop.body.block.args[0] and lower is loop.lb:
            return loop
    return None


#: an outermost rotating loop of 4 or more iterations emits its first iteration before the
#: hardware loop (emit_for, `peel_first_rotating`) when its body holds at most this many tile
#: ops (a conv's row-tile loop, dozens of ops, would grow the program by a body copy for
#: little: ResNet-50's fp32 edge program 49.4 K -> 51.2 K instructions for 0.01 % of its cycles)
PEELED_BODY_OPS = 16
