"""A step executor with real numerics: the graph-level reference interpreter on a paged KV pool.

    exe = ReferenceExecutor("path/to/llama-folder", block_size=16, num_blocks=256, max_batch=8)
    Engine(scheduler, exe).run(requests)          # each request's tokens are the model's greedy tokens

It imports the model's `@decode` function (`infer.import_model(folder, phase="decode",
batch=max_batch, max_len=...)`: input ids [B, 1], positions [B] and a dense KV cache per
layer [B, Hkv, P, D]) and keeps the KV cache in a host-side paged pool, one array per
layer and K/V of [num_blocks, block_size, Hkv, D], addressed through each item's block
table exactly as the device pool will be. For every call it gathers each row's cached
positions from its blocks into the dense cache, runs the interpreter, and scatters the
key/value written at the row's position back into its block slot.

Prefill chunks run token by token through `@decode` (the graph-level `@prefill` has no
past-KV input and a fixed length, so it cannot run a chunk that starts after position 0):
sub-step j of a step feeds token j of every item that has one, batched over the items
(padded to `max_batch` rows, so every call has the same shapes and a row's numbers never
depend on the other rows). The sampled token is the argmax of the last fed token's
logits (greedy). Cycles come from the optional `cost` model (0 without one): this
executor is for checking numbers (batching invariance), not time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from infer.serving.cost import LlamaDims
from infer.serving.engine import StepResult
from infer.serving.scheduler import Step, StepItem


class ReferenceExecutor:
    def __init__(self, model_folder: str | Path, block_size: int, num_blocks: int, max_batch: int = 8,
                 max_len: int | None = None, cost=None):
        import infer

        dims = LlamaDims.from_path(model_folder)
        self.dims = dims
        self.block_size, self.num_blocks = block_size, num_blocks
        self.max_batch = max_batch
        self.max_len = min(max_len or dims.max_context, dims.max_context)
        self.model = infer.import_model(str(model_folder), phase="decode", batch=max_batch, seq_len=1,
                                        max_len=self.max_len)
        self.cost = cost
        self.cost_source = cost.source if cost is not None else "none (reference interpreter: numerics only)"
        shape = (num_blocks, block_size, dims.kv_heads, dims.head_dim)
        self.pool = [np.zeros(shape, np.float32) for _ in range(2 * dims.layers)]   # k_0, v_0, k_1, ...
        self.calls = 0

    def execute(self, step: Step) -> StepResult:
        next_tokens: dict[int, int] = {}
        longest = max((i.num_tokens for i in step.items), default=0)
        for j in range(longest):
            rows = [i for i in step.items if i.num_tokens > j]
            for at in range(0, len(rows), self.max_batch):
                self._run_rows(rows[at:at + self.max_batch], j, next_tokens)
        cycles = self.cost.step_cycles(step) if self.cost is not None else 0.0
        return StepResult(next_tokens, cycles)

    def _run_rows(self, rows: list[StepItem], j: int, next_tokens: dict[int, int]) -> None:
        d, bs, b = self.dims, self.block_size, self.max_batch
        ids = np.zeros((b, 1), np.int64)
        pos = np.zeros((b,), np.int64)
        caches = [np.zeros((b, d.kv_heads, self.max_len, d.head_dim), np.float32) for _ in self.pool]
        for r, item in enumerate(rows):
            p = item.start + j
            if p >= self.max_len:
                raise ValueError(f"request {item.request_id}: position {p} exceeds the executor's max_len {self.max_len}")
            ids[r, 0] = item.token_ids[j]
            pos[r] = p
            if p:
                blocks = item.block_table[:-(-p // bs)]
                for cache, pool in zip(caches, self.pool, strict=True):
                    cache[r, :, :p, :] = pool[blocks].reshape(-1, d.kv_heads, d.head_dim)[:p].transpose(1, 0, 2)
        outs = self.model.run([ids, pos, *caches])
        self.calls += 1
        logits = outs[0]
        for r, item in enumerate(rows):
            p = item.start + j
            block, slot = item.block_table[p // bs], p % bs
            for new, pool in zip(outs[1:], self.pool, strict=True):
                pool[block, slot] = new[r, :, p, :]
            if item.samples and j == item.num_tokens - 1:
                next_tokens[item.request_id] = int(np.argmax(logits[r, 0]))
