"""A sweep's points run as Ray tasks on a local Ray instance and give the same summaries as
running them in this process."""

from __future__ import annotations

import pytest

from infer.serving.cost import LlamaDims
from infer.serving.simulate import ServeSimOptions
from infer.serving.sweep import WorkloadSpec, run_sweep, sweep_points
from infer.serving.workload import LengthDist

ray = pytest.importorskip("ray")

TINY = LlamaDims(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=256, max_context=512,
                 name="tiny")


def test_sweep_on_local_ray_matches_serial(tmp_path):
    base = ServeSimOptions(TINY, cache_dir=str(tmp_path))
    points = sweep_points(base, ["edge"], ["continuous", "static"], [20.0],
                          WorkloadSpec(15, LengthDist(32, 0.5), LengthDist(8, 0.5), seed=3))
    on_ray = run_sweep(points)
    serial = run_sweep(points, use_ray=False)
    assert [p["policy"] for p in on_ray] == ["continuous", "static"]
    for a, b in zip(on_ray, serial, strict=True):
        a.pop("cost_table_cached"), b.pop("cost_table_cached")
        a.pop("scheduler_host_s_per_step"), b.pop("scheduler_host_s_per_step")
        assert a == b
