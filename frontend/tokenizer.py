"""Tokenizers and chat templates of imported language models, through transformers.

- A GGUF file carries its tokenizer in the metadata (`tokenizer.ggml.*`: BPE or
  SentencePiece vocabulary, merges, special tokens, `tokenizer.chat_template`);
  transformers' `AutoTokenizer.from_pretrained(folder, gguf_file=...)` converts
  it to a fast (`tokenizers`) tokenizer.
- A Hugging Face folder keeps its own tokenizer files (tokenizer.json,
  tokenizer_config.json, ...), loaded with `AutoTokenizer.from_pretrained(folder)`.

Nothing is downloaded and no code from the model is run (transformers renders
chat templates in a sandboxed Jinja environment). transformers is needed only
when a tokenizer is asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infer.frontend.model import ModelImportError

if TYPE_CHECKING:
    from infer.frontend.model import Model

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


def has_tokenizer(source: Path) -> bool:
    """Whether the model file or folder carries a tokenizer."""
    if source.is_dir():
        return any((source / f).exists() for f in TOKENIZER_FILES)
    if source.suffix.lower() == ".gguf":
        from infer.frontend.gguf_import import open_gguf

        return open_gguf(source).get("tokenizer.ggml.model") is not None
    return False


def load_tokenizer(source: str | Path) -> Any | None:
    """The tokenizer of a GGUF file or Hugging Face folder (None if it has none)."""
    source = Path(source)
    if not has_tokenizer(source):
        return None
    try:
        import transformers
    except ImportError:
        raise ModelImportError(f"{source}: reading the tokenizer needs the transformers package") from None
    try:
        if source.is_dir():
            return transformers.AutoTokenizer.from_pretrained(str(source), local_files_only=True)
        return transformers.AutoTokenizer.from_pretrained(
            str(source.parent), gguf_file=source.name, local_files_only=True
        )
    except KeyError as e:
        raise ModelImportError(f"{source}: cannot build the tokenizer: the metadata lacks {e}") from None
    except (ValueError, OSError, TypeError, ImportError) as e:
        raise ModelImportError(f"{source}: cannot build the tokenizer: {e}") from None


#: tokenizer classes a saved fast tokenizer may name that `load_saved_tokenizer` loads without
#: AutoTokenizer (transformers' GGUF conversion of a BPE vocabulary makes TokenizersBackend)
_PLAIN_FAST_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")


def load_saved_tokenizer(folder: Path) -> Any:
    """A tokenizer that `save_pretrained` wrote to `folder`. A plain fast tokenizer (the class
    transformers' GGUF conversion makes of a BPE vocabulary) loads as PreTrainedTokenizerFast,
    without AutoTokenizer, whose registry of model classes imports torch (SmolLM2's: 1.4 s
    against 3.6 s); other classes go through AutoTokenizer (`load_tokenizer`)."""
    import json

    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError) as e:
        raise ModelImportError(f"{folder}: cannot read the saved tokenizer: {e}") from None
    if not isinstance(config, dict) or config.get("tokenizer_class") not in _PLAIN_FAST_CLASSES:
        return load_tokenizer(folder)
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        raise ModelImportError(f"{folder}: reading the tokenizer needs the transformers package") from None
    try:
        return PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)
    except (ValueError, OSError, TypeError, KeyError) as e:
        raise ModelImportError(f"{folder}: cannot load the saved tokenizer: {e}") from None


def apply_chat_template(model: Model, conversation: str | Sequence[Mapping[str, str]],
                        add_generation_prompt: bool = True) -> list[int]:
    """Token ids of `conversation` (a user prompt or a list of messages) in the
    model's chat template; ModelImportError if the model has no tokenizer or template."""
    tok = model.tokenizer
    if tok is None:
        raise ModelImportError(f"{model.source or 'the model'}: the model has no tokenizer")
    if model.chat_template is None:
        raise ModelImportError(f"{model.source}: the model has no chat template")
    messages = [{"role": "user", "content": conversation}] if isinstance(conversation, str) else list(conversation)
    ids = tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True,
                                  return_dict=False)
    if isinstance(ids, Mapping):  # some transformers versions return a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


__all__ = ["TOKENIZER_FILES", "apply_chat_template", "has_tokenizer", "load_saved_tokenizer", "load_tokenizer"]
