"""A batched graph.matmul whose operands' batch dims broadcast only in part ([1, 2] against
[3, 2], [3, 1] against [1, 2]) compiles to the right products: the partly broadcast operand is
copied to the whole batch first. (The runtime right operand was read as one [K, N] matrix for
every batch entry: silently wrong; the left one was refused.)"""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.dialects.graph_interpreter import run_module
from infer.dialects.ir_io import make_context, parse_ir, verify_module


def matmul_module(a_shape, b_shape):
    out = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2])) + (a_shape[-2], b_shape[-1])
    t = lambda s: "tensor<" + "x".join(map(str, s)) + "xf32>"  # noqa: E731
    text = f"""func.func @main(%a: {t(a_shape)}, %b: {t(b_shape)}) -> {t(out)} {{
  %c = graph.matmul %a, %b : ({t(a_shape)}, {t(b_shape)}) -> {t(out)}
  func.return %c : {t(out)}
}}"""
    m = parse_ir(make_context(), text, "bcast.mlir")
    verify_module(m)
    return m


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("a_shape, b_shape", [
    ((3, 2, 3, 4), (1, 2, 4, 5)),   # the right operand broadcast along the first batch dim
    ((3, 1, 3, 4), (1, 2, 4, 2)),   # both, as ONNX's test_matmul_bcast
    ((2, 1, 5, 8), (2, 3, 8, 6)),   # the left operand
    ((4, 3, 6), (2, 1, 6, 3)),      # ranks differ
])
def test_partly_broadcast_batches_multiply_right(target, a_shape, b_shape):
    m = matmul_module(a_shape, b_shape)
    rng = np.random.default_rng(len(a_shape) + a_shape[0])
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    (want,) = run_module(m.clone(), [a, b])
    np.testing.assert_allclose(want, np.matmul(a, b), rtol=1e-6, atol=1e-6)
    (y,) = infer.compile(m, target=target).run([a, b], check_races=True)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
