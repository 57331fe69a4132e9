"""infer.passes.quantize: int8 post-training quantization at the graph level.

The stage runs on the graph dialect and the reference interpreter (docs/quantization.md):

- `calibration`: observe every activation on sample inputs and pick a symmetric threshold per
  tensor (minmax, percentile, entropy, mse) -> a `CalibrationTable` (readable JSON);
- `insert` (`graph-quantize{calibration=...}`): conv2d / linear / matmul in int8, QDQ form:
  int8 activations from the table, int8 weights per output channel, int32 biases;
- `kernels` (`graph-quantize-kernels`): each DQ -> op -> Q into an integer kernel
  (`graph.conv2d_integer` / `linear_integer` / `matmul_integer`) with a `graph.requantize` or
  `graph.dequantize_linear` epilogue; also runs on imported onnxruntime QDQ models;
- `mixed_precision`: per-layer sensitivity on the calibration samples and the search that
  keeps the most sensitive layers in float until the model meets a cosine target;
- `naming`: the layer and tensor names the table and the reports use.

The command line and the Python API (`infer calibrate`, `infer.calibrate`, `infer.quantize`,
`infer compile --precision int8`) are in `infer.tools.quantize`.
"""

from infer.passes.quantize.calibration import (
    CALIBRATION_METHODS,
    CalibrationError,
    CalibrationTable,
    TensorRange,
    calibrate_module,
    split_samples,
)
from infer.passes.quantize.insert import GraphQuantizePass, quantizable_layers, quantize_qdq
from infer.passes.quantize.kernels import GraphQuantizeKernelsPass, quantize_kernels

__all__ = [
    "CALIBRATION_METHODS", "CalibrationError", "CalibrationTable", "GraphQuantizeKernelsPass", "GraphQuantizePass",
    "TensorRange", "calibrate_module", "quantizable_layers", "quantize_kernels", "quantize_qdq", "split_samples",
]
