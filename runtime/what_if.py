"""What bounds a program on its hardware config: the same program simulated again with
resources unlimited (`infer.target.hw.unlimited`: DRAM, the array's weight path, the vector
unit, the array's fill and drain), one at a time, all but one, and all of them. What the last
still takes is the array streaming its rows (the MACs at its peak), the dependences and the
front end, which dispatches one instruction a cycle.
`infer run ARTIFACT --what-if` prints it; docs/hardware-feedback.md, "What bounds a program",
reads it for the SmolLM2 decode step (bench/bench_decode.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from infer.target.hw import WHAT_IF_RESOURCES, HardwareConfig, unlimited
from infer.target.sim_core import E_MATRIX, Counters


@dataclass(frozen=True)
class WhatIf:
    cycles: int  # as configured
    instructions: int  # executed (the front end dispatches one a cycle)
    unlimited: dict[str, int]  # resource -> cycles with that one unlimited
    only: dict[str, int]  # resource -> cycles with every other one unlimited
    none: int  # cycles with every resource unlimited
    streaming: int  # of which the matrix unit is busy (rows streamed, one cycle per weight load)

    def lines(self) -> list[str]:
        """A table: per resource, the cycles with it unlimited and with only it limited."""
        out = [f"what bounds it (the same program, resources unlimited; {self.cycles:,} cycles as configured):",
               f"  {'resource':<12} {'that one unlimited':>26} {'only that one limited':>22}"]
        for r, label in WHAT_IF_RESOURCES.items():
            gain = self.unlimited[r] - self.cycles
            out.append(f"  {label:<12} {self.unlimited[r]:>15,} ({100 * gain / self.cycles:+6.1f} %) "
                       f"{self.only[r]:>22,}")
        out.append(f"  none limited: {self.none:,} cycles (the matrix unit busy {self.streaming:,} of them; the "
                   f"front end dispatches one instruction a cycle: {self.instructions:,} executed)")
        return out

    def as_dict(self) -> dict:
        return asdict(self)


def what_bounds(cfg: HardwareConfig, simulate: Callable[[HardwareConfig], Counters]) -> WhatIf:
    """`simulate(config)` runs the program on `config` and returns its counters; it is called
    once as configured and nine times with resources unlimited."""
    base = simulate(cfg)
    names = list(WHAT_IF_RESOURCES)
    one = {r: simulate(unlimited(cfg, [r])).cycles for r in names}
    only = {r: simulate(unlimited(cfg, [x for x in names if x != r])).cycles for r in names}
    free = simulate(unlimited(cfg, names))
    return WhatIf(base.cycles, base.instructions, one, only, free.cycles, free.busy[E_MATRIX])
