"""Reference numerics of linear (scale / zero-point) quantization, as the graph ops
`graph.quantize_linear`, `graph.dequantize_linear`, `graph.requantize`,
`graph.conv2d_integer`, `graph.linear_integer` and `graph.matmul_integer` state them
(docs/quantization.md).

One module says what these ops compute; the graph interpreter runs these functions, the
quantization passes use them to quantize weights and biases, and the int8 lowering checks
against them. Conventions:

- Scales are float32; a scale is per tensor (one element) or per axis (a 1-D array of
  `x.shape[axis]` values, `axis` given). Zero points have the quantized type's range.
- Rounding is to nearest, ties to even (`np.rint`), on the float32 value; saturation clamps
  to the quantized type's range; NaN quantizes to the zero point (as the NPU's float -> int
  conversion gives 0 for NaN), +-inf saturates.
- `quantize_linear` divides by the scale (ONNX QuantizeLinear, as onnxruntime computes it:
  `rint(x / scale) + zero_point` in float32); `requantize` multiplies by a float32 multiplier
  (the NPU's `vec.requant`: `rint(fp32(x) * m)`, then the zero point). A multiplication by
  `1 / scale` is not a division by `scale` in float32: the two differ by one step on the rare
  value that lands within an ulp of a rounding tie.
- Integer products accumulate exactly and the sum (plus the int32 bias) saturates to int32,
  as the NPU's matrix unit does. The products are computed in float64 so numpy can use BLAS:
  every partial sum of (x - zx) * (w - zw) terms is an integer below 2**53 in magnitude for
  any K < 2**37 (|terms| <= 255 * 255), so float64 holds them exactly, whatever the order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

QUANTIZED_TYPES = ("i8", "ui8")
"""Element types a float tensor quantizes to (graph.quantize_linear, graph.requantize)."""

INTEGER_OPERAND_TYPES = ("i8", "ui8")
"""Element types of the operands of the integer conv / linear / matmul ops."""


def integer_range(dtype: np.dtype | type) -> tuple[int, int]:
    """(min, max) of an integer dtype: (-128, 127) for int8, (0, 255) for uint8, ..."""
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def along_axis(param: np.ndarray, rank: int, axis: int | None) -> np.ndarray:
    """A per-tensor (one element) or per-axis (1-D along `axis`) parameter, shaped to
    broadcast against a rank-`rank` array."""
    param = np.asarray(param)
    if axis is None:
        return param.reshape(())
    shape = [1] * rank
    shape[axis] = param.size
    return param.reshape(shape)


def _round_saturate(value: np.ndarray, zero_point: np.ndarray | int, dtype: np.dtype) -> np.ndarray:
    """rint(value) + zero_point, clamped to dtype's range; NaN -> zero_point. `value` is f32."""
    lo, hi = integer_range(dtype)
    rounded = np.nan_to_num(np.rint(value.astype(np.float64)), nan=0.0, posinf=hi + 256.0, neginf=lo - 256.0)
    return np.clip(rounded + np.asarray(zero_point, np.float64), lo, hi).astype(dtype)


def quantize_linear(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int | None,
                    dtype: np.dtype | type) -> np.ndarray:
    """ONNX QuantizeLinear: saturate(rint(x / scale) + zero_point), x / scale in float32."""
    dtype = np.dtype(dtype)
    x32 = np.asarray(x).astype(np.float32)
    s = along_axis(np.asarray(scale, np.float32), x32.ndim, axis)
    zp = 0 if zero_point is None else along_axis(np.asarray(zero_point, np.int64), x32.ndim, axis)
    with np.errstate(all="ignore"):
        return _round_saturate(x32 / s, zp, dtype)


def dequantize_linear(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int | None,
                      dtype: np.dtype | type = np.float32) -> np.ndarray:
    """ONNX DequantizeLinear: float32(q - zero_point) * scale (one float32 rounding each)."""
    q64 = np.asarray(q).astype(np.int64)
    zp = 0 if zero_point is None else along_axis(np.asarray(zero_point, np.int64), q64.ndim, axis)
    s = along_axis(np.asarray(scale, np.float32), q64.ndim, axis)
    with np.errstate(all="ignore"):
        return ((q64 - zp).astype(np.float32) * s).astype(dtype)


def requantize(x: np.ndarray, multiplier: np.ndarray, zero_point: int, axis: int | None,
               dtype: np.dtype | type) -> np.ndarray:
    """The NPU's requant: saturate(rint(float32(x) * multiplier) + zero_point), the product
    rounded to float32 first (x is an int32 accumulator or a float tensor)."""
    dtype = np.dtype(dtype)
    x32 = np.asarray(x).astype(np.float32)
    m = along_axis(np.asarray(multiplier, np.float32), x32.ndim, axis)
    with np.errstate(all="ignore"):
        return _round_saturate(x32 * m, zero_point, dtype)


def saturate_int32(acc: np.ndarray) -> np.ndarray:
    """An exact integer sum (int64 or integral float64) clamped to int32."""
    return np.clip(acc, INT32_MIN, INT32_MAX).astype(np.int32)


def _exact(values: np.ndarray, zero_point: np.ndarray | int) -> np.ndarray:
    """values - zero_point as float64 (exact: |result| <= 255)."""
    return np.asarray(values).astype(np.float64) - np.asarray(zero_point, np.float64)


def _add_bias(acc: np.ndarray, bias: np.ndarray | None, channel_axis: int) -> np.ndarray:
    acc64 = np.rint(acc).astype(np.int64)  # integral already; rint only guards the conversion
    if bias is not None:
        acc64 = acc64 + along_axis(np.asarray(bias).astype(np.int64), acc64.ndim, channel_axis % acc64.ndim)
    return saturate_int32(acc64)


def matmul_integer(a: np.ndarray, b: np.ndarray, a_zero_point: int = 0, b_zero_point: int = 0,
                   transpose_a: bool = False, transpose_b: bool = False) -> np.ndarray:
    """int32 (a - a_zp) @ (b - b_zp), numpy.matmul semantics, exact then saturated."""
    a64, b64 = _exact(a, a_zero_point), _exact(b, b_zero_point)
    if transpose_a:
        a64 = np.swapaxes(a64, -1, -2)
    if transpose_b:
        b64 = np.swapaxes(b64, -1, -2)
    return saturate_int32(np.matmul(a64, b64))


def linear_integer(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, x_zero_point: int = 0,
                   w_zero_point: int = 0) -> np.ndarray:
    """int32 (x - x_zp) @ (w - w_zp)^T + bias, w of shape [out, in]."""
    acc = np.matmul(_exact(x, x_zero_point), _exact(w, w_zero_point).T)
    return _add_bias(acc, bias, -1)


def conv2d_integer(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, x_zero_point: int, w_zero_point: int,
                   stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], groups: int) -> np.ndarray:
    """int32 NCHW convolution of (x - x_zp) with OIHW (w - w_zp) + bias; the padding holds
    x's zero point, so padded positions contribute nothing."""
    xs = _exact(x, x_zero_point)
    ws = _exact(w, w_zero_point)
    n, c, _, _ = xs.shape
    o, cg, kh, kw = ws.shape
    xp = np.pad(xs, ((0, 0), (0, 0), (padding[0], padding[2]), (padding[1], padding[3])))
    oh = (xp.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    sn, sc, sh, sw = xp.strides
    windows = as_strided(xp, shape=(n, c, oh, ow, kh, kw),
                         strides=(sn, sc, sh * stride[0], sw * stride[1], sh * dilation[0], sw * dilation[1]),
                         writeable=False)
    og = o // groups
    cols = windows.reshape(n, groups, cg, oh, ow, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
    cols = cols.reshape(groups, n * oh * ow, cg * kh * kw)
    wm = ws.reshape(groups, og, cg * kh * kw).transpose(0, 2, 1)
    acc = np.matmul(cols, wm).reshape(groups, n, oh, ow, og).transpose(1, 0, 4, 2, 3).reshape(n, o, oh, ow)
    return _add_bias(acc, bias, 1)


# -- choosing parameters (the passes and the importer) --------------------------------------------


def symmetric_scale(threshold: np.ndarray | float, qmax: int = 127) -> np.ndarray:
    """float32 scale(s) mapping [-threshold, threshold] onto [-qmax, qmax]; a zero (or
    non-finite) threshold gives scale 1 (every value of such a tensor is 0 anyway)."""
    t = np.asarray(threshold, np.float64)
    ok = np.isfinite(t) & (t > 0)
    return np.where(ok, t / qmax, 1.0).astype(np.float32)


def quantize_weight_symmetric(w: np.ndarray, axis: int | None, qmax: int = 127) -> tuple[np.ndarray, np.ndarray]:
    """int8 weights and float32 scales, symmetric ([-qmax, qmax], zero point 0), per tensor
    (axis None) or per channel along `axis`: scale = max|w| / qmax over the channel."""
    w32 = np.asarray(w, np.float32)
    if axis is None:
        scale = symmetric_scale(np.max(np.abs(w32)) if w32.size else 0.0, qmax)
    else:
        others = tuple(i for i in range(w32.ndim) if i != axis)
        scale = symmetric_scale(np.max(np.abs(w32), axis=others) if w32.size else np.zeros(w32.shape[axis]), qmax)
    q = quantize_linear(w32, scale, None, axis, np.int8)
    return np.clip(q, -qmax, qmax).astype(np.int8), scale


def quantize_bias(bias: np.ndarray, input_scale: np.ndarray | float, weight_scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int32 bias and its float32 scale input_scale * weight_scale (per output channel):
    rint(bias / scale), saturated to int32."""
    scale = (np.float32(input_scale) * np.asarray(weight_scale, np.float32)).astype(np.float32)
    scale = np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)
    q = np.rint(np.asarray(bias, np.float64) / scale.astype(np.float64))
    return saturate_int32(np.nan_to_num(q)), scale


__all__ = [
    "INTEGER_OPERAND_TYPES", "INT32_MAX", "INT32_MIN", "QUANTIZED_TYPES", "along_axis", "conv2d_integer",
    "dequantize_linear", "integer_range", "linear_integer", "matmul_integer", "quantize_bias",
    "quantize_linear", "quantize_weight_symmetric", "requantize", "saturate_int32", "symmetric_scale",
]
