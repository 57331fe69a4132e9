"""GGUF frontend: llama.cpp model files, read with the `gguf` package (llama.cpp's own reader).

    module = import_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", seq_len=128, max_len=256)

Architectures (`general.architecture`): llama (Llama 1-3 without llama3
frequency factors, SmolLM, TinyLlama, Mistral-style dense models that llama.cpp
files as llama). The hyper-parameters come from the `llama.*` metadata and are
handed, as Hugging Face config keys, to the same Llama builder a Hugging Face
folder uses (`infer.frontend.hf_import`), with `GGUFWeights` as the weight
provider. The module therefore has the same `@prefill` / `@decode` functions
(or one `@main` with `phase=`) and KV cache as a Hugging Face import.

Tensors are memory-mapped (the reader maps the file; nothing is copied or
dequantized at import) and kept in their stored type:
- F32 tensors are `graph.weight`s as they are; F16 and BF16 ones are weights of
  that type followed by a `graph.cast` to the compute dtype (as a Hugging Face
  checkpoint stored in another float type);
- Q8_0, Q4_0 and Q4_1 tensors are `ui8` weights of their packed bytes
  (`[rows, K / 32 * block_bytes]`) followed by `graph.dequantize_blocks
  {format = "q4_1"}` (see `infer.dialects.block_quant` and docs/gguf.md).
Any other tensor type is an error that names the tensor and its type.

llama.cpp's converter permutes the rows of each attention head of q and k
(halves interleaved) because llama.cpp rotates adjacent pairs; transformers'
GGUF loader permutes them back. Here they stay as stored and the graph's
`graph.rotary` rotates adjacent pairs (`interleaved = true`): the same attention
scores, no copy of the weights, the K cache holds each head's features in the
same interleaved order.

Errors (`ModelImportError`, one message each, exit status 1 from the CLI): not a
GGUF file, a truncated or corrupt file (a read past the end of the file names
the offset), tensor data past the end of the file (names the tensor), an
unsupported architecture or tensor type (named, with what is supported), a
tensor whose shape disagrees with the metadata, missing metadata keys.
"""

from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.ir import SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import from_numpy_dtype
from infer.dialects.weights import WeightStore, WeightStoreError
from infer.frontend.builder import GraphBuilder
from infer.frontend.hf_import import _LlamaImporter, to_numpy_dtype_name
from infer.frontend.model import ModelImportError

SUPPORTED_ARCHITECTURES = ("llama",)
FLOAT_TYPES = {"F32": np.dtype(np.float32), "F16": np.dtype(np.float16), "BF16": np.dtype(ml_dtypes.bfloat16)}
BLOCK_TYPES = {"Q8_0": "q8_0", "Q4_0": "q4_0", "Q4_1": "q4_1"}  # GGML type -> graph.dequantize_blocks format
SUPPORTED_TENSOR_TYPES = (*FLOAT_TYPES, *BLOCK_TYPES)


def _gguf():
    try:
        import gguf
    except ImportError:
        raise ModelImportError("reading .gguf files needs the `gguf` package (pip install gguf)") from None
    return gguf


# --------------------------------------------------------------------------
# Reading: gguf.GGUFReader with every read checked against the file size
# --------------------------------------------------------------------------


class GGUFFormatError(ValueError):
    """A read that would run past the end of the file, or tensor data outside it."""


@lru_cache(maxsize=1)
def _checked_reader_class():
    gguf = _gguf()
    value_types = {int(t) for t in gguf.GGUFValueType}
    string_type = int(gguf.GGUFValueType.STRING)

    class CheckedReader(gguf.GGUFReader):
        """llama.cpp's reader, with two guards: every read is checked against the
        file size (gguf-py's own reads come back short past the end, which it
        may loop on or report as an unrelated IndexError), and each tensor's data
        range is checked before the reader maps it. Reads go through a plain
        ndarray view of the same memory map (numpy's memmap subclass makes the
        many small metadata reads of a tokenizer several times slower)."""

        def _get(self, offset, dtype, count=1, override_order=None):
            try:
                buf, dtypes = self._plain, self._dtypes
            except AttributeError:
                buf = self._plain = self.data.view(np.ndarray)
                dtypes = self._dtypes = {}
            order = self.byte_order if override_order is None else override_order
            dt = dtypes.get((dtype, order))
            if dt is None:
                dt = dtypes[(dtype, order)] = np.dtype(dtype).newbyteorder(order)
            count = int(count)
            end = int(offset) + dt.itemsize * count
            if count < 0 or end > buf.size:
                raise GGUFFormatError(
                    f"truncated or corrupt: reading {dt.itemsize * count} bytes at offset {offset} "
                    f"runs past the end of the file ({buf.size} bytes)"
                )
            return buf[offset:end].view(dt)

        def _get_field_parts(self, orig_offs, raw_type):
            # an array's length must fit in the rest of the file before gguf-py loops over it
            if raw_type == gguf.GGUFValueType.ARRAY:
                item_type = int(self._get(orig_offs, np.uint32)[0])
                length = int(self._get(orig_offs + 4, np.uint64)[0])
                scalar = self.gguf_scalar_to_np.get(gguf.GGUFValueType(item_type)) if item_type in value_types else None
                min_item = np.dtype(scalar).itemsize if scalar is not None else 8  # a string or array: >= 8 bytes
                if length * min_item > self._plain.size - orig_offs - 12:
                    raise GGUFFormatError(
                        f"truncated or corrupt: an array at offset {orig_offs} claims {length} items, "
                        f"more than the rest of the file holds"
                    )
                if item_type == string_type and length:
                    return self._string_array(orig_offs, length)
                if scalar is not None and length:  # one view per item, as gguf-py makes them
                    items = self._get(orig_offs + 12, scalar, length)
                    parts = [self._get(orig_offs, np.uint32), self._get(orig_offs + 4, np.uint64)]
                    parts += [items[i:i + 1] for i in range(length)]
                    return (12 + items.nbytes, parts, list(range(2, 2 + length)),
                            [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType(item_type)])
            return super()._get_field_parts(orig_offs, raw_type)

        def _string_array(self, orig_offs, length):
            """gguf-py's parts of an array of strings (item type, length, then each string's
            length and bytes as views of the file), made in one pass over the lengths: gguf-py
            reads each string with two numpy reads and its per-item recursion (SmolLM2's 49,152
            tokens and 48,900 merges; with its 49,152 token types, read the same way, most of
            the file's 2 s open)."""
            buf = self._plain
            size = buf.size
            length_dtype = np.dtype(np.uint64).newbyteorder(self.byte_order)
            order = sys.byteorder if self.byte_order == "I" else ("big" if sys.byteorder == "little" else "little")
            raw = memoryview(buf)
            from_bytes = int.from_bytes
            parts = [self._get(orig_offs, np.uint32), self._get(orig_offs + 4, np.uint64)]
            data = []
            offs = orig_offs + 12
            for _ in range(length):
                end = offs + 8 + (from_bytes(raw[offs:offs + 8], order) if offs + 8 <= size else 0)
                if offs + 8 > size or end > size:
                    raise GGUFFormatError(
                        f"truncated or corrupt: a string at offset {offs} (in the array at offset {orig_offs}) "
                        f"runs past the end of the file ({size} bytes)"
                    )
                parts.append(buf[offs:offs + 8].view(length_dtype))
                data.append(len(parts))
                parts.append(buf[offs + 8:end])
                offs = end
            return offs - orig_offs, parts, data, [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING]

        def _build_tensors(self, start_offs, fields):
            size = self._plain.size
            for field in fields:
                _, name_data, _, dims, raw_dtype, offset = field.parts
                name = bytes(name_data).decode("utf-8", errors="replace")
                try:
                    qtype = gguf.GGMLQuantizationType(int(raw_dtype[0]))
                except ValueError:
                    raise GGUFFormatError(f"tensor '{name}' has unknown tensor type code {int(raw_dtype[0])}") from None
                block, type_size = gguf.GGML_QUANT_SIZES[qtype]
                n = 1
                for d in dims.tolist():
                    n *= int(d)
                begin = int(start_offs) + int(offset[0])
                end = begin + n * type_size // block
                if end > size:
                    raise GGUFFormatError(
                        f"tensor '{name}' ({qtype.name}, {n} values) has data at bytes [{begin}, {end}), "
                        f"past the end of the file ({size} bytes)"
                    )
            super()._build_tensors(start_offs, fields)

    return CheckedReader


class GGUFFile:
    """An opened GGUF file: metadata by key and tensors by name (memory-mapped)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            size = path.stat().st_size
        except OSError as e:
            raise ModelImportError(f"{path}: cannot read: {e}") from None
        if size < 24:
            raise ModelImportError(f"{path}: not a GGUF file ({size} bytes, shorter than a GGUF header)")
        try:
            self.reader = _checked_reader_class()(str(path))
        except GGUFFormatError as e:
            raise ModelImportError(f"{path}: {e}") from None
        except (ValueError, KeyError, IndexError, OverflowError, UnicodeDecodeError) as e:
            what = str(e) or type(e).__name__
            if "magic" in what:
                raise ModelImportError(f"{path}: not a GGUF file (no GGUF magic number at the start)") from None
            raise ModelImportError(f"{path}: corrupt GGUF file: {what}") from None
        except OSError as e:
            raise ModelImportError(f"{path}: cannot read: {e}") from None
        self.tensors = {t.name: t for t in self.reader.tensors}

    def get(self, key: str, default: Any = None) -> Any:
        field = self.reader.fields.get(key)
        if field is None:
            return default
        try:
            return field.contents()
        except (ValueError, IndexError, UnicodeDecodeError) as e:
            raise ModelImportError(f"{self.path}: metadata '{key}' is corrupt: {e}") from None

    def require(self, key: str) -> Any:
        value = self.get(key)
        if value is None:
            raise ModelImportError(f"{self.path}: the GGUF metadata lacks '{key}'")
        return value

    @property
    def architecture(self) -> str:
        return str(self.require("general.architecture"))

    def type_name(self, name: str) -> str:
        return self.tensors[name].tensor_type.name

    def logical_shape(self, name: str) -> tuple[int, ...]:
        """numpy order (GGUF lists dimensions innermost first)."""
        return tuple(int(d) for d in reversed(self.tensors[name].shape.tolist()))

    def stored_array(self, name: str) -> np.ndarray:
        """The tensor as stored, without a copy: a float array of its logical shape
        (F32, F16, BF16), or the packed bytes `[..., K / block * block_bytes]` (uint8)."""
        t = self.tensors[name]
        kind = t.tensor_type.name
        data = t.data
        if kind == "BF16":  # the reader hands BF16 out as bytes
            return data.view(ml_dtypes.bfloat16).reshape(self.logical_shape(name))
        return data


@lru_cache(maxsize=2)
def _open_cached(path: str, size: int, mtime_ns: int) -> GGUFFile:
    return GGUFFile(Path(path))


def open_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Open (or reuse, while the file is unchanged) a GGUF file."""
    p = Path(path).resolve()
    try:
        st = p.stat()
    except OSError as e:
        raise ModelImportError(f"{path}: cannot read: {e}") from None
    return _open_cached(str(p), st.st_size, st.st_mtime_ns)


# --------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------


class GGUFWeightStore(WeightStore):
    """The GGUF file's tensors as the module's weight store, memory-mapped and
    in their stored type (packed bytes for block-quantized ones). There is no
    safetensors file behind it, so saving the module writes one with the
    referenced weights."""

    def __init__(self, file: GGUFFile):
        super().__init__(None)
        self.gguf = file

    def _file_keys(self) -> set[str]:
        return set(self.gguf.tensors)

    def get(self, name: str) -> np.ndarray:
        if name in self._local:
            return self._local[name]
        if name not in self.gguf.tensors:
            raise WeightStoreError(f"weight '{name}' not found in '{self.gguf.path}'")
        return self.gguf.stored_array(name)

    @property
    def has_local(self) -> bool:  # not a safetensors file: saving writes one
        return True


class _TensorInfo:
    __slots__ = ("gguf_name", "shape", "kind")

    def __init__(self, gguf_name: str, shape: tuple[int, ...], kind: str):
        self.gguf_name, self.shape, self.kind = gguf_name, shape, kind


# Hugging Face Llama names (without "model.") of the GGUF tensors, by gguf's own tensor kinds.
_LLAMA_TENSORS = {
    "TOKEN_EMBD": "embed_tokens",
    "OUTPUT_NORM": "norm",
    "OUTPUT": "lm_head",
    "ATTN_NORM": "layers.{bid}.input_layernorm",
    "ATTN_Q": "layers.{bid}.self_attn.q_proj",
    "ATTN_K": "layers.{bid}.self_attn.k_proj",
    "ATTN_V": "layers.{bid}.self_attn.v_proj",
    "ATTN_OUT": "layers.{bid}.self_attn.o_proj",
    "FFN_NORM": "layers.{bid}.post_attention_layernorm",
    "FFN_GATE": "layers.{bid}.mlp.gate_proj",
    "FFN_UP": "layers.{bid}.mlp.up_proj",
    "FFN_DOWN": "layers.{bid}.mlp.down_proj",
}
_IGNORED_TENSORS = ("ATTN_ROT_EMBD",)  # old files store RoPE tables; llama.cpp computes them too


def _hf_names(n_layers: int) -> dict[str, str | None]:
    """GGUF tensor name -> Hugging Face name (None: a tensor the model does not need)."""
    gguf = _gguf()
    names: dict[str, str | None] = {}
    for kind, hf in [*_LLAMA_TENSORS.items(), *((k, None) for k in _IGNORED_TENSORS)]:
        pattern = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR[kind]]
        for bid in range(n_layers) if "{bid}" in pattern else [None]:
            base = pattern.format(bid=bid)
            for suffix in ("weight", "bias"):
                names[f"{base}.{suffix}"] = None if hf is None else f"{hf.format(bid=bid)}.{suffix}"
    return names


class GGUFWeights:
    """The weight provider for the Llama builder: tensors by Hugging Face name,
    emitted as stored (see the module docstring)."""

    config_name = "the GGUF metadata"

    def __init__(self, file: GGUFFile, n_layers: int):
        self.file = file
        self.folder = file.path
        self.store = GGUFWeightStore(file)
        self.tensors: dict[str, _TensorInfo] = {}
        mapping = _hf_names(n_layers)
        for name in file.tensors:
            kind = file.type_name(name)
            if kind not in SUPPORTED_TENSOR_TYPES:
                raise ModelImportError(
                    f"{file.path}: tensor '{name}' has type {kind}, which is not supported "
                    f"(supported: {', '.join(SUPPORTED_TENSOR_TYPES)})"
                )
            if name not in mapping:
                raise ModelImportError(
                    f"{file.path}: tensor '{name}' is not part of a dense Llama model "
                    "(supported: token_embd, output_norm, output and blk.N.{attn_norm, attn_q, attn_k, "
                    "attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}; llama3 rope_freqs and "
                    "mixture-of-experts tensors are not)"
                )
            hf = mapping[name]
            if hf is not None:
                self.tensors[hf] = _TensorInfo(name, file.logical_shape(name), kind)

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def emit(self, b: GraphBuilder, name: str, dtype: np.dtype) -> SSAValue:
        info = self.tensors[name]
        elem = from_numpy_dtype(dtype)
        if info.kind in BLOCK_TYPES:
            fmt = BLOCK_TYPES[info.kind]
            packed = self.file.stored_array(info.gguf_name)
            if info.shape[-1] % 32:
                raise ModelImportError(
                    f"{self.folder}: tensor '{info.gguf_name}' ({info.kind}) has rows of {info.shape[-1]} values, "
                    "not a whole number of 32-value blocks"
                )
            v = b.file_weight(info.gguf_name, packed.shape, np.uint8)
            return b.op(g.DequantizeBlocksOp, [v], result_type=TensorType(elem, list(info.shape)),
                        format=StringAttr(fmt))
        return b.cast(b.file_weight(info.gguf_name, info.shape, FLOAT_TYPES[info.kind]), dtype)


# --------------------------------------------------------------------------
# Hyper-parameters
# --------------------------------------------------------------------------


def llama_config(file: GGUFFile) -> dict[str, Any]:
    """The `llama.*` metadata as Hugging Face LlamaConfig keys (what the builder reads)."""
    arch = file.architecture
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelImportError(
            f"{file.path}: GGUF architecture '{arch}' is not supported (supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )

    def key(k: str) -> str:
        return f"{arch}.{k}"

    def integer(k: str, default: Any = None) -> int | None:
        v = file.get(key(k), default) if default is not None else file.require(key(k))
        if isinstance(v, list):
            raise ModelImportError(f"{file.path}: metadata '{key(k)}' is a per-layer list, which is not supported")
        return None if v is None else int(v)

    if (file.get(key("expert_count")) or 0) > 0:
        raise ModelImportError(f"{file.path}: mixture-of-experts Llama models are not supported")
    hidden = integer("embedding_length")
    n_heads = integer("attention.head_count")
    n_kv = integer("attention.head_count_kv", n_heads)
    if n_heads < 1 or n_kv < 1 or n_heads % n_kv:
        raise ModelImportError(
            f"{file.path}: attention.head_count ({n_heads}) must be a positive multiple of "
            f"attention.head_count_kv ({n_kv})"
        )
    head_dim = integer("attention.key_length", hidden // n_heads)
    rot = integer("rope.dimension_count", head_dim)
    if rot != head_dim:
        raise ModelImportError(
            f"{file.path}: rope.dimension_count {rot} differs from the head size {head_dim} "
            "(partial rotary Llama files are not supported)"
        )
    embd = file.tensors.get("token_embd.weight")
    if embd is None:
        raise ModelImportError(f"{file.path}: the file has no 'token_embd.weight' tensor")
    vocab = integer("vocab_size", int(embd.shape[-1]))
    cfg: dict[str, Any] = {
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": integer("block_count"),
        "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv,
        "head_dim": head_dim,
        "intermediate_size": integer("feed_forward_length"),
        "vocab_size": vocab,
        "rms_norm_eps": float(file.require(key("attention.layer_norm_rms_epsilon"))),
        "max_position_embeddings": integer("context_length"),
        "rope_theta": float(file.get(key("rope.freq_base"), 10000.0)),
        "tie_word_embeddings": "output.weight" not in file.tensors,
        "hidden_act": "silu",
    }
    scaling = file.get(key("rope.scaling.type"))
    if scaling not in (None, "none"):
        if scaling != "linear":
            raise ModelImportError(
                f"{file.path}: rope.scaling.type '{scaling}' is not supported (supported: none, linear)"
            )
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": float(file.require(key("rope.scaling.factor")))}
    return cfg


class _GGUFLlamaImporter(_LlamaImporter):
    prefixes = ("",)
    rope_interleaved = True  # q/k rows as llama.cpp's converter permuted them


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------


def import_gguf(
    path: str | os.PathLike[str],
    seq_len: int | None = None,
    batch: int = 1,
    phase: str | None = None,
    max_len: int | None = None,
    dtype: str | np.dtype = "float32",
    **paged: Any,
) -> ModuleOp:
    """Import a GGUF file; the options are those of `import_hf_folder` (decoders):
    seq_len (prefill length, default min(128, context length)), max_len (KV-cache
    capacity, default min(context length, seq_len + 128)), batch, phase, dtype, and
    kv_cache="paged" with block_size, num_blocks, chunk (frontend/paged_decoder.py)."""
    path = Path(path)
    if batch < 1:
        raise ModelImportError(f"batch must be >= 1, got {batch}")
    if phase not in (None, "prefill", "decode"):
        raise ModelImportError(f"phase must be None, 'prefill' or 'decode', got {phase!r}")
    try:
        np_dtype = np.dtype(dtype) if not isinstance(dtype, str) else to_numpy_dtype_name(dtype)
    except (TypeError, ValueError) as e:
        raise ModelImportError(f"unsupported dtype {dtype!r}: {e}") from None
    if np_dtype not in FLOAT_TYPES.values():
        raise ModelImportError(f"unsupported compute dtype {np_dtype} (supported: float32, float16, bfloat16)")
    file = open_gguf(path)
    cfg = llama_config(file)
    weights = GGUFWeights(file, cfg["num_hidden_layers"])
    importer = _GGUFLlamaImporter(path, cfg, weights, np_dtype)
    return importer.build(seq_len=seq_len, batch=batch, phase=phase, max_len=max_len, **paged)


__all__ = ["GGUFFile", "GGUFWeights", "GGUFWeightStore", "import_gguf", "llama_config", "open_gguf"]
