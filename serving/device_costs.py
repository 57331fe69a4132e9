"""The step-cost table of `infer serve-sim` from the model's own compiled programs.

    table, cached = device_cost_table(opts, dims, hw)     # DeviceCostsUnavailable: use the analytic table

When MODEL has weights (a Hugging Face folder with *.safetensors, or a .gguf file) the model is
imported with a paged KV cache (`kv_cache="paged"`, chunk C = `device_chunk`, decode batch B =
min(`max_batch_size`, `device_batch`), max_len = min(the model's context, `device_max_len`),
the run's block size), its @prefill_chunk and @decode compiled for the target and precision,
and `CompiledProgramProfiler` simulates one call per grid point (`CostGrid.for_programs`:
decode rows x context, prefill start). The table is cached like the analytic one, keyed by
the model (its sizes, its weight files' names and sizes, the import options), the hardware
config, the compiler version and the profiler's description, so a warm cache needs no
compile. Beyond `device_max_len` the table extrapolates its last segment.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from infer.serving.cost_table import CostGrid, CostTableKey, StepCostTable


class DeviceCostsUnavailable(ValueError):
    """The model cannot be profiled on the device (no weights, an import or compile error)."""


def weight_files(model: str | Path) -> list[Path]:
    p = Path(model)
    if p.is_file():
        return [p] if p.suffix == ".gguf" else []
    return sorted(p.glob("*.safetensors")) + sorted(p.glob("*.gguf")) if p.is_dir() else []


class _CompileOnFirstCall:
    """A profiler that imports and compiles the model only when the table is not cached."""

    def __init__(self, build, source: str):
        self.build, self.source = build, source
        self.profiler = None

    def __call__(self, entry: str, a: int, b: int) -> float:
        if self.profiler is None:
            from infer.serving.device_executor import CompiledProgramProfiler

            self.profiler = CompiledProgramProfiler(self.build(), self.source)
        return self.profiler(entry, a, b)


def device_cost_table(opts, dims, hw, config_digest: str, compiler_version: str,
                      ) -> tuple[StepCostTable, bool]:
    files = weight_files(opts.model) if not hasattr(opts.model, "hidden") else []
    if not files:
        raise DeviceCostsUnavailable(f"{getattr(opts.model, 'name', opts.model)} has no weights to compile "
                                     "(a folder with *.safetensors or a .gguf file)")
    chunk, batch = opts.device_chunk, min(opts.max_batch_size, opts.device_batch)
    max_len = min(dims.max_context, opts.device_max_len)
    if not 1 <= chunk < max_len:
        raise DeviceCostsUnavailable(f"--device-chunk must be in 1 .. {max_len - 1}, got {chunk}")
    model_path = files[0] if files[0].suffix == ".gguf" else files[0].parent
    options = {"chunk": chunk, "batch": batch, "max_len": max_len, "block_size": opts.block_size,
               "precision": opts.precision}
    blob = json.dumps({"dims": dims.digest(), "files": [(f.name, f.stat().st_size) for f in files],
                       "options": options}, sort_keys=True)
    model_digest = hashlib.sha256(blob.encode()).hexdigest()[:16]
    source = (f"simulated cycles of {dims.name}'s compiled @prefill_chunk/@decode ({opts.precision}, chunk {chunk}, "
              f"decode batch {batch}; one call per bucket, interpolated)")
    block_rows = -(-max_len // chunk) * chunk
    max_blocks = -(-block_rows // opts.block_size)
    scratch = -(-max(chunk, batch) // opts.block_size)

    def build():
        import infer

        model = infer.import_model(str(model_path), kv_cache="paged", chunk=chunk, batch=batch, max_len=max_len,
                                   block_size=opts.block_size, num_blocks=max_blocks + scratch)
        return infer.DeviceExecutor(infer.compile(model, target=opts.target, precision=opts.precision))

    profiler = _CompileOnFirstCall(build, source)
    key = CostTableKey(model_digest, config_digest, compiler_version, source)
    grid = CostGrid.for_programs(batch, chunk, max_len, max_len - chunk, block_size=opts.block_size)
    try:
        return StepCostTable.load_or_profile(profiler, key, grid, opts.cache_dir)
    except Exception as e:  # noqa: BLE001 -- import, compile and simulation errors have no common base here;
        # the caller falls back to the analytic table (or reports this one error) and says why
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DeviceCostsUnavailable(f"profiling the compiled programs of {dims.name} failed: {first}") from None
