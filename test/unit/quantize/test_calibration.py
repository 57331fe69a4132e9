"""Calibration: each method's threshold on a skewed distribution, the table file (readable,
editable, validated) and bad calibration data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from infer.dialects.ir_io import make_context, parse_ir
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.quantize import CalibrationError, CalibrationTable, calibrate_module, quantize_qdq, split_samples
from infer.passes.quantize.calibration import threshold_entropy, threshold_mse, threshold_percentile

MODEL = """
func.func @main(%x: tensor<128x128xf32> {graph.name = "x"}) -> (tensor<128x128xf32> {graph.name = "y"}) {
  %two = graph.constant dense<2.0> : tensor<f32>
  %y = graph.mul %x, %two : (tensor<128x128xf32>, tensor<f32>) -> tensor<128x128xf32>
  %r = graph.relu %y : (tensor<128x128xf32>) -> tensor<128x128xf32>
  func.return %r : tensor<128x128xf32>
}
"""


def _module(text: str = MODEL):
    module = parse_ir(make_context(), text, "model.mlir")
    attach_weights(module, WeightStore())
    return module


def _skewed(n_samples: int = 4, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """A long right tail: lognormal values, a third of them negative and smaller, and one
    far outlier per sample (under 0.01 % of the values)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_samples):
        x = rng.lognormal(0.0, 0.75, (128, 128)).astype(np.float32)
        x[rng.random((128, 128)) < 0.33] *= -0.3
        x.reshape(-1)[rng.integers(x.size)] = rng.uniform(40, 60)
        out.append({"x": x})
    return out


def test_each_method_picks_a_different_range_on_a_skewed_distribution() -> None:
    samples = _skewed()
    module = _module()
    tables = {m: calibrate_module(module, samples, m) for m in ("minmax", "percentile", "entropy", "mse")}
    absx = np.abs(np.concatenate([s["x"].reshape(-1) for s in samples]))
    thresholds = {m: t.tensors["x"].threshold for m, t in tables.items()}
    # minmax is the largest |x| exactly; the histogram methods clip the outliers, each its own way
    assert thresholds["minmax"] == pytest.approx(float(absx.max()), rel=0, abs=0)
    width = absx.max() / 2048
    t = thresholds["percentile"]  # the bin edge where 99.99 % of |x| lie below
    assert np.mean(absx <= t * (1 + 1e-6)) >= 0.9999 > np.mean(absx < t - width * (1 + 1e-3))
    assert len({round(v, 6) for v in thresholds.values()}) == 4, thresholds
    # percentile and entropy clip the outliers; mse keeps them (clipping four values by ~45
    # costs more squared error than the coarser rounding of all the others) but not all the way
    assert max(thresholds["percentile"], thresholds["entropy"]) < 0.5 * thresholds["minmax"]
    assert thresholds["entropy"] < thresholds["percentile"] < thresholds["mse"] < thresholds["minmax"]
    # y = 2x: every method scales with the tensor (min/max observed exactly)
    for m, t in tables.items():
        y, r = t.tensors["mul_0"], t.tensors["relu_0"]
        assert (y.min, y.max) == (pytest.approx(2 * min(s["x"].min() for s in samples)),
                                  pytest.approx(2 * max(s["x"].max() for s in samples)))
        assert r.min == 0.0 and r.max == y.max
        assert y.threshold == pytest.approx(2 * thresholds[m], rel=2e-3), m
        assert y.method == m


def test_histogram_thresholds_on_known_distributions() -> None:
    rng = np.random.default_rng(1)
    a = np.abs(rng.standard_normal(1_000_000))
    hist, _ = np.histogram(a, bins=2048, range=(0, a.max()))
    width = a.max() / 2048
    assert threshold_percentile(hist, width, 99.0) == pytest.approx(np.percentile(a, 99.0), abs=width)
    # the squared-error optimum of 8-bit symmetric quantization of N(0, 1) is near 4 sigma
    assert 3.3 < threshold_mse(hist, width) < 4.3
    # a distribution whose every nonzero value sits in one bin below the max cannot be
    # clipped into a point mass (the KL of two point masses is 0)
    spikes = np.zeros(2048)
    spikes[128::128] = 100.0
    assert threshold_entropy(spikes, 1.0 / 2048) == pytest.approx(1921 / 2048)  # the last spike kept


def test_table_file_roundtrip_and_edits(tmp_path) -> None:
    module = _module()
    table = calibrate_module(module, _skewed(2), "minmax", model="model.mlir")
    path = table.save(tmp_path / "model.calib.json")
    doc = json.loads(path.read_text())
    assert doc["format"] == "infer-calibration/1" and doc["inputs"] == {"x": {"shape": [128, 128], "dtype": "float32"}}
    assert [t["name"] for t in doc["tensors"]] == ["x", "mul_0", "relu_0"]
    assert set(doc["tensors"][0]) == {"name", "min", "max", "threshold", "method"}
    # a user edits a threshold: the quantization uses it (scale = threshold / 127)
    doc["tensors"][0]["threshold"] = 12.7
    path.write_text(json.dumps(doc))
    edited = CalibrationTable.load(path)
    assert edited.threshold("x") == 12.7 and edited.tensors["mul_0"].threshold == table.tensors["mul_0"].threshold


def test_quantize_uses_the_edited_threshold(tmp_path) -> None:
    from infer.dialects import graph as g
    from infer.dialects.dtypes import dense_to_numpy

    text = """
    func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> tensor<2x3xf32> {
      %w = graph.constant dense<[[1.0, 0.0, 0.0, 0.5], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]> : tensor<3x4xf32>
      %y = graph.linear %x, %w : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
      func.return %y : tensor<2x3xf32>
    }"""
    module = _module(text)
    table = CalibrationTable.from_dict({"format": "infer-calibration/1", "tensors": [
        {"name": "x", "min": -1, "max": 1, "threshold": 2.54, "method": "user"}]})
    quantize_qdq(module, table)
    q = next(op for op in module.walk() if isinstance(op, g.QuantizeLinearOp))
    assert float(dense_to_numpy(q.scale.owner.value)) == np.float32(0.02)


@pytest.mark.parametrize("doc, message", [
    ({"tensors": []}, "not a calibration table"),
    ({"format": "infer-calibration/1", "tensors": [{"name": "x", "min": 0, "max": 1}]}, "\"threshold\" must be a finite number"),
    ({"format": "infer-calibration/1", "tensors": [{"name": "x", "min": 0, "max": 1, "threshold": -1}]}, "must be >= 0"),
    ({"format": "infer-calibration/1", "tensors": [{"name": "x", "min": 0, "max": 1, "threshold": 1},
                                                   {"name": "x", "min": 0, "max": 1, "threshold": 1}]}, "appears twice"),
])
def test_bad_tables_are_one_clear_error(tmp_path, doc, message) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(CalibrationError, match=message):
        CalibrationTable.load(path)
    path.write_text("{not json")
    with pytest.raises(CalibrationError, match=r"t.json:1:2: not a JSON calibration table"):
        CalibrationTable.load(path)


@pytest.mark.parametrize("arrays, message", [
    ({"x": np.zeros((0, 128, 128), np.float32)}, "the calibration set is empty"),
    ({"input": np.zeros((2, 128, 128), np.float32)}, r"do not match the model's inputs \(x\): missing x; not inputs of the model: input"),
    ({"x": np.zeros((128, 128), np.float32)}, r"'x' has shape 128x128; expected N x 128x128"),
    ({"x": np.zeros((2, 128, 127), np.float32)}, r"'x' has shape 2x128x127; expected N x 128x128"),
    ({"x": np.zeros((2, 128, 128), np.int64)}, "'x' is int64 but the model's input is float32"),
])
def test_calibration_data_must_match_the_signature(arrays, message) -> None:
    with pytest.raises(CalibrationError, match=message):
        split_samples(arrays, _module(), "calib.npz")


def test_samples_split_along_the_leading_axis_and_convert_float_widths() -> None:
    x = np.arange(3 * 128 * 128, dtype=np.float64).reshape(3, 128, 128)
    samples = split_samples({"x": x}, _module(), "calib.npz")
    assert len(samples) == 3 and samples[2]["x"].dtype == np.float32
    np.testing.assert_array_equal(samples[1]["x"], x[1].astype(np.float32))
    with pytest.raises(CalibrationError, match="unknown calibration method 'kl'"):
        calibrate_module(_module(), samples, "kl")
