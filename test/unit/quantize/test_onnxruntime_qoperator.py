"""ONNX models quantized by onnxruntime in the QOperator form (`quantize_static(...,
quant_format=QuantFormat.QOperator)`: QLinearConv, com.microsoft QGemm, int8 MaxPool; and
`quantize_dynamic`: DynamicQuantizeLinear, ConvInteger, MatMulInteger) imported, run on the
reference interpreter and compiled for the simulator of both configs, against onnxruntime
running the same quantized file.

The reference interpreter computes ONNX's numerics: equal to onnxruntime on these inputs. On the
NPU, static models with int8 weights are integer kernels and equal onnxruntime too; uint8 weights
carry one zero point per output channel, which no int8 kernel folds, so those layers run in float
over the dequantized values: within one output quantization step. Dynamic models keep float
outputs: the integer products are exact (bf16 holds |q - zp| <= 255 exactly, f32 sums below
2^24), the run-time scale is divided on the NPU as a reciprocal and a multiply: within a few ulps
of the output's magnitude."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import infer
from helpers.onnxruntime_quant import REDUCED_RANGE, quantize_static_file, small_cnn, small_mlp

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


class _Residual(torch.nn.Module):
    """A residual block with a gated branch and global pooling: the QOperator form has
    com.microsoft QLinearAdd, QLinearMul and QLinearGlobalAveragePool around QLinearConvs."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.body = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.gate = torch.nn.Conv2d(8, 8, 1)
        self.head = torch.nn.Linear(8, 10)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        h = h + torch.relu(self.body(h)) * self.gate(h)
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(h, 1), 1))


def _residual():
    return _Residual(), (1, 1, 8, 8)


MODELS = {"cnn": small_cnn, "mlp": small_mlp, "residual": _residual}


def _float_model(tmp_path, name: str):
    torch.manual_seed(0)
    net, shape = MODELS[name]()
    path = tmp_path / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), (torch.zeros(shape),), str(path), dynamo=False, input_names=["x"],
                          output_names=["y"], opset_version=17)
    return path, shape


def _static(tmp_path, name: str, activation: str, weight: str):
    path, shape = _float_model(tmp_path, name)

    qpath = quantize_static_file(path, tmp_path / f"{name}.qop.onnx", shape, "QOperator", activation, weight)
    return qpath, shape


def _op_types(path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path)).graph.node}


def _onnxruntime(path, x):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("name,activation,weight", [
    ("cnn", "QInt8", "QInt8"), ("mlp", "QUInt8", "QInt8"), ("cnn", "QUInt8", "QUInt8")])
def test_onnxruntime_qoperator_model_on_the_simulator(tmp_path, name, activation, weight, target) -> None:
    path, shape = _static(tmp_path, name, activation, weight)
    assert "QGemm" in _op_types(path) and ("QLinearConv" in _op_types(path)) == (name == "cnn")
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    expected = _onnxruntime(path, x)
    model = infer.import_model(path)
    np.testing.assert_array_equal(model.run([x])[0], expected)  # the reference interpreter: ONNX's numerics
    exe = infer.compile(model, target=target, precision="int8")
    ir = exe.artifact.graph_ir
    assert "ui8" not in ir  # uint8 activations and weights moved to int8 (exactly)
    simulated = exe.run([x])[0]
    if weight == "QInt8":  # every layer an integer kernel: onnxruntime's arithmetic
        assert ir.count("graph.conv2d_integer") == (2 if name == "cnn" else 0)
        assert ir.count("graph.linear_integer") == (1 if name == "cnn" else 2)
        np.testing.assert_array_equal(simulated, expected)
    else:
        inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}
        step = float(inits["y_scale"])
        assert np.abs(simulated - expected).max() <= step * 1.0001


@pytest.mark.parametrize("target", ["edge", "server"])
def test_onnxruntime_qoperator_elementwise_and_pooling(tmp_path, target) -> None:
    """QLinearAdd / QLinearMul / QLinearGlobalAveragePool: the reference interpreter equals
    onnxruntime; on the NPU they run in float between quantize/dequantize: one output step."""
    path, shape = _static(tmp_path, "residual", "QInt8", "QInt8")
    model_proto = onnx.load(str(path))
    ms = {n.op_type for n in model_proto.graph.node if n.domain == "com.microsoft"}
    assert {"QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool"} <= ms, ms
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    expected = _onnxruntime(path, x)
    model = infer.import_model(path)
    reference = model.run([x])[0]
    inits = {i.name: numpy_helper.to_array(i) for i in model_proto.graph.initializer}
    step = float(inits["y_scale"])
    assert np.abs(reference - expected).max() <= step * 1.0001
    simulated = infer.compile(model, target=target, precision="int8").run([x])[0]
    assert np.abs(simulated - expected).max() <= step * 1.0001
    assert np.abs(simulated - reference).max() <= step * 1.0001


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("name", ["cnn", "mlp"])
def test_onnxruntime_dynamic_model_on_the_simulator(tmp_path, name, target) -> None:
    path, shape = _float_model(tmp_path, name)
    qpath = tmp_path / f"{name}.dynamic.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantization.quantize_dynamic(str(path), str(qpath), weight_type=quantization.QuantType.QInt8,
                                      reduce_range=REDUCED_RANGE)
    assert {"DynamicQuantizeLinear", "ConvInteger" if name == "cnn" else "MatMulInteger"} <= _op_types(qpath)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    expected = _onnxruntime(qpath, x)
    model = infer.import_model(qpath)
    np.testing.assert_array_equal(model.run([x])[0], expected)
    assert "infer.dynamic_quantization" in str(model.module.attributes)
    simulated = infer.compile(model, target=target, precision="int8").run([x])[0]  # no calibration: quantized already
    np.testing.assert_allclose(simulated, expected, rtol=0, atol=4 * np.finfo(np.float32).eps * np.abs(expected).max())


def _single_node_model(tmp_path, node, inputs, outputs, initializers, domain_opsets=()):
    graph = helper.make_graph([node], "one", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), *domain_opsets])
    path = tmp_path / "one.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("name,x", [
    ("all zeros", np.zeros((2, 5), np.float32)),
    ("positive", np.linspace(0.5, 3.0, 10, dtype=np.float32).reshape(2, 5)),
    ("negative", -np.linspace(0.5, 3.0, 10, dtype=np.float32).reshape(2, 5)),
    ("ties", np.array([[-1.0, 0.0, 0.5, 1.5, 2.5], [127.5, 128.5, -2.5, 3.0, 1.0]], np.float32)),
    ("random", np.random.default_rng(3).standard_normal((2, 5)).astype(np.float32) * 7)])
def test_dynamic_quantize_linear_matches_onnxruntime(tmp_path, name, x) -> None:
    """All three outputs (uint8 values, run-time scale, zero point) bit for bit, edge cases of
    the specification included (the range always holds 0; scale 1 for an all-zero input)."""
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    path = _single_node_model(
        tmp_path, node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 5]), helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("z", TensorProto.UINT8, [])], [])
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = infer.import_model(path).run([x])
    for e, g in zip(expected, got):
        assert e.dtype == g.dtype
        np.testing.assert_array_equal(g, e)


def _qlinear_matmul(tmp_path, a_scale: float):
    node = helper.make_node("QLinearMatMul", ["a", "a_s", "a_z", "b", "b_s", "b_z", "y_s", "y_z"], ["y"], name="qmatmul")
    inits = [helper.make_tensor("a_s", TensorProto.FLOAT, [], [a_scale]), helper.make_tensor("a_z", TensorProto.INT8, [], [0]),
             helper.make_tensor("b", TensorProto.INT8, [3, 2], [1, -2, 3, 4, -5, 6]),
             helper.make_tensor("b_s", TensorProto.FLOAT, [], [0.5]), helper.make_tensor("b_z", TensorProto.INT8, [], [0]),
             helper.make_tensor("y_s", TensorProto.FLOAT, [], [0.25]), helper.make_tensor("y_z", TensorProto.INT8, [], [0])]
    return _single_node_model(tmp_path, node, [helper.make_tensor_value_info("a", TensorProto.INT8, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, [2, 2])], inits)


def test_qlinear_matmul_on_the_reference_interpreter(tmp_path) -> None:
    path = _qlinear_matmul(tmp_path, 0.1)
    a = np.array([[1, -7, 30], [-128, 127, 5]], np.int8)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    np.testing.assert_array_equal(infer.import_model(path).run([a])[0], expected)


@pytest.mark.parametrize("scale", [0.0, float("nan")])
def test_qoperator_scale_of_zero_or_nan_is_one_located_error(tmp_path, scale) -> None:
    from infer.frontend import ModelImportError

    with pytest.raises(ModelImportError, match=r"QLinearMatMul node 'qmatmul': a's scale must be finite and positive") as e:
        infer.import_model(_qlinear_matmul(tmp_path, scale))
    assert "\n" not in str(e.value)


def test_unsupported_com_microsoft_op_names_what_is_supported(tmp_path) -> None:
    from infer.frontend import ModelImportError

    node = helper.make_node("QLinearSigmoid", ["a", "s", "z", "s", "z"], ["y"], name="sig", domain="com.microsoft")
    path = _single_node_model(
        tmp_path, node, [helper.make_tensor_value_info("a", TensorProto.UINT8, [4])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [4])],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [0.1]), helper.make_tensor("z", TensorProto.UINT8, [], [128])],
        [helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(ModelImportError, match=r"com.microsoft:QLinearSigmoid node 'sig': op type 'QLinearSigmoid' of "
                                               r"domain 'com.microsoft' is not supported \(supported in that domain: "
                                               r"QGemm, QLinearAdd, QLinearGlobalAveragePool, QLinearMul\)"):
        infer.import_model(path)


def test_integer_model_inputs_are_one_error_on_the_npu(tmp_path) -> None:
    """A model taking int8 values runs on the reference interpreter (above); the NPU program
    of a quantized model takes and returns float tensors: one error naming the input."""
    from infer.tools.driver import DriverError

    with pytest.raises(DriverError, match=r"model input 'a' is int8: the int8 program of a quantized model takes and "
                                          r"returns float tensors"):
        infer.compile(_qlinear_matmul(tmp_path, 0.1), target="edge", precision="int8")
