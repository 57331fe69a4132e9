"""PNG plots of serving results (matplotlib, Agg backend: no display needed).

plot_latency_cdfs(reports, path): TTFT, TPOT and end-to-end latency CDFs, one line per report.
plot_sweep(points, path): throughput and p99 TPOT / TTFT against request rate, one line per
(target, policy) of a sweep.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_latency_cdfs(reports: Mapping[str, Any], path: str | os.PathLike[str], title: str = "") -> None:
    """reports: label -> ServingReport (ttft_s, tpot_s, e2e_s lists)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (attr, name) in zip(axes, (("ttft_s", "time to first token"), ("tpot_s", "time per output token"),
                                       ("e2e_s", "end-to-end latency")), strict=True):
        for label, rep in reports.items():
            x = np.sort(np.asarray(getattr(rep, attr), dtype=np.float64)) * 1e3
            if x.size:
                ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=label)
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.set_xscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "latency CDFs")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_sweep(points: Sequence[Mapping[str, Any]], path: str | os.PathLike[str], title: str = "") -> None:
    """points: sweep summaries with rate, target, policy and the metrics."""
    plt = _pyplot()
    series: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for p in points:
        series[f"{p['target']} {p['policy']}"].append(p)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    panels = (("throughput_tokens_per_s", "throughput (output tokens/s)", 1.0),
              ("tpot_p99_s", "p99 time per output token (ms)", 1e3),
              ("ttft_p99_s", "p99 time to first token (ms)", 1e3))
    for ax, (key, label, scale) in zip(axes, panels, strict=True):
        for name, pts in sorted(series.items()):
            pts = sorted(pts, key=lambda p: p["rate"])
            xs = [p["rate"] for p in pts if p.get(key) is not None]
            ys = [p[key] * scale for p in pts if p.get(key) is not None]
            ax.plot(xs, ys, marker="o", label=name)
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(label)
        ax.set_xscale("log")
        if key != "throughput_tokens_per_s":
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "serving sweep")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
