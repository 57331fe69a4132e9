"""ONNX RNN, GRU and LSTM (frontend/onnx_recurrent.py), as torch.onnx.export writes them for
torch.nn.RNN/GRU/LSTM: outputs and final states against onnxruntime; compiled on both configs;
the error paths."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import infer
from infer.dialects.graph_interpreter import run_module
from infer.frontend import ModelImportError
from infer.frontend.onnx_import import import_onnx

torch = pytest.importorskip("torch")
onnxruntime = pytest.importorskip("onnxruntime")


class _Recurrent(torch.nn.Module):
    def __init__(self, kind: str, **kwargs):
        super().__init__()
        self.layer = getattr(torch.nn, kind)(6, 5, **kwargs)

    def forward(self, x):
        y, state = self.layer(x)
        return (y, *state) if isinstance(state, tuple) else (y, state)


CASES = [
    ("LSTM", {}), ("LSTM", {"bidirectional": True, "batch_first": True}), ("GRU", {}),
    ("GRU", {"bidirectional": True}), ("RNN", {"nonlinearity": "relu", "batch_first": True}), ("RNN", {}),
]


def _export(tmp_path, kind, kwargs):
    torch.manual_seed(0)
    m = _Recurrent(kind, **kwargs).eval()
    x = torch.randn(2, 7, 6) if kwargs.get("batch_first") else torch.randn(7, 2, 6)
    path = tmp_path / f"{kind}.onnx"
    with warnings.catch_warnings():  # the TorchScript exporter warns about its own deprecation
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (x,), str(path), dynamo=False, opset_version=17, input_names=["x"])
    return path, x.numpy()


@pytest.mark.parametrize("kind, kwargs", CASES, ids=[f"{k}-{'-'.join(a) or 'default'}" for k, a in CASES])
def test_recurrent_layers_match_onnxruntime(tmp_path, kind, kwargs):
    path, x = _export(tmp_path, kind, kwargs)
    want = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = run_module(import_onnx(str(path)), {"x": x})
    assert len(got) == len(want)
    for o, w in zip(got, want, strict=True):
        assert o.shape == w.shape
        np.testing.assert_allclose(o, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["edge", "server"])
def test_a_bidirectional_lstm_compiles(tmp_path, target):
    path, x = _export(tmp_path, "LSTM", {"bidirectional": True, "batch_first": True})
    want = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = infer.compile(str(path), target=target).run([x], check_races=True)
    for o, w in zip(got, want, strict=True):
        np.testing.assert_allclose(o, w, rtol=1e-4, atol=1e-5)


def test_variable_sequence_lengths_are_one_error():
    import onnx

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((1, 3, 4)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((1, 3, 3)).astype(np.float32), "R"),
             numpy_helper.from_array(np.array([5, 3], np.int32), "lens")]
    node = helper.make_node("RNN", ["x", "W", "R", "", "lens"], ["y"], hidden_size=3, name="rnn")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 1, 2, 3])], initializer=inits)
    model = onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    with pytest.raises(ModelImportError, match=r"RNN node 'rnn': sequence_lens \[5, 3\] are not all the sequence length 5"):
        import_onnx(model)
