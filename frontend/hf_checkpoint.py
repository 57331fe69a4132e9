"""A Hugging Face folder's safetensors checkpoint, read without torch and without reading
the tensors: headers parsed and validated (`read_safetensors_header`), tensor names, dtypes and
shapes (`Checkpoint`), and the weight store a module imported from it uses: the checkpoint's
own file (`CheckpointWeightStore`, bf16 included) or, for a sharded checkpoint, each tensor
read lazily from its shard (`ShardedWeightStore`).

`WeightProvider` is what the model builders of hf_import.py read tensors from, by Hugging
Face name: a `Checkpoint` here, or a GGUF file's `GGUFWeights` (gguf_import.py)."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import ml_dtypes
import numpy as np
from safetensors import safe_open
from xdsl.ir import SSAValue

from infer.dialects.weights import WeightStore, WeightStoreError
from infer.frontend.model import ModelImportError

if TYPE_CHECKING:
    from infer.frontend.builder import GraphBuilder


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
        return b.cast(b.file_weight(name, info.shape, info.dtype), dtype)
