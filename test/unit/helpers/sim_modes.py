"""The simulation modes on a compiled model (used by the e2e tests after their reference run):
fast mode's outputs are the reference mode's bits and its cycles, counters and per-instruction
profile are the same; functional mode's outputs too; timing mode's cycles and counters too."""

from __future__ import annotations

import numpy as np


def assert_sim_modes_agree(exe, inputs, ref_outputs: list[np.ndarray]) -> None:
    """`exe.last_report` must come from a reference-engine run (check_races=True or
    mode="reference") on `inputs` that produced `ref_outputs`."""
    ref = exe.last_report.counters
    assert ref.mode == "reference"
    fast_outputs = exe.run(inputs, mode="fast")
    fast = exe.last_report.counters
    assert [y.tobytes() for y in fast_outputs] == [y.tobytes() for y in ref_outputs]
    assert fast.as_dict() == ref.as_dict()
    assert fast.profile == ref.profile
    functional_outputs = exe.run(inputs, mode="functional", trace=False)
    assert [y.tobytes() for y in functional_outputs] == [y.tobytes() for y in ref_outputs]
    assert exe.run(inputs, mode="timing") == []
    want = ref.as_dict()
    want["acc_saturations"] = 0  # data: timing mode computes none
    assert exe.last_report.counters.as_dict() == want
