"""graph-subsample-strided-conv: strided 1x1 convs become slice + stride-1 conv, with the
same results on the reference interpreter; other convs are left alone."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects import graph as g
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_subsample_strided_conv import GraphSubsampleStridedConvPass
from infer.passes.testing import check_pass_preserves_semantics

CTX = make_context()


def conv_module(n, c, h, w, o, stride, groups=1, kernel=1, padding=(0, 0, 0, 0), bias=True):
    oh = (h + padding[0] + padding[2] - kernel) // stride[0] + 1
    ow = (w + padding[1] + padding[3] - kernel) // stride[1] + 1
    b = ", %b" if bias else ""
    bt = f", tensor<{o}xf32>" if bias else ""
    text = f"""func.func @main(%x: tensor<{n}x{c}x{h}x{w}xf32>) -> tensor<{n}x{o}x{oh}x{ow}xf32> {{
  %w = graph.weight @w : tensor<{o}x{c // groups}x{kernel}x{kernel}xf32>
  {"%b = graph.weight @b : tensor<" + str(o) + "xf32>" if bias else ""}
  %y = graph.conv2d %x, %w{b} {{stride = array<i64: {stride[0]}, {stride[1]}>, groups = {groups} : i64, padding = array<i64: {", ".join(map(str, padding))}>}} : (tensor<{n}x{c}x{h}x{w}xf32>, tensor<{o}x{c // groups}x{kernel}x{kernel}xf32>{bt}) -> tensor<{n}x{o}x{oh}x{ow}xf32>
  func.return %y : tensor<{n}x{o}x{oh}x{ow}xf32>
}}"""
    module = parse_ir(CTX, text, "t.mlir")
    verify_module(module)
    rng = np.random.default_rng(0)
    store = WeightStore()
    store.set("w", rng.standard_normal((o, c // groups, kernel, kernel)).astype(np.float32))
    if bias:
        store.set("b", rng.standard_normal(o).astype(np.float32))
    attach_weights(module, store)
    return module


def ops_after(module) -> list[str]:
    m = module.clone()
    GraphSubsampleStridedConvPass().apply(CTX, m)
    return [o.name for o in m.walk() if isinstance(o, (g.SliceOp, g.Conv2dOp))]


@pytest.mark.parametrize(("shape", "stride", "groups", "bias"), [
    ((1, 8, 8, 8, 16), (2, 2), 1, True),
    ((2, 4, 9, 11, 6), (3, 2), 1, False),
    ((1, 8, 7, 7, 8), (2, 2), 2, True),
])
def test_strided_pointwise_conv_becomes_slice_then_conv(shape, stride, groups, bias):
    module = conv_module(*shape, stride, groups=groups, bias=bias)
    assert ops_after(module) == ["graph.slice", "graph.conv2d"]
    check_pass_preserves_semantics(module, GraphSubsampleStridedConvPass(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kwargs", [
    dict(stride=(1, 1)),
    dict(stride=(2, 2), kernel=3, padding=(1, 1, 1, 1)),
    dict(stride=(2, 2), padding=(1, 1, 1, 1)),
])
def test_other_convs_are_left_alone(kwargs):
    module = conv_module(1, 4, 8, 8, 4, **kwargs)
    assert ops_after(module) == ["graph.conv2d"]
