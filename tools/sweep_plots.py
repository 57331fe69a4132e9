"""PNG plots of a hardware sweep (tools/sweep.py), in the style of runtime/plots.py.

    write_sweep_plots(rows, keys, "sweep/")   # latency.png, energy.png, area.png, pareto.png

* `latency.png`: latency per point (us at each point's clock), the points labelled by their
  parameter values.
* `energy.png`: energy per inference per point, stacked by component (matrix, vector,
  scratchpad, accumulator, DRAM, static).
* `area.png`: area per point, stacked by component (array, vector, scratchpad, accumulator,
  fixed).
* `pareto.png`: latency against energy and against area, every point, the Pareto front
  (no other point is better in both) drawn as a line and labelled.

Points that are invalid or failed to compile are left out of the bars and the scatter (the
CSV and the printed table say why).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infer.runtime.plots import _pyplot, _save
from infer.target.energy import AREA_COMPONENTS, COMPONENTS


def _value(key: str, v: Any) -> str:
    if key.endswith("bytes") and isinstance(v, int) and v >= 1024 and v % 1024 == 0:
        return f"{v // 2**20}Mi" if v % 2**20 == 0 else f"{v // 1024}Ki"
    return str(v)


def _labels(rows: list[dict[str, Any]], keys: list[str]) -> list[str]:
    """One line per swept key: its last name part and the value (byte sizes in Ki/Mi)."""
    short = [k.split(".")[-1] for k in keys]
    return ["\n".join(f"{s}={_value(k, r[k])}" for s, k in zip(short, keys, strict=True)) for r in rows]


def _width(n: int) -> float:
    return max(6.0, 1.2 * n + 2)


def _stacked(ax, rows, labels, parts: tuple[str, ...], column: str, unit: str) -> None:
    plt = _pyplot()
    cmap = plt.get_cmap("tab10")
    bottom = [0.0] * len(rows)
    for i, part in enumerate(parts):
        vals = [float(r.get(column.format(part), 0) or 0) for r in rows]
        ax.bar(range(len(rows)), vals, bottom=bottom, color=cmap(i % 10), label=part)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel(unit)
    ax.set_ylim(0, max(bottom) * 1.3 or 1.0)  # room for the legend above the bars
    ax.legend(fontsize=7, ncols=3, loc="upper center")


def plot_latency(rows, keys, path, title: str = "") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(_width(len(rows)), 4.5))
    ax.bar(range(len(rows)), [r["latency_us"] for r in rows], color="tab:blue")
    ax.set_xticks(range(len(rows)), _labels(rows, keys), fontsize=7)
    ax.set_ylabel("latency per inference (us)")
    ax.set_title(f"latency per point {title}".strip(), fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def plot_energy(rows, keys, path, title: str = "") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(_width(len(rows)), 4.5))
    _stacked(ax, rows, _labels(rows, keys), COMPONENTS, "energy_{}_uj", "energy per inference (uJ)")
    ax.set_title(f"energy per point by component {title}".strip(), fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def plot_area(rows, keys, path, title: str = "") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(_width(len(rows)), 4.5))
    _stacked(ax, rows, _labels(rows, keys), AREA_COMPONENTS, "area_{}_mm2", "area (mm$^2$)")
    ax.set_title(f"area per point by component {title}".strip(), fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def plot_pareto(rows, keys, path, title: str = "") -> Path:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    labels = [lab.replace("\n", " ") for lab in _labels(rows, keys)]
    for ax, (metric, flag, unit) in zip(axes, (("energy_uj", "pareto_energy", "energy per inference (uJ)"),
                                                ("area_mm2", "pareto_area", "area (mm$^2$)")), strict=True):
        xs = [r["latency_us"] for r in rows]
        ys = [float(r[metric]) for r in rows]
        on = [bool(r.get(flag)) for r in rows]
        ax.scatter([x for x, o in zip(xs, on, strict=True) if not o], [y for y, o in zip(ys, on, strict=True) if not o],
                   color="0.6", label="dominated")
        front = sorted((x, y, lab) for x, y, o, lab in zip(xs, ys, on, labels, strict=True) if o)
        ax.plot([f[0] for f in front], [f[1] for f in front], "o-", color="tab:red", label="Pareto front")
        for x, y, lab in front:
            ax.annotate(lab, (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
        ax.set_xlabel("latency per inference (us)")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Pareto fronts {title}".strip(), fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def write_sweep_plots(rows: list[dict[str, Any]], keys: list[str], out_dir, title: str = "") -> list[Path]:
    """latency.png, energy.png, area.png and pareto.png of the points that ran."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("energy_uj") not in (None, "")]
    if not ok:
        return []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = f"({title})" if title else ""
    return [plot_latency(ok, keys, out / "latency.png", title), plot_energy(ok, keys, out / "energy.png", title),
            plot_area(ok, keys, out / "area.png", title), plot_pareto(ok, keys, out / "pareto.png", title)]
