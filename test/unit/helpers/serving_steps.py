"""Random engine steps for checking a step-cost table against the exact simulation."""

from __future__ import annotations

from infer.serving import Request
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
