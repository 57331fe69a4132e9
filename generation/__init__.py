"""infer.generation: text generation with imported language models.

    gen = infer.Generator("model.gguf")                     # reference interpreter by default
    for piece in gen.generate("Hello!", max_new_tokens=32, temperature=0.7, top_p=0.9, seed=0):
        print(piece.text, end="")

- `Generator` (generator.py): prompt / chat messages / token ids -> streamed
  `GeneratedToken`s, `last_stats` (`GenerationStats`).
- `StepExecutor` (executor.py): the prefill/decode interface a generator runs
  on; `ReferenceExecutor` is the graph-level reference interpreter.
- `DeviceExecutor` (device_executor.py): a paged-KV artifact (@prefill_chunk,
  @decode) on the simulated NPU, the KV pools resident in its DRAM;
  `PagedReferenceExecutor` runs the same paged functions on the interpreter.
- `Sampler`, `SamplingOptions` (sampling.py): greedy / temperature / top-k /
  top-p with a seeded numpy Generator, shared by every executor.

Layering: generation sits above frontend and runtime (it may use both); tools
use it; nothing below imports it.
"""

from infer.generation.device_executor import DeviceExecutor, PagedExecutor, PagedReferenceExecutor
from infer.generation.executor import GenerationError, ReferenceExecutor, StepExecutor
from infer.generation.generator import GeneratedToken, GenerationStats, Generator
from infer.generation.sampling import Sampler, SamplingError, SamplingOptions

__all__ = [
    "DeviceExecutor",
    "GeneratedToken",
    "GenerationError",
    "GenerationStats",
    "Generator",
    "PagedExecutor",
    "PagedReferenceExecutor",
    "ReferenceExecutor",
    "Sampler",
    "SamplingError",
    "SamplingOptions",
    "StepExecutor",
]
