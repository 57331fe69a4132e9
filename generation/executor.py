"""Step executors: what runs a decoder's prefill and decode steps for the generator.

A step executor owns one batch of sequences and their KV cache:

    logits = ex.prefill([prompt_ids, ...])   # starts the batch; [n, vocab] next-token logits
    logits = ex.decode([token, ...])         # appends one token to every sequence; [n, vocab]

`batch` is the most sequences one batch holds, `max_context` the most tokens
one sequence's cache holds (prompt plus generated tokens fed back), and
`vocab_size` the length of a logits row;
`last_device_seconds` is the simulated device time of the last call (None when
the executor does not simulate a device). The generator (`infer.generation.
Generator`) only talks to this interface, so the reference interpreter (here)
and a device executor on the simulator run the same generation loop.

`ReferenceExecutor` runs the `@prefill` / `@decode` functions of a graph-level
model (as `infer.import_model` builds them for GGUF files and Hugging Face
decoders: `@prefill(input_ids[B, S])`, `@decode(input_ids[B, 1], position[B],
k_0, v_0, ...)`, caches `[B, Hkv, P, D]`) on the reference interpreter. Prompts
are right-padded to S (causal attention: the padding after a prompt does not
change its logits, and its cache slots are overwritten before any query can
see them); a prompt longer than S continues one token per decode step.
Weights, dequantized once, are reused by every step (`constant_cache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType

from infer.frontend.model import Model


class GenerationError(Exception):
    """A generation request the model or executor cannot serve (one clear message)."""


class StepExecutor(Protocol):
    batch: int
    max_context: int
    vocab_size: int
    last_device_seconds: float | None

    def prefill(self, prompts: Sequence[Sequence[int]]) -> np.ndarray: ...

    def decode(self, tokens: Sequence[int]) -> np.ndarray: ...


def _functions(module) -> dict[str, func.FuncOp]:
    return {op.sym_name.data: op for op in module.body.block.ops if isinstance(op, func.FuncOp)}


def _shape(t) -> tuple[int, ...]:
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


class ReferenceExecutor:
    """A decoder's @prefill / @decode on the graph-level reference interpreter."""

    last_device_seconds = None

    def __init__(self, model: Model):
        self.model = model
        funcs = _functions(model.module)
        if "prefill" not in funcs or "decode" not in funcs:
            raise GenerationError(
                "generation needs a decoder with @prefill and @decode functions (import a GGUF file or a "
                "Hugging Face decoder without phase=); the module has "
                + (", ".join("@" + n for n in funcs) or "no functions")
            )
        prefill, decode = funcs["prefill"], funcs["decode"]
        ids_shape = _shape(prefill.function_type.inputs.data[0])
        logits_shape = _shape(prefill.function_type.outputs.data[0])
        cache_types = list(decode.function_type.inputs.data[2:])
        if len(ids_shape) != 2 or len(logits_shape) != 3 or not cache_types:
            raise GenerationError("@prefill/@decode do not have the decoder signature (input_ids[B, S] -> logits, caches)")
        self.batch, self.prefill_length = ids_shape
        self.vocab_size = logits_shape[-1]
        self.max_context = _shape(cache_types[0])[2]
        from infer.dialects.graph_interpreter import ConstantCache

        self._constants = ConstantCache()
        self._cache: list[np.ndarray] | None = None
        self._lengths = np.zeros(self.batch, np.int64)
        self._active = 0

    def _run(self, entry: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        from infer.dialects.graph_interpreter import run_module

        return run_module(self.model.module, inputs, entry=entry, constant_cache=self._constants)

    def _decode_step(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        assert self._cache is not None
        outs = self._run("decode", [tokens.reshape(self.batch, 1), positions, *self._cache])
        self._cache = outs[1:]
        return outs[0][:, 0]

    def prefill(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        n = len(prompts)
        if not 1 <= n <= self.batch:
            raise GenerationError(f"the model was imported for batches of {self.batch}; got {n} prompts")
        rows = [np.asarray(p, np.int64).reshape(-1) for p in prompts]
        for i, row in enumerate(rows):
            if row.size == 0:
                raise GenerationError(f"prompt {i} is empty")
            if row.size > self.max_context:
                raise GenerationError(
                    f"the prompt has {row.size} tokens but the context holds {self.max_context} "
                    "(import with a larger max_len, or shorten the prompt)"
                )
            bad = row[(row < 0) | (row >= self.vocab_size)]
            if bad.size:
                raise GenerationError(f"token id {int(bad[0])} is outside the vocabulary (0 .. {self.vocab_size - 1})")
        rows += [rows[-1]] * (self.batch - n)  # unused rows of the batch repeat the last prompt
        s = self.prefill_length
        ids = np.zeros((self.batch, s), np.int64)
        for b, row in enumerate(rows):
            ids[b, : min(row.size, s)] = row[:s]
        outs = self._run("prefill", [ids])
        self._cache = outs[1:]
        lengths = np.array([min(row.size, s) for row in rows], np.int64)
        last = np.stack([outs[0][b, row.size - 1] if row.size <= s else outs[0][b, 0] for b, row in enumerate(rows)])
        # the rest of long prompts, a token per decode step; finished rows rewrite their next
        # (unused) slot, which their first real decode step overwrites
        while np.any(pending := lengths < [row.size for row in rows]):
            tokens = np.array([row[lengths[b]] if pending[b] else 0 for b, row in enumerate(rows)], np.int64)
            logits = self._decode_step(tokens, lengths.copy())
            lengths += pending
            for b in np.flatnonzero(pending & (lengths == [row.size for row in rows])):
                last[b] = logits[b]
        self._lengths, self._active = lengths, n
        return last[:n]

    def decode(self, tokens: Sequence[int]) -> np.ndarray:
        if self._cache is None:
            raise GenerationError("decode before prefill: start the batch with prefill(prompts)")
        if len(tokens) != self._active:
            raise GenerationError(f"the batch has {self._active} sequences; got {len(tokens)} tokens")
        if np.any(self._lengths[: self._active] >= self.max_context):
            raise GenerationError(f"the context is full ({self.max_context} tokens)")
        step = np.zeros(self.batch, np.int64)
        step[: self._active] = tokens
        logits = self._decode_step(step, self._lengths.copy())
        self._lengths[: self._active] += 1
        return logits[: self._active]

    def lengths(self) -> list[int]:
        """Tokens each active sequence holds in its cache."""
        return [int(x) for x in self._lengths[: self._active]]


__all__ = ["GenerationError", "ReferenceExecutor", "StepExecutor"]
