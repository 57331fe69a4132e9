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

The decoder builders read tensors by Hugging Face name from a weight provider
(`WeightProvider`): a folder's `Checkpoint` here, `GGUFWeights` for GGUF files
(infer.frontend.gguf_import, which reuses the Llama builder with RoPE on
interleaved pairs).

Weights are never read at import time: the module's weight store is the
checkpoint's own safetensors file (single file) and `graph.weight` ops refer to
the checkpoint's tensor names; a sharded checkpoint
(model.safetensors.index.json) gets a `ShardedWeightStore` that reads each
tensor lazily from its shard. Only the safetensors headers are parsed (and
validated), so import time and memory do not grow with the model size. Weights
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
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import ml_dtypes
import numpy as np
from safetensors import safe_open
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import from_numpy_dtype, to_numpy_dtype
from infer.dialects.weights import WeightStore, WeightStoreError, attach_weights
from infer.frontend.builder import GraphBuilder, dense_attr
from infer.frontend.model import ModelImportError

# --------------------------------------------------------------------------
# safetensors headers and weight stores
# --------------------------------------------------------------------------

SAFETENSORS_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}

MAX_HEADER_BYTES = 100 * 1024 * 1024


class TensorInfo:
    __slots__ = ("name", "file", "dtype", "shape")

    def __init__(self, name: str, file: Path, dtype: np.dtype, shape: tuple[int, ...]):
        self.name, self.file, self.dtype, self.shape = name, file, dtype, shape


def read_safetensors_header(file: Path) -> dict[str, TensorInfo]:
    """Parse and validate a safetensors header (no tensor data is read)."""
    def bad(why: str) -> ModelImportError:
        return ModelImportError(f"{file}: invalid safetensors header: {why}")

    try:
        size = file.stat().st_size
        with open(file, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise bad(f"the file is {size} bytes, too short for the 8-byte header length")
            (n,) = struct.unpack("<Q", raw)
            if n > min(MAX_HEADER_BYTES, size - 8):
                raise bad(f"header length {n} exceeds the file size ({size} bytes)")
            text = f.read(n)
    except OSError as e:
        raise ModelImportError(f"{file}: cannot read: {e}") from None
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"the header is not valid UTF-8 JSON ({e})") from None
    if not isinstance(header, dict):
        raise bad("the header is not a JSON object")
    data_size = size - 8 - n
    out: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
            raise bad(f"entry '{name}' lacks dtype/shape/data_offsets")
        dt = SAFETENSORS_DTYPES.get(entry["dtype"])
        if dt is None:
            raise bad(f"tensor '{name}' has unsupported dtype {entry['dtype']!r}")
        shape = entry["shape"]
        offs = entry["data_offsets"]
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise bad(f"tensor '{name}' has an invalid shape {shape!r}")
        if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs)):
            raise bad(f"tensor '{name}' has invalid data_offsets {offs!r}")
        begin, end = offs
        if not 0 <= begin <= end <= data_size:
            raise bad(f"tensor '{name}' data [{begin}, {end}) lies outside the data section ({data_size} bytes)")
        if end - begin != math.prod(shape) * dt.itemsize:
            raise bad(
                f"tensor '{name}' ({entry['dtype']} {shape}) needs {math.prod(shape) * dt.itemsize} bytes, "
                f"data_offsets give {end - begin}"
            )
        out[name] = TensorInfo(name, file, dt, tuple(shape))
    return out


def _read_tensor(file: Path, name: str) -> np.ndarray:
    try:
        with safe_open(str(file), framework="np") as f:
            return f.get_tensor(name)
    except (TypeError, ValueError) as e:
        # numpy has no bfloat16: read the raw bits and view them as ml_dtypes.bfloat16
        info = read_safetensors_header(file).get(name)
        if info is None or info.dtype != np.dtype(ml_dtypes.bfloat16):
            raise WeightStoreError(f"cannot read '{name}' from '{file}': {e}") from None
        return _read_raw(file, name, info)


def _read_raw(file: Path, name: str, info: TensorInfo) -> np.ndarray:
    with open(file, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        begin, end = header[name]["data_offsets"]
    mm = np.memmap(file, dtype=np.uint8, mode="r", offset=8 + n + begin, shape=(end - begin,))
    return np.array(mm).view(info.dtype).reshape(info.shape)


class CheckpointWeightStore(WeightStore):
    """The checkpoint's own safetensors file as the weight store (no copy).
    Reads bf16 tensors too (numpy has no native bfloat16)."""

    def get(self, name: str) -> np.ndarray:
        if name in self._local or self.file is None or name not in self._file_keys():
            return super().get(name)
        return _read_tensor(self.file, name)


class ShardedWeightStore(WeightStore):
    """A sharded checkpoint (model.safetensors.index.json): each tensor is read
    lazily from its shard. There is no single backing file, so saving a module
    (`save_weights`) writes one new file with the referenced weights."""

    def __init__(self, shards: dict[str, Path]):
        super().__init__(None)
        self.shards = dict(shards)

    def _file_keys(self) -> set[str]:
        return set(self.shards)

    def get(self, name: str) -> np.ndarray:
        if name in self._local:
            return self._local[name]
        if name not in self.shards:
            raise WeightStoreError(f"weight '{name}' not found in the sharded checkpoint")
        return _read_tensor(self.shards[name], name)

    @property
    def has_local(self) -> bool:  # not backed by one file: treat as in-memory
        return True


class WeightProvider(Protocol):
    """Where a model builder gets its tensors by (Hugging Face) name: a folder's
    safetensors `Checkpoint` or a GGUF file's `GGUFWeights`."""

    folder: Path  # the model's folder or file, for messages
    config_name: str  # where the hyper-parameters come from, for messages
    store: WeightStore  # the module's weight store
    tensors: Mapping[str, Any]  # name -> an object with the logical `.shape`

    def __contains__(self, name: str) -> bool: ...

    def emit(self, b: GraphBuilder, name: str, dtype: np.dtype) -> SSAValue:
        """Append the ops that yield tensor `name` as a `dtype` tensor of its logical shape."""
        ...


class Checkpoint:
    """Tensor names, dtypes and shapes of a folder's safetensors checkpoint.

    The weight provider the model builders read (`infer.frontend.gguf_import`
    has another, `GGUFWeights`): `name in provider`, `provider.tensors[name].shape`
    (the logical shape), `provider.emit(builder, name, dtype)` (the IR that
    yields the tensor in the compute dtype), `provider.store` (the module's
    weight store), `provider.folder` and `provider.config_name` (for messages)."""

    config_name = "config.json"

    def __init__(self, folder: Path):
        self.folder = folder
        index = folder / "model.safetensors.index.json"
        files = sorted(folder.glob("*.safetensors"))
        self.tensors: dict[str, TensorInfo] = {}
        if index.exists():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (ValueError, KeyError, TypeError) as e:
                raise ModelImportError(f"{index}: not a valid safetensors index ({e})") from None
            headers: dict[str, dict[str, TensorInfo]] = {}
            for name, shard in weight_map.items():
                if shard not in headers:
                    path = folder / shard
                    if not path.exists():
                        raise ModelImportError(f"{index}: shard '{shard}' (for '{name}') does not exist")
                    headers[shard] = read_safetensors_header(path)
                if name not in headers[shard]:
                    raise ModelImportError(f"{index}: '{name}' is not in shard '{shard}'")
                self.tensors[name] = headers[shard][name]
            self.store: WeightStore = ShardedWeightStore({n: t.file for n, t in self.tensors.items()})
            if len(headers) == 1:
                only = folder / next(iter(headers))
                self.store = CheckpointWeightStore(only)
        elif not files:
            raise ModelImportError(f"{folder}: no *.safetensors weights (pytorch_model.bin is not read: it is a pickle)")
        elif len(files) == 1:
            self.tensors = read_safetensors_header(files[0])
            self.store = CheckpointWeightStore(files[0])
        else:
            for f in files:
                for name, info in read_safetensors_header(f).items():
                    self.tensors.setdefault(name, info)
            self.store = ShardedWeightStore({n: t.file for n, t in self.tensors.items()})

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def emit(self, b: GraphBuilder, name: str, dtype: np.dtype) -> SSAValue:
        """`graph.weight` of the checkpoint tensor (no copy), cast to `dtype` if stored otherwise."""
        info = self.tensors[name]
        v = b.file_weight(name, info.shape, info.dtype)
        if info.dtype != dtype:
            v = b.op(g.CastOp, [v], result_type=TensorType(from_numpy_dtype(dtype), list(info.shape)))
        return v


# --------------------------------------------------------------------------
# Emission helpers
# --------------------------------------------------------------------------


class _Emitter:
    """A GraphBuilder over the checkpoint store, with shape-checked weight references."""

    def __init__(self, ckpt: WeightProvider, dtype: np.dtype, prefixes: Sequence[str]):
        self.ckpt = ckpt
        self.dtype = np.dtype(dtype)
        self.prefixes = list(prefixes)
        self.b = GraphBuilder(ckpt.store)
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
        v = self.ckpt.emit(self.b, key, self.dtype)
        self._weights[key] = v
        return v

    def opt_w(self, name: str, shape: Sequence[int]) -> SSAValue | None:
        return self.w(name, shape) if self.has(name) else None

    def op(self, op_type, operands, result_type=None, **props) -> SSAValue:
        return self.b.op(op_type, operands, result_type=result_type, **props)

    def const(self, array: np.ndarray | float | int, dtype=None) -> SSAValue:
        """An inline constant (kept in the text whatever its size, so that the
        module's weights stay exactly the checkpoint's tensors)."""
        array = np.ascontiguousarray(np.asarray(array, dtype=dtype))
        op = g.ConstantOp(dense_attr(array))
        self.b.block.add_op(op)
        return op.output

    def scalar(self, value: float) -> SSAValue:
        return self.const(np.asarray(value, dtype=self.dtype))

    def reshape(self, v: SSAValue, shape: Sequence[int]) -> SSAValue:
        return self.op(g.ReshapeOp, [v], result_type=TensorType(_elem(v), [int(d) for d in shape]))

    def transpose(self, v: SSAValue, perm: Sequence[int]) -> SSAValue:
        return self.op(g.TransposeOp, [v], perm=g.i64_array(perm))

    def slice(self, v: SSAValue, dim: int, start: int, end: int) -> SSAValue:
        shape = _shape(v)
        starts, ends = [0] * len(shape), list(shape)
        starts[dim], ends[dim] = start, end
        return self.op(g.SliceOp, [v], starts=g.i64_array(starts), ends=g.i64_array(ends), steps=g.i64_array([1] * len(shape)))

    def cast(self, v: SSAValue, dtype) -> SSAValue:
        return self.op(g.CastOp, [v], result_type=TensorType(from_numpy_dtype(np.dtype(dtype)), list(_shape(v))))

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
        b, s, _ = _shape(x)
        return self.transpose(self.reshape(x, (b, s, n_heads, head_dim)), [0, 2, 1, 3])

    def merge_heads(self, x: SSAValue) -> SSAValue:
        """[B, n, S, D] -> [B, S, n*D]"""
        b, n, s, d = _shape(x)
        return self.reshape(self.transpose(x, [0, 2, 1, 3]), (b, s, n * d))


def drop_phantom_uses(block) -> None:
    """Detach uses held by ops that are not in any block. GraphBuilder.op builds a
    throw-away op to infer result types and leaves it registered as a user of
    its operands, so every value would look used twice (dead-code elimination
    would keep everything). Remove those stale uses."""
    for op in block.ops:
        for r in op.results:
            for use in list(r.uses):
                if use.operation.parent is None:
                    use.operation.drop_all_references()
    for arg in block.args:
        for use in list(arg.uses):
            if use.operation.parent is None:
                use.operation.drop_all_references()


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _elem(v: SSAValue):
    t = v.type
    assert isinstance(t, TensorType)
    return t.get_element_type()


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
) -> ModuleOp:
    """Import a Hugging Face folder; see the module docstring for the signatures.

    seq_len: prefill / encoder sequence length (default min(128, max positions)).
    max_len: KV-cache capacity of decoders (default min(max positions, seq_len + 128)).
    phase: None (decoders: @prefill and @decode), "prefill" or "decode" (one @main).
    dtype: compute dtype (weights stored otherwise are cast in the graph).
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
    return builder(folder, cfg, ckpt, np_dtype).build(seq_len=seq_len, batch=batch, phase=phase, max_len=max_len)


def to_numpy_dtype_name(name: str) -> np.dtype:
    aliases = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64"}
    from infer.dialects.dtypes import parse_element_type

    return to_numpy_dtype(parse_element_type(aliases.get(name, name)))


def _combine(funcs: list[tuple[str, ModuleOp]], store: WeightStore) -> ModuleOp:
    """Move the functions of single-function modules into one module."""
    from xdsl.dialects.builtin import StringAttr
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


class _DecoderImporter:
    """Shared prefill/decode structure; subclasses emit embeddings and blocks.
    `cfg` holds Hugging Face config.json keys; `ckpt` is the weight provider
    (tensors by Hugging Face name)."""

    prefixes: Sequence[str] = ("",)

    def __init__(self, folder: Path, cfg: dict[str, Any], ckpt: WeightProvider, dtype: np.dtype):
        self.folder, self.cfg, self.ckpt, self.dtype = folder, cfg, ckpt, dtype
        self.read_config()

    def cfg_get(self, *keys: str, default: Any = None, required: bool = True) -> Any:
        for k in keys:
            if self.cfg.get(k) is not None:
                return self.cfg[k]
        if default is None and required:
            raise ModelImportError(f"{self.folder}/config.json: missing '{keys[0]}'")
        return default

    def build(self, seq_len, batch, phase, max_len) -> ModuleOp:
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

    def check_lengths(self, max_len: int) -> None:
        pass

    def emitter(self) -> _Emitter:
        return _Emitter(self.ckpt, self.dtype, self.prefixes)

    def cache_names(self) -> list[str]:
        return [f"{kv}_{i}" for i in range(self.n_layers) for kv in ("k", "v")]

    def prefill(self, batch: int, seq: int, max_len: int) -> ModuleOp:
        e = self.emitter()
        ids = e.b.input("input_ids", (batch, seq), np.int64)
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
        drop_phantom_uses(e.b.block)
        return e.b.finish([logits, *caches], ["logits", *self.cache_names()])

    def decode(self, batch: int, max_len: int) -> ModuleOp:
        e = self.emitter()
        ids = e.b.input("input_ids", (batch, 1), np.int64)
        pos = e.b.input("position", (batch,), np.int64)
        past = [e.b.input(n, (batch, self.n_kv_heads, max_len, self.head_dim), self.dtype) for n in self.cache_names()]
        ctx = _DecodeContext(e, batch, max_len, pos)
        x = self.embed(e, ids, ctx)
        caches = []
        for i in range(self.n_layers):
            x, k, v = self.block(e, i, x, ctx, past[2 * i], past[2 * i + 1])
            caches += [k, v]
        logits = self.head(e, x)
        drop_phantom_uses(e.b.block)
        return e.b.finish([logits, *caches], ["logits", *self.cache_names()])

    def attend(self, e: _Emitter, q, k, v, ctx, past_k=None, past_v=None, scale=None):
        """q: [B, Hq, s, D]; k, v: [B, Hkv, s, D]. Returns (out [B, Hq, s, D], k_cache, v_cache)."""
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
        self.positions = e.const(np.arange(seq, dtype=np.int64))  # [S]


class _DecodeContext:
    def __init__(self, e: _Emitter, batch: int, max_len: int, pos: SSAValue):
        self.batch, self.seq, self.max_len = batch, 1, max_len
        self.position = pos  # [B]
        slots = e.const(np.arange(max_len, dtype=np.int64))
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
        # RoPE angles: positions x inv_freq, halves repeated (HF layout)
        inv = e.const(self.inv_freq.astype(self.dtype))
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
            s = e.scalar(self.attn_scaling)
            cos, sin = e.op(g.MulOp, [cos, s]), e.op(g.MulOp, [sin, s])
        ctx.cos, ctx.sin = e.reshape(cos, shape), e.reshape(sin, shape)
        return x

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
        if isinstance(ctx, _PrefillContext):
            pe = e.slice(wpe, 0, 0, ctx.seq)  # [S, H]
        else:
            pe = e.reshape(e.op(g.GatherOp, [wpe, ctx.position], axis=g.i64_attr(0)), (ctx.batch, 1, self.hidden))
        return e.op(g.AddOp, [x, pe])

    def block(self, e: _Emitter, i: int, x, ctx, past_k=None, past_v=None):
        p = f"h.{i}"
        h, d, n = self.hidden, self.head_dim, self.n_heads
        hn = self.ln(e, x, f"{p}.ln_1")
        qkv = self.conv1d(e, hn, f"{p}.attn.c_attn", h, 3 * h)
        q, k, v = (e.heads(e.slice(qkv, 2, j * h, (j + 1) * h), n, d) for j in range(3))
        att, k_all, v_all = self.attend(e, q, k, v, ctx, past_k, past_v, scale=self.scale)
        x = e.op(g.AddOp, [x, self.conv1d(e, e.merge_heads(att), f"{p}.attn.c_proj", h, h)])
        hn = self.ln(e, x, f"{p}.ln_2")
        m = e.op(g.GeluOp, [self.conv1d(e, hn, f"{p}.mlp.c_fc", h, self.inter)], approximate=g.StringAttr(self.approx))
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


class _BertImporter:
    prefixes = ("", "bert.")

    def __init__(self, folder: Path, cfg: dict[str, Any], ckpt: Checkpoint, dtype: np.dtype):
        self.folder, self.cfg, self.ckpt, self.dtype = folder, cfg, ckpt, dtype
        get = lambda k, d=None: cfg.get(k, d) if cfg.get(k, d) is not None else d  # noqa: E731
        try:
            self.hidden = int(cfg["hidden_size"])
            self.n_layers = int(cfg["num_hidden_layers"])
            self.n_heads = int(cfg["num_attention_heads"])
            self.inter = int(cfg["intermediate_size"])
            self.vocab = int(cfg["vocab_size"])
        except KeyError as e:
            raise ModelImportError(f"{folder}/config.json: missing {e}") from None
        self.head_dim = self.hidden // self.n_heads
        self.max_positions = int(get("max_position_embeddings", 512))
        self.type_vocab = int(get("type_vocab_size", 2))
        self.eps = float(get("layer_norm_eps", 1e-12))
        act = get("hidden_act", "gelu")
        approx = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}
        if act not in approx:
            raise ModelImportError(f"{folder}/config.json: hidden_act {act!r} is not supported for BERT")
        self.approx = approx[act]
        if get("position_embedding_type", "absolute") != "absolute":
            raise ModelImportError(f"{folder}/config.json: position_embedding_type {cfg['position_embedding_type']!r} is not supported")
        self.pooling, self.normalize = sentence_transformers_modules(folder)

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
        e = _Emitter(self.ckpt, self.dtype, self.prefixes)
        h, n, d = self.hidden, self.n_heads, self.head_dim
        ids = e.b.input("input_ids", (batch, seq), np.int64)
        mask_in = e.b.input("attention_mask", (batch, seq), np.int64)
        types = e.b.input("token_type_ids", (batch, seq), np.int64)
        x = e.op(g.GatherOp, [e.w("embeddings.word_embeddings.weight", (self.vocab, h)), ids], axis=g.i64_attr(0))
        t = e.op(g.GatherOp, [e.w("embeddings.token_type_embeddings.weight", (self.type_vocab, h)), types], axis=g.i64_attr(0))
        pe = e.slice(e.w("embeddings.position_embeddings.weight", (self.max_positions, h)), 0, 0, seq)
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
            m = e.op(g.GeluOp, [m], approximate=g.StringAttr(self.approx))
            m = e.linear(m, f"{p}.output.dense", self.inter, h, bias=True)
            x = self.ln(e, e.op(g.AddOp, [m, x]), f"{p}.output.LayerNorm")
        outputs, names = [x], ["last_hidden_state"]
        if self.pooling is not None:
            outputs.append(self.pool(e, x, mask_in, batch, seq))
            names.append("sentence_embedding")
        elif e.has("pooler.dense.weight"):
            cls = e.reshape(e.slice(x, 1, 0, 1), (batch, h))
            outputs.append(e.op(g.TanhOp, [e.linear(cls, "pooler.dense", h, h, bias=True)]))
            names.append("pooler_output")
        drop_phantom_uses(e.b.block)
        return e.b.finish(outputs, names)

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
            y = e.reshape(e.slice(x, 1, 0, 1), (batch, h))
        elif mode == "pooling_mode_mean_tokens":
            s = e.op(g.ReduceSumOp, [e.op(g.MulOp, [x, m])], axes=g.i64_array([1]), keepdims=g.bool_attr(False))
            cnt = e.op(g.ReduceSumOp, [m], axes=g.i64_array([1]), keepdims=g.bool_attr(False))  # [B, 1]
            cnt = e.op(g.ClipOp, [cnt], min=g.f64_attr(1e-9))
            y = e.op(g.DivOp, [s, cnt])
        else:
            keep = e.reshape(e.cast(mask_in, np.bool_), (batch, seq, 1))
            y = e.op(g.WhereOp, [keep, x, e.scalar(-1e9)])
            y = e.op(g.ReduceMaxOp, [y], axes=g.i64_array([1]), keepdims=g.bool_attr(False))
        if self.normalize:
            sq = e.op(g.ReduceSumOp, [e.op(g.MulOp, [y, y])], axes=g.i64_array([1]), keepdims=g.bool_attr(True))
            norm = e.op(g.ClipOp, [e.op(g.SqrtOp, [sq])], min=g.f64_attr(1e-12))
            y = e.op(g.DivOp, [y, norm])
        return y
