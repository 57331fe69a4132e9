"""Fixtures of the runtime tests (helpers: runtime_artifacts.py)."""

from __future__ import annotations

import pytest

from infer.runtime.artifact import Artifact
from runtime_artifacts import bias_relu_artifact, gemm_artifact, target_toml  # noqa: F401


@pytest.fixture
def bias_relu() -> Artifact:
    return bias_relu_artifact()
