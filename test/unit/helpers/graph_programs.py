"""Small graph-IR programs shared by the code-generation tests."""

from __future__ import annotations

import numpy as np


def linear_chain(M: int, K: int, N1: int, N2: int) -> tuple[str, dict[str, np.ndarray]]:
    """x [M, K] -> linear (bias) -> relu -> linear (bias): two GEMM kernels in a row, the second
    reading the first's result; (IR text, weights)."""
    text = f"""
func.func @main(%x: tensor<{M}x{K}xf32> {{graph.name = "x"}}) -> (tensor<{M}x{N2}xf32> {{graph.name = "y"}}) {{
  %w1 = graph.weight @w1 : tensor<{N1}x{K}xf32>
  %b1 = graph.weight @b1 : tensor<{N1}xf32>
  %h = graph.linear %x, %w1, %b1 : (tensor<{M}x{K}xf32>, tensor<{N1}x{K}xf32>, tensor<{N1}xf32>) -> tensor<{M}x{N1}xf32>
  %r = graph.relu %h : (tensor<{M}x{N1}xf32>) -> tensor<{M}x{N1}xf32>
  %w2 = graph.weight @w2 : tensor<{N2}x{N1}xf32>
  %b2 = graph.weight @b2 : tensor<{N2}xf32>
  %y = graph.linear %r, %w2, %b2 : (tensor<{M}x{N1}xf32>, tensor<{N2}x{N1}xf32>, tensor<{N2}xf32>) -> tensor<{M}x{N2}xf32>
  func.return %y : tensor<{M}x{N2}xf32>
}}
"""
    rng = np.random.default_rng(3)
    weights = {"w1": (rng.standard_normal((N1, K)) * 0.1).astype(np.float32),
               "b1": rng.standard_normal(N1).astype(np.float32),
               "w2": (rng.standard_normal((N2, N1)) * 0.1).astype(np.float32),
               "b2": rng.standard_normal(N2).astype(np.float32)}
    return text, weights
