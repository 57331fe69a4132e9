"""Byte ranges an instruction touches, as the race checker and the fast engine's dependence
test see them.

An access is (space, write, lo, hi, rows, row_bytes, stride): bytes [lo, hi) of `space`
(hull), made of `rows` rows of `row_bytes` bytes `stride` apart when stride > 0 (gapped rows,
stride > row_bytes), one contiguous range when stride == 0. Local addresses are kept as the
program writes them (the accumulator at ACC_BASE+), so reports match the disassembly.
"""

from __future__ import annotations

Access = tuple[int, bool, int, int, int, int, int]

RACE_SPACES = ("dram", "scratchpad", "accumulator")
DRAM, SPAD, ACC = range(3)
MAX_PLANES = 16  # a 3-D DMA with more gapped planes than this is described by its hull


def rows_access(space: int, write: bool, lo: int, n: int, length: int, stride: int,
                out: list[Access]) -> None:
    """Append the access of n rows of `length` bytes `stride` apart (stride may be negative)."""
    if n <= 0 or length <= 0:
        return
    if stride < 0:
        lo += (n - 1) * stride
        stride = -stride
    hi = lo + (n - 1) * stride + length
    if n == 1 or stride <= length:
        out.append((space, write, lo, hi, 1, hi - lo, 0))
    else:
        out.append((space, write, lo, hi, n, length, stride))


def dma_access(space: int, write: bool, base: int, n2: int, n1: int, n0: int, s2: int, s1: int,
               out: list[Access]) -> None:
    """Append the access of a 3-D strided DMA side (exact rows; the hull for many planes)."""
    if n2 <= 0 or n1 <= 0 or n0 <= 0:
        return
    if n2 == 1:
        rows_access(space, write, base, n1, n0, s1, out)
    elif n1 == 1:
        rows_access(space, write, base, n2, n0, s2, out)
    elif abs(s1) <= n0:  # each plane is contiguous
        rows_access(space, write, base + min(0, (n1 - 1) * s1), n2, (n1 - 1) * abs(s1) + n0, s2,
                    out)
    elif n2 <= MAX_PLANES:
        for p in range(n2):
            rows_access(space, write, base + p * s2, n1, n0, s1, out)
    else:
        lo = base + min(0, (n1 - 1) * s1) + min(0, (n2 - 1) * s2)
        hi = base + max(0, (n1 - 1) * s1) + max(0, (n2 - 1) * s2) + n0
        out.append((space, write, lo, hi, 1, hi - lo, 0))


def _clip(x: Access, lo: int, hi: int) -> tuple[int, int] | None:
    """The first piece of access x inside [lo, hi), or None."""
    xlo, n, length, s = x[2], x[4], x[5], x[6]
    if s == 0:
        a, b = max(lo, xlo), min(hi, x[3])
        return (a, b) if a < b else None
    i = max(0, (lo - xlo - length) // s + 1)  # first row ending after lo
    if i >= n:
        return None
    r = xlo + i * s
    return (max(lo, r), min(hi, r + length)) if r < hi else None


def overlap(a: Access, b: Access) -> tuple[int, int] | None:
    """The first overlapping byte range of two accesses of one space (hulls overlap), or None."""
    lo, hi = max(a[2], b[2]), min(a[3], b[3])
    if a[6] == 0 and b[6] == 0:
        return (lo, hi) if lo < hi else None
    while lo < hi:
        r = _clip(a, lo, hi)
        if r is None:
            return None
        q = _clip(b, r[0], hi)
        if q is None:
            return None
        if q[0] < r[1]:
            return q[0], min(r[1], q[1])
        lo = q[0]
    return None
