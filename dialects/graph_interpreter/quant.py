"""Graph-interpreter kernels of quantization: GGUF block dequantization (as llama.cpp computes
it), quantize/dequantize/requantize and the integer kernels (numerics:
`infer.dialects.linear_quant`, docs/quantization.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from infer.dialects import graph as g
from infer.dialects import linear_quant as lq
from infer.dialects.block_quant import dequantize_blocks
from infer.dialects.graph_interpreter.core import (
    bool_of,
    Env,
    int_of,
    kernel_for,
    out_dtype,
    result_type,
)
from infer.dialects.graph_interpreter.nn import window_attrs


@kernel_for(g.DequantizeBlocksOp)
def _dequantize_blocks(op: g.DequantizeBlocksOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    # float32 values as llama.cpp computes them, rounded once to an f16/bf16 result
    # (here, inside the kernel's IEEE error state: a large scale overflows f16 to inf)
    return dequantize_blocks(xs[0], op.format_name).astype(out_dtype(op))

# -- quantization (numerics: infer.dialects.linear_quant) --------------------------------------------


def _opt_axis(op: Any) -> int | None:
    """The normalized `axis` of a quantization op, None when per tensor."""
    if op.axis is None:
        return None
    return int_of(op.axis) % max(len(result_type(op).get_shape()), 1)


@kernel_for(g.QuantizeLinearOp)
def _quantize_linear(op: g.QuantizeLinearOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    zero_point = xs[2] if len(xs) > 2 else None
    return lq.quantize_linear(xs[0], xs[1], zero_point, _opt_axis(op), out_dtype(op))


@kernel_for(g.DequantizeLinearOp)
def _dequantize_linear(op: g.DequantizeLinearOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    zero_point = xs[2] if len(xs) > 2 else None
    return lq.dequantize_linear(xs[0], xs[1], zero_point, _opt_axis(op), out_dtype(op))


@kernel_for(g.RequantizeOp)
def _requantize(op: g.RequantizeOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    return lq.requantize(xs[0], xs[1], int_of(op.zero_point), _opt_axis(op), out_dtype(op))


@kernel_for(g.Conv2dIntegerOp)
def _conv2d_integer(op: g.Conv2dIntegerOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    stride, pad, dil = window_attrs(op)
    bias = xs[2] if len(xs) > 2 else None
    return lq.conv2d_integer(xs[0], xs[1], bias, int_of(op.input_zero_point), int_of(op.weight_zero_point),
                             stride, pad, dil, int_of(op.groups))


@kernel_for(g.LinearIntegerOp)
def _linear_integer(op: g.LinearIntegerOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    bias = xs[2] if len(xs) > 2 else None
    return lq.linear_integer(xs[0], xs[1], bias, int_of(op.input_zero_point), int_of(op.weight_zero_point))


@kernel_for(g.MatmulIntegerOp)
def _matmul_integer(op: g.MatmulIntegerOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    return lq.matmul_integer(xs[0], xs[1], int_of(op.lhs_zero_point), int_of(op.rhs_zero_point),
                             bool_of(op.transpose_a), bool_of(op.transpose_b))
