"""Graph-interpreter kernels of the neural-network ops: matmul and linear, convolution and
pooling, batch/layer/RMS normalization, softmax."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided
from xdsl.ir import Operation

from infer.dialects import graph as g
from infer.dialects.graph_interpreter.core import (
    bool_of,
    Env,
    float_of,
    int_of,
    InterpreterError,
    is_float_dtype,
    kernel_for,
    scalar,
    upcast,
)
from infer.dialects.graph_interpreter.structure import int_mean


# -- linear algebra ------------------------------------------------------------------


@kernel_for(g.MatmulOp)
def _matmul(op: g.MatmulOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    a, b = upcast(xs[0]), upcast(xs[1])
    if bool_of(op.transpose_a):
        a = np.swapaxes(a, -1, -2)
    if bool_of(op.transpose_b):
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


@kernel_for(g.LinearOp)
def _linear(op: g.LinearOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x, w = upcast(xs[0]), upcast(xs[1])
    # one 2-D product: numpy runs a stacked [..., S, K] @ [K, N] without BLAS
    # (100x slower for the one-row products of a decode step)
    y = np.matmul(x.reshape(-1, x.shape[-1]), w.T).reshape(*x.shape[:-1], w.shape[0])
    if len(xs) > 2:
        y = y + upcast(xs[2])
    return y


# -- convolution and pooling -------------------------------------------------------------


def _windows(
    x: np.ndarray, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int],
    out_hw: Sequence[int],
) -> np.ndarray:
    """View [N, C, OH, OW, KH, KW] of the (already padded) NCHW array x."""
    n, c, _, _ = x.shape
    sn, sc, sh, sw = x.strides
    return as_strided(
        x,
        shape=(n, c, out_hw[0], out_hw[1], kernel[0], kernel[1]),
        strides=(sn, sc, sh * stride[0], sw * stride[1], sh * dilation[0], sw * dilation[1]),
        writeable=False,
    )


def window_attrs(op: Any) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    return g.i64_values(op.stride), g.i64_values(op.padding), g.i64_values(op.dilation)


@kernel_for(g.Conv2dOp)
def _conv2d(op: g.Conv2dOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x, w = upcast(xs[0]), upcast(xs[1])
    stride, pad, dil = window_attrs(op)
    groups = int_of(op.groups)
    n, c, _, _ = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    oh = (xp.shape[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    win = _windows(xp, (kh, kw), stride, dil, (oh, ow))  # N C OH OW KH KW
    og = o // groups
    win = win.reshape(n, groups, cg, oh, ow, kh, kw)
    # columns [G, N*OH*OW, Cg*KH*KW] (one copy), weights [G, Cg*KH*KW, Og]
    cols = win.transpose(1, 0, 3, 4, 2, 5, 6).reshape(groups, n * oh * ow, cg * kh * kw)
    wm = w.reshape(groups, og, cg * kh * kw).transpose(0, 2, 1)
    y = np.matmul(cols, wm)  # G, N*OH*OW, Og
    y = y.reshape(groups, n, oh, ow, og).transpose(1, 0, 4, 2, 3).reshape(n, o, oh, ow)
    if len(xs) > 2:
        y = y + upcast(xs[2]).reshape(1, o, 1, 1)
    return np.ascontiguousarray(y)


def _pool_geometry(op: Any, h: int, w: int) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Output size and the padding [t, l, b, r] that makes every window lie in
    the padded array (ceil mode can need extra bottom/right padding)."""
    kernel = g.i64_values(op.kernel)
    stride, pad, dil = window_attrs(op)
    ceil = bool_of(op.ceil_mode)
    out = tuple(
        g._window_out(op.name, size, kernel[i], stride[i], pad[i], pad[i + 2], dil[i], ceil)
        for i, size in enumerate((h, w))
    )
    full = []
    for i, size in enumerate((h, w)):
        needed = (out[i] - 1) * stride[i] + dil[i] * (kernel[i] - 1) + 1
        full.append(max(pad[i + 2], needed - size - pad[i]))
    return (out[0], out[1]), (pad[0], pad[1], full[0], full[1])


@kernel_for(g.MaxPool2dOp)
def _max_pool(op: g.MaxPool2dOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    _, _, h, w = x.shape
    out, (t, l, b, r) = _pool_geometry(op, h, w)
    if is_float_dtype(x.dtype):
        low = -np.inf
    elif x.dtype == np.bool_:
        low = False
    else:
        low = np.iinfo(x.dtype).min
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=low)
    stride, _, dil = window_attrs(op)
    win = _windows(xp, g.i64_values(op.kernel), stride, dil, out)
    return win.max(axis=(4, 5))


def _avg_divisor(size: int, out: int, k: int, s: int, pad_lo: int, pad_hi: int, include_pad: bool) -> np.ndarray:
    start = np.arange(out) * s - pad_lo
    end = np.minimum(start + k, size + pad_hi)
    if include_pad:
        return (end - start).astype(np.int64)
    return (np.minimum(end, size) - np.maximum(start, 0)).astype(np.int64)


@kernel_for(g.AvgPool2dOp)
def _avg_pool(op: g.AvgPool2dOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    if not is_float_dtype(x.dtype):
        raise InterpreterError(f"{op.name}: average pooling needs a floating-point input")
    _, _, h, w = x.shape
    out, (t, l, b, r) = _pool_geometry(op, h, w)
    kernel = g.i64_values(op.kernel)
    stride, pad, dil = window_attrs(op)
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    win = _windows(xp, kernel, stride, dil, out)
    total = win.sum(axis=(4, 5), dtype=x.dtype)
    inc = bool_of(op.count_include_pad)
    dh = _avg_divisor(h, out[0], kernel[0], stride[0], pad[0], pad[2], inc)
    dw = _avg_divisor(w, out[1], kernel[1], stride[1], pad[1], pad[3], inc)
    div = (dh[:, None] * dw[None, :]).astype(x.dtype)
    return total / div


@kernel_for(g.GlobalAvgPoolOp)
def _global_avg(op: Operation, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    axes = tuple(range(2, x.ndim))
    if np.issubdtype(x.dtype, np.integer) or x.dtype == np.bool_:
        return int_mean(op, x, axes)
    return np.mean(x, axis=axes, keepdims=True, dtype=x.dtype)


@kernel_for(g.GlobalMaxPoolOp)
def _global_max(op: Operation, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    return np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


# -- normalization ---------------------------------------------------------------------


@kernel_for(g.BatchNormOp)
def _batch_norm(op: g.BatchNormOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x, scale, bias, mean, var = (upcast(a) for a in xs)
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    eps = scalar(x, float_of(op.epsilon))
    inv = scale / np.sqrt(var + eps)
    return (x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)


@kernel_for(g.LayerNormOp)
def _layer_norm(op: g.LayerNormOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    axis = g.normalize_axis(op.name, int_of(op.axis), x.ndim)
    axes = tuple(range(axis, x.ndim))
    mean = np.mean(x, axis=axes, keepdims=True, dtype=x.dtype)
    d = x - mean
    var = np.mean(d * d, axis=axes, keepdims=True, dtype=x.dtype)
    y = d / np.sqrt(var + scalar(x, float_of(op.epsilon))) * upcast(xs[1])
    if len(xs) > 2:
        y = y + upcast(xs[2])
    return y


@kernel_for(g.RmsNormOp)
def _rms_norm(op: g.RmsNormOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    axis = g.normalize_axis(op.name, int_of(op.axis), x.ndim)
    axes = tuple(range(axis, x.ndim))
    ms = np.mean(x * x, axis=axes, keepdims=True, dtype=x.dtype)
    return x / np.sqrt(ms + scalar(x, float_of(op.epsilon))) * upcast(xs[1])


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, x.dtype.type(0))
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


@kernel_for(g.SoftmaxOp)
def _softmax_kernel(op: g.SoftmaxOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    return _softmax(x, g.normalize_axis(op.name, int_of(op.axis), x.ndim))


@kernel_for(g.LogSoftmaxOp)
def _log_softmax(op: g.LogSoftmaxOp, xs: list[np.ndarray], env: Env) -> np.ndarray:
    x = upcast(xs[0])
    axis = g.normalize_axis(op.name, int_of(op.axis), x.ndim)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, x.dtype.type(0))
    s = x - m
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))
