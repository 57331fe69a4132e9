"""GGUF block-quantized weights kept packed on the NPU (issue 11, item 2):
`graph.linear(x, graph.dequantize_blocks(W))` compiles to codes and scales planes in DRAM that
`vec.dequant` expands next to the matrix unit (graph_to_tile/packed_gemm.py).

Each case is checked three ways: the simulator's output equals the tile interpreter's bit for
bit (the same tile program), and the graph interpreter's within test_e2e_models' criteria
(fp32: max error <= 1e-3 of the output range; bf16: cosine >= 0.999); the DRAM bytes read are
the activations plus the packed planes (q4_1: 5 bits a weight, q4_0 4.5, q8_0 8.5), from the
simulator's counters. Weights: random matrices quantized with gguf.quants (llama.cpp's own
quantizer).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import IntegerType

import infer
from helpers.sim_modes import assert_sim_modes_agree
from helpers.tile_programs import npu_matches_tile, tile_module
from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.dialects.graph_interpreter import run_module
from infer.dialects.ir_io import make_context, parse_ir
from infer.dialects.tile_interpreter import run_tile_module
from infer.dialects.weights import WeightStore, attach_weights, weights_of
from infer.passes.graph_to_tile.packed_stream import ring_depths
from infer.passes.pipelines import GraphPrepareTilingPass
from infer.passes.testing import apply_pass

gguf = pytest.importorskip("gguf")

BITS = {"q4_0": 4.5, "q4_1": 5.0, "q8_0": 8.5}


def packed_linear_module(fmt: str, M: int, K: int, N: int, *, bias: bool = False, relu: bool = False,
                         seed: int = 0):
    """y = linear(x[M, K], dequantize_blocks(W)) (+ bias, relu) with W [N, K] quantized by gguf."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((N, K)) * 0.1).astype(np.float32)
    raw = gguf.quants.quantize(w, getattr(gguf.GGMLQuantizationType, fmt.upper()))
    P = raw.shape[1]
    b_arg = ", %b" if bias else ""
    b_type = f", tensor<{N}xf32>" if bias else ""
    lines = [
        f"func.func @main(%x: tensor<{M}x{K}xf32>) -> tensor<{M}x{N}xf32> {{",
        f"  %p = graph.weight @w : tensor<{N}x{P}xui8>",
        *([f"  %b = graph.weight @b : tensor<{N}xf32>"] if bias else []),
        f'  %w = graph.dequantize_blocks %p {{format = "{fmt}"}} : (tensor<{N}x{P}xui8>) -> tensor<{N}x{K}xf32>',
        f"  %y = graph.linear %x, %w{b_arg} : (tensor<{M}x{K}xf32>, tensor<{N}x{K}xf32>{b_type}) -> tensor<{M}x{N}xf32>",
    ]
    if relu:
        lines.append(f"  %r = graph.relu %y : (tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32>")
    lines += [f"  func.return {'%r' if relu else '%y'} : tensor<{M}x{N}xf32>", "}"]
    module = parse_ir(make_context(), "\n".join(lines), "packed.mlir")
    store = WeightStore()
    store.set("w", raw)
    if bias:
        store.set("b", rng.standard_normal(N).astype(np.float32))
    attach_weights(module, store)
    return module


CASES = [  # fmt, target, precision, M, K, N, bias, relu: remainder tiles in n and k on both configs
    ("q4_1", "edge", "bf16", 3, 160, 100, False, False),
    ("q4_1", "server", "fp32", 5, 224, 200, True, False),
    ("q4_0", "edge", "fp32", 2, 96, 48, False, True),
    ("q4_0", "server", "bf16", 1, 256, 144, False, False),
    ("q8_0", "edge", "bf16", 4, 64, 40, True, True),
    ("q8_0", "server", "fp32", 3, 128, 136, False, False),
    # not resident (k split in steps): streamed (packed_stream, its ring shapes and peeled
    # tiles in test_streamed_product_structures below), fp32 emulation with a bias
    ("q8_0", "edge", "fp32", 3, 1024, 96, True, False),
    ("q4_1", "edge", "bf16", 1, 576, 1024, False, True),
    ("q4_0", "server", "bf16", 1, 2048, 4096, False, False),
]


@pytest.mark.parametrize("fmt,target,precision,M,K,N,bias,relu", CASES)
def test_packed_linear(fmt, target, precision, M, K, N, bias, relu):
    module = packed_linear_module(fmt, M, K, N, bias=bias, relu=relu)
    x = np.random.default_rng(1).standard_normal((M, K)).astype(np.float32)
    tiles, store = tile_module(module, target, precision)
    ops = list(tiles.walk())
    assert any(isinstance(o, t.DequantOp) for o in ops), "the weight was not kept packed"
    weight_types = sorted(str(o.buffer.type) for o in ops if isinstance(o, t.WeightOp))
    assert not any("bf16" in ty or "f32" in ty and "1x" not in ty and f"{N}xf32" not in ty
                   for ty in weight_types), weight_types  # codes, scales (and the bias): no dense copy
    expected_tile = run_tile_module(tiles, [x], weights=store)[0]

    exe = infer.compile(module, target=target, precision=precision)
    y = exe.run([x], check_races=True)[0]
    assert y.tobytes() == expected_tile.tobytes()  # the simulator runs the tile program bit for bit
    assert_sim_modes_agree(exe, [x], [y])
    ref = run_module(module, [x])[0].astype(np.float64)
    if precision == "fp32":  # test_e2e_models' criteria
        assert np.abs(y - ref).max() <= 1e-3 * (ref.max() - ref.min())
    else:
        assert (y.ravel() @ ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref)) >= 0.999
    counters = exe.last_report.counters
    weight_bits = (counters.dram_read_bytes - x.nbytes - (4 * N if bias else 0)) * 8 / (N * K)
    assert weight_bits == pytest.approx(BITS[fmt], rel=0.02), weight_bits


STREAMED = [  # fmt, target, precision, M, K, N, bias, relu, tiles TMxTNxTK: what it exercises
    # 18 steps: three-deep loads, two-deep expansions, a loop over groups; 4 n tiles: a loop
    # over two, the tile before the 8-wide remainder peeled (its look-ahead loads 8 columns)
    ("q4_1", "edge", "bf16", 3, 576, 200, True, True, "3x64x32"),
    # 9 steps: three-deep expansions too; 2 n tiles (a one-trip loop and the last); three m
    # tiles (a loop over two and a remainder row), fp32 emulation (hi/lo weights)
    ("q4_0", "server", "fp32", 5, 288, 128, False, False, "2x64x32"),
    # 4 steps: two-deep rings; one n tile; q8_0 codes
    ("q8_0", "edge", "bf16", 2, 128, 96, False, False, "2x96x32"),
]


@pytest.mark.parametrize("fmt,target,precision,M,K,N,bias,relu,tiles", STREAMED)
def test_streamed_product_structures(fmt, target, precision, M, K, N, bias, relu, tiles):
    """packed_stream's rings and peeled n tiles, with the tiles forced: the simulator equals the
    tile interpreter bit for bit (race checker on), the graph interpreter within the e2e
    tolerance, each packed byte once per m tile and the activations once per n tile."""
    module = packed_linear_module(fmt, M, K, N, bias=bias, relu=relu)
    x = np.random.default_rng(2).standard_normal((M, K)).astype(np.float32)
    ref = run_module(module, [x])[0].astype(np.float64)
    TM, TN, TK = map(int, tiles.split("x"))
    apply_pass(f'graph-prepare-tiling,graph-to-tile{{target={target} precision={precision} '
               f'overrides="kernel0={tiles}"}},tile-plan-memory{{target={target}}}', module)
    D, E = ring_depths(K // TK)
    code_rows = TK * {"q4_0": 4, "q4_1": 4, "q8_0": 8}[fmt] // 8
    codes = [o for o in module.walk() if isinstance(o, t.AllocOp) and t.space_of(o.buffer) == "spad"
             and o.buffer.type.get_shape() == (code_rows, TN) and o.buffers.value.data == 1
             and isinstance(o.buffer.type.element_type, IntegerType)]
    assert len(codes) == D  # the streamed path's load ring
    (y,), counters = npu_matches_tile(module, [x], target)
    if precision == "fp32":
        assert np.abs(y - ref).max() <= 1e-3 * (ref.max() - ref.min())
    else:
        assert (y.ravel() @ ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref)) >= 0.999
    m_tiles, n_tiles = -(-M // TM), -(-N // TN)
    weight_bits = (counters.dram_read_bytes - n_tiles * x.nbytes - m_tiles * (4 * N if bias else 0)) * 8 / (N * K)
    assert weight_bits == pytest.approx(m_tiles * BITS[fmt], rel=0.02), weight_bits  # per m tile


def test_packed_weight_is_not_folded():
    """graph-prepare-tiling (graph-constant-fold inside) keeps dequantize_blocks on the packed
    weight instead of adding a dense f32 weight."""
    module = packed_linear_module("q4_1", 2, 64, 32)
    GraphPrepareTilingPass().apply(make_context(), module)
    assert any(isinstance(o, g.DequantizeBlocksOp) for o in module.walk())
    assert sorted(weights_of(module).names()) == ["w"]


@pytest.mark.parametrize("qtype,target,precision", [("Q4_1", "server", "fp32"), ("Q8_0", "edge", "bf16")])
def test_tiny_llama_gguf_prefill(tmp_path, qtype, target, precision):
    """A 2-layer Llama GGUF (helpers.gguf_models) prefill: every projection and the LM head run
    on packed blocks (each matrix expanded once by the program's vec.dequants), the token
    embedding expands only the 8 rows it gathers, and the logits and KV outputs match the graph
    interpreter."""
    from helpers.gguf_models import GGUF_LLAMA, write_llama_gguf

    model = infer.import_model(write_llama_gguf(tmp_path / "tiny.gguf", qtype), phase="prefill", seq_len=8,
                               max_len=16)
    ids = np.random.default_rng(0).integers(0, GGUF_LLAMA["vocab"], (1, 8)).astype(np.int64)
    exe = infer.compile(model, target=target, precision=precision)
    ys = exe.run([ids], check_races=True)
    c = GGUF_LLAMA
    d = c["hidden"] // c["heads"]
    weights = c["layers"] * (2 * c["hidden"] ** 2 + 2 * c["hidden"] * c["kv_heads"] * d + 3 * c["hidden"] * c["inter"]) \
        + c["vocab"] * c["hidden"]
    # each matrix is expanded once: a whole-matrix (resident) tile in up to three straight-line
    # steps, so the dequant instructions of the program cover every weight exactly once; the
    # embedding's one dequant covers the gathered rows
    dequants = [i.as_dict() for i in exe.program.instrs if i.d.name == "vec.dequant"]
    assert 7 * c["layers"] + 2 <= len(dequants) <= 3 * (7 * c["layers"] + 1) + 1
    assert sum(v["rows"] * v["cols"] for v in dequants) == weights + 8 * c["hidden"]
    for y, ref in zip(ys, model.run([ids]), strict=True):
        y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
        if precision == "fp32":
            assert np.abs(y - ref).max() <= 1e-3 * (ref.max() - ref.min())
        else:
            assert (y.ravel() @ ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref)) >= 0.999


@pytest.mark.parametrize("target,M,K,N,stacked", [("server", 1, 576, 200, True), ("edge", 7, 576, 48, True),
                                                  ("server", 4, 1024, 4096, True), ("edge", 7, 576, 1024, True)])
def test_bf16_decode_rows_take_the_activations_in_two_passes(target, M, K, N, stacked):
    """bf16, up to 7 activation rows (a decode step: resident on server and, this small, on edge;
    streamed for server's 4096 x 1024 and edge's 1024 x 576): the activations go through each
    loaded weight tile as hi = bf16(x) and lo = bf16(x - hi) (packed_gemm.two_pass_activations),
    so the result is x in fp32 times the bf16 weights, with none of bf16(x)'s rounding. The
    resident and streamed paths stack lo below hi: one matmul of 2M rows per `mx.loadw`; the
    per-step rotation path would take two matmuls of M rows."""
    module = packed_linear_module("q4_1", M, K, N)
    x = np.random.default_rng(3).standard_normal((M, K)).astype(np.float32)
    exe = infer.compile(module, target=target, precision="bf16")
    y = exe.run([x], check_races=True)[0].astype(np.float64)
    w = gguf.quants.dequantize(weights_of(module).get("w"), gguf.GGMLQuantizationType.Q4_1).reshape(N, K)
    w_bf16 = w.astype(ml_dtypes.bfloat16).astype(np.float64)
    two_pass = x.astype(np.float64) @ w_bf16.T
    one_pass = x.astype(ml_dtypes.bfloat16).astype(np.float64) @ w_bf16.T
    scale = np.abs(two_pass).max()
    assert np.abs(y - two_pass).max() <= 1e-5 * scale  # fp32 accumulation (and lo's own rounding)
    assert np.abs(one_pass - two_pass).max() >= 30 * np.abs(y - two_pass).max()
    names = [i.d.name for i in exe.program.instrs]
    rows = {i.as_dict()["m"] for i in exe.program.instrs if i.d.name == "mx.matmul"}
    if stacked:
        assert names.count("mx.matmul") == names.count("mx.loadw") > 0 and rows == {2 * M}
    else:
        assert names.count("mx.matmul") == 2 * names.count("mx.loadw") > 0 and max(rows) <= M


@pytest.mark.parametrize("fmt,target,V,W,count", [("q8_0", "server", 50, 96, 7), ("q4_1", "edge", 40, 64, 3),
                                                   ("q4_0", "edge", 6, 8256, 2)])  # 8256: two column tiles on edge
def test_packed_embedding_gather(fmt, target, V, W, count):
    """gather(dequantize_blocks(table), ids) gathers the packed rows and expands them on chip
    (blocks along the rows): the rows equal the graph interpreter's bit for bit, no dense copy
    of the table is stored, and the DRAM bytes read are the gathered rows' packed bytes."""
    rng = np.random.default_rng(2)
    raw = gguf.quants.quantize((rng.standard_normal((V, W))).astype(np.float32),
                               getattr(gguf.GGMLQuantizationType, fmt.upper()))
    P = raw.shape[1]
    text = "\n".join([
        f"func.func @main(%ids: tensor<{count}xi64>) -> tensor<{count}x{W}xf32> {{",
        f"  %p = graph.weight @emb : tensor<{V}x{P}xui8>",
        f'  %e = graph.dequantize_blocks %p {{format = "{fmt}"}} : (tensor<{V}x{P}xui8>) -> tensor<{V}x{W}xf32>',
        f"  %g = graph.gather %e, %ids : (tensor<{V}x{W}xf32>, tensor<{count}xi64>) -> tensor<{count}x{W}xf32>",
        f"  func.return %g : tensor<{count}x{W}xf32>",
        "}"])
    module = parse_ir(make_context(), text, "gather.mlir")
    store = WeightStore()
    store.set("emb", raw)
    attach_weights(module, store)
    ids = rng.integers(0, V, count).astype(np.int64)
    tiles, weights = tile_module(module, target, "bf16")
    ops = list(tiles.walk())
    assert any(isinstance(o, t.DequantOp) and o.blocks.data == "row" for o in ops)
    assert not any("f32" in str(o.buffer.type) for o in ops if isinstance(o, t.WeightOp)), "a dense table copy"
    exe = infer.compile(module, target=target, precision="bf16")
    y = exe.run([ids], check_races=True)[0]
    assert y.tobytes() == run_module(module, [ids])[0].tobytes()
    assert_sim_modes_agree(exe, [ids], [y])
    # per index: the row's codes and scales (the GGUF row's P bytes) and the index, read as its
    # low 32 bits by each of the two gathers per column tile
    column_tiles = 2 if W > 8192 else 1
    assert exe.last_report.counters.dram_read_bytes == count * (P + 2 * 4 * column_tiles)
