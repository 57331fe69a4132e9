"""The functional engine: data and registers without timing (modes "fast" and "functional").

Instructions run in program order with the reference engine's numerics and fault checks
(`sim_core`, `sim_reference.local_view`), read from per-instruction tables built once per
decoded program. At a hardware loop it first asks `sim_lockstep` to run all iterations as
lane-batched numpy operations (one per instruction of the body); when that cannot be proven
equivalent, the loop runs iteration by iteration here (its inner loops get the same chance).

Besides memory and registers it records what the timing engine needs from the data: the trip
count of every loop whose count comes from a register, in execution order, and where it
faulted (the number of instructions completed before the fault), so the fast mode reports the
fault the reference engine would report first. `data=False` is the control pass of the
timing-only mode: registers, loops and `ld` only (no memory is written, so an `ld` of DRAM
the program stores to is refused).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from infer.target import isa
from infer.target.asm import format_instr
from infer.target.sim_core import (
    Counters, DequantSpec, Fault, SimFault, VectorSpec, accumulate_into, canonical_nans, converted,
    vector_compute_fast, weights_dtype)
from infer.target.sim_decode import (
    T_DMA, T_HALT, T_LD, T_LOADW, T_LOOP, T_MATMUL, T_SCALAR, T_VECTOR, Decoded, Loop)
from infer.target.sim_lanes import pool as lane_pool
from infer.target.sim_reference import (
    dequant_views, dma_views, initial_registers, local_view, local_word, matmul_step)
from infer.target.sim_replay import (
    Recorder, dequant, loadw_again, loadw_converted, matmul_in_place)
from infer.target.sim_replay import matmul as replay_matmul

if TYPE_CHECKING:
    from infer.target.sim import Simulator

_ALU = {"li": 0, "addi": 1, "add": 2, "sub": 3, "mul": 4, "muli": 5}


def functional_tables(dec: Decoded) -> list[Any]:
    """Per-pc operand tuples of the functional engines (built once per decoded program)."""
    cached = dec.caches.get("tables")
    if cached is not None:
        return cached
    out: list[Any] = []
    for pc, ins in enumerate(dec.instrs):
        tc, v = dec.tclass[pc], ins.as_dict()
        if tc == T_SCALAR:
            op = _ALU.get(ins.d.name)
            out.append(None if op is None else (op, v["rd"], v.get("rs", 0), v.get("rt", 0),
                                                v.get("imm", 0)))
        elif tc == T_LD:  # (rd, base, offset, DRAM bytes read: 4 for ld, 0 for lds)
            out.append((v["rd"], v["addr_base"], v["addr"], dec.p2[pc]))
        elif tc == T_LOOP:
            out.append(dec.loops[pc])
        elif tc == T_DMA:
            n0, n1, n2, ds1, ds2, ls1, ls2 = (v[k] for k in ("n0", "n1", "n2", "ds1", "ds2",
                                                             "ls1", "ls2"))
            out.append((v["dram_base"], v["dram"], v["local_base"], v["local"], n0, n1, n2,
                        ds1, ds2, ls1, ls2,
                        min(0, (n1 - 1) * ds1) + min(0, (n2 - 1) * ds2),
                        max(0, (n1 - 1) * ds1) + max(0, (n2 - 1) * ds2) + n0,
                        min(0, (n1 - 1) * ls1) + min(0, (n2 - 1) * ls2),
                        max(0, (n1 - 1) * ls1) + max(0, (n2 - 1) * ls2) + n0,
                        ins.d.engine == "dma_load"))
        elif tc == T_LOADW:
            out.append((v["w_base"], v["w"], v["k"], v["n"], v["stride"], v["dtype"],
                        weights_dtype(v["dtype"], dec.matrix_rows), v["trans"]))
        elif tc == T_MATMUL:
            dt = v["dtype"]
            out.append((v["act_base"], v["act"], v["acc_base"], v["acc"], v["m"], v["astride"],
                        v["cstride"], dt, bool(v["accum"]), dt == 0, 1 if dt == 0 else 2))
        elif tc == T_VECTOR and ins.d.vop is not None and ins.d.vop.form == "dequant":
            out.append((DequantSpec.of(ins), v["rows"], v["cols"], v["dst_base"], v["dst"],
                        v["q_base"], v["q"], v["s_base"], v["s"], v["dstride"], v["qstride"],
                        v["sstride"], v["dt"]))
        elif tc == T_VECTOR:
            spec = VectorSpec.of(ins)
            binary = spec.binary
            out.append((spec, v["rows"], v["cols"], v["dst_base"], v["dst"], v["a_base"],
                        v["a"], v["dstride"], v["astride"], v["dt"], v["at"],
                        v["b_base"] if binary else 0, v["b"] if binary else 0,
                        v["bstride"] if binary else 0, v["bt"] if binary else 0,
                        v["bmode"] if binary else 3))
        else:
            out.append(None)
    dec.caches["tables"] = out
    return out




class FunctionalRun:
    """One run of the functional engine over a decoded program."""

    def __init__(self, sim: Simulator, dec: Decoded, dram: np.ndarray,
                 regs: Mapping[str | int, int],
                 on_pc: Mapping[int, Callable[[int, np.ndarray], None]] | None = None,
                 data: bool = True):
        cfg = sim.cfg
        self.sim, self.dec, self.cfg, self.dram, self.data = sim, dec, cfg, dram, data
        self.lanes = lane_pool(sim.threads) if data else None
        self.regs = initial_registers(cfg, regs)
        self.on_pc = dict(on_pc) if on_pc else {}
        self.c = Counters(cfg.name, cfg.clock_ghz, peak_macs_per_cycle=cfg.peak_macs_per_cycle,
                          peak_macs_per_cycle_by_dtype=cfg.peak_macs_per_cycle_by_dtype)
        self.steps = 0
        self.loop_counts: list[int] = []
        #: (instructions completed before the fault, the fault) when the program faulted
        self.fault: tuple[int, SimFault] | None = None
        self.weights: np.ndarray | None = None
        self.wdtype = -1
        #: a replay's running sum of a chain of matmuls into one tile (sim_replay.chain_matmuls)
        self.chain: np.ndarray | None = None
        self.stack: list[list[Any]] = []  # [start, end, remaining, Loop]
        #: the DRAM ranges [lo, hi) stored to (hulls), in execution order: the control pass
        #: checks `ld` against them; a data run reports them (Counters.dram_written)
        self.stores: list[tuple[int, int]] = []
        #: the activations of the last mx.matmul, converted (see _matmul)
        self.act_key: tuple[Any, ...] | None = None
        self.act_converted: np.ndarray | None = None
        #: the fp32 accumulator tile of the last mx.matmul, whose NaNs are not yet made the
        #: default NaN, and its (address, m, n, stride): see _matmul and flush_nans
        self.nan_tile: np.ndarray | None = None
        self.nan_key: tuple[int, int, int, int] | None = None
        #: scratchpad weight tiles converted by mx.loadw since local memory was last written
        #: (fp32 emulation loads the high half of a weight tile twice: with the activations'
        #: high and low halves), cleared wherever act_key is forgotten
        self.wcache: dict[tuple[int, ...], np.ndarray] = {}
        #: operand views of instructions already run at the same resolved addresses (keyed by
        #: the instruction's table entry and its addresses): local memory and DRAM are the same
        #: arrays for the whole run, and a view that was made passed its checks (building the
        #: views and checking bounds costs more than a small vector op itself). Kept by the
        #: simulator for later runs of the program on the same DRAM buffer (operand_views).
        self.views: dict[tuple[int, ...], Any] = sim.operand_views(dec, dram) if data else {}
        #: what this run records for replays (sim_replay), or None
        self.rec: Recorder | None = None
        #: a replay's conversions, by the slot the recording gave them (sim_replay)
        self.slots: list[np.ndarray | None] = []

    def execute(self, start: int = 0, stop: int | None = None) -> FunctionalRun:
        """Run from instruction `start` (the program's start) until the program ends or the
        front end reaches `stop` (a replay interprets one instruction: sim_replay)."""
        from infer.target.sim_lockstep import try_lockstep

        dec, dram, sim, c, regs = self.dec, self.dram, self.sim, self.c, self.regs
        tab = functional_tables(dec)
        tclass, engine = dec.tclass, dec.engine
        nins = c.per_engine_instructions
        n, stack, hooks, data = dec.n, self.stack, self.on_pc, self.data
        views = self.views
        rec = recording = self.rec
        fired: set[int] = set()
        depth = self.cfg.scalar.loop_depth
        lockstep_ok = data
        pc = start
        end = n if stop is None else stop
        try:
            while pc < end:
                if hooks and not stack and pc in hooks and pc not in fired:
                    fired.add(pc)
                    self.act_key = None
                    self.wcache.clear()
                    if self.nan_tile is not None:
                        self.flush_nans()
                    hooks[pc](pc, dram)
                tc = tclass[pc]
                t = tab[pc]
                npc = pc + 1
                if recording is not None and (tc == T_LD or recording.tainted):
                    # an instruction whose registers data decided runs unrecorded (sim_replay)
                    rec = self.rec = None if recording.interpreted(self, pc, tc, t) else recording
                if tc == T_SCALAR:
                    if t is not None:
                        op, rd, rs, rt, imm = t
                        if op == 1:
                            val = regs[rs] + imm
                        elif op == 0:
                            val = imm
                        elif op == 2:
                            val = regs[rs] + regs[rt]
                        elif op == 3:
                            val = regs[rs] - regs[rt]
                        elif op == 4:
                            val = regs[rs] * regs[rt]
                        else:
                            val = regs[rs] * imm
                        if not isa.REG_MIN <= val <= isa.REG_MAX:
                            raise Fault("register", f"result {val} overflows 64-bit register r{rd}")
                        if rd:
                            regs[rd] = val
                elif tc == T_LOOP:
                    if self.nan_tile is not None:
                        self.flush_nans()
                    lp: Loop = t
                    cnt = regs[lp.count_base] + lp.count
                    if lp.count_base:
                        self.loop_counts.append(cnt)
                    if cnt <= 0:
                        npc = lp.end
                    else:
                        if len(stack) >= depth:
                            raise Fault("loop", f"loop nesting exceeds scalar.loop_depth = {depth}")
                        if lockstep_ok and cnt > 1 and try_lockstep(self, lp, cnt):
                            self.act_key = None
                            self.wcache.clear()
                            npc = lp.end
                            nins[0] += 1
                            self.steps += 1
                            pc = self._after_body(npc)
                            continue
                        stack.append([lp.start, lp.end, cnt, lp])
                elif tc == T_DMA:
                    db, do, lb, lo = t[0], t[1], t[2], t[3]
                    self.act_key = None
                    if self.wcache:
                        self.wcache.clear()
                    if self.nan_tile is not None:
                        self.flush_nans()
                    if data:
                        vkey = (id(t), regs[db] + do, regs[lb] + lo)
                        dl = views.get(vkey)
                        if dl is None:
                            dl = views[vkey] = dma_views(sim, dram, t[4:], vkey[1], vkey[2])
                        dv, lv = dl
                        if t[15]:
                            lv[...] = dv
                        else:
                            dv[...] = lv
                        if rec is not None:
                            rec.steps.append((np.copyto, (lv, dv) if t[15] else (dv, lv)))
                    if not t[15]:
                        d = regs[db] + do
                        self.stores.append((d + t[11], d + t[12]))
                    if t[15]:
                        c.dram_read_bytes += t[4] * t[5] * t[6]
                    else:
                        c.dram_write_bytes += t[4] * t[5] * t[6]
                elif tc == T_MATMUL:
                    if data:
                        self._matmul(t)
                elif tc == T_LOADW:
                    if data:
                        wb, wo, k, nn, stride, dt, wdt, trans = t
                        if self.nan_tile is not None and regs[wb] + wo >= isa.ACC_BASE:
                            self.flush_nans()
                        addr = regs[wb] + wo
                        rows, cols = isa.loadw_stored_shape(k, nn, trans)
                        if addr < isa.ACC_BASE:  # matmuls write the accumulator only
                            key = (addr, k, nn, stride, dt, trans)
                            w = self.wcache.get(key)
                            if w is None:
                                wv = views.get(("w",) + key)
                                if wv is None:
                                    wv = local_view(sim, addr, rows, cols, stride, dt, "weights")
                                    wv = views[("w",) + key] = wv.T if trans else wv
                                w = self.wcache[key] = converted(wv, wdt)
                                if rec is not None:
                                    rec.steps.append((loadw_converted, (
                                        rec.cell, rec.new_slot(w), wv, wdt, dt)))
                            elif rec is not None:
                                rec.steps.append((loadw_again, (rec.cell, rec.slot_of[id(w)], dt)))
                            self.weights = w
                        else:
                            wv = local_view(sim, addr, rows, cols, stride, dt, "weights")
                            wv = wv.T if trans else wv
                            self.weights = converted(wv, wdt)
                            if rec is not None:
                                rec.steps.append((loadw_converted, (
                                    rec.cell, rec.new_slot(self.weights), wv, wdt, dt)))
                        self.wdtype = dt
                elif tc == T_VECTOR:
                    self.act_key = None
                    if self.wcache:
                        self.wcache.clear()
                    if self.nan_tile is not None:
                        self.flush_nans()
                    if data:
                        _VECTOR_RUNNERS[type(t[0])](self, t)
                    c.vector_elements += t[1] * t[2]
                elif tc == T_LD:
                    if self.nan_tile is not None:
                        self.flush_nans()
                    self._ld(t)
                    c.dram_read_bytes += t[3]
                elif tc == T_HALT:
                    npc = n
                if rec is not recording:
                    rec = self.rec = recording
                    recording.after_interpreted(self, tc, t)
                nins[engine[pc]] += 1
                self.steps += 1
                # a back-edge only at the end of the innermost body (most instructions are not)
                pc = self._after_body(npc) if stack and npc == stack[-1][1] else npc
        except Fault as fl:
            if self.nan_tile is not None:
                self.flush_nans()
            self.fault = (self.steps, SimFault(pc, format_instr(dec.instrs[pc]), fl.cause,
                                               fl.kind))
            return self
        if self.nan_tile is not None:
            self.flush_nans()
        if hooks and n in hooks and pc == n:
            hooks[n](n, dram)
        c.instructions = self.steps
        return self

    def _after_body(self, npc: int) -> int:
        """Take loop back-edges at npc (the reference engine's loop control)."""
        if self.rec is not None:
            self.rec.check_size()
        stack = self.stack
        while stack and npc == stack[-1][1]:
            top = stack[-1]
            top[2] -= 1
            if top[2] > 0:
                return top[0]
            stack.pop()
        return npc

    def _ld(self, t: tuple) -> None:
        rd, base, off, from_dram = t
        dram = self.dram
        a = self.regs[base] + off
        if not from_dram:  # lds: local memory, which only the program writes
            value = local_word(self.sim, a)
            if not self.data:
                raise Fault("data-dependent", f"lds reads local memory at {a:#x}: its value is "
                            "data, which timing-only mode does not compute (use mode 'fast')")
            if rd:
                self.regs[rd] = value
            return
        if a < 0 or a + 4 > dram.size:
            raise Fault("out-of-bounds", f"ld address {a} outside DRAM ({dram.size} bytes)")
        if a % 4:
            raise Fault("misaligned", f"ld address {a:#x} not 4-byte aligned")
        if not self.data:
            for lo, hi in self.stores:
                if lo < a + 4 and a < hi:
                    raise Fault("data-dependent", f"ld reads DRAM [{a:#x}, {a + 4:#x}) that an "
                                "earlier dma.store of the program writes: its value is data, "
                                "which timing-only mode does not compute (use mode 'fast')")
        if rd:
            self.regs[rd] = int(self.dram[a:a + 4].view(np.int32)[0])

    def _matmul(self, t: tuple) -> None:
        ab, ao, cb, co, m, astride, cstride, dt, accum, is_int = t[:10]
        regs = self.regs
        act, acc, w = regs[ab] + ao, regs[cb] + co, self.weights
        if w is None or self.wdtype != dt or acc < isa.ACC_BASE or act >= isa.ACC_BASE:
            # faults, or activations in the accumulator: the reference's path
            self.act_key = None
            if self.nan_tile is not None:
                self.flush_nans()
            matmul_step(self.sim, w, self.wdtype, dt, act, acc, m, astride, cstride, accum,
                        self.c)
            if self.rec is not None:
                self.rec.steps.append((matmul_in_place, (
                    self.rec.cell, dt, act, acc, m, astride, cstride, accum)))
            return
        # matmul_step, keeping the converted activations: fp32 emulation multiplies the same
        # scratchpad tile by two weight tiles in a row (see execute: act_key is forgotten
        # whenever something else may write local memory)
        k, n = w.shape
        vkey = (id(t), act, acc, k, n)
        ax = self.views.get(vkey)
        if ax is None:
            ax = self.views[vkey] = (
                local_view(self.sim, act, m, k, astride, dt, "activations"),
                local_view(self.sim, acc, m, n, cstride, 1 if is_int else 2, "accumulator"))
        key = (act, m, k, astride, dt, w.dtype)
        # fp32 emulation accumulates three products into one tile in a row: its NaNs are made
        # the default NaN once, before anything else can read it (canonical_nans); the pending
        # tile of another product is settled first (and recorded before this product)
        okey = (acc, m, n, cstride)
        if self.nan_tile is not None and (is_int or self.nan_key != okey):
            self.flush_nans()
        rec = self.rec
        if key == self.act_key:
            x = self.act_converted
            if rec is not None:
                rec.steps.append((replay_matmul, (
                    rec.cell, rec.slot_of[id(x)], None, ax[1], is_int, accum)))
        else:
            x = converted(ax[0], w.dtype)
            self.act_key, self.act_converted = key, x
            if rec is not None:
                rec.steps.append((replay_matmul, (
                    rec.cell, rec.new_slot(x), ax[0], ax[1], is_int, accum)))
        out = ax[1]
        c = self.c
        if is_int:
            c.acc_saturations += accumulate_into(out, x @ w, True, accum)
        else:
            accumulate_into(out, x @ w, False, accum, nan_check=False)
            self.nan_tile, self.nan_key = out, okey
        c.macs += m * k * n

    def flush_nans(self) -> None:
        """Make the NaNs of the pending accumulator tile the default NaN (see _matmul)."""
        canonical_nans(self.nan_tile)
        if self.rec is not None:
            self.rec.steps.append((canonical_nans, (self.nan_tile,)))
        self.nan_tile = self.nan_key = None

    def _vector(self, t: tuple) -> None:
        regs = self.regs
        key = (id(t), regs[t[5]] + t[6], regs[t[3]] + t[4], regs[t[11]] + t[12])
        ops = self.views.get(key)
        if ops is None:
            ops = self.views[key] = self._vector_views(t)
        vector_compute_fast(t[0], ops[0], ops[1], ops[2], t[9])
        if self.rec is not None:
            self.rec.steps.append((vector_compute_fast, (t[0], ops[0], ops[1], ops[2], t[9])))

    def _vector_views(self, t: tuple) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(a, b or None, destination) of a vector instruction (bounds and alignment
        checked)."""
        spec, rows, cols, db, do, ab, ao, dstride, astride, dt, at, bb, bo, bstride, bt, bmode = t
        regs, sim = self.regs, self.sim
        a = local_view(sim, regs[ab] + ao, rows, cols, astride, at, "operand a")
        dst = local_view(sim, regs[db] + do, rows, 1 if spec.reduce else cols, dstride, dt,
                         "destination")
        b = None
        if spec.binary and bmode != 3:
            base = regs[bb] + bo
            if bmode == 0:
                b = local_view(sim, base, rows, cols, bstride, bt, "operand b")
            elif bmode == 1:
                b = local_view(sim, base, 1, cols, 0, bt, "operand b (row)")
            else:
                b = local_view(sim, base, rows, 1, bstride, bt, "operand b (col)")
        return a, b, dst

    def _dequant(self, t: tuple) -> None:
        spec, rows, cols, db, do, qb, qo, sb, so, dstride, qstride, sstride, dt = t
        regs, sim = self.regs, self.sim
        key = (id(t), regs[db] + do, regs[qb] + qo, regs[sb] + so)
        ops = self.views.get(key)
        if ops is None:
            q, s = dequant_views(sim, spec, rows, cols, key[2], qstride, key[3], sstride)
            ops = self.views[key] = (
                q, s, local_view(sim, key[1], rows, cols, dstride, dt, "destination"))
        # a decode step expands the same packed weights every step: kept results (sim_memo)
        sim.dequant_memo.run(spec, ops[0], ops[1], ops[2], dt)
        if self.rec is not None:
            self.rec.steps.append((dequant, (
                self.rec.cell, spec, ops[0], ops[1], ops[2], dt)))


#: how the functional engine runs a vector instruction, by the kind of its table entry
_VECTOR_RUNNERS = {VectorSpec: FunctionalRun._vector, DequantSpec: FunctionalRun._dequant}
