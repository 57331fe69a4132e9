"""Weight tiles loaded through the weight path's transposer (`mx.loadw trans=1`, docs/isa.md;
`tile.matmul transpose_rhs`): the array multiplies by the transpose of the n x k tile as stored.
Checked at each level: the simulator (in a hardware loop, where the fast mode batches it, and
once outside: every mode computes the bits of the untransposed load of W stored transposed, in
the same cycles), tile-to-npu (the tile interpreter and the simulator agree bit for bit with the
race checker on), and attention, which now reads its key tiles as K is stored: no transposed
copy of K, outputs close to the graph interpreter on both configs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from helpers.sim_modes import assert_modes_agree, run_mode
from helpers.tile_programs import mr, npu_matches_tile, run_both
from infer.dialects import tile as t
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.testing import apply_pass, run_entry
from infer.target.asm import Program

CTX = make_context()
BF16 = np.dtype(ml_dtypes.bfloat16)
M, K, N = 8, 16, 12


def _program(trans: int) -> Program:
    """act [8, 16] bf16 at 0x0; W [16, 12] at 0x100 or, with trans, W^T [12, 16] at 0x400; a loop
    of 3 matmuls into three accumulator tiles (batched in the fast mode), then outside it one
    into the fourth tile and one accumulating onto it."""
    w = "w=r0+0x400, k=16, n=12, stride=32, dtype=bf16, trans=1" if trans else "w=r0+0x100, k=16, n=12, stride=24, dtype=bf16"
    return Program.from_asm(
        "dma.load dram=r0+0x0, local=r0+0x0, n0=2048, n1=1, n2=1, ds1=0, ds2=0, ls1=0, ls2=0, signal=s1\n"
        "nop wait=s1\n"
        "li rd=r1, imm=0x2000000\n"
        "loop count=3, body=3\n"
        f"  mx.loadw {w}\n"
        "  mx.matmul act=r0+0x0, acc=r1+0x0, m=8, astride=32, cstride=48, dtype=bf16, accum=0\n"
        "  addi rd=r1, rs=r1, imm=384\n"
        f"mx.loadw {w}\n"
        "mx.matmul act=r0+0x0, acc=r1+0x0, m=8, astride=32, cstride=48, dtype=bf16, accum=0\n"
        "mx.matmul act=r0+0x0, acc=r1+0x0, m=8, astride=32, cstride=48, dtype=bf16, accum=1, signal=s2\n"
        "dma.store dram=r0+0x800, local=r0+0x2000000, n0=1536, n1=1, n2=1, ds1=0, ds2=0, ls1=0, ls2=0, wait=s2\n"
        "halt")


def test_simulator_loads_the_transpose():
    rng = np.random.default_rng(1)
    act = rng.standard_normal((M, K)).astype(BF16)
    w = rng.standard_normal((K, N)).astype(BF16)
    dram = np.zeros(0x1000, np.uint8)
    dram[:act.nbytes] = act.view(np.uint8).ravel()
    dram[0x100:0x100 + w.nbytes] = w.view(np.uint8).ravel()
    wt = np.ascontiguousarray(w.T)
    dram[0x400:0x400 + wt.nbytes] = wt.view(np.uint8).ravel()
    outcomes = {}
    for trans in (0, 1):
        prog = _program(trans)
        assert_modes_agree(prog, dram)  # fast and functional = reference, bits and cycles
        counters, out, _, _ = run_mode(prog, dram, "reference")
        outcomes[trans] = (counters.cycles, out[0x800:0x800 + 4 * 4 * M * N].tobytes())
    assert outcomes[0] == outcomes[1]
    product = act.astype(np.float32) @ w.astype(np.float32)
    y = np.frombuffer(outcomes[1][1], np.float32).reshape(4, M, N)
    np.testing.assert_array_equal(y[:3], np.broadcast_to(product, (3, M, N)))
    np.testing.assert_array_equal(y[3], 2 * product)  # (doubling is exact)


def _tile_ir(target: str) -> str:
    """y[8, 12] = x[8, 16] @ (wt[12, 16])^T, the weight tile used transposed."""
    X, WT, Y = mr((M, K), "bf16", "dram"), mr((N, K), "bf16", "dram"), mr((M, N), "f32", "dram")
    LX, LW, ACC = mr((M, K), "bf16", "spad"), mr((N, K), "bf16", "spad"), mr((M, N), "f32", "acc")
    return f"""builtin.module attributes {{tile.target = "{target}"}} {{
  func.func @main(%x: {X}, %wt: {WT}, %y: {Y} {{tile.output}}) {{
    %c0 = arith.constant 0 : index
    %lx = tile.alloc : {LX}
    %lw = tile.alloc : {LW}
    %acc = tile.alloc : {ACC}
    tile.dma %x[%c0, %c0], %lx[%c0, %c0] {{shape = array<i64: {M}, {K}>}} : {X}, {LX}
    tile.dma %wt[%c0, %c0], %lw[%c0, %c0] {{shape = array<i64: {N}, {K}>}} : {WT}, {LW}
    tile.matmul %lx[%c0, %c0], %lw[%c0, %c0], %acc[%c0, %c0] {{m = {M} : i64, k = {K} : i64, n = {N} : i64, transpose_rhs = true}} : {LX}, {LW}, {ACC}
    tile.dma %acc[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: {M}, {N}>}} : {ACC}, {Y}
    func.return
  }}
}}"""


@pytest.mark.parametrize("target", ["edge", "server"])
def test_tile_matmul_transpose_rhs(target):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((M, K)).astype(BF16)
    wt = rng.standard_normal((N, K)).astype(BF16)
    prog, _, (y,) = run_both(_tile_ir(target), [x, wt], target)
    assert any(ins.d.name == "mx.loadw" and ins.as_dict()["trans"] == 1 for ins in prog.instrs)
    np.testing.assert_array_equal(y, x.astype(np.float32) @ wt.astype(np.float32).T)


def _attention_ir(S: int, H: int, D: int) -> str:
    qkv = f"tensor<1x{H}x{S}x{D}xf32>"
    return f"""func.func @main(%q: {qkv}, %k: {qkv}, %v: {qkv}) -> ({qkv}) {{
  %a = graph.attention %q, %k, %v {{causal = true}} : ({qkv}, {qkv}, {qkv}) -> {qkv}
  func.return %a : {qkv}
}}"""


@pytest.mark.parametrize("target", ["edge", "server"])
def test_attention_reads_key_tiles_as_stored(target):
    """No DRAM buffer holds K transposed; every q.K^T matmul uses its key tile transposed;
    tile interpreter = simulator (race checker on), close to the graph interpreter."""
    S, H, D = 64, 2, 32
    module = parse_ir(CTX, _attention_ir(S, H, D), "attention.mlir")
    verify_module(module)
    attach_weights(module, WeightStore())
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((1, H, S, D)).astype(np.float32) for _ in range(3)]
    graph_ref = run_entry(module, inputs)[0]
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision=bf16}},"
               f"tile-plan-memory{{target={target}}}", module)
    dram_shapes = [tuple(a.buffer.type.get_shape()) for a in module.walk()
                   if isinstance(a, t.AllocOp) and t.space_of(a.buffer) == "dram"]
    assert (1, H, D, S) not in dram_shapes, dram_shapes
    transposed = [op for op in module.walk() if isinstance(op, t.MatmulOp) and op.transpose_rhs.value.data]
    assert transposed and all(op.k.value.data <= D for op in transposed)  # (edge: 16-row depth steps)
    (y,), _ = npu_matches_tile(module, inputs, target)
    np.testing.assert_allclose(y, graph_ref, rtol=3e-2, atol=3e-2)
