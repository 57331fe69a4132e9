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


_NOT_LOADED = object()


class Model:
    """Graph-level IR plus its weights. `print(model)` shows the IR (weights are
    kept out of the text); `model.run(inputs)` runs the reference interpreter.

    A model imported from a GGUF file or a Hugging Face folder remembers it as
    `source`, which serves its tokenizer and chat template (`tokenizer`,
    `chat_template`, `apply_chat_template`)."""

    def __init__(self, module: ModuleOp, source: str | os.PathLike[str] | None = None):
        self.module = module
        self.source = Path(source) if source is not None else None
        self._tokenizer = _NOT_LOADED

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

    @property
    def tokenizer(self):
        """The model's tokenizer (a transformers tokenizer, built from the GGUF
        metadata or the Hugging Face folder's tokenizer files on first use), or
        None when the model carries none."""
        if self._tokenizer is _NOT_LOADED:
            from infer.frontend.tokenizer import load_tokenizer

            self._tokenizer = load_tokenizer(self.source) if self.source is not None else None
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer) -> None:
        """Use `tokenizer` (e.g. the same tokenizer loaded from a saved copy) instead of
        building it from the source."""
        self._tokenizer = tokenizer

    @property
    def chat_template(self) -> str | None:
        """The chat template (Jinja text) the model ships, or None."""
        tok = self.tokenizer
        template = getattr(tok, "chat_template", None) if tok is not None else None
        return template if isinstance(template, str) else None

    def apply_chat_template(self, conversation: str | Sequence[Mapping[str, str]],
                            add_generation_prompt: bool = True) -> list[int]:
        """Token ids of a conversation (a user prompt, or a list of
        {"role": ..., "content": ...} messages) in the model's chat template."""
        from infer.frontend.tokenizer import apply_chat_template

        return apply_chat_template(self, conversation, add_generation_prompt)

    def run(self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray], entry: str = "main") -> list[np.ndarray]:
        """Run function `entry` (decoders have `prefill` and `decode`) on the reference interpreter."""
        from infer.dialects.graph_interpreter import run_module

        return run_module(self.module, inputs, entry=entry)
