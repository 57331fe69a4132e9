"""The weight store: named tensors kept outside the textual IR.

A module refers to its weights with `graph.weight @name : tensor<...>` ops and
names its backing file with the module attribute `graph.weights = "FILE"` (a
safetensors file; a relative path is relative to the IR file). The text stays
small whatever the model size; the arrays are read lazily from the file.

Passes read, replace and create weights through `weights_of(module)`:

    store = weights_of(module)
    w = store.get("conv1.weight")            # numpy array
    name = store.add("conv1.weight_folded", w * scale)

Weights added or replaced in memory are "local" until the module is saved
with `save_weights`, which writes one safetensors file holding every weight
the module still references.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file
from xdsl.dialects.builtin import ModuleOp, StringAttr

WEIGHTS_ATTR = "graph.weights"


class WeightStoreError(Exception):
    """A weight is missing or the backing file cannot be read."""


class WeightStore:
    def __init__(self, file: str | os.PathLike[str] | None = None):
        self.file: Path | None = Path(file) if file is not None else None
        self._local: dict[str, np.ndarray] = {}
        self._file_names: set[str] | None = None

    # -- reading ---------------------------------------------------------
    def _file_keys(self) -> set[str]:
        if self._file_names is None:
            if self.file is None:
                self._file_names = set()
            else:
                try:
                    with safe_open(str(self.file), framework="np") as f:
                        self._file_names = set(f.keys())
                except FileNotFoundError:
                    raise WeightStoreError(
                        f"weight file '{self.file}' does not exist"
                    ) from None
                except Exception as e:  # safetensors raises its own error types
                    raise WeightStoreError(
                        f"weight file '{self.file}' is not a valid safetensors file: {e}"
                    ) from None
        return self._file_names

    def names(self) -> set[str]:
        return set(self._local) | self._file_keys()

    def __contains__(self, name: str) -> bool:
        return name in self._local or name in self._file_keys()

    def get(self, name: str) -> np.ndarray:
        if name in self._local:
            return self._local[name]
        if name not in self._file_keys():
            where = f"'{self.file}'" if self.file else "the module (no weight file)"
            raise WeightStoreError(f"weight '{name}' not found in {where}")
        assert self.file is not None
        with safe_open(str(self.file), framework="np") as f:
            return f.get_tensor(name)

    # -- writing ---------------------------------------------------------
    def set(self, name: str, array: np.ndarray) -> None:
        self._local[name] = np.ascontiguousarray(array).reshape(np.shape(array))  # keeps 0-d

    def discard(self, name: str) -> None:
        """Forget an in-memory weight (weights in the backing file are not touched)."""
        self._local.pop(name, None)

    def add(self, hint: str, array: np.ndarray) -> str:
        """Store `array` under a fresh name derived from `hint`; return the name."""
        name, i = hint, 0
        while name in self:
            i += 1
            name = f"{hint}_{i}"
        self.set(name, array)
        return name

    @property
    def has_local(self) -> bool:
        return bool(self._local)

    def save(self, path: str | os.PathLike[str], names: Iterable[str]) -> None:
        tensors = {n: np.ascontiguousarray(a).reshape(a.shape) for n in sorted(set(names)) if (a := self.get(n)) is not None}
        save_file(tensors, str(path))


_stores: weakref.WeakKeyDictionary[ModuleOp, WeightStore] = weakref.WeakKeyDictionary()


def weights_of(module: ModuleOp, base_dir: str | os.PathLike[str] | None = None) -> WeightStore:
    """The weight store of `module`, opened from its `graph.weights` attribute
    (relative to `base_dir`, default the working directory) on first use."""
    store = _stores.get(module)
    if store is None:
        attr = module.attributes.get(WEIGHTS_ATTR)
        file = None
        if isinstance(attr, StringAttr):
            file = Path(attr.data)
            if not file.is_absolute() and base_dir is not None:
                file = Path(base_dir) / file
        store = WeightStore(file)
        _stores[module] = store
    return store


def attach_weights(module: ModuleOp, store: WeightStore) -> None:
    _stores[module] = store
    if store.file is not None:
        module.attributes[WEIGHTS_ATTR] = StringAttr(str(store.file))


def referenced_weights(module: ModuleOp) -> list[str]:
    return [op.weight_key for op in module.walk() if isinstance(op, weight_op_types())]


def weight_op_types() -> tuple[type, ...]:
    """The ops that name a tensor of the weight store (graph and tile level)."""
    from infer.dialects.graph import WeightOp as GraphWeightOp
    from infer.dialects.tile import WeightOp as TileWeightOp

    return (GraphWeightOp, TileWeightOp)


def save_weights(
    module: ModuleOp,
    out_dir: str | os.PathLike[str],
    stem: str,
    relative_to: str | os.PathLike[str] | None = None,
) -> Path | None:
    """Make the module's weight reference valid for a module written out.

    If every referenced weight is still in the backing file, the module keeps
    pointing at it. Otherwise one new file `<stem>.<digest>.weights.safetensors`
    is written to `out_dir` with every referenced weight. The attribute is made
    relative to `relative_to` when given (a module written to a file), else absolute.
    """
    names = referenced_weights(module)
    if not names and WEIGHTS_ATTR not in module.attributes:
        return None
    store = weights_of(module)
    if not names:
        del module.attributes[WEIGHTS_ATTR]
        return None
    if store.file is None and not store.has_local:
        return None  # hand-written IR without weights: references stay unresolved
    needs_new_file = any(n in store._local for n in names) or store.file is None
    if needs_new_file:
        digest = hashlib.sha256()
        for n in sorted(set(names)):
            a = store.get(n)
            digest.update(n.encode())
            digest.update(str(a.dtype).encode() + str(a.shape).encode())
            digest.update(np.ascontiguousarray(a).tobytes())
        path = Path(out_dir) / f"{stem}.{digest.hexdigest()[:12]}.weights.safetensors"
        if not path.exists():
            store.save(path, names)
        new_store = WeightStore(path)
        attach_weights(module, new_store)
        file = path
    else:
        assert store.file is not None
        file = store.file
    file = file.resolve()
    if relative_to is not None:
        text = os.path.relpath(file, Path(relative_to).resolve())
    else:
        text = str(file)
    module.attributes[WEIGHTS_ATTR] = StringAttr(text)
    return file
