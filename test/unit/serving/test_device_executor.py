"""The serving engine on the simulated NPU: a tiny random Llama (transformers, from a config)
imported with a paged KV cache, its @prefill_chunk / @decode compiled (fp32, server) and run by
DeviceStepExecutor.

- batching invariance: 8 concurrent requests of different prompt lengths, continuous batching
  with chunked prefill mixed with decodes and preemption by recomputation, give per request
  exactly the greedy tokens it gets served alone, and those equal transformers' greedy tokens;
- the step-cost table profiled from the compiled programs (timing-only simulation, one call per
  bucket) predicts the exact simulated cycles of 20 random steps within 5 %."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import infer
from infer.serving.cost_table import CostGrid, CostTableKey, StepCostTable
from infer.serving.device_executor import CompiledProgramProfiler, DeviceStepExecutor
from helpers.serving_steps import hf_greedy, serve_recording_steps, step_cost_errors

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 96
OUT = 6
PROMPT_LENS = [3, 17, 6, 12, 9, 15, 4, 11]
BLOCK, CHUNK, BATCH, MAX_LEN = 4, 8, 4, 48


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=MAX_LEN,
                                   initializer_range=0.3)
    model = transformers.LlamaForCausalLM(cfg).eval()
    folder = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(str(folder), safe_serialization=True)
    return model, folder


@pytest.fixture(scope="module")
def compiled(tiny_llama):
    # 12 blocks: 2 scratch (a padded chunk of 8), 10 for sequences, too few for 4 requests: preemptions
    paged = infer.import_model(str(tiny_llama[1]), kv_cache="paged", chunk=CHUNK, batch=BATCH, max_len=MAX_LEN,
                               block_size=BLOCK, num_blocks=12)
    return infer.compile(paged, target="server", precision="fp32")


def _serve(executor, prompts, max_batch, budget):
    batched, preemptions, steps, result = serve_recording_steps(executor, prompts, OUT, max_batch, budget,
                                                                executor.max_context, clock_ghz=1.0)
    assert result.cost_source.startswith("simulated cycles")
    assert all(s.duration_s > 0 for s in result.steps)
    return batched, preemptions, steps


def _prompts():
    rng = np.random.default_rng(1)
    return [rng.integers(1, VOCAB, n).tolist() for n in PROMPT_LENS]






def test_batching_invariance_on_the_device(tiny_llama, compiled):
    executor = DeviceStepExecutor(infer.DeviceExecutor(compiled))
    assert (executor.num_blocks, executor.block_size, executor.batch) == (10, BLOCK, BATCH)
    prompts = _prompts()
    batched, preemptions, steps = _serve(executor, prompts, max_batch=BATCH, budget=8)
    # the run did exercise what it claims: chunked prompts (from a start inside a block), mixed steps, preemption
    assert preemptions > 0
    assert any(n < PROMPT_LENS[rid] and pre and start == 0 for s in steps for rid, start, n, pre in s)
    assert any(pre and start % BLOCK for s in steps for rid, start, n, pre in s)
    assert any(any(pre for *_, pre in s) and sum(not pre for *_, pre in s) > 1 for s in steps)
    assert executor.paged.session.session.copied_bytes == 0   # the pools stayed in device DRAM
    for rid, prompt in enumerate(prompts):
        alone, _, _ = _serve(executor, [prompt], max_batch=1, budget=8)
        assert batched[rid] == alone[0], f"request {rid}: batched {batched[rid]} != alone {alone[0]}"
        assert alone[0] == hf_greedy(tiny_llama[0], prompt, OUT), f"request {rid}: differs from transformers"


def test_step_cost_table_predicts_20_random_steps(compiled, tmp_path, capsys):
    profiling = infer.DeviceExecutor(compiled)  # "timing" mode refuses these programs (an ld of a stored value)
    profiler = CompiledProgramProfiler(profiling, "tiny-llama")
    grid = CostGrid.for_programs(BATCH, CHUNK, profiling.max_context, profiling.max_context - CHUNK,
                                 block_size=profiling.block_size)
    key = CostTableKey("tiny-llama", "server", infer.__version__, profiler.source)
    table, cached = StepCostTable.load_or_profile(profiler, key, grid, tmp_path)
    assert not cached and profiler.counter.calls == grid.points()
    again, cached = StepCostTable.load_or_profile(profiler, key, grid, tmp_path)
    assert cached and again.values == table.values

    exact = DeviceStepExecutor(infer.DeviceExecutor(compiled))
    errors = step_cost_errors(table, exact, np.random.default_rng(3))
    with capsys.disabled():
        print("\nstep-cost table vs exact simulation, 20 random steps (tiny Llama, server): errors "
              + " ".join(f"{100 * e:+.2f}%" for e in errors) + f"; max |error| {100 * max(map(abs, errors)):.2f}%")
    assert max(map(abs, errors)) < 0.02


def test_serve_sim_uses_the_compiled_programs_when_the_model_has_weights(tiny_llama, tmp_path, capsys):
    from infer.tools.cli import main

    args = ["serve-sim", str(tiny_llama[1]), "-t", "server", "--rate", "200", "--num-requests", "12",
            "--prompt-len-median", "10", "--output-len-median", "4", "--max-batch-size", "4", "--token-budget", "16",
            "--block-size", "4", "--device-chunk", "8", "--device-max-len", "32", "--precision", "fp32",
            "--cache-dir", str(tmp_path), "--json", str(tmp_path / "r.json")]
    assert main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "simulated cycles of" in out and "compiled @prefill_chunk/@decode" in out
    first = json.loads((tmp_path / "r.json").read_text())
    assert first["completed"] == 12 and first["cost_table_cached"] is False
    assert main(args) == 0                               # the second run reads the cached table: same numbers
    again = json.loads((tmp_path / "r.json").read_text())
    assert again["cost_table_cached"] is True and again["ttft_p99_s"] == first["ttft_p99_s"]
    assert main([*args[:-4], "--cost", "analytic", "--cache-dir", str(tmp_path)]) == 0
    assert "analytic roofline" in capsys.readouterr().out
    (tmp_path / "sizes").mkdir()
    (tmp_path / "sizes" / "config.json").write_text((tiny_llama[1] / "config.json").read_text())
    assert main([*args[:1], str(tmp_path / "sizes"), *args[2:-2], "--cost", "device"]) == 1
    assert "has no weights to compile" in capsys.readouterr().err
