"""Hugging Face checkpoint frontend (config.json + *.safetensors), without torch.

    module = import_hf_folder("path/to/model", seq_len=128, batch=1)

Supported architectures (by `model_type` / `architectures` in config.json)
- Llama family: llama, mistral, qwen2 (RMSNorm, RoPE with `rope_theta` and
  rope scaling "default", "linear" or "llama3", SwiGLU MLP, grouped-query
  attention, tied or untied embeddings, q/k/v/o biases when the checkpoint has
  them, as Qwen2 does).
- GPT-2 (Conv1D weights are [in, out]: used as they are with `graph.matmul`,
  nothing is transposed or copied).
- BERT-style encoders (bert; sentence-transformers folders such as
  all-MiniLM-L6-v2: when modules.json lists a Pooling module, its
  1_Pooling/config.json selects mean/cls/max pooling, and a Normalize module
  adds L2 normalization).

The builders read tensors by Hugging Face name from a weight provider
(`WeightProvider`, in hf_checkpoint.py): a folder's `Checkpoint`, or
`GGUFWeights` for GGUF files (infer.frontend.gguf_import, which reuses the Llama
builder with RoPE on interleaved pairs).

Weights are never read at import time: the module's weight store is the
checkpoint's own safetensors file (single file) and `graph.weight` ops refer to
the checkpoint's tensor names; a sharded checkpoint
(model.safetensors.index.json) gets a `ShardedWeightStore` that reads each
tensor lazily from its shard (both in hf_checkpoint.py). Only the safetensors
headers are parsed (and validated), so import time and memory do not grow with
the model size. Weights
stored in another float type than the compute dtype (`dtype`, default f32) are
converted by a `graph.cast` after the `graph.weight`.

Decoders (Llama family, GPT-2): TWO functions in ONE module, sharing weights.
- `@prefill(input_ids: i64[B, S]) -> (logits f32[B, S, V], k_0, v_0, ..., k_{L-1}, v_{L-1})`
  with the KV cache k_i/v_i: [B, Hkv, P, D], positions >= S zero.
- `@decode(input_ids: i64[B, 1], position: i64[B], k_0, v_0, ...) -> (logits f32[B, 1, V], k_0, v_0, ...)`
  `position` is the index of the new token (= number of tokens already in the
  cache); the step writes its key/value at that index and attends to cache
  positions <= position. The outputs feed the next step unchanged.
S = `seq_len` (prefill length) and P = `max_len` (cache capacity) are static.
`phase="prefill"` or `phase="decode"` imports only that function, named
`@main` (a single-function module that `Model.run` and the compiler take as is).
Prompts in one batch have the same length (no padding inside prefill).
`kv_cache="paged"` (with `chunk`, `max_len`, `block_size`, `num_blocks`, `batch`) builds
instead `@prefill_chunk` and `@decode` over paged KV-cache pools, the functions the NPU runs
(frontend/paged_decoder.py, docs/gguf.md).

Encoders (BERT): one function `@main(input_ids, attention_mask, token_type_ids:
i64[B, S]) -> last_hidden_state f32[B, S, H]` plus `sentence_embedding f32[B, H]`
(sentence-transformers pooling) or `pooler_output` (BertModel pooler), when present.

Errors (`ModelImportError`, one message each): missing config/weights, a bad
safetensors header, a tensor missing from the checkpoint, or a tensor whose
shape disagrees with config.json (the message names the tensor, the expected
and the actual shape).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import shape_of, to_numpy_dtype
from infer.dialects.weights import WeightStore, attach_weights
from infer.frontend.builder import GraphBuilder
from infer.frontend.hf_checkpoint import Checkpoint, WeightProvider
from infer.frontend.model import ModelImportError

# --------------------------------------------------------------------------
# Emission helpers
# --------------------------------------------------------------------------


class _Emitter(GraphBuilder):
    """A GraphBuilder over the checkpoint store, with shape-checked weight references.
    Its constants stay in the text whatever their size (`inline_constant`), so that the
    module's weights are exactly the checkpoint's tensors."""

    def __init__(self, ckpt: WeightProvider, dtype: np.dtype, prefixes: Sequence[str]):
        super().__init__(ckpt.store)
        self.ckpt = ckpt
        self.dtype = np.dtype(dtype)
        self.prefixes = list(prefixes)
        self._weights: dict[str, SSAValue] = {}

    def has(self, name: str) -> bool:
        return self.resolve(name, required=False) is not None

    def resolve(self, name: str, required: bool = True, aliases: Sequence[str] = ()) -> str | None:
        for cand in (name, *aliases):
            for p in self.prefixes:
                if p + cand in self.ckpt:
                    return p + cand
        if required:
            tried = ", ".join(f"'{p}{name}'" for p in self.prefixes)
            raise ModelImportError(f"{self.ckpt.folder}: tensor '{name}' is missing from the checkpoint (looked for {tried})")
        return None

    def w(self, name: str, shape: Sequence[int], aliases: Sequence[str] = ()) -> SSAValue:
        """Reference checkpoint tensor `name`, checking its shape against `shape`."""
        key = self.resolve(name, aliases=aliases)
        assert key is not None
        if key in self._weights:
            return self._weights[key]
        info = self.ckpt.tensors[key]
        if tuple(info.shape) != tuple(shape):
            raise ModelImportError(
                f"{self.ckpt.folder}: tensor '{key}' has shape {list(info.shape)} but {self.ckpt.config_name} "
                f"implies {list(shape)}"
            )
        v = self.ckpt.emit(self, key, self.dtype)
        self._weights[key] = v
        return v

    def opt_w(self, name: str, shape: Sequence[int]) -> SSAValue | None:
        return self.w(name, shape) if self.has(name) else None

    def linear(self, x: SSAValue, prefix: str, n_in: int, n_out: int, bias: bool | None = None) -> SSAValue:
        w = self.w(f"{prefix}.weight", (n_out, n_in))
        b = None
        if bias is None:
            b = self.opt_w(f"{prefix}.bias", (n_out,))
        elif bias:
            b = self.w(f"{prefix}.bias", (n_out,))
        return self.op(g.LinearOp, [x, w, b])

    def heads(self, x: SSAValue, n_heads: int, head_dim: int) -> SSAValue:
        """[B, S, n*D] -> [B, n, S, D]"""
        b, s, _ = shape_of(x)
        return self.transpose(self.reshape(x, (b, s, n_heads, head_dim)), [0, 2, 1, 3])

    def merge_heads(self, x: SSAValue) -> SSAValue:
        """[B, n, S, D] -> [B, S, n*D]"""
        b, n, s, d = shape_of(x)
        return self.reshape(self.transpose(x, [0, 2, 1, 3]), (b, s, n * d))


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------

LLAMA_TYPES = {"llama", "mistral", "qwen2"}
GPT2_TYPES = {"gpt2"}
BERT_TYPES = {"bert"}


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.exists():
        raise ModelImportError(f"{folder}: not a Hugging Face model folder (no config.json)")
    try:
        cfg = json.loads(path.read_text())
    except ValueError as e:
        raise ModelImportError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise ModelImportError(f"{path}: expected a JSON object")
    return cfg


def import_hf_folder(
    path: str | os.PathLike[str],
    seq_len: int | None = None,
    batch: int = 1,
    phase: str | None = None,
    max_len: int | None = None,
    dtype: str | np.dtype = "float32",
    **paged: Any,
) -> ModuleOp:
    """Import a Hugging Face folder; see the module docstring for the signatures.

    seq_len: prefill / encoder sequence length (default min(128, max positions)).
    max_len: KV-cache capacity of decoders (default min(max positions, seq_len + 128)).
    phase: None (decoders: @prefill and @decode), "prefill" or "decode" (one @main).
    dtype: compute dtype (weights stored otherwise are cast in the graph).
    kv_cache="paged" (decoders; with block_size, num_blocks, chunk): @prefill_chunk and
    @decode over paged KV-cache pools instead (frontend/paged_decoder.py).
    """
    folder = Path(path)
    if not folder.is_dir():
        raise ModelImportError(f"{folder}: not a folder")
    cfg = read_config(folder)
    model_type = str(cfg.get("model_type", "")).lower()
    if batch < 1:
        raise ModelImportError(f"batch must be >= 1, got {batch}")
    if phase not in (None, "prefill", "decode"):
        raise ModelImportError(f"phase must be None, 'prefill' or 'decode', got {phase!r}")
    try:
        np_dtype = np.dtype(dtype) if not isinstance(dtype, str) else to_numpy_dtype_name(dtype)
    except (TypeError, ValueError) as e:
        raise ModelImportError(f"unsupported dtype {dtype!r}: {e}") from None
    if model_type in LLAMA_TYPES:
        builder = _LlamaImporter
    elif model_type in GPT2_TYPES:
        builder = _Gpt2Importer
    elif model_type in BERT_TYPES:
        builder = _BertImporter
    else:
        raise ModelImportError(
            f"{folder}: unsupported model_type {model_type!r} (architectures "
            f"{cfg.get('architectures')}); supported: {sorted(LLAMA_TYPES | GPT2_TYPES | BERT_TYPES)}"
        )
    ckpt = Checkpoint(folder)
    if paged and builder is _BertImporter:
        raise ModelImportError(f"{', '.join(sorted(paged))} apply to decoders (Llama family, GPT-2), not BERT")
    return builder(folder, cfg, ckpt, np_dtype).build(seq_len=seq_len, batch=batch, phase=phase, max_len=max_len,
                                                      **paged)


def to_numpy_dtype_name(name: str) -> np.dtype:
    aliases = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64"}
    from infer.dialects.dtypes import parse_element_type

    return to_numpy_dtype(parse_element_type(aliases.get(name, name)))


def _combine(funcs: list[tuple[str, ModuleOp]], store: WeightStore) -> ModuleOp:
    """Move the functions of single-function modules into one module."""
    from xdsl.dialects.func import FuncOp

    ops = []
    for name, m in funcs:
        fn = next(op for op in m.body.block.ops if isinstance(op, FuncOp))
        fn.detach()
        fn.sym_name = StringAttr(name)
        ops.append(fn)
    module = ModuleOp(ops)
    attach_weights(module, store)
    module.verify()
    return module


# --------------------------------------------------------------------------
# Decoders
# --------------------------------------------------------------------------


class _ModelImporter:
    """One architecture's importer: reads config.json (`read_config`), then `build`s the
    module with an `_Emitter` over the weight provider (`ckpt`: a folder's checkpoint or a
    GGUF file's tensors, by Hugging Face name), whose tensor names may carry one of
    `prefixes`. `cfg` holds Hugging Face config.json keys."""

    prefixes: Sequence[str] = ("",)

    def __init__(self, folder: Path, cfg: dict[str, Any], ckpt: WeightProvider, dtype: np.dtype):
        self.folder, self.cfg, self.ckpt, self.dtype = folder, cfg, ckpt, dtype
        self.read_config()

    def read_config(self) -> None:
        raise NotImplementedError

    def cfg_get(self, *keys: str, default: Any = None, required: bool = True) -> Any:
        """The first of `keys` that config.json sets (to something other than null), else
        `default`; with no default a missing required key is an error naming the first key."""
        for k in keys:
            if self.cfg.get(k) is not None:
                return self.cfg[k]
        if default is None and required:
            raise ModelImportError(f"{self.folder}/config.json: missing '{keys[0]}'")
        return default

    def emitter(self) -> _Emitter:
        return _Emitter(self.ckpt, self.dtype, self.prefixes)


class _DecoderImporter(_ModelImporter):
    """Shared prefill/decode structure; subclasses emit embeddings and blocks."""

    def build(self, seq_len, batch, phase, max_len, kv_cache: str = "dense", block_size: int | None = None,
              num_blocks: int | None = None, chunk: int | None = None) -> ModuleOp:
        if kv_cache == "paged":
            return self.build_paged(seq_len, batch, phase, max_len, block_size, num_blocks, chunk)
        if kv_cache != "dense":
            raise ModelImportError(f"kv_cache must be 'dense' or 'paged', got {kv_cache!r}")
        if (block_size, num_blocks, chunk) != (None, None, None):
            raise ModelImportError("block_size, num_blocks and chunk apply to kv_cache='paged'")
        max_pos = self.max_positions
        seq_len = seq_len or min(128, max_pos)
        max_len = max_len or min(max_pos, seq_len + 128)
        if seq_len < 1 or max_len < seq_len:
            raise ModelImportError(f"need 1 <= seq_len ({seq_len}) <= max_len ({max_len})")
        if max_len > max_pos:
            raise ModelImportError(
                f"max_len {max_len} exceeds the model's max_position_embeddings ({max_pos})"
            )
        self.check_lengths(max_len)
        funcs = []
        if phase in (None, "prefill"):
            funcs.append(("prefill", self.prefill(batch, seq_len, max_len)))
        if phase in (None, "decode"):
            funcs.append(("decode", self.decode(batch, max_len)))
        if phase is not None:
            return funcs[0][1]
        return _combine(funcs, self.ckpt.store)

    def build_paged(self, seq_len, batch, phase, max_len, block_size, num_blocks, chunk) -> ModuleOp:
        """@prefill_chunk and @decode over paged KV pools (frontend/paged_decoder.py)."""
        from infer.frontend.paged_decoder import DEFAULT_BLOCK_SIZE, DEFAULT_CHUNK, build_paged

        if phase is not None:
            raise ModelImportError("phase applies to kv_cache='dense'; a paged import has @prefill_chunk and @decode")
        if seq_len is not None:
            raise ModelImportError("kv_cache='paged' takes chunk (tokens per prefill step), not seq_len")
        max_pos = self.max_positions
        chunk = chunk or min(DEFAULT_CHUNK, max_pos)
        max_len = max_len or min(max_pos, 256)
        if not 1 <= chunk <= max_len <= max_pos:
            raise ModelImportError(f"need 1 <= chunk ({chunk}) <= max_len ({max_len}) <= the model's "
                                   f"max_position_embeddings ({max_pos})")
        self.check_lengths(max_len)
        return build_paged(self, batch, chunk, max_len, block_size or DEFAULT_BLOCK_SIZE, num_blocks)

    def check_lengths(self, max_len: int) -> None:
        pass

    def cache_names(self) -> list[str]:
        return [f"{kv}_{i}" for i in range(self.n_layers) for kv in ("k", "v")]

    def prefill(self, batch: int, seq: int, max_len: int) -> ModuleOp:
        e = self.emitter()
        ids = e.input("input_ids", (batch, seq), np.int64)
        ctx = _PrefillContext(e, batch, seq, max_len)
        x = self.embed(e, ids, ctx)
        caches = []
        for i in range(self.n_layers):
            x, k, v = self.block(e, i, x, ctx)
            pad = max_len - seq
            if pad:
                pads = g.i64_array([0, 0, 0, 0, 0, 0, pad, 0])
                k = e.op(g.PadOp, [k], pads=pads)
                v = e.op(g.PadOp, [v], pads=pads)
            caches += [k, v]
        logits = self.head(e, x)
        return e.finish([logits, *caches], ["logits", *self.cache_names()])

    def decode(self, batch: int, max_len: int) -> ModuleOp:
        e = self.emitter()
        ids = e.input("input_ids", (batch, 1), np.int64)
        pos = e.input("position", (batch,), np.int64)
        past = [e.input(n, (batch, self.n_kv_heads, max_len, self.head_dim), self.dtype) for n in self.cache_names()]
        ctx = _DecodeContext(e, batch, max_len, pos)
        x = self.embed(e, ids, ctx)
        caches = []
        for i in range(self.n_layers):
            x, k, v = self.block(e, i, x, ctx, past[2 * i], past[2 * i + 1])
            caches += [k, v]
        logits = self.head(e, x)
        return e.finish([logits, *caches], ["logits", *self.cache_names()])

    def attend(self, e: _Emitter, q, k, v, ctx, past_k=None, past_v=None, scale=None):
        """q: [B, Hq, s, D]; k, v: [B, Hkv, s, D]. Returns (out [B, Hq, s, D], k_cache, v_cache)."""
        if getattr(ctx, "paged", False):
            from infer.frontend.paged_decoder import attend_paged

            return attend_paged(e, q, k, v, ctx, past_k, past_v, scale)
        props = {} if scale is None else {"scale": g.f64_attr(scale)}
        if isinstance(ctx, _PrefillContext):
            out = e.op(g.AttentionOp, [q, k, v], causal=g.bool_attr(True), **props)
            return out, k, v
        k_all = e.op(g.WhereOp, [ctx.write_mask, k, past_k])
        v_all = e.op(g.WhereOp, [ctx.write_mask, v, past_v])
        out = e.op(g.AttentionOp, [q, k_all, v_all, ctx.attend_mask], causal=g.bool_attr(False), **props)
        return out, k_all, v_all


class _PrefillContext:
    def __init__(self, e: _Emitter, batch: int, seq: int, max_len: int):
        self.batch, self.seq, self.max_len = batch, seq, max_len
        self.positions = e.inline_constant(np.arange(seq, dtype=np.int64))  # [S]


class _DecodeContext:
    def __init__(self, e: _Emitter, batch: int, max_len: int, pos: SSAValue):
        self.batch, self.seq, self.max_len = batch, 1, max_len
        self.position = pos  # [B]
        slots = e.inline_constant(np.arange(max_len, dtype=np.int64))
        # write the new key/value at `position`: [B, 1, P, 1]
        self.write_mask = e.op(
            g.EqualOp, [e.reshape(slots, (1, 1, max_len, 1)), e.reshape(pos, (batch, 1, 1, 1))]
        )
        # attend to cache slots <= position: [B, 1, 1, P]
        self.attend_mask = e.op(
            g.LessEqualOp, [e.reshape(slots, (1, 1, 1, max_len)), e.reshape(pos, (batch, 1, 1, 1))]
        )


# -- Llama / Mistral / Qwen2 ------------------------------------------------------


def rope_inv_freq(cfg: dict[str, Any], rot_dim: int, folder: Path) -> tuple[np.ndarray, float]:
    """inv_freq [rot_dim/2] (float32, as transformers computes it) and the attention scaling."""
    params = dict(cfg.get("rope_parameters") or {})
    scaling = cfg.get("rope_scaling") or {}
    if scaling:
        params.update(scaling)
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default")) or "default"
    exps = np.arange(0, rot_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(rot_dim)
    inv_freq = (np.float32(1.0) / (np.float32(theta) ** exps)).astype(np.float32)
    if rope_type == "default":
        return inv_freq, 1.0
    if rope_type == "linear":
        return (inv_freq / np.float32(params["factor"])).astype(np.float32), 1.0
    if rope_type == "llama3":
        factor = float(params["factor"])
        low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
        old = float(params["original_max_position_embeddings"])
        low_wl, high_wl = old / low, old / high
        wavelen = (2 * math.pi / inv_freq).astype(np.float32)
        scaled = np.where(wavelen > low_wl, inv_freq / np.float32(factor), inv_freq).astype(np.float32)
        smooth = ((old / wavelen - low) / (high - low)).astype(np.float32)
        smoothed = ((1 - smooth) * scaled / np.float32(factor) + smooth * scaled).astype(np.float32)
        medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        return np.where(medium, smoothed, scaled).astype(np.float32), 1.0
    raise ModelImportError(
        f"{folder}/config.json: rope scaling type {rope_type!r} is not supported "
        "(supported: default, linear, llama3)"
    )


class _LlamaImporter(_DecoderImporter):
    prefixes = ("", "model.")
    rope_interleaved = False
    """False: q/k rows as Hugging Face stores them, RoPE rotates halves. True: rows
    as llama.cpp's GGUF converter permuted them (each head's halves interleaved),
    RoPE rotates adjacent pairs: the same attention scores on the stored weights."""

    def read_config(self) -> None:
        c = self.cfg_get
        self.hidden = int(c("hidden_size"))
        self.n_layers = int(c("num_hidden_layers"))
        self.n_heads = int(c("num_attention_heads"))
        self.n_kv_heads = int(c("num_key_value_heads", default=self.n_heads))
        self.head_dim = int(c("head_dim", default=self.hidden // self.n_heads))
        self.inter = int(c("intermediate_size"))
        self.vocab = int(c("vocab_size"))
        self.eps = float(c("rms_norm_eps", default=1e-6))
        self.max_positions = int(c("max_position_embeddings", default=2048))
        self.tied = bool(self.cfg.get("tie_word_embeddings", False))
        act = c("hidden_act", default="silu")
        if act not in ("silu", "swish"):
            raise ModelImportError(f"{self.folder}/config.json: hidden_act {act!r} is not supported for Llama-family models (silu)")
        if self.n_heads % self.n_kv_heads:
            raise ModelImportError(
                f"{self.folder}/config.json: num_attention_heads ({self.n_heads}) is not a multiple of "
                f"num_key_value_heads ({self.n_kv_heads})"
            )
        partial = float(self.cfg.get("partial_rotary_factor", 1.0) or 1.0)
        self.rot_dim = int(self.head_dim * partial)
        self.inv_freq, self.attn_scaling = rope_inv_freq(self.cfg, self.rot_dim, self.folder)

    def check_lengths(self, max_len: int) -> None:
        window = self.cfg.get("sliding_window")
        use = self.cfg.get("use_sliding_window", self.cfg.get("model_type") == "mistral")
        if use and window is not None and max_len > int(window):
            raise ModelImportError(
                f"max_len {max_len} exceeds the sliding window ({window}); sliding-window attention "
                "is not implemented, choose max_len <= sliding_window"
            )

    def embed(self, e: _Emitter, ids, ctx):
        table = e.w("embed_tokens.weight", (self.vocab, self.hidden))
        x = e.op(g.GatherOp, [table, ids], axis=g.i64_attr(0))
        # RoPE angles: positions x inv_freq, laid out for the q/k rows (rope_interleaved)
        if getattr(ctx, "paged", False):
            cos, sin = (self.rope_rows(e, which, ctx) for which in ("cos", "sin"))
            shape = (ctx.batch, 1, ctx.seq, self.rot_dim)
            ctx.cos, ctx.sin = e.reshape(cos, shape), e.reshape(sin, shape)
            return x
        inv = e.inline_constant(self.inv_freq.astype(self.dtype))
        if isinstance(ctx, _PrefillContext):
            pos = e.reshape(e.cast(ctx.positions, self.dtype), (ctx.seq, 1))
            ang = e.op(g.MulOp, [pos, inv])  # [S, R/2]
            shape = (ctx.seq, self.rot_dim)
        else:
            pos = e.reshape(e.cast(ctx.position, self.dtype), (ctx.batch, 1))
            ang = e.op(g.MulOp, [pos, inv])  # [B, R/2]
            shape = (ctx.batch, 1, 1, self.rot_dim)
        if self.rope_interleaved:  # angle i for features 2i and 2i+1
            rows = shape[0]
            col = e.reshape(ang, (rows, self.rot_dim // 2, 1))
            ang = e.reshape(e.op(g.ConcatOp, [col, col], axis=g.i64_attr(-1)), (rows, self.rot_dim))
        else:  # HF layout: halves repeated
            ang = e.op(g.ConcatOp, [ang, ang], axis=g.i64_attr(-1))
        cos, sin = e.op(g.CosOp, [ang]), e.op(g.SinOp, [ang])
        if self.attn_scaling != 1.0:
            s = e.scalar(self.attn_scaling, like=cos)
            cos, sin = e.op(g.MulOp, [cos, s]), e.op(g.MulOp, [sin, s])
        ctx.cos, ctx.sin = e.reshape(cos, shape), e.reshape(sin, shape)
        return x

    def rope_rows(self, e: _Emitter, which: str, ctx) -> SSAValue:
        """cos or sin at the runtime positions: rows of a table for positions [0, max_len)
        (paged_decoder.rope_table), one weight shared by the module's functions."""
        from infer.frontend.paged_decoder import rope_table

        keys = getattr(self, "_rope_keys", None)
        if keys is None or keys[0] != ctx.max_len:
            tables = rope_table(self.inv_freq, ctx.max_len, self.rope_interleaved, self.attn_scaling, self.dtype)
            keys = (ctx.max_len, {n: self.ckpt.store.add(f"rope_{n}_table", t) for n, t in zip(("cos", "sin"), tables)})
            self._rope_keys = keys
        table = e.file_weight(keys[1][which], (ctx.max_len, self.rot_dim), self.dtype)
        return e.op(g.GatherOp, [table, ctx.positions], axis=g.i64_attr(0))  # [b, s, R]

    def block(self, e: _Emitter, i: int, x, ctx, past_k=None, past_v=None):
        p = f"layers.{i}"
        h, d = self.hidden, self.head_dim
        hn = e.op(g.RmsNormOp, [x, e.w(f"{p}.input_layernorm.weight", (h,))], epsilon=g.f64_attr(self.eps))
        q = e.heads(e.linear(hn, f"{p}.self_attn.q_proj", h, self.n_heads * d), self.n_heads, d)
        k = e.heads(e.linear(hn, f"{p}.self_attn.k_proj", h, self.n_kv_heads * d), self.n_kv_heads, d)
        v = e.heads(e.linear(hn, f"{p}.self_attn.v_proj", h, self.n_kv_heads * d), self.n_kv_heads, d)
        rope = {"interleaved": g.bool_attr(True)} if self.rope_interleaved else {}
        q = e.op(g.RotaryOp, [q, ctx.cos, ctx.sin], **rope)
        k = e.op(g.RotaryOp, [k, ctx.cos, ctx.sin], **rope)
        att, k_all, v_all = self.attend(e, q, k, v, ctx, past_k, past_v)
        o = e.linear(e.merge_heads(att), f"{p}.self_attn.o_proj", self.n_heads * d, h)
        x = e.op(g.AddOp, [x, o])
        hn = e.op(g.RmsNormOp, [x, e.w(f"{p}.post_attention_layernorm.weight", (h,))], epsilon=g.f64_attr(self.eps))
        gate = e.op(g.SiluOp, [e.linear(hn, f"{p}.mlp.gate_proj", h, self.inter)])
        up = e.linear(hn, f"{p}.mlp.up_proj", h, self.inter)
        down = e.linear(e.op(g.MulOp, [gate, up]), f"{p}.mlp.down_proj", self.inter, h)
        return e.op(g.AddOp, [x, down]), k_all, v_all

    def head(self, e: _Emitter, x):
        x = e.op(g.RmsNormOp, [x, e.w("norm.weight", (self.hidden,))], epsilon=g.f64_attr(self.eps))
        if self.tied:
            w = e.w("embed_tokens.weight", (self.vocab, self.hidden))
        else:
            w = e.w("lm_head.weight", (self.vocab, self.hidden))
        return e.op(g.LinearOp, [x, w])


# -- GPT-2 ----------------------------------------------------------------------------


class _Gpt2Importer(_DecoderImporter):
    prefixes = ("", "transformer.")

    def read_config(self) -> None:
        c = self.cfg_get
        self.hidden = int(c("n_embd", "hidden_size"))
        self.n_layers = int(c("n_layer", "num_hidden_layers"))
        self.n_heads = self.n_kv_heads = int(c("n_head", "num_attention_heads"))
        self.head_dim = self.hidden // self.n_heads
        self.inter = int(self.cfg.get("n_inner") or 4 * self.hidden)
        self.vocab = int(c("vocab_size"))
        self.eps = float(c("layer_norm_epsilon", default=1e-5))
        self.max_positions = int(c("n_positions", "max_position_embeddings", default=1024))
        act = c("activation_function", default="gelu_new")
        approx = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu_fast": "tanh", "gelu": "none"}
        if act not in approx:
            raise ModelImportError(f"{self.folder}/config.json: activation_function {act!r} is not supported")
        self.approx = approx[act]
        if self.cfg.get("scale_attn_by_inverse_layer_idx"):
            raise ModelImportError(f"{self.folder}/config.json: scale_attn_by_inverse_layer_idx is not supported")
        self.scale = None if self.cfg.get("scale_attn_weights", True) else 1.0

    def ln(self, e, x, p):
        return e.op(g.LayerNormOp, [x, e.w(f"{p}.weight", (self.hidden,)), e.w(f"{p}.bias", (self.hidden,))],
                    epsilon=g.f64_attr(self.eps))

    def conv1d(self, e, x, p, n_in, n_out):
        """GPT-2 Conv1D: y = x @ W + b with W [in, out] (used as stored)."""
        y = e.op(g.MatmulOp, [x, e.w(f"{p}.weight", (n_in, n_out))])
        return e.op(g.AddOp, [y, e.w(f"{p}.bias", (n_out,))])

    def embed(self, e: _Emitter, ids, ctx):
        wte = e.w("wte.weight", (self.vocab, self.hidden))
        wpe = e.w("wpe.weight", (self.max_positions, self.hidden))
        x = e.op(g.GatherOp, [wte, ids], axis=g.i64_attr(0))
        if getattr(ctx, "paged", False):
            pe = e.op(g.GatherOp, [wpe, ctx.positions], axis=g.i64_attr(0))  # [b, s, H]
        elif isinstance(ctx, _PrefillContext):
            pe = e.slice_dim(wpe, 0, 0, ctx.seq)  # [S, H]
        else:
            pe = e.reshape(e.op(g.GatherOp, [wpe, ctx.position], axis=g.i64_attr(0)), (ctx.batch, 1, self.hidden))
        return e.op(g.AddOp, [x, pe])

    def block(self, e: _Emitter, i: int, x, ctx, past_k=None, past_v=None):
        p = f"h.{i}"
        h, d, n = self.hidden, self.head_dim, self.n_heads
        hn = self.ln(e, x, f"{p}.ln_1")
        qkv = self.conv1d(e, hn, f"{p}.attn.c_attn", h, 3 * h)
        q, k, v = (e.heads(e.slice_dim(qkv, 2, j * h, (j + 1) * h), n, d) for j in range(3))
        att, k_all, v_all = self.attend(e, q, k, v, ctx, past_k, past_v, scale=self.scale)
        x = e.op(g.AddOp, [x, self.conv1d(e, e.merge_heads(att), f"{p}.attn.c_proj", h, h)])
        hn = self.ln(e, x, f"{p}.ln_2")
        m = e.op(g.GeluOp, [self.conv1d(e, hn, f"{p}.mlp.c_fc", h, self.inter)], approximate=StringAttr(self.approx))
        x = e.op(g.AddOp, [x, self.conv1d(e, m, f"{p}.mlp.c_proj", self.inter, h)])
        return x, k_all, v_all

    def head(self, e: _Emitter, x):
        x = self.ln(e, x, "ln_f")
        if e.has("lm_head.weight") and not self.cfg.get("tie_word_embeddings", True):
            w = e.w("lm_head.weight", (self.vocab, self.hidden))
        else:
            w = e.w("wte.weight", (self.vocab, self.hidden))
        return e.op(g.LinearOp, [x, w])


# --------------------------------------------------------------------------
# BERT encoders
# --------------------------------------------------------------------------


def sentence_transformers_modules(folder: Path) -> tuple[dict[str, Any] | None, bool]:
    """(pooling config or None, normalize?) from a sentence-transformers folder."""
    path = folder / "modules.json"
    if not path.exists():
        return None, False
    try:
        modules = json.loads(path.read_text())
    except ValueError as e:
        raise ModelImportError(f"{path}: invalid JSON: {e}") from None
    pooling, normalize = None, False
    for m in modules:
        kind = str(m.get("type", ""))
        if kind.endswith(".Pooling"):
            cfg_path = folder / m.get("path", "") / "config.json"
            if not cfg_path.exists():
                raise ModelImportError(f"{folder}: modules.json lists a Pooling module but {cfg_path} is missing")
            pooling = json.loads(cfg_path.read_text())
        elif kind.endswith(".Normalize"):
            normalize = True
        elif kind.endswith(".Transformer"):
            pass
        else:
            raise ModelImportError(f"{path}: sentence-transformers module {kind!r} is not supported")
    return pooling, normalize


class _BertImporter(_ModelImporter):
    prefixes = ("", "bert.")

    def read_config(self) -> None:
        c = self.cfg_get
        self.hidden = int(c("hidden_size"))
        self.n_layers = int(c("num_hidden_layers"))
        self.n_heads = int(c("num_attention_heads"))
        self.inter = int(c("intermediate_size"))
        self.vocab = int(c("vocab_size"))
        self.head_dim = self.hidden // self.n_heads
        self.max_positions = int(c("max_position_embeddings", default=512))
        self.type_vocab = int(c("type_vocab_size", default=2))
        self.eps = float(c("layer_norm_eps", default=1e-12))
        act = c("hidden_act", default="gelu")
        approx = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}
        if act not in approx:
            raise ModelImportError(f"{self.folder}/config.json: hidden_act {act!r} is not supported for BERT")
        self.approx = approx[act]
        position_embedding = c("position_embedding_type", default="absolute")
        if position_embedding != "absolute":
            raise ModelImportError(f"{self.folder}/config.json: position_embedding_type {position_embedding!r} is not supported")
        self.pooling, self.normalize = sentence_transformers_modules(self.folder)

    def ln(self, e: _Emitter, x, p):
        return e.op(
            g.LayerNormOp,
            [x, e.w(f"{p}.weight", (self.hidden,), aliases=[f"{p}.gamma"]), e.w(f"{p}.bias", (self.hidden,), aliases=[f"{p}.beta"])],
            epsilon=g.f64_attr(self.eps),
        )

    def build(self, seq_len, batch, phase, max_len) -> ModuleOp:
        if phase is not None:
            raise ModelImportError("phase applies to decoder models only; BERT imports as one @main")
        seq = seq_len or min(128, self.max_positions)
        if seq > self.max_positions:
            raise ModelImportError(f"seq_len {seq} exceeds max_position_embeddings ({self.max_positions})")
        e = self.emitter()
        h, n, d = self.hidden, self.n_heads, self.head_dim
        ids = e.input("input_ids", (batch, seq), np.int64)
        mask_in = e.input("attention_mask", (batch, seq), np.int64)
        types = e.input("token_type_ids", (batch, seq), np.int64)
        x = e.op(g.GatherOp, [e.w("embeddings.word_embeddings.weight", (self.vocab, h)), ids], axis=g.i64_attr(0))
        t = e.op(g.GatherOp, [e.w("embeddings.token_type_embeddings.weight", (self.type_vocab, h)), types], axis=g.i64_attr(0))
        pe = e.slice_dim(e.w("embeddings.position_embeddings.weight", (self.max_positions, h)), 0, 0, seq)
        x = e.op(g.AddOp, [e.op(g.AddOp, [x, t]), pe])
        x = self.ln(e, x, "embeddings.LayerNorm")
        keep = e.cast(mask_in, np.bool_)  # [B, S]
        att_mask = e.reshape(keep, (batch, 1, 1, seq))
        for i in range(self.n_layers):
            p = f"encoder.layer.{i}"
            q = e.heads(e.linear(x, f"{p}.attention.self.query", h, h, bias=True), n, d)
            k = e.heads(e.linear(x, f"{p}.attention.self.key", h, h, bias=True), n, d)
            v = e.heads(e.linear(x, f"{p}.attention.self.value", h, h, bias=True), n, d)
            a = e.op(g.AttentionOp, [q, k, v, att_mask])
            a = e.linear(e.merge_heads(a), f"{p}.attention.output.dense", h, h, bias=True)
            x = self.ln(e, e.op(g.AddOp, [a, x]), f"{p}.attention.output.LayerNorm")
            m = e.linear(x, f"{p}.intermediate.dense", h, self.inter, bias=True)
            m = e.op(g.GeluOp, [m], approximate=StringAttr(self.approx))
            m = e.linear(m, f"{p}.output.dense", self.inter, h, bias=True)
            x = self.ln(e, e.op(g.AddOp, [m, x]), f"{p}.output.LayerNorm")
        outputs, names = [x], ["last_hidden_state"]
        if self.pooling is not None:
            outputs.append(self.pool(e, x, mask_in, batch, seq))
            names.append("sentence_embedding")
        elif e.has("pooler.dense.weight"):
            cls = e.reshape(e.slice_dim(x, 1, 0, 1), (batch, h))
            outputs.append(e.op(g.TanhOp, [e.linear(cls, "pooler.dense", h, h, bias=True)]))
            names.append("pooler_output")
        return e.finish(outputs, names)

    def pool(self, e: _Emitter, x, mask_in, batch, seq):
        cfg = self.pooling or {}
        h = self.hidden
        modes = [k for k in ("pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
                             "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
                             "pooling_mode_lasttoken") if cfg.get(k)]
        if cfg.get("pooling_mode") and not modes:
            modes = [f"pooling_mode_{cfg['pooling_mode']}" + ("_tokens" if cfg["pooling_mode"] in ("mean", "max") else "")]
        if len(modes) != 1 or modes[0] not in ("pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens"):
            raise ModelImportError(f"{self.folder}: sentence-transformers pooling {modes or cfg} is not supported (one of cls, mean, max)")
        mode = modes[0]
        m = e.reshape(e.cast(mask_in, self.dtype), (batch, seq, 1))
        if mode == "pooling_mode_cls_token":
            y = e.reshape(e.slice_dim(x, 1, 0, 1), (batch, h))
        elif mode == "pooling_mode_mean_tokens":
            s = e.op(g.ReduceSumOp, [e.op(g.MulOp, [x, m])], axes=g.i64_array([1]), keepdims=g.bool_attr(False))
            cnt = e.op(g.ReduceSumOp, [m], axes=g.i64_array([1]), keepdims=g.bool_attr(False))  # [B, 1]
            cnt = e.op(g.ClipOp, [cnt], min=g.f64_attr(1e-9))
            y = e.op(g.DivOp, [s, cnt])
        else:
            keep = e.reshape(e.cast(mask_in, np.bool_), (batch, seq, 1))
            y = e.op(g.WhereOp, [keep, x, e.scalar(-1e9, like=x)])
            y = e.op(g.ReduceMaxOp, [y], axes=g.i64_array([1]), keepdims=g.bool_attr(False))
        if self.normalize:
            sq = e.op(g.ReduceSumOp, [e.op(g.MulOp, [y, y])], axes=g.i64_array([1]), keepdims=g.bool_attr(True))
            norm = e.op(g.ClipOp, [e.op(g.SqrtOp, [sq])], min=g.f64_attr(1e-12))
            y = e.op(g.DivOp, [y, norm])
        return y
