"""The mixed-precision search: a layer made sensitive on purpose (its input carries one huge
channel the layer ignores, so int8 activations of that tensor lose everything else) is the one
kept in float, and the model then meets the cosine target."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects import graph as g
from infer.frontend.builder import GraphBuilder
from infer.passes.quantize import CalibrationError, calibrate_module
from infer.passes.quantize.mixed_precision import cosine, quantize_model


def _planted_model():
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", (32, 16), np.float32)
    w0 = rng.standard_normal((16, 16)).astype(np.float32) * 0.3
    b0 = np.zeros(16, np.float32)
    w0[3] = 0.0
    b0[3] = 400.0  # channel 3 of linear_0's output: a constant 400
    w1 = rng.standard_normal((16, 16)).astype(np.float32) * 0.3
    w1[:, 3] = 0.0  # ... which linear_1 does not read
    w2 = rng.standard_normal((8, 16)).astype(np.float32) * 0.3
    h = b.op(g.ReluOp, [b.op(g.LinearOp, [x, b.weight("fc0.weight", w0), b.weight("fc0.bias", b0)])])
    h = b.op(g.ReluOp, [b.op(g.LinearOp, [h, b.weight("fc1.weight", w1)])])
    y = b.op(g.LinearOp, [h, b.weight("fc2.weight", w2)])
    return b.finish([y], ["y"])


def test_search_falls_back_the_planted_sensitive_layer() -> None:
    module = _planted_model()
    rng = np.random.default_rng(1)
    samples = [{"x": rng.standard_normal((32, 16)).astype(np.float32)} for _ in range(4)]
    table = calibrate_module(module, samples, "minmax")
    quantized, report = quantize_model(module, table, samples, min_cosine=0.99)

    by_name = {r.name: r for r in report.layers}
    assert list(by_name) == ["linear_0", "linear_1", "linear_2"]
    assert by_name["linear_1"].cosine < 0.9 < min(by_name["linear_0"].cosine, by_name["linear_2"].cosine)
    assert by_name["linear_1"].layer_sqnr_db < 10 < by_name["linear_0"].layer_sqnr_db
    assert report.all_int8_cosine < 0.99 <= report.cosine
    assert report.float_layers == ["linear_1"] and by_name["linear_1"].fallback_step == 1
    assert report.int8_layers == ["linear_0", "linear_2"] and report.met
    kinds = [op.name for op in quantized.walk() if isinstance(op, g.GraphOp)]
    assert kinds.count("graph.linear_integer") == 2 and kinds.count("graph.linear") == 1

    # the report's cosine is the quantized module's own, checked independently
    from infer.dialects.graph_interpreter import run_module

    ref = np.concatenate([run_module(module, s)[0].reshape(-1) for s in samples])
    got = np.concatenate([run_module(quantized, s)[0].reshape(-1) for s in samples])
    assert cosine(ref, got) == pytest.approx(report.cosine, abs=1e-12)
    assert "linear_1" in report.table() and "fallback 1" in report.table()


def test_without_a_target_every_layer_is_int8_and_the_target_needs_samples() -> None:
    module = _planted_model()
    rng = np.random.default_rng(2)
    samples = [{"x": rng.standard_normal((32, 16)).astype(np.float32)} for _ in range(2)]
    table = calibrate_module(module, samples, "minmax")
    _, report = quantize_model(module, table, samples)
    assert report.float_layers == [] and report.cosine == report.all_int8_cosine < 0.99
    _, report = quantize_model(module, table, exclude=["linear_1"])
    assert report.float_layers == ["linear_1"] and report.layers[1].reason == "excluded"
    with pytest.raises(CalibrationError, match="a cosine target needs calibration samples"):
        quantize_model(module, table, None, min_cosine=0.99)
    with pytest.raises(CalibrationError, match=r"exclude names no quantizable layer: conv2d_0 \(layers: linear_0, linear_1, linear_2\)"):
        quantize_model(module, table, samples, exclude=["conv2d_0"])
