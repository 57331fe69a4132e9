"""One-tile GEMM results kept on chip for the next kernels (passes/graph_to_tile/gemm.py,
`LoweringContext.keep_on_chip`): a GEMM whose whole result is one local tile records it, and a
GEMM after it reading all of that result copies the tile instead of loading it back from DRAM
(a load that waited for the store and a DRAM latency of its own). The program stays
bit-identical to the tile interpreter with the race checker on, computes the same bits as with
the kept results turned off, and is faster."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects import tile as t
from infer.passes.graph_to_tile import gemm
from infer.passes.testing import apply_pass, run_entry
from infer.passes.tile_to_npu.common import root_buffer
from helpers.graph_programs import attention_blocks, head_split_attention, linear_chain, parse_with_weights
from helpers.kept_programs import compile_and_run, kept_against_off
from helpers.tile_programs import npu_matches_tile


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_second_gemm_reads_the_first_result_on_chip(monkeypatch, precision):
    """server, 128x256 -> 256 -> 256: both GEMMs are one tile; the second copies the first's
    result tile (bf16: straight into its operand tile; fp32: through its staging tile, since the
    split overwrites its source) and loads nothing the first stored. Turned off (no kernel may read
    a kept result), the second loads it back from DRAM: the same bits, more cycles."""
    text, weights = linear_chain(128, 256, 256, 256)
    x = np.random.default_rng(4).standard_normal((128, 256)).astype(np.float32)
    kept_against_off(monkeypatch, text, weights, x, gemm, "KEPT_RESULT_READERS", 0, precision)


def test_tiled_result_is_loaded_from_dram():
    """edge, 64x128 -> 512 -> 256: the first result does not fit one local tile, so nothing is
    kept and the second GEMM loads its activations from DRAM (still bit-identical)."""
    text, weights = linear_chain(64, 128, 512, 256)
    x = np.random.default_rng(5).standard_normal((64, 128)).astype(np.float32)
    _, _, reloads = compile_and_run(text, weights, "edge", "bf16", x)
    assert reloads >= 1


def test_attention_output_read_on_chip_by_the_projection(monkeypatch):
    """server, one query tile per head, heads merged side by side: the attention kernel copies
    each head's normalised output into one [S, HQ*D] tile as well as storing it, and the o
    projection after it copies its activations from that tile (no DMA reads the merged output).
    Same bits as with the kept tile turned off, fewer cycles, tile interpreter = simulator with
    the race checker on, close to the graph interpreter."""
    from infer.passes.graph_to_tile import attention

    S, HQ, HKV, D = 64, 4, 2, 32
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal((1, S, HQ * D)).astype(np.float32),
              rng.standard_normal((1, S, HKV * D)).astype(np.float32),
              rng.standard_normal((1, S, HKV * D)).astype(np.float32)]
    weights = {"wo": (rng.standard_normal((HQ * D, HQ * D)) * 0.1).astype(np.float32),
               "bo": rng.standard_normal(HQ * D).astype(np.float32)}

    def run():
        module = parse_with_weights(head_split_attention(1, S, HQ, HKV, D, o_projection=True), weights, "block.mlir")
        graph_ref = run_entry(module, inputs)[0]
        apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16},"
                   "tile-plan-memory{target=server}", module)
        # the merged output (K's transposed DRAM copy, which the attention reads, is smaller)
        intermediates = {a.buffer for a in module.walk() if isinstance(a, t.AllocOp) and t.space_of(a.buffer) == "dram"
                         and np.prod(a.buffer.type.get_shape()) == S * HQ * D}
        reloads = sum(1 for op in module.walk() if isinstance(op, t.DmaOp) and root_buffer(op.src) in intermediates)
        (y,), counters = npu_matches_tile(module, inputs, "server")
        np.testing.assert_allclose(y, graph_ref, rtol=0.05, atol=0.05)
        return y, counters.cycles, reloads

    y, cycles, reloads = run()
    assert reloads == 0
    monkeypatch.setattr(attention, "KEPT_OUTPUT_SHARE", 1 << 40)  # no room for the kept tile
    y_off, cycles_off, reloads_off = run()
    assert reloads_off >= 1
    assert y.tobytes() == y_off.tobytes()
    assert cycles < cycles_off, (cycles, cycles_off)


def test_several_m_tiles_read_the_kept_result_as_one_operand(monkeypatch):
    """server, 512x256 -> 384 -> 1408: the first GEMM is one tile, the second has several m
    tiles and its weights resident. It rounds the kept result to bf16 once, before its nest, and
    every tile's products read that operand in place (the first writing the accumulator), so no
    vector copy waits behind the previous m tile's epilogue. Same bits as with the per-step
    copies (`_whole_operand` off), fewer cycles, no DMA of the intermediate."""
    text, weights = linear_chain(512, 256, 384, 1408)
    x = (np.random.default_rng(7).standard_normal((512, 256)) * 0.25).astype(np.float32)
    kept_against_off(monkeypatch, text, weights, x, gemm, "_whole_operand", lambda *args: None, reloads_off=False)


@pytest.mark.parametrize("size, precision", [(64, "fp32"), (80, "bf16")])
def test_kept_results_of_attention_blocks_fit_the_edge_accumulator(monkeypatch, size, precision):
    """edge, two attention-shaped blocks in a row: the first block's output is kept for the
    second's two projections, and each projection's for the scores. 64x64 fp32: a one-tile
    nest does not rotate its accumulator tile, so it holds one 16 KiB buffer, and the kept
    block output, the kept q projection and the k projection's own tile take 48 KiB of the 64
    KiB accumulator (as double buffers they needed 96 KiB and tile-plan-memory refused the
    model). 80x80 bf16: three 25 KiB tiles do not fit; kept tiles take at most half of the
    accumulator and the kernels before their last reader size their tiles in the rest
    (`LoweringContext.memory_for_next_kernel`). Tile interpreter = simulator with the race
    checker on, the graph interpreter's values, the same bits with the kept results off. At
    64x64 the kept results spare DMAs of intermediates; at 80x80 the reserved accumulator
    makes the kernels in between take other tilings, whose DMAs offset that."""
    text, weights = attention_blocks(2, size)
    x = np.random.default_rng(11).standard_normal((size, size)).astype(np.float32)
    y, _, reloads = compile_and_run(text, weights, "edge", precision, x)
    monkeypatch.setattr(gemm, "KEPT_RESULT_READERS", 0)
    y_off, _, reloads_off = compile_and_run(text, weights, "edge", precision, x)
    assert reloads < reloads_off if size == 64 else reloads <= reloads_off, (reloads, reloads_off)
    assert y.tobytes() == y_off.tobytes()


def head_split(S: int, H: int, D: int) -> tuple[str, dict[str, np.ndarray]]:
    """x [1, S, H*D] -> linear (no bias) -> [1, S, H, D] -> transpose to heads [1, H, S, D]."""
    x, h4, heads = f"tensor<1x{S}x{H * D}xf32>", f"tensor<1x{S}x{H}x{D}xf32>", f"tensor<1x{H}x{S}x{D}xf32>"
    w = f"tensor<{H * D}x{H * D}xf32>"
    text = f"""func.func @main(%x: {x}) -> ({heads}) {{
  %w = graph.weight @w : {w}
  %q = graph.linear %x, %w : ({x}, {w}) -> {x}
  %q4 = graph.reshape %q : ({x}) -> {h4}
  %qt = graph.transpose %q4 {{perm = array<i64: 0, 2, 1, 3>}} : ({h4}) -> {heads}
  func.return %qt : {heads}
}}"""
    rng = np.random.default_rng(8)
    return text, {"w": (rng.standard_normal((H * D, H * D)) * 0.1).astype(np.float32)}


def test_head_split_stores_from_the_kept_result(monkeypatch):
    """server, a 256x256 projection (one tile, its accumulator kept) and its head split: the
    transpose stores each head's rows straight from the kept tile (no block loaded back from
    the projection's DRAM output). Same bits as with the kept results off, fewer cycles,
    tile interpreter = simulator with the race checker on."""
    text, weights = head_split(256, 4, 64)
    x = np.random.default_rng(9).standard_normal((1, 256, 256)).astype(np.float32)
    kept_against_off(monkeypatch, text, weights, x, gemm, "KEPT_RESULT_READERS", 0)


def test_embedding_norm_projection_chain_stays_on_chip(monkeypatch):
    """server: a 128-row embedding gather (one tile, kept), its RMSNorm (reads the kept rows,
    one tile, kept) and a projection of the normalised rows: no DMA reads the gather's or the
    norm's result back. With the norm's kept result off (`KEPT_NORM_READERS` 0) the projection
    loads it: the same bits, more cycles."""
    from infer.passes.graph_to_tile import norms

    V, W, N = 256, 128, 128
    ids_t, tab_t, h_t = f"tensor<{N}xi32>", f"tensor<{V}x{W}xf32>", f"tensor<{N}x{W}xf32>"
    text = f"""func.func @main(%ids: {ids_t}) -> {h_t} {{
  %t = graph.weight @table : {tab_t}
  %g = graph.weight @gamma : tensor<{W}xf32>
  %w = graph.weight @w : tensor<{W}x{W}xf32>
  %e = graph.gather %t, %ids {{axis = 0 : i64}} : ({tab_t}, {ids_t}) -> {h_t}
  %n = graph.rms_norm %e, %g {{axis = -1 : i64, epsilon = 1.0e-05 : f32}} : ({h_t}, tensor<{W}xf32>) -> {h_t}
  %y = graph.linear %n, %w : ({h_t}, tensor<{W}x{W}xf32>) -> {h_t}
  func.return %y : {h_t}
}}"""
    rng = np.random.default_rng(10)
    weights = {"table": rng.standard_normal((V, W)).astype(np.float32),
               "gamma": rng.standard_normal(W).astype(np.float32),
               "w": (rng.standard_normal((W, W)) * 0.1).astype(np.float32)}
    ids = rng.integers(0, V, N).astype(np.int32)
    kept_against_off(monkeypatch, text, weights, ids, norms, "KEPT_NORM_READERS", 0)
