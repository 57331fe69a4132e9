"""The engine: drives a scheduler step by step over a pluggable step executor.

    engine = Engine(scheduler, executor, clock_ghz=hw.clock_ghz)
    result = engine.run(requests)       # simulated time advances by each step's cycles
    result.finished, result.steps       # requests with their timestamps; per-step records

The executor interface (`StepExecutor`) is what a backend implements:

    executor.execute(step) -> StepResult(next_tokens={request_id: token}, cycles=...)

`step.items` lists, per request, the token ids to feed, their start position, whether the
item is a prefill chunk or a decode, whether it samples the next token, and the request's
block table into the paged KV pool (`block_size` token slots per block, `num_blocks`
blocks, the geometry the executor was built with). Token i of a request lives in block
`block_table[i // block_size]`, slot `i % block_size`. The executor must write the keys and
values of every fed token at its slot and attend, for a token at position p, to the
request's slots 0..p. It returns the next token of every item with `samples` set, and the
cycles the step took. Blocks freed by a finished or preempted request are simply reused
later (a preempted request is recomputed from its tokens), so the executor keeps no
per-request state beyond the pool.

Executors here: `CostModelExecutor` (simulation: placeholder tokens, cycles from a step-cost
model), `infer.serving.reference_executor.ReferenceExecutor` (real tokens from the graph
reference interpreter), `infer.serving.device_executor.DeviceStepExecutor` (the compiled
@prefill_chunk/@decode programs on the simulator, KV pool in device DRAM, simulated cycles).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from infer.serving.request import Request, RequestState
from infer.serving.scheduler import Scheduler, Step


class StepResult(NamedTuple):
    next_tokens: dict[int, int]     # request_id -> sampled token, for every item with `samples`
    cycles: float                   # the step's duration in accelerator cycles


class StepExecutor(Protocol):
    block_size: int
    num_blocks: int
    cost_source: str                # where `cycles` come from, shown in reports

    def execute(self, step: Step) -> StepResult: ...


class StepCostModel(Protocol):
    source: str

    def step_cycles(self, step: Step) -> float: ...


class CostModelExecutor:
    """Simulation: no numerics; every sampled token is `placeholder_token`; cycles from `cost`."""

    def __init__(self, cost: StepCostModel, block_size: int, num_blocks: int, placeholder_token: int = 0):
        self.cost = cost
        self.block_size, self.num_blocks = block_size, num_blocks
        self.cost_source = cost.source
        self.placeholder_token = placeholder_token

    def execute(self, step: Step) -> StepResult:
        tok = self.placeholder_token
        return StepResult({i.request.request_id: tok for i in step.items if i.samples}, self.cost.step_cycles(step))


class StepRecord(NamedTuple):
    start_s: float
    duration_s: float
    batch_size: int            # requests in the step
    prefill_tokens: int
    decodes: int
    kv_utilization: float      # used blocks / pool, while the step ran
    kv_waste: float            # allocated slots holding no token / allocated slots
    preempted: int
    idle_rows: int             # finished rows a static batch still computes


@dataclass
class EngineResult:
    finished: list[Request]
    unfinished: list[Request]
    steps: list[StepRecord]
    preemptions: int
    end_s: float
    host_seconds: float = 0.0           # wall time spent in the scheduler (schedule + complete)
    cost_source: str = ""
    stalled: bool = False
    notes: list[str] = field(default_factory=list)


class EngineStall(RuntimeError):
    pass


class Engine:
    def __init__(self, scheduler: Scheduler, executor: StepExecutor, clock_ghz: float = 1.0):
        bm = scheduler.bm
        if (executor.block_size, executor.num_blocks) != (bm.block_size, bm.num_blocks):
            raise ValueError(f"executor KV geometry {executor.block_size}x{executor.num_blocks} differs from "
                             f"the block manager's {bm.block_size}x{bm.num_blocks}")
        self.scheduler = scheduler
        self.executor = executor
        self.seconds_per_cycle = 1.0 / (clock_ghz * 1e9)

    def run(self, requests: Iterable[Request], max_steps: int | None = None) -> EngineResult:
        """Serve `requests` (each arrives at its arrival_s) until all finish; simulated time."""
        sched, bm = self.scheduler, self.scheduler.bm
        pending = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
        for r in pending:
            sched.check_request(r)
        total = len(pending)
        pending.reverse()                    # pop() takes the earliest arrival
        finished: list[Request] = []
        records: list[StepRecord] = []
        now = 0.0
        host = 0.0
        stalled = False
        while pending or sched.has_unfinished():
            while pending and pending[-1].arrival_s <= now:
                sched.add(pending.pop())
            if not sched.has_unfinished():
                now = pending[-1].arrival_s
                continue
            t0 = time.perf_counter()
            step = sched.schedule()
            host += time.perf_counter() - t0
            if not step:
                if pending:                  # nothing admissible until more time passes: cannot happen
                    now = pending[-1].arrival_s   # with validated requests, but never spin
                    continue
                stalled = True
                break
            util, waste = bm.utilization, bm.waste_fraction
            result = self.executor.execute(step)
            duration = result.cycles * self.seconds_per_cycle
            records.append(StepRecord(now, duration, len(step.items),
                                      sum(i.num_tokens for i in step.items if i.is_prefill),
                                      sum(1 for i in step.items if not i.is_prefill), util, waste,
                                      len(step.preempted), step.idle_rows))
            now += duration
            t0 = time.perf_counter()
            finished += sched.complete(step, result.next_tokens, now)
            host += time.perf_counter() - t0
            if max_steps is not None and len(records) >= max_steps:
                break
        unfinished = [r for r in (*sched.waiting, *sched.running, *pending) if r.state is not RequestState.FINISHED]
        assert len(finished) + len(unfinished) == total
        return EngineResult(finished, unfinished, records, sched.num_preemptions, now, host,
                            self.executor.cost_source, stalled)
