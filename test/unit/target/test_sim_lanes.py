"""The functional engine's lane-parallel threads (infer.target.sim_lanes): a batched operation
split over threads computes the serial run's bits, so the fast mode with threads equals the
reference mode exactly; the pool itself; how the thread count is chosen."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infer.target import kernels, sim_lanes, sim_lockstep
from infer.target.sim import Simulator
from infer.target.sim_lanes import THREADS_ENV, LanePool, default_threads

from helpers.sim_modes import assert_modes_agree, run_mode
from helpers.sim_programs import BATCHED_KERNELS, TILED_PARAMS, tiled_kernel


@contextlib.contextmanager
def every_operation_split(threads: int = 3):
    """Every batched operation that has lanes to split goes to the pool (the work thresholds
    at 0), on `threads` threads; yields the list of (operation, lanes, chunks) of each split."""
    calls: list[tuple[int, int]] = []
    saved = (sim_lockstep.MIN_PARALLEL_MACS, sim_lockstep.MIN_PARALLEL_ELEMENTS,
             LanePool.map)

    def counting_map(self, n, fn):
        out = saved[2](self, n, fn)
        calls.append((fn.__name__, n, len(out)))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sim_lockstep, "MIN_PARALLEL_MACS", 0)
        mp.setattr(sim_lockstep, "MIN_PARALLEL_ELEMENTS", 0)
        mp.setattr(LanePool, "map", counting_map)
        mp.setenv(THREADS_ENV, str(threads))
        yield calls


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(params=st.fixed_dictionaries({k: st.sampled_from(v) for k, v in TILED_PARAMS.items()}),
       seed=st.integers(0, 1000))
def test_split_batched_operations_equal_the_reference(params, seed):
    prog, dram = tiled_kernel(params, seed)
    with every_operation_split():
        assert_modes_agree(prog, dram)


@pytest.mark.parametrize("params", BATCHED_KERNELS)
def test_every_kind_of_split_operation_equals_the_reference(params):
    """Stacked matmuls, products (reductions) and vector ops, bf16 and int8 (saturating),
    split into chunks on three threads: the reference's bits, saturations and cycles."""
    prog, dram = tiled_kernel(params)
    with every_operation_split() as calls:
        assert_modes_agree(prog, dram)
    kinds = {fn for fn, _, _ in calls}
    assert kinds == {"matmul_lanes", "product_lanes", "vector_lanes"}, kinds
    assert any(chunks > 1 for _, _, chunks in calls)


@pytest.mark.parametrize("cfg, shape", [("edge", (256, 256, 256, 16)),
                                        ("server", (128, 512, 512, 32))])
def test_compiled_gemm_products_split_over_threads_equal_the_reference(cfg, shape):
    m, k, n, tm = shape
    g = kernels.gemm(cfg, m, k, n, "bf16", double_buffer=cfg == "edge", tm=tm)
    with every_operation_split() as calls:
        assert_modes_agree(g.program, g.dram, cfg=cfg)
    assert any(fn == "product_lanes" and chunks > 1 for fn, _, chunks in calls)


def test_big_operations_split_at_the_default_thresholds():
    """Without lowering the thresholds, a server GEMM's stacked matmuls are big enough to be
    split, and the outputs are the one-thread run's."""
    k = kernels.gemm("server", 512, 1024, 512, "bf16", double_buffer=True, tm=256)
    calls = []
    real = LanePool.map

    def counting(self, n, fn):
        calls.append(n)
        return real(self, n, fn)

    outs = {}
    for threads in (1, 2):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(LanePool, "map", counting)
            mp.setenv(THREADS_ENV, str(threads))
            outs[threads] = run_mode(k.program, k.dram, "fast", cfg="server")
        if threads == 1:
            assert calls == []  # one thread: never the pool
    assert calls
    one, two = outs[1], outs[2]
    assert one[1].tobytes() == two[1].tobytes() and one[3].tobytes() == two[3].tobytes()
    assert one[0].as_dict() == two[0].as_dict()


def test_pool_covers_every_lane_once_in_order():
    pool = LanePool(3)
    seen = []
    lock = threading.Lock()

    def chunk(s: slice) -> int:
        with lock:
            seen.extend(range(s.start, s.stop))
        return s.stop - s.start

    sizes = pool.map(17, chunk)
    assert sorted(seen) == list(range(17))
    assert sum(sizes) == 17 and len(sizes) == 6  # threads * CHUNKS_PER_THREAD chunks
    assert pool.map(2, chunk) == [1, 1]  # never more chunks than lanes


def test_pool_raises_a_chunk_error_on_the_caller_and_stays_usable():
    pool = LanePool(2)

    def chunk(s: slice) -> None:
        if s.start <= 3 < s.stop:
            raise FloatingPointError("lane 3")

    with pytest.raises(FloatingPointError, match="lane 3"):
        pool.map(8, chunk)
    assert pool.map(4, lambda s: s.start) == [0, 1, 2, 3]


def test_thread_count_from_the_environment(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "3")
    assert default_threads() == 3 and Simulator("edge").threads == 3
    assert Simulator("edge", threads=1).threads == 1
    assert sim_lanes.pool(1) is None
    monkeypatch.setenv(THREADS_ENV, "zero")
    with pytest.raises(ValueError, match="INFER_SIM_THREADS='zero': expected a positive integer"):
        Simulator("edge")
    monkeypatch.delenv(THREADS_ENV)
    assert default_threads() == 1 and Simulator("edge").threads == 1  # opt-in
    assert sim_lanes.machine_threads() >= 1


def test_cli_rejects_a_bad_thread_count(tmp_path, monkeypatch, capsys):
    from infer.tools.cli import main

    monkeypatch.setenv(THREADS_ENV, "-2")
    assert main(["run", str(tmp_path / "missing.npu")]) == 1
    assert "INFER_SIM_THREADS='-2': expected a positive integer" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["run", str(tmp_path / "missing.npu"), "--sim-threads", "0"])
    assert e.value.code == 2
    assert "must be >= 1" in capsys.readouterr().err


def test_split_rule_keeps_broadcast_operands_whole():
    out = np.zeros((4, 2, 3))
    stacked, shared, one = np.ones((4, 2, 3)), np.ones((2, 3)), np.ones((1, 2, 3))
    s = slice(1, 3)
    assert sim_lanes.cut(stacked, s, out).shape == (2, 2, 3)
    assert sim_lanes.cut(shared, s, out) is shared and sim_lanes.cut(one, s, out) is one
    assert sim_lanes.splittable(out)
    assert not sim_lanes.splittable(np.zeros((2, 3)))  # no lane dimension
    assert not sim_lanes.splittable(np.broadcast_to(shared, (4, 2, 3)))  # lanes share bytes
