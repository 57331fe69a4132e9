"""Data movement in big blocks: transposes as permuted copies (graph_to_tile/transpose.py: permute_copy) and
box copies (slice, concat, pad, broadcast) whose leading dim is the DMA plane dim.

graph interpreter (before) vs tile interpreter (after) bit-exact on many permutations
(innermost dim kept or moved, size-1 dims, mergeable runs, remainders), both targets; the
tile IR stays compact (DMA count independent of the tensor size: loops, not unrolling) and
the head split/merge of a transformer is a handful of big DMAs; a few permutations also run
on the simulator with the race checker (compile-npu, double-buffered blocks).
"""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.dialects import tile as t
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.passes import infer_passes
from infer.passes.graph_to_tile import GraphToTilePass
from infer.passes.graph_to_tile.transpose import canonical_perm
from infer.passes.testing import apply_pass, check_pass_preserves_semantics

CTX = make_context()


def _t(shape) -> str:
    return f"tensor<{'x'.join(map(str, shape))}xf32>"


def transpose_ir(shape, perm) -> str:
    out = tuple(shape[p] for p in perm)
    return f"""func.func @main(%x: {_t(shape)} {{graph.name = "x"}}) -> ({_t(out)} {{graph.name = "y"}}) {{
  %t = graph.transpose %x {{perm = array<i64: {', '.join(map(str, perm))}>}} : ({_t(shape)}) -> {_t(out)}
  func.return %t : {_t(out)}
}}"""


def module(text: str):
    m = parse_ir(CTX, text, "t.mlir")
    verify_module(m)
    return m


CASES = [
    ((1, 128, 4, 64), (0, 2, 1, 3)),  # head split
    ((1, 4, 128, 64), (0, 2, 1, 3)),  # head merge
    ((2, 3, 4), (2, 0, 1)),
    ((2, 5, 3, 7), (3, 1, 0, 2)),
    ((3, 4, 5, 6), (0, 3, 1, 2)),  # NCHW -> NHWC
    ((3, 4, 5, 6), (2, 3, 0, 1)),  # runs merged: a 2-D transpose
    ((6, 5), (1, 0)),
    ((1, 1, 3), (2, 0, 1)),  # size-1 dims only: a plain copy
    ((4, 1, 6, 1, 2), (4, 2, 0, 3, 1)),
    ((130, 70), (1, 0)),
    ((2, 3, 4, 5, 6), (4, 0, 3, 1, 2)),
    ((2, 3, 4, 5, 6), (1, 0, 2, 4, 3)),
    ((600, 700), (1, 0)),  # several blocks with remainders on edge
    ((64, 300, 8), (1, 0, 2)),
    ((6, 3, 5, 6, 4), (1, 2, 3, 0, 4)),
    ((3, 700, 40), (1, 0, 2)),
]


def test_canonical_perm():
    assert canonical_perm((1, 128, 4, 64), (0, 2, 1, 3)) == ([128, 4, 64], [1, 0, 2])
    assert canonical_perm((3, 4, 5, 6), (2, 3, 0, 1)) == ([12, 30], [1, 0])
    assert canonical_perm((2, 3, 4), (0, 1, 2)) == ([24], [0])
    assert canonical_perm((4, 1, 6, 1, 2), (4, 2, 0, 3, 1)) == ([4, 6, 2], [2, 1, 0])


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("shape,perm", CASES, ids=[f"{'x'.join(map(str, s))}-{''.join(map(str, p))}" for s, p in CASES])
def test_transpose_bit_exact(shape, perm, target):
    check_pass_preserves_semantics(module(transpose_ir(shape, perm)), GraphToTilePass(target=target))


def _dmas(shape, perm, target) -> int:
    m = module(transpose_ir(shape, perm))
    apply_pass(GraphToTilePass(target=target), m)
    return sum(1 for op in m.walk() if isinstance(op, t.DmaOp))


@pytest.mark.parametrize("target", ["edge", "server"])
def test_ir_stays_compact(target):
    """Loops, not unrolled copies: the DMA count of the IR does not grow with the size."""
    for perm in ((0, 2, 1, 3), (0, 3, 1, 2)):
        small, big = _dmas((1, 64, 4, 32), perm, target), _dmas((8, 512, 4, 32), perm, target)
        assert big <= small + 8, (perm, small, big)
        assert big <= 16, (perm, big)


@pytest.mark.parametrize("target", ["edge", "server"])
def test_head_split_is_a_few_big_dmas(target, capfd):
    """[1, 128, 4, 64] perm 0,2,1,3: one load per block and one store per head (rows of 256 B)."""
    m = module(transpose_ir((1, 128, 4, 64), (0, 2, 1, 3)))
    capfd.readouterr()
    apply_pass(GraphToTilePass(target=target, debug_tiling=True), m)
    err = capfd.readouterr().err
    assert "canonical 128x4x64 perm [1, 0, 2]" in err, err
    dmas = [op for op in m.walk() if isinstance(op, t.DmaOp)]
    loads = [op for op in dmas if op.is_load]
    assert len(loads) == 1 and len(dmas) == 2, [str(op) for op in dmas]  # the store sits in a loop over heads
    box = t._ints(loads[0].shape)
    assert int(np.prod(box)) >= 64 * 4 * 64, box  # >= 64 KiB moved per load


@pytest.mark.skipif("tile-to-npu" not in infer_passes(), reason="tile-to-npu is not registered")
@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("shape,perm", [((1, 128, 4, 64), (0, 2, 1, 3)), ((2, 96, 3, 40), (0, 3, 1, 2)),
                                        ((600, 700), (1, 0)), ((3, 700, 40), (1, 0, 2))])
def test_transpose_on_the_simulator(tmp_path, shape, perm, target):
    path = tmp_path / "t.mlir"
    path.write_text(transpose_ir(shape, perm))
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    exe = infer.compile(path, target=target)
    (y,) = exe.run([x], check_races=True)
    np.testing.assert_array_equal(y, np.transpose(x, perm))


# ---------------------------------------------------------------- box copies with planes

def one_op_ir(op: str, ins, out) -> str:
    args = ", ".join(f"%x{i}: {_t(s)}" for i, s in enumerate(ins))
    types = ", ".join(_t(s) for s in ins)
    return f"""func.func @main({args}) -> {_t(out)} {{
  %y = {op} : ({types}) -> {_t(out)}
  func.return %y : {_t(out)}
}}"""


BOX_CASES = {
    # rows of a few elements: the leading dim becomes the DMA's plane dim
    "slice-small-rows": ("graph.slice %x0 {starts = array<i64: 0, 0, 0>, ends = array<i64: 256, 8, 2>, "
                         "steps = array<i64: 1, 1, 1>}", [(256, 8, 4)], (256, 8, 2)),
    # a step on the plane dim is a source step
    "slice-plane-step": ("graph.slice %x0 {starts = array<i64: 1, 0, 1>, ends = array<i64: 256, 8, 4>, "
                         "steps = array<i64: 3, 1, 2>}", [(256, 8, 4)], (85, 8, 2)),
    # a column step: rows are strided elements, so the leading dim stays a loop (no third
    # strided DMA dim: that would be one transfer per plane)
    "slice-column-step": ("graph.slice %x0 {starts = array<i64: 0, 0, 0>, ends = array<i64: 600, 4, 8>, "
                          "steps = array<i64: 1, 1, 2>}", [(600, 4, 8)], (600, 4, 4)),
    "slice-negative-lead": ("graph.slice %x0 {starts = array<i64: 5, 0, 0>, ends = array<i64: -1, 7, 3>, "
                            "steps = array<i64: -1, 1, 1>}", [(6, 7, 5)], (6, 7, 3)),
    "concat-middle": ("graph.concat %x0, %x1 {axis = 1 : i64}", [(40, 6, 5), (40, 3, 5)], (40, 9, 5)),
    "pad": ("graph.pad %x0 {pads = array<i64: 0, 1, 2, 0, 0, 1>}", [(30, 3, 4)], (30, 4, 7)),
    "broadcast": ("graph.broadcast %x0", [(3, 1)], (20, 3, 5)),
}


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("case", sorted(BOX_CASES))
def test_box_copies_bit_exact(case, target):
    op, ins, out = BOX_CASES[case]
    check_pass_preserves_semantics(module(one_op_ir(op, ins, out)), GraphToTilePass(target=target))


@pytest.mark.parametrize("target", ["edge", "server"])
def test_small_rows_slice_is_one_dma_each_way(target):
    op, ins, out = BOX_CASES["slice-small-rows"]
    m = module(one_op_ir(op, ins, out))
    apply_pass(GraphToTilePass(target=target), m)
    dmas = [op for op in m.walk() if isinstance(op, t.DmaOp)]
    assert len(dmas) == 2 and all(t._ints(d.shape) == (256, 8, 2) for d in dmas), [str(d) for d in dmas]
    assert not any(op.name == "scf.for" for op in m.walk())


@pytest.mark.skipif("tile-to-npu" not in infer_passes(), reason="tile-to-npu is not registered")
@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("case", ["slice-small-rows", "slice-plane-step", "slice-column-step", "concat-middle"])
def test_box_copies_on_the_simulator(tmp_path, case, target):
    op, ins, out = BOX_CASES[case]
    path = tmp_path / "b.mlir"
    path.write_text(one_op_ir(op, ins, out))
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(s).astype(np.float32) for s in ins]
    exe = infer.compile(path, target=target)
    (y,) = exe.run(xs, check_races=True)
    np.testing.assert_array_equal(y, infer.import_model(path).run(xs)[0])
