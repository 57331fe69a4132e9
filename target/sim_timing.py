"""The timing engine: the timing model of docs/isa.md without data (modes "fast" and "timing").

It executes the front end and every engine's queue exactly as the reference engine does
(`sim_reference.ReferenceRun`: same formulas, same order of stall attribution), reading the
per-instruction tables of `sim_decode` instead of touching memory. One function with the
machine state in local variables, because this loop runs per executed instruction.

Steady-state extrapolation. The timing state at the start of a loop iteration is, relative to
the front-end time T: the engines' free and retire times, the start times of the last
queue_depth instructions per engine, every semaphore's token times, the DRAM calendar, the DMA
channels, the matrix unit's weight path/stream/buffer times and its buffer index, and the k*n
of the loaded weights. A time at or before T (T + 1 for the values only ever compared with a
dispatch time, which is at least T + 1) acts exactly like T (T + 1), so the state is compared
in that canonical form. When the canonical state at the start of iteration i equals the one
at the start of iteration i - p and the loop body always executes the same instruction
sequence (constant inner trip counts, no halt: `Loop.static_body`), every later period of p
iterations behaves identically, shifted by the same number of cycles D: the timing model is a
deterministic function of that state and of the instructions' static fields. The engine then
skips k whole periods (leaving at least one iteration to run): every time in the state moves
by k*D, every counter grows by k times its growth over the period, the per-instruction
profile and the event log (as a repeat record) likewise. Exact by induction, not
approximated: a loop whose state does not repeat is simply executed.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Iterator
from typing import Any

from infer.target import isa
from infer.target.asm import format_instr
from infer.target.hw import HardwareConfig
from infer.target.sim_core import (
    E_LOAD, E_MATRIX, E_STORE, E_VECTOR, ENGINES, Calendar, Counters, Fault, PcProfile, SimFault,
    deadlock)
from infer.target.sim_decode import (
    T_DMA, T_HALT, T_LD, T_LOADW, T_LOOP, T_MATMUL, T_SCALAR, T_SYNC_ALL, T_VECTOR, Decoded)

#: periods (in loop iterations) the extrapolation looks for
MAX_PERIOD = 4
#: a loop boundary is checked only when the iterations left hold at least this many steps
MIN_STEPS_TO_SKIP = 32
#: after this many consecutive checked iterations without a period, a loop execution stops
#: checking for BACKOFF_GAP iterations (then twice as many after the next such run, and so
#: on): building the state costs far more than a short body's steps, and some loops never
#: repeat it (a body draining a semaphore's queue of tokens shortens that queue every time).
#: Only when to look changes; a period found is exact wherever it is found.
BACKOFF_AFTER = 2 * MAX_PERIOD + 2
BACKOFF_GAP = 8


class TimingStop(Exception):
    """The timing pass reached the step where the functional pass faulted, without a fault
    of its own that comes first."""


def _clamped(vals: Any, t: int) -> tuple[int, ...]:
    return tuple([v - t if v > t else 0 for v in vals])


#: what a loop body touches of the timing state: (engines it dispatches to, semaphores it
#: waits on or signals, DMA directions (0 load, 1 store), DRAM calendar, matrix unit state)
Footprint = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], bool, bool]


def footprint(dec: Decoded, lp: Any, nsem: int) -> Footprint:
    """The parts of the timing state the body of lp reads or writes (cached per program).
    Everything else is neither read nor written by an iteration, so it stays as it is while
    the loop runs: it is left out of the state compared across iterations and is not moved
    when periods are skipped. `last_done` is always max(retired) (both are maxima over the
    same completions), so it is recomputed, not compared. A `fence` reads every engine's
    completions: then the body touches everything."""
    cache = dec.caches.setdefault("timing_footprints", {})
    fp = cache.get(lp.pc)
    if fp is None:
        body = range(lp.start, lp.end)
        if any(dec.tclass[q] in (T_SYNC_ALL, T_HALT) for q in body):
            fp = (tuple(range(len(ENGINES))), tuple(range(1, nsem + 1)), (0, 1), True, True)
        else:
            engs = sorted({dec.engine[q] for q in body if dec.tclass[q] >= T_DMA})
            sem_ids = sorted({s for q in body for s in (dec.wait[q], dec.signal[q],
                                                        dec.signal2[q], dec.wait2[q]) if s})
            dirs = tuple(d for d, e in ((0, E_LOAD), (1, E_STORE)) if e in engs)
            fp = (tuple(engs), tuple(sem_ids), dirs, bool(dirs), E_MATRIX in engs)
        cache[lp.pc] = fp
    return fp


def _state_key(t: int, fp: Footprint, eng_free: list[int], retired: list[int],
               starts: list[deque[int]], sems: list[deque[int]], cal: Calendar,
               chans: list[list[int]], matrix: tuple[int, ...], wbuf: int, cur_kn: int) -> Any:
    """The canonical timing state relative to front-end time t (see the module docstring),
    restricted to the loop body's footprint. The queues are flattened into one tuple each,
    with their lengths beside them (the same information as a tuple of tuples, built with
    far fewer calls: this runs at every checked loop iteration)."""
    t1 = t + 1
    engs, sem_ids, dirs, use_cal, use_mx = fp
    qs = [starts[e] for e in engs]
    used = [sems[s] for s in sem_ids]
    key: list[Any] = [
        tuple([eng_free[e] - t1 if eng_free[e] > t1 else 0 for e in engs]),
        tuple([retired[e] - t1 if retired[e] > t1 else 0 for e in engs]),
        tuple([len(q) for q in qs]),
        tuple([v - t if v > t else 0 for q in qs for v in q]),
        tuple([len(q) for q in used]),
        tuple([v - t if v > t else 0 for q in used for v in q]),
    ]
    if use_cal:
        ends = cal.ends
        i = bisect_left(ends, t1 + 1)  # intervals ending after t + 1
        key.append(tuple([(s - t if s > t1 else 1, e - t)
                          for s, e in zip(cal.starts[i:], ends[i:])]))
    for d in dirs:
        key.append(tuple(sorted([v - t1 if v > t1 else 0 for v in chans[d]])))
    if use_mx:
        key.append(tuple([v - t1 if v > t1 else 0 for v in matrix]))
        key.append(wbuf)
        key.append(cur_kn)
    return tuple(key)


def _shift(d: int, fp: Footprint, eng_free: list[int], retired: list[int],
           starts: list[deque[int]], sems: list[deque[int]], cal: Calendar,
           chans: list[list[int]], wrel: list[int]) -> None:
    """Move every time of the footprint's lists and queues d cycles later."""
    engs, sem_ids, dirs, use_cal, use_mx = fp
    for e in engs:
        eng_free[e] += d
        retired[e] += d
    lists = [chans[di] for di in dirs]
    if use_cal:
        lists += [cal.starts, cal.ends]
    if use_mx:
        lists.append(wrel)
    for lst in lists:
        lst[:] = [v + d for v in lst]
    for q in [starts[e] for e in engs] + [sems[s] for s in sem_ids]:
        if q:
            vals = [v + d for v in q]
            q.clear()
            q.extend(vals)


def run_timing(dec: Decoded, cfg: HardwareConfig, *, trace: bool = False,
               loop_counts: Iterator[int] | None = None,
               stop_step: int | None = None) -> Counters:
    """Simulate the timing of the decoded program. `loop_counts` yields the trip count of
    every execution of a loop whose count is read from a register, in execution order (the
    functional pass records them). `stop_step` (the number of instructions the functional
    pass completed before it faulted) ends the run there with TimingStop, unless the timing
    model faults first (a deadlock; a scalar instruction waits before it executes)."""
    n = dec.n
    tclass, engine, waitv, sig1, sig2 = dec.tclass, dec.engine, dec.wait, dec.signal, dec.signal2
    wait2v = dec.wait2
    p1, p2, names, loops, mdtype = dec.p1, dec.p2, dec.names, dec.loops, dec.mdtype
    lat, setup = cfg.dram.latency_cycles, cfg.dma.setup_cycles
    fill, vlat = cfg.matrix.fill_drain_cycles, cfg.vector.latency
    nbuf, depth, nsem = cfg.matrix.weight_buffers, cfg.scalar.loop_depth, cfg.scalar.semaphores
    qdepth = [cfg.queue_depth(e) for e in ENGINES]
    q_full = ["queue_full_" + e for e in ENGINES]
    sem_stall = ["semaphore_" + e for e in ENGINES]
    limit = stop_step if stop_step is not None else -1

    c = Counters(cfg.name, cfg.clock_ghz, peak_macs_per_cycle=cfg.peak_macs_per_cycle,
                          peak_macs_per_cycle_by_dtype=cfg.peak_macs_per_cycle_by_dtype)
    busy, nins, stalls = c.busy, c.per_engine_instructions, c.stalls
    prof = PcProfile.empty(n) if trace else None
    c.profile = prof
    log = c.log
    events = log.items
    pcnt, pfirst, plast, pmacs = ((prof.count, prof.first, prof.last, prof.macs) if prof
                                  else ([], [], [], []))

    fe = last_done = 0
    eng_free, retired = [0] * 5, [0] * 5
    starts: list[deque[int]] = [deque(maxlen=d) for d in qdepth]
    sems: list[deque[int]] = [deque() for _ in range(isa.MAX_SEMAPHORES + 1)]
    cal = Calendar()
    reserve = cal.reserve
    chans = [[0] * cfg.dma.channels, [0] * cfg.dma.channels]
    wpath_free = weights_ready = stream_free = 0
    wrel = [0, 0]
    wbuf = cur_kn = 0
    rd_bytes = wr_bytes = dram_busy = macs = wl_cycles = vec_elems = 0
    dmacs = [0] * len(isa.DTYPES)  # MACs by matmul dtype code
    steps = 0
    # loop frames: [start, end, remaining, Loop, iterations done, history (states of the
    # last consecutive checked iterations), next iteration to check, misses, back-off gap]
    stack: list[list[Any]] = []
    pc = 0
    try:
        while pc < n:
            if steps == limit:
                w = waitv[pc]
                if engine[pc] == 0 and w and not sems[w]:
                    raise deadlock(w)
                raise TimingStop
            tc = tclass[pc]
            steps += 1
            npc = pc + 1
            if tc >= T_DMA:
                # ---- dispatch to engine e's queue
                e = engine[pc]
                q = starts[e]
                t = fe
                if len(q) == qdepth[e] and q[0] > t:
                    stalls[q_full[e]] = stalls.get(q_full[e], 0) + q[0] - t
                    t = q[0]
                fe = t + 1
                ready = eng_free[e]
                if ready < fe:
                    ready = fe
                w = waitv[pc]
                if w:
                    fifo = sems[w]
                    if not fifo:
                        raise deadlock(w)
                    ts = fifo.popleft()
                    if ts > ready:
                        stalls[sem_stall[e]] = stalls.get(sem_stall[e], 0) + ts - ready
                        ready = ts
                    w = wait2v[pc]
                    if w:  # (only beside a first, isa.check; inline as the first: the hot loop)
                        fifo = sems[w]
                        if not fifo:
                            raise deadlock(w)
                        ts = fifo.popleft()
                        if ts > ready:
                            stalls[sem_stall[e]] = stalls.get(sem_stall[e], 0) + ts - ready
                            ready = ts
                # ---- the engine's own timing
                if tc == T_MATMUL:
                    x = p2[pc] * cur_kn
                    macs += x
                    dmacs[mdtype[pc]] += x
                    if prof is not None:
                        pmacs[pc] += x
                    start = ready if ready > stream_free else stream_free
                    if weights_ready > start:
                        stalls["weight_load"] = stalls.get("weight_load", 0) + weights_ready - start
                        start = weights_ready
                    cyc = p1[pc]
                    stream_free = start + cyc
                    wrel[wbuf] = stream_free
                    free, done, b = start + 1, stream_free + fill, cyc
                elif tc == T_LOADW:
                    buf = (wbuf + 1) % nbuf
                    start = ready if ready > wpath_free else wpath_free
                    if wrel[buf] > start:
                        stalls["weight_buffer"] = stalls.get("weight_buffer", 0) + wrel[buf] - start
                        start = wrel[buf]
                    cyc = p1[pc]
                    wpath_free = weights_ready = done = start + cyc
                    wbuf = buf
                    cur_kn = p2[pc]
                    wl_cycles += cyc
                    free, b = start + 1, 0
                elif tc == T_VECTOR:
                    occ = p1[pc]
                    vec_elems += p2[pc]
                    start = ready
                    free, done, b = ready + occ, ready + occ + vlat, occ
                else:  # T_DMA
                    ch = chans[0] if e == E_LOAD else chans[1]
                    ci = min(range(len(ch)), key=ch.__getitem__)
                    start = ready if ready > ch[ci] else ch[ci]
                    dirn = "load" if e == E_LOAD else "store"
                    if start > ready:
                        k = "dma_channels_" + dirn
                        stalls[k] = stalls.get(k, 0) + start - ready
                    t0 = start + setup
                    xfer = p1[pc]
                    xs = reserve(t0, xfer)
                    if xs > t0:
                        k = "dram_bandwidth_" + dirn
                        stalls[k] = stalls.get(k, 0) + xs - t0
                    done = xs + xfer + lat
                    ch[ci] = done
                    dram_busy += xfer
                    if e == E_LOAD:
                        rd_bytes += p2[pc]
                    else:
                        wr_bytes += p2[pc]
                    free, b = t0, xfer
                # ---- finish: in-order retirement, signals, trace
                eng_free[e] = free
                q.append(start)
                busy[e] += b
                nins[e] += 1
                r = retired[e]
                if done > r:
                    retired[e] = r = done
                s = sig1[pc]
                if s:
                    sems[s].append(r)
                s = sig2[pc]
                if s:
                    sems[s].append(r)
                if done > last_done:
                    last_done = done
                if prof is not None:
                    events.append((e, names[pc], start, done - start, pc))
                    pcnt[pc] += 1
                    if pfirst[pc] < 0:
                        pfirst[pc] = start
                    end = done if done > start else start + 1
                    if end > plast[pc]:
                        plast[pc] = end
            else:
                # ---- the front end: wait, execute, signal
                for w in (waitv[pc], wait2v[pc]):
                    if w:
                        fifo = sems[w]
                        if not fifo:
                            raise deadlock(w)
                        ts = fifo.popleft()
                        if ts > fe:
                            stalls["semaphore_scalar"] = stalls.get("semaphore_scalar", 0) + ts - fe
                            fe = ts
                if tc == T_SCALAR:
                    fe += 1
                elif tc == T_LOOP:
                    lp = loops[pc]
                    cnt = lp.count if lp.count_base == 0 else next(loop_counts)  # type: ignore[arg-type]
                    fe += 1
                    if cnt <= 0:
                        npc = lp.end
                    else:
                        if len(stack) >= depth:
                            raise Fault("loop", f"loop nesting exceeds scalar.loop_depth = {depth}")
                        stack.append([lp.start, lp.end, cnt, lp, 0, [], 0, 0, BACKOFF_GAP])
                elif tc == T_LD:  # ld (DRAM) / lds (scratchpad): p1 latency, p2 DRAM bytes
                    ld_lat = p1[pc]
                    fe += 1 + ld_lat
                    rd_bytes += p2[pc]
                    if ld_lat:
                        stalls["scalar_load"] = stalls.get("scalar_load", 0) + ld_lat
                else:  # fence, halt: wait until every engine is idle
                    if last_done > fe:
                        fe = last_done
                    fe += 1
                    if tc == T_HALT:
                        npc = n
                nins[0] += 1
                busy[0] += 1
                s = sig1[pc]
                if s:
                    sems[s].append(fe)
                s = sig2[pc]
                if s:
                    sems[s].append(fe)
            # ---- loop back-edges; steady-state extrapolation at iteration boundaries
            while stack and npc == stack[-1][1]:
                top = stack[-1]
                top[2] -= 1
                if top[2] <= 0:
                    stack.pop()
                    continue
                npc = top[0]
                top[4] += 1
                lp = top[3]
                if not lp.static_body or (top[2] - 1) * lp.steps_per_iteration < MIN_STEPS_TO_SKIP:
                    break
                if top[4] < top[6]:  # backing off (see BACKOFF_AFTER)
                    break
                fp = footprint(dec, lp, nsem)
                key = _state_key(fe, fp, eng_free, retired, starts, sems, cal, chans,
                                 (wpath_free, weights_ready, stream_free, wrel[0], wrel[1]),
                                 wbuf, cur_kn)
                hist = top[5]
                period = 0
                for p in range(1, min(MAX_PERIOD, len(hist)) + 1):
                    if hist[-p][0] == key:
                        period = p
                        break
                if period:
                    h = hist[-period]
                    k = (top[2] - 1) // period
                    dsteps = steps - h[2]
                    if limit >= 0:
                        k = min(k, (limit - steps) // dsteps)
                    if k > 0:
                        delta = fe - h[1]
                        d = delta * k
                        fe += d
                        if fp[4]:
                            wpath_free += d
                            weights_ready += d
                            stream_free += d
                        _shift(d, fp, eng_free, retired, starts, sems, cal, chans, wrel)
                        last_done = max(retired)
                        steps += k * dsteps
                        hb, hn, hs, hsc = h[3]
                        for i in range(5):
                            busy[i] += k * (busy[i] - hb[i])
                            nins[i] += k * (nins[i] - hn[i])
                        for name, v in list(stalls.items()):
                            dv = v - hs.get(name, 0)
                            if dv:
                                stalls[name] = v + k * dv
                        sc = (rd_bytes, wr_bytes, dram_busy, macs, wl_cycles, vec_elems)
                        rd_bytes, wr_bytes, dram_busy, macs, wl_cycles, vec_elems = (
                            v + k * (v - v0) for v, v0 in zip(sc, hsc[:6]))
                        for i, v0 in enumerate(hsc[6]):
                            dmacs[i] += k * (dmacs[i] - v0)
                        if prof is not None:
                            log.repeat(h[4], len(log), k, delta)
                            lo, hi = lp.start, lp.end
                            hcnt, hmacs = h[5]
                            for j in range(lo, hi):
                                dc = pcnt[j] - hcnt[j - lo]
                                if dc:
                                    pcnt[j] += k * dc
                                    plast[j] += d
                                    pmacs[j] += k * (pmacs[j] - hmacs[j - lo])
                        top[2] -= k * period
                        top[4] += k * period
                        hist.clear()
                        break
                top[7] += 1
                if top[7] >= BACKOFF_AFTER:  # no period in a while: check again later
                    top[6] = top[4] + top[8]
                    top[7] = 0
                    top[8] *= 2
                    hist.clear()
                    break
                snap = ((list(busy), list(nins), dict(stalls),
                         (rd_bytes, wr_bytes, dram_busy, macs, wl_cycles, vec_elems, tuple(dmacs))))
                psnap = (pcnt[lp.start:lp.end], pmacs[lp.start:lp.end]) if prof is not None \
                    else None
                hist.append((key, fe, steps, snap, len(log), psnap))
                if len(hist) > MAX_PERIOD:
                    del hist[0]
                break
            if steps & 0xFFF == 0:
                cal.prune(fe)
            pc = npc
    except Fault as fl:
        raise SimFault(pc, format_instr(dec.instrs[pc]), fl.cause, fl.kind) from None
    c.instructions = steps
    c.cycles = max(fe, last_done)
    c.dram_read_bytes, c.dram_write_bytes, c.dram_busy_cycles = rd_bytes, wr_bytes, dram_busy
    c.macs, c.weight_load_cycles, c.vector_elements = macs, wl_cycles, vec_elems
    c.macs_by_dtype = {isa.DTYPES[i][0]: v for i, v in enumerate(dmacs) if v}
    return c
