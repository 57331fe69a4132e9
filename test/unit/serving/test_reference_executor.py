"""Batching invariance on the reference executor: a tiny random Llama (transformers,
save_pretrained), 8 concurrent requests of different prompt lengths served by continuous
batching with chunked prefill and preemption give, per request, exactly the greedy tokens
that request gets when served alone, and those equal transformers' own greedy tokens."""

from __future__ import annotations

import os

import numpy as np
import pytest

from helpers.serving_steps import hf_greedy, serve_recording_steps

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 96
OUT = 6
PROMPT_LENS = [3, 17, 6, 12, 9, 15, 4, 11]
BLOCK = 4


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=32,
                                   initializer_range=0.3)
    model = transformers.LlamaForCausalLM(cfg).eval()
    folder = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(str(folder), safe_serialization=True)
    return model, folder


@pytest.fixture(scope="module")
def executor(tiny_llama):
    from infer.serving.reference_executor import ReferenceExecutor

    return ReferenceExecutor(tiny_llama[1], block_size=BLOCK, num_blocks=10, max_batch=4)


def _serve(executor, prompts, max_batch, budget):
    executor.pool = [np.zeros_like(p) for p in executor.pool]
    batched, preemptions, steps, _ = serve_recording_steps(executor, prompts, OUT, max_batch, budget, 32)
    return batched, preemptions, steps


def _prompts():
    rng = np.random.default_rng(1)
    return [rng.integers(1, VOCAB, n).tolist() for n in PROMPT_LENS]






def test_batching_invariance_with_chunks_and_preemption(tiny_llama, executor):
    prompts = _prompts()
    batched, preemptions, steps = _serve(executor, prompts, max_batch=4, budget=8)
    # the run did exercise what it claims: chunked prompts, mixed steps, preemption by recomputation
    assert preemptions > 0
    assert any(n < PROMPT_LENS[rid] and pre and start == 0 for s in steps for rid, start, n, pre in s)
    assert any(any(pre for *_, pre in s) and any(not pre for *_, pre in s) for s in steps)
    for rid, prompt in enumerate(prompts):
        alone, _, _ = _serve(executor, [prompt], max_batch=1, budget=8)
        assert batched[rid] == alone[0], f"request {rid}: batched {batched[rid]} != alone {alone[0]}"
        assert alone[0] == hf_greedy(tiny_llama[0], prompt, OUT), f"request {rid}: differs from transformers"
