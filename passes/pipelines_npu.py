"""`compile-npu{target=edge precision=fp32}`: the whole compiler as one pass.

    compile-npu = [graph-passes], graph-defer-paged-query{target precision}, graph-prepare-tiling{target},
                  graph-fuse-activation-prologue{target},
                  graph-to-tile{target precision}, tile-plan-memory{target}, tile-to-npu{target}

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
    """The whole compiler: graph-level IR in, an npu.program and its npu.layout out.

    Stages: [graph-passes], graph-prepare-tiling, graph-fuse-activation-prologue, graph-to-tile,
    tile-plan-memory, tile-to-npu.

    Options:
      target: the hardware config: "edge", "server" or a TOML path.
      precision: "fp32" (matmuls as three bf16 passes), "bf16" (bf16 products, fp32 accumulation) or
        "int8" (a quantized module: integer kernels on the int8 path, its float layers as bf16).
      graph-passes: a pass pipeline (`-p` syntax, e.g. "my-pass{factor=2},graph-dce") run on the
        graph-level module first; plugin passes are found by name like infer's own.
      autotune: graph-to-tile's autotuning: 0 (off) or the number of tilings simulated per
        distinct linear/matmul/conv/attention kernel (docs/tiling.md "Autotuning").
      autotune-cache: where autotuning results are cached ("": $XDG_CACHE_HOME/infer/autotune).
      overrides: graph-to-tile's tile overrides per kernel ("kernel3=64x64x32,..."; docs/tiling.md
        "Overrides"). The compile driver sets it when tile-to-npu names a kernel's fallback.
    """

    name = "compile-npu"

    target: str = "edge"
    precision: str = "fp32"
    graph_passes: str = ""
    autotune: int = 0
    autotune_cache: str = ""
    overrides: str = ""

    def passes(self) -> tuple[ModulePass, ...]:
        # Checked here, where the stages are built, so a driver that runs the stages itself
        # (infer-opt, via flatten()) refuses bad options before any stage runs.
        from infer.target.hw import ConfigError, load_config

        if self.precision not in ("fp32", "bf16", "int8"):
            raise CompileError(f"error: compile-npu: precision must be fp32, bf16 or int8, got '{self.precision}'")
        try:
            load_config(self.target)
        except ConfigError as e:
            raise CompileError(f"error: compile-npu: {e}") from None
        return (
            *self._graph_passes(),
            _stage("graph-defer-paged-query", target=self.target, precision=self.precision),
            _stage("graph-prepare-tiling", target=self.target),
            _stage("graph-fuse-activation-prologue", target=self.target),
            _stage("graph-to-tile", target=self.target, precision=self.precision, overrides=self.overrides,
                   **({"autotune": self.autotune, "autotune_cache": self.autotune_cache} if self.autotune else {})),
            _stage("tile-plan-memory", target=self.target),
            _stage("tile-to-npu", target=self.target),
        )

    def _graph_passes(self) -> tuple[ModulePass, ...]:
        if not self.graph_passes.strip():
            return ()
        from infer.passes import PassSpecError, build_pipeline

        try:
            return tuple(build_pipeline(self.graph_passes))
        except PassSpecError as e:
            raise CompileError(f"error: compile-npu: graph-passes: {e}") from None

