"""Iteration-level schedulers over a paged KV block manager.

    sched = make_scheduler(SchedulerConfig(policy="continuous", max_batch_size=64, token_budget=512), bm)
    sched.add(request)              # validated: it must fit the model's context and the KV pool
    step = sched.schedule()         # what to run this iteration (a `Step`)
    ...                             # an executor runs it -> next token per sampling request
    finished = sched.complete(step, next_tokens, now_s)

Both policies decide one model iteration at a time; a `Step` lists, for each request in
it, the token ids to feed, their start position and the request's block table.

Continuous batching with chunked prefill (`policy="continuous"`; Orca's iteration-level
batching, vLLM's paged KV memory, Sarathi-Serve's chunked prefill):
1. Running requests in decode get one token each, first, in FCFS (arrival) order. A
   decode whose sequence needs a new block when none is free preempts the lowest-priority
   running request (the latest arrival) by recomputation: its blocks are freed, it goes
   back to the *front* of the waiting queue with every token it generated kept, and it
   later re-prefills prompt + generated tokens and continues. If the request needing the
   block is itself the lowest-priority one, it is the one preempted. Requests are never
   dropped.
2. Running requests whose prompt (re)computation is under way get the next chunk, up to
   the per-step token budget left.
3. Waiting requests are admitted in FCFS order (no overtaking: the head blocks the queue)
   while the running set is below `max_batch_size`, budget is left, and the block manager
   can hold every known token of the head request with the watermark kept free (blocks
   for the whole prompt are allocated at admission; decode blocks are added as tokens
   come). Its first chunk runs in this step. No request is admitted in a step that
   preempted one (it would take the blocks just freed and cause the next preemption).

Static batching (`policy="static"`, the baseline): when no batch is running, up to
`max_batch_size` waiting requests form a batch, each reserving blocks for its prompt and
its maximum output (as a contiguous allocator must); the batch prefills its prompts whole
in one step, then decodes together until its last request finishes; requests finished
early keep their blocks and their batch row until the batch ends, and a fixed-size batch
still computes those rows (FasterTransformer-style; `static_computes_finished_rows=False`
charges live rows only, a baseline more generous than any fixed-batch program). Nothing
joins a running batch.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

from infer.serving.block_manager import BlockManager
from infer.serving.request import Request, RequestState

POLICIES = ("continuous", "static")


class RequestError(ValueError):
    """A request that can never be served (longer than the context, bigger than the KV pool)."""


@dataclass(frozen=True)
class SchedulerConfig:
    policy: str = "continuous"
    max_batch_size: int = 64          # requests in the running set
    token_budget: int = 512           # tokens (prefill chunk tokens + decodes) per step; continuous only
    max_context: int | None = None    # the model's context length (prompt + output must fit)
    static_computes_finished_rows: bool = True   # static: finished rows still run until the batch ends

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r} (supported: {', '.join(POLICIES)})")
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.token_budget < self.max_batch_size and self.policy == "continuous":
            raise ValueError(f"token_budget ({self.token_budget}) must be >= max_batch_size "
                             f"({self.max_batch_size}) so that every running decode fits a step")


class StepItem:
    """One request's share of a step: `num_tokens` tokens from position `start`.

    token_ids: the ids to feed (len == num_tokens); positions start .. start + num_tokens - 1.
    is_prefill: a prompt (re)computation chunk; False for a decode (one generated token).
    samples: the chunk reaches the last known token, so the step samples the next one.
    block_table: the request's physical KV blocks (the block manager's live list: read only);
    slots for every position < start + num_tokens exist when the step runs.
    """

    __slots__ = ("request", "token_ids", "start", "num_tokens", "is_prefill", "samples", "block_table")

    def __init__(self, request: Request, start: int, num_tokens: int, is_prefill: bool, block_table: list[int]):
        self.request = request
        self.start = start
        self.num_tokens = num_tokens
        tokens = request.token_ids
        self.token_ids = tokens[start:start + num_tokens]
        self.is_prefill = is_prefill
        self.samples = start + num_tokens == len(tokens)
        self.block_table = block_table

    @property
    def request_id(self) -> int:
        return self.request.request_id

    @property
    def context_len(self) -> int:
        """Tokens in the KV cache after this item: what its attention reads."""
        return self.start + self.num_tokens

    def __repr__(self) -> str:
        kind = "prefill" if self.is_prefill else "decode"
        return f"StepItem(req {self.request_id}, {kind} [{self.start}:{self.start + self.num_tokens}])"


@dataclass
class Step:
    """One model iteration: the items to run and the requests preempted while forming it.

    idle_rows / idle_context: rows a fixed-size batch still computes for requests that have
    finished (static batching), and the sum of their KV lengths: charged as decode rows by
    the cost model, fed padding by a device executor, no token sampled.
    """

    items: list[StepItem]
    preempted: list[int]
    idle_rows: int = 0
    idle_context: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(i.num_tokens for i in self.items)

    @property
    def decodes(self) -> list[StepItem]:
        return [i for i in self.items if not i.is_prefill]

    @property
    def prefills(self) -> list[StepItem]:
        return [i for i in self.items if i.is_prefill]

    def __bool__(self) -> bool:
        return bool(self.items)


def _priority(r: Request) -> tuple[float, int]:
    return (r.arrival_s, r.request_id)


class Scheduler:
    """What both policies share: the queues, validation, and committing a step's results."""

    def __init__(self, config: SchedulerConfig, block_manager: BlockManager):
        self.config = config
        self.bm = block_manager
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []       # sorted by priority (arrival, id)
        self.num_preemptions = 0

    # -- requests -------------------------------------------------------------------

    def check_request(self, r: Request) -> None:
        total = r.num_prompt_tokens + r.max_output_tokens
        ctx = self.config.max_context
        if ctx is not None and total > ctx:
            raise RequestError(f"request {r.request_id}: prompt {r.num_prompt_tokens} + output "
                               f"{r.max_output_tokens} = {total} tokens exceeds the model's context of {ctx}")
        need = self.bm.blocks_for(r.max_total_tokens)
        if need > self.bm.admissible_blocks:
            raise RequestError(f"request {r.request_id}: needs {need} KV blocks of {self.bm.block_size} tokens, "
                               f"the pool admits at most {self.bm.admissible_blocks} "
                               f"({self.bm.num_blocks} blocks less the watermark)")

    def add(self, r: Request) -> None:
        self.check_request(r)
        r.state = RequestState.WAITING
        self.waiting.append(r)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> Step:
        raise NotImplementedError

    # -- results --------------------------------------------------------------------

    def complete(self, step: Step, next_tokens: dict[int, int], now_s: float) -> list[Request]:
        """Commit a step: advance each request, append sampled tokens; returns finished requests."""
        finished = []
        for item in step.items:
            r = item.request
            r.num_computed += item.num_tokens
            if item.samples:
                tokens = r.token_ids
                tokens.append(next_tokens[r.request_id])
                if r.first_token_s is None:
                    r.first_token_s = now_s
                if (len(tokens) - r.num_prompt_tokens >= r.max_output_tokens
                        or (r.eos_token_id is not None and tokens[-1] == r.eos_token_id)):
                    r.state = RequestState.FINISHED
                    r.finish_s = now_s
                    finished.append(r)
        if finished:
            self._retire(finished)
        return finished

    def _retire(self, finished: list[Request]) -> None:
        for r in finished:
            self.bm.free(r.request_id)
        self.running = [r for r in self.running if r.state is not RequestState.FINISHED]

    def _admit(self, r: Request, reserve_tokens: int = 0) -> None:
        self.bm.allocate(r.request_id, r.num_tokens, reserve_tokens)
        r.state = RequestState.RUNNING
        bisect.insort(self.running, r, key=_priority)


class ContinuousScheduler(Scheduler):
    def schedule(self) -> Step:
        bm, running = self.bm, self.running
        budget = self.config.token_budget
        items: list[StepItem] = []
        preempted: list[int] = []
        # 1. decodes, FCFS; preempt from the back when a decode needs a block and none is free
        try_append = bm.try_append_slot
        i = 0
        while i < len(running):
            r = running[i]
            computed = r.num_computed
            if computed and len(r.token_ids) - computed == 1:
                rid = r.request_id
                while (table := try_append(rid)) is None:
                    victim = running.pop()
                    self._preempt(victim)
                    preempted.append(victim.request_id)
                    if victim is r:
                        break
                else:
                    items.append(StepItem(r, computed, 1, False, table))
                    budget -= 1
            i += 1
        # 2. prompt (re)computations under way, FCFS, chunked to the budget left
        for r in running:
            if budget <= 0:
                break
            left = len(r.token_ids) - r.num_computed
            if r.num_computed == 0 or left > 1:
                n = min(left, budget)
                items.append(StepItem(r, r.num_computed, n, True, bm.block_table(r.request_id)))
                budget -= n
        # 3. admit waiting requests, FCFS, while the pool holds their known tokens
        if not preempted:
            waiting = self.waiting
            while waiting and budget > 0 and len(running) < self.config.max_batch_size:
                r = waiting[0]
                if not bm.can_allocate(len(r.token_ids)):
                    break
                waiting.popleft()
                self._admit(r)
                n = min(len(r.token_ids), budget)
                items.append(StepItem(r, 0, n, True, bm.block_table(r.request_id)))
                budget -= n
            running = self.running
        return Step(items, preempted)

    def _preempt(self, r: Request) -> None:
        """Preemption by recomputation: free the blocks, keep the tokens, requeue at the front."""
        self.bm.free(r.request_id)
        r.num_computed = 0
        r.state = RequestState.WAITING
        r.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(r)


class StaticScheduler(Scheduler):
    def schedule(self) -> Step:
        bm = self.bm
        if not self.running:
            waiting = self.waiting
            while waiting and len(self.running) < self.config.max_batch_size:
                r = waiting[0]
                if not bm.can_allocate(len(r.token_ids), r.max_total_tokens - len(r.token_ids)):
                    break
                waiting.popleft()
                self._admit(r, reserve_tokens=r.max_total_tokens - len(r.token_ids))
            items = [StepItem(r, 0, len(r.token_ids), True, bm.block_table(r.request_id)) for r in self.running]
            return Step(items, [])
        items = []
        idle_rows = idle_context = 0
        for r in self.running:
            if r.state is RequestState.RUNNING:
                bm.append_slots(r.request_id)      # within the reservation: never a new block
                items.append(StepItem(r, r.num_computed, 1, False, bm.block_table(r.request_id)))
            elif self.config.static_computes_finished_rows:
                idle_rows += 1
                idle_context += r.num_computed
        return Step(items, [], idle_rows, idle_context)

    def _retire(self, finished: list[Request]) -> None:
        # The batch holds its blocks and slots until its last request finishes.
        if all(r.state is RequestState.FINISHED for r in self.running):
            for r in self.running:
                self.bm.free(r.request_id)
            self.running = []


def make_scheduler(config: SchedulerConfig, block_manager: BlockManager) -> Scheduler:
    cls = {"continuous": ContinuousScheduler, "static": StaticScheduler}[config.policy]
    return cls(config, block_manager)
