"""The next kernel's weight DMAs placed after the kernel before's first product nest
(prefetch_hoist._dma_anchor) on the server config: in a BERT block's FFN (o projection + residual
+ layer norm, the up projection reading that norm's kept rows in three k steps, GELU, the down
projection) the down projection's 1.2 MB of weights go out after the up projection's first k
step instead of after its last. The same bits as with them after the last nest (the simulator
bit for bit the tile interpreter, race checker on), close to the graph interpreter, fewer
cycles. A kernel that loads from DRAM after its first nest (the FFN alone: the up projection
loads its activations per k step) keeps them after its last."""

from __future__ import annotations

import numpy as np

from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import o_norm_ffn, parse_with_weights
from helpers.tile_programs import npu_matches_tile

M, D, F = 128, 384, 1536


def run(inputs: list[np.ndarray]) -> tuple[np.ndarray, int, int]:
    """-> (output, cycles, how many of the down projection's prefetch DMAs come before a
    product nest of the up projection)."""
    from infer.dialects import tile as t

    module = parse_with_weights(*o_norm_ffn(), "o_ffn.mlir")
    apply_pass("graph-prepare-tiling,graph-fuse-activation-prologue{target=server},"
               "graph-to-tile{target=server precision=bf16}", module)
    from infer.passes.graph_to_tile.prefetch_hoist import kernel_groups

    fn = next(op for op in module.walk() if op.name == "func.func")
    early = 0
    for kernel in kernel_groups(fn.body.block):  # (tile-to-npu's op-marker groups)
        nests = [i for i, op in enumerate(kernel) if any(isinstance(o, t.MatmulOp) for o in op.walk())]
        early += sum(1 for i, op in enumerate(kernel) if isinstance(op, t.DmaOp)
                     and t.PREFETCH_FOR_NEXT_ATTR in op.attributes and nests and i < nests[-1])
    apply_pass("tile-plan-memory{target=server}", module)
    (y,), counters = npu_matches_tile(module, inputs, "server")
    return y, counters.cycles, early


def test_down_weights_requested_after_the_up_projections_first_k_step(monkeypatch):
    from infer.passes.graph_to_tile import prefetch_hoist

    rng = np.random.default_rng(12)
    inputs = [rng.standard_normal((M, D)).astype(np.float32) for _ in range(2)]
    graph_ref = run_entry(parse_with_weights(*o_norm_ffn(), "o_ffn.mlir"), inputs)[0]
    y1, cycles1, early1 = run(inputs)
    monkeypatch.setattr(prefetch_hoist, "_dma_anchor", lambda before, anchor, queue_depth: anchor)
    y0, cycles0, early0 = run(inputs)
    assert early1 > 0 and early0 == 0
    assert y1.tobytes() == y0.tobytes()
    np.testing.assert_allclose(y1, graph_ref, rtol=5e-2, atol=5e-2)
    assert cycles1 < cycles0, (cycles1, cycles0)



def attention_then_o() -> tuple[str, dict[str, np.ndarray]]:
    """A causal 4-head attention block (bench_compiler_gemm's, without its MLP): q/k/v
    projections of a layer norm's output, the attention kernel (its heads' products are lone
    tile.matmuls), the o projection and the residual."""
    S, D = 128, 256
    x, h4, t4 = f"tensor<1x{S}x{D}xf32>", f"tensor<1x{S}x4x64xf32>", f"tensor<1x4x{S}x64xf32>"
    w = f"tensor<{D}x{D}xf32>"
    proj = "\n".join(f"""  %w{n} = graph.weight @{n}.weight : {w}
  %{n} = graph.linear %h, %w{n} : ({x}, {w}) -> {x}
  %{n}4 = graph.reshape %{n} : ({x}) -> {h4}
  %{n}t = graph.transpose %{n}4 {{perm = array<i64: 0, 2, 1, 3>}} : ({h4}) -> {t4}""" for n in "qkv")
    text = f"""
func.func @main(%x: {x} {{graph.name = "x"}}) -> ({x} {{graph.name = "y"}}) {{
  %g = graph.weight @ln.weight : tensor<{D}xf32>
  %b = graph.weight @ln.bias : tensor<{D}xf32>
  %h = graph.layer_norm %x, %g, %b : ({x}, tensor<{D}xf32>, tensor<{D}xf32>) -> {x}
{proj}
  %a = graph.attention %qt, %kt, %vt {{causal = true}} : ({t4}, {t4}, {t4}) -> {t4}
  %at = graph.transpose %a {{perm = array<i64: 0, 2, 1, 3>}} : ({t4}) -> {h4}
  %a3 = graph.reshape %at : ({h4}) -> {x}
  %wo = graph.weight @o.weight : {w}
  %o = graph.linear %a3, %wo : ({x}, {w}) -> {x}
  %y = graph.add %o, %x : ({x}, {x}) -> {x}
  func.return %y : {x}
}}
"""
    rng = np.random.default_rng(13)
    weights = {"ln.weight": rng.uniform(0.5, 1.5, D).astype(np.float32),
               "ln.bias": (rng.standard_normal(D) * 0.1).astype(np.float32)}
    for n in "qkvo":
        weights[f"{n}.weight"] = (rng.standard_normal((D, D)) * 0.05).astype(np.float32)
    return text, weights


def test_lone_matmuls_keep_the_prefetch_after_the_last(monkeypatch):
    """A kernel before whose first product is a lone tile.matmul (the attention's heads) does not
    take the next kernel's weight DMAs after its first product (prefetch_hoist._dma_anchor:
    placed there, tile-to-npu emitted them behind a wait for the last matmul): after its last
    product, or (`_before_the_last_products`, here off) in front of the last products that take
    as long as the DMAs."""
    from infer.dialects import tile as t
    from infer.passes.graph_to_tile import prefetch_hoist
    from infer.passes.graph_to_tile.prefetch_hoist import kernel_groups

    monkeypatch.setattr(prefetch_hoist, "_before_the_last_products", lambda *args: None)
    module = parse_with_weights(*attention_then_o(), "attn_o.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}", module)
    fn = next(op for op in module.walk() if op.name == "func.func")
    lone_with_prefetch = 0
    for kernel in kernel_groups(fn.body.block):
        nests = [i for i, op in enumerate(kernel) if any(isinstance(o, t.MatmulOp) for o in op.walk())]
        prefetches = [i for i, op in enumerate(kernel) if isinstance(op, t.DmaOp)
                      and t.PREFETCH_FOR_NEXT_ATTR in op.attributes]
        if nests and prefetches and isinstance(kernel[nests[0]], t.MatmulOp) and len(nests) > 1:
            lone_with_prefetch += 1
            assert all(i > nests[-1] for i in prefetches)
    assert lone_with_prefetch  # (the case this is about: o's weights prefetched in the attention)
