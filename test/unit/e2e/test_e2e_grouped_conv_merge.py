"""Grouped and depthwise convs lowered as fewer, deeper groups with block-diagonal weights
(passes/graph_to_tile/grouped_conv.py) where the cost model ranks that fastest: the merged
weights compute the grouped conv, the compiled programs agree with onnxruntime and, bit for bit,
with their tile programs (races checked), and the merge is picked for MobileNet-style depthwise
convs on both configs and takes fewer cycles than the groups one by one. (Depthwise convs can
also go to the vector unit, depthwise.py: off in these tests, `matrix_unit_only`, but for the
whole MobileNetV2, where each goes to one or the other; test_e2e_depthwise_vector.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import infer
from helpers.tile_programs import tile_module
from helpers.tuning_choices import offered_choices
from infer.dialects.tile_interpreter import run_tile_module
from infer.passes import tiling_cost
from infer.passes.graph_to_tile import conv as conv_lowering
from infer.passes.graph_to_tile.grouped_conv import group_merges, merged_weights

onnxruntime = pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("groups,Cg,Og,r", [(8, 1, 1, 8), (8, 1, 1, 2), (6, 2, 3, 3), (4, 3, 1, 2), (5, 1, 2, 5)])
def test_merged_weights_compute_the_grouped_conv(groups, Cg, Og, r):
    rng = np.random.default_rng(groups * 100 + r)
    x = torch.from_numpy(rng.standard_normal((2, groups * Cg, 7, 6)))
    w = rng.standard_normal((groups * Og, Cg, 3, 3))
    merged = merged_weights(w, groups, r)
    assert merged.shape == (groups * Og, r * Cg, 3, 3)
    # each output channel keeps its own weights, the rest of its merged group's columns are 0
    blocks = merged.reshape(groups // r, r, Og, r, Cg, 3, 3)
    for i in range(r):
        np.testing.assert_array_equal(blocks[:, i, :, i], w.reshape(groups // r, r, Og, Cg, 3, 3)[:, i])
        for j in set(range(r)) - {i}:
            assert not blocks[:, i, :, j].any()
    expected = torch.nn.functional.conv2d(x, torch.from_numpy(w), stride=2, padding=1, groups=groups)
    got = torch.nn.functional.conv2d(x, torch.from_numpy(merged), stride=2, padding=1, groups=groups // r)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)


def test_merge_factors_divide_the_groups_within_the_array_depth():
    assert group_merges(96, 1, 128) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96]
    assert group_merges(96, 1, 16) == [1, 2, 3, 4, 6, 8, 12, 16]
    assert group_merges(32, 4, 16) == [1, 2, 4]  # ResNeXt-style: 4 channels a group
    assert group_merges(7, 1, 16) == [1, 7]
    assert group_merges(3, 8, 16) == [1]


def _conv_model(path, C, O, H, k, stride, groups):
    import onnx

    rng = np.random.default_rng(groups)
    w = (rng.standard_normal((O, C // groups, k, k)) * 0.3).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    pad = k // 2
    OH = (H + 2 * pad - k) // stride + 1
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[stride, stride], kernel_shape=[k, k],
                          pads=[pad] * 4, group=groups, name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, O, OH, OH])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture
def matrix_unit_only():
    """Depthwise convs kept on the matrix unit (the vector unit's path never chosen), apart
    from the test's own monkeypatch, which the tests undo between their compiles."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(conv_lowering, "vector_tiles", lambda *args: None)
        yield


def _groups_lowered(monkeypatch) -> list[int]:
    """The groups of every conv kernel graph-to-tile chooses tiles for (recorded)."""
    seen: list[int] = []
    choose = tiling_cost.choose_conv

    def spy(hw, spec, override=None, memo=None):
        seen.append(spec.groups)
        return choose(hw, spec, override, memo)

    monkeypatch.setattr(tiling_cost, "choose_conv", spy)
    return seen


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("C,O,H,k,stride,groups", [(32, 32, 14, 3, 1, 32), (24, 24, 13, 3, 2, 24),
                                                   (16, 32, 9, 3, 1, 4)])
def test_merged_groups_agree_with_onnxruntime_and_their_tile_program(tmp_path, monkeypatch, matrix_unit_only, target,
                                                                     C, O, H, k, stride, groups):
    lowered = _groups_lowered(monkeypatch)
    path = _conv_model(tmp_path / "conv.onnx", C, O, H, k, stride, groups)
    x = np.random.default_rng(1).standard_normal((1, C, H, H)).astype(np.float32)
    (expected,) = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    model = infer.import_model(str(path))
    tiles, weights = tile_module(model.module, target, "fp32")
    assert lowered and lowered[-1] < groups  # merged
    (interpreted,) = run_tile_module(tiles, [x], weights=weights)
    (got,) = infer.compile(model, target=target, precision="fp32").run([x], check_races=True)
    assert np.asarray(got).tobytes() == np.asarray(interpreted).tobytes()  # the tile program, bit for bit
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


# (the most of the group-by-group cycles the merged conv may take: edge's 16-deep array merges
# at most 16 channels, server's 128-deep one up to 128)
@pytest.mark.parametrize("target,C,H,stride,most", [("edge", 32, 28, 1, 0.8), ("server", 96, 28, 2, 0.2),
                                                    ("server", 144, 14, 1, 0.2)])
def test_depthwise_convs_merge_and_take_fewer_cycles(tmp_path, monkeypatch, matrix_unit_only, target, C, H, stride,
                                                    most):
    path = _conv_model(tmp_path / "dw.onnx", C, C, H, 3, stride, C)
    x = np.random.default_rng(2).standard_normal((1, C, H, H)).astype(np.float32)

    def run(merge: bool):
        lowered = _groups_lowered(monkeypatch)
        if not merge:
            monkeypatch.setattr(conv_lowering, "group_merges", lambda groups, Cg, depth: [1])
        exe = infer.compile(str(path), target=target, precision="bf16")
        (y,) = exe.run([x])
        monkeypatch.undo()
        return np.asarray(y), exe.last_report.counters.cycles, lowered

    merged, merged_cycles, merged_groups = run(True)
    apart, apart_cycles, apart_groups = run(False)
    assert apart_groups == [C] and merged_groups[-1] < C
    assert merged_cycles < most * apart_cycles
    # both bf16 programs against each other: the same products, summed in another order
    np.testing.assert_allclose(merged, apart, rtol=2e-2, atol=2e-2 * float(np.abs(apart).max()))


def _int8_depthwise(C: int, H: int, zp: int) -> tuple[str, dict[str, np.ndarray]]:
    """f32 -> requantize (zero point zp) -> depthwise conv2d_integer 3x3 pad 1 (+bias) ->
    dequantize per channel."""
    rng = np.random.default_rng(C + zp)
    w = rng.integers(-127, 128, (C, 1, 3, 3), dtype=np.int8)
    b = rng.integers(-3000, 3000, (C,), dtype=np.int32)
    s = ", ".join(repr(float(v)) for v in rng.uniform(0.5, 2.0, C) * 1e-3)
    x_t, q_t, a_t = (f"tensor<1x{C}x{H}x{H}xf32>", f"tensor<1x{C}x{H}x{H}xi8>", f"tensor<1x{C}x{H}x{H}xi32>")
    text = f"""func.func @main(%x: {x_t}) -> {x_t} {{
  %s = graph.constant dense<19.0> : tensor<1xf32>
  %q = graph.requantize %x, %s {{zero_point = {zp} : i64}} : ({x_t}, tensor<1xf32>) -> {q_t}
  %w = graph.weight @w : tensor<{C}x1x3x3xi8>
  %b = graph.weight @b : tensor<{C}xi32>
  %a = graph.conv2d_integer %q, %w, %b {{padding = array<i64: 1, 1, 1, 1>, groups = {C} : i64, input_zero_point = {zp} : i64}} : ({q_t}, tensor<{C}x1x3x3xi8>, tensor<{C}xi32>) -> {a_t}
  %m = graph.constant dense<[{s}]> : tensor<{C}xf32>
  %y = graph.dequantize_linear %a, %m {{axis = 1 : i64}} : ({a_t}, tensor<{C}xf32>) -> {x_t}
  func.return %y : {x_t}
}}
"""
    return text, {"w": w, "b": b}


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("zp", [0, 5])
def test_int8_depthwise_convs_merge_bit_exactly(monkeypatch, target, zp):
    """int8 products and int32 sums are exact: merged, the depthwise conv gives the graph
    interpreter's bits (the zero weights add exact zeros, the zero point's fold is per channel)."""
    from helpers.graph_programs import parse_with_weights
    from infer.dialects.graph_interpreter import run_module

    C, H = 48, 12
    text, weights = _int8_depthwise(C, H, zp)
    x = np.random.default_rng(3).standard_normal((1, C, H, H)).astype(np.float32) * 3
    (ref,) = run_module(parse_with_weights(text, weights), [x])

    def run(merge: bool):
        lowered = _groups_lowered(monkeypatch)
        if not merge:
            monkeypatch.setattr(conv_lowering, "group_merges", lambda groups, Cg, depth: [1])
        exe = infer.compile(parse_with_weights(text, weights), target=target, precision="int8", graph_passes="")
        (y,) = exe.run([x], check_races=True)
        monkeypatch.undo()
        return np.asarray(y), exe.last_report.counters.cycles, lowered

    merged, merged_cycles, merged_groups = run(True)
    apart, apart_cycles, apart_groups = run(False)
    assert apart_groups == [C] and merged_groups[-1] < C
    np.testing.assert_array_equal(merged, ref)
    np.testing.assert_array_equal(apart, ref)
    assert merged_cycles < apart_cycles
    assert np.unique(ref).size > 100


def test_mobilenet_v2_on_server_merges_or_vectorises_its_depthwise_convs(tmp_path):
    """The whole MobileNetV2 of tools/zoo.py (bench_roofline.py's) in bf16 on server: each of its
    17 depthwise convs merged (the array does more MACs than the model defines on it) or on the
    vector unit (no array MACs), both kinds present, the output as onnxruntime's to bf16
    accuracy."""
    from infer.tools.zoo import build_mobilenet_v2_onnx

    path = build_mobilenet_v2_onnx(tmp_path / "mobilenet_v2.onnx")
    image = np.random.default_rng(3).standard_normal((1, 3, 224, 224)).astype(np.float32)
    (expected,) = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"image": image})
    exe = infer.compile(str(path), target="server", precision="bf16")
    (got,) = exe.run([image])
    got, expected = np.asarray(got, np.float64).ravel(), expected.astype(np.float64).ravel()
    assert got @ expected / np.linalg.norm(got) / np.linalg.norm(expected) > 0.999
    convs = [o for o in exe.last_report.ops if o.kernel_class == "conv2d"]
    merged = [o for o in convs if o.macs > 1.5 * o.model_macs]
    on_vector = [o for o in convs if o.macs == 0]
    assert merged and on_vector and len(merged) + len(on_vector) == 17


def test_autotuning_measures_the_merge_factors(tmp_path, monkeypatch, matrix_unit_only):
    """The ranked merge factors are one of the choices autotuning simulates: with it on, the
    choice is offered every r the cost model ranked (best first), and the program it keeps is
    never slower than the cost model's."""
    C, H = 48, 28
    path = _conv_model(tmp_path / "dw.onnx", C, C, H, 3, 2, C)
    x = np.random.default_rng(4).standard_normal((1, C, H, H)).astype(np.float32)
    default = infer.compile(str(path), target="edge", precision="bf16")
    default.run([x])
    offered = offered_choices(monkeypatch, conv_lowering)
    tuned = infer.compile(str(path), target="edge", precision="bf16", autotune=3,
                          autotune_cache=str(tmp_path / "cache"))
    tuned.run([x])
    merges = [r for _, r in offered[0]]
    assert all(key[0] == "merged groups" for key in offered[0])
    assert sorted(merges) == [1, 2, 3, 4, 6, 8, 12, 16]  # every divisor of 48 within edge's 16 rows
    assert len(offered) > 3  # the autotuner lowered the op again per candidate r
    assert tuned.last_report.counters.cycles <= default.last_report.counters.cycles
