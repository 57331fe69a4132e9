"""Hand-written planned tile IR for the tile-to-npu tests, and running it both ways: on the
tile interpreter and, lowered by tile-plan-memory + tile-to-npu, on the simulator
(`run_both` asserts the outputs are bit-identical); `tile_module`: a graph module's tile IR as
compile-npu makes it."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from xdsl.passes import PassPipeline

from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.npu import ProgramOp
from infer.dialects.tile_interpreter import run_tile_module
from infer.dialects.npu_attrs import layout_from_module
from infer.dialects.weights import weights_of
from infer.passes.pipelines_npu import CompileNpuPass
from infer.passes.testing import apply_pass, run_entry
from infer.passes.tile_memory_plan import TilePlanMemoryPass
from infer.passes.tile_to_npu import TileToNpuPass
from infer.target.sim import Simulator

CTX = make_context()
BF16 = np.dtype(ml_dtypes.bfloat16)


def tile_module(module, target: str, precision: str):
    """The graph module as compile-npu leaves it after graph-to-tile, and its weight store (the
    module itself is not changed)."""
    work = module.clone()
    captured = {}

    def after(done, op, _upcoming):
        if done is not None and done.name == "graph-to-tile":
            captured["tile"] = op.clone()

    PassPipeline(CompileNpuPass(target=target, precision=precision).passes(), callback=after).apply(
        make_context(), work)
    return captured["tile"], weights_of(work)


def lower(text: str):
    """Parse planned-or-not tile IR, plan memory and lower to npu: (module, Program)."""
    module = parse_ir(CTX, text, "test.mlir")
    verify_module(module)
    TilePlanMemoryPass().apply(CTX, module)
    TileToNpuPass().apply(CTX, module)
    verify_module(module)
    prog = next(o for o in module.walk() if isinstance(o, ProgramOp)).to_program()
    return module, prog


def run_both(text: str, inputs, target: str = "edge"):
    """Run `text` on the tile interpreter and on the simulator; assert bit-identical outputs.
    Returns (program, counters, outputs)."""
    ref_module = parse_ir(CTX, text, "test.mlir")
    ref = run_tile_module(ref_module, inputs)
    module, prog = lower(text)
    layout = layout_from_module(module)
    dram = layout.dram_image(inputs)
    counters = Simulator(target).run(prog, dram)
    outs = layout.read_outputs(dram)
    assert len(outs) == len(ref)
    for o, r in zip(outs, ref):
        assert o.dtype == r.dtype and o.shape == r.shape
        assert o.tobytes() == r.tobytes()  # bit-identical
    return prog, counters, outs


def npu_matches_tile(module, inputs, target: str):
    """A planned tile module (graph-to-tile + tile-plan-memory done, weights attached): run it on
    the tile interpreter, lower it with tile-to-npu and simulate it with the race checker on;
    assert the simulator's outputs are bit-identical. Returns (outputs, counters)."""
    tile_ref = run_entry(module, list(inputs))
    apply_pass("tile-to-npu", module)
    verify_module(module)
    prog = next(o for o in module.walk() if isinstance(o, ProgramOp)).to_program()
    layout = layout_from_module(module)
    dram = layout.dram_image(list(inputs), weights_of(module))
    counters = Simulator(target).run(prog, dram, check_races=True)
    outs = layout.read_outputs(dram)
    assert len(outs) == len(tile_ref)
    for o, r in zip(outs, tile_ref):
        assert o.tobytes() == r.tobytes()  # bit-identical to the tile interpreter
    return outs, counters


def mr(shape, elem, space):
    return f'memref<{"x".join(map(str, shape))}x{elem}, "{space}">'


def gemm_ir(target: str, M: int, K: int, N: int, R: int, C: int, TM: int, double: bool = True,
            relu: bool = False) -> str:
    """C[M,N] f32 = A[M,K] bf16 @ B (packed [N/C*K, C] bf16): per m-block the A block stays in
    the scratchpad; per column strip j the K x C strip of B is DMAed (double-buffered when
    `double`) and K/R matmuls accumulate into a (double-buffered) accumulator tile, which a relu
    epilogue (vector) or a store writes back."""
    nb = 2 if double else 1
    A, B, Y = mr((M, K), "bf16", "dram"), mr((N // C * K, C), "bf16", "dram"), mr((M, N), "f32", "dram")
    LA, LB, ACC, OUT = mr((TM, K), "bf16", "spad"), mr((K, C), "bf16", "spad"), mr((TM, C), "f32", "acc"), mr((TM, C), "f32", "spad")
    epi = ""
    src = "%acc"
    srct = ACC
    if relu:
        epi = f'      tile.vector "relu" %o[%c0, %c0], %acc[%c0, %c0] {{rows = {TM} : i64, cols = {C} : i64}} : {OUT}, {ACC}\n'
        src, srct = "%o", OUT
    oalloc = f"      %o = tile.alloc {{buffers = {nb} : i64}} : {OUT}\n" if relu else ""
    return f"""builtin.module attributes {{tile.target = "{target}"}} {{
  func.func @main(%a: {A} {{graph.name = "a"}}, %b: {B} {{graph.name = "b"}}, %y: {Y} {{graph.name = "y", tile.output}}) {{
    %c0 = arith.constant 0 : index
    %cM = arith.constant {M} : index
    %cTM = arith.constant {TM} : index
    %cK = arith.constant {K} : index
    %cR = arith.constant {R} : index
    %cJ = arith.constant {N // C} : index
    %c1 = arith.constant 1 : index
    %cC = arith.constant {C} : index
    %la = tile.alloc : {LA}
    scf.for %m = %c0 to %cM step %cTM {{
      tile.dma %a[%m, %c0], %la[%c0, %c0] {{shape = array<i64: {TM}, {K}>}} : {A}, {LA}
      scf.for %j = %c0 to %cJ step %c1 {{
        %lb = tile.alloc {{buffers = {nb} : i64}} : {LB}
        %acc = tile.alloc {{buffers = {nb} : i64}} : {ACC}
{oalloc}        %row = arith.muli %j, %cK : index
        %col = arith.muli %j, %cC : index
        tile.dma %b[%row, %c0], %lb[%c0, %c0] {{shape = array<i64: {K}, {C}>}} : {B}, {LB}
        tile.fill %acc[%c0, %c0] {{rows = {TM} : i64, cols = {C} : i64, value = 0.0 : f32}} : {ACC}
        scf.for %k = %c0 to %cK step %cR {{
          tile.matmul %la[%c0, %k], %lb[%k, %c0], %acc[%c0, %c0] {{m = {TM} : i64, k = {R} : i64, n = {C} : i64, accumulate = true}} : {LA}, {LB}, {ACC}
        }}
{epi}        tile.dma {src}[%c0, %c0], %y[%m, %col] {{shape = array<i64: {TM}, {C}>}} : {srct}, {Y}
      }}
    }}
    func.return
  }}
}}
"""
