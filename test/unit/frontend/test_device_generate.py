"""Generation on the simulated NPU: a tiny random Llama imported with a paged KV cache, its
@prefill_chunk and @decode compiled into one artifact (fp32, server), run by the
DeviceExecutor, against the same paged functions on the reference interpreter and the dense
ones; batched decode of 4 sequences of different lengths against each sequence alone."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.frontend import import_model
from infer.generation import DeviceExecutor, GenerationError, Generator, PagedReferenceExecutor

PROMPTS_LENGTHS = (5, 13, 21, 9)  # 1 to 3 chunks of 8


@pytest.fixture(scope="module")
def paged(llama_folder):
    return import_model(llama_folder, kv_cache="paged", chunk=8, max_len=48, block_size=4, batch=4)


@pytest.fixture(scope="module")
def compiled(paged):
    return infer.compile(paged, target="server", precision="fp32")


def _prompts():
    rng = np.random.default_rng(7)
    return [[int(t) for t in rng.integers(0, 256, n)] for n in PROMPTS_LENGTHS]


def test_the_artifact_has_both_entry_points_sharing_weights_and_pools(compiled):
    art = compiled.artifact
    assert art.entry_names() == ["prefill_chunk", "decode"]
    ex = DeviceExecutor(compiled)
    assert ex.session.resident == sorted(f"{kv}_{i}" for i in range(2) for kv in "kv")
    assert (ex.chunk, ex.batch, ex.block_size, ex.max_context) == (8, 4, 4, 48)
    for name in art.entry_names():  # every pool is updated in place (tied to its argument)
        assert art.for_entry(name).parsed_layout().aliases == {p: p for p in ex.session.resident}


def test_greedy_16_tokens_on_the_device_equal_the_reference(paged, compiled, llama_folder):
    prompt = _prompts()[1]
    device = Generator(paged, executor=DeviceExecutor(compiled))
    got = [t.id for t in device.generate(prompt, max_new_tokens=16, stop_token_ids=[])]
    assert device.executor.session.copied_bytes == 0  # the pools never moved
    reference = Generator(paged, executor=PagedReferenceExecutor(paged))
    assert got == [t.id for t in reference.generate(prompt, max_new_tokens=16, stop_token_ids=[])]
    dense = Generator(import_model(llama_folder, seq_len=16, max_len=48))
    assert got == [t.id for t in dense.generate(prompt, max_new_tokens=16, stop_token_ids=[])]
    stats = device.last_stats
    assert stats.device_time_to_first_token_s > 0 and len(stats.device_decode_step_s) == 15
    assert all(s > 0 for s in stats.device_decode_step_s)


def test_device_logits_follow_the_reference(compiled, paged):
    prompt = _prompts()[2]  # 3 chunks, the last padded
    dev, ref = DeviceExecutor(compiled), PagedReferenceExecutor(paged)
    a, b = dev.prefill([prompt]), ref.prefill([prompt])
    for _ in range(3):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3 * np.abs(b).max())
        token = [int(b[0].argmax())]
        a, b = dev.decode(token), ref.decode(token)


def test_batched_decode_equals_each_sequence_alone(compiled):
    prompts = _prompts()
    alone = []
    for p in prompts:
        ex = DeviceExecutor(compiled)
        seq = [int(ex.prefill([p])[0].argmax())]
        for _ in range(4):
            seq.append(int(ex.decode([seq[-1]])[0].argmax()))
        alone.append(seq)
    ex = DeviceExecutor(compiled)
    together = [[int(t)] for t in ex.prefill(prompts).argmax(-1)]
    for _ in range(4):
        for seq, t in zip(together, ex.decode([s[-1] for s in together]).argmax(-1), strict=True):
            seq.append(int(t))
    assert together == alone
    assert ex.lengths() == [n + 4 for n in PROMPTS_LENGTHS]


def test_a_prompt_longer_than_the_cache(compiled):
    # (a pool too small for the request is tested on the interpreter: test_paged_import.py)
    with pytest.raises(GenerationError, match="the prompt has 49 tokens but the KV cache holds 48 per sequence"):
        DeviceExecutor(compiled).prefill([[1] * 49])
