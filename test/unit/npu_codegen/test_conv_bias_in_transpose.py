"""The bias of a "channels"-orientation conv (passes/graph_to_tile/conv.py, `ConvKernel._transpose`):
its accumulator holds [pixels, output channels] and is transposed back by one vector op per
row or column of the smaller side; those ops add the bias as they copy (`bmode=col` per output
channel down a column, `bmode=row` one channel's value along a row), so the epilogue has no
separate bias pass over the tile, which the in-order vector unit ran before the next tile's
window building. The same sums, so the same bits; tile interpreter = simulator with the race
checker on."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects import tile as t
from infer.passes.graph_to_tile import conv
from infer.passes.graph_to_tile.conv import ConvKernel
from infer.passes.testing import apply_pass, run_entry
from helpers.graph_programs import parse_with_weights, pointwise_conv
from helpers.tile_programs import npu_matches_tile


def compile_and_run(C: int, HW: int, O: int):
    """edge, bf16, a 1x1 conv + bias + relu: (output, cycles, the bias adds over whole output
    tiles, the bmodes of the adds inside the transposition)."""
    module = parse_with_weights(*pointwise_conv(C, HW, O, seed=8, scale=0.05), "conv.mlir")
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, C, HW, HW)).astype(np.float32)
    graph_ref = run_entry(module, [x])[0]
    apply_pass("graph-prepare-tiling,graph-to-tile{target=edge precision=bf16},tile-plan-memory{target=edge}", module)
    adds = [o for o in module.walk() if isinstance(o, t.VectorOp) and o.op.data == "add"]
    in_transpose = {o.bmode.data for o in adds if o.cols.value.data == 1}
    whole = sum(1 for o in adds if o.cols.value.data > 1)
    (y,), counters = npu_matches_tile(module, [x], "edge")
    np.testing.assert_allclose(y, graph_ref, rtol=0.05, atol=0.05)  # bf16 products
    return y, counters.cycles, whole, in_transpose


@pytest.mark.parametrize("C, HW, O, bmode", [(256, 7, 128, "col"),  # 49 pixels <= 128 channels: a column each
                                             (512, 7, 2048, "row")])  # tiles of 16 channels: a row each
def test_channels_conv_adds_its_bias_while_transposing(monkeypatch, C, HW, O, bmode):
    y, cycles, whole, in_transpose = compile_and_run(C, HW, O)
    assert whole == 0 and in_transpose == {bmode}, (whole, in_transpose)
    monkeypatch.setattr(ConvKernel, "bias_in_transpose", False)
    # (and the relu apart from the bias add: `add_relu` would compute both in the one pass, as
    # many passes as the transposition's bias and the relu, test_conv_add_relu.py)
    monkeypatch.setattr(conv, "fuses_relu", lambda *args: False)
    y_apart, cycles_apart, whole_apart, in_transpose_apart = compile_and_run(C, HW, O)
    assert whole_apart > 0 and not in_transpose_apart, (whole_apart, in_transpose_apart)
    assert y.tobytes() == y_apart.tobytes()
    assert cycles < cycles_apart, (cycles, cycles_apart)
