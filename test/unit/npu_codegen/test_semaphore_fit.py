"""semaphores.fits (the window check of kernel-by-kernel compilation, on the emitted tree)
against semaphores.allocate on the flattened instructions: the same answer on random trees of
instructions and hardware loops (nested loops, prologue waits, tail and exit drains, exit
signals, loops that flatten to nothing)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from infer.passes.tile_to_npu.program_tree import HardwareLoop, Instruction, flatten
from infer.passes.tile_to_npu.semaphores import SemaphoreKind, VirtualSemaphores, allocate, fits

VIRTUALS = 12


def _instruction(draw, virtuals: list[int]) -> Instruction:
    pick = st.sampled_from([0, *virtuals])
    return Instruction("nop", {}, "scalar", wait=draw(pick), signal=draw(pick), signal2=draw(pick))


@st.composite
def _items(draw, virtuals: list[int], depth: int = 0) -> list:
    items = []
    for _ in range(draw(st.integers(0, 4))):
        if depth < 2 and draw(st.booleans()):
            loop = HardwareLoop(count=draw(st.integers(1, 3)), depth=depth + 1)
            loop.prologue = [_instruction(draw, virtuals) for _ in range(draw(st.integers(0, 1)))]
            loop.body = draw(_items(virtuals, depth + 1))
            some = st.lists(st.sampled_from(virtuals), max_size=2, unique=True)
            loop.tail_drains = {v: 1 for v in draw(some)}
            loop.exit_drains = {v: draw(st.integers(1, 3)) for v in draw(some)}
            loop.exit_signals = draw(some)
            items.append(loop)
        else:
            items.append(_instruction(draw, virtuals))
    return items


@st.composite
def _programs(draw):
    virtuals = VirtualSemaphores()
    numbers = [virtuals.new(draw(st.sampled_from(SemaphoreKind)), "test") for _ in range(VIRTUALS)]
    return virtuals, draw(_items(numbers)), draw(st.integers(1, 6))


@settings(max_examples=300, deadline=None)
@given(_programs())
def test_fits_agrees_with_allocate(program):
    virtuals, items, count = program
    flat: list = []
    flatten(items, 4, flat)
    for i, inst in enumerate(flat):  # (top-level items are groups of their own)
        inst.group = inst.item
    assert fits(items, count) == (not allocate(flat, virtuals, count).failed_groups)


def test_a_ring_reuses_the_longest_idle_ring():
    """A free ("ring") semaphore holds its idle token again only once its last release has
    completed, so a ring range that reuses a physical semaphore waits for that: of the idle
    rings, allocate gives a new one the one idle longest (B's, released at item 1, not A's,
    released at item 3), whatever their numbers."""
    from infer.passes.tile_to_npu.program_tree import FlatInstruction

    virtuals = VirtualSemaphores()
    a, b, c = (virtuals.new(SemaphoreKind.RING, name) for name in "abc")
    uses = [(0, a, b), (b, 0, 0), (0, 0, 0), (a, 0, 0), (0, 0, 0), (0, c, 0), (c, 0, 0)]
    program = [FlatInstruction("nop", wait, signal, signal2, {}, 0, i)
               for i, (wait, signal, signal2) in enumerate(uses)]
    allocation = allocate(program, virtuals, 3)
    physical = allocation.physical
    assert not allocation.failed_groups and physical[a] != physical[b]
    assert physical[c] == physical[b], physical
