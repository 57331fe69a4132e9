"""The engine's steps on the simulated NPU: the compiled @prefill_chunk / @decode programs.

    paged = infer.DeviceExecutor(infer.compile(infer.import_model(folder, kv_cache="paged", chunk=8,
                                                                   batch=4, block_size=4, max_len=64)))
    exe = DeviceStepExecutor(paged)
    bm = BlockManager(exe.num_blocks, exe.block_size)          # the engine's block manager owns the blocks
    Engine(make_scheduler(SchedulerConfig(..., max_context=exe.max_context), bm), exe, clock).run(requests)

`DeviceStepExecutor` adapts the engine's `Step`s to a paged executor's sequence interface
(`infer.generation.PagedExecutor`: `bind`, `extend`, `decode_step`, `unbind`; duck-typed, so
this module imports nothing of the compiler). Who owns the KV blocks: the engine's
`BlockManager`. The executor's pool has `free_blocks` blocks for sequences (its last blocks
are scratch for padding rows); the block manager is built with exactly that many, and its
block ids ARE the device block ids. Each step binds every item's sequence to its block
table and cached length, runs the programs, and unbinds it again: the executor keeps no
per-request state beyond the pool, so preemption by recomputation (blocks freed, the
request re-prefilled later on whatever blocks it gets) and releases need nothing here.

A step runs as:
- every prefill item (a prompt chunk of any length n from any start s): `extend`, i.e.
  ceil(n / C) @prefill_chunk calls at starts s, s + C, ... (the last right-padded);
- the decode items, B (the compiled batch) at a time: one @decode call per group, in item
  order; a group smaller than B runs idle rows (static batching's finished rows are
  idle rows of the same call, no extra cost).
The sampled token is the argmax of the last fed token's logits (greedy). `cycles` is the
sum of the simulator's cycles over the step's calls.

`max_context`: a chunk may start at any position and its padded rows must stay within the
block table (MB blocks), so a request fits if prompt + output <= MB * BS - C + 1 (and the
compiled max_len).
"""

from __future__ import annotations

import math

import numpy as np

from infer.serving.engine import StepResult
from infer.serving.scheduler import Step


class CallCycles:
    """A session wrapper that sums the simulator's cycles of every call (`cycles`, `calls`)."""

    def __init__(self, session):
        self.session = session
        self.cycles = 0
        self.calls = 0

    def run(self, entry, inputs):
        out = self.session.run(entry, inputs)
        report = getattr(self.session, "last_report", None)
        self.cycles += report.cycles if report is not None else 0
        self.calls += 1
        return out

    @property
    def last_seconds(self):
        return self.session.last_seconds


class DeviceStepExecutor:
    """`StepExecutor` over a paged executor (see the module doc)."""

    def __init__(self, paged):
        self.paged = paged
        self.block_size = paged.block_size
        self.num_blocks = paged.free_blocks
        self.batch = paged.batch
        self.chunk = paged.chunk
        self.max_context = min(paged.max_context, paged.max_blocks * paged.block_size - paged.chunk + 1)
        self.counter = paged.session if isinstance(paged.session, CallCycles) else CallCycles(paged.session)
        paged.session = self.counter
        self.cost_source = "simulated cycles of the compiled @prefill_chunk/@decode programs (device executor)"

    def execute(self, step: Step) -> StepResult:
        pe, bs = self.paged, self.block_size
        before = self.counter.cycles
        next_tokens: dict[int, int] = {}
        bound = []
        try:
            for item in step.items:
                blocks = item.block_table[:math.ceil((item.start + item.num_tokens) / bs)]
                pe.bind(item.request_id, blocks, item.start)
                bound.append(item.request_id)
            for item in step.items:
                if item.is_prefill:
                    logits = pe.extend(item.request_id, item.token_ids)
                    if item.samples:
                        next_tokens[item.request_id] = int(np.argmax(logits))
            decodes = [i for i in step.items if not i.is_prefill]
            for at in range(0, len(decodes), self.batch):
                group = decodes[at:at + self.batch]
                out = pe.decode_step({i.request_id: int(i.token_ids[0]) for i in group})
                for i in group:
                    if i.samples:
                        next_tokens[i.request_id] = int(np.argmax(out[i.request_id]))
        finally:
            for rid in bound:
                pe.unbind(rid)
        return StepResult(next_tokens, float(self.counter.cycles - before))


class CompiledProgramProfiler:
    """`Profiler` for `StepCostTable`: the simulated cycles of ONE call of a compiled program.

    "decode" (a = live rows, b = context): one @decode call with `a` rows each attending to
    `b` tokens (the others idle); "prefill" (a = the compiled chunk C, b = start): one
    @prefill_chunk call of C tokens at positions b .. b + C - 1. Run on a paged executor,
    in the fast mode (the timing-only mode refuses the paged programs: an `ld` of a run-time
    trip count reads DRAM the program itself stores to)."""

    def __init__(self, paged, name: str):
        self.paged = paged
        self.counter = paged.session if isinstance(paged.session, CallCycles) else CallCycles(paged.session)
        paged.session = self.counter
        self.source = f"simulated cycles of the compiled programs of {name} (profiled per bucket, interpolated)"

    def _blocks(self, row: int, tokens: int) -> list[int]:
        pe = self.paged
        need = math.ceil(tokens / pe.block_size)
        return [(row * pe.max_blocks + i) % pe.free_blocks for i in range(need)]

    def __call__(self, entry: str, a: int, b: int) -> float:
        pe = self.paged
        before = self.counter.cycles
        if entry == "decode":
            rows, context = int(a), max(1, int(round(b)))
            seqs = [("profile", r) for r in range(rows)]
            for r, s in enumerate(seqs):
                pe.bind(s, self._blocks(r, context), context - 1)
            try:
                pe.decode_step(dict.fromkeys(seqs, 0))
            finally:
                for s in seqs:
                    pe.unbind(s)
        elif entry == "prefill":
            if int(a) != pe.chunk:
                raise ValueError(f"the compiled prefill chunk is {pe.chunk} tokens, not {a}")
            start = int(round(b))
            pe.bind("profile", self._blocks(0, start + pe.chunk), start)
            try:
                pe.extend("profile", [0] * pe.chunk)
            finally:
                pe.unbind("profile")
        else:
            raise ValueError(f"unknown entry {entry!r} (supported: decode, prefill)")
        return float(self.counter.cycles - before)
