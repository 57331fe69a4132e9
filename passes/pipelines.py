"""Named pipelines: passes that run a fixed sequence of passes.

`graph-optimize` = graph-canonicalize, graph-constant-fold, graph-dce,
graph-shape-inference, so `infer-opt -p graph-optimize` is the same as
`infer-opt -p graph-canonicalize,graph-constant-fold,graph-dce,graph-shape-inference`
(with the options below forwarded to the pass that owns them).

`graph-prepare-tiling` = graph-optimize, graph-cse, graph-lower-runtime-conv, graph-raise-activations,
graph-raise-rms-norm, graph-raise-rotary, graph-raise-attention, graph-raise-linear, graph-fold-batch-norm,
graph-merge-summed-convs{target}, graph-dce, graph-fuse,
graph-fuse-norm-prologue:
the graph-level half of the compiler, leaving fused `graph.kernel` groups for graph -> tile
lowering.

`lower-to-tile` = graph-defer-paged-query, graph-prepare-tiling,
graph-fuse-activation-prologue, graph-to-tile, tile-plan-memory: the whole graph -> tile half
of the compiler for one target.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from infer.passes.graph_canonicalize import GraphCanonicalizePass
from infer.passes.graph_constant_fold import (
    DEFAULT_INLINE_LIMIT,
    DEFAULT_MAX_ELEMENTS,
    GraphConstantFoldPass,
)
from infer.passes.graph_cse import GraphCSEPass
from infer.passes.graph_dce import GraphDCEPass
from infer.passes.graph_defer_paged_query import GraphDeferPagedQueryPass
from infer.passes.graph_fold_batch_norm import GraphFoldBatchNormPass
from infer.passes.graph_merge_summed_convs import GraphMergeSummedConvsPass
from infer.passes.graph_raise_attention import GraphRaiseAttentionPass
from infer.passes.graph_raise_linear import GraphRaiseLinearPass
from infer.passes.graph_raise_activations import GraphRaiseActivationsPass
from infer.passes.graph_raise_rms_norm import GraphRaiseRmsNormPass
from infer.passes.graph_raise_rotary import GraphRaiseRotaryPass
from infer.passes.graph_fuse import ALL_KINDS, DEFAULT_MAX_EPILOGUE, GraphFusePass
from infer.passes.graph_fuse_activation_prologue import GraphFuseActivationProloguePass
from infer.passes.graph_fuse_prologue import GraphFuseNormProloguePass
from infer.passes.graph_lower_runtime_conv import GraphLowerRuntimeConvPass
from infer.passes.graph_shape_inference import GraphShapeInferencePass


class PipelinePass(ModulePass):
    """A named pipeline: a pass that runs a fixed sequence of passes (`passes()`), with its
    own options forwarded to the passes that own them. Drivers that print, time or capture
    the IR between stages use `flatten()`, the sequence with nested pipelines expanded."""

    def passes(self) -> tuple[ModulePass, ...]:
        raise NotImplementedError

    def flatten(self) -> tuple[ModulePass, ...]:
        out: list[ModulePass] = []
        for p in self.passes():
            out.extend(p.flatten() if isinstance(p, PipelinePass) else (p,))
        return tuple(out)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for p in self.passes():
            p.apply(ctx, op)


@dataclass(frozen=True)
class GraphOptimizePass(PipelinePass):
    """The graph-level cleanup pipeline.

    Options (forwarded):
      ignore-signed-zeros -> graph-canonicalize
      max-elements, inline-limit -> graph-constant-fold
      require-static -> graph-shape-inference
    """

    name = "graph-optimize"

    ignore_signed_zeros: bool = False
    max_elements: int = DEFAULT_MAX_ELEMENTS
    inline_limit: int = DEFAULT_INLINE_LIMIT
    require_static: bool = False

    def passes(self) -> tuple[ModulePass, ...]:
        return (
            GraphCanonicalizePass(ignore_signed_zeros=self.ignore_signed_zeros),
            GraphConstantFoldPass(max_elements=self.max_elements, inline_limit=self.inline_limit),
            GraphDCEPass(),
            GraphShapeInferencePass(require_static=self.require_static),
        )


@dataclass(frozen=True)
class GraphPrepareTilingPass(PipelinePass):
    """Cleanup, repeated work merged, convolutions with run-time weights as im2col matmuls,
    activation formulas as graph.gelu/graph.silu, written-out RMSNorms, rotary embeddings and
    attention as graph.rms_norm, graph.rotary and graph.attention,
    batch-norm folding and fusion: what runs before graph -> tile.

    Options (forwarded): max-elements -> graph-constant-fold; erase-dead ->
    graph-fold-batch-norm; target -> graph-merge-summed-convs (after the folding: two convs
    summed, merged where that saves the target's array passes; "": none); max-epilogue, kinds,
    norm-epilogue -> graph-fuse (then graph-fuse-norm-prologue:
    RMSNorms into the packed-weight products they feed). Constant folding and
    shape inference run before fusion, so kernels never wrap constant work and
    their block arguments have final types.
    """

    name = "graph-prepare-tiling"

    max_elements: int = DEFAULT_MAX_ELEMENTS
    erase_dead: bool = True
    max_epilogue: int = DEFAULT_MAX_EPILOGUE
    kinds: tuple[str, ...] = ALL_KINDS
    norm_epilogue: bool = True
    target: str = ""

    def passes(self) -> tuple[ModulePass, ...]:
        return (
            GraphOptimizePass(max_elements=self.max_elements),
            GraphCSEPass(),
            GraphLowerRuntimeConvPass(),
            GraphRaiseActivationsPass(),
            GraphRaiseRmsNormPass(),
            GraphRaiseRotaryPass(),
            GraphRaiseAttentionPass(),
            GraphRaiseLinearPass(),
            GraphFoldBatchNormPass(erase_dead=self.erase_dead),
            GraphMergeSummedConvsPass(target=self.target),
            GraphDCEPass(),
            GraphFusePass(max_epilogue=self.max_epilogue, kinds=self.kinds, norm_epilogue=self.norm_epilogue),
            GraphFuseNormProloguePass(),
        )


@dataclass(frozen=True)
class LowerToTilePass(PipelinePass):
    """Graph level to planned tile level for one hardware config.

    Options (forwarded): target, precision -> graph-defer-paged-query; target ->
    graph-prepare-tiling's graph-merge-summed-convs, graph-fuse-activation-prologue; target,
    precision, overrides, debug-tiling -> graph-to-tile;
    target, print-plan -> tile-plan-memory; max-epilogue -> graph-fuse.
    """

    name = "lower-to-tile"

    target: str = "edge"
    precision: str = "fp32"
    overrides: str = ""
    debug_tiling: bool = False
    print_plan: bool = False
    max_epilogue: int = DEFAULT_MAX_EPILOGUE

    def passes(self) -> tuple[ModulePass, ...]:
        from infer.passes.graph_to_tile import GraphToTilePass
        from infer.passes.tile_memory_plan import TilePlanMemoryPass

        return (
            GraphDeferPagedQueryPass(target=self.target, precision=self.precision),
            GraphPrepareTilingPass(max_epilogue=self.max_epilogue, target=self.target),
            GraphFuseActivationProloguePass(target=self.target),
            GraphToTilePass(target=self.target, precision=self.precision, overrides=self.overrides,
                            debug_tiling=self.debug_tiling),
            TilePlanMemoryPass(target=self.target, print_plan=self.print_plan),
        )
