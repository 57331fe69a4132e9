"""bench/bench_decode.py's measuring functions on a tiny random Llama GGUF (2 layers, hidden 64,
4 query / 2 KV heads, Q4_1): the three-entry artifact (one chunk, decode at batch 1 and 2), the
model sizes against the writer's configuration, and the decode step's bytes and cycles."""

from __future__ import annotations

import bench_decode as bench  # bench/ is on the test path (pyproject.toml)
import numpy as np
import pytest
from helpers.gguf_models import GGUF_LLAMA, write_llama_gguf

import infer
from infer.target.hw import WHAT_IF_RESOURCES


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write_llama_gguf(tmp_path_factory.mktemp("bench_decode") / "tiny.gguf", "Q4_1", tied=True)
    model = bench.paged_model(path, (1, 2), chunk=8, max_len=64, block_size=4, num_blocks=20)
    art = infer.compile(model, target="server", precision="bf16").artifact
    return path, art


def test_sizes_follow_the_model(tiny):
    path, art = tiny
    assert art.entry_names() == ["prefill_chunk", "decode", "decode_b2"]
    c = GGUF_LLAMA
    h, inter, d = c["hidden"], c["inter"], c["hidden"] // c["heads"]
    sizes = bench.Sizes.of(path, art)
    per_layer = h * h * 2 + h * c["kv_heads"] * d * 2 + h * inter * 3  # q, o; k, v; gate, up, down
    assert sizes.matmul_weights == c["layers"] * per_layer + c["vocab"] * h  # + the tied LM head
    assert (sizes.layers, sizes.q_heads, sizes.head_dim) == (c["layers"], c["heads"], d)
    # the pools keep the import's activation type (f32) in DRAM, also in a bf16 compile
    assert sizes.kv_row_bytes == c["kv_heads"] * d * 4
    assert sizes.embedding_row_bytes == h // 32 * 20  # q4_1: 20 bytes per block of 32
    assert bench.prefill_macs(sizes, 8) == 8 * sizes.matmul_weights + c["layers"] * c["heads"] * d * 2 * 36


def test_decode_cost_follows_the_context(tiny):
    from infer.runtime.session import DeviceSession

    path, art = tiny
    sizes = bench.Sizes.of(path, art)
    pools = [s.name for s in art.for_entry("decode").inputs if s.name not in bench.METADATA]
    session = DeviceSession(art, resident=pools)
    short, long_ = (bench.run_step(session, "decode", n, sizes) for n in (8, 60))
    pair = bench.run_step(session, "decode_b2", 8, sizes)
    chunk = bench.run_step(session, "prefill_chunk", 8, sizes)
    for st in (short, long_, pair, chunk):
        assert st.dram_bytes >= sizes.weight_bytes  # every packed weight is read at least once
        assert st.compulsory_bytes > sizes.weight_bytes
    per_token = sizes.layers * 2 * sizes.kv_row_bytes  # K and V rows of every layer
    assert (short.kv_read_bytes, long_.kv_read_bytes) == (8 * per_token, 60 * per_token)
    assert long_.cycles > short.cycles  # attends over more blocks, not the capacity
    assert pair.kv_read_bytes == 2 * short.kv_read_bytes
    assert np.isfinite(short.seconds) and short.seconds > 0


def test_a_session_keeps_its_expanded_weights_from_step_to_step(tiny, monkeypatch):
    """A DeviceSession runs every call on one simulator, which keeps the weight expansions it
    computes a second time (Simulator.dequant_memo): its third decode step writes them instead
    of computing them, with the same logits and cycles as a session whose simulator keeps
    nothing."""
    from infer.runtime.session import DeviceSession
    from infer.target.sim_memo import MEMO_ENV

    path, art = tiny
    sizes = bench.Sizes.of(path, art)
    pools = [s.name for s in art.for_entry("decode").inputs if s.name not in bench.METADATA]
    results = {}
    for mb in ("0", "64"):
        monkeypatch.setenv(MEMO_ENV, mb)
        session = DeviceSession(art, resident=pools)
        logits = []
        run = session.run
        session.run = lambda entry, inputs, **kw: logits.append(run(entry, inputs, **kw)["logits"])
        cycles = [bench.run_step(session, "decode", 8, sizes).cycles for _ in range(3)]
        results[mb] = (cycles, logits, session._sim.dequant_memo)
    (cycles_off, logits_off, off), (cycles_on, logits_on, on) = results["0"], results["64"]
    assert cycles_on == cycles_off
    assert [x.tobytes() for x in logits_on] == [x.tobytes() for x in logits_off]
    assert np.isfinite(logits_on[2]).all() and np.abs(logits_on[2]).max() > 0
    assert off.hits == 0 and on.misses > 0 and 2 * on.hits == on.misses


def test_the_table_has_every_figure(tiny):
    path, art = tiny
    entries = {1: "decode", 2: "decode_b2"}
    m = bench.measure(art, bench.Sizes.of(path, art), "server", "bf16", entries, contexts=(8, 60))
    assert m.loadw_bound == pytest.approx(0.64)  # docs/isa.md: 1024 bf16 weights vs 1600 q4_1 weights a cycle
    assert m.prefill_macs == bench.prefill_macs(bench.Sizes.of(path, art), 8)
    lines = bench.report_lines(m, entries, contexts=(8, 60))
    # header; bytes and roofline per batch; what bounds B=1; tokens/s; growth; prefill
    assert len(lines) == 1 + 2 * 2 + 1 + 2 + 1 + 1
    # what bounds the batch-1 step: the same program with resources unlimited (runtime.what_if)
    w = m.what_if
    assert w.cycles == m.steps[("decode", 8)].cycles
    for r in WHAT_IF_RESOURCES:
        assert w.none <= w.only[r] <= w.cycles and w.none <= w.unlimited[r] <= w.cycles
    assert w.unlimited["dram"] < w.cycles and w.unlimited["weight_path"] < w.cycles  # both on its path
    assert w.instructions <= w.none < w.cycles and 0 < w.streaming <= w.none
    line = next(line for line in lines if "what bounds it" in line)
    assert f"none {w.none:,} " in line and f"{w.instructions:,} executed" in line
    assert "decode B=1 ctx 8 -> 60" in lines[-2] and "prefill chunk of 8 tokens" in lines[-1]
    # the tokens/s steps are timed twice (the second call: no program decoding or loop planning)
    for b, entry in entries.items():
        st = m.steps[(entry, 8)]
        assert st.again_seconds is not None and 0 < st.again_seconds
        assert f"host {st.again_seconds:.2f} s per step (steady state), {st.wall_seconds:.2f} s for the session's first" in \
            next(line for line in lines if f"decode B={b} ctx 8:" in line and "tokens/s" in line)
