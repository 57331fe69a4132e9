"""Serving metrics from an engine run: latency percentiles, throughput, batch sizes, KV use.

TTFT (time to first token) = first token time - arrival. TPOT (time per output token)
= (finish - first token) / (output tokens - 1), for requests with more than one output
token. E2E latency = finish - arrival. Throughput = output tokens of completed requests /
the simulated time from the first arrival to the last step's end. KV utilisation and
waste are averaged over steps weighted by step duration; waste is the fraction of
allocated KV slots that hold no token. `lost` counts requests that did not complete.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infer.serving.engine import EngineResult

PERCENTILES = (50, 90, 99)


def _pcts(prefix: str, values: list[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    arr = np.asarray(values, dtype=np.float64)
    for p in PERCENTILES:
        out[f"{prefix}_p{p}_s"] = float(np.percentile(arr, p)) if arr.size else None
    out[f"{prefix}_mean_s"] = float(arr.mean()) if arr.size else None
    return out


@dataclass
class ServingReport:
    summary: dict[str, Any]
    ttft_s: list[float] = field(default_factory=list)
    tpot_s: list[float] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)

    def __getitem__(self, key: str) -> Any:
        return self.summary[key]

    def as_dict(self, per_request: bool = True) -> dict[str, Any]:
        d = dict(self.summary)
        if per_request:
            d["latencies_s"] = {"ttft": self.ttft_s, "tpot": self.tpot_s, "e2e": self.e2e_s}
        return d

    def table(self) -> str:
        s = self.summary

        def ms(v):
            return "-" if v is None else f"{v * 1e3:10.3f}"

        lines = [
            f"serving simulation: {s['model']} on {s['target']}, policy {s['policy']}",
            f"  step costs: {s['cost_source']}",
            f"  requests {s['requests']}: completed {s['completed']}, lost {s['lost']}, "
            f"preemptions {s['preemptions']}",
            f"  simulated time {s['sim_time_s']:.3f} s in {s['steps']} steps; throughput "
            f"{s['throughput_tokens_per_s']:.1f} output tokens/s ({s['throughput_requests_per_s']:.3f} req/s)",
            f"  batch size: mean {s['batch_size_mean']:.1f}, max {s['batch_size_max']}",
            f"  KV cache: {s['kv_blocks']} blocks of {s['block_size']} tokens; utilisation mean "
            f"{s['kv_utilization_mean'] * 100:.1f} %, peak {s['kv_utilization_peak'] * 100:.1f} %; "
            f"waste {s['kv_waste_mean'] * 100:.2f} % of allocated slots",
            "",
            f"  {'latency (ms)':14}{'p50':>10}{'p90':>10}{'p99':>10}{'mean':>10}",
        ]
        for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("end-to-end", "e2e")):
            lines.append(f"  {name:14}" + "".join(ms(s[f"{key}_{q}_s"]) for q in ("p50", "p90", "p99", "mean")))
        return "\n".join(lines)


def build_report(result: EngineResult, *, policy: str, target: str, model: str, kv_blocks: int,
                 block_size: int, requests: int | None = None, extra: dict[str, Any] | None = None) -> ServingReport:
    done = result.finished
    ttft = [r.first_token_s - r.arrival_s for r in done]
    tpot = [(r.finish_s - r.first_token_s) / (r.num_output_tokens - 1) for r in done if r.num_output_tokens > 1]
    e2e = [r.finish_s - r.arrival_s for r in done]
    starts = [r.arrival_s for r in (*done, *result.unfinished)]
    t0 = min(starts) if starts else 0.0
    span = max(result.end_s - t0, 0.0)
    out_tokens = sum(r.num_output_tokens for r in done)
    steps = result.steps
    total_time = sum(s.duration_s for s in steps)
    if steps:
        w = np.array([s.duration_s for s in steps]) if total_time > 0 else np.ones(len(steps))
        w = w / w.sum()
        util = np.array([s.kv_utilization for s in steps])
        waste = np.array([s.kv_waste for s in steps])
        batch = np.array([s.batch_size for s in steps])
        util_mean, util_peak = float(w @ util), float(util.max())
        waste_mean = float(w @ waste)
        batch_mean, batch_max = float(batch.mean()), int(batch.max())
    else:
        util_mean = util_peak = waste_mean = batch_mean = 0.0
        batch_max = 0
    summary: dict[str, Any] = {
        "model": model, "target": target, "policy": policy, "cost_source": result.cost_source,
        "requests": requests if requests is not None else len(done) + len(result.unfinished),
        "completed": len(done), "lost": len(result.unfinished), "preemptions": result.preemptions,
        "sim_time_s": span, "steps": len(steps),
        "output_tokens": out_tokens,
        "throughput_tokens_per_s": out_tokens / span if span > 0 else 0.0,
        "throughput_requests_per_s": len(done) / span if span > 0 else 0.0,
        **_pcts("ttft", ttft), **_pcts("tpot", tpot), **_pcts("e2e", e2e),
        "batch_size_mean": batch_mean, "batch_size_max": batch_max,
        "kv_blocks": kv_blocks, "block_size": block_size,
        "kv_utilization_mean": util_mean, "kv_utilization_peak": util_peak, "kv_waste_mean": waste_mean,
        "scheduler_host_s_per_step": result.host_seconds / len(steps) if steps else 0.0,
    }
    if extra:
        summary.update(extra)
    return ServingReport(summary, ttft, tpot, e2e)
