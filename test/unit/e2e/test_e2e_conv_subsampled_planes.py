"""Strided convolutions without padding read their windows from planes prepared in DRAM when the
cost model says so (`Planes.preparable`): the helper nest writes only the stride phases the taps
read, so a 1x1/2 conv's windows are whole rows of a quarter of the input (a subsampled, bf16
copy made once) instead of every other input row, read and split on chip once per
output-channel tile. Planes made only of input elements (`Planes.border_free`) are not filled
with the border first. Both orientations, both configs, odd sizes: the simulator (races checked)
gives the tile interpreter's bits, and both agree with onnxruntime; on edge the cost model picks
the planes for a 1x1/2 512->1024 conv of a 14x14 input (ResNet-50's downsample at half its
size) and they take fewer cycles and DRAM bytes than windows built on chip."""

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
from infer.passes.graph_to_tile.planes import Planes

onnxruntime = pytest.importorskip("onnxruntime")


def _conv_model(path, C, O, H, W, k, stride):
    import onnx

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((O, C, k, k)) * 0.3).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    OH, OW = (H - k) // stride + 1, (W - k) // stride + 1
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride, stride], kernel_shape=[k, k],
                          name="conv")],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, O, OH, OW])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_which_planes_are_prepared_and_filled():
    def planes(H, k, stride, pad=0):
        OH = (H + 2 * pad - k) // stride + 1
        return Planes(H, H, k, k, (stride, stride), (1, 1), (pad,) * 4, OH, OH)

    pointwise = planes(28, 1, 2)  # ResNet-50's 1x1/2: one phase, a quarter of the pixels
    assert pointwise.preparable and pointwise.border_free
    assert (len(pointwise.phases), pointwise.Hq, pointwise.Wq) == (1, 14, 14)
    odd = planes(13, 1, 2)  # 7 of 13 rows and columns
    assert odd.border_free and (odd.Hq, odd.Wq) == (7, 7)
    # an unpadded 3x3/2: a window reaches one plane row past the data (the garbage columns'
    # shift), so the planes hold rows the input does not fill
    window = planes(13, 3, 2)
    assert window.preparable and not window.border_free and window.Hq == 8
    assert planes(14, 3, 1, pad=1).preparable and not planes(14, 3, 1, pad=1).border_free
    assert not planes(14, 1, 1).preparable  # the input itself is the plane


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("orientation", ["pixels", "channels"])
@pytest.mark.parametrize("k,H,W", [(1, 13, 12), (3, 13, 11)])
def test_subsampled_planes(tmp_path, monkeypatch, target, orientation, k, H, W):
    choose = tiling_cost.choose_conv

    def forced(hw, spec, override=None, memo=None):
        assert spec.prepared  # strided: the planes in DRAM or the windows built on chip
        tiles = dataclasses.replace(choose(hw, spec, override, memo).tiles, orientation=orientation, TOH=2,
                                    on_chip_padding=False)
        estimate = tiling_cost.conv_estimate(hw, spec, tiles)
        return tiling_cost.ConvChoice(tiles, estimate, [estimate])

    monkeypatch.setattr(tiling_cost, "choose_conv", forced)
    C, O = 6, 10
    path = _conv_model(tmp_path / "conv.onnx", C, O, H, W, k, 2)
    x = np.random.default_rng(1).standard_normal((1, C, H, W)).astype(np.float32)
    (expected,) = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})

    model = infer.import_model(str(path))
    tiles, weights = tile_module(model.module, target, "fp32")
    planes = [o for o in tiles.walk() if isinstance(o, t.AllocOp) and "dram" in str(o.results[0].type)
              and "bf16" in str(o.results[0].type)]
    assert len(planes) == 2  # hi and lo (fp32 emulation)
    OH, OW = (H - k) // 2 + 1, (W - k) // 2 + 1
    elements = int(np.prod(planes[0].results[0].type.get_shape()))
    phases = 1 if k == 1 else 4
    assert elements >= C * phases * OH * OW and (k == 3 or elements == C * OH * OW)
    fills = [o for o in tiles.walk() if isinstance(o, t.FillOp)]
    assert bool(fills) == (k == 3)  # a 1x1/2's planes are all input: nothing to fill first
    (interpreted,) = run_tile_module(tiles, [x], weights=weights)
    (got,) = infer.compile(model, target=target, precision="fp32").run([x], check_races=True)
    assert np.asarray(got).tobytes() == np.asarray(interpreted).tobytes()  # the tile program, bit for bit
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


def test_edge_picks_subsampled_planes_for_a_strided_pointwise_conv(tmp_path, monkeypatch):
    C, H, O = 512, 14, 1024
    path = _conv_model(tmp_path / "conv.onnx", C, O, H, H, 1, 2)
    x = np.random.default_rng(2).standard_normal((1, C, H, H)).astype(np.float32)
    choose = tiling_cost.choose_conv
    picked = []

    def run(on_chip: bool):
        def forced(hw, spec, override=None, memo=None):
            choice = choose(hw, spec, override, memo)
            picked.append(choice.tiles)
            if not on_chip:
                return choice
            best = min((e for e in choice.candidates if e.tiles.on_chip_padding), key=lambda e: e.cycles)
            return tiling_cost.ConvChoice(best.tiles, best, [best])

        monkeypatch.setattr(tiling_cost, "choose_conv", forced)
        exe = infer.compile(str(path), target="edge", precision="bf16")
        (y,) = exe.run([x], check_races=True)
        return np.asarray(y), exe.last_report.counters

    y, planes = run(on_chip=False)
    assert not picked[0].on_chip_padding, picked[0].text()  # the cost model's choice: the planes
    y_chip, chip = run(on_chip=True)
    assert y.tobytes() == y_chip.tobytes()  # the same bf16 windows either way
    assert planes.dram_read_bytes < 0.8 * chip.dram_read_bytes, (planes.dram_read_bytes, chip.dram_read_bytes)
    assert planes.cycles < 0.95 * chip.cycles, (planes.cycles, chip.cycles)
