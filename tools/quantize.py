"""int8 quantization of a model: the Python API and the file side (calibration data, tables).

    table = infer.calibrate("model.onnx", "calib.npz", method="entropy", output="model.calib.json")
    qmodel, report = infer.quantize("model.onnx", "calib.npz", min_cosine=0.99)
    qmodel.run(inputs); print(report.table())

Calibration data is an `.npz` holding one array per model input, keyed by the input's name,
with a leading sample axis (input `x` of shape 1x3x32x32 and 16 samples: an array of
16x1x3x32x32); a mapping of such arrays works too. The model is prepared the same way for
calibration and for quantization (`graph-optimize`, `graph-fold-batch-norm`), so the tensor
names of the table (infer.passes.quantize.naming) match.

The stage itself (calibration methods, the passes, the mixed-precision search) is in
`infer.passes.quantize`; docs/quantization.md describes it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

PREPARATION = "graph-optimize,graph-fold-batch-norm,graph-dce"
"""The passes a model goes through before calibration and before quantization."""


def prepared_module(model: Any, example_inputs: Any = None, **import_options: Any):
    """The graph-level module of `model` (path, Model, ModuleOp, ...), as a prepared clone."""
    from xdsl.passes import PassPipeline

    from infer.dialects.ir_io import make_context
    from infer.passes import build_pipeline
    from infer.tools.driver import graph_module

    module = graph_module(model, example_inputs, **import_options).clone()
    PassPipeline(tuple(build_pipeline(PREPARATION))).apply(make_context(), module)
    return module


def load_samples(data: Any, module, entry: str = "main") -> list[dict[str, np.ndarray]]:
    """Calibration samples from an .npz path, a mapping of arrays with a leading sample axis,
    or a sequence of input dicts (one per sample), checked against the model's signature."""
    from infer.passes.quantize.calibration import CalibrationError, split_samples
    from infer.tools.npz_files import NpzReadError, read_npz

    if isinstance(data, str | os.PathLike):
        path = Path(data)
        try:
            arrays = read_npz(path)
        except NpzReadError as e:
            raise CalibrationError(f"{path}: cannot read calibration data as .npz: {e}") from None
        return split_samples(arrays, module, str(path), entry)
    if isinstance(data, Mapping):
        return split_samples({k: np.asarray(v) for k, v in data.items()}, module, "calibration data", entry)
    if isinstance(data, Sequence) and all(isinstance(s, Mapping) for s in data):
        if not data:
            raise CalibrationError("calibration data: the calibration set is empty (0 samples)")
        keys = list(data[0])
        stacked = {k: np.stack([np.asarray(s[k]) for s in data]) for k in keys}
        return split_samples(stacked, module, "calibration data", entry)
    raise CalibrationError(f"calibration data must be an .npz path or a mapping of arrays, got {type(data).__name__}")


def calibrate(model: Any, data: Any, method: str | None = None, *, output: str | os.PathLike[str] | None = None,
              entry: str = "main", bins: int | None = None, percentile: float | None = None,
              progress: bool | Callable[[str], None] = False, **import_options: Any):
    """Run the reference interpreter over calibration `data` and record each activation's
    range and threshold -> `infer.passes.quantize.CalibrationTable` (saved to `output`)."""
    from infer.passes.quantize.calibration import (
        DEFAULT_BINS,
        DEFAULT_METHOD,
        DEFAULT_PERCENTILE,
        calibrate_module,
    )
    from infer.tools.driver import progress_printer

    say = progress if callable(progress) else progress_printer(progress)
    module = prepared_module(model, **import_options)
    samples = load_samples(data, module, entry)
    say(f"calibrating on {len(samples)} sample(s)")
    table = calibrate_module(module, samples, method or DEFAULT_METHOD, entry=entry, bins=bins or DEFAULT_BINS,
                             percentile=DEFAULT_PERCENTILE if percentile is None else percentile,
                             model=_label(model), progress=say)
    if output is not None:
        table.save(output)
    return table


def quantize(model: Any, calibration: Any, *, data: Any = None, min_cosine: float | None = None,
             method: str | None = None, exclude: Collection[str] = (), ops: Collection[str] | None = None,
             entry: str = "main", progress: bool | Callable[[str], None] = False, **import_options: Any):
    """int8 quantization at the graph level -> (`infer.Model` of the integer-kernel module,
    `QuantizationReport`).

    calibration: an .npz path or arrays (samples: calibrated with `method`, default entropy,
    and used for the per-layer sensitivity), a calibration table (.json path or
    CalibrationTable). data: samples for the sensitivity when `calibration` is a table.
    min_cosine: keep the most sensitive layers in float until the model's output cosine to
    the float model reaches it (needs samples). exclude: layer names kept in float."""
    from infer.frontend import Model
    from infer.passes.quantize import CalibrationTable
    from infer.passes.quantize.calibration import DEFAULT_METHOD, calibrate_module
    from infer.passes.quantize.common import QUANTIZABLE
    from infer.passes.quantize.mixed_precision import quantize_model
    from infer.tools.driver import progress_printer

    say = progress if callable(progress) else progress_printer(progress)
    module = prepared_module(model, **import_options)
    samples = None
    if isinstance(calibration, CalibrationTable):
        table = calibration
    elif isinstance(calibration, str | os.PathLike) and Path(calibration).suffix.lower() == ".json":
        table = CalibrationTable.load(calibration)
    else:
        samples = load_samples(calibration, module, entry)
        say(f"calibrating on {len(samples)} sample(s) ({method or DEFAULT_METHOD})")
        table = calibrate_module(module, samples, method or DEFAULT_METHOD, entry=entry, model=_label(model),
                                 progress=say)
    if data is not None:
        samples = load_samples(data, module, entry)
    qmodule, report = quantize_model(module, table, samples, min_cosine=min_cosine, exclude=exclude,
                                     ops=tuple(ops) if ops is not None else tuple(QUANTIZABLE), entry=entry,
                                     progress=say)
    return Model(qmodule), report


def _label(model: Any) -> str:
    return str(model) if isinstance(model, str | os.PathLike) else type(model).__name__


__all__ = ["PREPARATION", "calibrate", "load_samples", "prepared_module", "quantize"]
