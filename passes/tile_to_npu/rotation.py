"""Buffer rotation: double-buffer ring planning, ring groups and software pipelining
(docs/codegen.md, "Double buffering", "Software pipelining" and "Pipelined preparation").

A `tile.alloc {buffers = 2}` rotates between its halves over the iterations of the innermost
loop containing all its uses (its rotation loop, emitted twice: half 0, half 1). Each half
has a "free" semaphore holding one token when idle: the first access of a half in a round
takes it, the last access gives it back. Allocs of one rotation loop whose first accesses run
on engine Y and last accesses on engine X != Y share one free semaphore per half (a ring
group): engines start and retire in order, so the group's first take and last release cover
every member. A pipelined rotation loop issues the DMA loads of iteration t+1 before the rest
of iteration t and pairs each load with its buffer's first consumer by one "full" semaphore;
where the loads only feed vector ops preparing their data for the matrix unit, those ops are
issued one iteration ahead and the loads two ("Pipelined preparation").

`plan_rotation` decides all that from the IR (and the degrade levels); `DoubleBuffering` is
the emission-time side: the half and round of each access and the semaphore tokens.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from xdsl.dialects import func, scf
from xdsl.ir import BlockArgument, Operation, SSAValue

from infer.dialects import tile as t
from infer.passes.tile_to_npu.addressing import LoopBinding, TileBuffer
from infer.passes.tile_to_npu.common import (
    accessed_buffers,
    constant_bounds,
    enclosing_loops,
    engine_of,
    is_output_argument,
    root_buffer,
    trip_count,
    users_through_views,
)
from infer.passes.tile_to_npu.dependencies import DependencyTracker, RingSlot, iterations_inside
from infer.passes.tile_to_npu.program_tree import EmissionCursor, Instruction, front_end_nop
from infer.passes.tile_to_npu.semaphores import SemaphoreKind, VirtualSemaphores


class DegradeLevel(enum.IntEnum):
    """How much overlap a kernel that ran out of semaphores gives up (the driver raises a
    kernel's level by one per failed attempt)."""

    FULL_OVERLAP = 0
    # the loads' vector preparation (and a deferred epilogue) stay in their iteration
    NO_PIPELINED_PREPARATION = 1
    SHARED_RING_CHAINS = 2  # a buffer filled from another's last access shares its free semaphores
    NO_OUTER_DOUBLE_BUFFERING = 3  # no rotation on loops that contain another rotation loop
    NO_PIPELINING = 4
    NO_DOUBLE_BUFFERING = 5
    # the kernel's top-level instructions share one pair semaphore per engine pair for their
    # engine waits (tokens consumed in the order signalled) instead of one per instruction:
    # straight-line code whose producers all come before their consumers (a stride-3 conv's
    # nine split window planes on edge: 17 live semaphores of 16)
    SHARED_PAIR_SEMAPHORES = 6


class RingGroupKey(NamedTuple):
    """The allocs sharing one free semaphore per half."""

    rotation_loop: scf.ForOp
    first_engine: str  # the engine of the members' first accesses (takes the token)
    last_engine: str  # the engine of their last accesses (releases it)
    pipelined: bool  # members are software-pipelined loads (issued ahead of the body)


class DeferredEpilogue(NamedTuple):
    ops: list[Operation]  # the body's ops after its last matrix op
    computed: set[t.AllocOp]  # what they read of the matrix ops' results (accumulator tiles)
    vector_ops: int  # vector instructions per iteration (ops times the trips of loops among them)


@dataclass
class RotationPlan:
    rotation_loop_of: dict[t.AllocOp, scf.ForOp] = field(default_factory=dict)
    rotation_loops: set[scf.ForOp] = field(default_factory=set)
    first_use: dict[t.AllocOp, Operation] = field(default_factory=dict)
    last_use: dict[t.AllocOp, Operation] = field(default_factory=dict)
    # no entry when one engine does both the first and the last access (nothing to wait for)
    ring_group_of: dict[t.AllocOp, RingGroupKey] = field(default_factory=dict)
    token_takers: set[t.AllocOp] = field(default_factory=set)  # first access takes the token
    token_givers: set[t.AllocOp] = field(default_factory=set)  # last access releases it
    # rotation loop -> its DMA loads issued one iteration ahead (software pipelining)
    pipelined_loads: dict[scf.ForOp, list[t.DmaOp]] = field(default_factory=dict)
    # rotation loop -> the vector ops preparing its loads' data (`pipelinable_preparation`):
    # issued one iteration ahead, their loads two
    pipelined_preparation: dict[scf.ForOp, list[t.VectorOp]] = field(default_factory=dict)
    # pipelined rotation loop -> the ops after its last matrix op (`deferrable_epilogue`):
    # issued one iteration behind, after the next iteration's matrix ops
    deferred_epilogue: dict[scf.ForOp, DeferredEpilogue] = field(default_factory=dict)


def double_buffered_allocs(fn: func.FuncOp) -> list[t.AllocOp]:
    """The allocs a rotation plan is made for, in IR order."""
    return [op for op in fn.walk() if isinstance(op, t.AllocOp) and op.buffers.value.data == 2]


def plan_rotation(fn: func.FuncOp, degrade_level_of: Callable[[Operation], int],
                  pipelining: bool, allocs: Iterable[t.AllocOp] | None = None, *,
                  vector_queue: int) -> RotationPlan:
    """The rotation plan of fn's double-buffered `allocs` (default: all, in IR order). An
    alloc's rotation loop, and so its entries, depend on the degrade level of the top-level
    op holding its uses only: a plan for the allocs used in some top-level ops replaces
    their entries in the plan of all (kernels.py). `vector_queue`: the vector unit's queue
    depth (a deferred epilogue longer than it is worth a load issued late)."""
    plan = RotationPlan()
    for alloc in double_buffered_allocs(fn) if allocs is None else allocs:
        users = users_through_views(alloc.buffer)
        if not users:
            continue
        common_loops = None
        for user in users:
            chain = enclosing_loops(user, fn)
            common_loops = chain if common_loops is None else [
                loop for loop in common_loops if loop in chain]
        # the innermost loop containing every use, with >= 2 iterations
        for loop in reversed(common_loops or []):
            if trip_count(loop) >= 2:
                if degrade_level_of(loop) >= DegradeLevel.NO_DOUBLE_BUFFERING:
                    break
                plan.rotation_loop_of[alloc] = loop
                plan.rotation_loops.add(loop)
                ordered = [o for o in loop.walk() if o in users]
                plan.first_use[alloc], plan.last_use[alloc] = ordered[0], ordered[-1]
                break
    outer = {loop for loop in plan.rotation_loops
             if degrade_level_of(loop) >= DegradeLevel.NO_OUTER_DOUBLE_BUFFERING
             and any(o in plan.rotation_loops for o in loop.walk() if o is not loop)}
    for alloc in [a for a, loop in plan.rotation_loop_of.items() if loop in outer]:
        del plan.rotation_loop_of[alloc], plan.first_use[alloc], plan.last_use[alloc]
    plan.rotation_loops -= outer
    for loop in plan.rotation_loops if pipelining else ():
        if degrade_level_of(loop) < DegradeLevel.NO_PIPELINING:
            _plan_pipelining(loop, plan, fn, degrade_level_of(loop) < DegradeLevel.NO_PIPELINED_PREPARATION,
                             vector_queue)
    _plan_ring_groups(plan, {loop for loop in plan.rotation_loops
                             if degrade_level_of(loop) >= DegradeLevel.SHARED_RING_CHAINS})
    return plan


def _plan_pipelining(loop: scf.ForOp, plan: RotationPlan, fn: func.FuncOp, staged: bool,
                     vector_queue: int) -> None:
    """The software pipelining of rotation loop `loop`: its loads issued an iteration ahead,
    with `staged` (the degrade level allows it) their preparation too and the epilogue one
    iteration behind (`deferrable_epilogue`)."""
    loads = pipelinable_loads(loop, plan, fn)
    # (preparation without loads: its data is on chip before the loop, e.g. the output the
    # kernel before kept there; only with constant bounds, the emission of
    # `CodeGenerator._emit_pipelined_for`)
    preparation = (pipelinable_preparation(loop, plan, loads) if staged and (loads or constant_bounds(loop))
                   else [])
    epilogue = None
    if staged and (loads or preparation or constant_bounds(loop)):
        # (neither loads nor preparation: the operands were on chip before the loop, weights
        # prefetched whole or a window built once, but the epilogue can still go behind)
        epilogue = deferrable_epilogue(loop, plan, loads, preparation)
        if epilogue is None and loads and _epilogue_loads(loop, loads) == loads:
            # loads only the epilogue reads (a residual tile) cannot go ahead of a deferred
            # epilogue (they would write the half the epilogue before still reads): they go
            # with the epilogue, issued when the front end reaches it, where the long
            # epilogue held the front end from the next iteration's matmuls (ResNet-50's
            # stage-4 1x1 convs on server, "channels" orientation: 49 column adds). Not
            # beside loads that stay ahead: the in-order load engine would put them behind
            # the next iteration's (edge: its weight blocks)
            kept: list[t.DmaOp] = []
            deferred = deferrable_epilogue(loop, plan, kept, preparation)
            if deferred is not None and deferred.vector_ops > vector_queue:
                loads, epilogue = kept, deferred
    if loads or preparation or epilogue is not None:
        plan.pipelined_loads[loop] = loads
        if preparation:
            plan.pipelined_preparation[loop] = preparation
        if epilogue is not None:
            plan.deferred_epilogue[loop] = epilogue


def _epilogue_loads(loop: scf.ForOp, loads: Sequence[t.DmaOp]) -> list[t.DmaOp]:
    """The loads among `loads` whose buffers only ops after the loop body's last matrix op
    use (the epilogue's operand tiles)."""
    body = list(loop.body.block.ops)
    matrix = [i for i, op in enumerate(body) if any(isinstance(o, t.MatmulOp) for o in op.walk())]
    if not matrix:
        return []
    epilogue = {o for op in body[matrix[-1] + 1:] for o in op.walk()}
    return [load for load in loads
            if all(u in epilogue for u in users_through_views(root_buffer(load.dst)) if u is not load)]


def _pipelined_allocs(plan: RotationPlan) -> set[Operation]:
    """The allocs of software-pipelined loads and preparation ops (issued ahead of the body)."""
    return ({root_buffer(load.dst).owner for loads in plan.pipelined_loads.values() for load in loads}
            | {root_buffer(op.dst).owner for ops in plan.pipelined_preparation.values() for op in ops})


def ring_chains(plan: RotationPlan, loops: set[scf.ForOp]) -> dict[t.AllocOp, t.AllocOp]:
    """B -> A for the double buffers B of `loops` whose first access in a round is the last
    access of A (rotating on the same loop, not a software-pipelined load) and whose last
    access is a DMA store: one op reads A and writes B (an epilogue from the accumulator into
    the store tile), and A's first access writes A. B then needs no free semaphores of its
    own: A's first access waits for B's last release (`_plan_ring_groups`), and every access of
    A and B in a round lies between the two by their data dependencies (B's first access reads what A's first access wrote; B's last
    access follows B's first). It costs overlap (A's next fill waits for B's store, not for A's
    last read), so only kernels short of semaphores use it, and only into store tiles: chained
    operand tiles (an attention kernel's scores into the probabilities P·V reads) made the
    edge Llama prefill's attention 2.00 M -> 2.27 M cycles, where giving up the outer loops'
    double buffering cost less."""
    pipelined = _pipelined_allocs(plan)
    last_of: dict[Operation, list[t.AllocOp]] = {}
    for alloc, op in plan.last_use.items():
        last_of.setdefault(op, []).append(alloc)
    chained: dict[t.AllocOp, t.AllocOp] = {}
    for b, op in plan.first_use.items():
        loop = plan.rotation_loop_of[b]
        if loop not in loops:
            continue
        sources = [a for a in last_of.get(op, ()) if a is not b and plan.rotation_loop_of[a] is loop]
        if len(sources) != 1:
            continue
        a = sources[0]
        accessed = accessed_buffers(op)
        # (not from a software-pipelined load: its early issue would wait for the chain's
        # last access, a whole iteration later, holding up the loads queued behind it)
        if (a not in pipelined and engine_of(plan.last_use[b]) == "dma_store"
                and (b.buffer, True) in accessed and (a.buffer, False) in accessed
                and (a.buffer, True) in accessed_buffers(plan.first_use[a])):
            chained[b] = a
    return chained


def _plan_ring_groups(plan: RotationPlan, chain_loops: set[scf.ForOp] = frozenset()) -> None:
    """One "free" semaphore per half for every group of a rotation loop's double-buffered
    allocs whose first accesses run on one engine Y and last accesses on one engine X != Y
    (and that are all, or all not, software-pipelined loads: those are issued ahead of the
    rest of the body). Per round, only the group's last release on X (in program order)
    signals, and only its first take on Y waits: X and Y run their queues in order, so
    every other member's last access has completed before that signal and every other
    member's first access starts after that wait. When X == Y no semaphore is needed at
    all. (One semaphore per alloc and half ran out of semaphores on attention kernels
    with a dozen double-buffered temporaries.) On `chain_loops` a chain of buffers each
    filled from the one before (`ring_chains`) is one member: the first engine of its head,
    the last engine of its tail."""
    pipelined = _pipelined_allocs(plan)
    source_of = ring_chains(plan, chain_loops) if chain_loops else {}
    next_of = {a: b for b, a in source_of.items()}

    def end_of(alloc: t.AllocOp, links: dict[t.AllocOp, t.AllocOp]) -> t.AllocOp:
        seen = {alloc}
        while alloc in links and links[alloc] not in seen:
            alloc = links[alloc]
            seen.add(alloc)
        return alloc

    order: dict[scf.ForOp, dict[Operation, int]] = {}
    groups: dict[RingGroupKey, list[t.AllocOp]] = {}
    for alloc, loop in plan.rotation_loop_of.items():
        head, tail = end_of(alloc, source_of), end_of(alloc, next_of)
        first_engine = engine_of(plan.first_use[head])
        last_engine = engine_of(plan.last_use[tail])
        if first_engine == last_engine:
            continue
        key = RingGroupKey(loop, first_engine, last_engine, head in pipelined)
        plan.ring_group_of[alloc] = key
        groups.setdefault(key, []).append(alloc)
    for key, members in groups.items():
        loop = key.rotation_loop
        if loop not in order:
            order[loop] = {o: i for i, o in enumerate(loop.walk())}
        position = order[loop]
        # (members first or last used by the same op: the one its earliest / latest
        # instruction accesses, `instruction_parts`)
        plan.token_takers.add(min(members, key=lambda a: (position[plan.first_use[a]],
                                                          instruction_parts(plan.first_use[a], a)[0])))
        plan.token_givers.add(max(members, key=lambda a: (position[plan.last_use[a]],
                                                          instruction_parts(plan.last_use[a], a)[1])))


def instruction_parts(op: Operation, alloc: t.AllocOp) -> tuple[int, int]:
    """(first, last) index of op's instructions that access `alloc`. A tile.matmul is an
    `mx.loadw` of its rhs, then an `mx.matmul` reading its lhs and writing its acc
    (selection.select_matmul); every instruction of another op accesses all its operands (a
    split DMA's parts, a fill's). A ring group's free token must be taken by the first
    instruction of its members' first uses and released by the last of their last uses: a
    conv step's window (the rhs) and weight block (the lhs) last used by one matmul released
    their half at the `mx.loadw`, and the next round's weight block load overwrote that half
    while the `mx.matmul` still streamed it (the race checker on a 1x1 conv chain in bf16)."""
    if not isinstance(op, t.MatmulOp):
        return 0, 0
    in_loadw = root_buffer(op.rhs).owner is alloc
    in_matmul = root_buffer(op.lhs).owner is alloc or root_buffer(op.acc).owner is alloc
    return (0 if in_loadw else 1), (1 if in_matmul else 0)


SHARED_FIRST_CONSUMERS: tuple[type, ...] = (t.MatmulOp,)
"""Ops that may be the first consumer of several loads issued one iteration early."""


def pipelinable_loads(loop: scf.ForOp, plan: RotationPlan, fn: func.FuncOp) -> list[t.DmaOp]:
    """DMA loads at the top of a rotation loop's body that can be issued one iteration early:
    DRAM -> a double-buffered alloc rotating on this loop (its first access), from a source the
    loop never writes, the buffers' first consumers in load order. Loads may share a first
    consumer when it is a matmul (a conv step's window and weight block, both DMA'd straight
    into its operands): it takes one token per load, the second wait on a front-end nop before
    it (DependencyTracker.wait). Before, only the first of such loads was issued early: the
    weight block's round trip was in series with every channel step (edge 3x3 256->256 at
    14x14: 714,842 -> 589,803 cycles)."""
    body = list(loop.body.block.ops)
    walk = [o for o in loop.walk() if o is not loop]
    position = {o: i for i, o in enumerate(walk)}
    written = {root_buffer(o.dst) for o in walk if isinstance(o, t.DmaOp) and not o.is_load}
    writes_dram = bool(written)
    loads, first_consumers = [], []
    for op in body:
        if not isinstance(op, t.DmaOp) or not op.is_load:
            continue
        alloc = root_buffer(op.dst).owner
        if (not isinstance(alloc, t.AllocOp) or plan.rotation_loop_of.get(alloc) is not loop
                or plan.first_use.get(alloc) is not op):
            continue
        if any(isinstance(o, t.DmaOp) and o is not op and root_buffer(o.dst) is alloc.buffer for o in walk):
            # a buffer several loads fill (a merged grouped conv's weight block, one DMA per
            # group) stays in its iteration: issued early, this load's token went to the next
            # of them as the buffer's first consumer, and the matmul reading this one's rows
            # waited for nothing (a race the fuzzer found: 32 groups of 2 channels, 8 merged,
            # on edge; MobileNetV2 edge 6,118,400 -> 6,173,697 cycles)
            continue
        source = root_buffer(op.src)
        # a DRAM alloc the loop never writes is read-only here too: live allocs never share
        # bytes (tile-plan-memory), and the loop writes only other buffers
        read_only = isinstance(source.owner, t.WeightOp) or (
            isinstance(source, BlockArgument) and source.block is fn.body.block
            and not is_output_argument(fn, source.index)) or (
            isinstance(source.owner, t.AllocOp) and source not in written)
        if not read_only and writes_dram:
            continue
        users = [u for u in users_through_views(alloc.buffer) if u is not op]
        if not users:
            continue
        first = min(users, key=lambda u: position.get(u, 1 << 30))
        # loads may share a first consumer only when it is a matmul (its operands: a conv
        # step's window and weight block); a shared vector op (an elementwise kernel's operand
        # tiles) keeps only its first load early
        if position.get(first) is None or (first in first_consumers
                                           and not isinstance(first, SHARED_FIRST_CONSUMERS)):
            continue
        loads.append(op)
        first_consumers.append(first)
    # first consumers must come in load order (one shared FIFO "full" semaphore)
    while loads and ([position[f] for f in first_consumers]
                     != sorted(position[f] for f in first_consumers)):
        loads.pop()
        first_consumers.pop()
    return loads


_DECLARATIONS = (t.AllocOp, t.ViewOp, t.WeightOp)
_VECTOR_WORK = (t.VectorOp, t.FillOp, t.DequantOp)


def pipelinable_preparation(loop: scf.ForOp, plan: RotationPlan, loads: list[t.DmaOp]) -> list[t.VectorOp]:
    """The vector ops that follow a pipelined loop's loads at the top of its body and only
    prepare what they loaded for the matrix unit (a conv window's fp32 -> bf16 copy from the
    staged input rows, a GEMM operand's split): each reads only those loads' buffers, earlier
    preparation's results or buffers the loop never writes, and writes only double buffers
    rotating on this loop whose first use it is and which only matmuls read afterwards. They
    are issued one iteration ahead and their loads two (CodeGenerator._emit_pipelined_for;
    without loads, ops reading only buffers the loop never writes: the data is on chip already):
    otherwise the in-order vector unit runs iteration t+1's preparation after iteration t's
    epilogue, which waits for the array to drain, and the array idles until it is done
    (docs/codegen.md, "Pipelined preparation"). Empty unless every load feeds preparation
    only: one "full" semaphore pairs the loads with the preparation, and a second one the
    iteration's last preparation op (the vector unit retires in order) with the first matrix
    instruction reading any prepared buffer."""
    load_allocs = {root_buffer(load.dst).owner for load in loads}
    walk = [o for o in loop.walk() if o is not loop]
    written = {buffer for o in walk for buffer, writes in accessed_buffers(o) if writes}
    preparation: list[t.VectorOp] = []
    outputs: set[Operation] = set()  # the prepared allocs
    for op in loop.body.block.ops:
        if op in loads or isinstance(op, _DECLARATIONS) or op.name.startswith("arith."):
            continue
        if not isinstance(op, t.VectorOp):
            break
        fits = True
        for buffer, writes in accessed_buffers(op):
            owner = buffer.owner
            if writes:
                fits = fits and (isinstance(owner, t.AllocOp) and owner.buffer is buffer
                                 and plan.rotation_loop_of.get(owner) is loop
                                 and (owner in outputs or plan.first_use.get(owner) is op))
            else:
                fits = fits and (owner in load_allocs or owner in outputs or buffer not in written)
        if not fits:
            break
        preparation.append(op)
        outputs.add(root_buffer(op.dst).owner)
    if not preparation:
        return []
    chosen = set(preparation)
    for alloc in load_allocs:  # every load feeds preparation only
        if any(u not in chosen for u in users_through_views(alloc.buffer) if not isinstance(u, t.DmaOp)):
            return []
    for alloc in outputs:  # read afterwards by the matrix unit alone (in order: one token)
        later = [u for u in users_through_views(alloc.buffer) if u not in chosen]
        if not later or not all(isinstance(u, t.MatmulOp) for u in later):
            return []
    # only where the vector unit has work after the matmuls (an epilogue) that would hold up
    # the next preparation: without it, issuing the loads two iterations ahead bought nothing
    # and cost the Llama prefill's output projection on server 4 % (14.6 K -> 15.2 K cycles)
    first_matmul = next((i for i, o in enumerate(walk) if isinstance(o, t.MatmulOp)), None)
    if first_matmul is None or not any(isinstance(o, _VECTOR_WORK) and engine_of(o) == "vector"
                                       and o not in chosen for o in walk[first_matmul:]):
        return []
    return preparation


# the tile ops a deferred epilogue may hold, and the rest of its loop's body (besides
# declarations, index arithmetic and plain loops)
_EPILOGUE_WORK = (t.VectorOp, t.DmaOp, t.FillOp)
_COMPUTE_WORK = (t.MatmulOp, t.VectorOp, t.DmaOp, t.FillOp, t.DequantOp)


def _tile_ops(ops: Iterable[Operation], allowed: tuple[type, ...]) -> list[Operation] | None:
    """The tile ops in ops and the loops among them, or None if one is not of `allowed` (or is
    not a declaration, index arithmetic or a plain loop)."""
    out: list[Operation] = []
    for top in ops:
        for o in top.walk():
            if isinstance(o, allowed):
                out.append(o)
            elif not (isinstance(o, (*_DECLARATIONS, scf.ForOp, scf.YieldOp))
                      or o.name.startswith("arith.")):
                return None
    return out


def deferrable_epilogue(loop: scf.ForOp, plan: RotationPlan, loads: Sequence[t.DmaOp],
                        preparation: Sequence[t.VectorOp]) -> DeferredEpilogue | None:
    """The ops of a pipelined loop's body after its last matrix op (the epilogue: a conv's or
    GEMM's bias, activation, transposition and store), when they can be issued one iteration
    behind, after the next iteration's matrix ops (CodeGenerator._emit_pipelined_for):

        loads(t+1) compute(t) epilogue(t-1)

    Otherwise the in-order front end reaches iteration t+1's matmuls only once the vector
    queue has taken iteration t's epilogue, whose first op waits for the array to drain: the
    array idles for the drain and the epilogue at every iteration (a 1x1 512->2048 conv at
    7x7 on server, four output-channel tiles: 7,186 cycles, 43.6 % of its roofline).

    None unless the epilogue commutes with what now comes before it: it touches nothing the
    loads or the preparation touch (loads(t+1) write the half epilogue(t-1) would see), and
    what it shares with the rest of the iteration, one side writing, are double buffers
    rotating on this loop that only matmuls access there and only vector ops in the epilogue
    (the accumulator tiles, which the bias add may write in place: iteration t+1 uses the
    other half, and the "computed" semaphore, signalled by iteration t's last matrix
    instruction and taken by epilogue(t)'s first vector op on them, orders the two; engines
    retire in order). Nor in a loop holding another rotation loop (the emission keeps one
    deferred epilogue at a time)."""
    if any(o in plan.rotation_loops for o in loop.walk() if o is not loop):
        return None
    staged = set(loads) | set(preparation)
    rest = [o for o in loop.body.block.ops if o not in staged]
    has_matrix = [any(isinstance(o, t.MatmulOp) for o in op.walk()) for op in rest]
    if True not in has_matrix:
        return None
    split = len(rest) - has_matrix[::-1].index(True)
    compute_ops = _tile_ops(rest[:split], _COMPUTE_WORK)
    epilogue_ops = _tile_ops(rest[split:], _EPILOGUE_WORK)
    staged_ops = _tile_ops(staged, _COMPUTE_WORK)
    if not epilogue_ops or compute_ops is None or staged_ops is None:
        return None

    def buffers(ops: list[Operation]) -> tuple[set[SSAValue], set[SSAValue]]:
        read, written = set(), set()
        for o in ops:
            for buffer, writes in accessed_buffers(o):
                (written if writes else read).add(buffer)
        return read | written, written

    epilogue_accessed, epilogue_written = buffers(epilogue_ops)
    staged_accessed, staged_written = buffers(staged_ops)
    compute_accessed, compute_written = buffers(compute_ops)
    if epilogue_written & staged_accessed or epilogue_accessed & staged_written:
        return None
    computed: set[t.AllocOp] = set()
    for buffer in epilogue_accessed & compute_accessed:
        if buffer not in epilogue_written and buffer not in compute_written:
            continue  # read by both
        owner = buffer.owner
        if not (isinstance(owner, t.AllocOp) and owner.buffer is buffer
                and plan.rotation_loop_of.get(owner) is loop):
            return None
        # the "computed" token orders every access of the iteration's matrix ops before the
        # epilogue's vector ops (the in-place bias add writes the accumulator tile)
        if any(not isinstance(o, t.MatmulOp) for o in compute_ops
               if any(b is buffer for b, _ in accessed_buffers(o))):
            return None
        if any(not isinstance(o, t.VectorOp) for o in epilogue_ops
               if any(b is buffer for b, _ in accessed_buffers(o))):
            return None
        computed.add(owner)
    return DeferredEpilogue(rest[split:], computed, _vector_instructions(rest[split:]))


def _vector_instructions(ops: Iterable[Operation]) -> int:
    """The vector ops among ops, each counted once per iteration of the loops among ops around
    it (an estimate of the instructions: an op split into parts counts once)."""
    count = 0
    for op in ops:
        if isinstance(op, scf.ForOp):
            count += trip_count(op) * _vector_instructions(op.body.block.ops)
        elif engine_of(op) == "vector" and isinstance(op, _VECTOR_WORK):
            count += 1
    return count


class DoubleBuffering:
    """The emission-time side of the rotation plan: which half and round each access of a
    double buffer is in, the free semaphores of the rotation loops being emitted, and the
    full semaphores of software-pipelined loops."""

    def __init__(self, plan: RotationPlan, semaphores: VirtualSemaphores,
                 tracker: DependencyTracker, cursor: EmissionCursor,
                 bindings: dict[scf.ForOp, LoopBinding], fn: func.FuncOp):
        self.plan = plan
        self.semaphores = semaphores
        self.tracker = tracker
        self.cursor = cursor
        self.bindings = bindings
        self.fn = fn
        self.free_semaphore_of: dict[tuple[t.AllocOp, int], int] = {}  # (alloc, half) -> it
        # ring semaphores are renewed at every top-level item (semaphores.py: live ranges)
        self.idle_rings: list[int] = []  # ring semaphores of this item not in use
        self.ring_of_group_half: dict[tuple[RingGroupKey, int], int] = {}  # (this item)
        self.active_rings: set[int] = set()  # ring semaphores of the loops being emitted
        self.full_semaphore_of: dict[t.AllocOp, int] = {}  # pipelined alloc -> its loop's
        self.full_taken: set[tuple[t.AllocOp, object]] = set()  # (alloc, round) consumed
        self.early_loads: set[t.DmaOp] = set()  # loads issued one iteration ahead
        #: the position of each pipelined load's buffer among its loop's loads (issue order)
        self.load_order: dict[t.AllocOp, int] = {}
        # the preparation ops issued one iteration ahead (of the loop being emitted), the last
        # one -> the "full" semaphore it signals, and the allocs they prepare
        self.preparation: set[Operation] = set()
        self.preparation_signals: dict[Operation, int] = {}
        self.prepared_allocs: set[Operation] = set()
        # a deferred epilogue being emitted (CodeGenerator._emit_pipelined_for): its ops, the
        # allocs it reads of the matrix ops' results, the "computed" semaphore and the rounds
        # (emitted epilogue copies) that took their token
        self.epilogue_ops: set[Operation] = set()
        self.computed_allocs: set[t.AllocOp] = set()
        self.computed_semaphore = 0
        self.computed_taken: set[object] = set()
        self._rings_of: dict[scf.ForOp, list[t.AllocOp]] | None = None  # rotation loop -> ring allocs

    def start_top_level_item(self) -> None:
        self.idle_rings = []
        self.ring_of_group_half = {}

    def checkpoint(self) -> tuple:
        """The state between two kernels, for `rollback` (no rotation loop is being emitted)."""
        assert not self.free_semaphore_of and not self.active_rings and not self.full_semaphore_of
        return list(self.idle_rings), dict(self.ring_of_group_half), set(self.early_loads)

    def rollback(self, state: tuple) -> None:
        idle_rings, ring_of_group_half, early_loads = state
        self.idle_rings, self.ring_of_group_half = list(idle_rings), dict(ring_of_group_half)
        self.early_loads = set(early_loads)
        self.free_semaphore_of, self.active_rings, self.full_semaphore_of = {}, set(), {}
        self.load_order = {}
        self.preparation, self.preparation_signals, self.prepared_allocs = set(), {}, set()

    def use_plan(self, plan: RotationPlan) -> None:
        """A new plan (kernels compiled again with less overlap)."""
        self.plan = plan
        self._rings_of = None

    def _binding(self, buffer: TileBuffer) -> LoopBinding:
        assert buffer.rotating_alloc is not None
        return self.bindings[self.plan.rotation_loop_of[buffer.rotating_alloc]]

    def half_offset(self, buffer: TileBuffer) -> int:
        """Bytes from the first half of a double buffer to the half this copy uses."""
        return self._binding(buffer).half * buffer.half_bytes

    def slot(self, buffer: TileBuffer) -> RingSlot | None:
        if buffer.rotating_alloc is None:
            return None
        binding = self._binding(buffer)
        return RingSlot(buffer.rotating_alloc, binding.half, binding.round)

    def enter_rotation_loop(self, loop: scf.ForOp) -> list[t.AllocOp]:
        """Give the ring groups rotating on loop their free semaphores; returns the allocs."""
        if self._rings_of is None:  # (the plan is complete when emission starts)
            self._rings_of = {}
            for alloc, rotation in self.plan.rotation_loop_of.items():
                if alloc in self.plan.ring_group_of:
                    self._rings_of.setdefault(rotation, []).append(alloc)
        rings = list(self._rings_of.get(loop, ()))
        of_group_half: dict[tuple[RingGroupKey, int], int] = {}
        for alloc in rings:
            for half in (0, 1):
                # a ring semaphore holds one idle token after its loop: a later rotation
                # loop of the same nest reuses it as is
                group_half = (self.plan.ring_group_of[alloc], half)
                if group_half not in of_group_half:
                    of_group_half[group_half] = self._ring_semaphore(group_half)
                self.free_semaphore_of[(alloc, half)] = of_group_half[group_half]
        return rings

    def _ring_semaphore(self, group_half: tuple[RingGroupKey, int]) -> int:
        """The free semaphore of (group, half). A rotation loop emitted again (an enclosing
        loop's peeled iterations) keeps its semaphores: its first take must find the token its
        own last release left (the tracker leaves that ordering to the ring). Otherwise any
        idle ring semaphore of this loop nest will do: its one idle token was released before
        in program order, so taking it only adds an ordering that already holds."""
        semaphore = self.ring_of_group_half.get(group_half)
        if semaphore is not None and semaphore not in self.active_rings:
            if semaphore in self.idle_rings:
                self.idle_rings.remove(semaphore)
        else:
            semaphore = (self.idle_rings.pop() if self.idle_rings else self.semaphores.new(
                SemaphoreKind.RING, "free semaphore of double-buffered allocs"))
        self.ring_of_group_half[group_half] = semaphore
        self.active_rings.add(semaphore)
        return semaphore

    def leave_rotation_loop(self, rings: list[t.AllocOp]) -> None:
        freed = {self.free_semaphore_of.pop((alloc, half)) for alloc in rings for half in (0, 1)}
        self.active_rings -= freed
        self.idle_rings.extend(sorted(freed))

    def start_pipelined_loop(self, loads: list[t.DmaOp], preparation: Sequence[t.VectorOp] = ()) -> None:
        """The pipelined loop's "full" semaphore, signalled by each early load (and taken by
        the first consumer of its buffer: with `preparation`, that is a preparation op), and
        with `preparation` a second one, signalled by an iteration's last preparation op and
        taken once per iteration by the first matrix instruction reading a prepared alloc
        (preparation without loads: only the second)."""
        full = self.semaphores.balanced("full semaphore of a software-pipelined loop") if loads else None
        for position, load in enumerate(loads):
            self.full_semaphore_of[root_buffer(load.dst).owner] = full  # type: ignore[index,assignment]
            self.load_order[root_buffer(load.dst).owner] = position  # type: ignore[index]
            self.early_loads.add(load)
        if preparation:
            prepared = self.semaphores.balanced("full semaphore of a pipelined loop's preparation")
            self.preparation_signals[preparation[-1]] = prepared
            for op in preparation:
                self.full_semaphore_of[root_buffer(op.dst).owner] = prepared  # type: ignore[index]
                self.prepared_allocs.add(root_buffer(op.dst).owner)
            self.preparation.update(preparation)

    def start_deferred_epilogue(self, epilogue: DeferredEpilogue) -> int:
        """The "computed" semaphore of a deferred epilogue (0: none needed): signalled by each
        iteration's last matrix instruction (the caller's), taken once per epilogue copy by its
        first access of a computed alloc."""
        if not epilogue.computed:  # (it reads nothing the matrix ops write)
            return 0
        self.computed_semaphore = self.semaphores.balanced("computed semaphore of a deferred epilogue")
        self.epilogue_ops = {o for top in epilogue.ops for o in top.walk()}
        self.computed_allocs = epilogue.computed
        return self.computed_semaphore

    def end_deferred_epilogue(self) -> None:
        self.epilogue_ops, self.computed_allocs, self.computed_taken = set(), set(), set()
        self.computed_semaphore = 0

    def end_pipelined_loop(self, loads: list[t.DmaOp], preparation: Sequence[t.VectorOp] = ()) -> None:
        for load in loads:
            del self.full_semaphore_of[root_buffer(load.dst).owner]  # type: ignore[arg-type]
            del self.load_order[root_buffer(load.dst).owner]  # type: ignore[arg-type]
        for op in preparation:
            self.full_semaphore_of.pop(root_buffer(op.dst).owner, None)  # type: ignore[arg-type]
            self.prepared_allocs.discard(root_buffer(op.dst).owner)
            self.preparation_signals.pop(op, None)
            self.preparation.discard(op)

    def on_access(self, instruction: Instruction, op: Operation, slot: RingSlot,
                  first_part: bool, last_part: bool) -> tuple[bool, tuple[int, t.AllocOp] | None]:
        """Take the tokens an access of a double buffer needs before it starts. Returns whether
        op is the alloc's first or last use in a round (counted as a write: it must not overlap
        the other round's use of that half) and the free token to release once the instruction
        is emitted ((semaphore, alloc), or None). An op emitted as several instructions (split
        DMA, fill) takes on its first instruction and releases on its last."""
        alloc = slot.alloc
        first = self.plan.first_use[alloc] is op
        last = self.plan.last_use[alloc] is op
        release = None
        if (first and alloc in self.plan.token_takers and first_part
                and self._covers_round_edge(op, alloc, True)):
            self._take_free(instruction, self.free_semaphore_of[(alloc, slot.half)], alloc)
        if (last and alloc in self.plan.token_givers and last_part
                and self._covers_round_edge(op, alloc, False)):
            release = (self.free_semaphore_of[(alloc, slot.half)], alloc)
        # (the prepared allocs of an iteration share one token)
        taken = ("prepared", slot.round) if alloc in self.prepared_allocs else (alloc, slot.round)
        if (alloc in self.full_semaphore_of and not first
                and not (op in self.preparation and alloc in self.prepared_allocs)
                and taken not in self.full_taken):
            self.full_taken.add(taken)
            self._take_full(instruction, alloc, self.full_semaphore_of[alloc])
        if (alloc in self.computed_allocs and op in self.epilogue_ops
                and slot.round not in self.computed_taken):
            self.computed_taken.add(slot.round)
            self._take_full(instruction, alloc, self.computed_semaphore)
        return first or last, release

    def _covers_round_edge(self, op: Operation, alloc: t.AllocOp, first: bool) -> bool:
        """Does this emitted copy of op (nested in loops inside the rotation loop) cover the
        first (last) iteration of every such loop? Only that copy takes (releases) the free
        token: a peeled first or last iteration is a copy of its own."""
        rotation = self.plan.rotation_loop_of[alloc]
        loops = enclosing_loops(op, self.fn)
        for loop in loops[loops.index(rotation) + 1:] if rotation in loops else []:
            binding = self.bindings[loop]
            trip = binding.trip if binding.trip is not None else -1  # -1: the trip count varies
            if binding.from_end:  # (a loop whose trip count varies: its first iteration is a
                # fixed copy before the hardware loop, its last the copy counted 1 from the end)
                if first or binding.from_end != 1:
                    return False
            elif binding.iteration is not None:
                if binding.iteration != (0 if first else trip - 1):
                    return False
            elif first:
                if binding.offset != 0:
                    return False
            elif binding.offset + binding.unroll * (binding.hardware_loop.count - 1) != trip - 1:  # type: ignore[union-attr]
                return False
        return True

    def _rotation_depth(self, alloc: t.AllocOp) -> int:
        """Number of emitted hardware loops enclosing the rotation loop's body copy."""
        rotation = self.plan.rotation_loop_of[alloc]
        binding = self.bindings[rotation]
        if binding.hardware_loop is not None:
            return self.cursor.loops.index(binding.hardware_loop) + 1
        # inlined copy: count the enclosing scf.for ops emitted as hardware loops
        return sum(1 for loop in enclosing_loops(rotation, self.fn)
                   if self.bindings[loop].hardware_loop is not None)

    def _wait_before_nested_loop(self, depth: int, semaphore: int) -> bool:
        """An access nested deeper than the rotation loop's body: the front end waits before
        the loop it is nested in. Returns whether that was the case."""
        loops = self.cursor.loops
        if len(loops) <= depth:
            return False
        loops[depth].prologue.append(front_end_nop(loops[:depth], wait=semaphore))
        return True

    def _take_free(self, instruction: Instruction, semaphore: int, alloc: t.AllocOp) -> None:
        if not self._wait_before_nested_loop(self._rotation_depth(alloc), semaphore):
            self.tracker.wait(instruction, semaphore)

    def take_earlier_load_first(self, rhs: RingSlot | None, lhs: RingSlot | None) -> None:
        """Before a tile.matmul's `mx.loadw` (it reads rhs; its `mx.matmul` reads lhs): when
        the matmul is the first consumer of both buffers' pipelined loads this round and lhs's
        load was issued first, the front end takes lhs's token now. Tokens are taken oldest
        first, so the `mx.loadw`'s own wait then takes the newer one, and its start implies
        both loads completed (engines retire in order). Taken by the `mx.matmul` instead, lhs's
        token was the newer: the `mx.loadw` took lhs's and started before rhs's load
        completed (ResNet-50's bf16 strided convs on edge load the weight block before their
        plane windows: a race)."""
        if rhs is None or lhs is None:
            return
        full = self.full_semaphore_of.get(lhs.alloc)
        if (full is None or self.full_semaphore_of.get(rhs.alloc) != full
                or lhs.alloc in self.prepared_allocs or rhs.alloc in self.prepared_allocs
                or (lhs.alloc, lhs.round) in self.full_taken or (rhs.alloc, rhs.round) in self.full_taken
                or self.load_order[lhs.alloc] > self.load_order[rhs.alloc]):
            return
        self.full_taken.add((lhs.alloc, lhs.round))
        if not self._wait_before_nested_loop(self._rotation_depth(lhs.alloc), full):
            self.cursor.append_front_end_wait(full)

    def _take_full(self, instruction: Instruction, alloc: t.AllocOp, full: int) -> None:
        """The first consumer of a pipelined load's buffer in an iteration takes its token."""
        if self._wait_before_nested_loop(self._rotation_depth(alloc), full):
            return
        if instruction.wait and instruction.wait != full and instruction.wait2:
            # keep the just-issued load's token on the engine; the other wait (a "free"
            # token released an iteration ago) moves to the front end
            self.cursor.append_front_end_wait(instruction.wait)
            instruction.wait = full
        else:
            self.tracker.wait(instruction, full)

    def release(self, instruction: Instruction, semaphore: int, alloc: t.AllocOp) -> None:
        """The last access of a half in a round gives its free token back."""
        depth = self._rotation_depth(alloc)
        loops = self.cursor.loops
        if len(loops) > depth:  # last access nested deeper: drain, then signal
            nested = loops[depth]
            if instruction.drain_loop is None:
                drain = self.tracker.drain_semaphore(nested.depth)
                self.tracker.add_signal(instruction, drain)
                instruction.drain_loop = nested
                nested.exit_drains[drain] = (nested.exit_drains.get(drain, 0)
                                             + iterations_inside(instruction, depth))
            nested.exit_signals.append(semaphore)
        else:
            self.tracker.add_signal(instruction, semaphore)
