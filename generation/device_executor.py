"""`DeviceExecutor`: a decoder's prefill and decode steps on the simulated NPU.

    model = infer.import_model("model.gguf", kv_cache="paged", chunk=32, batch=4, max_len=256)
    exe = infer.compile(model, target="server", precision="fp32")   # @prefill_chunk + @decode
    gen = infer.Generator(model, executor=DeviceExecutor(exe))
    gen.generate_text("What is the capital of France?")
    gen.last_stats.device_time_to_first_token_s, gen.last_stats.device_time_per_output_token_s

It runs the two entry points of a paged-KV artifact (docs/paged-kv.md; built by
`import_model(..., kv_cache="paged")` and `infer.compile`) in one `DeviceSession`: the weights
and the KV pools live in the simulated DRAM for the whole generation (the pools are the
in-place outputs of every step: never copied between the host and the device); per call the
host writes only the token ids and the paging metadata and reads the logits.

Paging (the host side, as vLLM's block manager): the pool has NB blocks of BS token slots; the
last `scratch` blocks (enough for a chunk's padding rows or a batch's idle rows) are never given
to a sequence, the others are handed out one at a time as a sequence grows (token t of a
sequence lives in slot block_table[t // BS] * BS + t % BS).
- `prefill(prompts)`: starts a batch of at most B sequences; each prompt runs through
  `@prefill_chunk` C tokens at a time (a long prompt takes several chunks); the last chunk is
  right-padded as the ReferenceExecutor pads: the padding rows come after every real token, so
  causal attention keeps them out of the real rows, and their keys/values go to scratch slots.
- `decode(tokens)`: one `@decode` step for the batch: every sequence appends its token at its own
  position (different lengths in one step); the rows of a batch with fewer than B sequences
  are idle rows on scratch slots.
`last_device_seconds`: the simulated time of the last call (the sum over the chunks of a
prefill) at the hardware config's clock. Errors (`GenerationError`, one message): a prompt
longer than the cache holds per sequence, a pool without enough free blocks for the request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from infer.generation.executor import GenerationError
from infer.runtime.artifact import Artifact
from infer.runtime.session import DeviceSession

METADATA_INPUTS = ("input_ids", "positions", "slots", "block_tables", "context_lens")


class DeviceExecutor:
    """A paged-KV artifact's @prefill_chunk / @decode on the simulator (StepExecutor)."""

    def __init__(self, compiled: Any, *, mode: str = "fast"):
        art: Artifact = getattr(compiled, "artifact", compiled)
        if not {"prefill_chunk", "decode"} <= set(art.entry_names()):
            raise GenerationError("the device executor needs an artifact with @prefill_chunk and @decode entry points "
                                  "(import with kv_cache='paged' and compile every function); it has "
                                  + ", ".join("@" + n for n in art.entry_names()))
        paged = art.meta.get("paged_kv")
        if not isinstance(paged, dict) or not isinstance(paged.get("block_size"), int):
            raise GenerationError("the artifact does not record its paged KV cache (meta 'paged_kv'): recompile it")
        prefill, decode = art.for_entry("prefill_chunk"), art.for_entry("decode")
        names = [s.name for s in prefill.inputs]
        if names[:5] != list(METADATA_INPUTS) or [s.name for s in decode.inputs] != names:
            raise GenerationError(f"@prefill_chunk/@decode do not have the paged decoder signature ({', '.join(METADATA_INPUTS)}, "
                                  "pools...)")
        self.pools = names[5:]
        shapes = {s.name: s.shape for s in prefill.inputs}
        self.chunk = shapes["input_ids"][1]
        self.batch = {s.name: s.shape for s in decode.inputs}["input_ids"][0]
        self.max_blocks = shapes["block_tables"][1]
        self.block_size = int(paged["block_size"])
        self.num_blocks = shapes[self.pools[0]][0] // self.block_size
        self.scratch_blocks = math.ceil(max(self.chunk, self.batch) / self.block_size)
        self.free_blocks = self.num_blocks - self.scratch_blocks
        self.scratch_slot = self.free_blocks * self.block_size  # first slot of the scratch blocks
        self.max_context = min(int(paged.get("max_len", self.max_blocks * self.block_size)),
                               self.max_blocks * self.block_size)
        self.vocab_size = prefill.outputs[0].shape[-1]
        self.session = DeviceSession(art, resident=self.pools, mode=mode)
        self.last_device_seconds: float | None = None
        self._tables: list[list[int]] = []
        self._lengths: list[int] = []
        self._free: list[int] = []

    # ---------------------------------------------------------------- paging
    def _grow(self, seq: int, length: int) -> None:
        """Give sequence `seq` the blocks for `length` tokens."""
        need = math.ceil(length / self.block_size) - len(self._tables[seq])
        if need > len(self._free):
            raise GenerationError(
                f"the KV-cache pool is too small for this request: {self.free_blocks} blocks of {self.block_size} "
                f"tokens for sequences ({len(self._free)} free, {need} more needed for {length} tokens); compile "
                "with more --num-blocks or shorten the request")
        for _ in range(need):
            self._tables[seq].append(self._free.pop())

    def _slot(self, seq: int, t: int) -> int:
        return self._tables[seq][t // self.block_size] * self.block_size + t % self.block_size

    def _table_row(self, seq: int | None) -> np.ndarray:
        row = np.full(self.max_blocks, self.free_blocks, np.int32)  # unused entries: the first scratch block
        if seq is not None:
            row[: len(self._tables[seq])] = self._tables[seq]
        return row

    # ---------------------------------------------------------------- steps
    def prefill(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        n = len(prompts)
        if not 1 <= n <= self.batch:
            raise GenerationError(f"the decode step was compiled for batches of {self.batch}; got {n} prompts")
        rows = [np.asarray(p, np.int64).reshape(-1) for p in prompts]
        for i, row in enumerate(rows):
            if row.size == 0:
                raise GenerationError(f"prompt {i} is empty")
            if row.size > self.max_context:
                raise GenerationError(f"the prompt has {row.size} tokens but the KV cache holds {self.max_context} per "
                                      "sequence (compile with a larger --max-context, or shorten the prompt)")
            bad = row[(row < 0) | (row >= self.vocab_size)]
            if bad.size:
                raise GenerationError(f"token id {int(bad[0])} is outside the vocabulary (0 .. {self.vocab_size - 1})")
        need = sum(math.ceil(r.size / self.block_size) for r in rows)
        if need > self.free_blocks:
            raise GenerationError(f"the KV-cache pool is too small for this request: the prompts need {need} blocks of "
                                  f"{self.block_size} tokens, the pool has {self.free_blocks} for sequences (compile "
                                  "with more --num-blocks, or fewer / shorter prompts)")
        self._free = list(range(self.free_blocks - 1, -1, -1))
        self._tables = [[] for _ in rows]
        self._lengths = [0] * n
        seconds, last = 0.0, []
        for seq, row in enumerate(rows):
            self._grow(seq, row.size)
            for start in range(0, row.size, self.chunk):
                logits, s = self._prefill_chunk(seq, row, start)
                seconds += s
            last.append(logits[(row.size - 1) % self.chunk])
            self._lengths[seq] = row.size
        self.last_device_seconds = seconds
        return np.stack(last)

    def _prefill_chunk(self, seq: int, row: np.ndarray, start: int) -> tuple[np.ndarray, float]:
        c = self.chunk
        real = min(c, row.size - start)
        ids = np.zeros((1, c), np.int32)
        ids[0, :real] = row[start:start + real]
        positions = np.minimum(np.arange(start, start + c), self.max_context - 1).astype(np.int32).reshape(1, c)
        slots = np.array([self._slot(seq, start + i) if i < real else self.scratch_slot + i for i in range(c)], np.int32)
        outs = self.session.run("prefill_chunk", {
            "input_ids": ids, "positions": positions, "slots": slots,
            "block_tables": self._table_row(seq).reshape(1, -1), "context_lens": np.array([start + c], np.int32)})
        return outs["logits"][0], self.session.last_report.seconds

    def decode(self, tokens: Sequence[int]) -> np.ndarray:
        n = len(self._lengths)
        if n == 0:
            raise GenerationError("decode before prefill: start the batch with prefill(prompts)")
        if len(tokens) != n:
            raise GenerationError(f"the batch has {n} sequences; got {len(tokens)} tokens")
        if max(self._lengths) >= self.max_context:
            raise GenerationError(f"the context is full ({self.max_context} tokens)")
        b = self.batch
        ids = np.zeros((b, 1), np.int32)
        positions = np.zeros((b, 1), np.int32)
        slots = self.scratch_slot + np.arange(b, dtype=np.int32)
        tables = np.stack([self._table_row(None)] * b)
        lens = np.ones(b, np.int32)
        for seq, (tok, t) in enumerate(zip(tokens, self._lengths, strict=True)):
            if not 0 <= int(tok) < self.vocab_size:
                raise GenerationError(f"token id {int(tok)} is outside the vocabulary (0 .. {self.vocab_size - 1})")
            self._grow(seq, t + 1)
            ids[seq, 0], positions[seq, 0], slots[seq], lens[seq] = int(tok), t, self._slot(seq, t), t + 1
            tables[seq] = self._table_row(seq)
        outs = self.session.run("decode", {"input_ids": ids, "positions": positions, "slots": slots,
                                           "block_tables": tables, "context_lens": lens})
        self._lengths = [t + 1 for t in self._lengths]
        self.last_device_seconds = self.session.last_report.seconds
        return outs["logits"][:n, 0]

    def lengths(self) -> list[int]:
        """Tokens each active sequence holds in its cache."""
        return list(self._lengths)


__all__ = ["DeviceExecutor"]
