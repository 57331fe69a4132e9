"""ONNX handlers for spectral ops: DFT and STFT as products with compile-time DFT matrices; the
windows (Hann, Hamming, Blackman) and the mel filter bank of compile-time size as constants.

A transform of static length is a linear map: the signal's (real, imaginary) pairs flattened
to one row of N.c values, times a [N.c, K.2] matrix of cosines and sines, gives the K bins'
(real, imaginary) pairs. So a DFT is one `graph.linear` (the matrix unit does it), and an STFT
is its frames (one `graph.gather` of compile-time indices), the window, then that product.
The matrices are built in float64 with the angle 2*pi*(k.n mod L)/L reduced exactly before the
cosine (quarter turns exact), then rounded once to the signal's type. For short transforms (an audio frame, a
spectral layer) the O(N^2) product on the array beats an FFT's scattered O(N log N) work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import numpy_dtype_of, shape_of
from infer.frontend.onnx_ops import (NodeProblem, attribute, handler, input_name, is_float_dtype, normalize_axis,
                                     numpy_dtype_for)

if TYPE_CHECKING:
    from infer.frontend.onnx_import import Importer


def _unit_circle(turns: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2 pi turns / length (turns already reduced mod length), exact at the
    quarter turns: float64's cos(pi / 2) is 6e-17, which would leak a tiny imaginary part into
    bins that are real."""
    angle = 2 * np.pi * turns / length
    cos, sin = np.cos(angle), np.sin(angle)
    quarter = (4 * turns) % length == 0
    q = (4 * turns // length) % 4
    cos = np.where(quarter, np.array([1.0, 0.0, -1.0, 0.0])[q], cos)
    sin = np.where(quarter, np.array([0.0, 1.0, 0.0, -1.0])[q], sin)
    return cos, sin


def dft_matrix(n_in: int, components: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The real [n_in.components, bins.outputs] matrix of a DFT of `length` points whose input
    has `n_in` samples (or bins) of `components` (1: real, 2: real and imaginary) each: a row of
    pairs times it is the output's row of pairs (outputs 2), or of reals (outputs 1, the inverse
    of a one-sided spectrum).

    Input samples beyond `length` are dropped and missing ones are zeros (ONNX's dft_length).
    Forward: X_k = sum_n x_n e^(-2 pi i k n / L), k < L, or k <= L/2 when one-sided. Inverse:
    x_n = 1/L sum_k X_k e^(+2 pi i k n / L). The inverse of a one-sided spectrum (irfft) is real:
    bin k weighs 2 for the bins that stand for their mirror too, 1 for DC and Nyquist, whose
    imaginary parts drop out (sin 0 = sin(pi n) = 0), as numpy's irfft."""
    if inverse and onesided:
        bins_in = min(n_in, length // 2 + 1)
        k = np.arange(bins_in)[:, None]
        n = np.arange(length)[None, :]
        weight = np.where((k == 0) | (2 * k == length), 1.0, 2.0) / length
        cos, sin = _unit_circle((k * n) % length, length)
        matrix = np.zeros((n_in, components, length, 1))
        matrix[:bins_in, 0, :, 0] = weight * cos
        if components == 2:
            matrix[:bins_in, 1, :, 0] = -weight * sin
        return matrix.reshape(n_in * components, length)
    bins = length // 2 + 1 if onesided else length
    used = min(n_in, length)
    n = np.arange(used)[:, None]
    k = np.arange(bins)[None, :]
    cos, sin = _unit_circle((k * n) % length, length)
    sign, scale = (1.0, 1.0 / length) if inverse else (-1.0, 1.0)
    re, im = scale * cos, sign * scale * sin  # e^(sign i angle), scaled
    matrix = np.zeros((n_in, components, bins, 2))
    # (a + ib)(re + i im) = (a re - b im) + i (a im + b re)
    matrix[:used, 0, :, 0], matrix[:used, 0, :, 1] = re, im
    if components == 2:
        matrix[:used, 1, :, 0], matrix[:used, 1, :, 1] = -im, re
    return matrix.reshape(n_in * components, bins * 2)


def _spectral_product(imp: Importer, rows: SSAValue, matrix: np.ndarray, name: str) -> SSAValue:
    """rows [..., N.c] times the matrix [N.c, K.o]: a graph.linear (weight [K.o, N.c])."""
    dtype = numpy_dtype_of(rows)
    weight = imp.b.weight(name, np.ascontiguousarray(matrix.T).astype(dtype))
    return imp.b.op(g.LinearOp, [rows, weight, None])


def _scalar(imp: Importer, node: onnx.NodeProto, index: int, what: str) -> int | None:
    name = input_name(node, index)
    if not name:
        return None
    value = imp.static(name, what).reshape(-1)
    if value.size != 1:
        raise NodeProblem(f"{what} must be a scalar, got {value.size} values")
    return int(value[0])


def _signal(imp: Importer, node: onnx.NodeProto, op: str) -> tuple[SSAValue, tuple[int, ...]]:
    x = imp.value(node.input[0])
    if not is_float_dtype(numpy_dtype_of(x)):
        raise NodeProblem(f"{op} needs a float signal, got {numpy_dtype_of(x)}")
    shape = shape_of(x)
    if len(shape) < 3 or shape[-1] not in (1, 2):
        raise NodeProblem(f"{op} needs a signal [batch, ..., 1 (real) or 2 (complex)], got shape {list(shape)}")
    return x, shape


@handler("DFT", attrs=("axis", "inverse", "onesided"))
def _dft(imp: Importer, node: onnx.NodeProto):
    """The signal axis moved next to the components, flattened with them, times dft_matrix,
    moved back. DFT-17 takes the axis as an attribute (default 1), DFT-20 as input 2 (-2)."""
    x, shape = _signal(imp, node, "DFT")
    rank, components = len(shape), shape[-1]
    axis = _scalar(imp, node, 2, "the axis")
    if axis is None:
        axis = int(attribute(node, "axis", 1 if imp.opset < 20 else -2))
    axis = normalize_axis(axis, rank, "axis")
    if axis == 0 or axis == rank - 1:
        raise NodeProblem(f"the DFT axis must be a signal axis (1 .. {rank - 2}), got {axis}")
    inverse, onesided = bool(attribute(node, "inverse", 0)), bool(attribute(node, "onesided", 0))
    n_in = shape[axis]
    length = _scalar(imp, node, 1, "dft_length")
    if length is None:
        length = 2 * (n_in - 1) if inverse and onesided else n_in
    if length < 1:
        raise NodeProblem(f"dft_length must be positive, got {length}")
    if onesided and not inverse and components == 2:
        raise NodeProblem("onesided = 1 needs a real signal (its last dim 1), got a complex one")
    perm = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]
    moved = imp.b.transpose(x, perm)
    lead = [shape[d] for d in perm[:-2]]
    rows = imp.b.reshape(moved, (*lead, n_in * components))
    matrix = dft_matrix(n_in, components, length, inverse, onesided)
    outputs = 1 if inverse and onesided else 2
    product = _spectral_product(imp, rows, matrix, "dft_matrix")
    bins = matrix.shape[1] // outputs
    spectrum = imp.b.reshape(product, (*lead, bins, outputs))
    back = [0] * rank
    for position, d in enumerate(perm):
        back[d] = position
    return [imp.b.transpose(spectrum, back)]


@handler("STFT", attrs=("onesided",))
def _stft(imp: Importer, node: onnx.NodeProto):
    """Frames [batch, frames, frame_length] of the signal (one gather of compile-time sample
    indices), times the window, times dft_matrix: [batch, frames, bins, 2]. A real signal may
    come as [batch, length] (torch.onnx.export writes torch.stft so; onnxruntime takes it)."""
    if len(imp.shape(node.input[0])) == 2 and is_float_dtype(imp.dtype(node.input[0])):
        batch, length = imp.shape(node.input[0])
        x = imp.b.reshape(imp.value(node.input[0]), (batch, length, 1))
        shape = (batch, length, 1)
    else:
        x, shape = _signal(imp, node, "STFT")
    if len(shape) != 3:
        raise NodeProblem(f"STFT needs a signal [batch, length, 1 or 2], got shape {list(shape)}")
    batch, samples, components = shape
    step = _scalar(imp, node, 1, "frame_step")
    window_name = input_name(node, 2)
    window = imp.value(window_name) if window_name else None
    frame_length = _scalar(imp, node, 3, "frame_length")
    if window is not None:
        window_shape = shape_of(window)
        if len(window_shape) != 1 or (frame_length is not None and window_shape[0] != frame_length):
            raise NodeProblem(f"the window must be [frame_length] = [{frame_length}], got {list(window_shape)}")
        frame_length = window_shape[0]
    if frame_length is None:
        raise NodeProblem("STFT needs a frame_length or a window")
    if step is None or step < 1 or not 1 <= frame_length <= samples:
        raise NodeProblem(f"frame_step {step} and frame_length {frame_length} do not frame a signal of {samples} samples")
    onesided = bool(attribute(node, "onesided", 1))
    if onesided and components == 2:
        raise NodeProblem("onesided = 1 needs a real signal (its last dim 1), got a complex one")
    frames = (samples - frame_length) // step + 1
    indices = (np.arange(frames)[:, None] * step + np.arange(frame_length)[None, :]).astype(np.int64)
    framed = imp.b.op(g.GatherOp, [x, imp.b.constant(indices, name="stft_frame_indices")], axis=g.i64_attr(1))
    if window is not None:
        dtype = numpy_dtype_of(x)
        shaped = imp.b.reshape(imp.b.cast(window, dtype), (1, 1, frame_length, 1))
        framed = imp.b.op(g.MulOp, [framed, shaped])
    rows = imp.b.reshape(framed, (batch, frames, frame_length * components))
    matrix = dft_matrix(frame_length, components, frame_length, False, onesided)
    product = _spectral_product(imp, rows, matrix, "stft_dft_matrix")
    return [imp.b.reshape(product, (batch, frames, matrix.shape[1] // 2, 2))]


def _window_length(imp: Importer, node: onnx.NodeProto) -> tuple[np.ndarray, int, np.dtype]:
    """(sample indices, the period N, the output type) of a window op: N = size (periodic, the
    default) or size - 1 (symmetric)."""
    size = _scalar(imp, node, 0, "the window size")
    if size is None or size < 1:
        raise NodeProblem(f"the window size must be positive, got {size}")
    dtype = numpy_dtype_for(int(attribute(node, "output_datatype", onnx.TensorProto.FLOAT)), "output_datatype")
    period = size if attribute(node, "periodic", 1) else size - 1
    return np.arange(size, dtype=np.float64), max(period, 1), dtype


@handler("HannWindow", "HammingWindow", "BlackmanWindow", attrs=("output_datatype", "periodic"))
def _window(imp: Importer, node: onnx.NodeProto):
    """A window of compile-time size is a constant: sums of cosines of 2 pi n / N."""
    n, period, dtype = _window_length(imp, node)
    phase = 2 * np.pi * n / period
    if node.op_type == "HannWindow":
        w = 0.5 - 0.5 * np.cos(phase)
    elif node.op_type == "HammingWindow":
        alpha = 25.0 / 46.0  # ONNX's (and torch's) alpha: the first sidelobe's zero
        w = alpha - (1 - alpha) * np.cos(phase)
    else:
        w = 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2 * phase)
    return [w.astype(dtype)]


@handler("MelWeightMatrix", attrs=("output_datatype",))
def _mel_weight_matrix(imp: Importer, node: onnx.NodeProto):
    """The constant [dft_length / 2 + 1, num_mel_bins] matrix of triangular filters with peak
    1 on the mel scale mel(f) = 2595 log10(1 + f / 700). The band edges are num_mel_bins + 2
    points spaced (mel(upper) - mel(lower)) / (num_mel_bins + 2) apart from mel(lower), each
    the spectrogram bin floor((dft_length + 1) f / sample_rate), as onnx's reference places
    them (its node test's expected output)."""
    mels = _scalar(imp, node, 0, "num_mel_bins")
    dft_length = _scalar(imp, node, 1, "dft_length")
    sample_rate = _scalar(imp, node, 2, "sample_rate")
    low = float(imp.static(node.input[3], "lower_edge_hertz").reshape(()))
    high = float(imp.static(node.input[4], "upper_edge_hertz").reshape(()))
    if not (mels and mels > 0 and dft_length and dft_length > 0 and sample_rate and sample_rate > 0 and 0 <= low < high):
        raise NodeProblem(f"num_mel_bins {mels}, dft_length {dft_length}, sample_rate {sample_rate} and the edges "
                          f"[{low}, {high}] Hz do not define a filter bank")
    dtype = numpy_dtype_for(int(attribute(node, "output_datatype", onnx.TensorProto.FLOAT)), "output_datatype")
    low_mel, high_mel = (2595 * np.log1p(f / 700) / np.log(10) for f in (low, high))
    edges_mel = low_mel + np.arange(mels + 2) * (high_mel - low_mel) / (mels + 2)
    edges_hz = 700 * np.expm1(edges_mel / 2595 * np.log(10))
    edges = ((dft_length + 1) * edges_hz // sample_rate).astype(np.int64)
    bins = dft_length // 2 + 1
    if edges[-1] > bins:
        raise NodeProblem(f"upper_edge_hertz {high} is above the spectrogram's {bins} bins at sample_rate {sample_rate}")
    matrix = np.zeros((bins, mels))
    for i, (left, center, right) in enumerate(zip(edges, edges[1:], edges[2:])):
        if center == left:
            matrix[center, i] = 1.0
        else:
            rising = np.arange(left, center + 1)
            matrix[rising, i] = (rising - left) / (center - left)
        if right > center:
            falling = np.arange(center, right)
            matrix[falling, i] = (right - falling) / (right - center)
    return [matrix.astype(dtype)]
