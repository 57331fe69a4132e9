"""Padded convolutions whose windows are built on chip (`ConvTiles.on_chip_padding`, the cost
model's choice on server for ResNet-50's 3x3 convs) instead of read from stride-phase planes
prepared in DRAM: the border rows and columns are filled in the window, the row tiles reaching
into the padding run on their own. Both orientations (channel-major and pixel-major windows),
strides 1 and 2, odd sizes, both configs, the tiling forced: the simulator (races checked)
gives the tile interpreter's bits, and both agree with onnxruntime."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import infer
from helpers.tile_programs import tile_module
from infer.dialects import tile as t
from infer.dialects.tile_interpreter import run_tile_module
from infer.passes import tiling_cost

onnxruntime = pytest.importorskip("onnxruntime")


def _conv_model(path, C, O, H, W, stride):
    import onnx

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((O, C, 3, 3)) * 0.3).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    OH, OW = (H + 2 - 3) // stride + 1, (W + 2 - 3) // stride + 1
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[stride, stride], pads=[1, 1, 1, 1],
                          kernel_shape=[3, 3], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, O, OH, OW])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("orientation", ["pixels", "channels"])
@pytest.mark.parametrize("stride,H,W", [(1, 11, 9), (2, 13, 12)])
def test_on_chip_padded_windows(tmp_path, monkeypatch, target, orientation, stride, H, W):
    choose = tiling_cost.choose_conv

    def forced(hw, spec, override=None, memo=None):
        assert spec.prepared  # a padded input: the planes in DRAM or the windows padded on chip
        tiles = dataclasses.replace(choose(hw, spec, override, memo).tiles, orientation=orientation, TOH=4,
                                    on_chip_padding=True)  # 4 output rows: a clipped first and last tile
        estimate = tiling_cost.conv_estimate(hw, spec, tiles)
        return tiling_cost.ConvChoice(tiles, estimate, [estimate])

    monkeypatch.setattr(tiling_cost, "choose_conv", forced)
    C, O = 6, 10
    path = _conv_model(tmp_path / "conv.onnx", C, O, H, W, stride)
    x = np.random.default_rng(1).standard_normal((1, C, H, W)).astype(np.float32)
    (expected,) = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})

    model = infer.import_model(str(path))
    tiles, weights = tile_module(model.module, target, "fp32")
    # no helper nest wrote bf16 planes to DRAM (the windows' only DRAM source is the input)
    assert not [o for o in tiles.walk() if isinstance(o, t.AllocOp) and "dram" in str(o.results[0].type)
                and "bf16" in str(o.results[0].type)]
    (interpreted,) = run_tile_module(tiles, [x], weights=weights)
    (got,) = infer.compile(model, target=target, precision="fp32").run([x], check_races=True)
    assert np.asarray(got).tobytes() == np.asarray(interpreted).tobytes()  # the tile program, bit for bit
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))
