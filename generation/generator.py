"""`Generator`: a prompt in, tokens out as they are produced.

    gen = infer.Generator("SmolLM2-135M-Instruct.Q4_1.gguf")        # or a Model, or a HF folder
    for piece in gen.generate("What is the capital of France?", max_new_tokens=64):
        print(piece.text, end="", flush=True)
    gen.last_stats          # prompt/generated tokens, finish reason, time to first token, time per token

`generate(prompt, ...)` takes a string (in the model's chat template when it
has one, `chat=None`; `chat=False` encodes the text as it is), a list of chat
messages, or token ids. It validates the request when called and returns an
iterator of `GeneratedToken(id, text)`: `text` is the new text the token adds
(held back while a UTF-8 character is incomplete; None without a tokenizer).
It stops at an end-of-sequence token (the tokenizer's, or `stop_token_ids`;
not yielded), after `max_new_tokens`, or when the executor's context is full.
Sampling: `temperature` (0 = greedy), `top_k`, `top_p`, `seed` (see
`infer.generation.sampling`). The step executor is the reference interpreter
unless one is given (`executor=`, see `infer.generation.executor`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from infer.frontend.model import Model, ModelImportError
from infer.generation.executor import GenerationError, ReferenceExecutor, StepExecutor
from infer.generation.sampling import Sampler, SamplingError, SamplingOptions


@dataclass(frozen=True)
class GeneratedToken:
    id: int
    text: str | None  # the text this token adds; None when the model has no tokenizer


@dataclass
class GenerationStats:
    """One generate() call. Host times are wall-clock seconds; device times are the
    executor's simulated seconds (None on the reference interpreter)."""

    prompt_tokens: int
    generated_tokens: int = 0
    finish_reason: str | None = None  # "eos", "max_new_tokens" or "context_full"
    time_to_first_token_s: float | None = None
    decode_step_s: list[float] = field(default_factory=list)
    device_time_to_first_token_s: float | None = None
    device_decode_step_s: list[float] = field(default_factory=list)

    @property
    def time_per_output_token_s(self) -> float | None:
        return float(np.mean(self.decode_step_s)) if self.decode_step_s else None

    @property
    def device_time_per_output_token_s(self) -> float | None:
        return float(np.mean(self.device_decode_step_s)) if self.device_decode_step_s else None


class Generator:
    """Text generation with a language model on a step executor.

    model: a `Model` with @prefill/@decode, or a path (GGUF file, Hugging Face
    folder) imported with `prefill_length` (S, default 128) and `max_context`
    (the KV-cache capacity P, default S + 128) and compute `dtype`.
    executor: a `StepExecutor`; default: `ReferenceExecutor(model)`.
    """

    def __init__(self, model: Model | str | os.PathLike[str], executor: StepExecutor | None = None, *,
                 prefill_length: int | None = None, max_context: int | None = None, dtype: str | None = None):
        if not isinstance(model, Model):
            from infer.frontend import import_model

            options = {"seq_len": prefill_length, "max_len": max_context, "dtype": dtype}
            model = import_model(model, **{k: v for k, v in options.items() if v is not None})
        elif prefill_length is not None or max_context is not None or dtype is not None:
            raise GenerationError("prefill_length, max_context and dtype apply when the Generator imports the "
                                  "model from a path; this Model is already imported")
        self.model = model
        self.executor: StepExecutor = executor if executor is not None else ReferenceExecutor(model)
        self.last_stats: GenerationStats | None = None

    @property
    def tokenizer(self):
        return self.model.tokenizer

    def encode(self, prompt: str | Sequence[Mapping[str, str]] | Sequence[int], chat: bool | None = None) -> list[int]:
        """The token ids generate() starts from (see the module docstring)."""
        if not isinstance(prompt, str | Sequence | np.ndarray):
            raise GenerationError(f"the prompt must be a string, chat messages (a list of {{'role', 'content'}} "
                                  f"dicts) or token ids, got {type(prompt).__name__}")
        if not isinstance(prompt, str) and len(prompt) == 0:
            raise GenerationError("the prompt is empty")
        if isinstance(prompt, np.ndarray) or (not isinstance(prompt, str) and prompt and
                                              all(isinstance(t, int | np.integer) for t in prompt)):
            if chat:
                raise GenerationError("chat=True needs a text prompt or messages, not token ids")
            return [int(t) for t in np.asarray(prompt).reshape(-1)]
        tok = self.tokenizer
        if tok is None:
            raise GenerationError(f"{self.model.source or 'the model'} has no tokenizer: give token ids")
        messages = not isinstance(prompt, str)
        use_template = chat if chat is not None else (messages or self.model.chat_template is not None)
        if messages and not use_template:
            raise GenerationError("chat messages need the chat template (chat=False takes a string)")
        try:
            if use_template:
                return self.model.apply_chat_template(prompt)
            return [int(t) for t in tok.encode(prompt)]
        except ModelImportError as e:
            raise GenerationError(str(e)) from None

    def generate(self, prompt: str | Sequence[Mapping[str, str]] | Sequence[int], *, max_new_tokens: int = 128,
                 temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int | None = None, chat: bool | None = None,
                 stop_token_ids: Sequence[int] | None = None) -> Iterator[GeneratedToken]:
        ids = self.encode(prompt, chat)
        if not ids:
            raise GenerationError("the prompt is empty")
        if max_new_tokens < 1:
            raise GenerationError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        bad = [t for t in ids if not 0 <= t < self.executor.vocab_size]
        if bad:
            raise GenerationError(f"token id {bad[0]} is outside the vocabulary (0 .. {self.executor.vocab_size - 1})")
        if len(ids) > self.executor.max_context:
            raise GenerationError(
                f"the prompt has {len(ids)} tokens but the model's context holds {self.executor.max_context} "
                "(import with a larger max_len / max_context, or shorten the prompt)"
            )
        try:
            sampler = Sampler(SamplingOptions(temperature, top_k, top_p, seed))
        except SamplingError as e:
            raise GenerationError(str(e)) from None
        if stop_token_ids is None:
            eos = getattr(self.tokenizer, "eos_token_id", None) if self.model.source is not None else None
            stop_token_ids = [] if eos is None else [eos]
        stats = GenerationStats(prompt_tokens=len(ids))
        self.last_stats = stats
        return self._stream(ids, max_new_tokens, sampler, set(int(t) for t in stop_token_ids), stats)

    def generate_text(self, prompt, **options) -> str:
        """The generated text at once (generate() joined)."""
        pieces = [p.text for p in self.generate(prompt, **options)]
        if any(p is None for p in pieces):
            raise GenerationError("the model has no tokenizer to turn tokens into text")
        return "".join(pieces)  # type: ignore[arg-type]

    def _stream(self, ids: list[int], max_new_tokens: int, sampler: Sampler, stop: set[int],
                stats: GenerationStats) -> Iterator[GeneratedToken]:
        ex = self.executor
        detok = _Detokenizer(self.tokenizer if self.model.source is not None else None)
        start = time.perf_counter()
        logits = ex.prefill([ids])[0]
        token = sampler(logits)
        stats.time_to_first_token_s = time.perf_counter() - start
        stats.device_time_to_first_token_s = ex.last_device_seconds
        length = len(ids)
        while True:
            if token in stop:
                stats.finish_reason = "eos"
                return
            stats.generated_tokens += 1
            yield GeneratedToken(token, detok.add(token))
            if stats.generated_tokens >= max_new_tokens:
                stats.finish_reason = "max_new_tokens"
                return
            if length >= ex.max_context:
                stats.finish_reason = "context_full"
                return
            step = time.perf_counter()
            logits = ex.decode([token])[0]
            length += 1
            token = sampler(logits)
            stats.decode_step_s.append(time.perf_counter() - step)
            if ex.last_device_seconds is not None:
                stats.device_decode_step_s.append(ex.last_device_seconds)


class _Detokenizer:
    """Text of a growing token sequence, piece by piece: decodes the whole
    generated sequence each time (tokenizers merge bytes and spaces across
    tokens) and holds back a trailing incomplete UTF-8 character."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = ""

    def add(self, token: int) -> str | None:
        if self.tokenizer is None:
            return None
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        # normally the text grows at its end; if a tokenizer rewrote earlier text, go on after
        # the part that still agrees (what was emitted cannot be taken back)
        keep = len(os.path.commonprefix([text, self.emitted]))
        piece, self.emitted = text[keep:], text
        return piece


__all__ = ["GeneratedToken", "GenerationStats", "Generator"]
