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
- For a serving engine (continuous batching): `add_sequence(id, prompt) -> logits`,
  `decode_step({id: token, ...}) -> {id: logits}` (any running sequences, at most B),
  `release(id)`, `free_block_count`. A serving engine whose own block manager owns the blocks
  (infer.serving.device_executor) uses `bind(id, blocks, length)`, `extend(id, tokens)` (a
  prompt chunk from any position), `decode_step` and `unbind(id)` instead.
`last_device_seconds`: the simulated time of the last call (the sum over the chunks of a
prefill) at the hardware config's clock. Errors (`GenerationError`, one message): a prompt
longer than the cache holds per sequence, a pool without enough free blocks for the request.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from infer.generation.executor import GenerationError
from infer.runtime.artifact import Artifact
from infer.runtime.session import DeviceSession

METADATA_INPUTS = ("input_ids", "positions", "slots", "block_tables", "context_lens")


class PagedExecutor:
    """The host side of paged decoding (block tables, slots, chunks, batches) over a session
    that runs the @prefill_chunk / @decode entry points: `session.run(entry, {input: array})`
    -> {output: array} (the pools stay in the session), `session.last_seconds` (simulated
    time of the last run, None when not simulated). `signature`: {entry: {input: shape}} and
    the logits' vocabulary size; `paged`: the import's {block_size, max_len, ...}."""

    def __init__(self, session, signature: dict[str, dict[str, tuple[int, ...]]], vocab_size: int,
                 paged: dict[str, Any]):
        if not {"prefill_chunk", "decode"} <= set(signature):
            raise GenerationError("paged generation needs @prefill_chunk and @decode (import with kv_cache='paged' "
                                  "and compile every function); found " + ", ".join("@" + n for n in signature))
        if not isinstance(paged, dict) or not isinstance(paged.get("block_size"), int):
            raise GenerationError("the model does not record its paged KV cache (infer.paged_kv): re-import it")
        prefill, decode = signature["prefill_chunk"], signature["decode"]
        names = list(prefill)
        if names[:5] != list(METADATA_INPUTS) or list(decode) != names:
            raise GenerationError(f"@prefill_chunk/@decode do not have the paged decoder signature "
                                  f"({', '.join(METADATA_INPUTS)}, pools...)")
        self.pools = names[5:]
        self.chunk = prefill["input_ids"][1]
        self.batch = decode["input_ids"][0]
        self.max_blocks = prefill["block_tables"][1]
        self.block_size = int(paged["block_size"])
        self.num_blocks = prefill[self.pools[0]][0] // self.block_size
        self.scratch_blocks = math.ceil(max(self.chunk, self.batch) / self.block_size)
        self.free_blocks = self.num_blocks - self.scratch_blocks
        self.scratch_slot = self.free_blocks * self.block_size  # first slot of the scratch blocks
        self.max_context = min(int(paged.get("max_len", self.max_blocks * self.block_size)),
                               self.max_blocks * self.block_size)
        self.vocab_size = vocab_size
        self.session = session
        self.last_device_seconds: float | None = None
        self._tables: dict[Hashable, list[int]] = {}  # running sequences: blocks, tokens in the cache
        self._lengths: dict[Hashable, int] = {}
        self._free: list[int] = list(range(self.free_blocks - 1, -1, -1))

    # ---------------------------------------------------------------- paging
    def _grow(self, seq: Hashable, length: int) -> None:
        """Give sequence `seq` the blocks for `length` tokens."""
        need = math.ceil(length / self.block_size) - len(self._tables[seq])
        if need > len(self._free):
            raise GenerationError(
                f"the KV-cache pool is too small for this request: {self.free_blocks} blocks of {self.block_size} "
                f"tokens for sequences ({len(self._free)} free, {need} more needed for {length} tokens); compile "
                "with more --num-blocks or shorten the request")
        for _ in range(need):
            self._tables[seq].append(self._free.pop())

    def _slot(self, seq: Hashable, t: int) -> int:
        return self._tables[seq][t // self.block_size] * self.block_size + t % self.block_size

    def _table_row(self, seq: Hashable | None) -> np.ndarray:
        row = np.full(self.max_blocks, self.free_blocks, np.int32)  # unused entries: the first scratch block
        if seq is not None:
            row[: len(self._tables[seq])] = self._tables[seq]
        return row

    def _check_prompt(self, prompt: Sequence[int], what: str = "the prompt") -> np.ndarray:
        row = np.asarray(prompt, np.int64).reshape(-1)
        if row.size == 0:
            raise GenerationError(f"{what} is empty")
        if row.size > self.max_context:
            raise GenerationError(f"{what} has {row.size} tokens but the KV cache holds {self.max_context} per "
                                  "sequence (compile with a larger --max-context, or shorten the prompt)")
        bad = row[(row < 0) | (row >= self.vocab_size)]
        if bad.size:
            raise GenerationError(f"token id {int(bad[0])} is outside the vocabulary (0 .. {self.vocab_size - 1})")
        return row

    # ---------------------------------------------------------------- sequences (continuous batching)
    def add_sequence(self, seq: Hashable, prompt: Sequence[int]) -> np.ndarray:
        """Admit sequence `seq`: its blocks, its prompt through @prefill_chunk (C tokens a call);
        returns the logits [V] after its last prompt token. `last_device_seconds`: all chunks."""
        if seq in self._tables:
            raise GenerationError(f"sequence {seq!r} is already running")
        row = self._check_prompt(prompt)
        if math.ceil(row.size / self.block_size) > len(self._free):
            raise GenerationError(f"the KV-cache pool is too small for this request: the prompt needs "
                                  f"{math.ceil(row.size / self.block_size)} blocks of {self.block_size} tokens, "
                                  f"{len(self._free)} of the pool's {self.free_blocks} are free (compile with more "
                                  "--num-blocks, or a shorter prompt)")
        self._tables[seq], self._lengths[seq] = [], 0
        self._grow(seq, row.size)
        seconds: float | None = 0.0
        for start in range(0, row.size, self.chunk):
            logits = self._prefill_chunk(seq, row, start)
            step = self.session.last_seconds
            seconds = None if seconds is None or step is None else seconds + step
        self._lengths[seq] = row.size
        self.last_device_seconds = seconds
        return logits[(row.size - 1) % self.chunk]

    def _prefill_chunk(self, seq: Hashable, row: np.ndarray, start: int) -> np.ndarray:
        c = self.chunk
        real = min(c, row.size - start)
        ids = np.zeros((1, c), np.int32)
        ids[0, :real] = row[start:start + real]
        positions = np.minimum(np.arange(start, start + c), self.max_context - 1).astype(np.int32).reshape(1, c)
        slots = np.array([self._slot(seq, start + i) if i < real else self.scratch_slot + i for i in range(c)], np.int32)
        outs = self.session.run("prefill_chunk", {
            "input_ids": ids, "positions": positions, "slots": slots,
            "block_tables": self._table_row(seq).reshape(1, -1), "context_lens": np.array([start + c], np.int32)})
        return outs["logits"][0]

    def decode_step(self, tokens: Mapping[Hashable, int]) -> dict[Hashable, np.ndarray]:
        """One @decode call: each sequence in `tokens` (at most B, any lengths) appends its
        token; returns {sequence: logits [V]}."""
        if not 1 <= len(tokens) <= self.batch:
            raise GenerationError(f"a decode step takes 1 to {self.batch} sequences, got {len(tokens)}")
        b = self.batch
        ids = np.zeros((b, 1), np.int32)
        positions = np.zeros((b, 1), np.int32)
        slots = self.scratch_slot + np.arange(b, dtype=np.int32)  # idle rows write to scratch slots
        tables = np.stack([self._table_row(None)] * b)
        lens = np.ones(b, np.int32)
        for row, (seq, tok) in enumerate(tokens.items()):
            if seq not in self._tables:
                raise GenerationError(f"sequence {seq!r} is not running (add_sequence first)")
            t = self._lengths[seq]
            if t >= self.max_context:
                raise GenerationError(f"the context is full ({self.max_context} tokens)")
            if not 0 <= int(tok) < self.vocab_size:
                raise GenerationError(f"token id {int(tok)} is outside the vocabulary (0 .. {self.vocab_size - 1})")
            self._grow(seq, t + 1)
            ids[row, 0], positions[row, 0], slots[row], lens[row] = int(tok), t, self._slot(seq, t), t + 1
            tables[row] = self._table_row(seq)
        outs = self.session.run("decode", {"input_ids": ids, "positions": positions, "slots": slots,
                                           "block_tables": tables, "context_lens": lens})
        for seq in tokens:
            self._lengths[seq] += 1
        self.last_device_seconds = self.session.last_seconds
        return {seq: outs["logits"][row, 0] for row, seq in enumerate(tokens)}

    def release(self, seq: Hashable) -> None:
        """Free sequence `seq`'s blocks."""
        self._free.extend(reversed(self._tables.pop(seq)))
        del self._lengths[seq]

    @property
    def free_block_count(self) -> int:
        return len(self._free)

    # ---------------------------------------------------------------- blocks owned by the caller (a serving engine)
    def bind(self, seq: Hashable, blocks: Sequence[int], length: int) -> None:
        """Sequence `seq` holds `length` cached tokens on `blocks`, which the caller's block manager
        owns (ids below `free_blocks`; they must cover every token fed next). The executor's own
        free list is not used: forget the sequence with `unbind`, not `release`."""
        if any(not 0 <= b < self.free_blocks for b in blocks):
            raise GenerationError(f"block ids must be in 0 .. {self.free_blocks - 1} (the pool's blocks for sequences)")
        self._tables[seq], self._lengths[seq] = list(blocks), length

    def unbind(self, seq: Hashable) -> None:
        del self._tables[seq], self._lengths[seq]

    def extend(self, seq: Hashable, tokens: Sequence[int]) -> np.ndarray:
        """Feed `tokens` after the cached ones of a bound sequence through @prefill_chunk (C tokens
        a call, the last right-padded); returns the logits [V] of the last token."""
        start = self._lengths[seq]
        new = self._check_prompt(tokens, "the chunk")
        last = start + (new.size - 1) // self.chunk * self.chunk  # the last call's first position
        if last + self.chunk > self.max_blocks * self.block_size or start + new.size > self.max_context:
            raise GenerationError(f"tokens {start} .. {start + new.size - 1} do not fit the compiled context "
                                  f"({self.max_context} tokens, padded chunks of {self.chunk} within "
                                  f"{self.max_blocks * self.block_size})")
        if math.ceil((start + new.size) / self.block_size) > len(self._tables[seq]):
            raise GenerationError(f"sequence {seq!r}: its blocks do not cover {start + new.size} tokens")
        row = np.concatenate([np.zeros(start, np.int64), new])
        for at in range(start, row.size, self.chunk):
            logits = self._prefill_chunk(seq, row, at)
        self._lengths[seq] = row.size
        return logits[(row.size - 1 - last)]

    # ---------------------------------------------------------------- StepExecutor
    def prefill(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        """Start a batch of sequences 0 .. n-1 (releasing every running one)."""
        n = len(prompts)
        if not 1 <= n <= self.batch:
            raise GenerationError(f"the decode step was compiled for batches of {self.batch}; got {n} prompts")
        rows = [self._check_prompt(p, f"prompt {i}" if n > 1 else "the prompt") for i, p in enumerate(prompts)]
        need = sum(math.ceil(r.size / self.block_size) for r in rows)
        if need > self.free_blocks:
            raise GenerationError(f"the KV-cache pool is too small for this request: the prompts need {need} blocks of "
                                  f"{self.block_size} tokens, the pool has {self.free_blocks} for sequences (compile "
                                  "with more --num-blocks, or fewer / shorter prompts)")
        for seq in list(self._tables):
            self.release(seq)
        self._free = list(range(self.free_blocks - 1, -1, -1))
        seconds: float | None = 0.0
        last = []
        for seq, row in enumerate(rows):
            last.append(self.add_sequence(seq, row))
            step = self.last_device_seconds
            seconds = None if seconds is None or step is None else seconds + step
        self.last_device_seconds = seconds
        return np.stack(last)

    def decode(self, tokens: Sequence[int]) -> np.ndarray:
        n = len(self._lengths)
        if n == 0:
            raise GenerationError("decode before prefill: start the batch with prefill(prompts)")
        if len(tokens) != n:
            raise GenerationError(f"the batch has {n} sequences; got {len(tokens)} tokens")
        out = self.decode_step(dict(zip(self._lengths, tokens, strict=True)))
        return np.stack(list(out.values()))

    def lengths(self) -> list[int]:
        """Tokens each running sequence holds in its cache."""
        return list(self._lengths.values())


class _SimulatorSession(DeviceSession):
    @property
    def last_seconds(self) -> float | None:
        return self.last_report.seconds if self.last_report is not None else None


class DeviceExecutor(PagedExecutor):
    """A paged-KV artifact (an `Artifact`, or an Executable from `infer.compile`) on the
    simulator: its @prefill_chunk / @decode in one DeviceSession, the pools resident."""

    def __init__(self, compiled: Any, *, mode: str = "fast"):
        art: Artifact = getattr(compiled, "artifact", compiled)
        entries = {n: art.for_entry(n) for n in art.entry_names()}
        signature = {n: {s.name: s.shape for s in a.inputs} for n, a in entries.items()}
        vocab = entries["prefill_chunk"].outputs[0].shape[-1] if "prefill_chunk" in entries else 0
        if "paged_kv" not in art.meta:
            raise GenerationError("the artifact does not record its paged KV cache (meta 'paged_kv'): compile a model "
                                  "imported with kv_cache='paged'")
        pools = [n for n in signature.get("decode", {}) if n not in METADATA_INPUTS]
        super().__init__(None, signature, vocab, art.meta["paged_kv"])
        self.session = _SimulatorSession(art, resident=pools, mode=mode)


class _InterpreterSession:
    """The paged functions of a graph-level model on the reference interpreter, the pools
    kept on the host: the golden model of a DeviceSession."""

    last_seconds = None

    def __init__(self, model, pools: dict[str, tuple[tuple[int, ...], np.dtype]]):
        from infer.dialects.graph_interpreter import ConstantCache

        self.model = model
        self.pools = {n: np.zeros(shape, dtype) for n, (shape, dtype) in pools.items()}
        self._constants = ConstantCache()

    def run(self, entry: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from infer.dialects.graph_interpreter import run_module
        from infer.dialects.signature import output_names

        outs = run_module(self.model.module, {**inputs, **self.pools}, entry=entry, constant_cache=self._constants)
        names = output_names(self.model.module, len(outs), entry)
        result = dict(zip(names, outs, strict=True))
        for n in self.pools:
            self.pools[n] = result.pop(n)
        return result


class PagedReferenceExecutor(PagedExecutor):
    """The paged functions of a `Model` (import_model(..., kv_cache="paged")) on the reference
    interpreter, with the device executor's paging: what the device must reproduce."""

    def __init__(self, model):
        from infer.dialects.signature import function_signature

        funcs = [op.sym_name.data for op in model.module.body.block.ops]
        signature, pools = {}, {}
        for name in funcs:
            names, specs = function_signature(model.module, name)
            signature[name] = {n: tuple(shape) for n, (shape, _) in zip(names, specs, strict=True)}
            pools.update({n: (tuple(shape), dt) for n, (shape, dt) in zip(names, specs, strict=True)
                          if n not in METADATA_INPUTS})
        attr = model.module.attributes.get("infer.paged_kv")
        from infer.dialects.npu_attrs import attr_to_json

        paged = attr_to_json(attr) if attr is not None else {}
        vocab = 0
        if "prefill_chunk" in funcs:
            from infer.dialects.signature import entry_function

            vocab = entry_function(model.module, "prefill_chunk").function_type.outputs.data[0].get_shape()[-1]
        super().__init__(_InterpreterSession(model, pools), signature, vocab, paged)


__all__ = ["DeviceExecutor", "PagedExecutor", "PagedReferenceExecutor"]
