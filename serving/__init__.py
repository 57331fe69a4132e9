"""infer.serving: a continuous-batching LLM serving engine and serving simulator.

    from infer.serving import BlockManager, SchedulerConfig, make_scheduler, Engine, Request
    bm = BlockManager(num_blocks=2048, block_size=16, watermark=0.01)
    sched = make_scheduler(SchedulerConfig("continuous", max_batch_size=64, token_budget=512), bm)
    result = Engine(sched, executor, clock_ghz=1.0).run(requests)

Paged KV block manager (`block_manager`), iteration-level schedulers (`scheduler`:
continuous batching with chunked prefill and preemption by recomputation; static
batching as the baseline), the engine and its step-executor interface (`engine`), step
costs (`cost`: analytic roofline profiler; `cost_table`: profiled, cached, interpolated
table), workloads and traces (`workload`), metrics (`metrics`), the serving simulation
behind `infer serve-sim` (`simulate`; `device_costs`: its table from the compiled programs),
Ray sweeps (`sweep`), plots (`plots`), the reference executor on the graph interpreter
(`reference_executor`) and the device executor running the compiled programs on the simulator
(`device_executor`).

Imports infer.target and infer.runtime only; models are imported and compiled through the
public `infer.import_model` / `infer.compile` / `infer.DeviceExecutor`. See docs/serving.md.
"""

from infer.serving.block_manager import BlockManager, BlockManagerError
from infer.serving.engine import CostModelExecutor, Engine, EngineResult, StepExecutor, StepResult
from infer.serving.request import Request, RequestState
from infer.serving.scheduler import (POLICIES, RequestError, Scheduler, SchedulerConfig, Step, StepItem,
                                     make_scheduler)

__all__ = ["POLICIES", "BlockManager", "BlockManagerError", "CostModelExecutor", "Engine", "EngineResult",
           "Request", "RequestError", "RequestState", "Scheduler", "SchedulerConfig", "Step", "StepExecutor",
           "StepItem", "StepResult", "make_scheduler"]
