"""Calibration: the range of every activation on sample inputs, and the threshold each
method picks for symmetric int8 quantization (scale = threshold / 127).

    table = calibrate_module(module, samples, method="entropy")   # runs the reference interpreter
    table.save("model.calib.json"); table = CalibrationTable.load("model.calib.json")

Every float activation (the entry function's float arguments and the float results of its
top-level ops that do not depend on constants alone) is observed on every sample. Methods:

- `minmax`: threshold = max(|min|, |max|) over all samples.
- `percentile`: the `percentile` (default 99.99) of |x| over all samples, from a histogram.
- `entropy`: TensorRT's KL-divergence calibration (as TPU-MLIR does): of the thresholds at
  bin edges 128..2048 of the |x| histogram, the one whose 128-level quantized distribution is
  closest (Kullback-Leibler) to the clipped reference distribution.
- `mse`: the threshold minimizing the expected squared error of symmetric 8-bit quantization
  over the |x| histogram: rounding noise (threshold / 127)^2 / 12 for each value inside the
  range plus the clipping error (|x| - threshold)^2 for each value outside.

Histograms have `bins` (default 2048) bins over [0, max |x|] (a second pass over the samples
once the ranges are known) and leave out exact zeros: zero quantizes exactly whatever the
threshold, and the spike of zeros a ReLU leaves would otherwise dominate the percentiles and
the KL search. The table is a readable JSON file a user may edit (format
`infer-calibration/1`): the model's inputs, then per tensor its name (see
`infer.passes.quantize.naming`), min, max, threshold and method; only `threshold` is used
by the quantization, min and max are what was observed.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import is_float
from infer.dialects.graph_interpreter import run_module
from infer.dialects.ir_io import IRError
from infer.dialects.signature import entry_function, function_signature
from infer.passes.quantize.naming import argument_names, layer_names, tensor_names

TABLE_FORMAT = "infer-calibration/1"
CALIBRATION_METHODS = ("minmax", "percentile", "entropy", "mse")
DEFAULT_METHOD = "entropy"
DEFAULT_BINS = 2048
DEFAULT_PERCENTILE = 99.99
INT8_LEVELS = 128  # magnitudes 0..127 of symmetric int8


class CalibrationError(IRError):
    """Bad calibration data or table (one line naming the file or tensor); an IRError so every
    tool reports it as bad input."""


@dataclass
class TensorRange:
    """One activation's observed range and the chosen symmetric threshold."""

    name: str
    min: float
    max: float
    threshold: float
    method: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "min": self.min, "max": self.max, "threshold": self.threshold,
                "method": self.method}


@dataclass
class CalibrationTable:
    """Per-activation thresholds for one model (see the module docstring for the file)."""

    method: str
    tensors: dict[str, TensorRange]
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    samples: int = 0
    model: str = ""
    options: dict[str, Any] = field(default_factory=dict)

    def threshold(self, name: str) -> float | None:
        entry = self.tensors.get(name)
        return None if entry is None else entry.threshold

    def as_dict(self) -> dict[str, Any]:
        return {"format": TABLE_FORMAT, "model": self.model, "method": self.method, "samples": self.samples,
                "options": self.options, "inputs": self.inputs,
                "tensors": [t.as_dict() for t in self.tensors.values()]}

    def save(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.as_dict(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CalibrationTable:
        try:
            doc = json.loads(Path(path).read_text())
        except OSError as e:
            raise CalibrationError(f"{path}: cannot read the calibration table: {e.strerror or e}") from None
        except json.JSONDecodeError as e:
            raise CalibrationError(f"{path}:{e.lineno}:{e.colno}: not a JSON calibration table: {e.msg}") from None
        return cls.from_dict(doc, str(path))

    @classmethod
    def from_dict(cls, doc: Any, source: str = "<calibration table>") -> CalibrationTable:
        if not isinstance(doc, dict) or doc.get("format") != TABLE_FORMAT:
            raise CalibrationError(f"{source}: not a calibration table (expected \"format\": \"{TABLE_FORMAT}\")")
        entries = doc.get("tensors")
        if not isinstance(entries, list):
            raise CalibrationError(f"{source}: \"tensors\" must be a list of {{name, min, max, threshold, method}}")
        tensors: dict[str, TensorRange] = {}
        for i, e in enumerate(entries):
            where = f"{source}: tensors[{i}]"
            if not isinstance(e, dict) or not isinstance(e.get("name"), str):
                raise CalibrationError(f"{where}: each entry needs a \"name\" (string)")
            name = e["name"]
            if name in tensors:
                raise CalibrationError(f"{where}: tensor '{name}' appears twice")
            values = {}
            for key in ("min", "max", "threshold"):
                v = e.get(key)
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                    raise CalibrationError(f"{where} ('{name}'): \"{key}\" must be a finite number, got {v!r}")
                values[key] = float(v)
            if values["threshold"] < 0:
                raise CalibrationError(f"{where} ('{name}'): \"threshold\" must be >= 0, got {values['threshold']}")
            tensors[name] = TensorRange(name, values["min"], values["max"], values["threshold"],
                                        str(e.get("method", doc.get("method", ""))))
        inputs = doc.get("inputs") if isinstance(doc.get("inputs"), dict) else {}
        return cls(str(doc.get("method", "")), tensors, inputs, int(doc.get("samples") or 0),
                   str(doc.get("model") or ""), dict(doc.get("options") or {}))


# ------------------------------------------------------------------------------------ thresholds


def threshold_minmax(lo: float, hi: float) -> float:
    return max(abs(lo), abs(hi))


def threshold_percentile(hist: np.ndarray, width: float, percentile: float = DEFAULT_PERCENTILE) -> float:
    """The upper edge of the bin where the cumulative count reaches `percentile` %."""
    cum = np.cumsum(hist, dtype=np.float64)
    if cum[-1] <= 0:
        return 0.0
    i = int(np.searchsorted(cum, cum[-1] * percentile / 100.0))
    return float(min(i + 1, len(hist)) * width)


def _kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    p = p / p.sum()
    q = q / q.sum()
    q = np.maximum(q, 1e-12)  # a reference mass where the candidate has none: large, finite
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))


def threshold_entropy(hist: np.ndarray, width: float, levels: int = INT8_LEVELS) -> float:
    """TensorRT's entropy calibration over an |x| histogram (see the module docstring)."""
    hist = np.asarray(hist, np.float64)
    nbins = len(hist)
    if hist.sum() <= 0:
        return 0.0
    if nbins <= levels:
        return float(nbins * width)
    best_i, best_kl = nbins, math.inf
    suffix = np.cumsum(hist[::-1])[::-1]  # suffix[i] = sum(hist[i:])
    for i in range(levels, nbins + 1):
        sliced = hist[:i]
        if np.count_nonzero(sliced) < 2:
            # everything clipped into one bin: p and q are the same point mass (KL 0) though
            # the threshold has thrown the distribution away
            continue
        p = sliced.copy()
        if i < nbins:
            p[i - 1] += suffix[i]
        if p.sum() <= 0:
            continue
        # `levels` chunks of the first i bins (the last takes the remainder), each chunk's
        # count spread over its nonzero bins: the distribution int8 can represent.
        starts = (np.arange(levels) * (i // levels)).astype(np.int64)
        chunk = np.add.reduceat(sliced, starts)
        nonzero = (sliced != 0).astype(np.float64)
        per_chunk = np.add.reduceat(nonzero, starts)
        owner = np.minimum(np.arange(i) // (i // levels), levels - 1)
        q = np.where(nonzero > 0, chunk[owner] / np.maximum(per_chunk[owner], 1.0), 0.0)
        if q.sum() <= 0:
            continue
        kl = _kl_divergence(p, q)
        if kl < best_kl:
            best_i, best_kl = i, kl
    return float(best_i * width)


def threshold_mse(hist: np.ndarray, width: float, qmax: int = INT8_LEVELS - 1) -> float:
    """The bin edge minimizing rounding noise inside plus clipping error outside."""
    hist = np.asarray(hist, np.float64)
    if hist.sum() <= 0:
        return 0.0
    nbins = len(hist)
    centers = (np.arange(nbins) + 0.5) * width
    t = np.arange(1, nbins + 1) * width  # candidate thresholds: the upper bin edges
    inside = np.cumsum(hist)  # values in bins < i+1 lie below t[i]
    s0 = np.concatenate([np.cumsum(hist[::-1])[::-1][1:], [0.0]])  # counts above t[i]
    s1 = np.concatenate([np.cumsum((hist * centers)[::-1])[::-1][1:], [0.0]])
    s2 = np.concatenate([np.cumsum((hist * centers**2)[::-1])[::-1][1:], [0.0]])
    err = inside * (t / qmax) ** 2 / 12.0 + s2 - 2.0 * t * s1 + t**2 * s0
    return float(t[int(np.argmin(err))])


# ------------------------------------------------------------------------------------ samples


def split_samples(arrays: Mapping[str, np.ndarray], module: ModuleOp, source: str = "calibration data",
                  entry: str = "main") -> list[dict[str, np.ndarray]]:
    """Arrays keyed by input name with a leading sample axis -> one input dict per sample,
    checked against the signature of function `entry` (names, shapes, dtypes)."""
    names, specs = function_signature(module, entry)
    missing = [n for n in names if n not in arrays]
    extra = [k for k in arrays if k not in names]
    if missing or extra:
        raise CalibrationError(
            f"{source}: the arrays ({', '.join(arrays) or 'none'}) do not match the model's inputs "
            f"({', '.join(names)})" + (f": missing {', '.join(missing)}" if missing else "")
            + (f"; not inputs of the model: {', '.join(extra)}" if extra else ""))
    counts = set()
    converted = {}
    for name, (shape, dtype) in zip(names, specs, strict=True):
        a = np.asarray(arrays[name])
        want = "x".join(map(str, shape)) or "scalar"
        if a.ndim != len(shape) + 1 or any(d >= 0 and d != s for d, s in zip(shape, a.shape[1:])):
            raise CalibrationError(
                f"{source}: '{name}' has shape {'x'.join(map(str, a.shape)) or 'scalar'}; expected N x {want} "
                f"(a leading sample axis, then the input's shape {want})")
        if a.dtype != dtype:
            same_kind = (np.issubdtype(a.dtype, np.floating) and np.issubdtype(dtype, np.floating)) or (
                np.issubdtype(a.dtype, np.integer) and np.issubdtype(dtype, np.integer))
            if not same_kind:
                raise CalibrationError(f"{source}: '{name}' is {a.dtype} but the model's input is {dtype}")
            a = a.astype(dtype)
        counts.add(a.shape[0])
        converted[name] = a
    if len(counts) > 1:
        raise CalibrationError(f"{source}: the arrays hold different numbers of samples ({sorted(counts)})")
    n = counts.pop() if counts else 0
    if n == 0:
        raise CalibrationError(f"{source}: the calibration set is empty (0 samples)")
    return [{k: v[i] for k, v in converted.items()} for i in range(n)]


# ------------------------------------------------------------------------------------ observing


def observed_values(module: ModuleOp, entry: str = "main") -> tuple[dict[SSAValue, str], dict[Operation, list[int]]]:
    """The activations calibration observes: value -> name, and per top-level op the indices
    of its observed results. Values computed from constants alone are weights, not activations."""
    fn = entry_function(module, entry)
    names = tensor_names(fn, layer_names(fn))
    constant: set[SSAValue] = set()
    observed: dict[SSAValue, str] = {}
    per_op: dict[Operation, list[int]] = {}
    for arg in fn.args:
        if isinstance(arg.type, TensorType) and is_float(arg.type.get_element_type()):
            observed[arg] = names[arg]
    for op in fn.body.block.ops:
        if isinstance(op, g.ConstantOp | g.WeightOp) or (op.operands and all(v in constant for v in op.operands)):
            constant.update(op.results)
            continue
        for i, r in enumerate(op.results):
            if isinstance(r.type, TensorType) and is_float(r.type.get_element_type()):
                observed[r] = names[r]
                per_op.setdefault(op, []).append(i)
    return observed, per_op


class _Observer:
    """Running min/max, then (second pass) a histogram of |x| over [0, absmax]."""

    def __init__(self) -> None:
        self.lo, self.hi = math.inf, -math.inf
        self.hist: np.ndarray | None = None
        self.width = 0.0

    def see_range(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float32)
        finite = x[np.isfinite(x)] if not np.all(np.isfinite(x)) else x
        if finite.size:
            self.lo = min(self.lo, float(finite.min()))
            self.hi = max(self.hi, float(finite.max()))

    def start_histogram(self, bins: int) -> None:
        absmax = max(abs(self.lo), abs(self.hi)) if math.isfinite(self.lo) else 0.0
        self.width = absmax / bins if absmax > 0 else 1.0
        self.hist = np.zeros(bins, np.float64)

    def see_histogram(self, x: np.ndarray) -> None:
        assert self.hist is not None
        a = np.abs(np.asarray(x, np.float32).reshape(-1))
        a = a[np.isfinite(a) & (a != 0)]  # zeros quantize exactly whatever the threshold
        idx = np.minimum((a / self.width).astype(np.int64), len(self.hist) - 1)
        self.hist += np.bincount(idx, minlength=len(self.hist))

    def threshold(self, method: str, percentile: float) -> float:
        if not math.isfinite(self.lo):
            return 0.0
        if method == "minmax":
            return threshold_minmax(self.lo, self.hi)
        assert self.hist is not None
        if method == "percentile":
            return threshold_percentile(self.hist, self.width, percentile)
        if method == "entropy":
            return threshold_entropy(self.hist, self.width)
        return threshold_mse(self.hist, self.width)


def calibrate_module(
    module: ModuleOp,
    samples: Sequence[Mapping[str, np.ndarray]],
    method: str = DEFAULT_METHOD,
    *,
    entry: str = "main",
    bins: int = DEFAULT_BINS,
    percentile: float = DEFAULT_PERCENTILE,
    model: str = "",
    progress: Callable[[str], None] | None = None,
) -> CalibrationTable:
    """Run the reference interpreter over `samples` (one input dict each, e.g. from
    `split_samples`) and pick each activation's threshold with `method`."""
    if method not in CALIBRATION_METHODS:
        raise CalibrationError(f"unknown calibration method '{method}' (supported: {', '.join(CALIBRATION_METHODS)})")
    if not samples:
        raise CalibrationError("the calibration set is empty (0 samples)")
    if bins < INT8_LEVELS:
        raise CalibrationError(f"bins must be at least {INT8_LEVELS}, got {bins}")
    if not 0 < percentile <= 100:
        raise CalibrationError(f"percentile must be in (0, 100], got {percentile}")
    fn = entry_function(module, entry)
    observed, per_op = observed_values(module, entry)
    observers = {name: _Observer() for name in observed.values()}
    input_names = argument_names(fn)
    observed_args = [(input_names[v.index], observed[v]) for v in fn.args if v in observed]

    def run(see: Callable[[_Observer, np.ndarray], None], label: str) -> None:
        def on_op(_i: int, op: Operation, results: list[np.ndarray]) -> None:
            for j in per_op.get(op, ()):
                see(observers[observed[op.results[j]]], results[j])

        for k, sample in enumerate(samples):
            if progress is not None:
                progress(f"calibration ({label}): sample {k + 1}/{len(samples)}")
            for input_name, name in observed_args:
                see(observers[name], sample[input_name])
            run_module(module, sample, entry=entry, on_op=on_op)

    run(_Observer.see_range, "ranges")
    if method != "minmax":
        for o in observers.values():
            o.start_histogram(bins)
        run(_Observer.see_histogram, "histograms")
    tensors = {}
    for name, o in observers.items():
        lo, hi = (o.lo, o.hi) if math.isfinite(o.lo) else (0.0, 0.0)
        tensors[name] = TensorRange(name, lo, hi, o.threshold(method, percentile), method)
    names, specs = function_signature(module, entry)
    inputs = {n: {"shape": list(s), "dtype": str(d)} for n, (s, d) in zip(names, specs, strict=True)}
    options: dict[str, Any] = {}
    if method != "minmax":
        options["bins"] = bins
    if method == "percentile":
        options["percentile"] = percentile
    return CalibrationTable(method, tensors, inputs, len(samples), model, options)


__all__ = [
    "CALIBRATION_METHODS", "CalibrationError", "CalibrationTable", "DEFAULT_METHOD", "TABLE_FORMAT", "TensorRange",
    "calibrate_module", "observed_values", "split_samples", "threshold_entropy", "threshold_minmax",
    "threshold_mse", "threshold_percentile",
]
