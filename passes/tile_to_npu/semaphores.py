"""Semaphore allocation: the virtual semaphores the emitting stages create, mapped onto the
target's physical s1..sN by live range once the program is flat.

A virtual is live over every *top-level item* that uses it (a top-level instruction, or a
top-level loop nest with its front-end prologue and epilogue, so tokens carried across
iterations stay inside the range). Two virtuals with disjoint ranges share a physical
semaphore: a balanced one consumes every token it signals within its range, a ring holds one
idle token before and after. A physical semaphore going from a ring to a balanced use is
drained by a front-end `nop wait` at the start of the new range, one going the other way gets
its idle token from a `nop signal` there; both sit between top-level items, so no loop body
changes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from xdsl.ir import Operation

from infer.dialects.ir_io import LoweringError
from infer.passes.tile_to_npu.program_tree import FlatInstruction, Item, semaphores_of_item


class SemaphoreKind(enum.Enum):
    BALANCED = "balanced"  # every token signalled in its live range is consumed in it
    RING = "ring"  # holds one idle token before and after its live range ("free" semaphores)


@dataclass(frozen=True)
class VirtualSemaphore:
    kind: SemaphoreKind
    purpose: str  # what it is for, named in the out-of-semaphores error


class VirtualSemaphores:
    """The virtual semaphores of one compilation, numbered from FIRST_ID in creation order (so
    they never collide with a physical number)."""

    FIRST_ID = 1 << 20

    def __init__(self) -> None:
        self.records: dict[int, VirtualSemaphore] = {}

    def new(self, kind: SemaphoreKind, purpose: str) -> int:
        number = self.FIRST_ID + len(self.records)
        self.records[number] = VirtualSemaphore(kind, purpose)
        return number

    def balanced(self, purpose: str) -> int:
        return self.new(SemaphoreKind.BALANCED, purpose)

    def __getitem__(self, number: int) -> VirtualSemaphore:
        return self.records[number]

    def __len__(self) -> int:
        return len(self.records)

    def forget_after(self, count: int) -> None:
        """Forget every virtual created after the first `count` (a kernel compiled again)."""
        for number in range(self.FIRST_ID + count, self.FIRST_ID + len(self.records)):
            del self.records[number]


class OutOfSemaphores(LoweringError):
    """Semaphore assignment failed; `items` are the top-level ops of the kernels that did not fit,
    `fallback_overrides` graph-to-tile's overrides that lower them with less overlap
    (`tile.semaphore_fallback`; driver.compile_function fills them in)."""

    def __init__(self, msg: str, items: list[Operation], fallback_overrides: list[str] | None = None):
        super().__init__(msg)
        self.items = items
        self.fallback_overrides = fallback_overrides or []


def assign_physical_semaphores(program: list[FlatInstruction], virtuals: VirtualSemaphores,
                               count: int,
                               ops_of_group: dict[int, list[Operation]]) -> list[FlatInstruction]:
    """`program` with every virtual semaphore replaced by one of s1..s`count` (plus the
    front-end nops that hand a physical semaphore from a ring to a balanced use or back).
    Raises OutOfSemaphores naming the top-level ops of every op-marker group (kernel) that
    did not fit, so the driver can compile all of them again with less overlap at once."""
    allocation = allocate(program, virtuals, count)
    if allocation.failed_groups:
        raise OutOfSemaphores(allocation.message, [op for g in sorted(allocation.failed_groups)
                                                   for op in ops_of_group.get(g, [])])
    out: list[FlatInstruction] = []
    physical = allocation.physical
    for i, inst in enumerate(program):
        out.extend(allocation.inserted.get(i, ()))
        out.append(FlatInstruction(inst.name, physical.get(inst.wait, 0),
                                   physical.get(inst.signal, 0), physical.get(inst.signal2, 0),
                                   inst.fields, inst.group, inst.item, physical.get(inst.wait2, 0)))
    return out


@dataclass
class Allocation:
    """What `allocate` decided: virtual -> physical, the handover nops to insert before an
    instruction index, and the op-marker groups that did not fit (with the first failure's
    message)."""

    physical: dict[int, int]
    inserted: dict[int, list[FlatInstruction]]
    failed_groups: set[int]
    message: str


def fits(items: list[Item], count: int) -> bool:
    """Do `count` physical semaphores hold the virtuals of these top-level items? A virtual
    lives from the first to the last item using it (as `allocate` has it: whole items), and
    allocate's greedy by live-range start gives each virtual a free physical one exactly when
    no item has more than `count` live (interval graphs), so this counts the most live at any
    item without flattening the items into instructions."""
    first_use: dict[int, int] = {}
    last_use: dict[int, int] = {}
    for index, item in enumerate(items):
        used: set[int] = set()
        semaphores_of_item(item, used)
        for virtual in used:
            first_use.setdefault(virtual, index)
            last_use[virtual] = index
    starting = [0] * (len(items) + 1)
    for virtual, first in first_use.items():
        starting[first] += 1
        starting[last_use[virtual] + 1] -= 1
    live = 0
    for change in starting:
        live += change
        if live > count:
            return False
    return True


def allocate(program: list[FlatInstruction], virtuals: VirtualSemaphores,
             count: int) -> Allocation:
    """Greedy by live-range start: every virtual gets a physical semaphore free over its
    range, or its group is marked failed (and allocation goes on, to find every kernel that
    does not fit). Also run on a window of the program (codegen.py, kernel by kernel): a
    virtual used before the window then starts at its first instruction."""
    item_span: dict[int, tuple[int, int]] = {}  # top-level item -> [first, end) instruction
    for i, inst in enumerate(program):
        first, end = item_span.get(inst.item, (i, i + 1))
        item_span[inst.item] = (min(first, i), max(end, i + 1))
    live: dict[int, tuple[int, int]] = {}  # virtual -> [first, end) instruction of its items
    for inst in program:
        first, end = item_span[inst.item]
        for virtual in (inst.wait, inst.signal, inst.signal2, inst.wait2):
            if virtual:
                live_first, live_end = live.get(virtual, (first, end))
                live[virtual] = (min(live_first, first), max(live_end, end))
    busy_until = [0] * (count + 1)  # physical -> end of its current live range
    idle_tokens = [0] * (count + 1)  # physical -> tokens it holds between ranges (1 after a ring)
    physical: dict[int, int] = {}
    inserted: dict[int, list[FlatInstruction]] = {}  # instruction index -> nops before it
    failed_groups: set[int] = set()
    message = ""
    for virtual in sorted(live, key=lambda v: (live[v][0], v)):
        first, end = live[virtual]
        is_ring = virtuals[virtual].kind is SemaphoreKind.RING
        free = [q for q in range(1, count + 1) if busy_until[q] <= first]
        if not free:
            held = sorted(virtuals[other].purpose for other, q in physical.items()
                          if busy_until[q] > first and live[other][1] > first
                          and live[other][0] <= first)
            if not failed_groups:
                message = (f"tile-to-npu: out of semaphores (scalar.semaphores = {count}): "
                           f"{len(held) + 1} needed at instruction {first} ({', '.join(held)}, "
                           f"and a {virtuals[virtual].purpose})")
            failed_groups.add(program[first].group)
            continue  # find every kernel that does not fit before giving up
        wanted_tokens = 1 if is_ring else 0
        matching = [q for q in free if idle_tokens[q] == wanted_tokens]
        if matching:
            # the longest idle: a ring's idle token is back only once its last release has
            # completed, and the new range's first take waits for it (MiniLM's attention on
            # server with double buffers: the second head group's first q.K^T took the token
            # of the first group's last output store, just released, ~400 cycles a layer)
            chosen = min(matching, key=lambda q: busy_until[q])
        else:  # the longest idle one: its last token is the most likely to be there
            chosen = min(free, key=lambda q: busy_until[q])
            at = program[first]
            handover = (FlatInstruction("nop", 0, chosen, 0, {}, at.group, at.item) if is_ring
                        else FlatInstruction("nop", chosen, 0, 0, {}, at.group, at.item))
            inserted.setdefault(first, []).append(handover)
        physical[virtual] = chosen
        busy_until[chosen] = end
        idle_tokens[chosen] = wanted_tokens
    return Allocation(physical, inserted, failed_groups, message)
