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
