"""Differential fuzzing: random graph-level models (helpers/fuzz_graphs.graphs) compiled for each
hardware config with `infer.compile` (precision drawn per model) and run on the simulator with
its race checker, against the reference interpreter (helpers/fuzz_check.run_case).

`make test` runs INFER_FUZZ_EXAMPLES=50 models per config (100 in all); `make fuzz` runs 2,000 per config
in collect mode. Environment:
  INFER_FUZZ_EXAMPLES  models per config (default 50)
  INFER_FUZZ_SEED      hypothesis seed (default 0): the same seed and count generate the same models
  INFER_FUZZ_COLLECT   1: run every model, list all findings at the end (no shrinking); else the
                       first finding fails the test and hypothesis shrinks it to a minimal model,
                       printed as `Falsifying example: run(fg=FuzzGraph(...), precision=...)`:
                       paste it into test_fuzz_regressions.py
Each run prints its seed and counts: passed (of which ill-conditioned: within the model's own
sensitivity to rounding, see fuzz_check.run_case), unsupported (a clean compiler error: counted, not a
finding; the reasons are listed), degenerate (the reference has NaN/inf), known bugs (findings
with an xfail regression test in test_fuzz_regressions.py) and findings. docs/testing.md says
how to reproduce one.
"""

from __future__ import annotations

import collections
import os
import time

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from infer.passes import infer_passes

from helpers.fuzz_check import Outcome, run_case
from helpers.fuzz_graphs import FuzzGraph, build, graphs
from helpers.fuzz_known import known_bug

pytestmark = pytest.mark.skipif("tile-to-npu" not in infer_passes(), reason="tile-to-npu is not registered")

EXAMPLES = int(os.environ.get("INFER_FUZZ_EXAMPLES", "50"))
SEED = int(os.environ.get("INFER_FUZZ_SEED", "0"))
COLLECT = os.environ.get("INFER_FUZZ_COLLECT", "").strip() not in ("", "0")
TARGETS = ["edge", "server"]
PRECISIONS = ["fp32", "bf16"]


class Tally:
    def __init__(self, target: str):
        self.target = target
        self.kinds: collections.Counter[str] = collections.Counter()
        self.reasons: collections.Counter[str] = collections.Counter()
        self.example: dict[str, FuzzGraph] = {}  # the first model refused for each reason
        self.known: collections.Counter[str] = collections.Counter()
        self.findings: list[tuple[FuzzGraph, str, Outcome]] = []
        self.start = time.perf_counter()
        self.shrinking = False  # after the first finding (not collecting): hypothesis's shrink runs
        self.ill_conditioned = 0  # passed only within the model's conditioning (fuzz_check.run_case)

    def add(self, fg: FuzzGraph, precision: str, outcome: Outcome) -> str:
        kind = outcome.kind
        if self.shrinking:
            return kind
        bug = known_bug(fg, self.target, precision, outcome) if outcome.finding else None
        if bug is not None:
            kind = "known bug"
            self.known[bug] += 1
        elif outcome.finding:
            self.findings.append((fg, precision, outcome))
            self.shrinking = not COLLECT
        elif kind == "unsupported":
            self.reasons[outcome.reason()] += 1
            self.example.setdefault(outcome.reason(), fg)
        elif kind == "passed" and outcome.detail:
            self.ill_conditioned += 1
        self.kinds[kind] += 1
        return kind

    def summary(self) -> str:
        total = sum(self.kinds.values())
        order = ("passed", "unsupported", "degenerate", "known bug", "mismatch", "crash")
        counts = ", ".join(f"{self.kinds[k]} {k}" for k in order if self.kinds[k])
        if self.ill_conditioned:
            counts += f" ({self.ill_conditioned} passed within their conditioning only)"
        shrunk = " before shrinking the first finding" if self.shrinking else ""
        lines = [f"fuzz {self.target}: {total} graphs{shrunk} (seed {SEED}, {time.perf_counter() - self.start:.0f} s): {counts}"]
        for r, n in self.reasons.most_common(8):
            # a refusal may be a missing lowering the generator should not ask for: its model, to look at
            lines += [f"  unsupported x{n}: {r}", f"    e.g. {self.example[r]!r}"]
        lines += [f"  known bug x{n}: {b}" for b, n in self.known.most_common()]
        for fg, precision, o in self.findings:
            lines += [f"  FINDING ({o.kind}, {precision}, {o.where}): {o.detail}", f"    {fg!r}"]
        return "\n".join(lines)


def finding_message(fg: FuzzGraph, target: str, precision: str, o: Outcome) -> str:
    return (f"{o.kind} on {target} at precision={precision} ({o.where}): {o.detail}\n"
            f"ops: {fg.describe()}\n{build(fg)}")


@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_differential(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    tally = Tally(target)

    @seed(SEED)
    @settings(max_examples=EXAMPLES, database=None, deadline=None, derandomize=False,
              phases=[Phase.generate] if COLLECT else [Phase.generate, Phase.shrink],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much, HealthCheck.large_base_example])
    @given(fg=graphs(), precision=st.sampled_from(PRECISIONS))
    def run(fg: FuzzGraph, precision: str) -> None:
        outcome = run_case(fg, target, precision)
        kind = tally.add(fg, precision, outcome)
        if kind in ("mismatch", "crash") and not COLLECT:
            raise AssertionError(finding_message(fg, target, precision, outcome))

    try:
        run()
    finally:
        with capsys.disabled():
            print("\n" + tally.summary())
    assert not tally.findings, f"{len(tally.findings)} finding(s) on {target}:\n" + "\n\n".join(
        finding_message(fg, target, p, o) for fg, p, o in tally.findings)
    assert tally.kinds["passed"] > 0.6 * sum(tally.kinds.values()), "most generated models should compile and run"
