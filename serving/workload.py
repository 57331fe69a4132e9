"""Request workloads: JSONL traces and generated Poisson workloads.

Trace (one JSON object per line; blank lines are skipped):

    {"arrival_s": 0.0, "prompt_tokens": 120, "output_tokens": 40}

arrival_s >= 0 (seconds from the start), prompt_tokens >= 1, output_tokens >= 1 (integers).
Any other problem is a `TraceError` naming the file, the line and what is wrong.

Generated (`poisson_workload`): arrivals of a Poisson process at `rate` requests per second
(exponential gaps), prompt and output lengths from a log-normal distribution (median and
sigma; sigma 0 gives a fixed length; long-tailed for sigma around 1), clipped to
[1, max] so that prompt + output fits the context; seeded with numpy's default_rng.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from infer.serving.request import Request

TRACE_KEYS = {"arrival_s": (int, float), "prompt_tokens": (int,), "output_tokens": (int,)}


class TraceError(ValueError):
    """A malformed trace: the message names file:line and what is wrong."""


class WorkloadError(ValueError):
    """Bad workload options (a rate <= 0, a negative count, ...)."""


@dataclass(frozen=True)
class RequestSpec:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    origin: str = ""          # where it came from (trace file:line), for error messages

    def to_request(self, request_id: int) -> Request:
        return Request(request_id, self.prompt_tokens, self.output_tokens, self.arrival_s)


def parse_trace_line(text: str, where: str) -> RequestSpec:
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise TraceError(f"{where}: not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: expected a JSON object like "
                         '{"arrival_s": 0.0, "prompt_tokens": 120, "output_tokens": 40}, got ' + type(obj).__name__)
    for key, types in TRACE_KEYS.items():
        if key not in obj:
            raise TraceError(f"{where}: missing \"{key}\" (each line needs arrival_s, prompt_tokens, output_tokens)")
        v = obj[key]
        if isinstance(v, bool) or not isinstance(v, types):
            kind = "a number" if float in types else "an integer"
            raise TraceError(f"{where}: \"{key}\" must be {kind}, got {json.dumps(v)}")
    unknown = sorted(set(obj) - set(TRACE_KEYS))
    if unknown:
        raise TraceError(f"{where}: unknown key \"{unknown[0]}\" (known: {', '.join(TRACE_KEYS)})")
    arrival = float(obj["arrival_s"])
    if not math.isfinite(arrival) or arrival < 0:
        raise TraceError(f"{where}: \"arrival_s\" must be a finite number >= 0, got {obj['arrival_s']}")
    for key in ("prompt_tokens", "output_tokens"):
        if obj[key] < 1:
            raise TraceError(f"{where}: \"{key}\" must be >= 1, got {obj[key]}")
    return RequestSpec(arrival, obj["prompt_tokens"], obj["output_tokens"], where)


def read_trace(path: str | os.PathLike[str]) -> list[RequestSpec]:
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{p}: cannot read the trace: {e}") from None
    specs = [parse_trace_line(line, f"{p}:{n}") for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not specs:
        raise TraceError(f"{p}: the trace has no requests")
    return specs


def write_trace(path: str | os.PathLike[str], specs: list[RequestSpec]) -> None:
    with open(path, "w") as f:
        for s in specs:
            f.write(json.dumps({"arrival_s": s.arrival_s, "prompt_tokens": s.prompt_tokens,
                                "output_tokens": s.output_tokens}) + "\n")


@dataclass(frozen=True)
class LengthDist:
    """Log-normal lengths: median * exp(sigma * N(0, 1)), rounded, clipped to [1, max]."""

    median: float
    sigma: float = 1.0

    def __post_init__(self):
        if not self.median >= 1:
            raise WorkloadError(f"a length median must be >= 1, got {self.median}")
        if not self.sigma >= 0:
            raise WorkloadError(f"a length sigma must be >= 0, got {self.sigma}")

    def sample(self, rng: np.random.Generator, n: int, max_len: int) -> np.ndarray:
        x = self.median * np.exp(self.sigma * rng.standard_normal(n))
        return np.clip(np.rint(x), 1, max_len).astype(np.int64)


def poisson_workload(rate: float, num_requests: int, prompt: LengthDist, output: LengthDist,
                     max_context: int, seed: int = 0) -> list[RequestSpec]:
    """Poisson arrivals at `rate` req/s; prompt + output <= max_context (output clipped first)."""
    if not (isinstance(rate, int | float) and math.isfinite(rate) and rate > 0):
        raise WorkloadError(f"--rate must be > 0 requests per second, got {rate}")
    if num_requests < 1:
        raise WorkloadError(f"--num-requests must be >= 1, got {num_requests}")
    if max_context < 2:
        raise WorkloadError(f"the context ({max_context}) must hold at least 2 tokens")
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, num_requests))
    arrivals -= arrivals[0]
    prompts = prompt.sample(rng, num_requests, max_context - 1)
    outputs = output.sample(rng, num_requests, max_context - 1)
    outputs = np.minimum(outputs, max_context - prompts)
    return [RequestSpec(float(a), int(p), int(o)) for a, p, o in zip(arrivals, prompts, outputs, strict=True)]
