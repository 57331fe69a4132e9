"""The next kernel's weight DMAs in front of the kernel before's products
(prefetch_hoist._ahead_of_the_products) on the server config, where that kernel moves next to
nothing through the DRAM from there on (its loads and stores at most 1/16 of the moved bytes):
a 1x1 and two 3x3 512->512 convs at 7x7 (ResNet-50's stage 4), bf16, every conv's packed
weights resident (prefetched whole). The 1x1 conv loads its input and weights before its
products; the middle conv reads its input on chip and its weights from the buffer loaded
during the 1x1 conv; each stores 50 KB, against the next conv's 4.7 MB: those DMAs go out as
its products start instead of after them. The same bits (the simulator bit for bit the tile
interpreter, race checker on), close to the graph interpreter, fewer cycles. A GEMM that
streams its operands and stores its tiles (a chain of two linears) keeps them after."""

from __future__ import annotations

import numpy as np

from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import linear_chain, parse_with_weights
from helpers.tile_programs import npu_matches_tile

C, H = 512, 7


def three_convs() -> tuple[str, dict[str, np.ndarray]]:
    """x -> 1x1 conv -> relu -> 3x3 conv + bias -> relu -> 3x3 conv, random weights."""
    x = f"tensor<1x{C}x{H}x{H}xf32>"
    text = f"""
func.func @main(%x: {x} {{graph.name = "x"}}) -> ({x} {{graph.name = "y"}}) {{
  %w0 = graph.weight @w0 : tensor<{C}x{C}x1x1xf32>
  %c0 = graph.conv2d %x, %w0 {{stride = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>}} : ({x}, tensor<{C}x{C}x1x1xf32>) -> {x}
  %r0 = graph.relu %c0 : ({x}) -> {x}
  %w1 = graph.weight @w1 : tensor<{C}x{C}x3x3xf32>
  %b1 = graph.weight @b1 : tensor<{C}xf32>
  %c1 = graph.conv2d %r0, %w1, %b1 {{stride = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>}} : ({x}, tensor<{C}x{C}x3x3xf32>, tensor<{C}xf32>) -> {x}
  %r1 = graph.relu %c1 : ({x}) -> {x}
  %w2 = graph.weight @w2 : tensor<{C}x{C}x3x3xf32>
  %c2 = graph.conv2d %r1, %w2 {{stride = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>}} : ({x}, tensor<{C}x{C}x3x3xf32>) -> {x}
  func.return %c2 : {x}
}}
"""
    rng = np.random.default_rng(17)
    weights = {"w0": (rng.standard_normal((C, C, 1, 1)) * 0.05).astype(np.float32),
               "w1": (rng.standard_normal((C, C, 3, 3)) * 0.02).astype(np.float32),
               "b1": rng.standard_normal(C).astype(np.float32) * 0.1,
               "w2": (rng.standard_normal((C, C, 3, 3)) * 0.02).astype(np.float32)}
    return text, weights


def placement(module) -> list[str]:
    """Where the prefetches for the next kernel sit in each kernel that has them: 'ahead' of
    its first product op or 'after' it."""
    from infer.dialects import tile as t
    from infer.passes.graph_to_tile.prefetch_hoist import holds_matmul, kernel_groups

    fn = next(op for op in module.walk() if op.name == "func.func")
    where = []
    for kernel in kernel_groups(fn.body.block):
        products = [i for i, op in enumerate(kernel) if holds_matmul(op)]
        prefetches = [i for i, op in enumerate(kernel) if isinstance(op, t.DmaOp)
                      and t.PREFETCH_FOR_NEXT_ATTR in op.attributes]
        if products and prefetches:
            where.append("ahead" if all(i < products[0] for i in prefetches) else "after")
    return where


#: the 3x3 convs in channel steps of 128 (2.6-2.8 MB of buffers each), so each conv's buffers and
#: the next one's 4.7 MB of weights fit the share of the scratchpad two neighbouring kernels may
#: take together (`LoweringContext.room_beside_previous`): both 3x3 convs' weights are
#: prefetched. (The cost model takes one channel step of 512 since the 3x3 windows share their
#: padding columns: 5.2 MB of buffers, the last conv's weights then load in its own kernel.)
TILES = "kernel1=512x49x128,kernel2=512x49x128"


def run(module, x: np.ndarray) -> tuple[np.ndarray, int, list[str]]:
    apply_pass(f'graph-prepare-tiling,graph-to-tile{{target=server precision=bf16 overrides="{TILES}"}}', module)
    where = placement(module)
    apply_pass("tile-plan-memory{target=server}", module)
    (y,), counters = npu_matches_tile(module, [x], "server")
    return y, counters.cycles, where


def test_weights_requested_ahead_of_the_products_of_a_kernel_without_dram_traffic(monkeypatch):
    from infer.passes.graph_to_tile import prefetch_hoist

    x = np.random.default_rng(18).standard_normal((1, C, H, H)).astype(np.float32)
    graph_ref = run_entry(parse_with_weights(*three_convs(), "convs.mlir"), [x])[0]
    y1, cycles1, where1 = run(parse_with_weights(*three_convs(), "convs.mlir"), x)
    monkeypatch.setattr(prefetch_hoist, "_ahead_of_the_products", lambda before, run: None)
    y0, cycles0, where0 = run(parse_with_weights(*three_convs(), "convs.mlir"), x)
    assert where1 == ["ahead", "ahead"] and where0 == ["after", "after"], (where1, where0)
    assert y1.tobytes() == y0.tobytes()
    scale = float(np.abs(graph_ref).max())
    np.testing.assert_allclose(y1, graph_ref, rtol=0, atol=0.02 * scale)  # bf16 products
    assert cycles1 < cycles0, (cycles1, cycles0)


def test_a_gemm_that_streams_and_stores_keeps_them_after(monkeypatch):
    from infer.passes.graph_to_tile import gemm, prefetch_hoist

    monkeypatch.setattr(gemm, "KEPT_RESULT_READERS", 0)  # (the first result stored, not kept)
    asked: list[bool] = []
    original = prefetch_hoist._ahead_of_the_products

    def spy(before, run):
        found = original(before, run)
        asked.append(found is not None)
        return found

    monkeypatch.setattr(prefetch_hoist, "_ahead_of_the_products", spy)
    text, weights = linear_chain(128, 256, 256, 256)
    x = np.random.default_rng(4).standard_normal((128, 256)).astype(np.float32)
    _, _, where = run(parse_with_weights(text, weights, "chain.mlir"), x)
    assert asked == [False] and where == ["after"], (asked, where)
