"""The weight store: named tensors kept outside the textual IR, carried by the module.

A module refers to its weights with `graph.weight @name : tensor<...>` ops and names its
backing file with the module attribute `graph.weights = "FILE"` (a safetensors file; a
relative path is relative to the IR file). The text stays small whatever the model size; the
arrays are read lazily from the file.

Passes read, replace and create weights through `weights_of(module)`:

    store = weights_of(module)
    w = store.get("conv1.weight")            # numpy array
    name = store.add("conv1.weight_folded", w * scale)

Weights added or replaced in memory are "local" until the module is saved with
`save_weights`, which writes one safetensors file holding every weight the module still
references.

The weights travel with the module: `graph.weights` holds a `WeightsAttr`, which prints as
the file path (the text above: parsing it gives a plain string, which `weights_of` opens) and
also carries the in-memory store. So:

* `module.clone()` keeps the weights (the clone shares the attribute);
* print + parse keeps the file reference (and only that: in-memory weights need `save_weights`);
* a module's weights are a value, as its ops are: the attribute holds a copy-on-write snapshot
  of the store taken whenever the store changes, and `weights_of(clone)` gives the clone its
  own store forked from the snapshot it was cloned with. A pass on a clone therefore never
  changes the original's weights, and a change to the original after `clone()` never shows in
  the clone. A fork shares the arrays (they are never written in place) and copies the
  name table on its first write.
* `attach_weights(module, store)` is the explicit way to share: `store` becomes the weights of
  `module` (of every module it is attached to, writes through it show in all of them).

There is no table of stores beside the IR: a module's weights are whatever its attribute says.
"""

from __future__ import annotations

import copy
import hashlib
import os
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import BuiltinAttribute, Data
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer

WEIGHTS_ATTR = "graph.weights"
IN_MEMORY = "<in memory>"  # what `graph.weights` prints for weights that have no file yet


class WeightStoreError(Exception):
    """A weight is missing or the backing file cannot be read."""


class WeightStore:
    def __init__(self, file: str | os.PathLike[str] | None = None):
        self.file: Path | None = Path(file) if file is not None else None
        self._local: dict[str, np.ndarray] = {}
        self._file_names: set[str] | None = None
        self._local_shared = False  # `_local` is also a fork's or a snapshot's: copy it before writing
        self._modules: weakref.WeakSet[ModuleOp] = weakref.WeakSet()  # modules whose weights this is
        self._pending: weakref.WeakSet[ModuleOp] = weakref.WeakSet()  # modules it joins at its first write

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
        array = np.ascontiguousarray(array).reshape(np.shape(array))  # keeps 0-d
        self._writable_local()[name] = array
        self._publish(lambda other: other.set(name, array))

    def discard(self, name: str) -> None:
        """Forget an in-memory weight (weights in the backing file are not touched)."""
        if name in self._local:
            del self._writable_local()[name]
            self._publish(lambda other: other.discard(name))

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

    # -- copy-on-write -----------------------------------------------------
    def fork(self) -> WeightStore:
        """A store with the same weights whose writes stay its own (and this one's stay
        here). O(1): the two share the name table until either writes."""
        twin = copy.copy(self)  # the same class, file and reader state (e.g. a sharded checkpoint's)
        twin._modules, twin._pending = weakref.WeakSet(), weakref.WeakSet()
        self._local_shared = twin._local_shared = True
        return twin

    def _writable_local(self) -> dict[str, np.ndarray]:
        if self._local_shared:
            self._local = dict(self._local)
            self._local_shared = False
        return self._local

    def _publish(self, replay: Callable[[WeightStore], None]) -> None:
        """After a write: give each module this store belongs to a new `graph.weights`
        attribute with a snapshot of the new contents, so clones taken from now on get them
        (and clones taken before keep theirs). A store handed out for a module without weights
        joins it now, or, if the module got weights from elsewhere meanwhile, passes the write
        on to them (`replay`)."""
        for module in list(self._pending):
            if WEIGHTS_ATTR in module.attributes:
                replay(weights_of(module))  # stays pending: its later writes are passed on too
            else:
                self._pending.discard(module)
                self._modules.add(module)
        if not self._modules:
            return
        snapshot = self.fork()
        for module in list(self._modules):
            attr = module.attributes.get(WEIGHTS_ATTR)
            if attr is None:  # joins now (or had its attribute removed: no weights referenced)
                module.attributes[WEIGHTS_ATTR] = WeightsAttr(WeightsRef(None, self, snapshot))
            elif isinstance(attr, WeightsAttr) and attr.data.store is self:
                module.attributes[WEIGHTS_ATTR] = WeightsAttr(WeightsRef(attr.data.path, self, snapshot))
            else:  # the module got other weights since (save_weights, attach_weights)
                self._modules.discard(module)


@dataclass(frozen=True, eq=False)
class WeightsRef:
    """What `graph.weights` holds: the file as the IR names it (None: no file yet), the
    module's store and the snapshot the attribute was made with (never written; clones fork
    their store from it)."""

    path: str | None
    store: WeightStore
    snapshot: WeightStore


@irdl_attr_definition
class WeightsAttr(Data[WeightsRef], BuiltinAttribute):
    """The `graph.weights` module attribute with the module's weight store attached.

    It prints as a string literal, the file path (or `"<in memory>"` before the weights have
    a file), so the textual IR is what it always was; parsing gives a `StringAttr`, which
    `weights_of` turns back into a `WeightsAttr` with the file opened. It derives from
    `BuiltinAttribute` only for that: xDSL prints builtin attributes through `print_builtin`
    without a dialect prefix. Equality is identity of the store."""

    name = "graph.weights"

    def print_builtin(self, printer: Printer) -> None:
        printer.print_string_literal(self.data.path if self.data.path is not None else IN_MEMORY)

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> WeightsRef:
        raise NotImplementedError("graph.weights is parsed as a string")

    def print_parameter(self, printer: Printer) -> None:
        self.print_builtin(printer)


def _install(module: ModuleOp, store: WeightStore, path: str | None) -> None:
    """Make `store` the weights of `module`, printed as `path`. A store with nothing in it
    yet (no file, no in-memory weights) joins the module at its first write, so a module
    without weights keeps printing without a `graph.weights` attribute, as it always has."""
    if path is None and store.file is None and not store.has_local:
        module.attributes.pop(WEIGHTS_ATTR, None)
        store._pending.add(module)
        return
    store._pending.discard(module)
    store._modules.add(module)
    module.attributes[WEIGHTS_ATTR] = WeightsAttr(WeightsRef(path, store, store.fork()))


def weights_of(module: ModuleOp, base_dir: str | os.PathLike[str] | None = None) -> WeightStore:
    """The weight store of `module`: the one its `graph.weights` attribute carries. A parsed
    module's attribute is a file path, opened here (relative to `base_dir`, default the working
    directory); a clone gets its own copy-on-write store on first use. A module without the
    attribute gets a new empty store each time, which joins the module at its first write
    (so write through the store you got, and ask again after other code may have written)."""
    attr = module.attributes.get(WEIGHTS_ATTR)
    if isinstance(attr, WeightsAttr):
        if module in attr.data.store._modules:
            return attr.data.store
        store, path = attr.data.snapshot.fork(), attr.data.path  # a clone: fork what it was cloned with
    elif isinstance(attr, StringAttr):
        path = attr.data
        file = Path(path)
        if not file.is_absolute() and base_dir is not None:
            file = Path(base_dir) / file
        store = WeightStore(file)
    else:
        store, path = WeightStore(None), None
    _install(module, store, path)
    return store


def attach_weights(module: ModuleOp, store: WeightStore) -> None:
    """Make `store` the weights of `module` (shared, not copied: see the module docstring)."""
    _install(module, store, str(store.file) if store.file is not None else None)


def _has_file_reference(module: ModuleOp) -> bool:
    """Whether `graph.weights` names a file (a module whose weights are only in memory had
    no attribute in the text, so it is added last when it gets one, as it always was)."""
    attr = module.attributes.get(WEIGHTS_ATTR)
    return attr is not None and not (isinstance(attr, WeightsAttr) and attr.data.path is None)


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
        module.attributes.pop(WEIGHTS_ATTR, None)  # hand-written IR without weights: references stay unresolved
        return None
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
        store = WeightStore(path)
    assert store.file is not None
    file = store.file.resolve()
    if relative_to is not None:
        text = os.path.relpath(file, Path(relative_to).resolve())
    else:
        text = str(file)
    if not _has_file_reference(module):
        module.attributes.pop(WEIGHTS_ATTR, None)
    _install(module, store, text)
    return file
