"""target/blas.py: the simulator and the interpreters compute their products on one BLAS
thread, because the bits of a product depend on the thread count (docs in the module)."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info

from infer.target.blas import one_blas_thread


def blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_one_thread_inside_nested_entries_and_restored_after():
    before = blas_threads()
    assert before  # numpy's OpenBLAS is visible to threadpoolctl
    with one_blas_thread():
        assert blas_threads() == [1] * len(before)
        with one_blas_thread():  # a nested entry (a function calling another)
            assert blas_threads() == [1] * len(before)
        assert blas_threads() == [1] * len(before)  # the inner exit keeps the outer limit
    assert blas_threads() == before


def test_interpreter_products_run_on_one_thread(monkeypatch):
    """The tile and graph interpreters' kernels run inside one_blas_thread (runner.call_function)."""
    from infer.dialects.graph_interpreter import nn

    seen: list[list[int]] = []
    matmul = nn.np.matmul

    def spy(a, b, *args, **kwargs):
        seen.append(blas_threads())
        return matmul(a, b, *args, **kwargs)

    monkeypatch.setattr(nn.np, "matmul", spy)
    from infer.dialects.graph_interpreter import run_module
    from infer.dialects.ir_io import make_context, parse_ir

    text = """func.func @main(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>) -> tensor<4x3xf32> {
  %y = graph.matmul %a, %b : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  func.return %y : tensor<4x3xf32>
}"""
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    b = np.ones((8, 3), np.float32)
    (y,) = run_module(parse_ir(make_context(), text, "mm.mlir"), [a, b])
    np.testing.assert_array_equal(y, a @ b)
    assert seen and all(threads == [1] * len(threads) for threads in seen)
