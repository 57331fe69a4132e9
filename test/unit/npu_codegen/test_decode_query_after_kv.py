"""A decode step's query projection after the key and value projections
(`graph-defer-paged-query{target=server}`), its rotated rows read by paged attention on chip:
the cache appends, which the attention's block gathers wait for, go out one product earlier
and the query does not go through DRAM. The same bits as in the projections' import order, and
the same as the graph interpreter within bf16 tolerance."""

from __future__ import annotations

import numpy as np
import infer
from infer.passes.testing import run_entry
from infer.runtime.session import DeviceSession

from helpers.gguf_models import write_llama_gguf

POOLS = ("k_0", "v_0", "k_1", "v_1")


BLOCK, N = 8, 13  # the sequence holds 13 tokens after the step, in blocks 2 and 0 of its table
TABLE = [2, 0, 0, 0]
METADATA = {"input_ids": np.array([[7]], np.int32), "positions": np.array([[N - 1]], np.int32),
            "slots": np.array([TABLE[(N - 1) // BLOCK] * BLOCK + (N - 1) % BLOCK], np.int32),
            "block_tables": np.array([TABLE], np.int32), "context_lens": np.array([N], np.int32)}


def _pools(shape) -> list[np.ndarray]:
    """A cache with earlier tokens in it."""
    rng = np.random.default_rng(1)
    return [(rng.standard_normal(shape) * 0.5).astype(np.float32) for _ in POOLS]


def _model(path):
    return infer.import_model(str(path), kv_cache="paged", chunk=8, max_len=32, block_size=BLOCK)


def _decode_step(path, defer: bool, monkeypatch) -> tuple[list[np.ndarray], int]:
    """(logits and pools after the step, cycles) of the decode entry compiled for server."""
    from infer.passes import graph_defer_paged_query

    with monkeypatch.context() as m:
        if not defer:
            m.setattr(graph_defer_paged_query.GraphDeferPagedQueryPass, "apply", lambda self, ctx, op: None)
        exe = infer.compile(_model(path), target="server", precision="bf16")
    session = DeviceSession(exe.artifact, resident=POOLS)
    for name, pool in zip(POOLS, _pools(session.read(POOLS[0]).shape), strict=True):
        session.write(name, pool)
    out = session.run("decode", METADATA)
    return [out["logits"]] + [session.read(p) for p in POOLS], session.last_report.cycles


def test_query_after_kv_same_bits_fewer_cycles(tmp_path, monkeypatch):
    path = write_llama_gguf(tmp_path / "tiny.gguf", "Q4_1")
    deferred, cycles = _decode_step(path, True, monkeypatch)
    in_order, cycles0 = _decode_step(path, False, monkeypatch)
    assert [a.tobytes() for a in deferred] == [a.tobytes() for a in in_order]
    assert cycles < cycles0, (cycles, cycles0)
    model = _model(path)
    reference = run_entry(model.module, [*METADATA.values(), *_pools(deferred[1].shape)], entry="decode")
    np.testing.assert_allclose(deferred[0].reshape(reference[0].shape), reference[0], rtol=5e-2, atol=5e-2)
    for got, want in zip(deferred[1:], reference[1:], strict=True):
        np.testing.assert_allclose(got, want, rtol=5e-2, atol=5e-2)
