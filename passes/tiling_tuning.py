"""The autotuner's hook into the tiling choices (`graph-to-tile{autotune=N}`, docs/tiling.md
"Autotuning").

`tiling_cost.choose_gemm` / `choose_conv` rank their candidates; while a `Tuning` is active
(`with tuning(Tuning(picks))`, set by `graph_to_tile/autotune.py` around the lowering of one
op), each call records its ranked candidates' tiles and takes the candidate `picks` names for
that call (by call number within the op, in lowering order) instead of the first. Without an
active Tuning nothing changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass
class Tuning:
    """picks: choose call number -> the tiles (`tiles_key`) to take. ranked: per call, the
    fitting candidates' tiles, best first (empty for a call with an override)."""

    picks: dict[int, str] = field(default_factory=dict)
    ranked: list[list[str]] = field(default_factory=list)


_ACTIVE: ContextVar[Tuning | None] = ContextVar("tiling_tuning", default=None)


@contextlib.contextmanager
def tuning(active: Tuning) -> Iterator[Tuning]:
    token = _ACTIVE.set(active)
    try:
        yield active
    finally:
        _ACTIVE.reset(token)


def tiles_key(tiles: object) -> str:
    """A candidate's identity across compilations: the repr of its tiles (a tuple, or a conv's
    ConvTiles dataclass with orientation, sizes, loop order and im2col)."""
    return repr(tiles)


def pick_index(ranked_tiles: Sequence[object]) -> int:
    """For one choose call: the index (into its ranked candidates) to take: the active Tuning's
    pick when it names one of them, else 0 (the cost model's choice)."""
    active = _ACTIVE.get()
    if active is None:
        return 0
    keys = [tiles_key(t) for t in ranked_tiles]
    call = len(active.ranked)
    active.ranked.append(keys)
    pick = active.picks.get(call)
    return keys.index(pick) if pick in keys else 0
