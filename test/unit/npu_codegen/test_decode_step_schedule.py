"""The schedule of a decode step's work on server (docs/paged-kv.md), on a 3-layer Q4_1 Llama of
SmolLM2's layer shape (hidden 576, 9 query / 3 KV heads of 64, FFN 1536). Changes of order only,
each checked for the same bits as without it and fewer cycles:
* the query projection after the key and value projections (`graph-defer-paged-query`), its
  rotated rows read by paged attention on chip (and not stored: nothing else reads them);
* a resident product's weight planes loaded one expansion step at a time
  (`packed_gemm.load_planes_by_step`): the first expansion waits for its own rows only;
* the block table, the loop counts and the lengths that paged attention's helper nest computes
  once per step left in the scratchpad for every layer's attention (`paged_kv.OnChipSteps`), not
  copied from DRAM by each before its first gathers.
And the K / V appends stored after the attention's gathers (`paged_kv.append_after_gathers`),
which take the new token's key and value from chip: a different order of the softmax's terms,
so checked for fewer cycles and, like the whole schedule, against the graph interpreter within
bf16 tolerance."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.passes.testing import run_entry
from infer.runtime.session import DeviceSession

from helpers.gguf_models import write_llama_gguf

LAYERS = 3
POOLS = tuple(f"{kv}_{layer}" for layer in range(LAYERS) for kv in "kv")
# the sequence holds 13 tokens after the step, in blocks 2 and 0 of its table; 8 entries, so
# paged attention takes 2 blocks a step (`superblock_blocks`: at most a quarter of the table)
BLOCK, N, MAX_LEN = 8, 13, 64
TABLE = [2, 0, 0, 0, 0, 0, 0, 0]
METADATA = {"input_ids": np.array([[7]], np.int32), "positions": np.array([[N - 1]], np.int32),
            "slots": np.array([TABLE[(N - 1) // BLOCK] * BLOCK + (N - 1) % BLOCK], np.int32),
            "block_tables": np.array([TABLE], np.int32), "context_lens": np.array([N], np.int32)}
# two sequences of 13 and 5 tokens, the second in block 3 of the pool
TABLE2, N2 = [3, 1, 1, 1, 1, 1, 1, 1], 5
BATCH2 = {"input_ids": np.array([[7], [9]], np.int32), "positions": np.array([[N - 1], [N2 - 1]], np.int32),
          "slots": np.array([METADATA["slots"][0], TABLE2[0] * BLOCK + N2 - 1], np.int32),
          "block_tables": np.array([TABLE, TABLE2], np.int32), "context_lens": np.array([N, N2], np.int32)}


def _pools(shape, metadata=METADATA) -> list[np.ndarray]:
    """A cache with earlier tokens in it, and a stale row far off the others' scale in the slots
    the step writes: a schedule that attended to a slot's old contents would be far off."""
    rng = np.random.default_rng(1)
    pools = [(rng.standard_normal(shape) * 0.5).astype(np.float32) for _ in POOLS]
    for pool in pools:
        pool[metadata["slots"]] = 8.0
    return pools


def _model(path, batch: int = 1):
    return infer.import_model(str(path), kv_cache="paged", chunk=8, max_len=MAX_LEN, block_size=BLOCK, batch=batch)


def _whole_planes(ctx, codes_w, scales_w, codes, scales, c0, s0, K, N, bits, entry) -> None:
    """The planes in one DMA each (before load_planes_by_step)."""
    em = ctx.emitter
    em.dma(codes_w, [0, 0], codes, [c0, 0], [K * bits // 8, N])
    em.dma(scales_w, [0, 0], scales, [s0, 0], [K // 32, N * entry // 2])


def _decode_step(path, monkeypatch, defer: bool = True, by_step: bool = True, steps_on_chip: bool = True,
                 appends_after: bool = True, prefetch: bool = True,
                 metadata=METADATA) -> tuple[list[np.ndarray], int]:
    """(logits and pools after the step, cycles) of the decode entry compiled for server."""
    from infer.passes import graph_defer_paged_query
    from infer.passes.graph_to_tile import packed_gemm, paged_kv, product_consumers

    with monkeypatch.context() as m:
        if not defer:
            m.setattr(graph_defer_paged_query.GraphDeferPagedQueryPass, "apply", lambda self, ctx, op: None)
        if not by_step:
            m.setattr(packed_gemm, "load_planes_by_step", _whole_planes)
        if not appends_after:
            m.setattr(paged_kv, "append_after_gathers", lambda ctx, write: False)
            m.setattr(product_consumers, "append_after_gathers", lambda ctx, write: False)
        if not prefetch:
            m.setattr(paged_kv, "_prefetch_first_blocks", lambda ctx, attention: None)
        if not steps_on_chip:
            computed = paged_kv._block_steps
            m.setattr(paged_kv, "_block_steps", lambda *a, **k: computed(*a, **k)._replace(on_chip=None))
        exe = infer.compile(_model(path, len(metadata["context_lens"])), target="server", precision="bf16")
    session = DeviceSession(exe.artifact, resident=POOLS)
    for name, pool in zip(POOLS, _pools(session.read(POOLS[0]).shape, metadata), strict=True):
        session.write(name, pool)
    out = session.run("decode", metadata)
    return [out["logits"]] + [session.read(p) for p in POOLS], session.last_report.cycles


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """SmolLM2's layer shape, 3 layers: planes big enough that their arrival shows in the cycles
    (the shared tiny model's 64-wide ones arrive within a DRAM latency), and two layers whose
    attention finds the block table on chip (the first one computes it)."""
    from helpers import gguf_models

    mp = pytest.MonkeyPatch()
    for key, value in dict(hidden=576, inter=1536, heads=9, kv_heads=3, layers=LAYERS).items():
        mp.setitem(gguf_models.GGUF_LLAMA, key, value)
    try:
        return write_llama_gguf(tmp_path_factory.mktemp("schedule") / "tiny.gguf", "Q4_1")
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def scheduled(tiny):
    mp = pytest.MonkeyPatch()
    try:
        return _decode_step(tiny, mp)
    finally:
        mp.undo()


def test_scheduled_step_matches_the_graph_interpreter(tiny, scheduled):
    outputs, _ = scheduled
    reference = run_entry(_model(tiny).module, [*METADATA.values(), *_pools(outputs[1].shape)], entry="decode")
    for got, want in zip(outputs, reference, strict=True):
        got = got.reshape(want.shape)
        # bf16 activations over sums of 512-1024 terms, relative to the output's scale (measured:
        # at most 1.1 % of the largest value and 0.9 % in norm; dropping the context-length load
        # with the query's DMA, a bug this caught, was off by ~40 %)
        np.testing.assert_allclose(got, want, rtol=0, atol=3e-2 * np.abs(want).max())
        assert np.linalg.norm(got - want) <= 2e-2 * np.linalg.norm(want)


@pytest.mark.parametrize("without", ["defer", "by_step", "steps_on_chip"])
def test_each_change_keeps_the_bits_and_saves_cycles(tiny, scheduled, without, monkeypatch):
    outputs, cycles = scheduled
    outputs0, cycles0 = _decode_step(tiny, monkeypatch, **{without: False})
    assert [a.tobytes() for a in outputs] == [a.tobytes() for a in outputs0]
    assert cycles < cycles0, (without, cycles, cycles0)


def test_appends_after_the_gathers_save_cycles(tiny, scheduled, monkeypatch):
    """The new token's key and value from chip start the softmax instead of coming last in the
    pool: other roundings (the first layer's pools bit for bit, the later layers' rows differ
    by those roundings), the same values within what bf16 keeps."""
    outputs, cycles = scheduled
    outputs0, cycles0 = _decode_step(tiny, monkeypatch, appends_after=False)
    assert cycles < cycles0, (cycles, cycles0)
    assert [a.tobytes() for a in outputs[1:3]] == [a.tobytes() for a in outputs0[1:3]]
    for got, want in zip(outputs, outputs0, strict=True):
        assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()


def test_two_sequences_first_blocks_gathered_ahead(tiny, monkeypatch):
    """A batch of two sequences of different lengths: every sequence's first super-block
    gathered by the projections' kernel (`_prefetch_first_blocks`) instead of at the attention's
    start, the same bits and fewer cycles; the step against the graph interpreter."""
    outputs, cycles = _decode_step(tiny, monkeypatch, metadata=BATCH2)
    outputs0, cycles0 = _decode_step(tiny, monkeypatch, metadata=BATCH2, prefetch=False)
    assert [a.tobytes() for a in outputs] == [a.tobytes() for a in outputs0]
    assert cycles < cycles0, (cycles, cycles0)
    reference = run_entry(_model(tiny, 2).module, [*BATCH2.values(), *_pools(outputs[1].shape, BATCH2)],
                          entry="decode")
    for got, want in zip(outputs, reference, strict=True):
        got = got.reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=0, atol=3e-2 * np.abs(want).max())
        assert np.linalg.norm(got - want) <= 2e-2 * np.linalg.norm(want)
