"""ONNX DFT and STFT (frontend/onnx_signal.py): products with compile-time DFT matrices,
checked against numpy's FFTs; and the error paths."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from infer.dialects.graph_interpreter import run_module
from infer.frontend import ModelImportError
from infer.frontend.onnx_import import import_onnx
from infer.frontend.onnx_signal import dft_matrix

RNG = np.random.default_rng(5)


def _model(node, x_shape, inits=(), opset=20):
    import onnx

    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [_out(len(x_shape))],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _out(rank: int):
    return helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"y{i}" for i in range(rank)])


def _pairs(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1)


def _run(model, x):
    return run_module(import_onnx(model), {"x": x})[0]


@pytest.mark.parametrize("axis, length", [(1, None), (2, None), (1, 12), (2, 5)])
def test_dft_of_a_real_signal_matches_numpy(axis, length):
    x = RNG.standard_normal((2, 8, 6, 1)).astype(np.float32)
    inputs = ["x", "n" if length else "", "axis"]
    inits = [("axis", np.array(axis, np.int64))] + ([("n", np.array(length, np.int64))] if length else [])
    y = _run(_model(helper.make_node("DFT", inputs, ["y"]), x.shape, inits), x)
    want = _pairs(np.fft.fft(x[..., 0].astype(np.float64), n=length, axis=axis))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_dft_17_takes_the_axis_as_an_attribute_and_a_complex_signal():
    z = RNG.standard_normal((3, 5, 7)) + 1j * RNG.standard_normal((3, 5, 7))
    x = _pairs(z).astype(np.float32)
    y = _run(_model(helper.make_node("DFT", ["x"], ["y"], axis=2), x.shape, opset=17), x)
    np.testing.assert_allclose(y, _pairs(np.fft.fft(z, axis=2)), rtol=1e-5, atol=1e-5)


def test_inverse_dft_of_a_complex_spectrum_matches_numpy():
    z = RNG.standard_normal((2, 9, 3)) + 1j * RNG.standard_normal((2, 9, 3))
    x = _pairs(z).astype(np.float32)
    y = _run(_model(helper.make_node("DFT", ["x", "", "axis"], ["y"], inverse=1), x.shape,
                    [("axis", np.array(1, np.int64))]), x)
    np.testing.assert_allclose(y, _pairs(np.fft.ifft(z, axis=1)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("length", [None, 9, 16])
def test_one_sided_dft_and_its_inverse_match_rfft_and_irfft(length):
    x = RNG.standard_normal((2, 16, 1)).astype(np.float32)
    inits = [("axis", np.array(1, np.int64))] + ([("n", np.array(length, np.int64))] if length else [])
    n_input = "n" if length else ""
    spectrum = _run(_model(helper.make_node("DFT", ["x", n_input, "axis"], ["y"], onesided=1), x.shape, inits), x)
    want = np.fft.rfft(x[..., 0].astype(np.float64), n=length, axis=1)
    np.testing.assert_allclose(spectrum, _pairs(want), rtol=1e-5, atol=1e-5)
    back = _run(_model(helper.make_node("DFT", ["x", n_input, "axis"], ["y"], onesided=1, inverse=1),
                       spectrum.shape, inits), spectrum)
    np.testing.assert_allclose(back[..., 0], np.fft.irfft(want, n=length, axis=1), rtol=1e-5, atol=1e-5)


def test_the_dft_matrix_is_exact_where_the_angle_is():
    # angles that are multiples of pi/2 give exact 0 / +-1 (the angle reduced mod L first)
    m = dft_matrix(4, 1, 4, False, False).reshape(4, 4, 2)
    np.testing.assert_array_equal(m[..., 0], [[1, 1, 1, 1], [1, 0, -1, 0], [1, -1, 1, -1], [1, 0, -1, 0]])
    np.testing.assert_array_equal(m[..., 1], [[0, 0, 0, 0], [0, -1, 0, 1], [0, 0, 0, 0], [0, 1, 0, -1]])


@pytest.mark.parametrize("with_window", [False, True])
def test_stft_matches_numpy_frame_by_frame(with_window):
    import onnx

    x = RNG.standard_normal((2, 100, 1)).astype(np.float32)
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(20) / 20)).astype(np.float32)
    inputs = ["x", "step", "window" if with_window else "", "" if with_window else "length"]
    inits = [("step", np.array(8, np.int64)), ("length", np.array(20, np.int64)), ("window", window)]
    graph = helper.make_graph([helper.make_node("STFT", inputs, ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 100, 1])],
                              [_out(4)], initializer=[numpy_helper.from_array(v, k) for k, v in inits])
    model = onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    y = _run(model, x)
    frames = np.stack([x[:, 8 * f:8 * f + 20, 0] for f in range(11)], axis=1).astype(np.float64)
    if with_window:
        frames = frames * window
    np.testing.assert_allclose(y, _pairs(np.fft.rfft(frames, axis=-1)), rtol=1e-5, atol=1e-5)
    assert "graph.gather" in str(import_onnx(model)) and "graph.linear" in str(import_onnx(model))


@pytest.mark.parametrize("node, shape, message", [
    (helper.make_node("DFT", ["x"], ["y"], axis=3, name="d"), (1, 8, 4, 1),
     r"DFT node 'd': the DFT axis must be a signal axis \(1 \.\. 2\), got 3"),
    (helper.make_node("DFT", ["x"], ["y"], axis=1, onesided=1, name="d"), (1, 8, 2),
     r"DFT node 'd': onesided = 1 needs a real signal"),
    (helper.make_node("DFT", ["x"], ["y"], axis=1, name="d"), (1, 8, 3),
     r"DFT node 'd': DFT needs a signal \[batch, \.\.\., 1 \(real\) or 2 \(complex\)\], got shape \[1, 8, 3\]"),
])
def test_bad_spectral_nodes_are_one_error(node, shape, message):
    with pytest.raises(ModelImportError, match=message):
        import_onnx(_model(node, shape, opset=17))


def _constant_op_model(node, inits, rank):
    import onnx

    graph = helper.make_graph([node, helper.make_node("Identity", ["w"], ["y"])], "g", [], [_out(rank)],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize("op, torch_fn", [("HannWindow", "hann_window"), ("HammingWindow", "hamming_window"),
                                          ("BlackmanWindow", "blackman_window")])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows_are_torchs(op, torch_fn, periodic):
    import torch

    model = _constant_op_model(helper.make_node(op, ["size"], ["w"], periodic=periodic), [("size", np.array(25, np.int64))], 1)
    (y,) = run_module(import_onnx(model), {})
    kwargs = {"alpha": 25 / 46, "beta": 21 / 46} if op == "HammingWindow" else {}
    want = getattr(torch, torch_fn)(25, periodic=bool(periodic), dtype=torch.float64, **kwargs).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-7)


def test_mel_weight_matrix_is_onnx_references():
    from onnx.reference import ReferenceEvaluator

    inits = [("mels", np.array(20, np.int64)), ("n", np.array(512, np.int64)), ("rate", np.array(16000, np.int64)),
             ("lo", np.array(20.0, np.float32)), ("hi", np.array(7600.0, np.float32))]
    model = _constant_op_model(helper.make_node("MelWeightMatrix", ["mels", "n", "rate", "lo", "hi"], ["w"]), inits, 2)
    (y,) = run_module(import_onnx(model), {})
    (want,) = ReferenceEvaluator(model).run(None, {})
    assert y.shape == (257, 20)
    np.testing.assert_array_equal(y, want)
    assert (y.max(axis=0) == 1).all()  # every triangle peaks at 1


def test_stft_of_a_signal_without_its_component_axis():
    """torch.onnx.export writes torch.stft's real signal as [batch, length] (onnxruntime takes
    it): read as [batch, length, 1]."""
    import onnx

    x = RNG.standard_normal((2, 64)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("STFT", ["x", "step", "", "length"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])], [_out(4)],
                              initializer=[numpy_helper.from_array(np.array(16, np.int64), "step"),
                                           numpy_helper.from_array(np.array(32, np.int64), "length")])
    model = onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    frames = np.stack([x[:, 16 * f:16 * f + 32] for f in range(3)], axis=1).astype(np.float64)
    np.testing.assert_allclose(_run(model, x), _pairs(np.fft.rfft(frames, axis=-1)), rtol=1e-5, atol=1e-5)
