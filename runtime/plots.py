"""PNG plots of one simulator run for hardware engineers (matplotlib, Agg backend).

    from infer.runtime.plots import write_plots
    write_plots(exe.last_report, "plots/")     # roofline.png, timeline.png, time_by_kind.png
    # or: infer run model.npu --plot plots/

* `plot_roofline`: every op with MACs placed on the roofline of the config: arithmetic
  intensity (MACs per DRAM byte) on x, achieved MACs per cycle (MACs / the op's span) on y,
  log-log, under a compute roof for each dtype the run's MACs used (`R x C x` that dtype's
  MACs per PE per cycle: on server int8's roof is twice bf16's) and the DRAM roof (bytes/cycle x
  intensity). Ops without MACs (vector work, data movement) have no place on a MAC roofline:
  the figure counts them and their share of the cycles. The whole run is the black star.
* `plot_timeline`: a Gantt chart of the engines (DMA load, DMA store, matrix, vector): each
  instruction's window from the trace (start to completion), coloured by the op (kernel) it
  belongs to, with the ops' spans on a lane above. Intervals closer than a pixel are merged,
  so a run of millions of instructions draws quickly; the Perfetto trace (`--trace`) stays for
  zooming in.
* `plot_time_by_kind`: cycles by op kind: each kind's summed op spans (share of the run) and its
  busy cycles per engine.

Each takes a `Report` (`Executable.last_report`) or its `as_dict()` (JSON, e.g. from `infer run
--json`); the timeline needs the `Report` of a traced run (the trace events are not in the
dict). Without op markers the whole program is one op. Runtime code: no compiler import.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from infer.target.isa import ENGINES

PathLike = str | os.PathLike[str]
LANES = ("dma_load", "dma_store", "matrix", "vector")  # the scalar front end is not an engine lane


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def run_data(report: Any) -> dict[str, Any]:
    """The numbers the plots read, from a `Report` or its `as_dict()`: config, cycles, macs,
    dram_bytes, peak (MACs/cycle), bandwidth (DRAM bytes/cycle) and ops (dicts with name, kind,
    cycles, macs, dram_bytes, busy cycles per engine)."""
    d = report if isinstance(report, Mapping) else report.as_dict()
    for key in ("peak_macs_per_cycle", "dram_bytes_per_cycle", "cycles", "macs", "dram_bytes"):
        if key not in d:
            raise ValueError(f"not a performance report: '{key}' is missing")
    ops = d.get("ops")
    if not ops:  # no op markers: the whole program is one op
        ops = [{"name": "program", "kind": "program", "cycles": d["cycles"], "macs": d["macs"],
                "dram_bytes": d["dram_bytes"], "busy": dict(d.get("busy_cycles", {}))}]
    base = float(d["peak_macs_per_cycle"])
    by_dtype = d.get("peak_macs_per_cycle_by_dtype") or {}
    # A roof for each dtype the run's MACs used (an int8 program runs under the int8 roof, which
    # on server is twice the bf16 one); the base rate when the report has no breakdown.
    roofs = {dt: float(by_dtype.get(dt, base)) for dt, n in (d.get("macs_by_dtype") or {}).items() if n}
    return {"config": d.get("config", "?"), "cycles": int(d["cycles"]), "macs": int(d["macs"]),
            "dram_bytes": int(d["dram_bytes"]), "peak": max(roofs.values(), default=base),
            "roofs": roofs or {"base": base}, "bandwidth": float(d["dram_bytes_per_cycle"]), "ops": list(ops)}


def kind_colors(kinds) -> dict[str, Any]:
    """A fixed colour per op kind (sorted, tab10), so the plots agree with each other."""
    plt = _pyplot()
    cmap = plt.get_cmap("tab10")
    return {k: cmap(i % 10) for i, k in enumerate(sorted(set(kinds)))}


def _save(fig, path: PathLike) -> Path:
    path = Path(path)
    fig.savefig(path, dpi=100)
    _pyplot().close(fig)
    return path


# ----------------------------------------------------------------------------- roofline
def plot_roofline(report: Any, path: PathLike, title: str = "") -> Path:
    """The roofline of the run's config with every op that does MACs on it (see module doc)."""
    plt = _pyplot()
    r = run_data(report)
    peak, bw = r["peak"], r["bandwidth"]
    ops = [o for o in r["ops"] if o["cycles"] > 0]
    placed = [o for o in ops if o["macs"] > 0 and o["dram_bytes"] > 0]
    unplaced = [o for o in ops if o not in placed]
    colors = kind_colors(o["kind"] for o in ops)
    fig, ax = plt.subplots(figsize=(9, 6))
    xs = [o["macs"] / o["dram_bytes"] for o in placed]
    ys = [o["macs"] / o["cycles"] for o in placed]
    whole = (r["macs"] / r["dram_bytes"], r["macs"] / r["cycles"]) if r["macs"] and r["dram_bytes"] and r["cycles"] \
        else None
    ridge = peak / bw
    pts_x = xs + [ridge] + ([whole[0]] if whole else [])
    lo, hi = min(pts_x) / 4, max(pts_x) * 4
    grid = np.geomspace(lo, hi, 200)
    for dtype, roof in sorted(r["roofs"].items(), key=lambda kv: kv[1]):
        ax.plot(grid, np.minimum(roof, bw * grid), color="black", lw=2 if roof == peak else 1)
        ax.axhline(roof, color="black", ls=":", lw=0.8)
        name = "compute roof" if dtype == "base" else f"{dtype} compute roof"
        ax.text(hi, roof * 1.08, f"{name} {roof:g} MACs/cycle", ha="right", va="bottom", fontsize=9, clip_on=True)
    ax.text(lo * 1.3, bw * lo * 1.3 * 1.8, f"DRAM roof {bw:g} B/cycle", fontsize=9, va="bottom", clip_on=True)
    ax.axvline(ridge, color="grey", ls="--", lw=0.8)
    ax.text(ridge * 1.05, peak / 50, f"ridge {ridge:.3g} MACs/B", color="grey", fontsize=8, rotation=90, clip_on=True)
    total = sum(o["cycles"] for o in ops) or 1
    for kind in sorted({o["kind"] for o in placed}):
        sel = [i for i, o in enumerate(placed) if o["kind"] == kind]
        ax.scatter([xs[i] for i in sel], [ys[i] for i in sel], s=[20 + 600 * placed[i]["cycles"] / total for i in sel],
                   color=colors[kind], alpha=0.75, edgecolor="black", lw=0.5, label=kind, zorder=3)
    for i in sorted(range(len(placed)), key=lambda i: -placed[i]["cycles"])[:5]:
        ax.annotate(placed[i]["name"], (xs[i], ys[i]), textcoords="offset points", xytext=(6, 4), fontsize=7)
    if whole:
        ax.scatter([whole[0]], [whole[1]], marker="*", s=250, color="black", zorder=4, label="whole run")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ymin = min(ys + ([whole[1]] if whole else []) + [bw * lo]) / 2  # both roofs and every point in view
    ax.set_ylim(ymin, peak * 2)
    ax.set_xlabel("arithmetic intensity (MACs per DRAM byte)")
    ax.set_ylabel("achieved MACs per cycle")
    ax.grid(True, which="both", alpha=0.2)
    if placed or whole:
        ax.legend(fontsize=8, loc="lower right")
    if unplaced:
        share = 100 * sum(o["cycles"] for o in unplaced) / total
        ax.text(0.01, 0.99, f"{len(unplaced)} ops without MACs or DRAM traffic (vector work, data movement; "
                f"{share:.0f}% of op cycles) are not placed", transform=ax.transAxes, fontsize=8, va="top")
    ax.set_title(title or f"roofline ({r['config']}): {len(placed)} ops; marker area ~ op cycles")
    fig.tight_layout()
    return _save(fig, path)


# ----------------------------------------------------------------------------- timeline
def _op_of_pc(ops, n_pc: int) -> np.ndarray:
    """Instruction index -> index of the innermost op whose range holds it (-1: none)."""
    owner = np.full(n_pc, -1, np.int64)
    for i in sorted(range(len(ops)), key=lambda i: -(ops[i].end - ops[i].start)):  # inner ranges last
        owner[max(ops[i].start, 0):min(ops[i].end, n_pc)] = i
    return owner


def merged_intervals(start: np.ndarray, end: np.ndarray, key: np.ndarray,
                     tolerance: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge intervals of one lane: consecutive (by start) intervals with the same key whose gap
    is at most `tolerance` become one. Returns (starts, ends, keys)."""
    if start.size == 0:
        return start, end, key
    order = np.argsort(start, kind="stable")
    s, e, k = start[order], end[order], key[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(s.size, bool)
    new[1:] = (k[1:] != k[:-1]) | (s[1:] > reach[:-1] + tolerance)
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first), k[first]


def plot_timeline(report: Any, path: PathLike, title: str = "", legend_ops: int = 12) -> Path:
    """Per-engine Gantt chart of a traced run, coloured by op (see module doc)."""
    plt = _pyplot()
    counters = getattr(report, "counters", None)
    events = counters.events if counters is not None else None
    if not events:
        raise ValueError("the timeline needs the Report of a traced run (Executable.run(..., trace=True)); "
                         "a report dict has no trace events")
    ev = np.array(events, dtype=object)
    eng = ev[:, 0].astype(np.int64)
    start = ev[:, 2].astype(np.int64)
    end = start + np.maximum(ev[:, 3].astype(np.int64), 1)
    pc = ev[:, 4].astype(np.int64)
    ops = report.ops or []
    owner = _op_of_pc(ops, int(pc.max()) + 1)[pc] if ops else np.full(pc.size, -1, np.int64)
    cycles = max(int(end.max()), report.cycles)
    tol = cycles / 3000  # about a pixel of the plot's width
    cmap = plt.get_cmap("tab20")
    color = {i: cmap(i % 20) for i in range(len(ops))}
    color[-1] = (0.6, 0.6, 0.6, 1.0)
    fig, ax = plt.subplots(figsize=(14, 4.5))
    lanes = list(LANES) + ["ops"]
    for row, lane in enumerate(lanes):
        if lane == "ops":
            live = [(i, o) for i, o in enumerate(ops) if o.instructions]
            bars = [(o.first, max(o.cycles, 1)) for _, o in live]
            ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=[color[i] for i, _ in live], edgecolor="black", lw=0.3)
            for (i, o), (x0, w) in zip(live, bars, strict=True):
                if w > cycles / 25:
                    ax.text(x0 + w / 2, row, o.name, ha="center", va="center", fontsize=6, clip_on=True)
            continue
        sel = eng == ENGINES.index(lane)
        s, e, k = merged_intervals(start[sel], end[sel], owner[sel], tol)
        for key in np.unique(k):
            m = k == key
            ax.broken_barh(list(zip(s[m], e[m] - s[m], strict=True)), (row - 0.4, 0.8), facecolors=color[int(key)])
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_xlim(0, cycles)
    ax.set_xlabel("cycle")
    ax.grid(True, axis="x", alpha=0.2)
    top = sorted((i for i, o in enumerate(ops) if o.instructions), key=lambda i: -ops[i].cycles)[:legend_ops]
    if top:
        from matplotlib.patches import Patch

        handles = [Patch(color=color[i], label=f"{ops[i].name} ({ops[i].kind})") for i in top]
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0),
                  title=f"top {len(top)} of {len(ops)} ops", title_fontsize=7)
    c = report.counters
    ax.set_title(title or f"engine timeline ({c.config}): {c.cycles} cycles = {c.seconds * 1e6:.1f} us; "
                 "instruction windows (start to completion) by op")
    fig.tight_layout()
    return _save(fig, path)


# ----------------------------------------------------------------------------- time by kind
def plot_time_by_kind(report: Any, path: PathLike, title: str = "") -> Path:
    """Cycles by op kind: summed op spans (share of the run's cycles) and busy cycles per engine."""
    plt = _pyplot()
    r = run_data(report)
    span: dict[str, int] = defaultdict(int)
    busy: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(LANES, 0))
    count: dict[str, int] = defaultdict(int)
    for o in r["ops"]:
        span[o["kind"]] += int(o["cycles"])
        count[o["kind"]] += 1
        for e in LANES:
            busy[o["kind"]][e] += int(o.get("busy", {}).get(e, 0))
    kinds = sorted(span, key=lambda k: span[k])
    colors = kind_colors(kinds)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 0.45 * len(kinds) + 2.2), sharey=True)
    y = np.arange(len(kinds))
    a1.barh(y, [span[k] for k in kinds], color=[colors[k] for k in kinds], edgecolor="black", lw=0.4)
    for i, k in enumerate(kinds):
        a1.text(span[k], i, f" {span[k]:,}  ({100 * span[k] / max(r['cycles'], 1):.1f}%, {count[k]} ops)",
                va="center", fontsize=8)
    a1.set_yticks(y, kinds)
    a1.set_xlabel("cycles (sum of op spans)")
    a1.set_xlim(0, max(span.values(), default=1) * 1.45)
    a1.set_title(f"time by op kind (run: {r['cycles']:,} cycles)", fontsize=10)
    left = np.zeros(len(kinds))
    engine_colors = {"dma_load": "#4c72b0", "dma_store": "#8172b2", "matrix": "#c44e52", "vector": "#55a868"}
    for e in LANES:
        vals = np.array([busy[k][e] for k in kinds], float)
        a2.barh(y, vals, left=left, color=engine_colors[e], label=e, edgecolor="black", lw=0.3)
        left += vals
    a2.set_xlabel("busy cycles per engine (stacked)")
    a2.legend(fontsize=8, loc="lower right")
    a2.set_title("engine busy cycles by op kind", fontsize=10)
    for ax in (a1, a2):
        ax.grid(True, axis="x", alpha=0.2)
    fig.suptitle(title or f"where the time goes ({r['config']})")
    fig.tight_layout()
    return _save(fig, path)


PLOTS = {"roofline.png": plot_roofline, "timeline.png": plot_timeline, "time_by_kind.png": plot_time_by_kind}


def write_plots(report: Any, out_dir: PathLike) -> list[Path]:
    """All three plots of a traced run's Report into out_dir (created); returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return [fn(report, out / name) for name, fn in PLOTS.items()]
