"""The step-cost table: per-entry program costs profiled once on a grid, cached, interpolated.

    table = StepCostTable.load_or_profile(profiler, key, grid, cache_dir)
    table.step_cycles(step)        # a step's cycles (decode call + prefill-chunk calls)
    table.entry_cycles("decode", batch, context)

Entries and their grid axes (`CostGrid.for_limits`):
- "decode":  a = batch size (1, 2, 4, ... up to max batch), b = mean context (0, 16, 32, ... up to the
  model's context), the KV positions the batch attends to;
- "prefill": a = chunk tokens (1, 16, 32, ... up to the context), b = start position (0, 16, ...).
Powers of two with the midpoints 1.5 x 2^k between them, and the limits themselves.
The compiled programs' grid (`CostGrid.for_programs`) has decode rows 1 .. B x the context
each row attends to, and prefill chunk C x start position; with the KV block size, its position
axes also hold both sides of each of the first `FINE_BLOCKS` block boundaries (`block_axis`).

The profiler (`infer.serving.cost.Profiler`) is called once per grid point. A table is
cached as JSON under `cache_dir`, named by a digest of its key: the model digest, the
hardware-config digest, the compiler version and the profiler's source, so a table
profiled for another model, config or compiler is never reused. Between grid points the
table interpolates bilinearly (piecewise linear along each axis); beyond the last point
it extrapolates the last segment linearly.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from infer.serving.cost import ENTRIES, Profiler, compose_step_cycles

TABLE_FORMAT = 1


def default_cache_dir() -> Path:
    root = os.environ.get("INFER_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "infer")
    return Path(root) / "serving"


def bucket_axis(lo: int, hi: int) -> list[int]:
    """lo, then 2^k and 1.5 * 2^k from 16 up, then hi."""
    points = {lo, hi}
    k = 16
    while k < hi:
        points.add(k)
        if k * 3 // 2 < hi:
            points.add(k * 3 // 2)
        k *= 2
    return sorted(p for p in points if lo <= p <= hi)


#: blocks of context over which the compiled programs' grid has a point on each side of every
#: block boundary (`block_axis`)
FINE_BLOCKS = 16


def block_axis(axis: list[int], block_size: int) -> list[int]:
    """axis with k BS and k BS + 1 for k = 1 .. FINE_BLOCKS (within its range): a paged-attention
    call's cost steps where its positions reach a new KV block (one more block gathered and
    computed), which interpolating between buckets smooths over; the step matters most where
    a block is a large share of the context. Beyond, the buckets' points."""
    lo, hi = axis[0], axis[-1]
    points = set(axis)
    for k in range(1, FINE_BLOCKS + 1):
        points.update(p for p in (k * block_size, k * block_size + 1) if lo <= p <= hi)
    return sorted(points)


def _batch_axis(max_batch: int) -> list[int]:
    points = {1, max_batch}
    k = 2
    while k < max_batch:
        points.add(k)
        if k >= 4 and k * 3 // 2 < max_batch:
            points.add(k * 3 // 2)
        k *= 2
    return sorted(points)


@dataclass(frozen=True)
class CostGrid:
    axes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]]   # entry -> (a axis, b axis)
    chunk: int | None = None    # compiled programs: prefill calls of `chunk` tokens, decode calls of <= `batch` rows
    batch: int | None = None

    @classmethod
    def for_limits(cls, max_batch: int, max_context: int) -> CostGrid:
        ctx = tuple(bucket_axis(0, max_context))
        return cls({"decode": (tuple(_batch_axis(max_batch)), ctx),
                    "prefill": (tuple(bucket_axis(1, max_context)), ctx)})

    @classmethod
    def for_programs(cls, batch: int, chunk: int, max_context: int, max_start: int,
                     block_size: int | None = None) -> CostGrid:
        """Compiled programs: decode (rows 1 .. B) x context (1 .. max_context), prefill (C) x start
        (0 .. max_start): one grid point is one program call. With the KV block size, both
        position axes also hold each block's last and the next block's first position over the
        first `FINE_BLOCKS` blocks (`block_axis`)."""
        contexts, starts = bucket_axis(1, max_context), bucket_axis(0, max_start)
        if block_size is not None:
            contexts, starts = block_axis(contexts, block_size), block_axis(starts, block_size)
        return cls({"decode": (tuple(_batch_axis(batch)), tuple(contexts)),
                    "prefill": ((chunk,), tuple(starts))}, chunk, batch)

    def points(self) -> int:
        return sum(len(a) * len(b) for a, b in self.axes.values())


@dataclass(frozen=True)
class CostTableKey:
    model_digest: str
    config_digest: str
    compiler_version: str
    source: str

    def digest(self, grid: CostGrid) -> str:
        blob = json.dumps({"key": asdict(self), "grid": grid.axes, "calls": [grid.chunk, grid.batch],
                           "format": TABLE_FORMAT}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _segment(axis, x: float) -> tuple[int, float]:
    """Index i and weight t so that x = axis[i] + t * (axis[i+1] - axis[i]) (t may leave [0, 1] outside)."""
    if len(axis) == 1:
        return 0, 0.0
    i = min(max(bisect.bisect_right(axis, x) - 1, 0), len(axis) - 2)
    return i, (x - axis[i]) / (axis[i + 1] - axis[i])


class StepCostTable:
    """Interpolated step costs from a profiled grid (see the module doc)."""

    def __init__(self, grid: CostGrid, values: dict[str, list[list[float]]], source: str):
        self.grid, self.values, self.source = grid, values, source
        for entry in ENTRIES:
            a, b = grid.axes[entry]
            v = values[entry]
            if len(v) != len(a) or any(len(row) != len(b) for row in v):
                raise ValueError(f"cost table: {entry} values do not match the grid")

    @classmethod
    def profile(cls, profiler: Profiler, grid: CostGrid) -> StepCostTable:
        values = {entry: [[float(profiler(entry, a, b)) for b in grid.axes[entry][1]] for a in grid.axes[entry][0]]
                  for entry in ENTRIES}
        return cls(grid, values, profiler.source)

    @classmethod
    def load_or_profile(cls, profiler: Profiler, key: CostTableKey, grid: CostGrid,
                        cache_dir: str | os.PathLike[str] | None = None) -> tuple[StepCostTable, bool]:
        """(table, came from the cache?). Profiles and writes the cache file on a miss."""
        folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        path = folder / f"steps-{key.digest(grid)}.json"
        if path.is_file():
            try:
                data = json.loads(path.read_text())
                return cls(grid, data["values"], data["source"]), True
            except (OSError, ValueError, KeyError):
                pass                                   # a damaged cache file is profiled again
        table = cls.profile(profiler, grid)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"format": TABLE_FORMAT, "key": asdict(key), "grid": grid.axes,
                                   "values": table.values, "source": table.source}))
        os.replace(tmp, path)
        return table, False

    def entry_cycles(self, entry: str, a: float, b: float) -> float:
        axis_a, axis_b = self.grid.axes[entry]
        v = self.values[entry]
        i, s = _segment(axis_a, a)
        j, t = _segment(axis_b, b)
        if len(axis_a) == 1 or len(axis_b) == 1:
            i2, j2 = min(i + 1, len(axis_a) - 1), min(j + 1, len(axis_b) - 1)
        else:
            i2, j2 = i + 1, j + 1
        return ((1 - s) * ((1 - t) * v[i][j] + t * v[i][j2]) + s * ((1 - t) * v[i2][j] + t * v[i2][j2]))

    def step_cycles(self, step) -> float:
        return compose_step_cycles(step, self.entry_cycles, self.grid.chunk, self.grid.batch)
