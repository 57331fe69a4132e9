"""The serving simulation behind `infer serve-sim`: options -> engine over the cost model -> report.

    opts = ServeSimOptions(model="path/to/hf-folder", target="edge", policy="continuous")
    report = simulate(opts, poisson_workload(...))     # or read_trace(path)
    print(report.table())

The step costs come from a `StepCostTable` (cached on disk): with `cost="auto"` (default) or
"device", profiled from the model's compiled @prefill_chunk/@decode programs on the simulator
when MODEL has weights (`infer.serving.device_costs`); otherwise, or with `cost="analytic"`,
from the analytic roofline profiler. The report's `cost_source` says which (and, when "auto"
fell back, why).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, replace
from typing import Any

from infer.serving.block_manager import BlockManager
from infer.serving.cost import AnalyticRooflineProfiler, LlamaDims
from infer.serving.cost_table import CostGrid, CostTableKey, StepCostTable
from infer.serving.engine import CostModelExecutor, Engine
from infer.serving.metrics import ServingReport, build_report
from infer.serving.request import Request
from infer.serving.scheduler import RequestError, SchedulerConfig, make_scheduler
from infer.serving.workload import RequestSpec


class SimulationError(ValueError):
    """Bad simulation input (a request too long for the context or the KV pool, bad options)."""


@dataclass(frozen=True)
class ServeSimOptions:
    model: str | LlamaDims                # a Hugging Face folder / config.json, or the dims themselves
    target: str = "edge"                  # edge, server or a CONFIG.toml
    policy: str = "continuous"
    max_batch_size: int = 64
    token_budget: int = 512
    block_size: int = 16
    num_kv_blocks: int | None = None      # default: what the DRAM left after the weights holds
    watermark: float = 0.01
    static_computes_finished_rows: bool = True   # static batching: finished rows still run (fixed-size batch)
    kv_memory_fraction: float = 0.9       # of the DRAM left after the weights, for the default pool
    weight_bytes: float = 2.0             # bf16
    kv_bytes: float = 2.0
    cache_dir: str | None = None
    cost: str = "auto"                    # auto (device when MODEL has weights), device, analytic
    precision: str = "bf16"               # of the compiled programs the device table profiles
    device_chunk: int = 16                # their prefill chunk, decode batch (<= max_batch_size), max_len
    device_batch: int = 8
    device_max_len: int = 1024

    def with_(self, **changes: Any) -> ServeSimOptions:
        return replace(self, **changes)


def compiler_version() -> str:
    import infer

    return infer.__version__


def _hw_digest(hw) -> str:
    return hashlib.sha256(repr(hw).encode()).hexdigest()[:16]


def resolve(opts: ServeSimOptions):
    """(dims, hardware config, number of KV blocks) for the options; SimulationError on bad ones."""
    from infer.target.hw import ConfigError, load_config

    try:
        dims = opts.model if isinstance(opts.model, LlamaDims) else LlamaDims.from_path(opts.model)
    except ValueError as e:
        raise SimulationError(str(e)) from None
    try:
        hw = load_config(opts.target)
    except ConfigError as e:
        raise SimulationError(str(e)) from None
    for name in ("max_batch_size", "token_budget", "block_size"):
        if getattr(opts, name) < 1:
            raise SimulationError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(opts, name)}")
    if not 0 <= opts.watermark < 1:
        raise SimulationError(f"--watermark must be in [0, 1), got {opts.watermark}")
    blocks = opts.num_kv_blocks
    if blocks is None:
        weights = dims.weight_elements * opts.weight_bytes
        free = (hw.memory.dram_bytes - weights) * opts.kv_memory_fraction
        blocks = int(free // (opts.block_size * dims.kv_elements_per_token * opts.kv_bytes))
        if blocks < 1:
            raise SimulationError(f"the weights of {dims.name} ({weights / 2**20:.0f} MiB) leave no DRAM for a KV "
                                  f"cache on {hw.name} ({hw.memory.dram_bytes / 2**20:.0f} MiB)")
    elif blocks < 1:
        raise SimulationError(f"--num-kv-blocks must be >= 1, got {blocks}")
    return dims, hw, blocks


COST_SOURCES = ("auto", "device", "analytic")


def cost_table(opts: ServeSimOptions, dims: LlamaDims, hw) -> tuple[StepCostTable, bool]:
    """The device table when asked for / possible (see the module doc), else the analytic one."""
    from infer.serving.device_costs import DeviceCostsUnavailable, device_cost_table

    if opts.cost not in COST_SOURCES:
        raise SimulationError(f"unknown cost source {opts.cost!r} (supported: {', '.join(COST_SOURCES)})")
    why = ""
    if opts.cost != "analytic":
        try:
            return device_cost_table(opts, dims, hw, _hw_digest(hw), compiler_version())
        except DeviceCostsUnavailable as e:
            if opts.cost == "device":
                raise SimulationError(str(e)) from None
            why = str(e)
    table, cached = analytic_cost_table(opts, dims, hw)
    if why:
        table.source += f" [device table unavailable: {why}]"
    return table, cached


def analytic_cost_table(opts: ServeSimOptions, dims: LlamaDims, hw) -> tuple[StepCostTable, bool]:
    profiler = AnalyticRooflineProfiler(dims, hw, opts.weight_bytes, opts.kv_bytes)
    key = CostTableKey(dims.digest(), _hw_digest(hw), compiler_version(), profiler.source)
    grid = CostGrid.for_limits(opts.max_batch_size, dims.max_context)
    return StepCostTable.load_or_profile(profiler, key, grid, opts.cache_dir)


def simulate(opts: ServeSimOptions, specs: list[RequestSpec]) -> ServingReport:
    dims, hw, blocks = resolve(opts)
    try:
        config = SchedulerConfig(opts.policy, opts.max_batch_size, opts.token_budget, dims.max_context,
                                 opts.static_computes_finished_rows)
        bm = BlockManager(blocks, opts.block_size, opts.watermark)
    except ValueError as e:
        raise SimulationError(str(e)) from None
    scheduler = make_scheduler(config, bm)
    requests = [Request(i, s.prompt_tokens, s.output_tokens, s.arrival_s) for i, s in enumerate(specs)]
    for r, s in zip(requests, specs, strict=True):
        try:
            scheduler.check_request(r)
        except RequestError as e:
            where = s.origin or f"request {r.request_id}"
            raise SimulationError(f"{where}: {str(e).split(': ', 1)[1]}") from None
    table, cached = cost_table(opts, dims, hw)
    opt_dict = {k: v for k, v in asdict(opts).items() if k not in ("model", "cache_dir")}
    executor = CostModelExecutor(table, opts.block_size, blocks)
    result = Engine(scheduler, executor, hw.clock_ghz).run(requests)
    return build_report(result, policy=opts.policy, target=hw.name, model=dims.name, kv_blocks=blocks,
                        block_size=opts.block_size, requests=len(specs),
                        extra={"options": opt_dict, "cost_table_cached": cached})
