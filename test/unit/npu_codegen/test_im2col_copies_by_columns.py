"""An im2col conv's tap copies by column groups (conv.py `ConvKernel.copy_column_groups`,
`chunked_im2col_products`), server bf16: a 3x3 64->64 conv at 56x56 (ResNet-50's stage 1), whose
576-row im2col goes through the array in 5 chunks of 2 taps. In the "pixels" orientation a
block of array-wide columns multiplies only its own columns, so each chunk's copies go by as
many column groups as the vector queue holds: the first chunk's all ahead of its matmuls, each
later chunk's right after the chunk before's matmuls of those columns. The array starts after
the first group's copies instead of the whole first chunk's (the first group ramped up, one
block, then two, then four: the array starts after one block's copies, and each group's copies
are made while it works through the group before), and a later chunk's blocks wait only for
their own columns, copied while the array works through the chunk before. The same
matmuls in the same order: the same bits (the simulator bit for bit the tile interpreter, race
checker on), close to the graph interpreter, fewer cycles (12,378 against 13,060; 12,472 with
equal groups)."""

from __future__ import annotations

import numpy as np

from infer.dialects import tile as t
from infer.passes.graph_to_tile import conv
from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import conv_chain, parse_with_weights
from helpers.tile_programs import npu_matches_tile

C, HW = 64, 56


def run(x: np.ndarray) -> tuple[np.ndarray, int, set[int]]:
    """-> (output, cycles, the column counts of the copies into the im2col buffer)."""
    module = parse_with_weights(*conv_chain(C, HW, [3]), "conv.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16},tile-plan-memory{target=server}",
               module)
    im2col = {a.buffer for a in module.walk() if isinstance(a, t.AllocOp)
              and a.buffer.type.get_shape()[0] == 9 * C + 3}  # (the taps' rows and the bias rows)
    widths = {op.cols.value.data for op in module.walk() if isinstance(op, t.VectorOp)
              and op.op.data == "copy" and t.root_buffer(op.dst) in im2col}
    (y,), counters = npu_matches_tile(module, [x], "server")
    return y, counters.cycles, widths


def test_tap_copies_go_by_column_groups(monkeypatch):
    x = np.random.default_rng(9).standard_normal((1, C, HW, HW)).astype(np.float32)
    reference = run_entry(parse_with_weights(*conv_chain(C, HW, [3]), "conv.mlir"), [x])[0]
    y, cycles, widths = run(x)
    monkeypatch.setattr(conv.ConvKernel, "copy_column_groups", lambda self, chunks, tq: [])
    y_whole, cycles_whole, widths_whole = run(x)
    # 3,192 columns (56 rows of 57: neighbouring rows share one padding column, planes.py): 4
    # groups, 3 of 7 array-wide blocks and the rest, the first ramped up as 1, 2 and 4 blocks
    # (`tiling_cost.im2col_copy_groups`)
    assert widths_whole == {3192} and widths == {128, 256, 512, 896, 3192 - 3 * 896}, (widths, widths_whole)
    assert y.tobytes() == y_whole.tobytes()
    np.testing.assert_allclose(y, reference, rtol=0, atol=0.02 * float(np.abs(reference).max()))
    assert cycles < cycles_whole, (cycles, cycles_whole)
