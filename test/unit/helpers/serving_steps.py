"""Serving test helpers: random engine steps for checking a step-cost table against the exact
simulation, a recorded continuous-batching run, transformers' greedy reference."""

from __future__ import annotations

from infer.serving import BlockManager, Engine, Request, SchedulerConfig, make_scheduler
from infer.serving.scheduler import Step, StepItem


def random_step(rng, executor) -> Step:
    """1-6 items: decodes (context 1 .. max) and prefill chunks (any start, 1-20 tokens)."""
    items, next_block = [], 0
    for rid in range(int(rng.integers(1, 7))):
        if rng.random() < 0.6:
            start, n = int(rng.integers(0, executor.max_context - 1)), 1
        else:
            n = int(rng.integers(1, 21))
            start = int(rng.integers(0, executor.max_context - n + 1))
        blocks = [(next_block + i) % executor.num_blocks for i in range(-(-(start + n) // executor.block_size))]
        next_block += len(blocks)
        request = Request(rid, [1] * (start + n), 1)
        items.append(StepItem(request, start, n, n > 1 or rng.random() < 0.2, blocks))
    return Step(items, [])


def serve_recording_steps(executor, prompts, out_tokens: int, max_batch: int, budget: int, max_context: int,
                          **engine_options):
    """Serve `prompts` (token lists, all arriving at 0) with continuous batching on `executor`,
    recording each step's items: (finished request id -> output ids, preemptions, steps,
    the engine's result). Every request must finish."""
    manager = BlockManager(executor.num_blocks, executor.block_size, watermark=0.0)
    sched = make_scheduler(SchedulerConfig("continuous", max_batch, budget, max_context=max_context), manager)
    steps = []
    schedule = sched.schedule

    def recording_schedule():
        step = schedule()
        steps.append([(i.request_id, i.start, i.num_tokens, i.is_prefill) for i in step.items])
        return step

    sched.schedule = recording_schedule
    result = Engine(sched, executor, **engine_options).run(
        [Request(i, p, out_tokens, arrival_s=0.0) for i, p in enumerate(prompts)])
    assert not result.unfinished
    return {r.request_id: r.output_ids for r in result.finished}, sched.num_preemptions, steps, result


def step_cost_errors(table, exact, rng, steps: int = 20) -> list[float]:
    """Relative errors of a step-cost table's cycles against the exact simulation on random steps."""
    errors = []
    for _ in range(steps):
        step = random_step(rng, exact)
        simulated = exact.execute(step).cycles
        errors.append((table.step_cycles(step) - simulated) / simulated)
    return errors


def hf_greedy(model, prompt, out_tokens: int) -> list[int]:
    """transformers' greedy continuation of `prompt` (token ids), one thread (a tiny model:
    threads only contend on a loaded machine)."""
    import torch

    ids = torch.tensor([prompt])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            for _ in range(out_tokens):
                ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    finally:
        torch.set_num_threads(threads)
    return ids[0, len(prompt):].tolist()
