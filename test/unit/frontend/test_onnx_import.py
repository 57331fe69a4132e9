"""ONNX import: models built with onnx.helper and exported from torch, checked
against onnxruntime; and the error paths (bad files, unsafe external data,
unsupported ops, dynamic shapes)."""

from __future__ import annotations

import io
import os
import re
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import infer
from infer.dialects.graph_interpreter import run_module
from infer.frontend import ModelImportError
from infer.frontend.onnx_import import import_onnx

RNG = np.random.default_rng(0)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check_against_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-5, atol: float = 1e-5) -> None:
    module = import_onnx(model)
    ours = run_module(module, feeds)
    ref = _ort(model, feeds)
    assert len(ours) == len(ref)
    for a, r in zip(ours, ref):
        assert a.dtype == r.dtype and a.shape == r.shape
        np.testing.assert_allclose(a, r, rtol=rtol, atol=atol)


def _model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _out(name: str, rank: int, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    """An output of known rank and element type, dims left symbolic."""
    return helper.make_tensor_value_info(name, elem, [f"{name}_d{i}" for i in range(rank)])


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _init(name: str, array: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(array, name)


# --------------------------------------------------------------------------
# Models built with onnx.helper
# --------------------------------------------------------------------------


def test_helper_mlp_matches_onnxruntime():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])
    y = _out("probs", 2)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1, name="fc1"),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["z"], alpha=0.5, beta=2.0, name="fc2"),
        helper.make_node("Softmax", ["z"], ["probs"], axis=-1),
    ]
    inits = [_init("w1", _f32(64, 32)), _init("b1", _f32(64)), _init("w2", _f32(64, 10)), _init("b2", _f32(10))]
    model = _model(nodes, [x], [y], inits)
    _check_against_ort(model, {"x": _f32(4, 32)})
    text = str(infer.import_model(model))
    assert "graph.linear" in text and "graph.weight @w1" in text
    assert "dense<" not in text.split("graph.weight @w1")[0] or len(text) < 4000  # weights kept out of the text


def test_helper_cnn_matches_onnxruntime():
    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, [2, 3, 16, 16])
    y = _out("logits", 2)
    nodes = [
        helper.make_node("Conv", ["image", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c", "s", "bi", "m", "v"], ["bn"], epsilon=1e-3),
        helper.make_node("Clip", ["bn", "lo", "hi"], ["r6"]),
        helper.make_node("Conv", ["r6", "dw"], ["d"], group=8, auto_pad="SAME_UPPER", kernel_shape=[3, 3]),
        helper.make_node("MaxPool", ["d"], ["p"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER"),
        helper.make_node("AveragePool", ["p"], ["ap"], kernel_shape=[2, 2], pads=[1, 1, 0, 0], count_include_pad=1),
        helper.make_node("GlobalAveragePool", ["ap"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["f"]),
        helper.make_node("MatMul", ["f", "fw"], ["mm"]),
        helper.make_node("Add", ["mm", "fb"], ["logits"]),
    ]
    inits = [
        _init("cw", _f32(8, 3, 3, 3)), _init("cb", _f32(8)),
        _init("s", _f32(8)), _init("bi", _f32(8)), _init("m", _f32(8)),
        _init("v", np.abs(_f32(8)) + 0.5),
        _init("lo", np.array(0, np.float32)), _init("hi", np.array(6, np.float32)),
        _init("dw", _f32(8, 1, 3, 3)), _init("fw", _f32(8, 5)), _init("fb", _f32(5)),
    ]
    _check_against_ort(_model(nodes, [x], [y], inits), {"image": _f32(2, 3, 16, 16)})


@pytest.mark.parametrize("attrs, spatial", [
    (dict(strides=[2, 2], output_shape=[12, 12]), (12, 12)),  # longer than the scatter: padding after
    (dict(strides=[2, 2], output_shape=[9, 10]), (9, 10)),  # shorter: pads taken from it
    (dict(strides=[2, 1], auto_pad="SAME_LOWER"), (10, 5)),
    (dict(strides=[3, 2], pads=[4, 0, 3, 1], output_padding=[2, 1], group=3), (10, 11)),
])
def test_conv_transpose_matches_onnxruntime(attrs, spatial):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 5, 5])
    group = attrs.get("group", 1)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="up", **attrs)]
    model = _model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, *spatial])],
                   [_init("w", _f32(6, 6 // group, 3, 3)), _init("b", _f32(6))])
    _check_against_ort(model, {"x": _f32(2, 6, 5, 5)})


def test_conv_transpose_output_shape_beyond_reach_is_one_error():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_shape=[12, 13], name="up")]
    model = _model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 12, 13])],
                   [_init("w", _f32(3, 2, 3, 3))])
    with pytest.raises(ModelImportError, match=r"ConvTranspose node 'up': output_shape \[12, 13\] is longer than "
                                               r"the input reaches in spatial dim 1 \(at most 12\)"):
        infer.import_model(model)


@pytest.mark.parametrize("equation, shapes", [
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 7, 8)]),  # attention scores
    ("bhqk,bhkd->bqhd", [(2, 3, 5, 7), (2, 3, 7, 8)]),  # attention output, heads moved
    ("ij,jk,kl->il", [(4, 5), (5, 6), (6, 3)]),  # a chain
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),  # implicit output: b, i, k in alphabetical order
    ("ijk,k->ji", [(3, 4, 5), (5,)]),
    ("ij,kl->ijkl", [(2, 3), (4, 5)]),  # outer product
    ("abc->ca", [(3, 4, 5)]),  # a sum and a transpose
    ("ij,ij->", [(4, 6), (4, 6)]),
])
def test_einsum_matches_onnxruntime(equation, shapes):
    xs = {f"x{i}": _f32(*s) for i, s in enumerate(shapes)}
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in xs.items()]
    want = np.einsum(equation, *xs.values())
    nodes = [helper.make_node("Einsum", list(xs), ["y"], equation=equation, name="es")]
    model = _model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(want.shape))])
    _check_against_ort(model, xs, rtol=1e-4, atol=1e-4)
    text = str(infer.import_model(model))
    assert "graph.einsum" not in text and ("graph.matmul" in text) == ("," in equation)


@pytest.mark.parametrize("equation, shapes, problem", [
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)], "an ellipsis"),
    ("ii->i", [(3, 3)], "a diagonal"),
    ("ij,jk->ik", [(3, 4), (5, 6)], "index 'j' is 4 in one input and 5 in another"),
    ("ij->ijz", [(3, 4)], "output 'ijz' must name distinct indices of the inputs"),
])
def test_einsum_it_cannot_take_is_one_error(equation, shapes, problem):
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, list(s)) for i, s in enumerate(shapes)]
    nodes = [helper.make_node("Einsum", [f"x{i}" for i in range(len(shapes))], ["y"], equation=equation, name="es")]
    model = _model(nodes, inputs, [_out("y", 2)])
    with pytest.raises(ModelImportError, match=f"Einsum node 'es': equation .*{re.escape(problem)}"):
        import_onnx(model)


def _top_k_model(shape, k, axis, largest, opset=17, k_as_input=True):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    if k_as_input:
        node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=axis, largest=largest, name="tk")
        inits = [_init("k", np.array([k], np.int64))]
    else:  # opset 1: k an attribute
        node = helper.make_node("TopK", ["x"], ["values", "indices"], axis=axis, k=k, name="tk")
        inits = []
    return _model([node], [x], [_out("values", len(shape)), _out("indices", len(shape), TensorProto.INT64)],
                  inits, opset=opset)


@pytest.mark.parametrize("shape, k, axis, largest", [
    ((3, 9), 4, -1, 1), ((3, 9), 4, 1, 0), ((5, 2, 6), 3, 0, 1), ((2, 7, 3), 7, 1, 0), ((11,), 1, 0, 1),
])
def test_top_k_matches_onnxruntime_with_ties_and_infinities(shape, k, axis, largest):
    """Values and indices equal onnxruntime's exactly: rounded inputs make ties (ONNX orders
    equal values by index), and infinities sit among them."""
    x = np.round(_f32(*shape) * 2) / 2
    x.reshape(-1)[::7] = np.inf
    x.reshape(-1)[3::11] = -np.inf
    model = _top_k_model(shape, k, axis, largest)
    ours = run_module(import_onnx(model), {"x": x})
    ref = _ort(model, {"x": x})
    for a, r in zip(ours, ref):
        assert a.dtype == r.dtype
        np.testing.assert_array_equal(a, r)
    assert "graph.top_k" in str(import_onnx(model))


def test_top_k_of_opset_1_takes_k_from_its_attribute():
    x = _f32(4, 6)
    (values, indices) = run_module(import_onnx(_top_k_model((4, 6), 2, -1, 1, opset=1, k_as_input=False)), {"x": x})
    want = np.argsort(-x, axis=1, kind="stable")[:, :2]
    np.testing.assert_array_equal(indices, want)
    np.testing.assert_array_equal(values, np.take_along_axis(x, want, 1))


def test_top_k_with_k_computed_at_run_time_is_one_error():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])
    kin = helper.make_tensor_value_info("k", TensorProto.INT64, [1])
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], name="tk")
    model = _model([node], [x, kin], [_out("values", 2), _out("indices", 2, TensorProto.INT64)])
    with pytest.raises(ModelImportError, match="TopK node 'tk': K comes from graph input 'k'.*make it an initializer"):
        import_onnx(model)


def test_top_k_beyond_the_axis_is_one_error():
    with pytest.raises(ModelImportError, match=r"TopK node 'tk': K = 6 is out of range for axis 1 of 5 elements"):
        import_onnx(_top_k_model((2, 5), 6, 1, 1))


def _scatter_check(node, feeds: dict[str, np.ndarray], opset: int = 18, rtol: float = 0.0):
    """Import a one-node model whose runtime inputs are `feeds` and compare with onnxruntime:
    exactly, or within `rtol` where a float position takes several updates (add and mul
    combine them in another order than onnxruntime's sequential one)."""
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for n, v in feeds.items()]
    first = next(iter(feeds.values()))
    model = _model([node], inputs, [_out("y", first.ndim, helper.np_dtype_to_tensor_dtype(first.dtype))], opset=opset)
    (ours,) = run_module(import_onnx(model), feeds)
    (ref,) = _ort(model, feeds)
    assert ours.dtype == ref.dtype
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=0)


@pytest.mark.parametrize("axis, reduction", [(0, "none"), (1, "none"), (-1, "add"), (1, "max"), (0, "min"), (1, "mul")])
def test_scatter_elements_matches_onnxruntime(axis, reduction):
    """Indices narrower than the data off the axis, negative ones, and (with a reduction)
    two updates of one position."""
    x = _f32(4, 5, 6)
    rng = np.random.default_rng(abs(axis) + len(reduction))
    shape = [3, 4, 5]
    d = x.shape[axis]
    if reduction == "none":  # distinct positions along the axis for each other coordinate
        idx = np.moveaxis(np.argsort(rng.random(np.moveaxis(np.zeros(shape), axis, -1).shape[:-1] + (d,)), -1)[..., :shape[axis]], -1, axis)
    else:
        idx = rng.integers(0, d, shape)
    idx = np.where(rng.random(shape) < 0.3, idx - d, idx).astype(np.int64)
    upd = np.round(_f32(*shape) * 4) / 4
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=axis, reduction=reduction)
    _scatter_check(node, {"x": x, "i": idx, "u": upd}, rtol=1e-6 if reduction in ("add", "mul") else 0.0)


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd_matches_onnxruntime(reduction):
    """Whole rows (k = 1) and single elements (k = 2), integer data, a negative index."""
    x = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    rows = np.array([[[2, 1]], [[0, -1]]], np.int64)  # [2, 1, 2]: rows (2, 1) and (0, 3)
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)
    _scatter_check(node, {"x": x, "i": rows, "u": np.arange(10, dtype=np.int32).reshape(2, 1, 5) * 7 - 20})
    elems = np.array([[1, 2, 3], [0, 0, -1], [1, 2, 3]], np.int64)[: 2 if reduction == "none" else 3]
    _scatter_check(node, {"x": x, "i": elems, "u": np.array([100, -5, 9], np.int32)[: len(elems)]})


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_writes_each_batch_entry_at_its_index(mode):
    """A KV cache [2, 3, 8, 4] updated with 3 positions at write indices 2 and 6 (6 wraps
    around in circular mode; linear gets 4 so that it stays inside)."""
    cache, update = _f32(2, 3, 8, 4), _f32(2, 3, 3, 4)
    w = np.array([2, 6 if mode == "circular" else 4], np.int64)
    node = helper.make_node("TensorScatter", ["cache", "update", "w"], ["y"], mode=mode)
    model = _model([node], [helper.make_tensor_value_info("cache", TensorProto.FLOAT, [2, 3, 8, 4]),
                            helper.make_tensor_value_info("update", TensorProto.FLOAT, [2, 3, 3, 4]),
                            helper.make_tensor_value_info("w", TensorProto.INT64, [2])], [_out("y", 4)], opset=24)
    (ours,) = run_module(import_onnx(model), {"cache": cache, "update": update, "w": w})
    want = cache.copy()
    for b in range(2):
        for i in range(3):
            want[b, :, (w[b] + i) % 8] = update[b, :, i]
    np.testing.assert_array_equal(ours, want)


@pytest.mark.parametrize("batch_dims, indices", [
    (0, np.array([[[1, -1], [0, 2]], [[2, 0], [1, 1]]], np.int64)),  # element tuples into [3, 4, 5]: rows of 5
    (0, np.array([[2], [0], [-1]], np.int64)),                      # whole [4, 5] slices
    (1, np.array([[[1, 3]], [[0, 0]], [[3, 4]]], np.int64)),        # per batch entry: elements of [4, 5]
])
def test_gather_nd_matches_onnxruntime(batch_dims, indices):
    x = _f32(3, 4, 5)
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)
    out_rank = indices.ndim - 1 + x.ndim - indices.shape[-1] - batch_dims
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5]),
                            helper.make_tensor_value_info("i", TensorProto.INT64, list(indices.shape))],
                   [_out("y", out_rank)])
    (ours,) = run_module(import_onnx(model), {"x": x, "i": indices})
    (ref,) = _ort(model, {"x": x, "i": indices})
    np.testing.assert_array_equal(ours, ref)
    assert "graph.gather" in str(import_onnx(model))


@pytest.mark.parametrize("op, dtype, exclusive, reverse", [
    ("CumProd", np.float32, 0, 0), ("CumProd", np.float32, 1, 1), ("CumProd", np.int32, 1, 0),
    ("CumSum", np.int64, 0, 1), ("CumSum", np.int32, 1, 0),
])
def test_cumulative_products_and_integer_sums(op, dtype, exclusive, reverse):
    """CumProd, and integer CumSum (no matmul: where + reduce), along axis 1 of [3, 6, 2],
    against numpy's sequential cumprod / cumsum."""
    rng = np.random.default_rng(9)
    x = (rng.integers(-3, 4, (3, 6, 2)) if dtype != np.float32 else rng.uniform(0.5, 1.5, (3, 6, 2))).astype(dtype)
    node = helper.make_node(op, ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    model = _model([node], [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [3, 6, 2])],
                   [_out("y", 3, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))],
                   [_init("axis", np.array(1, np.int64))], opset=26 if op == "CumProd" else 18)
    (ours,) = run_module(import_onnx(model), {"x": x})
    xr = x[:, ::-1] if reverse else x
    acc = (np.cumprod if op == "CumProd" else np.cumsum)(xr, axis=1, dtype=dtype)
    if exclusive:
        acc = np.concatenate([np.full_like(acc[:, :1], 1 if op == "CumProd" else 0), acc[:, :-1]], axis=1)
    want = acc[:, ::-1] if reverse else acc
    assert ours.dtype == want.dtype
    np.testing.assert_array_equal(ours, want)


@pytest.mark.parametrize("op, attrs", [
    ("MaxPool", dict(kernel_shape=[2, 3, 3], strides=[1, 2, 2], pads=[1, 1, 0, 0, 1, 1], dilations=[2, 1, 1])),
    ("MaxPool", dict(kernel_shape=[3, 2, 2], strides=[2, 2, 1], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3, 2], strides=[2, 1, 2], pads=[1, 0, 1, 1, 1, 0], count_include_pad=0)),
    ("AveragePool", dict(kernel_shape=[2, 2, 3], strides=[1, 2, 1], pads=[0, 1, 1, 1, 0, 1], count_include_pad=1, ceil_mode=1)),
    ("LpPool", dict(kernel_shape=[2, 3, 2], strides=[2, 1, 1], pads=[1, 1, 0, 0, 1, 1], p=2)),
])
def test_3d_pooling_matches_onnxruntime(op, attrs):
    """3-D windows as a 2-D pool over (H, W) then one over D: max (with dilation and
    ceil_mode), average (padding counted and not) and Lp."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 7, 8, 9])
    model = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [x], [_out("y", 5)])
    _check_against_ort(model, {"x": _f32(2, 3, 7, 8, 9)}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], pads=[2, 0, 2, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[2, 2, 2, 2], count_include_pad=0)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 1], pads=[2, 2, 1, 2], count_include_pad=1)),
    ("LpPool", dict(kernel_shape=[3, 3], pads=[2, 2, 2, 2], p=3)),
])
def test_pooling_with_padding_beyond_half_the_kernel(op, attrs):
    """An explicit graph.pad first (-inf for max, 0 for averages), an average that must not
    count it scaled by its compile-time count ratio."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 5])
    model = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [x], [_out("y", 4)])
    _check_against_ort(model, {"x": _f32(1, 2, 6, 5)}, rtol=1e-5, atol=1e-6)
    assert "graph.pad" in str(import_onnx(model))


@pytest.mark.parametrize("op, attrs", [
    ("AveragePool", dict(kernel_shape=[3, 2], dilations=[2, 3])),
    ("AveragePool", dict(kernel_shape=[3, 3], dilations=[2, 2], strides=[2, 1], pads=[1, 2, 2, 1], count_include_pad=0)),
    ("AveragePool", dict(kernel_shape=[3, 3], dilations=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], dilations=[2, 2], strides=[3, 3], pads=[1, 1, 1, 1], ceil_mode=1)),
    ("LpPool", dict(kernel_shape=[2, 3], dilations=[3, 2], pads=[1, 0, 1, 2], p=2)),
])
def test_dilated_average_and_lp_pooling_match_onnxruntime(op, attrs):
    """The sum of one strided slice per tap of the zero-padded input times a compile-time
    1 / count per position (graph.avg_pool2d takes no dilation)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 11, 10])
    model = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [x], [_out("y", 4)], opset=19)
    _check_against_ort(model, {"x": _f32(1, 2, 11, 10)}, rtol=1e-5, atol=1e-6)
    text = str(import_onnx(model))
    assert "graph.slice" in text and "graph.avg_pool2d" not in text


def test_scatter_with_mismatched_updates_is_one_error():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [2, 1])
    u = helper.make_tensor_value_info("u", TensorProto.FLOAT, [2, 4])
    model = _model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="snd")], [x, i, u], [_out("y", 2)])
    with pytest.raises(ModelImportError, match=r"ScatterND node 'snd': the updates must have shape \[2, 5\]"):
        import_onnx(model)


def test_shape_arithmetic_is_folded_to_static_attributes():
    # y = reshape(x, [shape(x)[0], -1]) then slice/expand/pad driven by shapes
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = _out("y", 2)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Slice", ["r", "st", "en", "ax", "sp"], ["sl"]),
        helper.make_node("Pad", ["sl", "pads"], ["pd"], mode="constant"),
        helper.make_node("ReduceSum", ["pd", "axes1"], ["y"], keepdims=1),
    ]
    inits = [
        _init("zero", np.array(0, np.int64)), _init("axes0", np.array([0], np.int64)),
        _init("minus1", np.array([-1], np.int64)),
        _init("st", np.array([-1, 100], np.int64)), _init("en", np.array([-100, -1000], np.int64)),
        _init("ax", np.array([1, 0], np.int64)), _init("sp", np.array([-2, -1], np.int64)),
        _init("pads", np.array([1, 0, 0, 2], np.int64)), _init("axes1", np.array([1], np.int64)),
    ]
    model = _model(nodes, [x], [y], inits, opset=18)
    _check_against_ort(model, {"x": _f32(2, 3, 4)})
    text = str(infer.import_model(model))
    import re

    assert set(re.findall(r"= graph\.(\w+)", text)) == {"reshape", "slice", "pad", "reduce_sum"}


def test_old_opset_forms_and_integer_ops():
    # Softmax-11 flattens at `axis`; Reduce axes as attribute; Split attribute.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    outs = [_out("sm", 3), _out("rs", 1), _out("a", 3), _out("b", 3)]
    nodes = [
        helper.make_node("Softmax", ["x"], ["sm"], axis=1),
        helper.make_node("ReduceMean", ["x"], ["rs"], axes=[0, 2], keepdims=0),
        helper.make_node("Split", ["x"], ["a", "b"], axis=2, split=[1, 3]),
    ]
    model = _model(nodes, [x], outs, opset=11)
    _check_against_ort(model, {"x": _f32(2, 3, 4)})


def test_big_weights_are_left_out_of_the_opset_conversion_and_put_back():
    # the converter and shape inference run without the bytes of initializers of 4 KiB or more
    # (onnx_import._BulkData): the imported weights are the model's, the int64 axes stay
    from infer.frontend.onnx_import import _BulkData

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("ReduceMean", ["h"], ["y"], axes=[1], keepdims=1)]  # axes: an input from opset 18
    w = _f32(64, 64)
    model = _model(nodes, [x], [_out("y", 2)], [_init("w", w)], opset=11)
    _check_against_ort(model, {"x": _f32(2, 64)})
    bulk = _BulkData.take(model)
    assert list(bulk.data) == ["w"] and model.graph.initializer[0].raw_data == b""
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    changed.graph.initializer[0].dims[:] = [32, 128]
    assert not bulk.put_back(changed) and changed.graph.initializer[0].raw_data == b""  # not the same tensor
    assert bulk.put_back(model)
    np.testing.assert_array_equal(numpy_helper.to_array(model.graph.initializer[0]), w)


def test_input_shapes_make_dynamic_dims_static():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = _out("y", 2)
    model = _model([helper.make_node("Sigmoid", ["x"], ["y"])], [x], [y])
    with pytest.raises(ModelImportError, match=r"input 'x' has dynamic dimension\(s\) batch"):
        import_onnx(model)
    module = import_onnx(model, input_shapes={"x": (3, 8)})
    xs = _f32(3, 8)
    np.testing.assert_allclose(run_module(module, {"x": xs})[0], 1 / (1 + np.exp(-xs)), rtol=1e-6)
    with pytest.raises(ModelImportError, match="dimension 1 = 8"):
        import_onnx(model, input_shapes={"x": (3, 9)})
    with pytest.raises(ModelImportError, match="unknown input"):
        import_onnx(model, input_shapes={"nope": (1,)})


@pytest.mark.parametrize(
    "declared, message",
    [
        (helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5]),
         r"graph output 'y': is declared with shape \[2, 5\] but the graph computes \[2, 4\] \(dimension 1: 5 against 4\)"),
        (helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 1]),
         r"graph output 'y': is declared with rank 3 but the graph computes shape \[2, 4\] \(rank 2\)"),
        (helper.make_tensor_value_info("y", TensorProto.INT64, [2, 4]),
         r"graph output 'y': is declared INT64 but the graph computes float32"),
    ],
)
def test_a_declared_output_that_disagrees_with_the_graph_is_refused(declared, message):
    """Taking the inferred type silently would hand back another tensor than the model promises."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [x], [declared])
    with pytest.raises(ModelImportError, match=message):
        import_onnx(model)


def test_the_declaration_is_the_files_not_onnx_shape_inference():
    """ONNX's shape inference gives a ceil_mode pool whose last window starts in the padding one
    more row (5) than the spec, onnxruntime and the graph op (4): the symbolic dims the file
    declares are not checked against that."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 11, 10])
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1], ceil_mode=1)
    model = _model([node], [x], [_out("y", 4)])
    inferred = onnx.shape_inference.infer_shapes(model).graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in inferred] == [1, 2, 5, 4]
    _check_against_ort(model, {"x": _f32(1, 2, 11, 10)})


def test_a_declared_output_with_symbolic_or_unknown_dims_is_taken():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", None])
    module = import_onnx(_model([helper.make_node("Relu", ["x"], ["y"])], [x], [y]))
    xs = _f32(2, 4)
    np.testing.assert_array_equal(run_module(module, {"x": xs})[0], np.maximum(xs, 0))


def test_names_are_preserved_and_import_model_reads_files(tmp_path: Path):
    x = helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [2, 2])
    y = _out("out:0", 2)
    model = _model([helper.make_node("Neg", ["input.1"], ["out:0"])], [x], [y])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    m = infer.import_model(path)
    text = str(m)
    assert '"input.1"' in text and '"out:0"' in text
    np.testing.assert_array_equal(m.run({"input.1": np.ones((2, 2), np.float32)})[0], -np.ones((2, 2)))


# --------------------------------------------------------------------------
# Models exported from torch
# --------------------------------------------------------------------------

torch = pytest.importorskip("torch")


def _export(module, args, names_in, names_out, opset=17) -> onnx.ModelProto:
    f = io.BytesIO()
    module.eval()
    with warnings.catch_warnings():
        # The TorchScript exporter (dynamo=False) is deprecated; it needs no onnxscript.
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, f, dynamo=False, input_names=names_in, output_names=names_out, opset_version=opset)
    return onnx.load_model_from_string(f.getvalue())


def test_torch_mlp():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8), torch.nn.LogSoftmax(-1))
    x = torch.randn(3, 16)
    model = _export(m, (x,), ["x"], ["y"])
    _check_against_ort(model, {"x": x.numpy()})


def test_torch_cnn():
    torch.manual_seed(0)

    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, groups=2)
            self.pool = torch.nn.MaxPool2d(2, ceil_mode=True)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            x = torch.nn.functional.relu6(self.bn(self.conv(x)))
            x = torch.nn.functional.hardswish(self.conv2(x))
            x = self.pool(x)
            x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
            return self.fc(x)

    m = CNN()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 3, 20, 20)
    _check_against_ort(_export(m, (x,), ["x"], ["logits"]), {"x": x.numpy()})


def test_torch_transformer_block():
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self, d=32, heads=4):
            super().__init__()
            self.heads = heads
            self.ln1 = torch.nn.LayerNorm(d)
            self.qkv = torch.nn.Linear(d, 3 * d)
            self.proj = torch.nn.Linear(d, d)
            self.ln2 = torch.nn.LayerNorm(d)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(4 * d, d))

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
            mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            y = (att @ v).transpose(1, 2).reshape(b, s, d)
            x = x + self.proj(y)
            return x + self.mlp(self.ln2(x))

    x = torch.randn(2, 6, 32)
    model = _export(Block(), (x,), ["x"], ["y"])
    _check_against_ort(model, {"x": x.numpy()}, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


def _tiny() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = _out("y", 2)
    return _model([helper.make_node("Relu", ["x"], ["y"])], [x], [y])


def test_truncated_protobuf(tmp_path: Path):
    path = tmp_path / "model.onnx"
    model = _tiny()
    data = model.SerializeToString()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelImportError) as e:
        import_onnx(path)
    msg = str(e.value)
    assert msg.startswith("model.onnx: not a valid ONNX model: ") and "\n" not in msg


def test_garbage_file(tmp_path: Path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x00\xffnot a model at all\x13\x37" * 5)
    with pytest.raises(ModelImportError, match="^model.onnx: not a valid ONNX model: ") as e:
        infer.import_model(path)
    assert "\n" not in str(e.value)


def test_checker_errors_alike_from_the_file_and_from_a_model_proto(tmp_path: Path):
    """A file whose tensors all live in it is checked by onnx.checker from the file (not a
    serialisation of the parsed model): the same one-line error as for the ModelProto."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    w = _init("w", _f32(8, 8))
    w.raw_data = w.raw_data[:10]  # shorter than its 8 x 8 floats
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [_out("y", 2)], [w])
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    messages = []
    for source in (path, model):
        with pytest.raises(ModelImportError) as e:
            import_onnx(source)
        messages.append(str(e.value).split(": ", 1)[1])
    assert messages[0] == messages[1] and "too small" in messages[0] and "\n" not in messages[0]


def _external_model(tmp_path: Path, location: str) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = _out("y", 2)
    w = _init("secret_w", _f32(8, 8))
    model = _model([helper.make_node("MatMul", ["x", "secret_w"], ["y"])], [x], [y], [w])
    from onnx.external_data_helper import set_external_data

    tensor = model.graph.initializer[0]
    raw = tensor.raw_data
    set_external_data(tensor, location=location, offset=0, length=len(raw))
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path, raw


def test_external_data_inside_folder_loads(tmp_path: Path):
    path, raw = _external_model(tmp_path, "weights.bin")
    (path.parent / "weights.bin").write_bytes(raw)
    module = import_onnx(path)
    x = _f32(4, 8)
    w = np.frombuffer(raw, np.float32).reshape(8, 8)
    np.testing.assert_allclose(run_module(module, [x])[0], x @ w, rtol=1e-5)


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_external_data_escaping_the_folder(tmp_path: Path, kind: str):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"\0" * 256)
    location = {"dotdot": "../outside.bin", "absolute": str(outside), "symlink": "link.bin"}[kind]
    path, _ = _external_model(tmp_path, location)
    if kind == "symlink":
        os.symlink(outside, path.parent / "link.bin")
    with pytest.raises(ModelImportError) as e:
        import_onnx(path)
    msg = str(e.value)
    assert "secret_w" in msg and location in msg
    assert {"dotdot": "escapes", "absolute": "absolute", "symlink": "outside the model's folder"}[kind] in msg


def test_unknown_op_names_op_type_and_node():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = _out("y", 2)
    model = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Unique", ["r"], ["y"], name="my_unique")],
                   [x], [y])
    with pytest.raises(ModelImportError, match=r"Unique node 'my_unique': op type 'Unique' is not supported"):
        import_onnx(model)


def test_list_unsupported_collects_every_problem():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = _out("y", 4)
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Unique", ["a"], ["b"], name="uniq"),
        helper.make_node("Sigmoid", ["b"], ["c"]),  # downstream of a problem: not reported
        helper.make_node("Pad", ["a", "pads"], ["d"], mode="mirror_universe", name="weird_pad"),
        helper.make_node("MaxPool", ["x"], ["e"], name="odd_pool", kernel_shape=[1, 1], storage_order=1),
        helper.make_node("Sum", ["c", "d", "e"], ["y"]),
    ]
    model = _model(nodes, [x], [y], [_init("pads", np.zeros(8, np.int64))], opset=18)
    with pytest.raises(ModelImportError) as e:
        import_onnx(model, list_unsupported=True)
    msg = str(e.value)
    assert "3 problem(s)" in msg
    assert "Unique node 'uniq': op type 'Unique' is not supported" in msg
    assert "Pad node 'weird_pad': mode 'mirror_universe' is not supported" in msg
    assert "MaxPool node 'odd_pool': storage_order = 1 is not supported" in msg
    assert "Sigmoid" not in msg
    with pytest.raises(ModelImportError, match="Unique") as e1:
        import_onnx(model)
    assert "problem(s)" not in str(e1.value)


def test_runtime_shape_input_is_reported():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    s = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = _out("y", 2)
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="rs")], [x, s], [y])
    with pytest.raises(ModelImportError, match="Reshape node 'rs'.*graph input 'shape'.*known at import time"):
        import_onnx(model)


def test_unsupported_element_type_is_reported():
    x = helper.make_tensor_value_info("x", TensorProto.STRING, [2])
    y = _out("y", 1, TensorProto.STRING)
    model = _model([helper.make_node("Identity", ["x"], ["y"])], [x], [y])
    with pytest.raises(ModelImportError, match="graph input 'x'.*STRING"):
        import_onnx(model)


@pytest.mark.parametrize("what", ["opset", "ir_version"])
def test_model_newer_than_the_importer_is_refused(what: str):
    from infer.frontend.onnx_import import TARGET_OPSET

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    current = _model(nodes, [x], [y], opset=TARGET_OPSET)
    np.testing.assert_array_equal(run_module(import_onnx(current), [np.array([-1.0, 2.0], np.float32)])[0], [0.0, 2.0])
    newer = _model(nodes, [x], [y], opset=TARGET_OPSET + (what == "opset"))
    if what == "ir_version":
        newer.ir_version = onnx.IR_VERSION + 1
        message = rf"IR version is {onnx.IR_VERSION + 1}, newer than this importer reads \(up to {onnx.IR_VERSION}"
    else:
        message = rf"opset {TARGET_OPSET + 1}, newer than this importer knows \(opsets 1 to {TARGET_OPSET}\)"
    with pytest.raises(ModelImportError, match=message):
        import_onnx(newer)


def _if_model(condition_nodes, condition_inputs=()):
    then_graph = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [_out("t", 2)])
    scale = numpy_helper.from_array(np.array(3.0, np.float32), "three")
    else_graph = helper.make_graph([helper.make_node("Mul", ["x", "three"], ["e"])], "else", [], [_out("e", 2)],
                                   initializer=[scale])
    nodes = [*condition_nodes, helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph,
                                                name="branch")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])
    return _model(nodes, [x, *condition_inputs], [_out("y", 2)], opset=17)


@pytest.mark.parametrize("width, branch", [(5, "then"), (4, "else")])
def test_an_if_whose_condition_is_known_at_import_is_its_branch(width, branch):
    """The condition a shape check computes folds at import; the branch taken is inlined (its
    nodes read the enclosing graph's x, its initializer comes along)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"], start=1),
             helper.make_node("Equal", ["shape", "width"], ["eq"]),
             helper.make_node("Squeeze", ["eq"], ["cond"])]
    model = _if_model(nodes)
    model.graph.initializer.append(numpy_helper.from_array(np.array([width], np.int64), "width"))
    xs = _f32(2, 5)
    _check_against_ort(model, {"x": xs})
    text = str(import_onnx(model))
    assert ("graph.relu" in text) == (branch == "then") and ("graph.mul" in text) == (branch == "else")


def test_an_if_on_a_run_time_condition_is_one_error():
    cond = helper.make_tensor_value_info("flag", TensorProto.FLOAT, [1])
    model = _if_model([helper.make_node("Greater", ["flag", "zero"], ["gt"]), helper.make_node("Squeeze", ["gt"], ["cond"])],
                      [cond])
    model.graph.initializer.append(numpy_helper.from_array(np.array([0.0], np.float32), "zero"))
    with pytest.raises(ModelImportError, match=r"If node 'branch': the condition \('cond'\) is computed at run time"):
        import_onnx(model)


@pytest.mark.parametrize("target, axes", [([4, 9], [1, 2]), ([3, 2, 7], None), ([6], [-1])])
def test_center_crop_pad_is_onnxs(target, axes):
    """Crop where the target is shorter, zero-pad where it is longer, centred (odd differences:
    the extra element at the end), checked against onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    attrs = {} if axes is None else {"axes": axes}
    node = helper.make_node("CenterCropPad", ["x", "shape"], ["y"], **attrs)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7, 4])
    model = _model([node], [x], [_out("y", 3)], [_init("shape", np.array(target, np.int64))], opset=18)
    xs = _f32(3, 7, 4)
    (want,) = ReferenceEvaluator(model).run(None, {"x": xs})
    np.testing.assert_array_equal(run_module(import_onnx(model), {"x": xs})[0], want)


def _sequence_model():
    """SplitToSequence in every form (a chunk size with a shorter last piece, sizes, one element
    each without the axis), SequenceAt (negative positions), SequenceConstruct / Insert / Erase /
    Length, and ConcatFromSequence along an axis and along a new one."""
    i64 = lambda name, v: _init(name, np.asarray(v, np.int64))  # noqa: E731
    nodes = [
        helper.make_node("SplitToSequence", ["x", "three"], ["chunks"], axis=1),  # 3, 3, 1
        helper.make_node("SplitToSequence", ["x", "sizes"], ["parts"], axis=2),  # 1, 4
        helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
        helper.make_node("SequenceAt", ["chunks", "minus_one"], ["last_chunk"]),
        helper.make_node("SequenceAt", ["parts", "one"], ["second_part"]),
        helper.make_node("SequenceConstruct", ["last_chunk", "last_chunk"], ["pair"]),
        helper.make_node("SequenceInsert", ["rows", "first_row", "zero"], ["rows2"]),
        helper.make_node("SequenceAt", ["rows", "zero"], ["first_row"]),
        helper.make_node("SequenceErase", ["rows2"], ["rows3"]),
        helper.make_node("SequenceLength", ["rows3"], ["count"]),
        helper.make_node("ConcatFromSequence", ["pair"], ["joined"], axis=1),
        helper.make_node("ConcatFromSequence", ["rows3"], ["stacked"], axis=-1, new_axis=1),
    ]
    nodes.insert(6, nodes.pop(7))  # first_row before its use
    inits = [i64("three", 3), i64("sizes", [1, 4]), i64("minus_one", -1), i64("one", 1), i64("zero", 0)]
    outs = [_out("joined", 3), _out("second_part", 3), _out("stacked", 3), _out("count", 0, TensorProto.INT64)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, 5])], outs, inits)


def test_sequences_match_onnxruntime():
    model = _sequence_model()
    feeds = {"x": _f32(2, 7, 5)}
    _check_against_ort(model, feeds, rtol=0, atol=0)
    exe = infer.compile(import_onnx(model), target="edge")
    for ours, ref in zip(exe.run([feeds["x"]], check_races=True), _ort(model, feeds), strict=True):
        np.testing.assert_array_equal(ours, ref)


def test_sequence_output_and_tile_of_matrix_repeats_are_errors():
    seq = _model([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0)],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                 [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)])
    with pytest.raises(ModelImportError, match="graph output 's': is a sequence; only tensors"):
        import_onnx(seq)
    tile = _model([helper.make_node("Tile", ["x", "r"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                  [_out("y", 1)], [_init("r", np.asarray([[3]], np.int64))])
    with pytest.raises(ModelImportError, match=r"Tile node .*the repeats must be a 1-D tensor of 1 counts"):
        import_onnx(tile)
