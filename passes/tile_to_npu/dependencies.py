"""Dependency tracking and synchronisation: which engine instructions last wrote and read every
byte range of DRAM, scratchpad and accumulator, and the semaphore waits and signals that order
a new instruction after the conflicting ones of other engines (docs/codegen.md,
"Synchronisation").

Same-engine order is kept by the engine. A cross-engine dependency is, by where producer and
consumer sit in the loop nest:
* the same loop body: a pair semaphore per engine pair (producer signals, consumer waits);
* the consumer enters a loop the producer is not in: the front end takes the pair token once
  (a `nop wait` before the outermost loop entered);
* the producer leaves a loop: it signals the loop-depth drain semaphore every iteration and the
  front end drains the signalled count after the loop;
* loop-carried (iteration j -> j+1): drained at the end of each iteration.
Transitivity: each instruction remembers what its engine knew to be complete when it started; a
consumer that waits for P also learns what P knew, so redundant waits are dropped.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from typing import NamedTuple

from xdsl.dialects import func, scf
from xdsl.ir import Operation, SSAValue

from infer.dialects import tile as t
from infer.dialects.ir_io import LoweringError
from infer.passes.tile_to_npu.common import QUEUED_ENGINES, accessed_buffers, fail
from infer.passes.tile_to_npu.program_tree import (
    EmissionCursor,
    HardwareLoop,
    Instruction,
    front_end_nop,
)
from infer.passes.tile_to_npu.semaphores import SemaphoreKind, VirtualSemaphores


class RingSlot:
    """The half of a double-buffered alloc an access touches, and in which round (emitted copy
    of its rotation loop's body). (Not changed after it is made; compared by identity.)"""

    __slots__ = ("alloc", "half", "round")

    def __init__(self, alloc: t.AllocOp, half: int, round: object) -> None:  # noqa: A002
        self.alloc, self.half, self.round = alloc, half, round

    def same_half(self, other: RingSlot) -> bool:
        return self.alloc is other.alloc and self.half == other.half


class AccessRequest(NamedTuple):
    """A byte range an instruction about to be emitted reads or writes: [low, high), or with
    `pitch` only the first `width` bytes of every `pitch` bytes from `low` (rows of a box)."""

    space: str  # dram | local (scratchpad and accumulator share one address space)
    low: int
    high: int
    writes: bool
    ring: RingSlot | None
    pitch: int = 0
    width: int = 0
    # the hardware loops that step the range and by how many bytes an iteration (the address's
    # register key): [low, high) is the hull over their iterations
    steps: tuple = ()


def overlapping(a_low: int, a_high: int, a_pitch: int, a_width: int,
                b_low: int, b_high: int, b_pitch: int, b_width: int) -> bool:
    """Whether two accesses share a byte: their ranges overlap and, for two boxes of the same
    row pitch (the first `width` bytes of every `pitch` from `low`), a row of one meets a row of
    the other within the overlap. Boxes of different pitches count as their ranges."""
    low, high = max(a_low, b_low), min(a_high, b_high)
    if low >= high:
        return False
    if not a_pitch or a_pitch != b_pitch:
        return True
    pitch = a_pitch
    if high - low >= 2 * pitch:  # every offset within a row occurs in the overlap
        d = (b_low - a_low) % pitch  # b's rows start d bytes into a's
        return d < a_width or d + b_width > pitch
    a_rows, b_rows = _rows_within(a_low, pitch, a_width, low, high), _rows_within(b_low, pitch, b_width, low, high)
    return any(x0 < y1 and y0 < x1 for x0, x1 in a_rows for y0, y1 in b_rows)


def _rows_within(start: int, pitch: int, width: int, low: int, high: int) -> list[tuple[int, int]]:
    """The byte ranges of a box's rows (from `start`, `width` of every `pitch`) in [low, high)."""
    first, last = (low - start) // pitch, (high - 1 - start) // pitch
    return [(max(low, start + r * pitch), min(high, start + r * pitch + width))
            for r in range(max(0, first), last + 1)]


class Access:
    """A byte range an emitted instruction reads or writes (the hull over its loops' iterations);
    `position` is its index in the tracker's list of every access (emission order)."""

    __slots__ = ("low", "high", "space", "writes", "instruction", "ring", "sequence", "position",
                 "pages", "pitch", "width", "steps")

    def __init__(self, low: int, high: int, space: str, writes: bool, instruction: Instruction,
                 ring: RingSlot | None, pitch: int = 0, width: int = 0, steps: tuple = ()) -> None:
        self.low, self.high, self.space, self.writes = low, high, space, writes
        self.instruction, self.ring = instruction, ring
        self.pitch, self.width = pitch, width  # (AccessRequest: a box of rows, or 0)
        self.steps = steps  # (AccessRequest.steps)
        self.sequence = instruction.sequence
        self.position = -1
        self.pages: tuple[int, ...] | None = None  # (AccessIndex.pages_of, once it is asked)

    def overlaps(self, other: Access) -> bool:
        return overlapping(self.low, self.high, self.pitch, self.width,
                           other.low, other.high, other.pitch, other.width)


class _Listed:
    """One list of AccessIndex: accesses in emission order, with their sequence numbers and
    tracker positions beside them (plain ints, so bisect runs without a key function)."""

    __slots__ = ("accesses", "sequences", "positions")

    def __init__(self) -> None:
        self.accesses: list[Access] = []
        self.sequences: list[int] = []
        self.positions: list[int] = []


class AccessIndex:
    """Every emitted access, listed by engine, writes?, space and page in emission order, so the
    dependency tracker finds an engine's latest conflicting access by scanning a few short lists
    backwards instead of the whole program (that scan was quadratic: minutes on ResNet-50).
    Queries run several times per emitted instruction (per access and engine): a page is one
    int key (`page << 1 | dram?`; an access spanning WIDE pages or more goes to its space's
    wide key), and an access's keys are computed once (`pages_of`)."""

    PAGE_SHIFT = {"dram": 20, "local": 14}  # 1 MiB / 16 KiB pages
    SPACE_BIT = {"dram": 1, "local": 0}
    WIDE_KEY = {"dram": -1, "local": -2}
    WIDE = 64  # accesses spanning more pages go to one list per (engine, writes?, space)

    def __init__(self) -> None:
        # engine -> (the lists of its writes, of its reads), each by page key
        self.lists: dict[str, tuple[dict[int, _Listed], dict[int, _Listed]]] = {}
        # (engine, writes?, space) -> its page keys that have a list (wide queries read them all)
        self.space_keys: dict[tuple[str, bool, str], list[int]] = {}
        # engine -> the latest sequence number among its accesses after each one added (a
        # query whose `after` is at least the last has nothing to find: most of them)
        self.latest: dict[str, list[int]] = {}

    def pages_of(self, access: Access) -> tuple[int, ...] | None:
        """access's page keys, with its space's wide key last; None for a wide access."""
        pages = access.pages
        if pages is None:
            space = access.space
            shift = self.PAGE_SHIFT[space]
            first, last = access.low >> shift, (access.high - 1) >> shift
            bit = self.SPACE_BIT[space]
            if first == last:  # (most accesses)
                pages = access.pages = ((first << 1) | bit, self.WIDE_KEY[space])
            elif last - first >= self.WIDE:
                return None
            else:
                pages = access.pages = (*((page << 1) | bit for page in range(first, last + 1)),
                                        self.WIDE_KEY[space])
        return pages

    def _engine_lists(self, engine: str) -> tuple[dict[int, _Listed], dict[int, _Listed]]:
        lists = self.lists.get(engine)
        if lists is None:
            lists = self.lists[engine] = ({}, {})
        return lists

    def add(self, access: Access) -> None:
        engine = access.instruction.engine
        latest = self.latest.get(engine)
        if latest is None:
            latest = self.latest[engine] = []
        latest.append(max(latest[-1], access.sequence) if latest else access.sequence)
        writes = access.writes
        by_page = self._engine_lists(engine)[0 if writes else 1]
        pages = self.pages_of(access)
        for page in pages[:-1] if pages is not None else (self.WIDE_KEY[access.space],):
            listed = by_page.get(page)
            if listed is None:
                listed = by_page[page] = _Listed()
                self.space_keys.setdefault((engine, writes, access.space), []).append(page)
            listed.accesses.append(access)
            listed.sequences.append(access.sequence)
            listed.positions.append(access.position)

    def remove_latest(self, access: Access) -> None:
        """Take back the access added last (a kernel compiled again)."""
        engine = access.instruction.engine
        self.latest[engine].pop()
        by_page = self.lists[engine][0 if access.writes else 1]
        pages = self.pages_of(access)
        for page in pages[:-1] if pages is not None else (self.WIDE_KEY[access.space],):
            listed = by_page[page]
            assert listed.accesses[-1] is access
            listed.accesses.pop()
            listed.sequences.pop()
            listed.positions.pop()

    def _lists(self, access: Access, engine: str) -> Iterator[_Listed]:
        """The lists that can hold accesses of `engine` conflicting with `access` (one of the
        two writing: an engine's reads only for a writing access)."""
        lists = self.lists.get(engine)
        if lists is None:
            return
        kinds = lists if access.writes else lists[:1]
        pages = access.pages if access.pages is not None else self.pages_of(access)
        if pages is None:  # a wide query: every list of this space
            for kind, is_write in zip(kinds, (True, False)):
                for page in self.space_keys.get((engine, is_write, access.space), ()):
                    yield kind[page]
            return
        for kind in kinds:
            for page in pages:
                listed = kind.get(page)
                if listed is not None:
                    yield listed

    def latest_conflict(self, access: Access, engine: str, after: int) -> Access | None:
        """The latest access of `engine` that conflicts with `access` (overlapping bytes, one of
        them writing, not the same double-buffer half in another round) and is later than
        instruction sequence number `after` (the caller passes what is already known complete
        or already found: the backward scans stop there)."""
        latest = self.latest.get(engine)
        if not latest or latest[-1] <= after:
            return None
        best = None
        low, high, ring, pitch, steps = access.low, access.high, access.ring, access.pitch, access.steps
        for listed in self._lists(access, engine):
            if not listed.sequences or listed.sequences[-1] <= after:
                continue
            for earlier in reversed(listed.accesses):
                if earlier.sequence <= after:
                    break
                if not (earlier.low < high and low < earlier.high):
                    continue
                if (pitch or earlier.pitch) and not access.overlaps(earlier):
                    continue
                if steps and earlier.steps == steps and apart_in_every_iteration(earlier, access):
                    continue
                if (ring is not None and earlier.ring is not None and earlier.ring.same_half(ring)
                        and earlier.ring.round is not ring.round):
                    continue
                best, after = earlier, earlier.sequence
                break
        return best

    def conflicts_from(self, access: Access, position: int,
                       coverage: dict[tuple[str, str], int]) -> list[Access]:
        """The accesses of other engines at tracker positions >= `position` that conflict
        with `access` by bytes (overlapping, one of them writing) and are later than what
        access's engine knows complete of them (`coverage[(engine, access's engine)]`), in
        position order."""
        found: dict[int, Access] = {}
        low, high, pitch = access.low, access.high, access.pitch
        own = access.instruction.engine
        for engine in QUEUED_ENGINES:
            if engine == own:
                continue
            latest = self.latest.get(engine)
            done = coverage.get((engine, own), 0)
            if not latest or latest[-1] <= done:
                continue
            for listed in self._lists(access, engine):
                sequences = listed.sequences
                if not sequences or sequences[-1] <= done:
                    continue
                # (a list is in emission order, so in both position and sequence order)
                start = max(bisect.bisect_left(listed.positions, position),
                            bisect.bisect_right(sequences, done))
                for later in listed.accesses[start:]:
                    if later.low < high and low < later.high and (
                            not (pitch or later.pitch) or access.overlaps(later)):
                        found[later.position] = later
        return [found[p] for p in sorted(found)] if len(found) > 1 else list(found.values())


def _restore_instruction(instruction: Instruction, signal: int, signal2: int,
                         drain_loop: HardwareLoop | None, relays: list[Instruction] | None) -> None:
    instruction.signal, instruction.signal2 = signal, signal2
    instruction.drain_loop, instruction.relays = drain_loop, relays


def _restore_loop(loop: HardwareLoop, exit_drains: dict[int, int], tail_drains: dict[int, int]) -> None:
    loop.exit_drains, loop.tail_drains = exit_drains, tail_drains


def _remove_inserted(block: list, nop: Instruction) -> None:
    del block[next(i for i, item in enumerate(block) if item is nop)]


_UNDO = {"instruction": _restore_instruction, "loop": _restore_loop, "inserted": _remove_inserted}


def iterations_inside(instruction: Instruction, outer_loops: int) -> int:
    """How often instruction runs per iteration of its `outer_loops`-th enclosing loop."""
    return math.prod(loop.count for loop in instruction.loops[outer_loops:])


def runs_once(loop: HardwareLoop) -> bool:
    """A hardware loop of one iteration (a software-pipelined loop of 3 or 4 trips keeps one
    hardware iteration): an instruction in it runs once per entry, as if it were outside."""
    return loop.count == 1 and not loop.count_register


#: how far back (accesses) DependencyTracker._later_outside looks for a later producer
LATER_PRODUCER_WINDOW = 256
#: engines whose producer in a loop is stood in for by the *earliest* later instruction of its
#: engine outside that loop (the others: the latest; see DependencyTracker._later_outside)
EARLIEST_LATER_PRODUCER = frozenset(("matrix", "dma_store"))


class DependencyTracker:
    """The accesses emitted so far and what each engine is known to have completed; inserts the
    waits and signals a new instruction needs."""

    def __init__(self, semaphores: VirtualSemaphores, cursor: EmissionCursor):
        self.semaphores = semaphores
        self.cursor = cursor
        self.accesses: list[Access] = []
        self.index = AccessIndex()
        # (producer engine, consumer engine) -> the latest producer sequence number known
        # complete when the consumer engine starts its next instruction
        self.coverage: dict[tuple[str, str], int] = {}
        # renewed at every top-level item (semaphores.py: live ranges are per item)
        self.pair_semaphores: dict[tuple[str, str], int] = {}
        # kept across the straight-line items of a kernel at DegradeLevel.SHARED_PAIR_SEMAPHORES
        # (start_top_level_item), for engine waits only
        self.shared_pair_semaphores: dict[tuple[str, str], int] = {}
        self.sharing_pairs = False
        self.drain_semaphores: dict[int, int] = {}  # loop depth -> semaphore
        # while compiling kernel by kernel (kernels.py): the state of every instruction and
        # loop before the tracker changed it, so a kernel compiled again can take back what
        # it added to earlier kernels' code (signals, relays, drains)
        self.undo_log: list[tuple] | None = None
        # the sequence number of the earliest producer given a new signal since it was reset
        # (kernels.py: where the semaphores of the kernel being emitted start)
        self.earliest_signalled = 0

    def start_top_level_item(self, shared_pairs: bool = False) -> None:
        """A new top-level item: new pair and drain semaphores; with `shared_pairs` (a
        straight-line item of a kernel at DegradeLevel.SHARED_PAIR_SEMAPHORES) engine waits
        keep using the pair semaphores of the items before it that shared theirs. Why that is
        exact: a consumer engine synchronises with ever later producers of an engine (coverage
        only grows), so its engine waits take a pair's tokens in the order the in-order
        producer engine signals them. Front-end waits (a loop's prologue, a second wait) do
        not share: the front end would take a token while an engine instruction dispatched
        before it still waits for it."""
        self.pair_semaphores = {}
        self.drain_semaphores = {}
        if not shared_pairs:
            self.shared_pair_semaphores = {}
        self.sharing_pairs = shared_pairs

    def checkpoint(self) -> tuple:
        """The tracker's state between two kernels, for `rollback`."""
        assert self.undo_log is not None
        return (len(self.accesses), dict(self.coverage), dict(self.pair_semaphores),
                dict(self.drain_semaphores), len(self.undo_log), dict(self.shared_pair_semaphores),
                self.sharing_pairs)

    def rollback(self, state: tuple) -> None:
        """Back to `state`: the accesses recorded since are forgotten, what was changed in
        earlier instructions and loops is restored, inserted relays are removed."""
        assert self.undo_log is not None
        count, coverage, pairs, drains, logged, shared_pairs, sharing = state
        self.coverage, self.pair_semaphores, self.drain_semaphores = dict(coverage), dict(pairs), dict(drains)
        self.shared_pair_semaphores, self.sharing_pairs = dict(shared_pairs), sharing
        for entry in reversed(self.undo_log[logged:]):
            _UNDO[entry[0]](*entry[1:])
        del self.undo_log[logged:]
        for access in reversed(self.accesses[count:]):
            self.index.remove_latest(access)
        del self.accesses[count:]

    def _note(self, instruction: Instruction) -> None:
        """instruction's signals, relays and drain loop are about to change."""
        if self.undo_log is not None:
            if instruction.sequence:
                self.earliest_signalled = min(self.earliest_signalled, instruction.sequence)
            self.undo_log.append(("instruction", instruction, instruction.signal, instruction.signal2,
                                  instruction.drain_loop,
                                  None if instruction.relays is None else list(instruction.relays)))

    def note_drains(self, loop: HardwareLoop) -> None:
        """loop's exit or tail drains are about to change."""
        if self.undo_log is not None:
            self.undo_log.append(("loop", loop, dict(loop.exit_drains), dict(loop.tail_drains)))

    def pair_semaphore(self, producer_engine: str, consumer_engine: str, shared: bool = False) -> int:
        """The item's semaphore from producer_engine to consumer_engine; `shared`: the one the
        kernel's straight-line items share (start_top_level_item)."""
        key = (producer_engine, consumer_engine)
        pairs = self.shared_pair_semaphores if shared else self.pair_semaphores
        if key not in pairs:
            pairs[key] = self.semaphores.balanced(
                f"{producer_engine}->{consumer_engine} semaphore" + (" (shared)" if shared else ""))
        return pairs[key]

    def drain_semaphore(self, depth: int) -> int:
        if depth not in self.drain_semaphores:
            self.drain_semaphores[depth] = self.semaphores.balanced(
                f"loop drain semaphore (depth {depth})")
        return self.drain_semaphores[depth]

    def add_signal(self, producer: Instruction, semaphore: int) -> None:
        """producer signals semaphore when it completes. Beyond two signals (fan-out to more
        consumers than the header holds), its second signal becomes a relay semaphore: a
        front-end `nop wait=relay, signal=.., signal2=..` right after it re-signals the others.
        (The relay holds the front end there until producer completes; `synchronise` prefers a
        later instruction with a free signal, `_later_with_a_free_signal`.)"""
        if semaphore in (producer.signal, producer.signal2):
            return
        self._note(producer)
        if not producer.signal:
            producer.signal = semaphore
        elif not producer.signal2:
            producer.signal2 = semaphore
        elif producer.relays is None:
            relay = self.semaphores.balanced(f"fan-out relay of {producer.name}")
            nop = front_end_nop(producer.loops, wait=relay, signal=producer.signal2,
                                signal2=semaphore)
            producer.signal2 = relay
            self._insert_after(producer, producer, nop)
            producer.relays = [nop]
        elif any(semaphore in (nop.signal, nop.signal2) for nop in producer.relays):
            return
        elif not producer.relays[-1].signal2:
            self._note(producer.relays[-1])
            producer.relays[-1].signal2 = semaphore
        else:
            nop = front_end_nop(producer.loops, signal=semaphore)
            self._insert_after(producer, producer.relays[-1], nop)
            producer.relays.append(nop)

    def _insert_after(self, producer: Instruction, anchor: Instruction, nop: Instruction) -> None:
        block = producer.home_block
        assert block is not None
        block.insert(block.index(anchor) + 1, nop)
        if self.undo_log is not None:
            self.undo_log.append(("inserted", block, nop))

    def wait(self, consumer: Instruction, semaphore: int) -> None:
        """consumer waits for semaphore. An engine instruction takes a second wait itself
        (`wait2`); a third, or a second of a front-end instruction, goes to a front-end nop
        before it, which holds the dispatch of everything after it. Of a ring's "free" token,
        released a round earlier, and another wait, the free token is the one the front end
        takes: it has most likely been given back, while the other (a fresh dependency) would
        hold the front end (a conv epilogue writing its bf16 store tile waited at the front end
        for the accumulator's last matmul)."""
        if not consumer.wait:
            consumer.wait = semaphore
        elif consumer.engine != "scalar" and not consumer.wait2:
            consumer.wait2 = semaphore
        elif consumer.engine == "vector" and self._is_ring(consumer.wait) and not self._is_ring(semaphore):
            self.cursor.append_front_end_wait(consumer.wait)
            consumer.wait = semaphore
        else:
            self.cursor.append_front_end_wait(semaphore)

    def _is_ring(self, semaphore: int) -> bool:
        record = self.semaphores.records.get(semaphore)
        return record is not None and record.kind is SemaphoreKind.RING

    def cover_all_engines(self, producer: Instruction) -> None:
        """Every engine starts its next instruction after producer completed."""
        for engine in (*QUEUED_ENGINES, "scalar"):
            self.learn(producer, engine)

    def learn(self, producer: Instruction, engine: str) -> None:
        """engine now starts after producer completed: it also knows what producer knew."""
        for other, sequence in producer.known_complete.items():
            if other != engine:
                self.coverage[(other, engine)] = max(self.coverage.get((other, engine), 0),
                                                     sequence)
        key = (producer.engine, engine)
        self.coverage[key] = max(self.coverage.get(key, 0), producer.sequence)

    def is_covered(self, producer: Instruction, engine: str) -> bool:
        return self.coverage.get((producer.engine, engine), 0) >= producer.sequence

    def synchronise(self, producer: Instruction, consumer: Instruction) -> None:
        """Order consumer after producer (an instruction of another engine)."""
        if self.is_covered(producer, consumer.engine):
            return
        shared = 0
        while (shared < min(len(producer.loops), len(consumer.loops))
               and producer.loops[shared] is consumer.loops[shared]):
            shared += 1
        # leaving loops that run once is no exit: the producer signals once, a plain pair
        # (a drain or a later producer would hold the consumer longer: ResNet-50 on server, a
        # 1x1 conv's first window waited for the last of four output-block stores, not the first)
        if len(producer.loops) > shared and not all(runs_once(loop) for loop in producer.loops[shared:]):
            # the dependency leaves loop `exited`
            later = self._later_outside(producer, consumer.loops[:shared])
            if later is not None:  # (see _later_outside)
                self.synchronise(later, consumer)
                return
            exited = producer.loops[shared]
            if producer.drain_loop is not None:
                if producer.drain_loop in producer.loops[shared:]:
                    self.cover_all_engines(producer)
                    return
                raise LoweringError("tile-to-npu: unsupported synchronisation pattern (an "
                                    f"instruction {producer.name} drained in two loops)")
            drain = self.drain_semaphore(exited.depth)
            self.add_signal(producer, drain)
            self._note(producer)
            self.note_drains(exited)
            producer.drain_loop = exited
            exited.exit_drains[drain] = (exited.exit_drains.get(drain, 0)
                                         + iterations_inside(producer, shared))
            self.cover_all_engines(producer)
            return
        engine_wait = len(consumer.loops) == shared and not consumer.wait
        pair = self.pair_semaphore(producer.engine, consumer.engine, self.sharing_pairs and engine_wait)
        if (producer.signal and producer.signal2 and pair not in (producer.signal, producer.signal2)
                and not any(pair in (nop.signal, nop.signal2) for nop in producer.relays or ())):
            # a third signal would be a relay: a later instruction of its engine instead
            later = self._later_with_a_free_signal(producer, consumer.loops[:shared])
            if later is not None:
                self.synchronise(later, consumer)
                return
        self.add_signal(producer, pair)
        if len(consumer.loops) > shared:  # entering a loop: the front end takes the token once
            entered = consumer.loops[shared]
            entered.prologue.append(front_end_nop(consumer.loops[:shared], wait=pair))
            self.cover_all_engines(producer)
            return
        self.wait(consumer, pair)
        self.learn(producer, consumer.engine)

    def _later_outside(self, producer: Instruction, scope: tuple[HardwareLoop, ...]) -> Instruction | None:
        """An instruction emitted so far on producer's engine, later than producer and outside
        the loops producer is in beyond `scope` (in `scope` or around it), if one is among the
        last LATER_PRODUCER_WINDOW accesses. Engines retire in order, so its completion implies
        producer's: a consumer synchronised with it needs no front-end drain of producer's loop,
        which held the front end at that loop's exit until every iteration completed (the Llama
        prefill's head split: the next kernels' weight prefetches waited there for eight
        stores). The latest such, or for a matrix or store producer the earliest
        (EARLIEST_LATER_PRODUCER): a GEMM's first column loop is followed by a second, and a
        consumer of the first loop's columns (the next kernel's first k step) waited for both
        (MiniLM's FFN down projection on server); a conv's first output blocks are stored in
        its loop and the last ones after it, and the next conv's first window, reading the
        first block, waited for the last block's store (ResNet-50 on server). Not for loads:
        an earlier load signalled for a consumer lengthens that semaphore's live range across
        the pipelined loads after it, and which kernels ran out of semaphores first changed
        (the kernel-by-kernel compile of test_tile_to_npu.py's attention blocks on 10
        semaphores no longer decided like the whole-function one)."""
        if producer.engine not in EARLIEST_LATER_PRODUCER:
            return next(self._later_on_engine(producer, scope), None)
        return next(reversed(list(self._later_on_engine(producer, scope))), None)

    def _later_with_a_free_signal(self, producer: Instruction, scope: tuple[HardwareLoop, ...]) -> Instruction | None:
        """The earliest instruction emitted so far on producer's engine after producer, in
        `scope` or around it, with a signal left, if one is among the last
        LATER_PRODUCER_WINDOW accesses: a consumer synchronised with it instead of producer
        adds no third signal to producer (a relay: a front-end nop right after producer, which
        holds the front end there until producer completes: MiniLM's FFN up projection's last
        matmul, read by its result's store, the down projection's k loop and a later weight
        load into its activation tile's bytes, held the down projection's first k step behind
        it). The consumer waits for that later instruction (engines retire in order); it was
        emitted before the consumer, so the wait closes no cycle."""
        free = [c for c in self._later_on_engine(producer, scope) if not c.signal2 and not c.relays]
        return free[-1] if free else None

    def _later_on_engine(self, producer: Instruction, scope: tuple[HardwareLoop, ...]) -> Iterator[Instruction]:
        """The instructions emitted on producer's engine after it, in the loops `scope` or
        around them, among the last LATER_PRODUCER_WINDOW accesses, latest first (one per
        access of each: an instruction may come more than once)."""
        for access in reversed(self.accesses[max(0, len(self.accesses) - LATER_PRODUCER_WINDOW):]):
            candidate = access.instruction
            if candidate.sequence <= producer.sequence:
                return
            if (candidate.engine == producer.engine and len(candidate.loops) <= len(scope)
                    and all(a is b for a, b in zip(candidate.loops, scope))):
                yield candidate

    def synchronise_with_earlier(self, instruction: Instruction, accesses: list[Access]) -> None:
        """Order a new instruction after the latest conflicting access of every other engine
        (latest first: a later producer of one engine covers its earlier ones), then record
        what its engine knows to be complete when it starts. Accesses its engine already
        knows complete are not looked for (synchronising with them would do nothing)."""
        latest: dict[str, Access] = {}
        consumer = instruction.engine
        for engine in QUEUED_ENGINES:
            if engine == consumer:
                continue
            after = self.coverage.get((engine, consumer), 0)
            for access in accesses:
                found = self.index.latest_conflict(access, engine, after)
                if found is not None:
                    latest[engine] = found
                    after = found.sequence
        for found in sorted(latest.values(), key=lambda a: -a.sequence):
            self.synchronise(found.instruction, instruction)
        instruction.known_complete = {engine: self.coverage.get((engine, consumer), 0)
                                      for engine in QUEUED_ENGINES if engine != consumer}

    def record(self, accesses: list[Access]) -> None:
        for access in accesses:
            access.position = len(self.accesses)
            self.accesses.append(access)
            self.index.add(access)

    def synchronise_scalar_read(self, instruction: Instruction, low: int, high: int,
                                space: str = "dram") -> None:
        """A front-end `ld` of DRAM [low, high) (`lds` of local memory: space "local"): wait for
        the engines' earlier writes. (The front end executes it before dispatching anything
        later, so it is never a producer.)"""
        latest: dict[str, Access] = {}
        query = Access(low, high, space, False, instruction, None)
        for engine in QUEUED_ENGINES:
            found = self.index.latest_conflict(query, engine,
                                               self.coverage.get((engine, instruction.engine), 0))
            if found is not None:
                latest[engine] = found
        for found in sorted(latest.values(), key=lambda a: -a.sequence):
            self.synchronise(found.instruction, instruction)

    def synchronise_loop_carried(self, loop: HardwareLoop, op: Operation,
                                 rotation_loop_of: dict[t.AllocOp, scf.ForOp]) -> None:
        """Dependencies from iteration j of a closing loop's body to iteration j+1: the producer
        signals the loop's drain semaphore and the front end drains it at the end of the body.
        (Consumers in body order, each with its conflicting later producers in body order.)"""
        if runs_once(loop):  # no iteration j+1
            return
        nested_in: dict[int, bool] = {}  # id(rotation loop) -> is loop nested in it (asked often)
        for consumer_access in self.accesses[loop.first_access:]:
            consumer = consumer_access.instruction
            # (producers the consumer's engine already knows complete would be skipped below)
            for producer_access in self.index.conflicts_from(consumer_access,
                                                             consumer_access.position, self.coverage):
                producer = producer_access.instruction
                # the same half of a double buffer is guarded by its free semaphore across
                # iterations of its rotation loop and of loops around it (the ring's token chain
                # continues), but inside a loop nested in the rotation loop the same half is
                # reused every iteration: that dependency needs synchronising here
                if (producer_access.ring and consumer_access.ring
                        and producer_access.ring.same_half(consumer_access.ring)):
                    rotation = rotation_loop_of.get(producer_access.ring.alloc)
                    nested = nested_in.get(id(rotation))
                    if nested is None:
                        nested = nested_in[id(rotation)] = loop.source_loop is None or (
                            loop.source_loop is not rotation and rotation is not None
                            and rotation.is_ancestor(loop.source_loop))
                    if not nested:
                        continue
                if self.is_covered(producer, consumer.engine):
                    continue
                if (producer_access.ring is None and consumer_access.ring is None
                        and apart_across_iterations(loop, producer_access, consumer_access)):
                    continue
                if producer.drain_loop is not None and loop.depth <= producer.drain_loop.depth:
                    self.cover_all_engines(producer)
                    continue
                if producer.drain_loop is not None:
                    raise fail(op, "unsupported synchronisation pattern (loop-carried "
                               "dependency on an instruction drained by an outer loop)")
                drain = self.drain_semaphore(loop.depth)
                self.add_signal(producer, drain)
                self._note(producer)
                self.note_drains(loop)
                producer.drain_loop = loop
                # loop.depth = the index of the first loop inside `loop` in producer.loops
                loop.tail_drains[drain] = (loop.tail_drains.get(drain, 0)
                                           + iterations_inside(producer, loop.depth))
                self.cover_all_engines(producer)


def _one_iteration(access: Access) -> tuple[int, int, int, int] | None:
    """(low, high, pitch, width) of the bytes `access` touches in one iteration of the one
    hardware loop stepping its address (its first iteration), or None when not so stepped: the
    hull over the iterations less the loop's span (a box's width less it too: it was widened by
    the span, selection._operand)."""
    if len(access.steps) != 1:
        return None
    loop, step = access.steps[0]
    span = step * (loop.count - 1)
    width = access.width - abs(span) if access.pitch else 0
    if access.pitch and width <= 0:
        return None
    return access.low - min(0, span), access.high - max(0, span), access.pitch if width else 0, width


def apart_in_every_iteration(earlier: Access, later: Access) -> bool:
    """Two accesses stepped alike by one hardware loop (equal `steps`), `earlier` before
    `later` in its body: does `earlier` in each iteration touch other bytes than `later` in that
    iteration and every one after it? Then `later` needs no wait for it (the loop-carried check
    covers `later` before a later iteration's `earlier`). Their hulls over the iterations
    overlap where they step through the same rows: a tile's store from its columns of a kept
    whole output and the next tile's copy into the columns beside them, rows of one buffer."""
    a, b = _one_iteration(earlier), _one_iteration(later)
    if a is None or b is None:
        return False
    loop, step = earlier.steps[0]
    return loop.count <= MAX_ITERATIONS_COMPARED and _apart_from(a, b, step, range(loop.count))


def _apart_from(a: tuple[int, int, int, int], b: tuple[int, int, int, int], step: int, ks: range) -> bool:
    """Do the one-iteration bytes `a` miss `b` shifted by k iterations of `step`, for every k?"""
    return not any(overlapping(*a, b[0] + k * step, b[1] + k * step, b[2], b[3]) for k in ks)


#: iterations `apart_in_every_iteration` compares pairwise at most (more: the hulls decide)
MAX_ITERATIONS_COMPARED = 64


def apart_across_iterations(loop: HardwareLoop, producer: Access, consumer: Access) -> bool:
    """Do a later iteration's `consumer` and an earlier iteration's `producer` of `loop` touch
    different bytes whatever the iterations? Both stepped by `loop` by the same bytes per
    iteration and by the loops around it alike (so the difference of their addresses depends
    only on how many iterations of `loop` lie between them), and the consumer's bytes of one
    iteration later (its range over the loops inside, in that iteration) lie wholly past the
    producer's, in the direction the loop steps (farther iterations are farther apart). A conv's
    whole output kept on chip (graph_to_tile/conv.py `ConvKernel.output_kept_whole`): tile j+1's
    copy into its rows and tile j's store from its own rows. Peeled iterations (not stepped by
    the loop) and accesses stepped differently are left to the hull comparison. Two boxes of
    rows stepped by `loop` alone (a row-tiled output kept whole: each tile's columns of the
    same rows) are compared iteration against iteration instead."""
    if (producer.steps == consumer.steps and len(producer.steps) == 1 and producer.steps[0][0] is loop
            and (producer.pitch or consumer.pitch) and loop.count <= MAX_ITERATIONS_COMPARED):
        p, c = _one_iteration(producer), _one_iteration(consumer)
        if p is not None and c is not None:
            return _apart_from(p, c, producer.steps[0][1], range(1, loop.count))
    step = 0
    outer_p, outer_c = [], []
    shift_p = [0, 0]  # the parts of [low, high) spanned by `loop` and the loops around it
    shift_c = [0, 0]
    for steps, outer, shift in ((producer.steps, outer_p, shift_p), (consumer.steps, outer_c, shift_c)):
        for hardware_loop, c in steps:
            if hardware_loop.depth > loop.depth:
                continue  # (a loop inside: its iterations are in the per-iteration range)
            if hardware_loop is loop:
                if step and step != c:
                    return False
                step = c
            else:
                outer.append((id(hardware_loop), c))
            span = c * (hardware_loop.count - 1)
            shift[0] += min(0, span)
            shift[1] += max(0, span)
    if not step or sorted(outer_p) != sorted(outer_c) or producer.space != consumer.space:
        return False
    if not any(hl is loop for hl, _ in producer.steps) or not any(hl is loop for hl, _ in consumer.steps):
        return False
    p_low, p_high = producer.low - shift_p[0], producer.high - shift_p[1]
    c_low, c_high = consumer.low - shift_c[0], consumer.high - shift_c[1]
    if step > 0:
        return c_low + step >= p_high
    return c_high + step <= p_low


def loops_to_peel(fn: func.FuncOp) -> set[scf.ForOp]:
    """Loops with a tile op that conflicts with a tile op after the loop: their last iteration
    is emitted after the hardware loop, so the exit dependency is a plain semaphore pair
    instead of a front-end drain of every iteration's token.

    Two accesses conflict when one writes and their buffers alias: the same root buffer, or
    planned ranges of one memory space that overlap. The loops are visited from the one that
    ends last to the one that ends first, so the accesses after each loop grow by those between
    its end and the previous loop's end: each access joins the later sets once (its buffer, and
    its range in the union of the later ranges of its space), and a loop asks, per distinct
    (buffer, written) inside it, whether that buffer or an overlapping range is accessed (or
    written) later. Comparing every access inside with every later one was quadratic: a
    30-layer decoder spent 3.7 s of its 45 s compile here, now 0.5 s."""
    order: list[Operation] = list(fn.body.walk())
    position = {op: i for i, op in enumerate(order)}
    ranges: dict[SSAValue, tuple[str, int, int]] = {}
    for op in order:
        if isinstance(op, t.AllocOp) and op.offset is not None:
            ranges[op.buffer] = (t.space_of(op.buffer), op.offset.value.data,
                                 op.offset.value.data + op.size_bytes)
    accesses = [(position[op], access) for op in order for access in accessed_buffers(op)]
    access_positions = [i for i, _ in accesses]  # (ascending: a loop's ops are a slice of them)
    loops = [(max((position[o] for o in loop.walk()), default=position[loop]), loop)
             for loop in order if isinstance(loop, scf.ForOp)]
    accessed_later, written_later = _LaterAccesses(ranges), _LaterAccesses(ranges)
    joined = len(accesses)  # accesses[joined:] are in the later sets
    out: set[scf.ForOp] = set()
    for last, loop in sorted(loops, key=lambda x: -x[0]):
        first_later = bisect.bisect_right(access_positions, last)
        for _, (buffer, written) in accesses[first_later:joined]:
            accessed_later.add(buffer)
            if written:
                written_later.add(buffer)
        joined = min(joined, first_later)
        first_inside = bisect.bisect_right(access_positions, position[loop])
        for buffer, written in {a for _, a in accesses[first_inside:first_later]}:
            if (accessed_later if written else written_later).aliases(buffer):
                out.add(loop)
                break
    return out


class _LaterAccesses:
    """Buffers accessed after a point of the function (loops_to_peel): the buffers themselves,
    and per memory space the union of their planned ranges as sorted disjoint intervals, so
    that whether a buffer aliases one of them is a set lookup and a bisection."""

    def __init__(self, ranges: dict[SSAValue, tuple[str, int, int]]):
        self.ranges = ranges
        self.buffers: set[SSAValue] = set()
        self.starts: dict[str, list[int]] = {}
        self.ends: dict[str, list[int]] = {}

    def add(self, buffer: SSAValue) -> None:
        if buffer in self.buffers:
            return
        self.buffers.add(buffer)
        r = self.ranges.get(buffer)
        if r is None or r[2] <= r[1]:  # an empty range overlaps nothing
            return
        space, lo, hi = r
        starts, ends = self.starts.setdefault(space, []), self.ends.setdefault(space, [])
        # merge with every interval it overlaps or touches (the union is what is asked)
        i = bisect.bisect_left(ends, lo)  # the first interval ending at or after lo
        j = bisect.bisect_right(starts, hi)  # the intervals from i up to j start at or before hi
        if i < j:
            lo, hi = min(lo, starts[i]), max(hi, ends[j - 1])
        starts[i:j], ends[i:j] = [lo], [hi]

    def aliases(self, buffer: SSAValue) -> bool:
        """Whether `buffer` or a buffer whose range overlaps its own is in the set."""
        if buffer in self.buffers:
            return True
        r = self.ranges.get(buffer)
        if r is None or r[2] <= r[1]:
            return False
        space, lo, hi = r
        starts, ends = self.starts.get(space), self.ends.get(space)
        if not starts:
            return False
        i = bisect.bisect_right(ends, lo)  # the first interval ending after lo
        return i < len(starts) and starts[i] < hi
