"""bench_roofline's "what bounds each whole model" line: the last run's program simulated again
with resources unlimited (runtime/what_if.py), its figures those of runs on the changed config."""

from __future__ import annotations

import bench_roofline  # bench/ is on the test path (pyproject.toml)
import numpy as np

from infer.target.hw import WHAT_IF_RESOURCES, unlimited


def test_the_line_reports_the_last_program_run_on_each_changed_config():
    model = bench_roofline.conv_model(16, 8, 32, 3, 1, 1)
    x = np.random.default_rng(0).standard_normal((1, 16, 8, 8)).astype(np.float32)
    report, _ = bench_roofline.run(model, [x], "edge")
    line = bench_roofline.what_bounds_line("conv", "edge")
    assert line.startswith(f"conv on edge, {report.cycles:,} cycles: one resource unlimited: ")
    assert all(f"{label} " in line for label in WHAT_IF_RESOURCES.values())
    exe, inputs = bench_roofline._last
    exe.run(inputs, mode="timing", config=unlimited(exe.config, [r for r in WHAT_IF_RESOURCES if r != "dram"]))
    assert f"only one limited: DRAM {exe.last_report.cycles:,}," in line
    exe.run(inputs, mode="timing", config=unlimited(exe.config, ["dram"]))
    gain = 100 * (exe.last_report.cycles - report.cycles) / report.cycles
    assert gain < 0 and f"DRAM {gain:+.1f} %" in line


def test_the_array_ceiling_is_the_roofline_over_the_array_bound_run_and_its_latencies():
    # a 1x1 conv over a 14x14 map on server: 196 pixels fill 128 + 68 of the array's columns,
    # so its array work alone keeps it below the latency ceiling
    model = bench_roofline.conv_model(256, 14, 128, 1, 1, 0)
    x = np.random.default_rng(0).standard_normal((1, 256, 14, 14)).astype(np.float32)
    report, _ = bench_roofline.run(model, [x], "server")
    ceiling = bench_roofline.array_ceiling(report)
    exe, inputs = bench_roofline._last
    exe.run(inputs, mode="timing", config=unlimited(exe.config, list(WHAT_IF_RESOURCES)))
    array_bound = exe.last_report.cycles
    assert report.dram_latency_cycles == 500
    assert ceiling == report.roofline_cycles / (array_bound + 2 * 500)
    assert report.roofline_fraction < ceiling < report.floor_fraction
