"""The small float models the QDQ and QOperator tests quantize, and onnxruntime's
`quantize_static` of a one-input ONNX file, calibrated on 8 random normal samples (seeded)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np


def small_cnn():
    """Two 3x3 convs with ReLU, a max pool and a linear head: (module, input shape)."""
    import torch

    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10)), (1, 1, 8, 8)


def small_mlp():
    """Two linears with a ReLU between: (module, input shape)."""
    import torch

    return torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.ReLU(), torch.nn.Linear(48, 12)), (4, 24)


#: Weights quantized to 7 bits (onnxruntime's `reduce_range`). onnxruntime's x86 int8 kernels
#: without AVX512-VNNI (AVX2's vpmaddubsw) sum pairs of uint8 x int8 products in int16 and
#: saturate: on a 2-core AMD EPYC (AVX2) its QLinearConv of 8-bit weights differed from the ONNX
#: definition by up to 46 output codes, while machines with VNNI compute it exactly. With 7-bit
#: weights a pair (255 * 64 * 2 = 32,640) fits int16 and onnxruntime is exact everywhere, so it
#: stays a bit-exact reference for the importer and the interpreters.
REDUCED_RANGE = True


def quantize_static_file(path: Path, qpath: Path, shape: tuple[int, ...], quant_format: str, activation: str,
                         weight: str = "QInt8", per_channel: bool = True, input_name: str = "x") -> Path:
    """Write onnxruntime's static quantization of `path` to `qpath`: `quant_format` "QDQ" or
    "QOperator", `activation` / `weight` QuantType names ("QInt8", "QUInt8")."""
    from onnxruntime import quantization

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.samples = iter([{input_name: rng.standard_normal(shape).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.samples, None)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantization.quantize_static(str(path), str(qpath), Reader(),
                                     quant_format=getattr(quantization.QuantFormat, quant_format),
                                     activation_type=getattr(quantization.QuantType, activation),
                                     weight_type=getattr(quantization.QuantType, weight), per_channel=per_channel,
                                     reduce_range=REDUCED_RANGE)
    return qpath
