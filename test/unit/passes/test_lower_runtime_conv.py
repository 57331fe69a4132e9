"""graph-lower-runtime-conv: convolutions whose weight is a function argument become im2col
slices and a matmul with the reference interpreter's results (stride, padding, dilation,
groups, bias, batch); compiled for both configs they match the interpreter with the race
checker on; a compile-time weight keeps its conv2d."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.dialects import graph as g
from infer.dialects.graph_interpreter import run_module
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.passes.graph_lower_runtime_conv import GraphLowerRuntimeConvPass
from infer.passes.testing import check_pass_preserves_semantics

CTX = make_context()


def conv_module(n, c, h, w, o, k, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, bias=True):
    kh, kw = k
    oh = (h + padding[0] + padding[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + padding[1] + padding[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    x, wt, y = f"tensor<{n}x{c}x{h}x{w}xf32>", f"tensor<{o}x{c // groups}x{kh}x{kw}xf32>", f"tensor<{n}x{o}x{oh}x{ow}xf32>"
    b_arg, b_use, b_ty = (f", %b: tensor<{o}xf32>", ", %b", f", tensor<{o}xf32>") if bias else ("", "", "")
    text = f"""func.func @main(%x: {x}, %w: {wt}{b_arg}) -> {y} {{
  %y = graph.conv2d %x, %w{b_use} {{stride = array<i64: {stride[0]}, {stride[1]}>, dilation = array<i64: {dilation[0]}, {dilation[1]}>, groups = {groups} : i64, padding = array<i64: {", ".join(map(str, padding))}>}} : ({x}, {wt}{b_ty}) -> {y}
  func.return %y : {y}
}}"""
    module = parse_ir(CTX, text, "t.mlir")
    verify_module(module)
    rng = np.random.default_rng(sum(k) + groups)
    inputs = [rng.standard_normal((n, c, h, w)).astype(np.float32),
              rng.standard_normal((o, c // groups, kh, kw)).astype(np.float32)]
    if bias:
        inputs.append(rng.standard_normal(o).astype(np.float32))
    return module, inputs


CASES = [
    dict(n=1, c=3, h=7, w=8, o=5, k=(3, 3), padding=(1, 1, 1, 1)),
    dict(n=2, c=4, h=9, w=6, o=6, k=(3, 2), stride=(2, 1), padding=(1, 0, 2, 1), groups=2),
    dict(n=1, c=6, h=10, w=10, o=6, k=(3, 3), dilation=(2, 2), groups=6, bias=False),
    dict(n=1, c=2, h=5, w=5, o=3, k=(1, 1)),
]


@pytest.mark.parametrize("case", CASES)
def test_runtime_weight_conv_becomes_im2col_matmul(case):
    module, inputs = conv_module(**case)
    r = check_pass_preserves_semantics(module, GraphLowerRuntimeConvPass(), inputs=[inputs], rtol=1e-5, atol=1e-5)
    names = [o.name for o in r.module.walk() if isinstance(o, g.GraphOp)]
    assert "graph.conv2d" not in names and "graph.matmul" in names
    assert names.count("graph.slice") == case["k"][0] * case["k"][1]


@pytest.mark.parametrize("target", ["edge", "server"])
def test_runtime_weight_conv_compiles(target):
    module, inputs = conv_module(**CASES[1])
    (want,) = run_module(module.clone(), inputs)
    exe = infer.compile(module, target=target)
    (y,) = exe.run(inputs, check_races=True)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_compile_time_weight_keeps_its_conv():
    text = """func.func @main(%x: tensor<1x2x5x5xf32>) -> tensor<1x3x3x3xf32> {
  %w0 = graph.constant dense<0.25> : tensor<3x2x3x3xf32>
  %w = graph.neg %w0 : (tensor<3x2x3x3xf32>) -> tensor<3x2x3x3xf32>
  %y = graph.conv2d %x, %w : (tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x3x3xf32>
  func.return %y : tensor<1x3x3x3xf32>
}"""
    module = parse_ir(CTX, text, "t.mlir")
    GraphLowerRuntimeConvPass().apply(CTX, module)
    assert [o.name for o in module.walk() if isinstance(o, g.Conv2dOp)] == ["graph.conv2d"]
