"""Every simulator run of the codegen tests checks for data races: a missing semaphore in a
compiled program (which the simulator's program-order functional results would hide) faults as
kind "race" (`Simulator.run(..., check_races=True)`, see docs/isa.md). `Executable.run` passes
its own `check_races` (default: INFER_SIM_CHECK_RACES), so that is set too: before, a compiled
model's run here was not checked unless the test asked."""

from __future__ import annotations

from typing import Any

import pytest

from infer.target.sim import Simulator


@pytest.fixture(autouse=True)
def _sim_check_races(monkeypatch: pytest.MonkeyPatch) -> None:
    run = Simulator.run

    def checked_run(self: Simulator, *args: Any, check_races: bool = True, **kw: Any) -> Any:
        return run(self, *args, check_races=check_races, **kw)

    monkeypatch.setattr(Simulator, "run", checked_run)
    monkeypatch.setenv("INFER_SIM_CHECK_RACES", "1")
