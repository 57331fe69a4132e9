"""Strided convolutions whose input size is not a multiple of the stride (found by `make fuzz`,
seed 1: 9 mismatches on edge). The stride phases of such an input differ: one row phase's last
window rows lie outside the input while the other's are inside (each phase is clipped on its
own: Planes.clip_phase), and an odd width's narrower column phase lies in the staging tile at
the full row pitch (WindowLoader._transpose moves it row by row). Compiled for both configs and
compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import infer

onnxruntime = pytest.importorskip("onnxruntime")

CASES = [  # (stride, input height, input width)
    ((2, 2), 13, 13),  # odd height and width
    ((3, 2), 13, 17),  # the fuzzer's shapes
    ((2, 3), 13, 17),
    ((1, 3), 13, 17),
    ((2, 1), 13, 14),  # odd height only
]


def _conv_model(path, stride, H, W):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((12, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    out = [1, 12, (H - 3) // stride[0] + 1, (W - 3) // stride[1] + 1]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=list(stride), kernel_shape=[3, 3], name="conv")],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, H, W])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    import onnx

    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("stride,H,W", CASES)
def test_strided_conv_with_uneven_phases(tmp_path, target, stride, H, W):
    model = _conv_model(tmp_path / "conv.onnx", stride, H, W)
    x = np.random.default_rng(1).standard_normal((1, 2, H, W)).astype(np.float32)
    (expected,) = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    result = infer.compile(model, target=target, precision="fp32").run({"x": x})
    got = next(iter(result.values())) if isinstance(result, dict) else result[0]
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3 * float(np.abs(expected).max()))


def _window_model(path, node, C, H, W, inits=()):
    import onnx

    graph = helper.make_graph([node], "windows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, 5, 4])], list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("kind", ["depthwise", "max_pool"])
def test_odd_width_windows_load_whole_rows(tmp_path, target, kind):
    """A stride-2 window over an odd width (EfficientNet's 7x7 -> 4x4 depthwise convs): whole
    input rows land in staging rows widened to an even width and the column phases are gathered
    on the vector unit; the widened column holds the border. It had loaded each column phase
    with a DMA of one element per burst, one DMA per channel (192 on server: 26.9 K cycles)."""
    C, H, W = 96, 9, 7
    rng = np.random.default_rng(0)
    if kind == "depthwise":
        w = rng.standard_normal((C, 1, 3, 3)).astype(np.float32)
        node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1], group=C, kernel_shape=[3, 3])
        model = _window_model(tmp_path / "m.onnx", node, C, H, W, [numpy_helper.from_array(w, "w")])
    else:
        node = helper.make_node("MaxPool", ["x"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
        model = _window_model(tmp_path / "m.onnx", node, C, H, W)
    x = rng.standard_normal((1, C, H, W)).astype(np.float32) - 3.0  # (max pool: all negative, the border is -inf)
    (expected,) = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    exe = infer.compile(model, target=target, precision="fp32")
    (got,) = exe.run([x], check_races=True)
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3 * float(np.abs(expected).max()))
    assert exe.program.to_asm().count("dma.load") < C // 4
