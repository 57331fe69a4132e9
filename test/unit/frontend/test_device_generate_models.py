"""Issue 11's parity for the small models on the simulated NPU (server, fp32, paged KV cache):
a tiny random GPT-2 from a Hugging Face folder and a tiny random Llama GGUF in every tensor
type the importer keeps (F32, F16, BF16, Q8_0, Q4_0, Q4_1), each compiled into one artifact
(@prefill_chunk + @decode) and run by the DeviceExecutor: the greedy continuation equals
transformers' own (its GGUF loader dequantizes to fp32) token for token for 16 tokens.
Slow (seven compiles): `make eval`. The Llama folder's device parity runs in `make test`
(test_device_generate.py)."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.frontend import import_model
from infer.generation import DeviceExecutor, Generator

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

NEW_TOKENS = 16
SOURCES = ["gpt2", "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"]


def _transformers_greedy(model, prompt: list[int]) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False,
                             eos_token_id=None, pad_token_id=0,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return out[0, len(prompt):].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES)
def test_device_greedy_equals_transformers(source, gpt2_folder, gpt2_model, llama_gguf):
    if source == "gpt2":
        path, reference = gpt2_folder, gpt2_model.eval()
    else:
        path = llama_gguf(source)
        reference = transformers.AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, torch_dtype=torch.float32).eval()
    paged = import_model(path, kv_cache="paged", chunk=8, max_len=48, block_size=4)
    device = Generator(paged, executor=DeviceExecutor(infer.compile(paged, target="server", precision="fp32")))
    prompt = [int(t) for t in np.random.default_rng(3).integers(0, 256, 13)]  # two chunks, the last padded
    got = [t.id for t in device.generate(prompt, max_new_tokens=NEW_TOKENS, stop_token_ids=[])]
    assert got == _transformers_greedy(reference, prompt)
    assert device.last_stats.device_time_per_output_token_s > 0
