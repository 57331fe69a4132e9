"""The tile-to-npu code generator (being split into stages)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import BlockArgument, Operation, SSAValue

from infer.dialects import tile as t
from infer.dialects.ir_io import LoweringError
from infer.passes.npu_layout import NpuLayout
from infer.passes.tile_to_npu.common import (
    accessed_buffers,
    engine_of,
    enclosing_loops,
    fail,
    is_output_argument,
    memref_info,
    root_buffer,
    trip_count,
    users_through_views,
)
from infer.passes.tile_to_npu.markers import KernelGroups, op_markers
from infer.passes.tile_to_npu.program_tree import FlatInstruction, HardwareLoop, Instruction, flatten
from infer.passes.tile_to_npu.semaphores import (
    SemaphoreKind,
    VirtualSemaphores,
    assign_physical_semaphores,
)
from infer.target import isa
from infer.target.hw import HardwareConfig

DT = {"i8": 0, "i32": 1, "f32": 2, "bf16": 3}
ENGINES = ("dma_load", "dma_store", "matrix", "vector")


# degrade levels of a loop nest that runs out of semaphores (see TileToNpuPass.apply)
NO_OUTER_DOUBLE_BUFFERING, NO_PIPELINING, NO_DOUBLE_BUFFERING = 1, 2, 3
MAX_DEGRADE = NO_DOUBLE_BUFFERING
MAX_INLINED_TRIP = 16  # longest loop emitted iteration by iteration when nesting runs out


@dataclass(eq=False)
class Access:
    lo: int
    hi: int
    space: str
    write: bool
    inst: Instruction
    ring: tuple | None  # (alloc, half, round)


class _AccessIndex:
    """Every emitted access, listed by (space, page, engine, writes?) in emission order, so the
    dependency tracker finds an engine's latest conflicting access by scanning a few short lists
    backwards instead of the whole program (that scan was quadratic: minutes on ResNet-50)."""

    SHIFT = {"dram": 20, "local": 14}  # 1 MiB / 16 KiB pages
    WIDE = 64  # accesses spanning more pages go to one list per (space, engine, writes?)

    def __init__(self) -> None:
        self.lists: dict[tuple, list[Access]] = {}
        self.keys: dict[tuple[str, str], list[tuple]] = {}  # (space, engine) -> its list keys

    def _pages(self, a: Access) -> range | None:
        sh = self.SHIFT[a.space]
        p0, p1 = a.lo >> sh, (a.hi - 1) >> sh
        return None if p1 - p0 >= self.WIDE else range(p0, p1 + 1)

    def add(self, a: Access) -> None:
        pages = self._pages(a)
        for p in pages if pages is not None else (None,):
            key = (a.space, p, a.inst.engine, a.write)
            lst = self.lists.get(key)
            if lst is None:
                lst = self.lists[key] = []
                self.keys.setdefault((a.space, a.inst.engine), []).append(key)
            lst.append(a)

    def latest(self, a: Access, engine: str, best: Access | None) -> Access | None:
        """The latest access of `engine` that conflicts with a (overlapping bytes, one of
        them writing, not the same double-buffer half in another round), if later than best."""
        pages = self._pages(a)
        if pages is None:  # a wide query: every page list of this space
            keys = self.keys.get((a.space, engine), [])
        else:
            keys = [(a.space, p, engine, w) for p in (*pages, None) for w in (True, False)]
        for key in keys:
            if not (key[3] or a.write):
                continue
            for r in reversed(self.lists.get(key, ())):
                if best is not None and r.inst.sequence <= best.inst.sequence:
                    break
                if r.hi <= a.lo or a.hi <= r.lo:
                    continue
                if r.ring and a.ring and r.ring[:2] == a.ring[:2] and r.ring[2] is not a.ring[2]:
                    continue
                best = r
                break
        return best


@dataclass
class Binding:
    """scf.for induction value: t = U * j + u (j = iteration of `loop`), or fixed t."""

    fixed: int | None = None
    loop: HardwareLoop | None = None
    unroll: int = 1
    u: int = 0
    round: object = None


@dataclass
class Aff:
    const: int
    coeffs: dict  # scf.ForOp -> coefficient of its iteration number t

    def __add__(self, o: Aff) -> Aff:
        c = dict(self.coeffs)
        for k, v in o.coeffs.items():
            c[k] = c.get(k, 0) + v
        return Aff(self.const + o.const, {k: v for k, v in c.items() if v})

    def scale(self, s: int) -> Aff:
        return Aff(self.const * s, {k: v * s for k, v in self.coeffs.items() if v * s})


@dataclass
class Buf:
    space: str  # dram | spad | acc
    base: int  # absolute address (local: scratchpad address space, acc at ACC_BASE)
    shape: tuple[int, ...]
    esize: int
    elem: str
    alloc: t.AllocOp | None = None  # double-buffered alloc with a rotation loop
    half_bytes: int = 0

    @property
    def strides(self) -> list[int]:
        out, acc = [], 1
        for d in reversed(self.shape):
            out.append(acc)
            acc *= d
        return list(reversed(out))


# =========================================================================== codegen


class _Codegen:
    def __init__(self, hw: HardwareConfig, layout: NpuLayout, fn: func.FuncOp,
                 pipeline: bool = True, degrade: dict[Operation, int] | None = None):
        self.hw, self.layout, self.fn = hw, layout, fn
        self.degrade = degrade or {}  # top-level op -> degrade level
        self.pipelining = pipeline
        self.bufs: dict[SSAValue, Buf] = {}
        self.bind: dict[scf.ForOp, Binding] = {}
        self.ctx: tuple[HardwareLoop, ...] = ()
        self.block: list = []
        self.sequence_numbers = itertools.count(1)
        self.accesses: list[Access] = []
        self.index = _AccessIndex()
        self.coverage: dict[tuple[str, str], int] = {}
        self.loaded: tuple | None = None  # the weights tile in the array (see _matmul)
        self.loaded_range: tuple[str, int, int] = ("", 0, 0)
        # registers
        # (register, emission time it was freed): reusable by a key whose outermost loop
        # opened after that (the register is live over that whole loop)
        self.free_regs: list[tuple[int, int]] = [(r, 0) for r in range(1, hw.scalar.registers)]
        self.now = 0
        self.used_regs: set[int] = set()
        self.regs: dict[tuple, int] = {}
        self.reg_owner: dict[int, HardwareLoop] = {}
        # semaphores are virtual while emitting; assign_physical_semaphores maps them onto
        # s1..sN by live range (per top-level item)
        self.nsems = min(hw.scalar.semaphores, isa.MAX_SEMAPHORES)
        self.semaphores = VirtualSemaphores()
        self.pair: dict[tuple[str, str], int] = {}  # reset at every top-level item
        self.zsem: dict[int, int] = {}
        self.ring_pool: list[int] = []  # idle ring virtuals of the current top-level item
        self.ring_sems: dict[tuple, int] = {}  # (group, half) -> its ring virtual (this item)
        self.ring_active: set[int] = set()  # ring virtuals of the loops being emitted
        self.kernel_groups = KernelGroups()  # op markers: top-level items -> kernel groups
        self.ring_free: dict[tuple, int] = {}  # (alloc, half) -> semaphore
        # double buffering
        self.rotation: dict[t.AllocOp, scf.ForOp] = {}
        self.rot_loops: set[scf.ForOp] = set()
        self.ring_first: dict[t.AllocOp, Operation] = {}
        self.ring_last: dict[t.AllocOp, Operation] = {}
        # "free" semaphore groups (see _plan_ring_groups): alloc -> group key, or no entry when
        # one engine does both its first and its last access (in-order: nothing to wait for)
        self.ring_group: dict[t.AllocOp, tuple] = {}
        self.ring_take: set[t.AllocOp] = set()  # the member whose first access takes the token
        self.ring_give: set[t.AllocOp] = set()  # the member whose last access releases it
        # software pipelining: rotation loop -> its DMA loads issued one iteration ahead
        self.pipe: dict[scf.ForOp, list[t.DmaOp]] = {}
        self.pipe_sem: dict[t.AllocOp, int] = {}  # pipelined alloc -> the loop's "full" semaphore
        self.pipe_taken: set[tuple] = set()  # (alloc, round) whose full token was consumed
        self.pipe_loads: set[t.DmaOp] = set()
        self.part = (True, True)  # (first, last) instruction of the op being emitted

    # ------------------------------------------------------------------ driver
    def run(self):
        from infer.target.asm import Program

        self._plan_rotation()
        self.peel = _loops_to_peel(self.fn)
        for i, arg in enumerate(self.fn.body.block.args):
            r = self.layout.args[i]
            shape, elem, esize = memref_info(arg.type)  # type: ignore[arg-type]
            self.bufs[arg] = Buf("dram", r.offset, shape, esize, elem)
        self._block(self.fn.body.block.ops, top=True)
        program = [FlatInstruction("li", 0, 0, 0, dict(rd=reg, imm=0), 0, i)
                   for i, reg in enumerate(sorted(self.used_regs))]
        flatten(self.block, self.hw.scalar.loop_depth, program)
        program.append(FlatInstruction("halt", 0, 0, 0, {}, max(self.kernel_groups.current, 0),
                                       len(program)))
        program = assign_physical_semaphores(program, self.semaphores, self.nsems,
                                             self.kernel_groups.ops_of_group)
        out = [isa.make(e.name, e.wait, e.signal, e.signal2, **e.fields) for e in program]
        dram = {v: (b.base, b.shape, b.elem) for v, b in self.bufs.items() if b.space == "dram"}
        self.ops = op_markers(program, self.kernel_groups, dram, self.layout, self.fn)
        prog = Program(out)
        prog.check_structure()
        return prog

    def _plan_rotation(self) -> None:
        for a in self.fn.walk():
            if not isinstance(a, t.AllocOp) or a.buffers.value.data != 2:
                continue
            users = users_through_views(a.buffer)
            if not users:
                continue
            loops = None
            for u in users:
                chain = enclosing_loops(u, self.fn)
                loops = chain if loops is None else [x for x in loops if x in chain]
            # innermost loop containing every use, with >= 2 iterations
            for lp in reversed(loops or []):
                if trip_count(lp) >= 2:
                    if self._level(lp) >= NO_DOUBLE_BUFFERING:
                        break
                    self.rotation[a] = lp
                    self.rot_loops.add(lp)
                    ordered = [o for o in lp.walk() if o in users]
                    self.ring_first[a], self.ring_last[a] = ordered[0], ordered[-1]
                    break
        outer = {lp for lp in self.rot_loops if self._level(lp) >= NO_OUTER_DOUBLE_BUFFERING
                 and any(o in self.rot_loops for o in lp.walk() if o is not lp)}
        for a in [a for a, lp in self.rotation.items() if lp in outer]:
            del self.rotation[a], self.ring_first[a], self.ring_last[a]
        self.rot_loops -= outer
        for lp in self.rot_loops if self.pipelining else ():
            if self._level(lp) >= NO_PIPELINING:
                continue
            loads = _pipelinable_loads(lp, self.rotation, self.ring_first, self.fn)
            if loads:
                self.pipe[lp] = loads
        self._plan_ring_groups()

    def _level(self, op: Operation) -> int:
        """The degrade level of the top-level op containing op."""
        while op.parent_op() is not self.fn and op.parent_op() is not None:
            op = op.parent_op()  # type: ignore[assignment]
        return self.degrade.get(op, 0)

    def _plan_ring_groups(self) -> None:
        """One "free" semaphore per half for every group of a rotation loop's double-buffered
        allocs whose first accesses run on one engine Y and last accesses on one engine X != Y
        (and that are all, or all not, software-pipelined loads: those are issued ahead of the
        rest of the body). Per round, only the group's last release on X (in program order)
        signals, and only its first take on Y waits: X and Y run their queues in order, so
        every other member's last access has completed before that signal and every other
        member's first access starts after that wait. When X == Y no semaphore is needed at
        all. (One semaphore per alloc and half ran out of semaphores on attention kernels
        with a dozen double-buffered temporaries.)"""
        piped = {root_buffer(ld.dst).owner for loads in self.pipe.values() for ld in loads}
        order: dict[scf.ForOp, dict[Operation, int]] = {}
        groups: dict[tuple, list[t.AllocOp]] = {}
        for a, lp in self.rotation.items():
            first_e, last_e = engine_of(self.ring_first[a]), engine_of(self.ring_last[a])
            if first_e == last_e:
                continue
            key = (lp, first_e, last_e, a in piped)
            self.ring_group[a] = key
            groups.setdefault(key, []).append(a)
        for key, members in groups.items():
            lp = key[0]
            if lp not in order:
                order[lp] = {o: i for i, o in enumerate(lp.walk())}
            idx = order[lp]
            self.ring_take.add(min(members, key=lambda a: idx[self.ring_first[a]]))
            self.ring_give.add(max(members, key=lambda a: idx[self.ring_last[a]]))

    # ------------------------------------------------------------------ IR walk
    def _block(self, ops, top: bool = False) -> None:
        for op in ops:
            if isinstance(op, (arith.ConstantOp, arith.AddiOp, arith.SubiOp, arith.MuliOp,
                               scf.YieldOp, func.ReturnOp)):
                continue
            if top:
                tail = self.block[-1] if self.block else None
                self._top_item(op)
                self._op(op)
                # the items after the previous op's last one are this op's, except fan-out relays
                # of that last instruction (_add_signal inserts relays after their producer, also
                # while a later op is emitted: an index-based range would shift into the old op)
                mine = [] if tail is None else [tail, *(getattr(tail, "relays", None) or ())]
                for it in reversed(self.block):
                    if any(it is m for m in mine):
                        it.group = tail.group  # type: ignore[union-attr]
                        if it is tail:
                            break
                        continue
                    it.group = self.kernel_groups.current
                continue
            self._op(op)

    def _top_item(self, op: Operation) -> None:
        """A top-level op starts a new live range for pair/drain semaphores, and (a tile.alloc
        after instructions were emitted) a new op-marker group: graph-to-tile emits each kernel
        as its allocs followed by its code."""
        self.pair = {}
        self.zsem = {}
        self.ring_pool = []
        self.ring_sems = {}
        self.kernel_groups.add_top_level_op(op)

    def _op(self, op: Operation) -> None:
        if isinstance(op, t.AllocOp):
            self._alloc(op)
        elif isinstance(op, t.WeightOp):
            shape, elem, esize = memref_info(op.buffer.type)  # type: ignore[arg-type]
            off = op.attributes["tile.offset"].value.data  # type: ignore[union-attr]
            self.bufs[op.buffer] = Buf("dram", self.layout.weights_offset + off, shape, esize,
                                       elem)
        elif isinstance(op, t.ViewOp):
            src = self.bufs[op.source]
            shape, elem, esize = memref_info(op.result.type)  # type: ignore[arg-type]
            self.bufs[op.result] = Buf(src.space, src.base, shape, esize, elem, src.alloc,
                                       src.half_bytes)
        elif isinstance(op, scf.ForOp):
            self._for(op)
        elif isinstance(op, t.DmaOp):
            self._dma(op)
        elif isinstance(op, t.MatmulOp):
            self._matmul(op)
        elif isinstance(op, t.VectorOp):
            self._vector(op)
        elif isinstance(op, t.FillOp):
            self._fill(op)
        elif isinstance(op, t.GatherRowsOp):
            self._gather_rows(op)
        else:
            raise fail(op, "unsupported op in a tile-level function")

    def _alloc(self, op: t.AllocOp) -> None:
        if op.offset is None:
            raise fail(op, "the alloc has no offset: run tile-plan-memory first")
        shape, elem, esize = memref_info(op.buffer.type)  # type: ignore[arg-type]
        space = t.space_of(op.buffer)
        off = op.offset.value.data
        base = {"dram": self.layout.arena_offset + off, "spad": off, "acc": isa.ACC_BASE + off}[space]
        rot = op if op in self.rotation else None
        self.bufs[op.buffer] = Buf(space, base, shape, esize, elem, rot, math.prod(shape) * esize)

    def _for(self, op: scf.ForOp) -> None:
        if op.iter_args:
            raise fail(op, "loops with iter_args are not supported")
        lb, ub, step = (self._const(v, op, what) for v, what in
                        ((op.lb, "lower bound"), (op.ub, "upper bound"), (op.step, "step")))
        if step <= 0:
            raise fail(op, f"loop step must be positive, got {step}")
        trip = max(0, -(-(ub - lb) // step))
        body = list(op.body.block.ops)
        unroll = 2 if op in self.rot_loops else 1
        rings = [a for a, lp in self.rotation.items() if lp is op and a in self.ring_group]
        group_sems: dict[tuple, int] = {}
        for a in rings:
            for h in (0, 1):
                # a ring semaphore holds one idle token after its loop: a later rotation
                # loop of the same nest reuses it as is
                gk = (self.ring_group[a], h)
                if gk not in group_sems:
                    group_sems[gk] = self._ring_sem(gk)
                self.ring_free[(a, h)] = group_sems[gk]
        if op in self.pipe and trip >= 4 and len(self.ctx) + 1 <= self.hw.scalar.loop_depth:
            self._pipelined_for(op, trip, body)
            self._release_rings(rings)
            return
        # innermost non-rotating loops: the first iteration goes before the hardware loop, so
        # a dependency entering the loop is a semaphore pair, not a front-end wait
        first = 1 if (unroll == 1 and trip >= 3 and not any(
            isinstance(o, scf.ForOp) for o in op.body.walk())) else 0
        jcount = (trip - first) // unroll
        if op in self.peel and jcount >= 1:
            jcount -= 1  # the last iteration(s) follow the loop: exit dependencies stay local
        too_deep = len(self.ctx) + 1 > self.hw.scalar.loop_depth
        if trip == 0:
            pass
        elif jcount <= 1 or (too_deep and trip <= MAX_INLINED_TRIP):
            # (a short loop beyond the hardware's nesting depth is emitted iteration by
            # iteration: bounded code growth instead of a failed compile)
            for tt in range(trip):
                self.loaded = None
                self.bind[op] = Binding(fixed=tt, round=object())
                self._block(body)
        else:
            for tt in range(first):
                self.loaded = None
                self.bind[op] = Binding(fixed=tt, round=object())
                self._block(body)
            if too_deep:
                raise fail(op, f"loop nest deeper than scalar.loop_depth = "
                            f"{self.hw.scalar.loop_depth} (after inlining single-iteration loops)")
            lp, outer_block = self._open_loop(jcount, op)
            for u in range(unroll):
                self.loaded = None
                self.bind[op] = Binding(loop=lp, unroll=unroll, u=u + first, round=object())
                self._block(body)
            self._close_loop(lp, outer_block, op)
            self.loaded = None
            for tt in range(first + jcount * unroll, trip):
                self.bind[op] = Binding(fixed=tt, round=object())
                self._block(body)
        self.bind.pop(op, None)
        self._release_rings(rings)

    def _ring_sem(self, gk: tuple) -> int:
        """The free semaphore of (group, half). A rotation loop emitted again (an enclosing
        loop's peeled iterations) keeps its semaphores: its first take must find the token its
        own last release left (the tracker leaves that ordering to the ring). Otherwise any
        idle ring semaphore of this loop nest will do: its one idle token was released before
        in program order, so taking it only adds an ordering that already holds."""
        v = self.ring_sems.get(gk)
        if v is not None and v not in self.ring_active:
            if v in self.ring_pool:
                self.ring_pool.remove(v)
        else:
            v = (self.ring_pool.pop() if self.ring_pool else self.semaphores.new(
                SemaphoreKind.RING, "free semaphore of double-buffered allocs"))
        self.ring_sems[gk] = v
        self.ring_active.add(v)
        return v

    def _release_rings(self, rings: list) -> None:
        freed = {self.ring_free.pop((a, h)) for a in rings for h in (0, 1)}
        self.ring_active -= freed
        self.ring_pool.extend(sorted(freed))

    def _pipelined_for(self, op: scf.ForOp, trip: int, body: list) -> None:
        """Software-pipelined rotation loop: the DMA loads of iteration t+1 are issued before
        the rest of iteration t (into the other half of their double buffer), so they land
        while iteration t computes however deep the engine queues hold the front end.

            prologue:  loads(0)
            loop J x:  loads(2j+1) rest(2j)  loads(2j+2) rest(2j+1)   (halves 1,0 / 0,1)
            epilogue:  [loads(t+1)] rest(t) for t = 2J .. trip-1

        Each load signals the loop's "full" semaphore once; the first consumer of its buffer in
        the matching iteration waits for it once (loads and first consumers are in the same
        order, so the FIFO tokens pair up). Reuse of a half is still guarded by its "free"
        semaphore: loads(t+1) writes the half that rest(t-1) released."""
        loads = self.pipe[op]
        rest = [o for o in body if o not in loads]
        full = self._sem("full semaphore of a software-pipelined loop")
        for ld in loads:
            self.pipe_sem[root_buffer(ld.dst).owner] = full  # type: ignore[index]
            self.pipe_loads.add(ld)

        def fixed(tt: int, ops: list, round_: object) -> None:
            self.loaded = None
            self.bind[op] = Binding(fixed=tt, round=round_)
            self._block(ops)

        decls = [o for o in body if isinstance(o, (t.AllocOp, t.ViewOp, t.WeightOp))]
        fixed(0, decls + loads, object())
        jcount = (trip - 1) // 2
        lp, outer_block = self._open_loop(jcount, op)
        for u in range(2):
            self.loaded = None
            self.bind[op] = Binding(loop=lp, unroll=2, u=u + 1, round=object())
            self._block(loads)
            self.loaded = None
            self.bind[op] = Binding(loop=lp, unroll=2, u=u, round=object())
            self._block(rest)
        self._close_loop(lp, outer_block, op)
        self.loaded = None
        for tt in range(2 * jcount, trip):
            if tt + 1 < trip:
                fixed(tt + 1, loads, object())
            fixed(tt, rest, object())
        self.bind.pop(op, None)
        for ld in loads:
            del self.pipe_sem[root_buffer(ld.dst).owner]  # type: ignore[arg-type]

    def _open_loop(self, count: int, forop: scf.ForOp | None = None) -> tuple[HardwareLoop, list]:
        """Start emitting a hardware loop's body; returns the loop and the enclosing block."""
        self.now += 1
        lp = HardwareLoop(count, len(self.ctx) + 1, first_access=len(self.accesses), source_loop=forop,
                  opened_at=self.now)
        self.block.append(lp)
        outer_block, self.block = self.block, lp.body
        self.ctx = self.ctx + (lp,)
        return lp, outer_block

    def _close_loop(self, lp: HardwareLoop, outer_block: list, op: Operation) -> None:
        """Finish a hardware loop: loop-carried dependencies, then its registers are free."""
        self._carried(lp, op)
        self.ctx = self.ctx[:-1]
        self.block = outer_block
        for reg, owner in list(self.reg_owner.items()):
            if owner is lp:
                del self.reg_owner[reg]
                self.regs = {k: r for k, r in self.regs.items() if r != reg}
                self.free_regs.append((reg, self.now))

    def _pipe_wait(self, inst: Instruction, alloc, s: int) -> None:
        """The first consumer of a pipelined load's buffer in an iteration takes its token."""
        rot_lp = self._rot_depth(alloc)
        if len(self.ctx) > rot_lp:  # nested deeper: the front end waits before that loop
            self.ctx[rot_lp].prologue.append(Instruction("nop", {}, "scalar", self.ctx[:rot_lp], wait=s))
        elif inst.wait and inst.wait != s:
            # keep the just-issued load's token on the engine; the other wait (a "free"
            # token released an iteration ago) moves to the front end
            self.block.append(Instruction("nop", {}, "scalar", self.ctx, wait=inst.wait))
            inst.wait = s
        else:
            self._wait(inst, s)

    def _const(self, v: SSAValue, op: Operation, what: str) -> int:
        a = self._aff(v, op)
        if a.coeffs:
            raise fail(op, f"the loop {what} must be a constant")
        return a.const

    # ------------------------------------------------------------------ index arithmetic
    def _aff(self, v: SSAValue, user: Operation) -> Aff:
        owner = v.owner
        if isinstance(owner, arith.ConstantOp):
            val = owner.value
            if isinstance(val, IntegerAttr):
                return Aff(int(val.value.data), {})
        elif isinstance(owner, arith.AddiOp):
            return self._aff(owner.lhs, user) + self._aff(owner.rhs, user)
        elif isinstance(owner, arith.SubiOp):
            return self._aff(owner.lhs, user) + self._aff(owner.rhs, user).scale(-1)
        elif isinstance(owner, arith.MuliOp):
            a, b = self._aff(owner.lhs, user), self._aff(owner.rhs, user)
            if not a.coeffs:
                return b.scale(a.const)
            if not b.coeffs:
                return a.scale(b.const)
            raise fail(owner, "index operand is not an affine function of loop induction "
                        "variables (product of two loop-dependent values)")
        elif isinstance(v, BlockArgument):
            parent = v.block.parent_op()
            if isinstance(parent, scf.ForOp) and v is parent.body.block.args[0]:
                lb = self._const(parent.lb, parent, "lower bound")
                step = self._const(parent.step, parent, "step")
                return Aff(lb, {parent: step})
        what = owner.name if isinstance(owner, Operation) else "a block argument"
        raise fail(user, f"index operand defined by {what} is not an affine function of loop "
                    "induction variables (only arith.constant/addi/subi/muli and scf.for "
                    "induction variables are supported)")

    def _addr(self, a: Aff) -> tuple[tuple, int, int, int]:
        """-> (key, imm, lo, hi) with key = ((HardwareLoop, coeff per hardware iteration), ...)."""
        imm = a.const
        key: dict[HardwareLoop, int] = {}
        for forop, c in a.coeffs.items():
            b = self.bind.get(forop)
            if b is None:
                raise LoweringError("tile-to-npu: index uses an induction variable outside its loop")
            if b.fixed is not None:
                imm += c * b.fixed
            else:
                imm += c * b.u
                key[b.loop] = key.get(b.loop, 0) + c * b.unroll  # type: ignore[index]
        k = tuple((lp, c) for lp, c in key.items() if c)
        lo = hi = imm
        for lp, c in k:
            span = c * (lp.count - 1)
            lo += min(0, span)
            hi += max(0, span)
        return k, imm, lo, hi

    def _reg(self, key: tuple) -> int:
        if not key:
            return 0
        ident = tuple((id(lp), c) for lp, c in key)
        if ident in self.regs:
            return self.regs[ident]
        outer = min((lp for lp, _ in key), key=lambda lp: lp.depth)
        # best fit: the register freed last before the loop opened, so registers free since
        # long ago stay available to keys of loops that opened long ago
        fits = [i for i, (_, freed) in enumerate(self.free_regs) if freed <= outer.opened_at]
        pick = max(fits, key=lambda i: self.free_regs[i][1]) if fits else None
        if pick is None:
            raise LoweringError(f"tile-to-npu: out of address registers (scalar.registers = "
                                f"{self.hw.scalar.registers}): too many distinct loop strides")
        reg = self.free_regs.pop(pick)[0]
        self.used_regs.add(reg)
        self.regs[ident] = reg
        for lp, c in key:
            lp.register_steps.append((reg, c))
        self.reg_owner[reg] = outer
        return reg

    def _tile_addr(self, buf: Buf, idx, op: Operation) -> Aff:
        a = Aff(buf.base, {})
        for i, s in zip(idx, buf.strides):
            a = a + self._aff(i, op).scale(s * buf.esize)
        if buf.alloc is not None:
            b = self.bind.get(self.rotation[buf.alloc])
            half = (b.fixed % 2) if b.fixed is not None else b.u % 2
            a = a + Aff(half * buf.half_bytes, {})
        return a

    def _ring(self, buf: Buf) -> tuple | None:
        if buf.alloc is None:
            return None
        b = self.bind[self.rotation[buf.alloc]]
        half = (b.fixed % 2) if b.fixed is not None else b.u % 2
        return (buf.alloc, half, b.round)

    # ------------------------------------------------------------------ semaphores
    def _sem(self, what: str) -> int:
        return self.semaphores.balanced(what)

    def _add_signal(self, p: Instruction, s: int) -> None:
        """p signals s when it completes. Beyond two signals (fan-out to more consumers than
        the header holds), p's second signal becomes a relay semaphore: a front-end
        `nop wait=relay, signal=.., signal2=..` right after p re-signals the others."""
        if s in (p.signal, p.signal2):
            return
        if not p.signal:
            p.signal = s
        elif not p.signal2:
            p.signal2 = s
        elif p.relays is None:
            r = self.semaphores.balanced(f"fan-out relay of {p.name}")
            nop = Instruction("nop", {}, "scalar", p.loops, wait=r, signal=p.signal2, signal2=s)
            p.signal2 = r
            assert p.home_block is not None
            p.home_block.insert(p.home_block.index(p) + 1, nop)
            p.relays = [nop]
        elif any(s in (n.signal, n.signal2) for n in p.relays):
            return
        elif not p.relays[-1].signal2:
            p.relays[-1].signal2 = s
        else:
            nop = Instruction("nop", {}, "scalar", p.loops, signal=s)
            assert p.home_block is not None
            p.home_block.insert(p.home_block.index(p.relays[-1]) + 1, nop)
            p.relays.append(nop)

    def _pair(self, e: str, f: str) -> int:
        if (e, f) not in self.pair:
            self.pair[(e, f)] = self._sem(f"{e}->{f} semaphore")
        return self.pair[(e, f)]

    def _z(self, depth: int) -> int:
        if depth not in self.zsem:
            self.zsem[depth] = self._sem(f"loop drain semaphore (depth {depth})")
        return self.zsem[depth]

    def _cover_all(self, e: str, seq: int, p: Instruction | None = None) -> None:
        for f in (*ENGINES, "scalar"):
            self._learn(p, f) if p is not None else None
            self.coverage[(e, f)] = max(self.coverage.get((e, f), 0), seq)

    def _learn(self, p: Instruction, f: str) -> None:
        """Engine f now starts after p completed: it also knows what p knew (transitivity)."""
        for g, q in p.known_complete.items():
            if g != f:
                self.coverage[(g, f)] = max(self.coverage.get((g, f), 0), q)
        self.coverage[(p.engine, f)] = max(self.coverage.get((p.engine, f), 0), p.sequence)

    def _covered(self, p: Instruction, f: str) -> bool:
        return self.coverage.get((p.engine, f), 0) >= p.sequence

    def _wait(self, c: Instruction, s: int) -> None:
        if c.wait == s:
            # a second token of the same semaphore: take it on the front end
            self.block.append(Instruction("nop", {}, "scalar", self.ctx, wait=s))
        elif c.wait:
            self.block.append(Instruction("nop", {}, "scalar", self.ctx, wait=s))
        else:
            c.wait = s

    @staticmethod
    def _count(inst: Instruction, start: int) -> int:
        return math.prod(lp.count for lp in inst.loops[start:])

    def _sync(self, p: Instruction, c: Instruction) -> None:
        if self._covered(p, c.engine):
            return
        n = 0
        while n < min(len(p.loops), len(c.loops)) and p.loops[n] is c.loops[n]:
            n += 1
        if len(p.loops) > n:  # leaving loop m1
            m1 = p.loops[n]
            if p.drain_loop is not None:
                if p.drain_loop in p.loops[n:]:
                    self._cover_all(p.engine, p.sequence, p)
                    return
                raise LoweringError("tile-to-npu: unsupported synchronisation pattern (an "
                                    f"instruction {p.name} drained in two loops)")
            self._add_signal(p, self._z(m1.depth))
            p.drain_loop = m1
            z = self._z(m1.depth)
            m1.exit_drains[z] = m1.exit_drains.get(z, 0) + self._count(p, n)
            self._cover_all(p.engine, p.sequence, p)
            return
        s = self._pair(p.engine, c.engine)
        self._add_signal(p, s)
        if len(c.loops) > n:  # entering loop l1: the front end takes the token once
            c.loops[n].prologue.append(Instruction("nop", {}, "scalar", c.loops[:n], wait=s))
            self._cover_all(p.engine, p.sequence, p)
            return
        self._wait(c, s)
        self._learn(p, c.engine)

    def _carried(self, lp: HardwareLoop, op: Operation) -> None:
        body = self.accesses[lp.first_access:]
        for ci, ca in enumerate(body):
            for pa in body[ci:]:
                p, c = pa.inst, ca.inst
                if p.engine == c.engine or not (pa.write or ca.write):
                    continue
                if pa.space != ca.space or pa.hi <= ca.lo or ca.hi <= pa.lo:
                    continue
                # the same half of a double buffer is guarded by its free semaphore across
                # iterations of its rotation loop and of loops around it (the ring's token chain
                # continues), but inside a loop nested in the rotation loop the same half is
                # reused every iteration: that dependency needs synchronising here
                if pa.ring and ca.ring and pa.ring[:2] == ca.ring[:2]:
                    rot = self.rotation.get(pa.ring[0])
                    nested = lp.source_loop is None or (lp.source_loop is not rot and rot is not None
                                                  and rot.is_ancestor(lp.source_loop))
                    if not nested:
                        continue
                if self._covered(p, c.engine):
                    continue
                if p.drain_loop is not None and lp.depth <= p.drain_loop.depth:
                    self._cover_all(p.engine, p.sequence, p)
                    continue
                if p.drain_loop is not None:
                    raise fail(op, "unsupported synchronisation pattern (loop-carried "
                                "dependency on an instruction drained by an outer loop)")
                z = self._z(lp.depth)
                self._add_signal(p, z)
                p.drain_loop = lp
                k = lp.depth  # index of the first loop inside lp in p.loops
                lp.tail_drains[z] = lp.tail_drains.get(z, 0) + self._count(p, k)
                self._cover_all(p.engine, p.sequence, p)

    # ------------------------------------------------------------------ instruction emission
    def _emit(self, op: Operation, name: str, engine: str, fields: dict[str, int],
              acc: list[tuple[str, int, int, bool, tuple | None]]) -> Instruction:
        """acc: (space, lo, hi, write, ring) of every byte range the instruction touches."""
        inst = Instruction(name, fields, engine, self.ctx, next(self.sequence_numbers))
        self.now += 1
        ring_sig = []
        accesses = []
        for space, lo, hi, write, ring in acc:
            if ring is not None:
                alloc = ring[0]
                first = self.ring_first[alloc] is op
                last = self.ring_last[alloc] is op
                if first or last:
                    write = True
                # an op emitted as several instructions (split DMA, fill) takes the free
                # token on its first instruction and releases it on its last
                if (first and alloc in self.ring_take and self.part[0]
                        and self._round_edge(op, alloc, True)):
                    self._ring_wait(inst, self.ring_free[(alloc, ring[1])], alloc)
                if (last and alloc in self.ring_give and self.part[1]
                        and self._round_edge(op, alloc, False)):
                    ring_sig.append((self.ring_free[(alloc, ring[1])], alloc))
                if alloc in self.pipe_sem and not first and (alloc, ring[2]) not in self.pipe_taken:
                    self.pipe_taken.add((alloc, ring[2]))
                    self._pipe_wait(inst, alloc, self.pipe_sem[alloc])
            accesses.append(Access(lo, hi, space, write, inst, ring))
            if (write and self.loaded is not None and space == self.loaded_range[0]
                    and lo < self.loaded_range[2] and self.loaded_range[1] < hi):
                self.loaded = None  # the array's weights tile was overwritten in memory
        # dependencies: the latest conflicting access of every other engine
        latest: dict[str, Access] = {}
        for a in accesses:
            for e in ENGINES:
                if e == engine:
                    continue
                r = self.index.latest(a, e, latest.get(e))
                if r is not None:
                    latest[e] = r
        for r in sorted(latest.values(), key=lambda r: -r.inst.sequence):
            self._sync(r.inst, inst)
        inst.known_complete = {e: self.coverage.get((e, engine), 0) for e in ENGINES if e != engine}
        try:
            isa.make(name, **fields)
        except isa.EncodingError as e:
            raise fail(op, f"cannot encode {name}: {e}") from None
        self.block.append(inst)
        inst.home_block = self.block
        self.accesses.extend(accesses)
        for a in accesses:
            self.index.add(a)
        for s, alloc in ring_sig:
            self._ring_signal(inst, s, alloc)
        return inst

    def _round_edge(self, op: Operation, alloc, first: bool) -> bool:
        """Does this emitted copy of op (nested in loops inside the rotation loop) cover the
        first (last) iteration of every such loop? Only that copy takes (releases) the free
        token: a peeled first or last iteration is a copy of its own."""
        rot = self.rotation[alloc]
        loops = enclosing_loops(op, self.fn)
        for f in loops[loops.index(rot) + 1:] if rot in loops else []:
            b = self.bind[f]
            trip = trip_count(f)
            if b.fixed is not None:
                if b.fixed != (0 if first else trip - 1):
                    return False
            elif first:
                if b.u != 0:
                    return False
            elif b.u + b.unroll * (b.loop.count - 1) != trip - 1:  # type: ignore[union-attr]
                return False
        return True

    def _ring_wait(self, inst: Instruction, s: int, alloc) -> None:
        rot_lp = self._rot_depth(alloc)
        if len(self.ctx) > rot_lp:  # first access nested deeper: the front end waits
            self.ctx[rot_lp].prologue.append(Instruction("nop", {}, "scalar", self.ctx[:rot_lp], wait=s))
        else:
            self._wait(inst, s)

    def _ring_signal(self, inst: Instruction, s: int, alloc) -> None:
        rot_lp = self._rot_depth(alloc)
        if len(self.ctx) > rot_lp:  # last access nested deeper: drain, then signal
            m1 = self.ctx[rot_lp]
            if inst.drain_loop is None:
                z = self._z(m1.depth)
                self._add_signal(inst, z)
                inst.drain_loop = m1
                m1.exit_drains[z] = m1.exit_drains.get(z, 0) + self._count(inst, rot_lp)
            m1.exit_signals.append(s)
        else:
            self._add_signal(inst, s)

    def _rot_depth(self, alloc) -> int:
        """Number of emitted loops enclosing the rotation loop's body copy."""
        b = self.bind[self.rotation[alloc]]
        if b.loop is not None:
            return self.ctx.index(b.loop) + 1
        # inlined copy: count the enclosing scf.for ops emitted as hardware loops
        forop = self.rotation[alloc]
        return sum(1 for f in enclosing_loops(forop, self.fn) if self.bind[f].loop is not None)

    # ------------------------------------------------------------------ ops
    def _range(self, buf: Buf, a: Aff, rows: int, stride: int, rowbytes: int):
        key, imm, lo, hi = self._addr(a)
        span_lo = lo + min(0, (rows - 1) * stride)
        span_hi = hi + max(0, (rows - 1) * stride) + rowbytes
        space = "dram" if buf.space == "dram" else "local"
        return self._reg(key), imm, (space, span_lo, span_hi)

    def _dma(self, op: t.DmaOp) -> None:
        src, dst = self.bufs[op.src], self.bufs[op.dst]
        box = t._ints(op.shape)
        steps = op.steps()
        e = src.esize
        load = op.is_load
        dram, local = (src, dst) if load else (dst, src)
        s_strides = [s * st * e for s, st in zip(src.strides, steps)]
        d_strides = [s * e for s in dst.strides]
        dr_str, lo_str = (s_strides, d_strides) if load else (d_strides, s_strides)
        dims = [(b, ds, ls) for b, ds, ls in zip(box, dr_str, lo_str) if b != 1]
        n0 = e
        if dims and dims[-1][1] == e and dims[-1][2] == e:
            n0 = dims[-1][0] * e
            dims.pop()
            while dims and dims[-1][1] == n0 and dims[-1][2] == n0:
                n0 *= dims[-1][0]
                dims.pop()
        limit = (1 << 20) - 1
        if n0 > limit and len(dims) < 2:  # one long contiguous run: split it into rows
            chunk = next(c for c in range(limit - limit % e, 0, -e) if n0 % c == 0)
            dims.append((n0 // chunk, chunk, chunk))
            n0 = chunk
        src_idx = self._tile_addr(src, op.src_indices, op)
        dst_idx = self._tile_addr(dst, op.dst_indices, op)
        dram_a, local_a = (src_idx, dst_idx) if load else (dst_idx, src_idx)
        outer = dims[:-2] if len(dims) > 2 else []
        inner = dims[-2:] if len(dims) >= 2 else dims
        n1, ds1, ls1 = inner[-1] if inner else (1, 0, 0)
        n2, ds2, ls2 = inner[0] if len(inner) == 2 else (1, 0, 0)
        combos = list(itertools.product(*[range(b) for b, _, _ in outer]))
        if len(combos) > 256:
            raise fail(op, f"the DMA box needs {len(combos)} transfers (more than 3 strided dims)")
        name = "dma.load" if load else "dma.store"
        engine = "dma_load" if load else "dma_store"
        pipe_full = self.pipe_sem.get(dst.alloc) if op in self.pipe_loads else None
        for ci, combo in enumerate(combos):
            doff = sum(i * ds for i, (_, ds, _) in zip(combo, outer))
            loff = sum(i * ls for i, (_, _, ls) in zip(combo, outer))
            dk, dimm, dlo, dhi = self._addr(dram_a + Aff(doff, {}))
            lk, limm, llo, lhi = self._addr(local_a + Aff(loff, {}))
            dreg, lreg = self._reg(dk), self._reg(lk)

            def hull(lo, hi, s1, s2):
                return (lo + min(0, (n1 - 1) * s1) + min(0, (n2 - 1) * s2),
                        hi + max(0, (n1 - 1) * s1) + max(0, (n2 - 1) * s2) + n0)

            dr = hull(dlo, dhi, ds1, ds2)
            lr = hull(llo, lhi, ls1, ls2)
            fields = dict(dram_base=dreg, dram=dimm, local_base=lreg, local=limm, n0=n0, n1=n1,
                          n2=n2, ds1=ds1, ds2=ds2, ls1=ls1, ls2=ls2)
            ring_l = self._ring(local)
            acc = [("dram", dr[0], dr[1], not load, None),
                   ("local", lr[0], lr[1], load, ring_l)]
            self.part = (ci == 0, ci == len(combos) - 1)
            inst = self._emit(op, name, engine, fields, acc)
            self.part = (True, True)
            if pipe_full is not None and ci == len(combos) - 1:
                self._add_signal(inst, pipe_full)

    def _matmul(self, op: t.MatmulOp) -> None:
        lhs, rhs, accb = self.bufs[op.lhs], self.bufs[op.rhs], self.bufs[op.acc]
        m, k, n = op.m.value.data, op.k.value.data, op.n.value.data
        dt = DT[lhs.elem]
        e = lhs.esize
        wstride = rhs.shape[1] * e
        wreg, wimm, wr = self._range(rhs, self._tile_addr(rhs, op.rhs_indices, op), k, wstride,
                                     n * e)
        wkey = (wreg, wimm, k, n, wstride, dt)
        rhs_ring = self._ring(rhs)
        skip = self.loaded == wkey and not (rhs_ring and (self.ring_first[rhs.alloc] is op
                                                          or self.ring_last[rhs.alloc] is op))
        if not skip:
            self._emit(op, "mx.loadw", "matrix",
                       dict(w_base=wreg, w=wimm, k=k, n=n, stride=wstride, dtype=dt),
                       [(wr[0], wr[1], wr[2], False, rhs_ring)])
            self.loaded = wkey
            self.loaded_range = wr
        astride = lhs.shape[1] * e
        cstride = accb.shape[1] * 4
        areg, aimm, ar = self._range(lhs, self._tile_addr(lhs, op.lhs_indices, op), m, astride,
                                     k * e)
        creg, cimm, cr = self._range(accb, self._tile_addr(accb, op.acc_indices, op), m, cstride,
                                     n * 4)
        self._emit(op, "mx.matmul", "matrix",
                   dict(act_base=areg, act=aimm, acc_base=creg, acc=cimm, m=m, astride=astride,
                        cstride=cstride, dtype=dt, accum=int(bool(op.accumulate.value.data))),
                   [(ar[0], ar[1], ar[2], False, self._ring(lhs)),
                    (cr[0], cr[1], cr[2], True, self._ring(accb))])

    def _vector(self, op: t.VectorOp) -> None:
        name = op.op.data
        form = op.form
        rows, cols = op.rows.value.data, op.cols.value.data
        dst, a = self.bufs[op.dst], self.bufs[op.a]
        dcols = 1 if form == "reduce" else cols
        dstride = dst.shape[1] * dst.esize
        astride = a.shape[1] * a.esize
        dreg, dimm, drg = self._range(dst, self._tile_addr(dst, op.dst_indices, op), rows,
                                      dstride, dcols * dst.esize)
        areg, aimm, arg = self._range(a, self._tile_addr(a, op.a_indices, op), rows, astride,
                                      cols * a.esize)
        fields = dict(dst_base=dreg, dst=dimm, a_base=areg, a=aimm, rows=rows, cols=cols,
                      dstride=dstride, astride=astride, dt=DT[dst.elem], at=DT[a.elem])
        acc = [(arg[0], arg[1], arg[2], False, self._ring(a))]
        if form in ("binary", "requant"):
            bmode = op.bmode.data if op.bmode is not None else "tile"
            fields["bmode"] = isa.BMODE_CODE[bmode]
            if bmode == "imm":
                imm = float(op.imm.value.data) if op.imm is not None else 0.0
                fields.update(b_base=0, b=0, bstride=0, imm=isa.f32_bits(imm))
                fields["bt"] = DT[a.elem] if a.elem in ("i8", "i32") and name != "requant" else 2
            else:
                b = self.bufs[op.b[0]]
                bst = b.shape[1] * b.esize
                brows, bcols = {"tile": (rows, cols), "row": (1, cols), "col": (rows, 1)}[bmode]
                breg, bimm, brg = self._range(b, self._tile_addr(b, op.b_indices, op), brows, bst,
                                              bcols * b.esize)
                fields.update(b_base=breg, b=bimm, bstride=0 if bmode == "row" else bst,
                              bt=DT[b.elem], imm=0)
                acc.append((brg[0], brg[1], brg[2], False, self._ring(b)))
        acc.append((drg[0], drg[1], drg[2], True, self._ring(dst)))
        self._emit(op, "vec." + name, "vector", fields, acc)

    def _fill(self, op: t.FillOp) -> None:
        dst = self.bufs[op.dst]
        rows, cols = op.rows.value.data, op.cols.value.data
        value = float(op.value.value.data)
        dstride = dst.shape[1] * dst.esize
        dreg, dimm, drg = self._range(dst, self._tile_addr(dst, op.dst_indices, op), rows,
                                      dstride, cols * dst.esize)
        dt = DT[dst.elem]
        ring = self._ring(dst)
        acc = [(drg[0], drg[1], drg[2], True, ring)]
        base = dict(dst_base=dreg, dst=dimm, a_base=dreg, a=dimm, b_base=0, b=0, rows=rows,
                    cols=cols, dstride=dstride, astride=dstride, bstride=0, dt=dt,
                    bmode=isa.BMODE_CODE["imm"])
        is_int = dst.elem in ("i8", "i32")
        only = value == 0.0 and (is_int or math.copysign(1.0, value) > 0)
        self.part = (True, only)
        self._emit(op, "vec.mul", "vector", dict(base, at=0, bt=0, imm=isa.f32_bits(0.0)), acc)
        self.part = (False, True)
        try:
            self._fill_value(op, base, acc, dt, value, is_int, only)
        finally:
            self.part = (True, True)

    def _fill_value(self, op, base, acc, dt, value, is_int, only) -> None:
        if only:
            return
        if value == 0.0:
            self._emit(op, "vec.mul", "vector", dict(base, at=dt, bt=2, imm=isa.f32_bits(-1.0)),
                       acc)
            return
        bt = dt if is_int and float(value).is_integer() else 2
        self._emit(op, "vec.add", "vector", dict(base, at=dt, bt=bt, imm=isa.f32_bits(value)),
                   acc)

    def _gather_rows(self, op: t.GatherRowsOp) -> None:
        """dst[d0 + k, d1:d1+cols] = table[idx[i0 + k], c0:c0+cols]: per row the front end
        reads the index with `ld` (an i64 index: its low word), scales it by the table's row
        pitch and issues one row DMA whose DRAM base is that register. Rows 0..n-2 run in a
        hardware loop stepping the index and destination registers (registers keyed by the
        loop like any address stream); the last row is peeled after the loop, so a consumer
        synchronises with that one DMA (DMAs complete in issue order)."""
        table, ibuf, dst = self.bufs[op.table], self.bufs[op.indices], self.bufs[op.dst]
        if dst.space == "dram":
            raise fail(op, "a DRAM destination is not supported (gather into a local buffer "
                        "and store it with tile.dma)")
        rows, cols = op.rows.value.data, op.cols.value.data
        e, ie = table.esize, ibuf.esize
        pitch = table.shape[1] * e
        dpitch = dst.shape[1] * dst.esize
        nbytes = cols * e
        t_aff = Aff(table.base, {}) + self._aff(op.table_indices[0], op).scale(e)
        tkey, timm, tlo, thi = self._addr(t_aff)
        t_span = (tlo, thi + (table.shape[0] - 1) * pitch + nbytes)
        ikey, iimm, ilo, ihi = self._addr(self._tile_addr(ibuf, op.index_indices, op))
        dkey, dimm, dlo, dhi = self._addr(self._tile_addr(dst, op.dst_indices, op))
        if not self.free_regs:
            raise fail(op, f"out of address registers (scalar.registers = "
                        f"{self.hw.scalar.registers}) for the gathered row number")
        rt = self.free_regs.pop(0)[0]
        self.used_regs.add(rt)

        def row(ik: tuple, ii: int, dk: tuple, di: int, span: int, part: tuple) -> None:
            ld = Instruction("ld", dict(rd=rt, addr_base=self._reg(ik), addr=ii), "scalar", self.ctx,
                      next(self.sequence_numbers))
            self._scalar_read(ld, ilo, ihi + rows * ie)
            self.block.append(ld)
            ld.home_block = self.block
            self.block.append(Instruction("muli", dict(rd=rt, rs=rt, imm=pitch), "scalar", self.ctx))
            if tkey:
                self.block.append(Instruction("add", dict(rd=rt, rs=rt, rt=self._reg(tkey)), "scalar",
                                       self.ctx))
            fields = dict(dram_base=rt, dram=timm, local_base=self._reg(dk), local=di, n0=nbytes,
                          n1=1, n2=1, ds1=0, ds2=0, ls1=0, ls2=0)
            self.part = part
            try:
                self._emit(op, "dma.load", "dma_load", fields,
                           [("dram", t_span[0], t_span[1], False, None),
                            ("local", dlo + di - dimm, dhi + di - dimm + span + nbytes, True,
                             self._ring(dst))])
            finally:
                self.part = (True, True)

        looped = rows - 1 if rows - 1 >= 2 and len(self.ctx) + 1 <= self.hw.scalar.loop_depth else 0
        if looped:
            lp, outer_block = self._open_loop(looped)
            row(ikey + ((lp, ie),), iimm, dkey + ((lp, dpitch),), dimm, (looped - 1) * dpitch,
                (True, False))
            self._close_loop(lp, outer_block, op)
        for k in range(looped, rows):
            row(ikey, iimm + k * ie, dkey, dimm + k * dpitch, 0, (k == 0, k == rows - 1))
        # registers are 0 when not in use
        self.block.append(Instruction("li", dict(rd=rt, imm=0), "scalar", self.ctx))
        self.free_regs.append((rt, self.now))

    def _scalar_read(self, inst: Instruction, lo: int, hi: int) -> None:
        """A front-end `ld` of DRAM [lo, hi): wait for the engines' earlier writes. (The front
        end executes it before dispatching anything later, so it is never a producer.)"""
        latest: dict[str, Access] = {}
        query = Access(lo, hi, "dram", False, inst, None)
        for e in ENGINES:
            r = self.index.latest(query, e, None)
            if r is not None:
                latest[e] = r
        for r in sorted(latest.values(), key=lambda r: -r.inst.sequence):
            self._sync(r.inst, inst)


# =========================================================================== helpers


def _loops_to_peel(fn: func.FuncOp) -> set[scf.ForOp]:
    """Loops with a tile op that conflicts with a tile op after the loop: their last iteration
    is emitted after the hardware loop, so the exit dependency is a plain semaphore pair
    instead of a front-end drain of every iteration's token."""
    order: list[Operation] = list(fn.body.walk())
    index = {op: i for i, op in enumerate(order)}
    ranges: dict[SSAValue, tuple[str, int, int]] = {}
    for op in order:
        if isinstance(op, t.AllocOp) and op.offset is not None:
            ranges[op.buffer] = (t.space_of(op.buffer), op.offset.value.data,
                                 op.offset.value.data + op.size_bytes)

    def alias(a: SSAValue, b: SSAValue) -> bool:
        if a is b:
            return True
        ra, rb = ranges.get(a), ranges.get(b)
        return bool(ra and rb and ra[0] == rb[0] and ra[1] < rb[2] and rb[1] < ra[2])

    accesses = [(index[op], acc) for op in order for acc in accessed_buffers(op)]
    out: set[scf.ForOp] = set()
    for lp in order:
        if not isinstance(lp, scf.ForOp):
            continue
        last = max((index[o] for o in lp.walk()), default=index[lp])
        inside = [a for i, a in accesses if index[lp] < i <= last]
        later = [a for i, a in accesses if i > last]
        if any((w1 or w2) and alias(r1, r2) for r1, w1 in inside for r2, w2 in later):
            out.add(lp)
    return out


def _pipelinable_loads(lp: scf.ForOp, rotation: dict, ring_first: dict,
                       fn: func.FuncOp) -> list[t.DmaOp]:
    """DMA loads at the top of a rotation loop's body that can be issued one iteration early:
    DRAM -> a double-buffered alloc rotating on this loop (its first access), from a source the
    loop never writes, each buffer's first consumer a distinct op and in load order."""
    body = list(lp.body.block.ops)
    walk = [o for o in lp.walk() if o is not lp]
    index = {o: i for i, o in enumerate(walk)}
    writes_dram = any(isinstance(o, t.DmaOp) and not o.is_load for o in walk)
    loads, firsts = [], []
    for o in body:
        if not isinstance(o, t.DmaOp) or not o.is_load:
            continue
        dst = root_buffer(o.dst).owner
        if not isinstance(dst, t.AllocOp) or rotation.get(dst) is not lp or ring_first.get(dst) is not o:
            continue
        src = root_buffer(o.src)
        readonly = isinstance(src.owner, t.WeightOp) or (
            isinstance(src, BlockArgument) and src.block is fn.body.block
            and not is_output_argument(fn, src.index))
        if not readonly and writes_dram:
            continue
        users = [u for u in users_through_views(dst.buffer) if u is not o]
        if not users:
            continue
        first = min(users, key=lambda u: index.get(u, 1 << 30))
        if first in firsts or index.get(first) is None:
            continue
        loads.append(o)
        firsts.append(first)
    # first consumers must come in load order (one shared FIFO "full" semaphore)
    while loads and [index[f] for f in firsts] != sorted(index[f] for f in firsts):
        loads.pop()
        firsts.pop()
    return loads
