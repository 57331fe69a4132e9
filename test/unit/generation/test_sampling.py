"""Sampling against transformers' logits processors (temperature, top-k, top-p)."""

from __future__ import annotations

import numpy as np
import pytest

from infer.generation import GenerationError, Sampler, SamplingError, SamplingOptions

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _reference_probs(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None) -> np.ndarray:
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    scores = torch.from_numpy(logits.astype(np.float64))[None]
    ids = torch.zeros((1, 1), dtype=torch.long)
    scores = TemperatureLogitsWarper(temperature)(ids, scores)
    if top_k is not None:
        scores = TopKLogitsWarper(top_k)(ids, scores)
    if top_p is not None:
        scores = TopPLogitsWarper(top_p)(ids, scores)
    return torch.softmax(scores, dim=-1)[0].numpy()


@pytest.mark.parametrize("temperature, top_k, top_p", [
    (1.0, None, None), (0.7, None, None), (1.3, 5, None), (0.8, None, 0.9), (1.0, 20, 0.5), (0.5, 1, None),
    (2.0, None, 0.01),
])
def test_distribution_matches_transformers(temperature, top_k, top_p):
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal(64) * 3).astype(np.float32)
    logits[7] = logits[9] = logits.max() + 0.5  # a tie at the top
    ours = Sampler(SamplingOptions(temperature, top_k, top_p, seed=0)).probabilities(logits)
    ref = _reference_probs(logits, temperature, top_k, top_p)
    np.testing.assert_allclose(ours, ref, atol=1e-12)
    assert np.array_equal(ours > 0, ref > 0)


def test_draws_follow_the_distribution_and_the_seed():
    logits = np.log(np.array([0.5, 0.25, 0.125, 0.0625, 0.0625], np.float32))
    s = Sampler(SamplingOptions(1.0, seed=42))
    draws = np.array([s(logits) for _ in range(20000)])
    freq = np.bincount(draws, minlength=5) / draws.size
    np.testing.assert_allclose(freq, [0.5, 0.25, 0.125, 0.0625, 0.0625], atol=0.015)
    again = Sampler(SamplingOptions(1.0, seed=42))
    assert [again(logits) for _ in range(50)] == draws[:50].tolist()
    other = Sampler(SamplingOptions(1.0, seed=43))
    assert [other(logits) for _ in range(50)] != draws[:50].tolist()
    top2 = Sampler(SamplingOptions(1.0, top_k=2, seed=0))
    assert set(top2(logits) for _ in range(200)) == {0, 1}


def test_greedy_is_the_first_maximum():
    logits = np.array([0.0, 3.0, 1.0, 3.0], np.float32)
    assert Sampler(SamplingOptions())(logits) == int(torch.argmax(torch.from_numpy(logits))) == 1


@pytest.mark.parametrize("options, message", [
    (dict(temperature=-1.0), "temperature must be >= 0"),
    (dict(temperature=1.0, top_k=0), "top_k must be >= 1"),
    (dict(temperature=1.0, top_p=0.0), r"top_p must be in \(0, 1\]"),
    (dict(temperature=1.0, top_p=1.5), r"top_p must be in \(0, 1\]"),
])
def test_bad_options(options, message):
    with pytest.raises(SamplingError, match=message):
        SamplingOptions(**options)
    assert issubclass(SamplingError, ValueError) and not issubclass(SamplingError, GenerationError)
