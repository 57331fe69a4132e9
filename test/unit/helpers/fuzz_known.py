"""Bugs the fuzzer has found that are not fixed yet: each has a strict-xfail regression test in
test_fuzz_regressions.py, and a fuzz run counts a finding that matches one as a "known bug"
instead of failing. When a bug is fixed its regression test XPASSes (strict: the test fails),
and its entry here goes with the xfail mark.

An entry recognises a finding by what went wrong (the outcome's `where` and a pattern of its
detail) and by the ops of the model, as narrowly as the bug is understood.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from helpers.fuzz_check import Outcome
from helpers.fuzz_graphs import FuzzGraph


@dataclass(frozen=True)
class KnownBug:
    name: str          # the regression test
    where: str         # Outcome.where
    detail: str        # regex searched in Outcome.detail
    applies: Callable[[FuzzGraph, str, str], bool] = lambda fg, target, precision: True


KNOWN_BUGS: list[KnownBug] = []


def known_bug(fg: FuzzGraph, target: str, precision: str, outcome: Outcome) -> str | None:
    for bug in KNOWN_BUGS:
        if outcome.where == bug.where and re.search(bug.detail, outcome.detail) and bug.applies(fg, target, precision):
            return bug.name
    return None
