"""The code tile-to-npu emits, before semaphores are physical: a tree of instructions and
hardware loops, and its flattening into one record per program instruction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from xdsl.dialects import scf

from infer.dialects.ir_io import LoweringError


@dataclass(eq=False)
class Instruction:
    """One emitted instruction. `wait`, `signal`, `signal2`, `wait2` are virtual semaphores (0:
    none)."""

    name: str
    fields: dict[str, int]
    engine: str
    loops: tuple[HardwareLoop, ...] = ()  # the hardware loops it is emitted in, outermost first
    sequence: int = 0  # emission order of engine instructions (0: front-end bookkeeping)
    wait: int = 0
    signal: int = 0
    signal2: int = 0
    wait2: int = 0  # a second wait, taken by its engine (isa.Instr.wait2)
    drain_loop: HardwareLoop | None = None  # the loop whose drain covers its drain signal
    known_complete: dict[str, int] = field(default_factory=dict)  # engine -> sequence known
    #                                         complete when this instruction starts
    home_block: list[Item] | None = None  # the block it was appended to
    relays: list[Instruction] | None = None  # front-end relay nops (fan-out beyond two signals)
    group: int = 0  # op-marker group (top-level items only)


@dataclass(eq=False)
class HardwareLoop:
    """One emitted hardware `loop`: its body, the front-end code around it and the address
    registers it steps."""

    count: int
    depth: int  # 1 for an outermost loop
    body: list[Item] = field(default_factory=list)
    prologue: list[Item] = field(default_factory=list)  # front-end instructions before the loop
    register_steps: list[tuple[int, int]] = field(default_factory=list)  # (register, step)
    tail_drains: dict[int, int] = field(default_factory=dict)  # semaphore -> waits per iteration
    exit_drains: dict[int, int] = field(default_factory=dict)  # semaphore -> waits after it
    exit_signals: list[int] = field(default_factory=list)  # semaphores signalled after it
    first_access: int = 0  # index of its body's first access in the dependency tracker
    source_loop: scf.ForOp | None = None
    # a trip count in a register: `ld` of a run-time count (tile.load_index), or the variable
    # part of a count affine in enclosing loops (an address register those loops step); the
    # trip count is count_register + count_immediate (count is then its largest value), and
    # a scratch register resets the stepped registers after the loop
    count_register: int = 0
    count_immediate: int = 0
    reset_register: int = 0
    opened_at: int = 0  # the emission clock when the loop opened
    group: int = 0  # op-marker group (top-level loops only)


Item = Union[Instruction, HardwareLoop]


def front_end_nop(loops: tuple[HardwareLoop, ...], wait: int = 0, signal: int = 0,
                  signal2: int = 0) -> Instruction:
    """A `nop` on the scalar front end: waits for and/or signals semaphores in program order."""
    return Instruction("nop", {}, "scalar", loops, wait=wait, signal=signal, signal2=signal2)


@dataclass
class EmissionCursor:
    """Where the next instruction goes: the hardware loops it is nested in and the block."""

    loops: tuple[HardwareLoop, ...] = ()
    block: list[Item] = field(default_factory=list)

    def append_front_end_wait(self, semaphore: int) -> None:
        self.block.append(front_end_nop(self.loops, wait=semaphore))


@dataclass
class FlatInstruction:
    """One program instruction after flattening: `group` is its op-marker group, `item` the
    index of the first instruction of the top-level item (a top-level instruction, or a
    top-level loop nest with its front-end prologue and epilogue) it belongs to."""

    name: str
    wait: int
    signal: int
    signal2: int
    fields: dict[str, int]
    group: int
    item: int
    wait2: int = 0


def flatten(items: list[Item], loop_depth_limit: int, program: list[FlatInstruction]) -> None:
    """Append the emitted tree to `program` (item numbers are positions in it): each hardware
    loop becomes its prologue, the `loop` instruction, the body (+ per-iteration drains and
    register steps), the register resets and the exit drains and signals."""
    _flatten_into(items, program, 0, loop_depth_limit)


def _flatten_into(items: list[Item], out: list[FlatInstruction], depth: int,
                  loop_depth_limit: int, group: int = 0, item: int | None = None) -> None:
    """`item` is None at the top level: there each instruction or loop starts an item."""
    for emitted in items:
        item_group, item_start = (emitted.group, len(out)) if item is None else (group, item)
        if isinstance(emitted, Instruction):
            out.append(FlatInstruction(emitted.name, emitted.wait, emitted.signal, emitted.signal2,
                                       emitted.fields, item_group, item_start, emitted.wait2))
            continue
        loop = emitted
        _flatten_into(loop.prologue, out, depth, loop_depth_limit, item_group, item_start)
        body: list[FlatInstruction] = []
        _flatten_into(loop.body, body, depth + 1, loop_depth_limit, item_group, item_start)
        _append_drains(loop.tail_drains, body, depth + 1, loop_depth_limit, item_group, item_start)
        for register, step in loop.register_steps:
            body.append(FlatInstruction("addi", 0, 0, 0, dict(rd=register, rs=register, imm=step),
                                        item_group, item_start))
        if not body:
            continue
        if len(body) >= 1 << 16:
            raise LoweringError(f"tile-to-npu: a loop body of {len(body)} instructions "
                                "exceeds the loop instruction's 16-bit body field")
        if loop.count_register:
            out.append(FlatInstruction("loop", 0, 0, 0, dict(count_base=loop.count_register,
                                                              count=loop.count_immediate,
                                                              body=len(body)), item_group, item_start))
        else:
            out.append(FlatInstruction("loop", 0, 0, 0, dict(count=loop.count, body=len(body)),
                                       item_group, item_start))
        out.extend(body)
        for register, step in loop.register_steps:
            if loop.count_register:  # r -= step * (count_register + count_immediate)
                out.append(FlatInstruction("muli", 0, 0, 0, dict(rd=loop.reset_register,
                                                                 rs=loop.count_register, imm=-step),
                                           item_group, item_start))
                out.append(FlatInstruction("add", 0, 0, 0, dict(rd=register, rs=register,
                                                                rt=loop.reset_register),
                                           item_group, item_start))
                if loop.count_immediate:
                    out.append(FlatInstruction("addi", 0, 0, 0, dict(rd=register, rs=register,
                                                                     imm=-step * loop.count_immediate),
                                               item_group, item_start))
                continue
            out.append(FlatInstruction("addi", 0, 0, 0,
                                       dict(rd=register, rs=register, imm=-step * loop.count),
                                       item_group, item_start))
        _append_drains(loop.exit_drains, out, depth, loop_depth_limit, item_group, item_start)
        for semaphore in loop.exit_signals:
            out.append(FlatInstruction("nop", 0, semaphore, 0, {}, item_group, item_start))


def semaphores_of_item(item: Item, used: set[int]) -> bool:
    """Add the virtual semaphores the flattened instructions of `item` use to `used` (as
    `flatten` would emit them: waits, signals, drains, exit signals; a loop whose body flattens
    to nothing is left out with its exit code). Returns whether it flattens to anything."""
    if isinstance(item, Instruction):
        for semaphore in (item.wait, item.signal, item.signal2, item.wait2):
            if semaphore:
                used.add(semaphore)
        return True
    emitted = False
    for inner in item.prologue:
        emitted |= semaphores_of_item(inner, used)
    body: set[int] = set()
    in_body = False
    for inner in item.body:
        in_body |= semaphores_of_item(inner, body)
    if item.tail_drains or item.register_steps:
        in_body = True
        body.update(item.tail_drains)
    if not in_body:
        return emitted
    used |= body
    used.update(item.exit_drains)
    used.update(item.exit_signals)
    return True


def _append_drains(drains: dict[int, int], out: list[FlatInstruction], depth: int,
                   loop_depth_limit: int, group: int, item: int) -> None:
    """Front-end waits taking `count` tokens of each semaphore: one `nop`, a loop around one
    (when a loop level is left), or a few unrolled."""
    for semaphore, count in drains.items():
        wait = FlatInstruction("nop", semaphore, 0, 0, {}, group, item)
        if count == 1:
            out.append(wait)
        elif depth + 1 <= loop_depth_limit:
            out.append(FlatInstruction("loop", 0, 0, 0, dict(count=count, body=1), group, item))
            out.append(wait)
        elif count <= 64:
            out.extend(FlatInstruction("nop", semaphore, 0, 0, {}, group, item)
                       for _ in range(count))
        else:
            raise LoweringError("tile-to-npu: a drain of a loop at the maximum nesting depth "
                                f"needs {count} waits")
