"""An audio front-end written in ONNX (STFT with a Hann window, power spectrum, a mel-like
projection, log) compiled for both configs: the log spectrogram agrees with onnxruntime, and
the fast simulation modes with the race-checked reference run bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import infer
from helpers.sim_modes import assert_sim_modes_agree

onnxruntime = pytest.importorskip("onnxruntime")

FRAME, STEP, SAMPLES, MELS = 64, 32, 1024, 16


def _front_end(path, rng):
    import onnx

    bins = FRAME // 2 + 1
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(FRAME) / FRAME)).astype(np.float32)
    mel = np.abs(rng.standard_normal((bins, MELS))).astype(np.float32) / bins
    nodes = [
        helper.make_node("STFT", ["audio", "step", "window"], ["spectrum"], name="stft"),
        helper.make_node("Mul", ["spectrum", "spectrum"], ["squares"], name="square"),
        helper.make_node("ReduceSum", ["squares", "last"], ["power"], keepdims=0, name="power"),
        helper.make_node("MatMul", ["power", "mel"], ["mels"], name="mel"),
        helper.make_node("Add", ["mels", "floor"], ["floored"], name="floor"),
        helper.make_node("Log", ["floored"], ["log_mels"], name="log"),
    ]
    frames = (SAMPLES - FRAME) // STEP + 1
    graph = helper.make_graph(
        nodes, "front_end", [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [2, SAMPLES, 1])],
        [helper.make_tensor_value_info("log_mels", TensorProto.FLOAT, [2, frames, MELS])],
        initializer=[numpy_helper.from_array(np.array(STEP, np.int64), "step"), numpy_helper.from_array(window, "window"),
                     numpy_helper.from_array(np.array([-1], np.int64), "last"), numpy_helper.from_array(mel, "mel"),
                     numpy_helper.from_array(np.array(1e-6, np.float32), "floor")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


@pytest.mark.parametrize("target", ["edge", "server"])
def test_log_mel_spectrogram_agrees_with_onnxruntime(tmp_path, target):
    rng = np.random.default_rng(9)
    path = _front_end(tmp_path / "front_end.onnx", rng)
    t = np.arange(SAMPLES) / 16000.0
    audio = (np.sin(2 * np.pi * 440 * t) + 0.3 * rng.standard_normal(SAMPLES)).astype(np.float32)
    audio = np.stack([audio, audio[::-1]])[..., None]
    (want,) = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"audio": audio})
    exe = infer.compile(str(path), target=target)
    (got,) = exe.run([audio], check_races=True)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
    assert_sim_modes_agree(exe, [audio], [got])
