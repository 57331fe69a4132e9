"""The official ONNX node tests of one backend held to its expected-failure list
(`python -m infer.tools.onnx_xfail` writes the lists; test_onnx_backend.py and
test_onnx_backend_npu.py run them)."""

from __future__ import annotations

import unittest
import warnings

import pytest

from infer.tools.onnx_xfail import BACKENDS, _Recorder, load_xfail, missing_reasons, node_test_cases


class NodeTests:
    """The node test cases of `backend` ("reference" or "npu") and its xfail list."""

    def __init__(self, backend: str, backend_class: type):
        self.backend = backend
        self.cases: dict[str, unittest.TestCase] = node_test_cases(backend_class)
        self.xfail = load_xfail(backend)
        self.xfail_file = BACKENDS[backend][3]
        self.regenerate = f"python -m infer.tools.onnx_xfail --backend {backend} --write"

    def check_list_names_existing_tests(self) -> None:
        stale = sorted(self.xfail - set(self.cases))
        assert not stale, (
            f"the xfail list names tests that do not exist: {stale[:10]}; regenerate: {self.regenerate}"
        )

    def check_every_entry_gives_a_reason(self) -> None:
        bare = missing_reasons(self.backend)
        assert not bare, (
            f"{len(bare)} entries of {self.xfail_file} give no reason why the test fails, e.g. "
            f"{bare[:5]}; regenerate: {self.regenerate}"
        )

    def check(self, name: str) -> None:
        """Run test `name`: a listed test must fail (it is xfailed with its reason), any other pass."""
        recorder = _Recorder()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # as in `python -m infer.tools.onnx_xfail`
            self.cases[name].run(recorder)
        (outcome,) = recorder.outcomes
        if name in self.xfail:
            if outcome.passed:
                pytest.fail(f"{name} is in {self.xfail_file} but passes now; regenerate the list: {self.regenerate}")
            pytest.xfail(outcome.reason)
        elif not outcome.passed:
            pytest.fail(f"{name} fails unexpectedly: {outcome.reason}")
