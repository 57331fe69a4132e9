"""Step-cost table: exact at grid points and for costs linear between them, within 5 % of
the analytic roofline on 20 random steps, cached on disk by key."""

from __future__ import annotations

import numpy as np
import pytest

from infer.serving import Request
from infer.serving.cost import AnalyticRooflineProfiler, LlamaDims, compose_step_cycles
from infer.serving.cost_table import CostGrid, CostTableKey, StepCostTable
from infer.serving.scheduler import Step, StepItem
from infer.target.hw import load_config

SMOLLM2 = LlamaDims(hidden=576, layers=30, heads=9, kv_heads=3, head_dim=64, intermediate=1536, vocab=49152,
                    max_context=8192, name="SmolLM2-135M")


class Bilinear:
    """A known cost function, bilinear in (a, b) per entry: interpolation must reproduce it exactly."""

    source = "test: bilinear"

    def __init__(self):
        self.calls = 0

    def __call__(self, entry, a, b):
        self.calls += 1
        return {"decode": 5000 + 300 * a + 2 * b + 0.5 * a * b, "prefill": 9000 + 40 * a + 3 * b + 0.01 * a * b}[entry]


def random_step(rng, max_batch=64, ctx=8192) -> Step:
    items = []
    for k in range(int(rng.integers(0, max_batch))):
        start = int(rng.integers(1, ctx // 2))
        r = Request(k, start + 1, 4)
        r.num_computed = start
        items.append(StepItem(r, start, 1, False, []))
    for k in range(int(rng.integers(0 if items else 1, 4))):
        n, start = int(rng.integers(1, 1024)), int(rng.integers(0, ctx // 2))
        r = Request(1000 + k, start + n, 4)
        r.num_computed = start
        items.append(StepItem(r, start, n, True, []))
    return Step(items, [])


def test_exact_for_a_bilinear_cost():
    grid = CostGrid.for_limits(64, 8192)
    f = Bilinear()
    table = StepCostTable.profile(f, grid)
    assert f.calls == grid.points()
    rng = np.random.default_rng(0)
    for _ in range(50):
        entry = ["decode", "prefill"][int(rng.integers(2))]
        a, b = float(rng.uniform(1, 64)), float(rng.uniform(0, 8192))
        assert table.entry_cycles(entry, a, b) == pytest.approx(f(entry, a, b), rel=1e-12)
    step = random_step(rng)
    assert table.step_cycles(step) == pytest.approx(compose_step_cycles(step, f), rel=1e-12)


@pytest.mark.parametrize("target", ["edge", "server"])
def test_predicts_the_analytic_roofline_within_5_percent(target):
    profiler = AnalyticRooflineProfiler(SMOLLM2, load_config(target))
    table = StepCostTable.profile(profiler, CostGrid.for_limits(64, 8192))
    rng = np.random.default_rng(1)
    errors = []
    for _ in range(20):
        step = random_step(rng)
        exact = compose_step_cycles(step, profiler)
        errors.append(table.step_cycles(step) / exact - 1)
    print(f"{target}: step-cost table vs analytic roofline, relative errors of 20 random steps:",
          " ".join(f"{e * 100:+.2f}%" for e in errors))
    assert max(abs(e) for e in errors) < 0.05


def test_cached_on_disk_by_key(tmp_path):
    grid = CostGrid.for_limits(8, 256)
    key = CostTableKey("model-a", "cfg-a", "0.1.0", Bilinear.source)
    f = Bilinear()
    t1, cached1 = StepCostTable.load_or_profile(f, key, grid, tmp_path)
    calls = f.calls
    t2, cached2 = StepCostTable.load_or_profile(f, key, grid, tmp_path)
    assert (cached1, cached2) == (False, True) and f.calls == calls
    assert t2.values == t1.values and t2.source == Bilinear.source
    for other in (CostTableKey("model-b", "cfg-a", "0.1.0", f.source), CostTableKey("model-a", "cfg-a", "0.2.0", f.source)):
        _, cached = StepCostTable.load_or_profile(f, other, grid, tmp_path)
        assert not cached
    assert len(list(tmp_path.glob("steps-*.json"))) == 3


def test_analytic_roofline_bounds():
    server = load_config("server")
    prof = AnalyticRooflineProfiler(SMOLLM2, server)
    weights = SMOLLM2.weight_elements * 2
    # batch-1 decode is bandwidth-bound: every weight once, plus the KV cache
    kv = 100 * SMOLLM2.kv_elements_per_token * 2
    assert prof("decode", 1, 100) == pytest.approx((weights + kv) / server.dram.bytes_per_cycle)
    # a long prefill chunk is compute-bound
    macs = 2048 * SMOLLM2.linear_macs_per_token + SMOLLM2.attention_macs(2048 * 2049 // 2)
    assert prof("prefill", 2048, 0) == pytest.approx(macs / server.peak_macs_per_cycle)
    assert "analytic roofline" in prof.source and "not measured" in prof.source


class BlockSteps:
    """A compiled paged-attention program's cost shape: a fixed part per call plus, per live row,
    a step per KV block of the row's context (decode) or of start + chunk (prefill)."""

    source = "test: block steps"
    block = 4

    def __call__(self, entry, a, b):
        if entry == "decode":
            return 10_000 + 50 * a + a * 700 * -(-b // self.block)
        return 30_000 + 900 * -(-(b + a) // self.block)


def test_block_axis_puts_a_point_on_each_side_of_the_first_block_boundaries():
    from infer.serving.cost_table import FINE_BLOCKS, block_axis

    axis = block_axis([1, 16, 24, 32, 48, 64, 96, 128], 4)
    assert [p for p in axis if p <= 21] == [1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21]
    assert FINE_BLOCKS * 4 in axis and FINE_BLOCKS * 4 + 1 in axis
    assert [p for p in axis if p > FINE_BLOCKS * 4 + 1] == [96, 128]  # beyond: the buckets
    assert block_axis([0, 16, 33], 16) == [0, 16, 17, 32, 33]  # within the axis' range only


def test_compiled_program_grid_is_exact_for_block_steps_and_rows_of_different_lengths():
    """With points on both sides of every block boundary and each decode row costed at its own
    context, a table reproduces a block-stepped per-row cost exactly; the mean context of the
    rows (the rule before) misses the steps."""
    profiler = BlockSteps()
    grid = CostGrid.for_programs(4, 8, 48, 40, block_size=profiler.block)
    table = StepCostTable.profile(profiler, grid)

    def step(contexts, prefills=()):
        items = []
        for k, c in enumerate(contexts):
            r = Request(k, c, 4)
            items.append(StepItem(r, c - 1, 1, False, []))
        for k, (start, n) in enumerate(prefills):
            items.append(StepItem(Request(100 + k, start + n, 4), start, n, True, []))
        return Step(items, [])

    def exact(contexts, prefills=()):
        rows = len(contexts)
        total = sum(profiler("decode", rows, c) for c in contexts) / rows if rows else 0.0
        return total + sum(profiler("prefill", 8, at) for start, n in prefills for at in range(start, start + n, 8))

    for contexts, prefills in (([3, 6], ()), ([5, 9, 30, 41], ()), ([2], ((6, 11),)), ([], ((13, 17),))):
        assert table.step_cycles(step(contexts, prefills)) == pytest.approx(exact(contexts, prefills))
    mean_rule = profiler("decode", 2, (3 + 6) / 2)  # one call at the mean context (4.5: 2 blocks)
    assert mean_rule != pytest.approx(exact([3, 6]))  # the rows hold 1 and 2 blocks
