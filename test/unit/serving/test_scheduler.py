"""Scheduler behaviours: admission, chunking under the token budget, preemption by
recomputation with resume and no loss, FCFS order, max batch size, the static baseline."""

from __future__ import annotations

import pytest

from infer.serving import (BlockManager, Engine, Request, RequestError, RequestState, SchedulerConfig, StepResult,
                           make_scheduler)


def token_at(request_id: int, position: int) -> int:
    """The token 'sampled' for position `position` of a request: a pure function, so a request
    that is preempted and recomputed must produce the same tokens as one that is not."""
    return (request_id * 131 + position * 7) % 1009


class PositionExecutor:
    """Tokens from `token_at`, 1000 cycles per step; records each step's items and checks the
    block tables against the block manager's view (slots exist for every fed position)."""

    cost_source = "test"

    def __init__(self, bm: BlockManager):
        self.bm = bm
        self.block_size, self.num_blocks = bm.block_size, bm.num_blocks
        self.steps = []
        self.idle_rows = []

    def execute(self, step):
        self.steps.append([(i.request_id, i.start, i.num_tokens, i.is_prefill) for i in step.items])
        self.idle_rows.append(step.idle_rows)
        owners = {}
        for i in step.items:
            assert len(i.block_table) * self.block_size >= i.start + i.num_tokens
            assert len(i.token_ids) == i.num_tokens
            for b in i.block_table:
                assert owners.setdefault(b, i.request_id) == i.request_id, "a block in two tables"
        return StepResult({i.request_id: token_at(i.request_id, i.start + i.num_tokens) for i in step.items
                           if i.samples}, 1000)


def run(policy, specs, *, blocks=64, block=4, batch=8, budget=16, watermark=0.0, ctx=None):
    bm = BlockManager(blocks, block, watermark)
    sched = make_scheduler(SchedulerConfig(policy, batch, budget, ctx), bm)
    exe = PositionExecutor(bm)
    reqs = [Request(i, p, o, arrival_s=a) for i, (a, p, o) in enumerate(specs)]
    result = Engine(sched, exe, clock_ghz=1e-6).run(reqs)          # 1000 cycles = 1 ms
    bm.check_invariants()
    assert bm.num_free_blocks == blocks
    sched.executor = exe
    return result, exe.steps, sched


def expected_output(r: Request) -> list[int]:
    return [token_at(r.request_id, r.num_prompt_tokens + k) for k in range(r.max_output_tokens)]


def test_chunked_prefill_under_budget_and_decodes_first():
    result, steps, _ = run("continuous", [(0, 40, 5), (0, 3, 8), (0.0015, 30, 4)], budget=16)
    assert not result.unfinished
    for s in steps:
        assert sum(n for _, _, n, _ in s) <= 16
        kinds = [pre for *_, pre in s]
        assert kinds == sorted(kinds)                # decodes (False) before prefill chunks (True)
    # request 0's 40-token prompt is computed in chunks, starting where the last one ended
    chunks = [(start, n) for s in steps for rid, start, n, pre in s if rid == 0 and pre]
    assert len(chunks) >= 3 and chunks[0][0] == 0
    assert all(a + n == b for (a, n), (b, _) in zip(chunks, chunks[1:], strict=False))
    assert sum(n for _, n in chunks) == 40
    # steps mix prefill chunks and decodes
    assert any(any(p for *_, p in s) and not all(p for *_, p in s) for s in steps)
    for r in result.finished:
        assert r.output_ids == expected_output(r)


def test_admission_waits_for_blocks_and_keeps_fcfs():
    # 12 blocks of 4: request 0 (36 tokens) takes 9; request 1 (20 tokens, 5 blocks) cannot
    # be admitted until 0 finishes, and request 2 (4 tokens) must not overtake it.
    result, steps, _ = run("continuous", [(0, 36, 2), (0.0001, 20, 2), (0.0002, 4, 2)], blocks=12, budget=64)
    first_step = {}
    for k, s in enumerate(steps):
        for rid, *_ in s:
            first_step.setdefault(rid, k)
    done = {r.request_id: r for r in result.finished}
    assert first_step[1] > [k for k, s in enumerate(steps) if any(rid == 0 for rid, *_ in s)][-1]
    assert first_step[2] >= first_step[1]
    assert done[0].first_token_s <= done[1].first_token_s <= done[2].first_token_s


def test_max_batch_size():
    result, steps, _ = run("continuous", [(0, 5, 10)] * 12, batch=4, budget=32)
    assert not result.unfinished
    assert max(len(s) for s in steps) == 4


def test_preemption_resumes_without_loss():
    # 10 blocks of 4 tokens for 4 requests that grow to 5 blocks each: decodes run out of blocks
    specs = [(0.0, 6, 14), (0.0, 7, 13), (0.0, 5, 14), (0.0, 8, 12)]
    result, steps, sched = run("continuous", specs, blocks=10, budget=32)
    assert sched.num_preemptions > 0
    assert not result.unfinished and len(result.finished) == 4
    preempted = [r for r in result.finished if r.num_preemptions]
    assert preempted
    for r in result.finished:
        assert r.state is RequestState.FINISHED
        assert r.output_ids == expected_output(r)      # generated tokens kept, none resampled or lost
    # a resumed request re-prefills its prompt and the tokens it had generated, from position 0
    for r in preempted:
        recompute = [(start, n) for s in steps for rid, start, n, pre in s if rid == r.request_id and pre]
        assert sum(n for _, n in recompute) > r.num_prompt_tokens
    # the lowest-priority (latest) request is the victim: request 0 is never preempted
    assert next(r for r in result.finished if r.request_id == 0).num_preemptions == 0


def test_static_batching_baseline():
    specs = [(0, 4, 3), (0, 6, 8), (0, 5, 2), (0.0001, 3, 3)]
    result, steps, sched = run("static", specs, batch=3, budget=16)
    assert not result.unfinished
    # batch 1 = requests 0..2: one prefill step with whole prompts, then decodes until the longest is done
    assert steps[0] == [(0, 0, 4, True), (1, 0, 6, True), (2, 0, 5, True)]
    batch1 = steps[1:8]
    assert all(all(rid in (0, 1, 2) and not pre for rid, _, _, pre in s) for s in batch1)
    assert len(batch1) == 7                              # request 1: 8 outputs = prefill + 7 decodes
    assert [len(s) for s in batch1] == [3, 2, 1, 1, 1, 1, 1]
    assert sched.executor.idle_rows[1:8] == [0, 1, 2, 2, 2, 2, 2]   # finished rows still computed
    # request 3 waits for the whole batch, although a slot freed early
    assert steps[8] == [(3, 0, 3, True)]
    for r in result.finished:
        assert r.output_ids == expected_output(r)


def test_static_reserves_prompt_plus_output():
    bm = BlockManager(8, 4, 0.0)
    sched = make_scheduler(SchedulerConfig("static", 4, 16), bm)
    sched.add(Request(0, 4, 9))      # 4 + 9 - 1 = 12 tokens: 3 blocks
    sched.add(Request(1, 4, 13))     # 16 tokens: 4 blocks
    sched.add(Request(2, 1, 6))      # 6 tokens: 2 blocks: does not fit with the others
    step = sched.schedule()
    assert [i.request_id for i in step.items] == [0, 1]
    assert bm.num_used_blocks == 7 and bm.waste_slots == 7 * 4 - 8


def test_requests_that_can_never_run_are_rejected():
    bm = BlockManager(8, 4, 0.25)                     # admits at most 6 blocks = 24 tokens
    sched = make_scheduler(SchedulerConfig("continuous", 4, 16, max_context=30), bm)
    with pytest.raises(RequestError, match="exceeds the model's context of 30"):
        sched.add(Request(0, 20, 11))
    with pytest.raises(RequestError, match="needs 7 KV blocks"):
        sched.add(Request(1, 20, 6))
    sched.add(Request(2, 20, 5))                      # 24 tokens in the cache at most: fits


def test_config_validation():
    with pytest.raises(ValueError, match="unknown policy 'fifo'"):
        SchedulerConfig("fifo")
    with pytest.raises(ValueError, match="token_budget"):
        SchedulerConfig("continuous", max_batch_size=64, token_budget=32)
