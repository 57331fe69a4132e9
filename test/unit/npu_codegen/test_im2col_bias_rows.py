"""The bias of an im2col conv added by its matmuls (conv.py `ConvKernel.bias_rows`,
`tiling_cost.im2col_bias_rows`): where the im2col operand's depth has spare rows, three rows of
ones follow the taps' rows and the weight block's matching columns hold the bias in bf16 parts,
so the epilogue has no bias pass (the server stem's had taken 1.6 K cycles after its last
matmul). Bit-identical to the tile interpreter with the race checker on, close to the graph
interpreter in bf16 and in the fp32 emulation."""

from __future__ import annotations

import bench_roofline  # bench/ is on the test path (pyproject.toml)
import ml_dtypes
import numpy as np
import pytest

from infer.dialects import tile as t
from infer.passes import tiling_cost
from infer.passes.graph_to_tile import conv
from infer.passes.graph_to_tile.conv import bias_parts, im2col_chunks
from infer.passes.testing import apply_pass, run_entry
from helpers.tile_programs import npu_matches_tile


def test_bias_parts_are_bf16_values_summing_to_the_bias() -> None:
    rng = np.random.default_rng(0)
    bias = np.concatenate([rng.standard_normal(500) * 10.0 ** rng.integers(-6, 4, 500),
                           [0.0, -0.0, 1.0, 3.0e38, 1.0e-30]]).astype(np.float32)
    parts = bias_parts(bias, tiling_cost.IM2COL_BIAS_ROWS)
    assert parts.shape == (bias.size, 3) and parts.dtype == np.float32
    np.testing.assert_array_equal(parts, parts.astype(ml_dtypes.bfloat16).astype(np.float32))
    total = parts.astype(np.float64).sum(axis=1)
    # three 8-bit parts carry the 24-bit significand: the sum is the bias (to float64's rounding)
    np.testing.assert_allclose(total, bias.astype(np.float64), rtol=2.0 ** -23, atol=0)


@pytest.mark.parametrize("taps, tc, rows", [(49, 3, 128), (9, 64, 128), (9, 16, 128), (25, 5, 16)])
def test_im2col_chunks_hold_the_bias_rows_in_the_last_chunk(taps, tc, rows) -> None:
    extra = tiling_cost.im2col_bias_rows(True, taps, tc, tc, rows, "pixels")
    assert extra == 3  # (each of these depths has spare rows)
    chunks = im2col_chunks(taps, tc, rows, extra)
    assert sum(c[1] for c in chunks) == taps * tc + extra and all(c[1] <= rows for c in chunks)
    assert len(chunks) == len(im2col_chunks(taps, tc, rows))  # no extra chunk
    k0, k, t_lo, t_hi = chunks[-1]
    assert k0 + k == taps * tc + extra and t_hi == taps and t_hi > t_lo


def test_bias_rows_only_where_they_fit() -> None:
    assert tiling_cost.im2col_bias_rows(True, 9, 128, 128, 128, "pixels") == 0  # no spare rows
    assert tiling_cost.im2col_bias_rows(True, 9, 14, 14, 128, "pixels") == 0  # 2 spare rows
    assert tiling_cost.im2col_bias_rows(True, 9, 64, 64, 128, "channels") == 0
    assert tiling_cost.im2col_bias_rows(True, 9, 32, 64, 128, "pixels") == 0  # two channel steps
    assert tiling_cost.im2col_bias_rows(False, 9, 64, 64, 128, "pixels") == 0


def compile_conv(C: int, H: int, O: int, k: int, stride: int, target: str, precision: str, x: np.ndarray):
    """The bench's conv + bias + relu layer (`bench_roofline.conv_model`, padding k // 2):
    (output, cycles, the im2col operands' depths, bias adds on the vector unit)."""
    module = bench_roofline.conv_model(C, H, O, k, stride, k // 2).module
    ref = run_entry(module, [x])[0]
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision={precision}}},"
               f"tile-plan-memory{{target={target}}}", module)
    copies = [o for o in module.walk() if isinstance(o, t.VectorOp) and o.op.data == "copy"
              and t.space_of(o.dst) == "spad" and str(o.dst.type.element_type) == "bf16"]
    depths = {t.root_buffer(o.dst).type.get_shape()[0] for o in copies}
    bias_adds = sum(1 for o in module.walk() if isinstance(o, t.VectorOp) and o.op.data == "add"
                    and o.bmode is not None and o.bmode.data == "col")
    (y,), counters = npu_matches_tile(module, [x], target)
    tolerance = 0.05 if precision == "bf16" else 1e-4
    np.testing.assert_allclose(y, ref, rtol=tolerance, atol=tolerance)
    return y, counters.cycles, depths, bias_adds


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
@pytest.mark.parametrize("C, H, O, k, stride, target", [(3, 64, 64, 7, 2, "server"), (3, 64, 64, 7, 2, "edge"),
                                                        (64, 12, 64, 3, 1, "server")],
                         ids=["stem-server", "stem-edge", "3x3-server"])
def test_im2col_conv_adds_its_bias_in_the_matmuls(C, H, O, k, stride, target, precision, monkeypatch) -> None:
    """A 7x7/2 stem of 3 channels (147 rows: 150 with the bias rows) and a 3x3 conv of 64
    channels (576: 579; edge picks no im2col for it) with a bias and a relu: the im2col operand
    carries the three bias rows, no vector `add` of the bias is left, the values match the graph
    interpreter; with the bias rows off the same conv has its bias pass back."""
    x = np.random.default_rng(2).standard_normal((1, C, H, H)).astype(np.float32)
    y, cycles, depths, bias_adds = compile_conv(C, H, O, k, stride, target, precision, x)
    assert k * k * C + 3 in depths, depths
    assert bias_adds == 0
    monkeypatch.setattr(conv.ConvKernel, "bias_in_im2col", False)
    _, _, depths_off, bias_adds_off = compile_conv(C, H, O, k, stride, target, precision, x)
    assert k * k * C in depths_off and bias_adds_off >= 1


def test_server_stem_is_faster_with_its_bias_in_the_matmuls(monkeypatch) -> None:
    """The server stem's one output tile: the bias pass over it ran after the last matmul."""
    x = np.random.default_rng(3).standard_normal((1, 3, 64, 64)).astype(np.float32)
    _, cycles, _, _ = compile_conv(3, 64, 64, 7, 2, "server", "bf16", x)
    monkeypatch.setattr(conv.ConvKernel, "bias_in_im2col", False)
    _, cycles_off, _, _ = compile_conv(3, 64, 64, 7, 2, "server", "bf16", x)
    assert cycles < cycles_off, (cycles, cycles_off)
