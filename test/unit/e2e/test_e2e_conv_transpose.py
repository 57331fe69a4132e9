"""ConvTranspose (a decoder's upsampling: stride 2 with output padding, a U-Net's 2x2 stride 2
(a 1x1 conv and a depth-to-space), and a 1-D one with padding beyond the kernel's reach) compiled for both configs: the simulated outputs agree with
onnxruntime, the fast simulation modes with the race-checked reference run bit for bit, and the
kernel flip and channel swap (frontend/conv_transpose.py) are folded into a weight at compile
time, not run on the device; strided ones are split into their output phases (no inserted
zeros)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import infer
from helpers.sim_modes import assert_sim_modes_agree

onnxruntime = pytest.importorskip("onnxruntime")


def _decoder(path):
    import onnx

    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((8, 6, 3, 3)) * 0.3).astype(np.float32)
    b1 = rng.standard_normal(6).astype(np.float32)
    w_unet = (rng.standard_normal((6, 3, 2, 2)) * 0.3).astype(np.float32)
    b_unet = rng.standard_normal(3).astype(np.float32)
    w2 = (rng.standard_normal((3, 4, 4)) * 0.3).astype(np.float32)
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w1", "b1"], ["u"], strides=[2, 2], pads=[1, 1, 1, 1],
                         output_padding=[1, 1], name="up"),
        helper.make_node("Relu", ["u"], ["r"], name="relu"),
        helper.make_node("ConvTranspose", ["r", "w_unet", "b_unet"], ["u2"], strides=[2, 2], name="unet_up"),
        helper.make_node("Reshape", ["u2", "flat"], ["rows"], name="rows"),
        helper.make_node("ConvTranspose", ["rows", "w2"], ["y"], strides=[3], pads=[4, 2], name="up1d"),
    ]
    init = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
            numpy_helper.from_array(w_unet, "w_unet"), numpy_helper.from_array(b_unet, "b_unet"),
            numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(np.array([2, 3, 400], np.int64), "flat")]
    graph = helper.make_graph(nodes, "decoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 1195])], init)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("target", ["edge", "server"])
def test_conv_transpose_decoder_agrees_with_onnxruntime(tmp_path, target):
    path = _decoder(tmp_path / "decoder.onnx")
    x = np.random.default_rng(1).standard_normal((2, 8, 5, 5)).astype(np.float32)
    (expected,) = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert expected.shape == (2, 4, (400 - 1) * 3 - 4 - 2 + 4)
    exe = infer.compile(str(path), target=target)
    ys = exe.run([x], check_races=True)
    np.testing.assert_allclose(ys[0], expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))
    assert_sim_modes_agree(exe, [x], ys)
    # the flipped, channel-swapped kernels are weights; only the convs' data moves at run time
    graph_ir = str(infer.import_model(str(path)).module)
    # no zeros inserted: 4 phase convs (3x3 stride 2), one 1x1 conv (2x2 stride 2), 3 phase
    # convs (1-D stride 3), each followed by its interleaving transpose
    assert graph_ir.count("graph.conv2d") == 8 and "tensor<2x8x5x2x5x2xf32>" not in graph_ir
    lowered = exe.artifact.layer_ir or ""
    assert lowered.count("graph.conv2d") == 8 and lowered.count("graph.transpose") == 3
