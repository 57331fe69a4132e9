"""bench/bench_scalesim.py's comparison on small layers: SCALE-Sim (the PyPI package, as a
library) against the closed form of its weight-stationary model, and our simulator on the same
mapping and on the compiled layer (docs/hardware-feedback.md)."""

from __future__ import annotations

import math

import bench_scalesim as bench  # bench/ is on the test path (pyproject.toml)
import pytest

from infer.target.hw import load_config

def scalesim_closed_form(T: int, K: int, N: int, R: int, C: int) -> int:
    """SCALE-Sim's ws timing (its systolic_compute_ws demand matrices): every fold (a K x N
    weight tile of at most R x C) takes R cycles to fill the weights, T rows to stream, and
    R - 1 + C - 1 cycles of skew and drain; folds do not overlap."""
    return math.ceil(K / R) * math.ceil(N / C) * (2 * R + C + T - 2)


@pytest.mark.parametrize("target", ["edge", "server"])
def test_scalesim_matches_its_closed_form(target):
    cfg = load_config(target)
    R, C = cfg.matrix.rows, cfg.matrix.cols
    gemm = bench.Layer("gemm", 40, 3 * R + 5, C + 7)  # partial row and column folds
    assert bench.scalesim_cycles(gemm, R, C) == scalesim_closed_form(40, 3 * R + 5, C + 7, R, C)
    # a padded, strided conv: SCALE-Sim's im2col sees the same output pixels and window
    conv = bench.conv_layer("conv", 8, 11, 11, 24, 3, 2, 1)
    assert (conv.T, conv.K, conv.N) == (36, 72, 24)
    assert bench.scalesim_cycles(conv, R, C) == scalesim_closed_form(36, 72, 24, R, C)


def test_gemm_layer_through_both():
    """One small GEMM on the edge array: our simulator, given SCALE-Sim's mapping and its
    assumptions (serial folds, one weight row per cycle), is within 2 cycles per fold of
    SCALE-Sim (our fill_drain is R + C, SCALE-Sim's skew and drain R + C - 2); pipelined as the
    ISA runs it, the folds cost their streaming rows plus one weight load and one fill/drain;
    the compiled layer's matmuls stream exactly SCALE-Sim's T x folds rows."""
    cfg = load_config("edge")
    R, C = cfg.matrix.rows, cfg.matrix.cols
    layer = bench.Layer("gemm", 48, 2 * R, 2 * C)
    row = bench.compare(layer, "edge")
    folds = 4
    assert row.folds == folds and row.ideal == 48 * folds
    assert row.scalesim == scalesim_closed_form(48, 2 * R, 2 * C, R, C)
    assert 0 <= row.serial - row.scalesim <= 3 * folds, (row.serial, row.scalesim)
    first_load = R * C * 2 // cfg.matrix.weight_load_bytes_per_cycle
    assert row.ideal + first_load + cfg.matrix.fill_drain_cycles <= row.pipelined \
        <= row.ideal + first_load + cfg.matrix.fill_drain_cycles + 8
    assert row.compiled == row.ideal and row.mapping == 0.0
    assert row.diff == pytest.approx(100 * (row.ideal - row.scalesim) / row.scalesim)
    assert row.overhead == pytest.approx(-100 * folds * (2 * R + C - 2) / row.scalesim)
