"""Renamed buffers and reductions: batching a loop whose iterations hand data to each other
through local memory (sim_lockstep's third strategy for a lane dimension).

A reduction loop (the K loop of a tiled GEMM or convolution) reuses the same buffers in every
iteration: software pipelining loads the next iteration's tile into a buffer the current one
does not read, and the matmuls accumulate into the same accumulator tile in every iteration.
Private copies per iteration cannot express that; renaming can:

- Every instruction that writes such a memory gets its own version array, one slot per
  iteration plus slot 0 holding the memory before the loop. Painting the id of the last writer
  over the bytes, for one iteration and then for the next, finds for every read the one
  instruction that produced all its bytes and whether it ran in the same iteration (shift 0)
  or the previous one (shift 1: slot 0 for the first iteration), or that no instruction of
  the loop writes them (read the memory itself). A read that mixes writers is not renamed.
- The accumulating matmuls of one accumulator tile that nothing else in the loop touches form
  a reduction chain: their products (act @ weights) are computed batched over all iterations,
  then added into the tile in program order, iteration by iteration, exactly as the reference
  adds them (fp32 additions or saturating int32 sums of the same products, same order).
- The instructions then run in a topological order of their dependences (producers of a
  renamed read first, a loadw before the matmuls using its weights, and the program order
  among instructions that share a not-renamed memory with a write involved); a cycle (an
  instruction that needs its own result of the previous iteration outside a reduction) means
  the loop is not batched. Afterwards each byte gets the last iteration's value of its last
  writer.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from infer.target.sim_access import ACC, DRAM, SPAD
from infer.target.sim_dependence import (
    OP_ACCUM, OP_DMA, OP_ENTER, OP_EXIT, OP_LOADW, OP_MATMUL, OP_PRODUCT, OP_VECTOR, OP_VENTER,
    OP_VEXIT, NestedCopies, Reject, box_extent, lane_extent)

#: the operand positions of each batched operation (in its tuple)
OPERANDS = {OP_DMA: (1, 2), OP_LOADW: (2,), OP_MATMUL: (3, 4), OP_VECTOR: (2, 3, 4)}


def _hull(accs: list[tuple[Any, ...]], base: int, d: int) -> tuple[int, int]:
    lo, hi = 1 << 62, -(1 << 62)
    for _, _, f, lanes, shape, strides, _, _ in accs:
        blo, bhi = box_extent(shape, strides)
        llo, lhi = lane_extent(f, lanes, d + 1)
        lo = min(lo, f[0] - base + blo + llo)
        hi = max(hi, f[0] - base + bhi + lhi)
    return lo, hi


def _touching_writes(mine: list[tuple[Any, ...]], base: int, d: int) -> list[tuple[Any, ...]]:
    """The writes of `mine` and the reads whose bytes (their hull, as the painting below sees
    them: lanes d+1.. of this iteration) may meet a write's. A read no write touches reads the
    memory before the loop in every version (the painting would find no writer of any of its
    bytes); leaving it out keeps the painted range to the written buffers (a weight or bias
    region far away would otherwise make it megabytes)."""
    writes = [_hull([a], base, d) for a in mine if a[1]]
    out = []
    for a in mine:
        if not a[1]:
            lo, hi = _hull([a], base, d)
            if not any(wlo < hi and lo < whi for wlo, whi in writes):
                continue
        out.append(a)
    return out


def version_loop(walk: Any, d: int, first_op: int, first_acc: int, spaces: list[int],
                 bases: dict[int, int]) -> None:
    """Rename the writes of `spaces` in the lane loop of dimension d whose operations are
    walk.ops[first_op:] and accesses walk.accs[first_acc:]; rewrites those operations or
    raises Reject."""
    ops = walk.ops
    if any(op[0] in (OP_ENTER, OP_EXIT, OP_VENTER, OP_VEXIT, OP_PRODUCT) for op in ops[first_op:]):
        raise NestedCopies("nested private copies or renaming")
    accs = walk.accs[first_acc:]
    n = walk.dims[d]
    binding: dict[tuple[int, int], tuple[Any, ...]] = {}
    chains: list[tuple[tuple[Any, ...], list[int]]] = []  # (accumulator operand, matmul ops)
    chain_ops: set[int] = set()
    versions: list[tuple[Any, ...]] = []
    masks: list[tuple[int, int, np.ndarray]] = []
    member_of: dict[int, tuple[int, list[int]]] = {}  # writer -> (version, its group)
    for space in spaces:
        base = bases[space]
        mine = _touching_writes([a for a in accs if a[0] == space], base, d)
        lo, hi = _hull(mine, base, d)

        def view(mask: np.ndarray, f: tuple[int, ...], lanes: tuple[int, ...],
                 shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
            lstr = tuple(4 * f[k + 1] for k in range(d + 1, len(lanes)))
            return np.ndarray(lanes[d + 1:] + shape, np.int32, mask, 4 * (f[0] - base - lo),
                              lstr + tuple(4 * s for s in strides))

        # reduction chains: accumulating matmuls of one tile nothing else touches
        cand: dict[Any, list[int]] = {}
        if space == ACC:
            for a in mine:
                op = ops[a[6]]
                if a[1] and a[7] == 4 and op[0] == OP_MATMUL and op[6]:
                    cand.setdefault(a[2:6], []).append(a[6])
        owner = np.full(hi - lo, -1, np.int32)
        for g, key in enumerate(cand):
            v = view(owner, *key)
            if (v >= 0).any():
                raise Reject("overlapping accumulations")
            v[...] = g
        others = [a for a in mine if not (a[7] == 4 and a[2:6] in cand and a[6] in cand[a[2:6]])]
        for a in others:
            if (view(owner, *a[2:6]) >= 0).any():
                raise Reject("an accumulator tile is also used otherwise in the loop")
        for key, members in cand.items():
            chains.append((ops[members[0]][4], members))
            chain_ops.update(members)
        # reaching definitions of the other accesses: per read, the writers of its bytes in
        # the same iteration so far (cur) or in the previous iteration (last); bytes no
        # instruction of the loop writes keep the memory's value in every version
        last = np.full(hi - lo, -1, np.int32)
        for a in others:
            if a[1]:
                view(last, *a[2:6])[...] = a[6]
        cur = np.full(hi - lo, -1, np.int32)
        writes_at = {(a[6], a[7]) for a in others if a[1]}
        written: dict[int, tuple[Any, ...]] = {}
        parent: dict[int, int] = {}

        def find(q: int) -> int:
            while parent[q] != q:
                parent[q] = parent[parent[q]]
                q = parent[q]
            return q

        pending: list[tuple[Any, ...]] = []
        readers: list[tuple[Any, ...]] = []
        op_at = -1
        for a in others + [None]:  # type: ignore[list-item]
            if a is None or a[6] != op_at:  # an instruction's reads happen before its writes
                for w in pending:
                    view(cur, *w[2:6])[...] = w[6]
                    written[w[6]] = w
                    parent.setdefault(w[6], w[6])
                pending = []
                if a is None:
                    break
                op_at = a[6]
            if a[1]:
                pending.append(a)
                continue
            if (a[6], a[7]) in writes_at:
                raise Reject("an instruction updates a renamed tile in place")
            now = view(cur, *a[2:6])
            before = view(last, *a[2:6])
            if (now >= 0).all():
                shift, src = 0, now
            elif (now < 0).all():
                if (before < 0).all():
                    continue  # bytes the loop never writes: read the memory
                shift, src = 1, before
            elif ((now >= 0) | (before < 0)).all():
                shift, src = 0, now  # written before in this iteration, or never
            else:
                raise Reject("a read mixes this and the previous iteration's bytes")
            smin, smax = int(src.min()), int(src.max())
            if smin == smax or (smin < 0 and (src[src >= 0] == smax).all()):
                ids = [smax]
            else:
                ids = [int(q) for q in np.unique(src) if q >= 0]
            for q in ids:
                parent.setdefault(q, q)
                parent[find(q)] = find(ids[0])
            binding[(a[6], a[7])] = ("R", ids[0], shift)
            readers.append(a)
        groups: dict[int, list[int]] = {}
        for q in written:
            groups.setdefault(find(q), []).append(q)
        # a version spans its writers' bytes and its readers' (bytes no writer of the group
        # writes hold the memory's value in every slot)
        span: dict[int, list[tuple[Any, ...]]] = {r: [written[q] for q in m] for r, m in groups.items()}
        for a in readers:
            span[find(binding[(a[6], a[7])][1])].append(a)
        for root, members in groups.items():
            members.sort()
            glo, ghi = _hull(span[root], base, d)
            vid = len(walk.versions) + len(versions)
            versions.append((vid, space, d, n, glo, ghi, tuple(walk.dims[:d])))
            mask = np.isin(last[glo - lo:ghi - lo], members)
            masks.append((vid, space, mask))
            for q in members:
                binding[(q, written[q][7])] = ("V", vid, root)
                member_of[q] = (vid, members)
    # every renamed read refers to its writers' version: ("R", version, shift, writers)
    for key, val in list(binding.items()):
        if val[0] == "R":
            vid, members = member_of[val[1]]
            binding[key] = ("R", vid, val[2], members)
    order = _schedule(walk, first_op, accs, binding, spaces, member_of)
    new: list[tuple[Any, ...]] = [(OP_VENTER, d, versions)]
    for q in order:
        op = list(ops[q])
        for pos in OPERANDS[op[0]]:
            b = binding.get((q, pos))
            if b is not None and op[pos] is not None:
                key = ("V", b[1], 1) if b[0] == "V" else ("V", b[1], 1 - b[2])
                op[pos] = (key,) + op[pos][1:]
        if q in chain_ops:  # (OP_PRODUCT, product slot, weights slot, adapt, act, is_int)
            new.append((OP_PRODUCT, q, op[1], op[2], op[3], op[5]))
        else:
            new.append(tuple(op))
    if chains:
        new.append((OP_ACCUM, d, n, [(acc + (d,), members, ops[members[0]][5])
                                     for acc, members in chains]))
    new.append((OP_VEXIT, d, masks))
    walk.versions.extend(versions)
    ops[first_op:] = new


def _schedule(walk: Any, first_op: int, accs: list[tuple[Any, ...]],
              binding: dict[tuple[int, int], tuple[Any, ...]], spaces: list[int],
              member_of: dict[int, tuple[int, list[int]]]) -> list[int]:
    """A topological order of walk.ops[first_op:] (program order where free), or Reject.
    A read of a version comes after the writers it reads (all of them for the previous
    iteration's bytes) and before the later writers of the same version; the writers of one
    version keep their program order."""
    ops = walk.ops
    nodes = range(first_op, len(ops))
    preds: dict[int, set[int]] = {q: set() for q in nodes}
    for (q, _), b in binding.items():
        if b[0] != "R":
            continue
        for m in b[3]:
            if b[2] == 1 or m < q:
                preds[q].add(m)
            elif m > q:
                preds[m].add(q)
    for _, members in {id(v[1]): v for v in member_of.values()}.values():
        for p, q in zip(members, members[1:]):
            preds[q].add(p)
    loader = {op[1]: q for q, op in enumerate(ops) if op[0] == OP_LOADW and q >= first_op}
    for q in nodes:
        if ops[q][0] == OP_MATMUL and ops[q][1] in loader:
            preds[q].add(loader[ops[q][1]])
    # program order among the instructions sharing a memory that is not renamed, for every
    # pair that may touch a common byte with a write involved: the hulls of their accesses
    # over all lanes intersect (the lanes of one instruction do not conflict with another's
    # in other iterations: `conflicts` checked that; the same iteration keeps program order)
    for space in (DRAM, SPAD, ACC):
        if space in spaces:
            continue
        touch: list[tuple[int, bool, int, int]] = []
        for a in accs:
            if a[0] == space:
                blo, bhi = box_extent(a[4], a[5])
                llo, lhi = lane_extent(a[2], a[3], 0)
                touch.append((a[6], a[1], a[2][0] + blo + llo, a[2][0] + bhi + lhi))
        if not touch:
            continue
        # every pair at once per access (a loop unrolled in each lane has thousands of them)
        t = np.array(touch, np.int64)
        qs, ws, los, his = t[:, 0], t[:, 1].astype(bool), t[:, 2], t[:, 3]
        for i in range(len(touch)):
            q = touch[i][0]
            later = (qs > q) & (los < his[i]) & (his > los[i])
            if not ws[i]:
                later &= ws
            for p in set(qs[later].tolist()):
                preds[p].add(q)
    succ: dict[int, list[int]] = {q: [] for q in nodes}
    indeg = {q: len(preds[q]) for q in nodes}
    for q, ps in preds.items():
        for p in ps:
            succ[p].append(q)
    ready = [q for q in nodes if not indeg[q]]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        q = heapq.heappop(ready)
        order.append(q)
        for s in succ[q]:
            indeg[s] -= 1
            if not indeg[s]:
                heapq.heappush(ready, s)
    if len(order) != len(nodes) or any(q in preds[q] for q in nodes):
        raise Reject("a dependence cycle through the previous iteration")
    return order
