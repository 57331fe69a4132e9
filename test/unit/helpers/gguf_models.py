"""Tiny Llama GGUF files written with gguf.GGUFWriter, as llama.cpp's converter writes them
(random weights, q/k rows permuted, optionally a byte-level BPE tokenizer and a chat template).
Used by the frontend, generation and CLI tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

VOCAB = 256

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
