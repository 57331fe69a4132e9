"""Mixed precision: which layers to keep in float so the int8 model meets an accuracy target.

    qmodule, report = quantize_model(module, table, samples, min_cosine=0.99)
    print(report.table())

On the calibration samples, with the float model's outputs as the reference:

1. sensitivity: each quantizable layer alone in int8 (all others float): the cosine and SQNR
   of the model's outputs, and of the layer's own output, against the float model;
2. the whole model in int8 (the layers in `exclude` stay float);
3. while the model's cosine is below `min_cosine`, the most sensitive layer still in int8
   (lowest output cosine in step 1) goes back to float, and the model is measured again.

The model's cosine is the smallest, over its outputs, of the cosine between the float and the
quantized output over all samples (each output flattened and concatenated); SQNR likewise
(10 log10 of signal power over error power, in dB). The quantized module is the integer-kernel
form (`graph-quantize` then `graph-quantize-kernels`), what the NPU will run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation

from infer.dialects.graph_interpreter import run_module
from infer.passes.quantize.calibration import CalibrationError, CalibrationTable
from infer.passes.quantize.common import QUANTIZABLE, module_entry
from infer.passes.quantize.insert import quantizable_layers, quantize_qdq
from infer.passes.quantize.kernels import quantize_kernels
from infer.passes.quantize.naming import NAME_ATTR, layer_names

Samples = Sequence[Mapping[str, np.ndarray]]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).reshape(-1), np.asarray(b, np.float64).reshape(-1)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(np.dot(a, b) / (na * nb))


def sqnr_db(reference: np.ndarray, value: np.ndarray) -> float:
    ref = np.asarray(reference, np.float64).reshape(-1)
    err = ref - np.asarray(value, np.float64).reshape(-1)
    noise = float(np.dot(err, err))
    signal = float(np.dot(ref, ref))
    if noise == 0:
        return math.inf
    return 10.0 * math.log10(signal / noise) if signal > 0 else -math.inf


@dataclass
class LayerReport:
    """One quantizable layer: its sensitivity and the precision chosen."""

    name: str
    kind: str
    precision: str = "int8"  # "int8" or "float"
    cosine: float = math.nan  # model outputs, only this layer in int8
    sqnr_db: float = math.nan
    layer_cosine: float = math.nan  # this layer's own output, only it in int8
    layer_sqnr_db: float = math.nan
    fallback_step: int | None = None  # 1 = the first layer the search kept in float
    reason: str = ""  # why float: "search" or "excluded"

    def as_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in self.__dict__.items()}


@dataclass
class QuantizationReport:
    """The per-layer choice and the whole model's accuracy against the float model."""

    layers: list[LayerReport]
    samples: int
    min_cosine: float | None = None
    cosine: float = math.nan  # the chosen mix
    sqnr_db: float = math.nan
    all_int8_cosine: float = math.nan  # every quantizable layer (but the excluded) in int8
    all_int8_sqnr_db: float = math.nan
    steps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def float_layers(self) -> list[str]:
        return [r.name for r in self.layers if r.precision == "float"]

    @property
    def int8_layers(self) -> list[str]:
        return [r.name for r in self.layers if r.precision == "int8"]

    @property
    def met(self) -> bool:
        return self.min_cosine is None or self.cosine >= self.min_cosine

    def as_dict(self) -> dict[str, Any]:
        def clean(v: float) -> float | None:
            return v if math.isfinite(v) else None

        return {"samples": self.samples, "min_cosine": self.min_cosine, "cosine": clean(self.cosine),
                "sqnr_db": clean(self.sqnr_db), "all_int8_cosine": clean(self.all_int8_cosine),
                "all_int8_sqnr_db": clean(self.all_int8_sqnr_db), "float_layers": self.float_layers,
                "steps": self.steps, "layers": [r.as_dict() for r in self.layers]}

    def table(self) -> str:
        rows = [f"  {'layer':<20} {'kind':<7} {'precision':<9} {'cosine':>9} {'SQNR dB':>8} "
                f"{'layer cos':>9} {'layer SQNR':>10}  (sensitivity: only this layer in int8)"]
        for r in self.layers:
            note = f"  fallback {r.fallback_step}" if r.fallback_step else ("  excluded" if r.reason == "excluded" else "")
            rows.append(f"  {r.name:<20} {r.kind:<7} {r.precision:<9} {_fmt(r.cosine, 6):>9} {_fmt(r.sqnr_db, 1):>8} "
                        f"{_fmt(r.layer_cosine, 6):>9} {_fmt(r.layer_sqnr_db, 1):>10}{note}")
        n8, nf = len(self.int8_layers), len(self.float_layers)
        target = f" (target >= {self.min_cosine})" if self.min_cosine is not None else ""
        rows.append(f"  model: {n8} layer(s) int8, {nf} float; output cosine {_fmt(self.cosine, 6)}{target}, "
                    f"SQNR {_fmt(self.sqnr_db, 1)} dB; all int8: cosine {_fmt(self.all_int8_cosine, 6)}, "
                    f"SQNR {_fmt(self.all_int8_sqnr_db, 1)} dB; {self.samples} sample(s)")
        return "\n".join(rows)


def _fmt(v: float, digits: int) -> str:
    if math.isnan(v):
        return "-"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.{digits}f}"


def _outputs(module: ModuleOp, samples: Samples, entry: str,
             on_op: Callable[[int, Operation, list[np.ndarray]], None] | None = None) -> list[list[np.ndarray]]:
    return [run_module(module, s, entry=entry, on_op=on_op) for s in samples]


def _compare(reference: list[list[np.ndarray]], outputs: list[list[np.ndarray]]) -> tuple[float, float]:
    """(min cosine, min SQNR) over the outputs, each over all samples."""
    cosines, sqnrs = [], []
    for k in range(len(reference[0])):
        ref = np.concatenate([np.asarray(r[k], np.float64).reshape(-1) for r in reference])
        out = np.concatenate([np.asarray(o[k], np.float64).reshape(-1) for o in outputs])
        cosines.append(cosine(ref, out))
        sqnrs.append(sqnr_db(ref, out))
    return min(cosines), min(sqnrs)


def build_quantized(module: ModuleOp, table: CalibrationTable, exclude: Collection[str] = (),
                    ops: Collection[str] = tuple(QUANTIZABLE), entry: str = "main") -> ModuleOp:
    """A clone of `module` with every quantizable layer not in `exclude` as an integer kernel."""
    q = module.clone()
    quantize_qdq(q, table, exclude, ops, entry)
    quantize_kernels(q)
    return q


def quantize_model(
    module: ModuleOp,
    table: CalibrationTable,
    samples: Samples | None = None,
    *,
    min_cosine: float | None = None,
    exclude: Collection[str] = (),
    ops: Collection[str] = tuple(QUANTIZABLE),
    entry: str = "main",
    progress: Callable[[str], None] | None = None,
) -> tuple[ModuleOp, QuantizationReport]:
    """Quantize `module` (a float model, prepared as it was for calibration) to int8; with
    `samples`, measure every layer's sensitivity and, with `min_cosine`, keep the most
    sensitive layers in float until the model's output cosine reaches it."""
    say = progress or (lambda _msg: None)
    if min_cosine is not None and not samples:
        raise CalibrationError("a cosine target needs calibration samples (an .npz), not only a calibration table")
    if min_cosine is not None and not 0 < min_cosine <= 1:
        raise CalibrationError(f"min_cosine must be in (0, 1], got {min_cosine}")
    candidates = quantizable_layers(module, ops, entry)
    unknown = [n for n in exclude if n not in candidates]
    if unknown:
        raise CalibrationError(f"exclude names no quantizable layer: {', '.join(unknown)} "
                               f"(layers: {', '.join(candidates) or 'none'})")
    reports = {name: LayerReport(name, op.name.split(".", 1)[-1]) for name, op in candidates.items()}
    for name in exclude:
        reports[name].precision, reports[name].reason = "float", "excluded"
    report = QuantizationReport(list(reports.values()), len(samples or ()), min_cosine)
    if not samples:
        return build_quantized(module, table, exclude, ops, entry), report

    say(f"float reference on {len(samples)} sample(s)")
    fn = module_entry(module, entry)
    float_names = layer_names(fn)
    float_layer_values: dict[str, list[np.ndarray]] = {n: [] for n in candidates}

    def keep_float(_i: int, op: Operation, results: list[np.ndarray]) -> None:
        name = float_names.get(op)
        if name in float_layer_values:
            float_layer_values[name].append(results[0])

    reference = _outputs(module, samples, entry, keep_float)
    everything = [n for n in candidates if n not in exclude]
    for i, name in enumerate(everything):
        say(f"sensitivity {i + 1}/{len(everything)}: {name} alone in int8")
        alone = build_quantized(module, table, [n for n in candidates if n != name], ops, entry)
        layer_values: list[np.ndarray] = []

        def keep_layer(_i: int, op: Operation, results: list[np.ndarray], name: str = name) -> None:
            tag = op.attributes.get(NAME_ATTR)
            if isinstance(tag, StringAttr) and tag.data == name and results[0].dtype.kind == "f":
                layer_values.append(results[0])

        r = reports[name]
        r.cosine, r.sqnr_db = _compare(reference, _outputs(alone, samples, entry, keep_layer))
        if len(layer_values) == len(samples):
            r.layer_cosine, r.layer_sqnr_db = _compare([[v] for v in float_layer_values[name]],
                                                       [[v] for v in layer_values])

    excluded = list(exclude)
    by_sensitivity = sorted(everything, key=lambda n: (reports[n].cosine, reports[n].sqnr_db))
    while True:
        say(f"model with {len(candidates) - len(excluded)} int8 layer(s)")
        quantized = build_quantized(module, table, excluded, ops, entry)
        cos, sqnr = _compare(reference, _outputs(quantized, samples, entry))
        if not report.steps:
            report.all_int8_cosine, report.all_int8_sqnr_db = cos, sqnr
        report.steps.append({"float_layers": list(excluded), "cosine": cos, "sqnr_db": sqnr if math.isfinite(sqnr) else None})
        report.cosine, report.sqnr_db = cos, sqnr
        remaining = [n for n in by_sensitivity if n not in excluded]
        if min_cosine is None or cos >= min_cosine or not remaining:
            return quantized, report
        victim = remaining[0]
        excluded.append(victim)
        reports[victim].precision, reports[victim].reason = "float", "search"
        reports[victim].fallback_step = len(excluded) - len(exclude)


__all__ = ["LayerReport", "QuantizationReport", "build_quantized", "cosine", "quantize_model", "sqnr_db"]
