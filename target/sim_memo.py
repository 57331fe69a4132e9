"""`vec.dequant` results kept from run to run (the fast and functional modes).

A language model's decode step expands every packed weight tile again: SmolLM2-135M's step runs
649 `vec.dequant`s over 134 M weights, a third of the host time of a step in the fast mode. The
packed bytes those instructions read are the same every step (the program DMAs them from the
weights in DRAM), so the results are too: `vec.dequant` is a pure function of its codes, its
scales and its static fields (format, block axis, destination type; docs/isa.md).

`DequantMemo.run` keeps the operands' bytes and the result of an expansion it computes for the
second time, and when an execution reads codes and scales that are byte for byte those of a
kept one, it writes the kept result instead of computing it: the same bits, by construction.
(Keeping only what is seen twice spares the copies for expansions a run makes once: a prompt's
single prefill chunk, a model run once.) Every use compares the operands in full (no hash or
sample is trusted for equality); a sample of their bytes only picks which kept expansion to
compare against. Scales are compared as bits (fp16 -0 and +0 differ, as
do NaN payloads). Nothing about timing changes: the timing engine never sees data.

The memo belongs to a `Simulator` (it lives as long as the simulator: a runtime session's decode
steps share it) and holds at most `budget` bytes (operand copies and results). Past that it drops
the least recently used expansions: a session runs its prefill chunks (their own tiles of the
weights) and then decode steps, each step using the same tiles again, so the decode step's
tiles displace the prefill's. `INFER_SIM_MEMO_MB` sets the budget (default DEFAULT_BUDGET_MB;
0 turns the memo off).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

import numpy as np

MEMO_ENV = "INFER_SIM_MEMO_MB"
#: SmolLM2-135M's decode step keeps 365 MB in a bf16 compile (its 134 M expanded weights at 2
#: bytes and their packed operands), about 620 MB in fp32 (4 bytes a weight): the default holds
#: a decode step of either
DEFAULT_BUDGET_MB = 1024
#: keys of expansions seen once that the memo remembers (forgotten all at once past this)
MAX_SEEN = 1 << 16


def default_budget() -> int:
    """The memo budget in bytes from `INFER_SIM_MEMO_MB` (default DEFAULT_BUDGET_MB). It also
    bounds the conversions of constant weights a replay keeps, per trace (sim_constants)."""
    text = os.environ.get(MEMO_ENV, "").strip()
    if not text:
        return DEFAULT_BUDGET_MB << 20
    try:
        mb = float(text)
    except ValueError:
        raise ValueError(f"{MEMO_ENV}={text!r}: expected a number of megabytes (0 turns the "
                         "simulator's result memo off)") from None
    return max(0, int(mb * (1 << 20)))


def _bits(a: np.ndarray) -> np.ndarray:
    """a viewed as unsigned integers of its item size (compares bits, not values)."""
    return a.view(np.dtype(f"u{a.itemsize}"))


def _sample(a: np.ndarray) -> bytes:
    """About 8 evenly spaced elements per axis of a, as bytes (picks a candidate; never
    decides equality)."""
    return a[tuple(slice(None, None, max(1, n // 8)) for n in a.shape)].tobytes()


class DequantMemo:
    """Kept `vec.dequant` expansions, looked up by their operands' bytes (module docstring)."""

    def __init__(self, budget: int):
        self.budget = budget
        self.used = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        #: (spec, dt, shapes, samples) -> (codes bits, scales bits, result), least recently
        #: used first
        self._kept: OrderedDict[tuple[Any, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()
        #: keys of expansions computed once and not kept (kept when seen again)
        self._seen: set[tuple[Any, ...]] = set()

    def run(self, spec: Any, q: np.ndarray, s: np.ndarray, dst: np.ndarray, dt: int) -> None:
        """dst = spec.compute(q, s, dst, dt), from a kept result when q and s are byte for byte
        a kept expansion's operands."""
        if self.budget <= 0:
            spec.compute(q, s, dst, dt)
            return
        qb, sb = _bits(q), _bits(s)
        key = (spec, dt, q.shape, s.shape, dst.shape, _sample(qb), _sample(sb))
        kept = self._kept.get(key)
        if kept is not None and np.array_equal(kept[0], qb) and np.array_equal(kept[1], sb):
            np.copyto(dst, kept[2])
            self._kept.move_to_end(key)
            self.hits += 1
            return
        self.misses += 1
        size = q.nbytes + s.nbytes + dst.nbytes
        # kept when seen before: computed once already, or kept with other bytes (replaced)
        keep = size <= self.budget and (kept is not None or key in self._seen)
        if keep:
            self._seen.discard(key)
        elif size <= self.budget:
            if len(self._seen) >= MAX_SEEN:
                self._seen.clear()
            self._seen.add(key)
        if keep:  # the operands copied before the result can overwrite them (dst may alias)
            qc, sc = qb.copy(), sb.copy()
        spec.compute(q, s, dst, dt)
        if keep:
            if kept is not None:
                self.used -= _size(self._kept.pop(key))
            while self.used + size > self.budget:
                self.used -= _size(self._kept.popitem(last=False)[1])
                self.evictions += 1
            self._kept[key] = (qc, sc, dst.copy())
            self.used += size


def _size(kept: tuple[np.ndarray, ...]) -> int:
    return sum(a.nbytes for a in kept)
