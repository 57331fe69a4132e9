"""Races in double-buffered conv steps, found by the race checker (outputs were right only
because the simulator computes in program order).

A ring group's free token is released by the last instruction of its members' last uses
(rotation.py `instruction_parts`). A tile.matmul is an `mx.loadw` of its rhs, then an
`mx.matmul` of its lhs: in a 1x1 conv step (channels orientation) the window is the rhs and
the weight block the lhs, both double-buffered in one group and last used by the step's last
matmul. The group released its half at that `mx.loadw`, so the next round's weight-block DMA
overwrote the half while the `mx.matmul` still streamed it: a race on both configs in bf16.
A strided conv's step had the opposite case (test_strided_conv_window_waits_for_its_own_load)."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.dialects import tile as t
from infer.passes.tile_to_npu.rotation import instruction_parts

from helpers.graph_programs import parse_with_weights, pointwise_conv_chain, strided_constant_conv

C, M, O, HW = 256, 1024, 256, 14
CHAIN, WEIGHTS = pointwise_conv_chain(C, M, O, HW)


@pytest.mark.parametrize("target", ["server", "edge"])
def test_conv_chain_is_race_free(target):
    module = parse_with_weights(CHAIN, WEIGHTS, "chain.mlir")
    w1, w2 = WEIGHTS["w1"].reshape(M, C), WEIGHTS["w2"].reshape(O, M)
    x = np.random.default_rng(1).standard_normal((1, C, HW, HW)).astype(np.float32)
    exe = infer.compile(infer.Model(module), target=target, precision="bf16")
    y = np.asarray(exe.run([x], check_races=True)[0])
    ref = np.einsum("om,mp->op", w2, np.maximum(np.einsum("mc,cp->mp", w1, x.reshape(C, -1)), 0))
    np.testing.assert_allclose(y.reshape(O, -1), ref, rtol=0.05, atol=0.05)


def test_instruction_parts_of_a_matmul():
    """The rhs is read by the first instruction (mx.loadw), the lhs and the acc by the last
    (mx.matmul); every instruction of another op accesses all of its operands."""
    from infer.dialects.ir_io import make_context, parse_ir

    text = """
func.func @f() {
  %c0 = arith.constant 0 : index
  %x = tile.alloc : memref<16x16xbf16, "spad">
  %w = tile.alloc : memref<16x16xbf16, "spad">
  %y = tile.alloc : memref<16x16xf32, "acc">
  tile.matmul %x[%c0, %c0], %w[%c0, %c0], %y[%c0, %c0] {m = 16 : i64, k = 16 : i64, n = 16 : i64} : memref<16x16xbf16, "spad">, memref<16x16xbf16, "spad">, memref<16x16xf32, "acc">
  tile.fill %w[%c0, %c0] {rows = 16 : i64, cols = 16 : i64, value = 0.0 : f32} : memref<16x16xbf16, "spad">
  func.return
}"""
    module = parse_ir(make_context(), text, "matmul.mlir")
    x, w, y = (op for op in module.walk() if isinstance(op, t.AllocOp))
    matmul = next(op for op in module.walk() if isinstance(op, t.MatmulOp))
    fill = next(op for op in module.walk() if isinstance(op, t.FillOp))
    assert instruction_parts(matmul, w) == (0, 0)
    assert instruction_parts(matmul, x) == (1, 1)
    assert instruction_parts(matmul, y) == (1, 1)
    assert instruction_parts(fill, w) == (0, 0)


def test_strided_conv_window_waits_for_its_own_load():
    """A strided 3x3 conv over planes prepared in DRAM (edge, bf16, channel steps): each step's
    weight block and its four plane windows are DMA'd one step early, the weight block first,
    and the step's first matmul is the first consumer of the weight block (its lhs) and of the
    first plane's window (its rhs, read by the `mx.loadw`). The `mx.loadw` used to take the
    older token, the weight block's, and read the window while its DMA was still writing it (a
    race; ResNet-50's bf16 program on edge had it in its 3x3/2 256->256 conv). Now the front end
    takes the weight block's token first (`DoubleBuffering.take_earlier_load_first`)."""
    from infer.dialects.ir_io import make_context, parse_ir
    from infer.passes.testing import apply_pass

    from helpers.tile_programs import npu_matches_tile

    C, H, O = 64, 28, 64
    text = strided_constant_conv(C, H, O)
    module = parse_ir(make_context(), text, "strided.mlir")
    # (the tiling of the race: 16-channel steps over prepared planes, 32 output channels)
    apply_pass('graph-prepare-tiling,graph-to-tile{target=edge precision=bf16 overrides="kernel0=32x196x16"},'
               "tile-plan-memory{target=edge}", module)
    x = np.random.default_rng(3).standard_normal((1, C, H, H)).astype(np.float32)
    (out,), _ = npu_matches_tile(module, [x], "edge")  # the race checker faulted here
    padded = np.pad(x[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))[:, ::2, ::2]
    ref = 0.01 * windows.sum(axis=(0, 3, 4))
    np.testing.assert_allclose(out[0], np.broadcast_to(ref, (O, 14, 14)), rtol=0.02, atol=0.02)
