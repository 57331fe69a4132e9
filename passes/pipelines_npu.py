"""`compile-npu{target=edge precision=fp32}`: the whole compiler as one pass.

    compile-npu = graph-prepare-tiling, graph-to-tile{target precision},
                  tile-plan-memory{target}, tile-to-npu{target}

so `infer-opt m.mlir -p 'compile-npu{target=edge}' -t npu-asm` prints the program
of a graph-level module, and the compile driver (tools/driver.py: `infer compile`,
`infer.compile`) runs its `passes()` through xDSL's `PassPipeline` (to report progress and
capture the IR between stages with the pipeline's callback) and packages the result (the
`npu.program` and the module attributes `npu.layout`, `npu.ops`) as an artifact. `target` is
"edge", "server" or a TOML path; `passes()` checks both options.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from xdsl.passes import ModulePass

from infer.dialects.ir_io import IRError
from infer.passes.pipelines import PipelinePass


class CompileError(IRError):
    pass


def _stage(name: str, **options: object) -> ModulePass:
    from infer.passes import infer_passes

    factory = infer_passes().get(name)
    if factory is None:
        raise CompileError(f"error: compile-npu: the pass '{name}' is not available in this build")
    cls = factory()
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in options.items() if k in names})


@dataclass(frozen=True)
class CompileNpuPass(PipelinePass):
    """graph-prepare-tiling, graph-to-tile, tile-plan-memory, tile-to-npu."""

    name = "compile-npu"

    target: str = "edge"
    precision: str = "fp32"

    def passes(self) -> tuple[ModulePass, ...]:
        from infer.target.hw import ConfigError, load_config

        if self.precision not in ("fp32", "bf16"):
            raise CompileError(f"error: compile-npu: precision must be fp32 or bf16, got '{self.precision}'")
        try:
            load_config(self.target)
        except ConfigError as e:
            raise CompileError(f"error: compile-npu: {e}") from None
        return (
            _stage("graph-prepare-tiling"),
            _stage("graph-to-tile", target=self.target, precision=self.precision),
            _stage("tile-plan-memory", target=self.target),
            _stage("tile-to-npu", target=self.target),
        )
