"""Address registers: tile-IR index operands as affine functions of loop iterations, how each
emitted copy of a loop body binds its induction variable, and the strength-reduced address
registers.

An address is `base + sum_L c_L * t_L` (t_L = iteration number of loop L): the constant part
is the instruction's immediate, the variable part lives in a register shared by all addresses
with the same coefficients. At the end of loop L's body `addi r, r, c_L` steps each register
whose key contains L, and after loop L `addi r, r, -c_L * trips` resets it (registers are 0
when not in use; `li r, 0` at program start makes that hold whatever the runtime preset).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import NamedTuple

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import BlockArgument, Operation, SSAValue

from infer.dialects import tile as t
from infer.dialects.ir_io import LoweringError
from infer.passes.tile_to_npu.common import fail
from infer.passes.tile_to_npu.program_tree import HardwareLoop


@dataclass
class AffineIndex:
    """constant + sum of coefficient * (iteration number of scf.for loop)."""

    constant: int
    coefficients: dict[scf.ForOp, int]

    def __add__(self, other: AffineIndex) -> AffineIndex:
        summed = dict(self.coefficients)
        for loop, c in other.coefficients.items():
            summed[loop] = summed.get(loop, 0) + c
        return AffineIndex(self.constant + other.constant,
                           {loop: c for loop, c in summed.items() if c})

    def scaled(self, factor: int) -> AffineIndex:
        return AffineIndex(self.constant * factor,
                           {loop: c * factor for loop, c in self.coefficients.items() if c * factor})


# id(value) -> its AffineIndex, and (base, shape, element bytes, *ids of indices) -> a buffer
# element's address, while `affine_cache()` is open (one lowering of a function: the IR does not
# change under it, so its values live and keep their ids, and a function is compiled again when
# it runs out of semaphores)
_AFFINE_CACHE: ContextVar[dict[object, AffineIndex] | None] = ContextVar("affine_cache", default=None)


@contextmanager
def affine_cache() -> Iterator[None]:
    """Remember every affine_of result until the block ends (the IR must not change in it)."""
    token = _AFFINE_CACHE.set({})
    try:
        yield
    finally:
        _AFFINE_CACHE.reset(token)


def affine_of(value: SSAValue, user: Operation) -> AffineIndex:
    """An index operand as an affine function of loop iteration numbers; anything that is not
    arith.constant/addi/subi/muli-by-a-constant of scf.for induction variables is an error
    naming the op. (The result is shared when cached: AffineIndex values are never changed
    in place.)"""
    cache = _AFFINE_CACHE.get()
    if cache is None:
        return _affine_of(value, user)
    # (keyed by id: an SSA value's __hash__ is a Python call, and the IR outlives the cache)
    index = cache.get(id(value))
    if index is None:
        index = cache[id(value)] = _affine_of(value, user)
    return index


def _affine_of(value: SSAValue, user: Operation) -> AffineIndex:
    owner = value.owner
    if isinstance(owner, arith.ConstantOp):
        if isinstance(owner.value, IntegerAttr):
            return AffineIndex(int(owner.value.value.data), {})
    elif isinstance(owner, arith.AddiOp):
        return affine_of(owner.lhs, user) + affine_of(owner.rhs, user)
    elif isinstance(owner, arith.SubiOp):
        return affine_of(owner.lhs, user) + affine_of(owner.rhs, user).scaled(-1)
    elif isinstance(owner, arith.MuliOp):
        lhs, rhs = affine_of(owner.lhs, user), affine_of(owner.rhs, user)
        if not lhs.coefficients:
            return rhs.scaled(lhs.constant)
        if not rhs.coefficients:
            return lhs.scaled(rhs.constant)
        raise fail(owner, "index operand is not an affine function of loop induction "
                   "variables (product of two loop-dependent values)")
    elif isinstance(value, BlockArgument):
        loop = value.block.parent_op()
        if isinstance(loop, scf.ForOp) and value is loop.body.block.args[0]:
            lower = constant_of(loop.lb, loop, "lower bound")
            step = constant_of(loop.step, loop, "step")
            return AffineIndex(lower, {loop: step})
    what = owner.name if isinstance(owner, Operation) else "a block argument"
    raise fail(user, f"index operand defined by {what} is not an affine function of loop "
               "induction variables (only arith.constant/addi/subi/muli and scf.for "
               "induction variables are supported)")


def constant_of(value: SSAValue, op: Operation, what: str) -> int:
    index = affine_of(value, op)
    if index.coefficients:
        raise fail(op, f"the loop {what} must be a constant")
    return index.constant


@dataclass
class LoopBinding:
    """What an scf.for's iteration number t is in the body copy being emitted: a fixed
    `iteration` (an inlined or peeled copy), or t = unroll * j + offset with j the iteration
    of `hardware_loop` (the body is emitted `unroll` times per hardware iteration)."""

    iteration: int | None = None
    hardware_loop: HardwareLoop | None = None
    unroll: int = 1
    offset: int = 0
    round: object = None  # identity of this emitted body copy (a double buffer's round)
    trip: int | None = None  # the loop's trip count in this copy's emission (None: it varies)
    # a copy after the hardware loop of a loop whose trip count is affine in enclosing loops
    # (codegen.emit_affine_for): iteration `trip - from_end`, with trip = `trip_index` (an
    # affine function of the enclosing loops' iterations); `parity`: that iteration mod 2
    from_end: int = 0
    trip_index: AffineIndex | None = None
    parity: int = 0

    @property
    def half(self) -> int:
        """The half of a double buffer rotating on this loop that this copy uses."""
        if self.from_end:
            return self.parity
        return (self.iteration % 2) if self.iteration is not None else self.offset % 2


# the variable part of an address: ((hardware loop, bytes per hardware iteration), ...)
RegisterKey = tuple[tuple[HardwareLoop, int], ...]


class Address(NamedTuple):  # (a tuple: built for every operand of every emitted instruction)
    register_key: RegisterKey
    immediate: int
    low: int  # the lowest and highest value over every iteration of the key's loops
    high: int


def resolve(index: AffineIndex, bindings: dict[scf.ForOp, LoopBinding]) -> Address:
    """An affine index in the body copy being emitted: fixed iterations fold into the
    immediate, hardware-loop iterations into the register key."""
    immediate = index.constant
    per_loop: dict[HardwareLoop, int] = {}
    for loop, c in index.coefficients.items():
        binding = bindings.get(loop)
        if binding is None:
            raise LoweringError("tile-to-npu: index uses an induction variable outside its loop")
        if binding.from_end:  # (rare: a triangular loop's copies after its hardware loop)
            return resolve(_counted_from_end(index, bindings), bindings)
        if binding.iteration is not None:
            immediate += c * binding.iteration
        else:
            immediate += c * binding.offset
            hardware_loop = binding.hardware_loop
            assert hardware_loop is not None
            per_loop[hardware_loop] = per_loop.get(hardware_loop, 0) + c * binding.unroll
    key = tuple((hardware_loop, c) for hardware_loop, c in per_loop.items() if c)
    low = high = immediate
    for hardware_loop, c in key:
        span = c * (hardware_loop.count - 1)
        low += min(0, span)
        high += max(0, span)
    return Address(key, immediate, low, high)


def _counted_from_end(index: AffineIndex, bindings: dict[scf.ForOp, LoopBinding]) -> AffineIndex:
    """c * t of a loop bound to a copy counted from its end (t = trip - k, the trip count affine
    in enclosing loops) becomes c * trip - c * k, in terms of the enclosing loops."""
    while any((b := bindings.get(loop)) is not None and b.from_end for loop in index.coefficients):
        out = AffineIndex(index.constant, {})
        for loop, c in index.coefficients.items():
            binding = bindings.get(loop)
            if binding is not None and binding.from_end:
                assert binding.trip_index is not None
                out = out + binding.trip_index.scaled(c) + AffineIndex(-c * binding.from_end, {})
            else:
                out = out + AffineIndex(0, {loop: c})
        index = out
    return index


def trip_index_of(loop: scf.ForOp) -> AffineIndex:
    """A loop's trip count as an affine function of enclosing loops' iterations: constant
    lower bound and step, an upper bound affine in enclosing loops whose coefficients the step
    divides (a triangular loop nest: `scf.for %j = %c0 to %q0 + TQ step %TKV`)."""
    lower = constant_of(loop.lb, loop, "lower bound")
    step = constant_of(loop.step, loop, "step")
    if step <= 0:
        raise fail(loop, f"loop step must be positive, got {step}")
    upper = affine_of(loop.ub, loop)
    if any(c % step for c in upper.coefficients.values()):
        raise fail(loop, f"the upper bound's terms in enclosing loops must be multiples of the "
                   f"step ({step}) so that the trip count is affine in those loops")
    return AffineIndex(-(-(upper.constant - lower) // step),
                       {outer: c // step for outer, c in upper.coefficients.items()})


class AddressRegisters:
    """r1..r(count-1): one register per distinct register key while the key's outermost loop
    is emitted, then free again. Allocation is best-fit (the register freed last before the
    loop opened), so registers freed long ago stay available to keys of loops that opened
    long ago (a register must be unused over the whole loop it is live in)."""

    def __init__(self, count: int):
        self.count = count
        # (register, emission clock when it was freed)
        self.free: list[tuple[int, int]] = [(r, 0) for r in range(1, count)]
        self.used: set[int] = set()  # every register the program uses (reset at start)
        self.by_key: dict[tuple, int] = {}
        self.owner: dict[int, HardwareLoop] = {}  # register -> the loop it is live over

    def register_for(self, key: RegisterKey) -> int:
        """The register holding key's variable part (r0 = 0 for a constant address); a new
        one is stepped by every loop of the key."""
        if not key:
            return 0
        register = self.by_key.get(key)  # (hardware loops hash by identity)
        if register is not None:
            return register
        outermost = min((loop for loop, _ in key), key=lambda loop: loop.depth)
        fits = [i for i, (_, freed) in enumerate(self.free) if freed <= outermost.opened_at]
        pick = max(fits, key=lambda i: self.free[i][1]) if fits else None
        if pick is None:
            raise LoweringError(f"tile-to-npu: out of address registers (scalar.registers = "
                                f"{self.count}): too many distinct loop strides")
        register = self.free.pop(pick)[0]
        self.used.add(register)
        self.by_key[key] = register
        for loop, c in key:
            loop.register_steps.append((register, c))
        self.owner[register] = outermost
        return register

    def checkpoint(self) -> tuple:
        """The state between two kernels (no loop open), for `rollback`."""
        return list(self.free), set(self.used), dict(self.by_key), dict(self.owner)

    def rollback(self, state: tuple) -> None:
        free, used, by_key, owner = state
        self.free, self.used, self.by_key, self.owner = list(free), set(used), dict(by_key), dict(owner)

    def release_loop(self, loop: HardwareLoop, clock: int) -> None:
        """The loop is closed: the registers live over it are free from `clock` on."""
        for register, owner in list(self.owner.items()):
            if owner is loop:
                del self.owner[register]
                self.by_key = {k: r for k, r in self.by_key.items() if r != register}
                self.free.append((register, clock))

    def take_scratch(self, op: Operation) -> int:
        """A register for front-end arithmetic (e.g. a gathered row's address)."""
        if not self.free:
            raise fail(op, f"out of address registers (scalar.registers = {self.count}) for "
                       "the gathered row number")
        register = self.free.pop(0)[0]
        self.used.add(register)
        return register

    def give_back_scratch(self, register: int, clock: int) -> None:
        self.free.append((register, clock))


@dataclass
class TileBuffer:
    """A buffer (or view) placed in memory: where it starts and how it is laid out."""

    space: str  # dram | spad | acc
    base: int  # absolute address (local: scratchpad address space, acc at isa.ACC_BASE)
    shape: tuple[int, ...]
    element_bytes: int
    element: str  # element type name (f32, bf16, i8, ...)
    rotating_alloc: t.AllocOp | None = None  # double-buffered alloc with a rotation loop
    half_bytes: int = 0  # the distance between the halves of a double buffer

    @property
    def strides(self) -> list[int]:
        """Row-major element strides."""
        out, stride = [], 1
        for size in reversed(self.shape):
            out.append(stride)
            stride *= size
        return list(reversed(out))

    def element_address(self, indices: list[SSAValue], user: Operation) -> AffineIndex:
        """The byte address of element [indices] (in the first half of a double buffer)."""
        cache = _AFFINE_CACHE.get()
        if cache is None:
            return self._element_address(indices, user)
        key = (self.base, self.shape, self.element_bytes, *map(id, indices))  # (as affine_of's)
        address = cache.get(key)
        if address is None:
            address = cache[key] = self._element_address(indices, user)
        return address

    def _element_address(self, indices: list[SSAValue], user: Operation) -> AffineIndex:
        address = AffineIndex(self.base, {})
        for index, stride in zip(indices, self.strides):
            address = address + affine_of(index, user).scaled(stride * self.element_bytes)
        return address
