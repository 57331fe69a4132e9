"""`Executable.run` with the simulator's race checker: on with INFER_SIM_CHECK_RACES=1 (or
`check_races=True`), off by default; a race is a RunError naming both instructions."""

from __future__ import annotations

import numpy as np
import pytest

from infer.runtime.executable import Executable, RunError
from infer.target.asm import Builder

from helpers.runtime_artifacts import bias_relu_artifact

X = np.linspace(-2, 2, 64, dtype=np.float32).reshape(4, 16)
WANT = np.maximum(X + np.linspace(-1, 1, 16, dtype=np.float32), 0)


def racy_bias_relu() -> Executable:
    """bias_relu_artifact with the vector add no longer waiting for the input DMA."""
    fp32 = 2
    b = Builder()
    b.dma_load(dram=256, local=256, n0=64, n1=1, n2=1, signal=2)
    b.dma_load(dram=0, local=0, n0=64, n1=4, n2=1, ds1=64, ls1=64, wait=2)
    b.vec_add(dst=512, a=0, b=256, rows=4, cols=16, dstride=64, astride=64, bstride=0, dt=fp32,
              at=fp32, bt=fp32, bmode=1)
    b.vec_relu(dst=512, a=512, rows=4, cols=16, dstride=64, astride=64, dt=fp32, at=fp32, signal=3)
    b.dma_store(dram=320, local=512, n0=64, n1=4, n2=1, ds1=64, ls1=64, wait=3)
    b.halt()
    art = bias_relu_artifact()
    art.program = b.program().to_bytes()
    return Executable(art)


def test_race_checker_off_by_default(monkeypatch):
    monkeypatch.delenv("INFER_SIM_CHECK_RACES", raising=False)
    (y,) = racy_bias_relu().run([X])  # program-order results hide the missing semaphore
    np.testing.assert_array_equal(y, WANT)
    monkeypatch.setenv("INFER_SIM_CHECK_RACES", "0")
    (y,) = racy_bias_relu().run([X])
    np.testing.assert_array_equal(y, WANT)


def test_env_var_turns_the_race_checker_on(monkeypatch):
    monkeypatch.setenv("INFER_SIM_CHECK_RACES", "1")
    with pytest.raises(RunError) as e:
        racy_bias_relu().run([X])
    msg = str(e.value)
    assert "fault [race] at instruction 2 (vec.add" in msg
    # the earliest conflicting instruction is reported: the bias load (operand b)
    assert "pc 2 vec.add (vector" in msg and "reads it while pc 0 dma.load (dma_load" in msg
    assert "scratchpad [0x100, 0x140)" in msg
    # the synchronised original runs clean with the checker on, same numbers
    (y,) = Executable(bias_relu_artifact()).run([X])
    np.testing.assert_array_equal(y, WANT)
    # an explicit argument wins over the environment
    (y,) = racy_bias_relu().run([X], check_races=False)
    np.testing.assert_array_equal(y, WANT)


def test_check_races_argument(monkeypatch):
    monkeypatch.delenv("INFER_SIM_CHECK_RACES", raising=False)
    with pytest.raises(RunError, match=r"\[race\]"):
        racy_bias_relu().run([X], check_races=True)
