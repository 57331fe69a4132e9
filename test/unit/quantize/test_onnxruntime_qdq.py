"""ONNX models quantized by onnxruntime's own `quantize_static` (QDQ form, int8 and uint8
activations) imported, compiled with `--precision int8` and run on the simulator of both
configs, against onnxruntime running the same quantized file: outputs within one step of the
output's quantization (the NPU quantizes by multiplying with 1 / scale where ONNX divides;
they differ only on values within an ulp of a rounding tie), exact on these inputs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import infer
from helpers.onnxruntime_quant import quantize_static_file, small_cnn, small_mlp

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")


class _Attention(torch.nn.Module):
    """A transformer-style block: attention over 8 tokens with projections, then an MLP."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.up, self.down = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)

    def forward(self, x):
        scores = self.q(x) @ self.k(x).transpose(-1, -2) * 0.25
        h = x + self.o(torch.softmax(scores, -1) @ self.v(x))
        return h + self.down(torch.relu(self.up(h)))


MODELS = {"cnn": small_cnn, "mlp": small_mlp, "attention": lambda: (_Attention(), (8, 16))}


def _quantized(tmp_path, name: str, activation: str):
    torch.manual_seed(0)
    net, shape = MODELS[name]()
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    path = tmp_path / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), (torch.from_numpy(x),), str(path), dynamo=False, input_names=["x"],
                          output_names=["y"], opset_version=17)
    qpath = quantize_static_file(path, tmp_path / f"{name}.{activation}.onnx", shape, "QDQ", activation,
                                 per_channel=name != "attention")
    return qpath, x


def _output_step(path) -> float:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    (last,) = [n for n in model.graph.node if "y" in n.output]
    assert last.op_type == "DequantizeLinear"
    return float(inits[last.input[1]])


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("activation", ["QInt8", "QUInt8"])
@pytest.mark.parametrize("name", ["cnn", "mlp"])
def test_onnxruntime_qdq_model_on_the_simulator(tmp_path, name, activation, target) -> None:
    path, x = _quantized(tmp_path, name, activation)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    model = infer.import_model(path)
    np.testing.assert_array_equal(model.run([x])[0], expected)  # the reference interpreter: ONNX's numerics
    exe = infer.compile(model, target=target, precision="int8")
    ir = exe.artifact.graph_ir  # the graph the NPU program was compiled from
    assert ir.count("graph.conv2d_integer") == (2 if name == "cnn" else 0)
    assert ir.count("graph.linear_integer") + ir.count("graph.matmul_integer") == (1 if name == "cnn" else 2)
    assert "ui8" not in ir  # uint8 activations moved to int8 (exactly)
    simulated = exe.run([x])[0]
    assert np.abs(simulated - expected).max() <= _output_step(path) * 1.0001, (simulated, expected)


def test_onnxruntime_qdq_attention_on_the_simulator(tmp_path) -> None:
    """q·kᵀ and P·V have two runtime operands: onnxruntime quantizes them too; here they stay
    float matmuls over dequantized int8 values (the same numbers: exact products of the
    dequantized operands, accumulated in bf16 on the NPU), the projections are int8 kernels."""
    path, x = _quantized(tmp_path, "attention", "QUInt8")
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    model = infer.import_model(path)
    reference = model.run([x])[0]
    np.testing.assert_allclose(reference, expected, atol=_output_step(path) * 1.0001)
    exe = infer.compile(model, target="server", precision="int8")
    simulated = exe.run([x])[0]
    cos = float((simulated * expected).sum() / np.linalg.norm(simulated) / np.linalg.norm(expected))
    assert cos > 0.995, cos
    ir = exe.artifact.graph_ir
    assert ir.count("graph.linear_integer") + ir.count("graph.matmul_integer") == 6  # q, k, v, o, up, down
    assert ir.count("graph.matmul ") == 2  # q·kᵀ and P·V in float


@pytest.mark.parametrize("scale", [0.0, float("nan")])
def test_qdq_scale_of_zero_or_nan_is_one_located_error(tmp_path, scale) -> None:
    from onnx import TensorProto, helper

    from infer.frontend import ModelImportError

    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quantize_x"),
         helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequantize_x")],
        "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [scale]), helper.make_tensor("z", TensorProto.INT8, [], [0])])
    path = tmp_path / "bad_scale.onnx"
    import onnx

    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(ModelImportError, match=r"QuantizeLinear node 'quantize_x': the scale must be finite and positive"):
        infer.import_model(path)
