"""graph.dequantize_blocks on the reference interpreter: bit-identical to
gguf-py's own `gguf.quants.dequantize` (llama.cpp's reference numerics)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, ModuleOp

from infer.dialects import graph as g
from infer.dialects.block_quant import BLOCK_FORMATS, dequantize_blocks
from infer.dialects.dtypes import tensor_type
from infer.dialects.graph_interpreter import ConstantCache, evaluate_op, run_module
from infer.dialects.weights import WeightStore, attach_weights

gguf = pytest.importorskip("gguf")

GGML_TYPE = {
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
    "q4_0": gguf.GGMLQuantizationType.Q4_0,
    "q4_1": gguf.GGMLQuantizationType.Q4_1,
}

# fp16 bit patterns a scale or minimum can take that ordinary quantization never writes
ODD_FP16 = [
    0x0000, 0x8000,  # +-0
    0x0001, 0x8001, 0x03FF, 0x83FF,  # smallest and largest subnormals
    0x0400, 0x7BFF, 0xFBFF,  # smallest normal, +-largest finite
    0x7C00, 0xFC00,  # +-inf
    0x7E00, 0x7C01, 0xFE00,  # NaNs (quiet, signalling payload, negative)
    0x3C00, 0x3555,  # 1.0, 1/3
]


def random_blocks(fmt_name: str, rows: int, blocks_per_row: int, rng: np.random.Generator) -> np.ndarray:
    """Random packed bytes with the odd fp16 values as scales and minima, and
    blocks whose quantized bytes are all 0x00, all 0xFF, 0x0F or 0xF0 (the
    extreme nibbles; for q8_0 the bytes 0x00, 0xFF = -1, 0x80 = -128, 0x7F = 127)."""
    fmt = BLOCK_FORMATS[fmt_name]
    packed = rng.integers(0, 256, size=(rows, blocks_per_row * fmt.block_bytes), dtype=np.uint8)
    blocks = packed.reshape(-1, fmt.block_bytes)
    n = blocks.shape[0]
    scales = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    scales[: len(ODD_FP16)] = ODD_FP16
    blocks[:, 0:2] = scales.view(np.uint8).reshape(n, 2)
    if fmt.has_min:
        minima = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
        minima[len(ODD_FP16) : 2 * len(ODD_FP16)] = ODD_FP16
        blocks[:, 2:4] = minima.view(np.uint8).reshape(n, 2)
    extremes = [0x00, 0xFF, 0x0F, 0xF0, 0x80, 0x7F]
    for i, byte in enumerate(extremes):
        blocks[2 * len(ODD_FP16) + i, fmt.quants_offset :] = byte
    return packed


@pytest.mark.parametrize("fmt_name", list(BLOCK_FORMATS))
def test_bit_identical_to_gguf(fmt_name):
    rng = np.random.default_rng(11)
    packed = random_blocks(fmt_name, rows=48, blocks_per_row=3, rng=rng)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = gguf.quants.dequantize(packed, GGML_TYPE[fmt_name])
    ours = dequantize_blocks(packed, fmt_name)
    assert ours.dtype == np.float32 and ours.shape == ref.shape == (48, 96)
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))
    assert np.isnan(ours).any() and np.isinf(ours).any()  # the odd scales were exercised

    # the graph op on the interpreter: same bits; f16/bf16 results are the f32 values rounded once
    for elem, np_dtype in ((Float32Type(), np.float32), (Float16Type(), np.float16),
                           (BFloat16Type(), ml_dtypes.bfloat16)):
        op = g.DequantizeBlocksOp(g.WeightOp("w", tensor_type(packed.shape, np.uint8)), fmt_name, elem)
        op.verify()
        (out,) = evaluate_op(op, [packed])
        with np.errstate(over="ignore"):
            expected = ref.astype(np_dtype)
        assert out.dtype == np.dtype(np_dtype) and out.shape == ref.shape
        bits = {2: np.uint16, 4: np.uint32}[out.dtype.itemsize]
        # NaN payloads may differ after rounding to a narrower type: compare NaN-ness there
        nan = np.isnan(expected.astype(np.float32))
        assert np.array_equal(np.isnan(out.astype(np.float32)), nan)
        assert np.array_equal(out.view(bits)[~nan], expected.view(bits)[~nan])


@pytest.mark.parametrize("fmt_name", list(BLOCK_FORMATS))
def test_quantized_real_values_round_trip(fmt_name):
    """Values quantized by gguf itself, in a linear layer run by run_module from the weight store."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 64)).astype(np.float32)
    packed = gguf.quants.quantize(w, GGML_TYPE[fmt_name])
    x = rng.standard_normal((2, 64)).astype(np.float32)
    store = WeightStore()
    store.set("w", packed)
    weight = g.WeightOp("w", tensor_type(packed.shape, np.uint8))
    deq = g.DequantizeBlocksOp(weight, fmt_name, Float32Type())
    from xdsl.dialects import func
    from xdsl.ir import Block, Region

    block = Block(arg_types=[tensor_type(x.shape, np.float32)])
    lin = g.LinearOp.create(operands=[block.args[0], deq.output], result_types=[tensor_type((2, 6), np.float32)])
    block.add_ops([weight, deq, lin, func.ReturnOp(lin.results[0])])
    fn = func.FuncOp("main", ([block.args[0].type], [lin.results[0].type]), Region(block))
    module = ModuleOp([fn])
    attach_weights(module, store)
    module.verify()
    (y,) = run_module(module, [x])
    w_ref = gguf.quants.dequantize(packed, GGML_TYPE[fmt_name])
    np.testing.assert_allclose(y, x @ w_ref.T, rtol=1e-5, atol=1e-5)
    # the quantization is close to the original weights (a sanity check of the format tables)
    assert np.abs(w_ref - w).max() < {"q8_0": 0.03, "q4_0": 0.5, "q4_1": 0.4}[fmt_name]

    # the constant cache: the second run reuses the dequantized weight and gives the same result
    cache = ConstantCache()
    first = run_module(module, [x], constant_cache=cache)
    assert deq in cache and weight in cache and lin not in cache
    again = run_module(module, [x + 1], constant_cache=cache)
    np.testing.assert_array_equal(first[0], y)
    np.testing.assert_allclose(again[0], (x + 1) @ w_ref.T, rtol=1e-5, atol=1e-5)
