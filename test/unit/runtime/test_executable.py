"""Executable: DRAM image from the layout, simulator run, outputs, report, trace."""

from __future__ import annotations

import json

import numpy as np
import pytest

from infer.runtime import Executable, RunError, load
from infer.runtime.check import compare

from helpers.runtime_artifacts import bias_relu_artifact, gemm_artifact


def _x():
    return np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)


def test_run_list_and_dict(tmp_path):
    exe = Executable(bias_relu_artifact())
    x = _x()
    expected = np.maximum(x + np.linspace(-1, 1, 16, dtype=np.float32), 0)
    (y,) = exe.run([x])
    np.testing.assert_array_equal(y, expected)
    (y2,) = exe.run({"x": x})
    np.testing.assert_array_equal(y2, expected)
    exe.save(tmp_path / "m.npu")
    (y3,) = load(tmp_path / "m.npu").run(x)
    np.testing.assert_array_equal(y3, expected)
    assert exe.input_names == ["x"] and exe.output_names == ["y"]


def test_runs_are_independent():
    exe = Executable(bias_relu_artifact())
    a, b = exe.run([_x()])[0], exe.run([-_x()])[0]
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(exe.run([_x()])[0], a)


def test_a_run_executable_is_freed_without_the_cycle_collector():
    """An Executable that ran (its report still unread) and the simulator it keeps are freed as
    soon as the last reference goes: a cycle through the lazy report's closure left them, with
    the simulator's local memories (20 MB on server) and DRAM buffers, to the cycle collector,
    and a process compiling model after model grew by ~10 MB per model between full collections."""
    import gc
    import weakref

    gc.collect()
    gc.disable()
    try:
        exe = Executable(bias_relu_artifact())
        exe.run([_x()])
        exe.run([_x()], trace=True)
        gone = [weakref.ref(exe), weakref.ref(exe._sim)]
        del exe
        assert [r() for r in gone] == [None, None]
    finally:
        gc.enable()


@pytest.mark.parametrize("inputs, msg", [
    ({}, "missing input(s) x"),
    ({"x": np.zeros((4, 16), np.float32), "z": 1}, "unknown input(s) z"),
    ([np.zeros((4, 8), np.float32)], "expected shape [4, 16]"),
    ([np.zeros((4, 16), np.complex64)], "expected float32"),
    ([], "expected 1 input(s)"),
    (42, "inputs must be"),
])
def test_bad_inputs(inputs, msg):
    with pytest.raises(RunError, match=None) as e:
        Executable(bias_relu_artifact()).run(inputs)
    assert msg in str(e.value)


def test_float64_inputs_are_cast():
    (y,) = Executable(bias_relu_artifact()).run([_x().astype(np.float64)])
    assert y.dtype == np.float32


def test_report_per_op():
    exe = Executable(bias_relu_artifact())
    exe.run([_x()])
    r = exe.last_report
    assert r.cycles > 0 and r.seconds == pytest.approx(r.cycles / 1e9)
    assert r.dram_bytes == 64 + 256 + 256
    assert set(r.utilization) == {"scalar", "dma_load", "dma_store", "matrix", "vector"}
    assert [o.name for o in r.ops] == ["bias_add", "relu"]
    add, relu = r.ops
    assert add.dram_bytes == 320 and relu.dram_bytes == 256
    assert add.bound == "bandwidth" and 0 < add.achieved <= 1
    s = r.summary()
    assert "cycles" in s and "top ops" in s and "bias_add" in s and "stalls" in s


def test_report_without_markers_says_so():
    art = bias_relu_artifact()
    art.ops = []
    exe = Executable(art)
    exe.run([_x()])
    assert exe.last_report.ops is None
    assert "no op markers" in exe.last_report.summary()


def test_gemm_macs_and_roofline():
    art, a, c = gemm_artifact()
    exe = Executable(art)
    (out,) = exe.run([a])
    np.testing.assert_allclose(out, c, rtol=1e-5, atol=1e-4)
    r = exe.last_report
    assert r.macs == 32 * 64 * 32
    (op,) = r.ops
    assert op.macs == r.macs and op.dram_bytes == r.dram_bytes
    assert 0 < r.matrix_peak_fraction < 1
    assert op.bound in ("compute", "bandwidth") and 0 < op.achieved <= 1
    cmp = compare("C", c, out)
    assert cmp.ok() and cmp.cosine > 0.9999


def test_chrome_trace(tmp_path):
    exe = Executable(bias_relu_artifact())
    exe.run([_x()])
    exe.last_report.to_chrome_trace(tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text())
    names = {e["name"] for e in doc["traceEvents"]}
    assert {"dma.load", "vec.add", "bias_add", "relu"} <= names


def test_compare_metrics():
    r = np.array([1.0, 2.0, 3.0], np.float32)
    exact = compare("o", r, r.copy())
    assert exact.max_abs == 0 and exact.sqnr_db == float("inf") and exact.ok()
    noisy = compare("o", r, r + 0.1)
    assert noisy.max_abs == pytest.approx(0.1, rel=1e-5) and 20 < noisy.sqnr_db < 40
    assert not compare("o", r, -r).ok()
    assert not compare("o", r, r[:2]).ok()


def test_compare_takes_nan_and_inf_where_the_reference_has_them():
    """A model may compute NaN or inf (the log of a negative that a later `where` discards):
    alike on both sides they are left out of the metrics and counted; on one side only, or a
    different infinity, the comparison fails whatever the finite values say."""
    r = np.array([1.0, np.nan, 3.0, np.inf, -np.inf, 2.0], np.float32)
    same = compare("o", r, r.copy())
    assert same.ok() and same.specials == 3 and same.special_mismatches == 0
    assert same.max_abs == 0 and same.sqnr_db == float("inf") and same.cosine == pytest.approx(1.0)
    assert "NaN/inf as the reference at 3 position(s)" in same.line()
    noisy = compare("o", r, r + np.float32(1e-6))
    assert noisy.ok() and noisy.specials == 3 and 0 < noisy.max_abs < 1e-5
    for pos, value in ((1, 0.5), (0, np.nan), (3, -np.inf), (5, np.inf)):
        got = r.copy()
        got[pos] = value
        bad = compare("o", r, got)
        assert not bad.ok() and bad.special_mismatches == 1, (pos, value)
        assert "MISMATCH" in bad.line() and "differs at 1 position(s)" in bad.line()
        assert bad.as_dict()["special_mismatches"] == 1
    nothing_finite = compare("o", np.full(4, np.nan, np.float32), np.full(4, np.nan, np.float32))
    assert nothing_finite.ok() and nothing_finite.specials == 4


def test_compare_takes_a_bool_exactly():
    """A mask has no tolerance: one element of 10,000 flipped fails (SQNR 37 dB would pass)."""
    mask = np.random.default_rng(0).random(10_000) < 0.5
    assert compare("m", mask, mask.astype(np.float32)).ok()
    flipped = mask.astype(np.float32)
    flipped[7] = 1 - flipped[7]
    bad = compare("m", mask, flipped)
    assert bad.exact and not bad.ok() and bad.sqnr_db > 30
    assert compare("m", mask, flipped.astype(bool)).ok() is False


@pytest.mark.parametrize("make", [bias_relu_artifact, lambda: gemm_artifact()[0]])
def test_dram_buffer_reused_with_written_ranges_restored(make):
    """A run leaves its DRAM buffer and the ranges it wrote (Counters.dram_written); the next
    run restores those from the image: the buffer it starts from is the image, byte for
    byte. A reference run or one with on_pc callbacks leaves none (they may write anywhere)."""
    exe = Executable(make())
    inputs = [np.random.default_rng(1).standard_normal(s.shape).astype(s.np_dtype)
              for s in exe.artifact.inputs]
    image = exe._base_image()
    first = exe.run(inputs)
    for mode in ("fast", "functional", "timing"):
        exe.run(inputs, mode=mode)
        assert exe._spare is not None
        assert exe.last_report.counters.dram_written is not None
        dram = exe._fresh_dram()
        assert dram.tobytes() == image.tobytes()
        assert exe._spare is None
        exe._spare = (dram, [])
    for y, y0 in zip(exe.run(inputs), first, strict=True):
        np.testing.assert_array_equal(y, y0)
    exe.run(inputs, mode="reference")
    assert exe._spare is None
    exe.run(inputs, on_pc={0: lambda pc, dram: None})
    assert exe._spare is None


@pytest.mark.parametrize("make", [bias_relu_artifact, lambda: gemm_artifact()[0]])
def test_simulator_kept_between_runs(make, monkeypatch):
    """A run hands its simulator to the next one with its local memories cleared (as a new
    one's), so the functional engine's operand views are made once for the DRAM buffer the
    runs share: every run's outputs equal a new Executable's bit for bit; another
    INFER_SIM_THREADS gets a new simulator."""
    art = make()
    exe = Executable(art)
    rng = np.random.default_rng(2)
    for _ in range(3):
        inputs = [rng.standard_normal(s.shape).astype(s.np_dtype) for s in art.inputs]
        ys = exe.run(inputs)
        for y, want in zip(ys, Executable(art).run(inputs), strict=True):
            assert y.tobytes() == want.tobytes()
    sim = exe._sim
    sim.spad[:] = 0xAB
    sim.acc[:] = 0xCD
    taken = exe._take_simulator()
    assert taken is sim and not sim.spad.any() and not sim.acc.any()
    assert exe._take_simulator() is not sim  # one run at a time takes it
    exe._sim = sim
    exe.run(inputs)
    assert exe._sim is sim
    monkeypatch.setenv("INFER_SIM_THREADS", "2")
    for y, want in zip(exe.run(inputs), ys, strict=True):
        assert y.tobytes() == want.tobytes()
    assert exe._sim is not sim and exe._sim.threads == 2
