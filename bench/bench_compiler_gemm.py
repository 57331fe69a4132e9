"""Compiler GEMM efficiency: graph IR -> compile-npu pipeline -> simulator.

    python bench/bench_compiler_gemm.py

For a large compute-bound GEMM (graph.linear, bf16 precision) on edge and server: % of the
matrix unit's peak, program size, cycles, and the same tile IR lowered without software
pipelining (`lower-to-tile` + `tile-to-npu{pipeline=false}`) for comparison.
Also the roofline fraction (achieved vs max(compute, bandwidth) bound) of a conv layer and a
transformer block when they compile.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.npu import ProgramOp
from infer.dialects.weights import WeightStore, attach_weights, weights_of
from infer.dialects.npu_attrs import layout_from_module
from infer.passes.testing import apply_pass
from infer.target.hw import load_config
from infer.target.sim import Simulator

CTX = make_context()
SHAPES = {"edge": (256, 1024, 1024), "server": (1024, 2048, 2048)}


def linear_ir(M: int, K: int, N: int) -> str:
    return f"""func.func @main(%x: tensor<{M}x{K}xf32> {{graph.name = "x"}}) -> (tensor<{M}x{N}xf32> {{graph.name = "y"}}) {{
  %w = graph.weight @w : tensor<{N}x{K}xf32>
  %y = graph.linear %x, %w : (tensor<{M}x{K}xf32>, tensor<{N}x{K}xf32>) -> tensor<{M}x{N}xf32>
  func.return %y : tensor<{M}x{N}xf32>
}}"""


def compile_and_run(text: str, weights: dict, inputs: list, target: str, precision: str = "bf16",
                    pipeline: bool = True):
    m = parse_ir(CTX, text, "bench.mlir")
    verify_module(m)
    st = WeightStore()
    for k, v in weights.items():
        st.set(k, v.astype(np.float32))
    attach_weights(m, st)
    if pipeline:
        apply_pass(f"compile-npu{{target={target} precision={precision}}}", m)
    else:
        apply_pass(f"lower-to-tile{{target={target} precision={precision}}}", m)
        apply_pass(f"tile-to-npu{{target={target} pipeline=false}}", m)
    prog = next(o for o in m.walk() if isinstance(o, ProgramOp)).to_program()
    lay = layout_from_module(m)
    dram = lay.dram_image(inputs, weights_of(m))
    c = Simulator(target).run(prog, dram)
    return prog, c, lay, dram


def gemm(target: str, pipeline: bool = True):
    M, K, N = SHAPES[target]
    rng = np.random.default_rng(0)
    w = {"w": rng.standard_normal((N, K)) * 0.05}
    x = rng.standard_normal((M, K)).astype(np.float32)
    return compile_and_run(linear_ir(M, K, N), w, [x], target, pipeline=pipeline)


def roofline(c, target: str, macs: int, dram_bytes: int) -> float:
    hw = load_config(target)
    bound = max(macs / hw.peak_macs_per_cycle, dram_bytes / hw.dram.bytes_per_cycle)
    return bound / c.cycles


def main() -> int:
    print("compiler GEMM (graph.linear, precision=bf16) -> compile-npu -> simulator")
    print(f"{'target':8} {'M x K x N':>18} {'pipelined':>10} {'% peak':>8} {'cycles':>10} "
          f"{'instrs':>7} {'executed':>9}  stalls (top 3)")
    for target in ("edge", "server"):
        for pipe in (True, False):
            t0 = time.time()
            prog, c, _, _ = gemm(target, pipe)
            M, K, N = SHAPES[target]
            top = sorted(c.stalls.items(), key=lambda kv: -kv[1])[:3]
            print(f"{target:8} {f'{M}x{K}x{N}':>18} {str(pipe):>10} {100 * c.matrix_utilization:7.1f}% "
                  f"{c.cycles:>10} {len(prog):>7} {c.instructions:>9}  "
                  f"{', '.join(f'{k} {v}' for k, v in top)}  ({time.time() - t0:.1f}s)")
    print()
    for name, fn in (("conv layer", conv), ("transformer block", block)):
        for target in ("edge", "server"):
            try:
                r = fn(target)
            except Exception as e:  # noqa: BLE001 - report what does not compile yet
                print(f"{name:18} {target:7} does not compile/run: {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:120]}")
                continue
            c, macs, nbytes = r
            print(f"{name:18} {target:7} {c.cycles:>10} cycles, roofline fraction "
                  f"{100 * roofline(c, target, macs, nbytes):5.1f}% (matrix {100 * c.matrix_utilization:.1f}%)")
    return 0


def conv(target: str):
    N, C, H, W, O = 1, 64, 32, 32, 64
    text = f"""func.func @main(%x: tensor<{N}x{C}x{H}x{W}xf32> {{graph.name = "x"}}) -> (tensor<{N}x{O}x{H}x{W}xf32> {{graph.name = "y"}}) {{
  %w = graph.weight @w : tensor<{O}x{C}x3x3xf32>
  %b = graph.weight @b : tensor<{O}xf32>
  %y = graph.conv2d %x, %w, %b {{padding = array<i64: 1, 1, 1, 1>}} : (tensor<{N}x{C}x{H}x{W}xf32>, tensor<{O}x{C}x3x3xf32>, tensor<{O}xf32>) -> tensor<{N}x{O}x{H}x{W}xf32>
  %r = graph.relu %y : (tensor<{N}x{O}x{H}x{W}xf32>) -> tensor<{N}x{O}x{H}x{W}xf32>
  func.return %r : tensor<{N}x{O}x{H}x{W}xf32>
}}"""
    rng = np.random.default_rng(0)
    w = {"w": rng.standard_normal((O, C, 3, 3)) * 0.05, "b": rng.standard_normal(O)}
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    _, c, _, _ = compile_and_run(text, w, [x], target)
    macs = N * O * H * W * C * 9
    nbytes = x.nbytes + O * C * 9 * 2 + N * O * H * W * 4
    return c, macs, nbytes


def block(target: str):
    S, D, F = 128, 256, 1024
    text = f"""func.func @main(%x: tensor<1x{S}x{D}xf32> {{graph.name = "x"}}) -> (tensor<1x{S}x{D}xf32> {{graph.name = "y"}}) {{
  %g = graph.weight @ln.weight : tensor<{D}xf32>
  %b = graph.weight @ln.bias : tensor<{D}xf32>
  %h = graph.layer_norm %x, %g, %b : (tensor<1x{S}x{D}xf32>, tensor<{D}xf32>, tensor<{D}xf32>) -> tensor<1x{S}x{D}xf32>
  %wq = graph.weight @q.weight : tensor<{D}x{D}xf32>
  %wk = graph.weight @k.weight : tensor<{D}x{D}xf32>
  %wv = graph.weight @v.weight : tensor<{D}x{D}xf32>
  %q = graph.linear %h, %wq : (tensor<1x{S}x{D}xf32>, tensor<{D}x{D}xf32>) -> tensor<1x{S}x{D}xf32>
  %k = graph.linear %h, %wk : (tensor<1x{S}x{D}xf32>, tensor<{D}x{D}xf32>) -> tensor<1x{S}x{D}xf32>
  %v = graph.linear %h, %wv : (tensor<1x{S}x{D}xf32>, tensor<{D}x{D}xf32>) -> tensor<1x{S}x{D}xf32>
  %q4 = graph.reshape %q : (tensor<1x{S}x{D}xf32>) -> tensor<1x{S}x4x{D // 4}xf32>
  %k4 = graph.reshape %k : (tensor<1x{S}x{D}xf32>) -> tensor<1x{S}x4x{D // 4}xf32>
  %v4 = graph.reshape %v : (tensor<1x{S}x{D}xf32>) -> tensor<1x{S}x4x{D // 4}xf32>
  %qt = graph.transpose %q4 {{perm = array<i64: 0, 2, 1, 3>}} : (tensor<1x{S}x4x{D // 4}xf32>) -> tensor<1x4x{S}x{D // 4}xf32>
  %kt = graph.transpose %k4 {{perm = array<i64: 0, 2, 1, 3>}} : (tensor<1x{S}x4x{D // 4}xf32>) -> tensor<1x4x{S}x{D // 4}xf32>
  %vt = graph.transpose %v4 {{perm = array<i64: 0, 2, 1, 3>}} : (tensor<1x{S}x4x{D // 4}xf32>) -> tensor<1x4x{S}x{D // 4}xf32>
  %a = graph.attention %qt, %kt, %vt {{causal = true}} : (tensor<1x4x{S}x{D // 4}xf32>, tensor<1x4x{S}x{D // 4}xf32>, tensor<1x4x{S}x{D // 4}xf32>) -> tensor<1x4x{S}x{D // 4}xf32>
  %at = graph.transpose %a {{perm = array<i64: 0, 2, 1, 3>}} : (tensor<1x4x{S}x{D // 4}xf32>) -> tensor<1x{S}x4x{D // 4}xf32>
  %a3 = graph.reshape %at : (tensor<1x{S}x4x{D // 4}xf32>) -> tensor<1x{S}x{D}xf32>
  %wo = graph.weight @o.weight : tensor<{D}x{D}xf32>
  %o = graph.linear %a3, %wo : (tensor<1x{S}x{D}xf32>, tensor<{D}x{D}xf32>) -> tensor<1x{S}x{D}xf32>
  %r = graph.add %o, %x : (tensor<1x{S}x{D}xf32>, tensor<1x{S}x{D}xf32>) -> tensor<1x{S}x{D}xf32>
  %w1 = graph.weight @fc1.weight : tensor<{F}x{D}xf32>
  %f = graph.linear %r, %w1 : (tensor<1x{S}x{D}xf32>, tensor<{F}x{D}xf32>) -> tensor<1x{S}x{F}xf32>
  %fa = graph.gelu %f {{approximate = "tanh"}} : (tensor<1x{S}x{F}xf32>) -> tensor<1x{S}x{F}xf32>
  %w2 = graph.weight @fc2.weight : tensor<{D}x{F}xf32>
  %f2 = graph.linear %fa, %w2 : (tensor<1x{S}x{F}xf32>, tensor<{D}x{F}xf32>) -> tensor<1x{S}x{D}xf32>
  %y = graph.add %f2, %r : (tensor<1x{S}x{D}xf32>, tensor<1x{S}x{D}xf32>) -> tensor<1x{S}x{D}xf32>
  func.return %y : tensor<1x{S}x{D}xf32>
}}"""
    rng = np.random.default_rng(0)
    w = {"ln.weight": rng.uniform(0.5, 1.5, D), "ln.bias": rng.standard_normal(D) * 0.1,
         "fc1.weight": rng.standard_normal((F, D)) * 0.05, "fc2.weight": rng.standard_normal((D, F)) * 0.05}
    for n in "qkvo":
        w[f"{n}.weight"] = rng.standard_normal((D, D)) * 0.05
    x = rng.standard_normal((1, S, D)).astype(np.float32)
    _, c, _, _ = compile_and_run(text, w, [x], target)
    macs = S * D * D * 4 + 2 * S * D * F + 2 * S * S * D  # projections, MLP, attention (dense)
    nbytes = x.nbytes * 2 + (4 * D * D + 2 * D * F) * 2
    return c, macs, nbytes


if __name__ == "__main__":
    sys.exit(main())
