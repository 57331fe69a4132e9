"""`Model`: an imported model at the graph level, as `infer.import_model` returns it."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.printer import Printer

from infer.dialects.weights import WEIGHTS_ATTR, save_weights, weights_of


class ModelImportError(Exception):
    """A model cannot be imported; the message names the file/node and what is wrong."""


class Model:
    """Graph-level IR plus its weights. `print(model)` shows the IR (weights are
    kept out of the text); `model.run(inputs)` runs the reference interpreter."""

    def __init__(self, module: ModuleOp):
        self.module = module

    @property
    def weights(self):
        return weights_of(self.module)

    def __str__(self) -> str:
        stream = io.StringIO()
        module = self.module
        store = self.weights
        if store.has_local:
            # In-memory weights: say so instead of writing a file as a side effect.
            module = module.clone()
            module.attributes[WEIGHTS_ATTR] = StringAttr(f"<in memory: {len(store.names())} tensors; Model.save() writes them>")
        Printer(stream=stream).print_op(module)
        return stream.getvalue() + "\n"

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write `path` (.mlir) and its weights beside it; returns the IR path."""
        path = Path(path)
        save_weights(self.module, path.resolve().parent, path.stem, relative_to=path.resolve().parent)
        stream = io.StringIO()
        Printer(stream=stream).print_op(self.module)
        path.write_text(stream.getvalue() + "\n")
        return path

    def run(self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray], entry: str = "main") -> list[np.ndarray]:
        """Run function `entry` (decoders have `prefill` and `decode`) on the reference interpreter."""
        from infer.dialects.graph_interpreter import run_module

        return run_module(self.module, inputs, entry=entry)
