"""Fixtures of the runtime tests (the artifacts they build: helpers/runtime_artifacts.py)."""

from __future__ import annotations

import pytest

from infer.runtime.artifact import Artifact

from helpers.runtime_artifacts import bias_relu_artifact


@pytest.fixture
def bias_relu() -> Artifact:
    return bias_relu_artifact()
