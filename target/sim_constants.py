"""Which local-memory bytes hold constants at each step of a recorded run (sim_replay).

A program's weights sit in a DRAM range its caller keeps the same in every run (the runtime
restores every byte a run wrote and writes only the inputs: `Executable.run` passes the weight
region as `Simulator.run(constant_dram=...)`). A weight tile DMAed from there into the
scratchpad holds the same bytes in every run until something overwrites it, so its
conversion for the matrix unit (`mx.loadw`: bf16 -> fp32, 5 us for a 128 x 128 tile) gives the
same array in every run. A replay keeps such conversions instead of making them again (at
most `INFER_SIM_MEMO_MB` of them per trace, sim_memo.default_budget), and once it has made
them, the replays after it skip the DMA copies only they read (`LiveBytes`).

`ConstantBytes` follows a trace's steps in order and answers "are these bytes constant now?"
from what the steps wrote: one flag byte per scratchpad byte (set by a copy from constant
DRAM, cleared by any other write), and the constant DRAM ranges minus what the run stored to
them. What a step writes comes from its views, which are the same in every replay of the
trace (they do not depend on data; sim_replay's docstring): the answer holds for every replay.
A step whose writes are not known clears everything it might have written (`forget_local`,
`forget_all`): keeping less is always safe.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from infer.target.sim_core import converted

#: the flag array's element type for an operand of each item size (one flag byte per byte)
_FLAG_TYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def hull(a: np.ndarray) -> tuple[int, int]:
    """[lo, hi) of the addresses of a's bytes."""
    lo = hi = _address(a)
    for n, s in zip(a.shape, a.strides):
        if n == 0:
            return lo, lo
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + a.itemsize


def flag_view(flags: np.ndarray, base: int, a: np.ndarray) -> np.ndarray | None:
    """The bytes of `flags` (one per byte of a memory whose first byte is at address `base`)
    that stand for view a's bytes, in a's shape and strides, as unsigned integers of a's item
    size; None when a is not in that memory or its item size has no such type."""
    ft = _FLAG_TYPES.get(a.itemsize)
    p = _address(a)
    if ft is None or not base <= p < base + flags.nbytes:
        return None
    return np.ndarray(a.shape, ft, flags, p - base, a.strides)


def kept_conversion(box: list[np.ndarray | None], view: np.ndarray, dtype: object) -> np.ndarray:
    """The kept conversion of a constant `view` to the matrix unit's `dtype`: made on the first
    call (box[0] is None) and kept in box, read-only (nothing may write the unit's weights)."""
    if box[0] is None:
        box[0] = converted(view, dtype)
        box[0].flags.writeable = False
    return box[0]


class ConstantBytes:
    """Constant bytes of the scratchpad and of DRAM as a trace's steps run (see the module
    docstring)."""

    def __init__(self, spad: np.ndarray, dram: np.ndarray,
                 constant_dram: Sequence[tuple[int, int]]):
        self.spad, self.dram = spad, dram
        self.spad_lo = _address(spad)
        self.dram_lo = _address(dram)
        #: 0xFF where the scratchpad byte holds a constant
        self.flags = np.zeros(spad.nbytes, np.uint8)
        #: [lo, hi) offsets outside which every flag is 0: forgetting clears only that range
        #: (a trace's interpreted steps each forget the local memory: on the Llama prefill on
        #: server, clearing all of it for each took its second run from 0.45 to 2.5 s)
        self._set_lo, self._set_hi = spad.nbytes, 0
        #: absolute [lo, hi) address ranges of DRAM that hold constants
        self.dram_ranges = [(self.dram_lo + lo, self.dram_lo + hi)
                            for lo, hi in constant_dram if hi > lo]

    def _in_spad(self, a: np.ndarray) -> bool:
        p = _address(a)
        return self.spad_lo <= p < self.spad_lo + self.spad.nbytes

    def _in_dram(self, a: np.ndarray) -> bool:
        p = _address(a)
        return self.dram_lo <= p < self.dram_lo + self.dram.nbytes

    def _flags_of(self, a: np.ndarray) -> np.ndarray | None:
        return flag_view(self.flags, self.spad_lo, a)

    def spad_range(self, a: np.ndarray) -> tuple[int, int]:
        """[lo, hi) offsets in the scratchpad of the hull of view a's bytes."""
        lo, hi = hull(a)
        return lo - self.spad_lo, hi - self.spad_lo

    def is_constant(self, a: np.ndarray) -> bool:
        """Whether every byte view a reads is a constant now."""
        f = self._flags_of(a)
        return f is not None and bool((f == np.iinfo(f.dtype).max).all())

    def _dram_constant(self, a: np.ndarray) -> bool:
        lo, hi = hull(a)
        return any(rlo <= lo and hi <= rhi for rlo, rhi in self.dram_ranges)

    def _dram_written(self, lo: int, hi: int) -> None:
        """Absolute DRAM addresses [lo, hi) written: what is left of each constant range."""
        left = []
        for rlo, rhi in self.dram_ranges:
            if rlo < min(lo, rhi):
                left.append((rlo, min(lo, rhi)))
            if max(hi, rlo) < rhi:
                left.append((max(hi, rlo), rhi))
        self.dram_ranges = left

    def copied(self, dst: np.ndarray, src: np.ndarray) -> None:
        """A DMA copy dst <- src: dst's bytes are constant when src's are."""
        f = self._flags_of(dst)
        if f is not None:
            if self._in_dram(src) and self._dram_constant(src):
                f[...] = np.iinfo(f.dtype).max
                lo, hi = self.spad_range(dst)
                self._set_lo, self._set_hi = min(self._set_lo, lo), max(self._set_hi, hi)
            else:
                f[...] = 0
        else:
            self.written(dst)

    def written(self, a: np.ndarray) -> None:
        """A step wrote view a (data that is not known to be constant)."""
        f = self._flags_of(a)
        if f is not None:
            f[...] = 0
        elif self._in_dram(a):
            self._dram_written(*hull(a))
        elif self._in_spad(a):  # an item size without a flag type: its hull
            lo, hi = hull(a)
            self.flags[lo - self.spad_lo:hi - self.spad_lo] = 0
        # else: the accumulator, which holds no constants (weights load from the scratchpad)

    def spad_written(self, lo: int, hi: int) -> None:
        """Scratchpad bytes [lo, hi) (offsets) written."""
        self.flags[max(0, lo):max(0, hi)] = 0

    def dram_written(self, lo: int, hi: int) -> None:
        """DRAM bytes [lo, hi) (offsets in the DRAM buffer) written."""
        self._dram_written(self.dram_lo + lo, self.dram_lo + hi)

    def forget_local(self) -> None:
        """A step that may have written anywhere in local memory (not DRAM)."""
        if self._set_lo < self._set_hi:
            self.flags[self._set_lo:self._set_hi] = 0
        self._set_lo, self._set_hi = self.flags.size, 0

    def forget_all(self) -> None:
        """A step whose writes are not known."""
        self.forget_local()
        self.dram_ranges = []


class LiveBytes:
    """Scratchpad bytes that a later step reads before anything overwrites them, for a pass
    over a trace's steps from the last to the first (sim_replay.drop_dead_copies): a step's
    writes are killed first, then its reads made live. Only whole writes kill (a DMA copy's,
    a vector op's destination); a step whose reads are not known makes every byte live."""

    def __init__(self, spad: np.ndarray):
        self.spad_lo, self.size = _address(spad), spad.nbytes
        #: 0xFF where the byte is live
        self.live = np.zeros(spad.nbytes, np.uint8)
        #: [lo, hi) offsets outside which every byte is live: making all live sets only that
        #: range (as ConstantBytes' forgetting, once per interpreted step of a trace)
        self._dead_lo, self._dead_hi = 0, spad.nbytes

    def _of(self, a: np.ndarray | None) -> np.ndarray | None:
        """The live flags of a's bytes when a is a scratchpad view (else None); an item size
        without a flag type: the flags of its hull."""
        if a is None:
            return None
        f = flag_view(self.live, self.spad_lo, a)
        if f is None and self.spad_lo <= _address(a) < self.spad_lo + self.size:
            lo, hi = hull(a)
            return self.live[lo - self.spad_lo:hi - self.spad_lo]
        return f

    def is_live(self, a: np.ndarray) -> bool:
        """Whether a later step may read a byte of view a (a view outside the scratchpad: yes)."""
        f = self._of(a)
        return f is None or bool(f.any())

    def killed(self, a: np.ndarray) -> None:
        """Every byte of view a written."""
        f = flag_view(self.live, self.spad_lo, a)
        if f is not None:
            f[...] = 0
            lo, hi = hull(a)
            self._dead_lo = min(self._dead_lo, lo - self.spad_lo)
            self._dead_hi = max(self._dead_hi, hi - self.spad_lo)

    def read(self, *views: np.ndarray | None) -> None:
        for a in views:
            f = self._of(a)
            if f is not None:
                f[...] = np.iinfo(f.dtype).max

    def read_range(self, lo: int, hi: int) -> None:
        """Scratchpad bytes [lo, hi) (offsets) read."""
        self.live[max(0, lo):max(0, hi)] = 0xFF

    def read_all(self) -> None:
        if self._dead_lo < self._dead_hi:
            self.live[self._dead_lo:self._dead_hi] = 0xFF
        self._dead_lo, self._dead_hi = self.size, 0
