"""Non-f32 tensors on the compiled path (passes/graph_to_tile/storage.py, runtime/boundary.py):
integer, bool and runtime-condition programs compiled for the accelerator, run on the
simulator and compared with the graph interpreter (the golden model) on the same inputs,
output dtypes included."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects.ir_io import IRError, make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.testing import run_entry
from infer.tools.driver import compile as compile_model

CTX = make_context()
RNG = np.random.default_rng(16)


def module(text: str):
    m = parse_ir(CTX, text, "test.mlir")
    verify_module(m)
    attach_weights(m, WeightStore())
    return m


def check(text: str, inputs, target: str = "edge", tol: float = 1e-5):
    m = module(text)
    refs = run_entry(m, inputs)
    outs = compile_model(m, target=target).run(inputs)
    for out, ref in zip(outs, refs, strict=True):
        assert out.dtype == ref.dtype and out.shape == ref.shape
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    return outs


def test_where_on_a_runtime_comparison():
    x, y = RNG.standard_normal(40).astype(np.float32), RNG.standard_normal(40).astype(np.float32)
    check("""func.func @main(%x: tensor<40xf32>, %y: tensor<40xf32>) -> (tensor<40xf32>, tensor<40xi1>) {
  %c = graph.less %x, %y : (tensor<40xf32>, tensor<40xf32>) -> tensor<40xi1>
  %a = graph.where %c, %x, %y : (tensor<40xi1>, tensor<40xf32>, tensor<40xf32>) -> tensor<40xf32>
  func.return %a, %c : tensor<40xf32>, tensor<40xi1>
}""", [x, y])


def test_i64_cast_to_bool_feeding_a_where():
    x = RNG.standard_normal(8).astype(np.float32)
    i = np.array([0, 3, -1, 0, 7, 0, 1, 2], np.int64)
    check("""func.func @main(%x: tensor<8xf32>, %i: tensor<8xi64>) -> tensor<8xf32> {
  %b = graph.cast %i : (tensor<8xi64>) -> tensor<8xi1>
  %z = graph.constant dense<0.0> : tensor<8xf32>
  %a = graph.where %b, %x, %z : (tensor<8xi1>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  func.return %a : tensor<8xf32>
}""", [x, i])


@pytest.mark.parametrize("target", ["edge", "server"])
def test_gather_runtime_indices_on_an_inner_axis(target):
    x = RNG.standard_normal((3, 5, 4)).astype(np.float32)
    check("""func.func @main(%x: tensor<3x5x4xf32>, %i: tensor<6xi64>) -> tensor<3x6x4xf32> {
  %a = graph.gather %x, %i {axis = 1 : i64} : (tensor<3x5x4xf32>, tensor<6xi64>) -> tensor<3x6x4xf32>
  func.return %a : tensor<3x6x4xf32>
}""", [x, np.array([4, 0, 2, 2, 1, 3], np.int64)], target)


def test_integer_arithmetic_and_narrow_outputs():
    a = RNG.integers(-1000, 1000, 24).astype(np.int32)
    b = RNG.integers(1, 50, 24).astype(np.int32) * RNG.choice([-1, 1], 24).astype(np.int32)
    check("""func.func @main(%a: tensor<24xi32>, %b: tensor<24xi32>) -> (tensor<24xi32>, tensor<24xi32>, tensor<24xi32>, tensor<24xi8>) {
  %s = graph.add %a, %b : (tensor<24xi32>, tensor<24xi32>) -> tensor<24xi32>
  %d = graph.div %a, %b : (tensor<24xi32>, tensor<24xi32>) -> tensor<24xi32>
  %m = graph.mod %a, %b : (tensor<24xi32>, tensor<24xi32>) -> tensor<24xi32>
  %n = graph.cast %s : (tensor<24xi32>) -> tensor<24xi8>
  func.return %s, %d, %m, %n : tensor<24xi32>, tensor<24xi32>, tensor<24xi32>, tensor<24xi8>
}""", [a, b], tol=0)


def test_float_to_integer_cast_truncates():
    x = np.array([0.5, -0.5, 1.5, -2.5, 2.0, -3.7, 1e6 + 0.25, -7.99], np.float32)
    check("""func.func @main(%x: tensor<8xf32>) -> tensor<8xi32> {
  %i = graph.cast %x : (tensor<8xf32>) -> tensor<8xi32>
  func.return %i : tensor<8xi32>
}""", [x], tol=0)


def test_argmax_reduce_prod_and_log_softmax_on_an_outer_axis():
    x = RNG.standard_normal((4, 6, 5)).astype(np.float32)
    x[1, 2, :] = x[1, 4, :]  # ties: the first index wins
    check("""func.func @main(%x: tensor<4x6x5xf32>) -> (tensor<4x1x5xi64>, tensor<4x5xf32>, tensor<4x6x5xf32>) {
  %a = graph.argmax %x {axes = array<i64: 1>, keepdims = true} : (tensor<4x6x5xf32>) -> tensor<4x1x5xi64>
  %p = graph.reduce_prod %x {axes = array<i64: 1>, keepdims = false} : (tensor<4x6x5xf32>) -> tensor<4x5xf32>
  %l = graph.log_softmax %x {axis = 1 : i64} : (tensor<4x6x5xf32>) -> tensor<4x6x5xf32>
  func.return %a, %p, %l : tensor<4x1x5xi64>, tensor<4x5xf32>, tensor<4x6x5xf32>
}""", [x], tol=1e-5)


def test_integer_input_beyond_exact_range_is_a_clear_error():
    m = module("""func.func @main(%a: tensor<2xi32>) -> tensor<2xi32> {
  %s = graph.add %a, %a : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
  func.return %s : tensor<2xi32>
}""")
    from infer.runtime.executable import RunError

    with pytest.raises(RunError, match=r"input '.*': int32 value 16777217 is outside \[-2\^24, 2\^24\]"):
        compile_model(m).run([np.array([1, (1 << 24) + 1], np.int32)])


def test_f64_used_as_f64_is_refused_with_its_location():
    m = module("""func.func @main(%x: tensor<4xf64>) -> tensor<4xf64> {
  %y = graph.add %x, %x : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
  func.return %y : tensor<4xf64>
}""")
    with pytest.raises(IRError, match=r"test.mlir:1:\d+: error: .*f64 tensors are supported only at the boundary"):
        compile_model(m)


def test_a_storage_only_argument_is_refused_with_its_location():
    m = module("""func.func @main(%x: tensor<4xf8E4M3FN>) -> tensor<4xf32> {
  %y = graph.cast %x : (tensor<4xf8E4M3FN>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}""")
    with pytest.raises(IRError, match=r"test.mlir:1:\d+: error: .*argument #0 is tensor<4xf8E4M3FN>: f8E4M3FN tensors "
                                      r"are not supported by the NPU lowering"):
        compile_model(m)
