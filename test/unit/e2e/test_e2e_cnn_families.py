"""Classic image-classifier families as a user brings them (issue 16): small ONNX models in the
style of AlexNet (LRN), Inception, DenseNet, ShuffleNet, SqueezeNet and MobileNet, random
weights, compiled for both hardware configs, run on the simulator (race checker on) and
compared with onnxruntime: max |y - ort| <= 1e-3 x the output range (fp32)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import infer
from infer.passes import infer_passes

pytestmark = pytest.mark.skipif("tile-to-npu" not in infer_passes(), reason="tile-to-npu is not registered")

FP32_REL = 1e-3
SIZE = 24  # input 1 x 3 x SIZE x SIZE


class Net:
    """A tiny ONNX graph builder: each method adds nodes and returns the output name."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def _name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}{self.count}"

    def _init(self, array: np.ndarray, kind: str) -> str:
        name = self._name(kind)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, bn: bool = False) -> str:
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2 / (cin // group * k * k))).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.1).astype(np.float32)
        y = self.node("Conv", [x, self._init(w, "w"), self._init(b, "b")], kernel_shape=[k, k],
                      strides=[stride, stride], pads=[k // 2] * 4, group=group)
        if bn:
            params = [self.rng.uniform(0.5, 1.5, cout), self.rng.standard_normal(cout) * 0.1,
                      self.rng.standard_normal(cout) * 0.1, self.rng.uniform(0.5, 1.5, cout)]
            y = self.node("BatchNormalization", [y, *(self._init(p.astype(np.float32), "bn") for p in params)])
        return y

    def relu(self, x: str) -> str:
        return self.node("Relu", [x])

    def pool(self, op: str, x: str, k: int, stride: int, pad: int = 0, **attrs) -> str:
        return self.node(op, [x], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, **attrs)

    def concat(self, *xs: str) -> str:
        return self.node("Concat", list(xs), axis=1)

    def classifier(self, x: str, channels: int, classes: int = 10) -> str:
        pooled = self.node("GlobalAveragePool", [x])
        flat = self.node("Flatten", [pooled])
        w = (self.rng.standard_normal((channels, classes)) / np.sqrt(channels)).astype(np.float32)
        return self.node("Gemm", [flat, self._init(w, "fc"), self._init(np.zeros(classes, np.float32), "fcb")])

    def model(self, out: str, classes: int = 10) -> onnx.ModelProto:
        x = helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, SIZE, SIZE])
        y = helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, classes])
        graph = helper.make_graph(self.nodes, "net", [x], [y], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def alexnet() -> onnx.ModelProto:
    n = Net(1)
    x = n.relu(n.conv("image", 3, 16, 5, stride=2))
    x = n.node("LRN", [x], size=5, alpha=1e-2, beta=0.75, bias=2.0)
    x = n.pool("MaxPool", x, 3, 2)
    x = n.relu(n.conv(x, 16, 24, 3))
    x = n.node("LRN", [x], size=3, alpha=1e-3, beta=0.75, bias=1.0)
    x = n.pool("MaxPool", x, 3, 2)
    return n.model(n.classifier(x, 24))


def inception() -> onnx.ModelProto:
    n = Net(2)
    x = n.relu(n.conv("image", 3, 16, 3, stride=2))
    b1 = n.relu(n.conv(x, 16, 8, 1))
    b2 = n.relu(n.conv(n.relu(n.conv(x, 16, 8, 1)), 8, 12, 3))
    b3 = n.relu(n.conv(n.relu(n.conv(x, 16, 4, 1)), 4, 6, 5))
    b4 = n.relu(n.conv(n.pool("MaxPool", x, 3, 1, pad=1), 16, 6, 1))
    x = n.concat(b1, b2, b3, b4)  # 32 channels
    x = n.pool("MaxPool", x, 3, 2, pad=1)
    return n.model(n.classifier(x, 32))


def densenet() -> onnx.ModelProto:
    n = Net(3)
    x, channels = n.conv("image", 3, 12, 3, stride=2), 12
    for _ in range(3):  # dense block: BN-ReLU-conv, concatenated onto the input
        y = n.conv(n.relu(x), channels, 6, 3, bn=True)
        x, channels = n.concat(x, y), channels + 6
    x = n.pool("AveragePool", n.conv(n.relu(x), channels, 16, 1, bn=True), 2, 2)  # transition
    y = n.conv(n.relu(x), 16, 6, 3, bn=True)
    return n.model(n.classifier(n.relu(n.concat(x, y)), 22))


def shufflenet() -> onnx.ModelProto:
    n = Net(4)
    x = n.relu(n.conv("image", 3, 16, 3, stride=2))
    groups, channels, side = 2, 16, SIZE // 2

    def shuffle(v: str) -> str:
        shape = n._init(np.array([1, groups, channels // groups, side, side], np.int64), "shape")
        flat = n._init(np.array([1, channels, side, side], np.int64), "shape")
        t = n.node("Transpose", [n.node("Reshape", [v, shape])], perm=[0, 2, 1, 3, 4])
        return n.node("Reshape", [t, flat])

    y = n.relu(n.conv(x, channels, channels, 1, group=groups, bn=True))
    y = shuffle(y)
    y = n.conv(y, channels, channels, 3, stride=2, group=channels, bn=True)  # depthwise, strided
    y = n.conv(y, channels, channels, 1, group=groups, bn=True)
    shortcut = n.pool("AveragePool", x, 3, 2, pad=1)
    x = n.relu(n.concat(shortcut, y))
    return n.model(n.classifier(x, 2 * channels))


def squeezenet() -> onnx.ModelProto:
    n = Net(5)
    x = n.pool("MaxPool", n.relu(n.conv("image", 3, 16, 3, stride=2)), 3, 2, ceil_mode=1)
    for cin in (16, 16):  # fire modules: squeeze 1x1, expand 1x1 and 3x3
        s = n.relu(n.conv(x, cin, 4, 1))
        x = n.concat(n.relu(n.conv(s, 4, 8, 1)), n.relu(n.conv(s, 4, 8, 3)))
    x = n.relu(n.conv(x, 16, 10, 1))
    return n.model(n.node("Flatten", [n.node("GlobalAveragePool", [x])]))


def mobilenet() -> onnx.ModelProto:
    n = Net(6)
    zero, six = n._init(np.float32(0), "lo"), n._init(np.float32(6), "hi")
    x = n.node("Clip", [n.conv("image", 3, 8, 3, stride=2, bn=True), zero, six])
    for cin, cout, stride in ((8, 16, 1), (16, 24, 2), (24, 24, 1)):
        x = n.node("Clip", [n.conv(x, cin, cin, 3, stride=stride, group=cin, bn=True), zero, six])  # depthwise
        x = n.node("Clip", [n.conv(x, cin, cout, 1, bn=True), zero, six])  # pointwise
    return n.model(n.classifier(x, 24))


FAMILIES = {"alexnet_lrn": alexnet, "inception": inception, "densenet": densenet,
            "shufflenet": shufflenet, "squeezenet": squeezenet, "mobilenet": mobilenet}


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_cnn_family_matches_onnxruntime(family, target, tmp_path):
    import onnxruntime as ort

    model = FAMILIES[family]()
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / f"{family}.onnx"
    onnx.save(model, path)
    image = np.random.default_rng(7).standard_normal((1, 3, SIZE, SIZE)).astype(np.float32)
    (ref,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"image": image})
    (y,) = infer.compile(path, target=target).run([image], check_races=True)
    assert y.shape == ref.shape
    err = float(np.abs(y - ref).max()) / (float(ref.max() - ref.min()) or 1.0)
    assert err <= FP32_REL, f"{family} on {target}: max error {err:.3g} of the output range"
