"""tile-to-npu on real models: semaphore recycling (virtual semaphores assigned by live
range), fan-out beyond two signals (front-end relay), op markers (`npu.ops`); the demo CNN
compiles and runs bit-identically to the tile interpreter on edge and server."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.npu import ProgramOp
from infer.dialects.weights import WeightStore, attach_weights, weights_of
from infer.dialects.npu_attrs import layout_from_module, ops_from_module
from infer.passes.testing import apply_pass, run_entry
from infer.target.hw import load_config
from infer.target.sim import Simulator

from helpers.tile_programs import BF16, mr, run_both

CTX = make_context()


def token_balance(prog) -> Counter:
    """Dynamic signals minus waits per semaphore over a whole run (loop counts are constant:
    count_base is r0 in compiled code)."""
    net: Counter = Counter()

    def walk(lo: int, hi: int, mult: int) -> None:
        i = lo
        while i < hi:
            ins = prog.instrs[i]
            f = dict(zip([d.name for d in ins.d.fields], ins.values, strict=True))
            for w in (ins.wait, ins.wait2):
                if w:
                    net[w] -= mult
            for s in (ins.signal, ins.signal2):
                if s:
                    net[s] += mult
            if ins.name == "loop":
                assert f["count_base"] == 0
                walk(i + 1, i + 1 + f["body"], mult * max(0, f["count"]))
                i += 1 + f["body"]
            else:
                i += 1
    walk(0, len(prog.instrs), 1)
    return net


def check_program(module, prog, target: str) -> list[dict]:
    """Semaphores within the config, every token consumed (a "free" ring semaphore may keep
    its one idle token), op markers covering the program in order."""
    nsem = load_config(target).scalar.semaphores
    used = {s for i in prog.instrs for s in (i.wait, i.signal, i.signal2, i.wait2) if s}
    assert used and max(used) <= nsem
    assert all(v in (0, 1) for v in token_balance(prog).values()), token_balance(prog)
    ops = ops_from_module(module)
    assert ops and ops[0]["start"] == 0 and ops[-1]["end"] == len(prog.instrs)
    for a, b in zip(ops, ops[1:]):
        assert a["end"] == b["start"] and a["start"] < a["end"]
    assert all(o["name"] and o["kind"] for o in ops)
    return ops


def compile_graph(module, target: str, inputs):
    """graph module -> tile (reference run) -> npu program (simulated): bit-identical."""
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target}}},"
               f"tile-plan-memory{{target={target}}}", module)
    tile_ref = run_entry(module, inputs)
    apply_pass("tile-to-npu", module)
    verify_module(module)
    prog = next(o for o in module.walk() if isinstance(o, ProgramOp)).to_program()
    layout = layout_from_module(module)
    dram = layout.dram_image(inputs, weights_of(module))
    Simulator(target).run(prog, dram)
    outs = layout.read_outputs(dram)
    for o, r in zip(outs, tile_ref, strict=True):
        assert o.tobytes() == r.tobytes()  # bit-identical to the tile interpreter
    return prog, outs


@pytest.mark.parametrize("target", ["edge", "server"])
def test_demo_cnn_compiles_bit_identical(tmp_path, target):
    """conv+bn+relu, max pool, two 3x3 convs with a residual add, global pooling, linear:
    more semaphores over the program than the config has, recycled by live range."""
    from infer.tools.demo import build_demo_model
    from infer.tools.driver import graph_module

    module = graph_module(build_demo_model(tmp_path / "demo.onnx"))
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    prog, _ = compile_graph(module, target, [x])
    ops = check_program(module, prog, target)
    # one marker per graph-level kernel, named as debug-tiling names them
    assert [o["name"] for o in ops] == [f"kernel{i}" for i in range(6)]
    assert [o["kind"] for o in ops][:4] == ["matmul", "max", "matmul", "matmul"]


MLP_NO_BIAS = """
func.func @main(%x: tensor<32x64xf32> {graph.name = "x"}) -> (tensor<32x32xf32> {graph.name = "y"}) {
  %w = graph.weight @w1 : tensor<48x64xf32>
  %y = graph.linear %x, %w : (tensor<32x64xf32>, tensor<48x64xf32>) -> tensor<32x48xf32>
  %r = graph.relu %y : (tensor<32x48xf32>) -> tensor<32x48xf32>
  %w2 = graph.weight @w2 : tensor<32x48xf32>
  %y2 = graph.linear %r, %w2 : (tensor<32x48xf32>, tensor<32x48xf32>) -> tensor<32x32xf32>
  func.return %y2 : tensor<32x32xf32>
}
"""


@pytest.mark.parametrize("target", ["edge", "server"])
def test_mlp_without_biases(target):
    module = parse_ir(CTX, MLP_NO_BIAS, "mlp.mlir")
    verify_module(module)
    rng = np.random.default_rng(1)
    store = WeightStore()
    store.set("w1", (rng.standard_normal((48, 64)) * 0.2).astype(np.float32))
    store.set("w2", (rng.standard_normal((32, 48)) * 0.2).astype(np.float32))
    attach_weights(module, store)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    graph_ref = run_entry(module, [x])[0]
    prog, (y,) = compile_graph(module, target, [x])
    check_program(module, prog, target)
    np.testing.assert_allclose(y, graph_ref, rtol=1e-4, atol=1e-4)


def test_many_kernels_recycle_semaphores():
    """40 element-wise kernels in a row: far more pair semaphores over the program than the
    16 the config has; each is live only over the kernels it connects."""
    n = 40
    lines = [f"  %v{i + 1} = graph.{'relu' if i % 2 else 'gelu'} %v{i} : (tensor<16x64xf32>) -> "
             "tensor<16x64xf32>" for i in range(n)]
    text = ("func.func @main(%v0: tensor<16x64xf32> {graph.name = \"x\"}) -> "
            "(tensor<16x64xf32> {graph.name = \"y\"}) {\n" + "\n".join(lines)
            + f"\n  func.return %v{n} : tensor<16x64xf32>\n}}\n")
    module = parse_ir(CTX, text, "chain.mlir")
    verify_module(module)
    x = np.random.default_rng(2).standard_normal((16, 64)).astype(np.float32)
    prog, _ = compile_graph(module, "edge", [x])
    ops = check_program(module, prog, "edge")
    assert len(ops) >= 2


def test_fan_out_beyond_two_signals_relays():
    """A DMA load read by the vector unit, the matrix unit and the store DMA: three consumer
    engines, one instruction with two signal slots -> a front-end relay nop."""
    X, S = mr((16, 16), "bf16", "dram"), mr((16, 16), "bf16", "spad")
    Y, A, O = mr((16, 16), "f32", "dram"), mr((16, 16), "f32", "acc"), mr((16, 16), "f32", "spad")
    text = f"""builtin.module attributes {{tile.target = "edge"}} {{
  func.func @main(%x: {X}, %w: {X}, %c: {X} {{tile.output}}, %r: {X} {{tile.output}}, %y: {Y} {{tile.output}}) {{
    %c0 = arith.constant 0 : index
    %lx = tile.alloc : {S}
    %lw = tile.alloc : {S}
    %lr = tile.alloc : {S}
    %acc = tile.alloc : {A}
    %o = tile.alloc : {O}
    tile.dma %w[%c0, %c0], %lw[%c0, %c0] {{shape = array<i64: 16, 16>}} : {X}, {S}
    tile.dma %x[%c0, %c0], %lx[%c0, %c0] {{shape = array<i64: 16, 16>}} : {X}, {S}
    tile.vector "relu" %lr[%c0, %c0], %lx[%c0, %c0] {{rows = 16 : i64, cols = 16 : i64}} : {S}, {S}
    tile.dma %lx[%c0, %c0], %c[%c0, %c0] {{shape = array<i64: 16, 16>}} : {S}, {X}
    tile.matmul %lx[%c0, %c0], %lw[%c0, %c0], %acc[%c0, %c0] {{m = 16 : i64, k = 16 : i64, n = 16 : i64, accumulate = false}} : {S}, {S}, {A}
    tile.dma %lr[%c0, %c0], %r[%c0, %c0] {{shape = array<i64: 16, 16>}} : {S}, {X}
    tile.vector "copy" %o[%c0, %c0], %acc[%c0, %c0] {{rows = 16 : i64, cols = 16 : i64}} : {O}, {A}
    tile.dma %o[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: 16, 16>}} : {O}, {Y}
    func.return
  }}
}}"""
    rng = np.random.default_rng(4)
    x, w = (rng.standard_normal((16, 16)).astype(BF16) for _ in range(2))
    prog, _, (c, r, y) = run_both(text, [x, w])
    assert c.tobytes() == x.tobytes()
    relays = [i for i in prog.instrs if i.name == "nop" and i.wait and i.signal]
    assert relays, prog.to_asm()
    assert all(v in (0, 1) for v in token_balance(prog).values())
