"""Generation from a Hugging Face folder: its own tokenizer files and chat template,
greedy tokens against transformers."""

from __future__ import annotations

import numpy as np
import pytest

from infer.frontend import import_model
from infer.generation import GenerationError, Generator

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def test_hf_folder_generates_like_transformers(llama_model, llama_folder, llama_gguf, tmp_path):
    import shutil

    folder = tmp_path / "llama"
    shutil.copytree(llama_folder, folder)
    # a tokenizer of the same vocabulary size, saved as the folder's own tokenizer files
    path = llama_gguf("Q4_1", tokenizer=True)
    transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).save_pretrained(str(folder))

    gen = Generator(folder, prefill_length=8, max_context=48)
    assert (folder / "tokenizer.json").exists() and gen.model.chat_template is not None
    ids = gen.encode("Hi there")
    assert ids == transformers.AutoTokenizer.from_pretrained(str(folder)).apply_chat_template(
        [{"role": "user", "content": "Hi there"}], add_generation_prompt=True, return_dict=False)
    got = [t.id for t in gen.generate("Hi there", max_new_tokens=10, stop_token_ids=[])]
    with torch.no_grad():
        out = llama_model.generate(torch.tensor([ids]), max_new_tokens=10, do_sample=False, eos_token_id=None,
                                   pad_token_id=0, attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    assert got == out[0, len(ids):].tolist()


def test_generator_needs_a_decoder(llama_folder):
    prefill_only = import_model(llama_folder, seq_len=8, max_len=16, phase="prefill")
    with pytest.raises(GenerationError, match=r"needs a decoder with @prefill and @decode .* the module has @main"):
        Generator(prefill_only)
    with pytest.raises(GenerationError, match="apply when the Generator imports the model from a path"):
        Generator(import_model(llama_folder, seq_len=8, max_len=16), max_context=32)
    gen = Generator(import_model(llama_folder, seq_len=8, max_len=16))
    with pytest.raises(GenerationError, match="the prompt is empty"):
        gen.generate([])
    with pytest.raises(GenerationError, match="the prompt must be a string, chat messages .* or token ids, got int"):
        gen.generate(123)
    with pytest.raises(GenerationError, match="token id 999 is outside the vocabulary"):
        gen.generate([1, 999])
    assert np.asarray(gen.executor.prefill([[1, 2, 3]])).shape == (1, 256)
