"""Paged-KV import (kv_cache="paged": @prefill_chunk and @decode over block pools) against the
dense @prefill/@decode of the same model on the reference interpreter, for a Llama, GPT-2 and
a GGUF file; the device executor's paging (chunks, padding, batches of different lengths) run
on the interpreter through the same entry points."""

from __future__ import annotations

import numpy as np
import pytest

from infer.frontend import ModelImportError, import_model
from infer.generation import Generator, ReferenceExecutor

from infer.generation.device_executor import PagedReferenceExecutor as paged_executor


def _dense_logits(model, prompt, steps):
    """Dense reference: prefill logits of the last prompt token, then `steps` greedy decodes."""
    ex = ReferenceExecutor(model)
    out = [ex.prefill([prompt])[0]]
    for _ in range(steps):
        out.append(ex.decode([int(out[-1].argmax())])[0])
    return np.stack(out)


@pytest.mark.parametrize("source", ["llama", "gpt2", "gguf"])
def test_paged_logits_equal_the_dense_ones(source, llama_folder, gpt2_folder, llama_gguf):
    path = {"llama": llama_folder, "gpt2": gpt2_folder, "gguf": llama_gguf("Q4_1")}[source]
    dense = import_model(path, seq_len=24, max_len=48)
    paged = import_model(path, kv_cache="paged", chunk=8, max_len=48, block_size=4, batch=2)
    fns = [op.sym_name.data for op in paged.module.body.block.ops]
    assert fns == ["prefill_chunk", "decode"]
    prompt = list(np.random.default_rng(0).integers(0, 256, 19))  # 3 chunks, the last one padded
    want = _dense_logits(dense, prompt, 6)
    ex = paged_executor(paged)
    got = [ex.prefill([prompt])[0]]
    for _ in range(6):
        got.append(ex.decode([int(got[-1].argmax())])[0])
    got = np.stack(got)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert (got.argmax(-1) == want.argmax(-1)).all()


def test_batched_decode_equals_each_sequence_alone(llama_folder):
    paged = import_model(llama_folder, kv_cache="paged", chunk=8, max_len=40, block_size=4, batch=4)
    rng = np.random.default_rng(1)
    prompts = [list(rng.integers(0, 256, n)) for n in (3, 11, 17, 8)]
    alone = []
    for p in prompts:
        gen = Generator(paged, executor=paged_executor(paged))
        alone.append([t.id for t in gen.generate(p, max_new_tokens=6, stop_token_ids=[])])
    ex = paged_executor(paged)
    logits = ex.prefill(prompts)
    together = [[int(t)] for t in logits.argmax(-1)]
    for _ in range(5):
        logits = ex.decode([seq[-1] for seq in together])
        for seq, t in zip(together, logits.argmax(-1), strict=True):
            seq.append(int(t))
    assert together == alone
    assert ex.lengths() == [len(p) + 5 for p in prompts]


def test_paged_import_errors(llama_folder, bert_folder):
    with pytest.raises(ModelImportError, match="block_size must be a power of two"):
        import_model(llama_folder, kv_cache="paged", block_size=12)
    with pytest.raises(ModelImportError, match="num_blocks 2 is too small"):
        import_model(llama_folder, kv_cache="paged", chunk=8, block_size=4, num_blocks=2)
    with pytest.raises(ModelImportError, match="apply to decoders"):
        import_model(bert_folder, kv_cache="paged")
    with pytest.raises(ModelImportError, match="kv_cache must be 'dense' or 'paged'"):
        import_model(llama_folder, kv_cache="ring")
    with pytest.raises(ModelImportError, match=r"need 1 <= chunk \(64\) <= max_len \(32\)"):
        import_model(llama_folder, kv_cache="paged", chunk=64, max_len=32)


def test_executor_errors(llama_folder):
    from infer.generation import GenerationError

    paged = import_model(llama_folder, kv_cache="paged", chunk=8, max_len=16, block_size=4, batch=2, num_blocks=5)
    ex = paged_executor(paged)
    with pytest.raises(GenerationError, match="the prompt has 17 tokens but the KV cache holds 16 per sequence"):
        ex.prefill([[1] * 17])
    with pytest.raises(GenerationError, match="the KV-cache pool is too small for this request: the prompts need 6 "
                                              "blocks of 4 tokens, the pool has 3"):
        ex.prefill([[1] * 12, [2] * 12])
    ex.prefill([[1] * 12])  # 3 blocks: all the pool has
    with pytest.raises(GenerationError, match="the KV-cache pool is too small"):
        ex.decode([5])


def test_sequences_join_and_leave_a_running_batch(llama_folder):
    """The serving-engine interface: a sequence admitted while others decode, one released and
    its blocks reused, each sequence's greedy tokens as when it runs alone."""
    paged = import_model(llama_folder, kv_cache="paged", chunk=8, max_len=32, block_size=4, batch=2)
    rng = np.random.default_rng(3)
    prompts = {"a": list(rng.integers(0, 256, 6)), "b": list(rng.integers(0, 256, 10)),
               "c": list(rng.integers(0, 256, 3))}

    def alone(p, n):
        gen = Generator(paged, executor=paged_executor(paged))
        return [t.id for t in gen.generate(p, max_new_tokens=n, stop_token_ids=[])]

    ex = paged_executor(paged)
    out = {"a": [int(ex.add_sequence("a", prompts["a"]).argmax())]}
    out["a"].append(int(ex.decode_step({"a": out["a"][-1]})["a"].argmax()))
    out["b"] = [int(ex.add_sequence("b", prompts["b"]).argmax())]
    for _ in range(3):
        step = ex.decode_step({s: out[s][-1] for s in ("a", "b")})
        for s, logits in step.items():
            out[s].append(int(logits.argmax()))
    free = ex.free_block_count
    ex.release("a")
    assert ex.free_block_count == free + 3  # 6 + 4 tokens: 3 blocks of 4
    out["c"] = [int(ex.add_sequence("c", prompts["c"]).argmax())]
    for _ in range(2):
        step = ex.decode_step({s: out[s][-1] for s in ("c", "b")})
        for s, logits in step.items():
            out[s].append(int(logits.argmax()))
    assert out == {"a": alone(prompts["a"], 5), "b": alone(prompts["b"], 6), "c": alone(prompts["c"], 3)}
