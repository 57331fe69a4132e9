"""Sweeps of the serving simulation over request rates, policies and hardware configs, on Ray.

    points = sweep_points(base_opts, targets=["edge", "server"], policies=["continuous", "static"],
                          rates=[1, 2, 4], workload=WorkloadSpec(...))
    summaries = run_sweep(points, ray_address=None)     # a local Ray instance unless an address is given

Each point (one target, policy and rate) is a Ray task that generates its workload from
the seed, runs `simulate` and returns the report's summary. `ray_address` connects to a
running cluster (`ray://host:10001` or `auto`); its workers need infer installed. Step-cost
tables are cached on disk, so points of one (model, config) share the profile once it is
written. `run_sweep(..., use_ray=False)` runs the points one after another in this process
(for debugging).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from infer.serving.simulate import ServeSimOptions, SimulationError, simulate
from infer.serving.workload import LengthDist, RequestSpec, WorkloadError, poisson_workload


@dataclass(frozen=True)
class WorkloadSpec:
    """A generated workload (rate comes from the point) or a fixed trace."""

    num_requests: int = 100
    prompt: LengthDist = LengthDist(256, 1.0)
    output: LengthDist = LengthDist(128, 1.0)
    seed: int = 0
    trace: tuple[RequestSpec, ...] | None = None


@dataclass(frozen=True)
class SweepPoint:
    opts: ServeSimOptions
    workload: WorkloadSpec
    rate: float | None = None


def sweep_points(base: ServeSimOptions, targets: list[str], policies: list[str], rates: list[float | None],
                 workload: WorkloadSpec) -> list[SweepPoint]:
    return [SweepPoint(base.with_(target=t, policy=p), workload, r) for t in targets for p in policies for r in rates]


def run_point(point: SweepPoint) -> dict[str, Any]:
    from infer.serving.simulate import resolve

    w = point.workload
    if w.trace is not None:
        specs = list(w.trace)
    else:
        dims, _, _ = resolve(point.opts)
        specs = poisson_workload(point.rate, w.num_requests, w.prompt, w.output, dims.max_context, w.seed)
    summary = simulate(point.opts, specs).as_dict(per_request=False)
    summary["rate"] = point.rate
    return summary


def run_sweep(points: list[SweepPoint], ray_address: str | None = None, use_ray: bool = True) -> list[dict[str, Any]]:
    if not use_ray:
        return [run_point(p) for p in points]
    import ray

    started_here = False
    if not ray.is_initialized():
        if ray_address:
            ray.init(address=ray_address, log_to_driver=False)
        else:
            ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        started_here = True
    try:
        task = ray.remote(num_cpus=1)(run_point)
        try:
            return ray.get([task.remote(p) for p in points])
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, SimulationError | WorkloadError):     # bad input found in a worker: one line
                raise type(cause)(str(cause)) from None
            raise
    finally:
        if started_here:
            ray.shutdown()
