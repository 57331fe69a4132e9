"""Next-token sampling shared by every executor: greedy, temperature, top-k, top-p.

    sampler = Sampler(SamplingOptions(temperature=0.7, top_k=50, top_p=0.9, seed=0))
    token = sampler(logits)            # logits: [vocab] for one sequence

temperature 0 is greedy (the first index of the largest logit, as torch.argmax
picks). Otherwise, as transformers' logits processors apply them: logits / T,
then top-k keeps the logits >= the k-th largest, then top-p keeps the most
probable tokens whose probabilities sum to >= p (at least one), and one token
is drawn from the softmax of what is kept with a `numpy.random.Generator`
seeded by `seed` (the same seed gives the same tokens on every executor).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class SamplingError(ValueError):
    """Sampling options out of range."""


@dataclass(frozen=True)
class SamplingOptions:
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0 and np.isfinite(self.temperature)):
            raise SamplingError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise SamplingError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise SamplingError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class Sampler:
    """Draws the next token of one sequence from its logits."""

    def __init__(self, options: SamplingOptions):
        self.options = options
        self.rng = np.random.default_rng(options.seed)

    def __call__(self, logits: np.ndarray) -> int:
        logits = np.asarray(logits).reshape(-1)
        if self.options.greedy:
            return int(np.argmax(logits))
        return int(self._draw(self.probabilities(logits)))

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """The distribution a token is drawn from (float64, zeros where filtered out)."""
        o = self.options
        scores = np.asarray(logits, dtype=np.float64).reshape(-1) / o.temperature
        keep = ~np.isnan(scores)
        if o.top_k is not None and o.top_k < scores.size:
            kth = np.partition(scores, -o.top_k)[-o.top_k]
            keep &= scores >= kth
        scores = np.where(keep, scores, -np.inf)
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        if o.top_p is not None and o.top_p < 1.0:
            # ascending, as transformers' TopPLogitsWarper; among equal probabilities the lower
            # token id comes last, so it is the one kept (as greedy keeps the first maximum)
            order = np.lexsort((-np.arange(probs.size), probs))
            tail = np.cumsum(probs[order])
            drop = tail <= 1.0 - o.top_p
            drop[-1] = False  # always keep the most probable token
            probs[order[drop]] = 0.0
            probs /= probs.sum()
        return probs

    def _draw(self, probs: np.ndarray) -> int:
        cdf = np.cumsum(probs)
        u = self.rng.random() * cdf[-1]
        return int(min(np.searchsorted(cdf, u, side="right"), probs.size - 1))


__all__ = ["Sampler", "SamplingError", "SamplingOptions"]
