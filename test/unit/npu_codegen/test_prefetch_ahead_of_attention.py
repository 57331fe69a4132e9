"""The o projection's weight DMAs in front of the attention loop before it
(prefetch_hoist._ahead_of_the_loop) on the server config: in a BERT self-attention of MiniLM's
shape with its head groups in a loop (attention.PIPELINED_STEPS 1) (12 heads of 32, 128 tokens, q / k / v made on chip by the projections before) the
attention kernel is one loop over head groups whose last iteration holds the heads'
normalisation and stores, so after the loop the front end reached the DMAs only with the last
products. In front of the loop: the same bits (the simulator bit for bit the tile interpreter,
race checker on), close to the graph interpreter, fewer cycles. In fp32 the loop streams its
Q / K / V tiles from DRAM, which would wait behind the weights: the DMAs stay after it."""

from __future__ import annotations

import numpy as np

from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import parse_with_weights, projected_attention
from helpers.tile_programs import npu_matches_tile

S, H, D = 128, 12, 32


def placement(module) -> list[str]:
    """Where the prefetches for the o projection sit in the attention kernel: 'ahead' of its
    product loop or 'after' it, one entry per kernel that has both."""
    from infer.dialects import tile as t
    from infer.passes.graph_to_tile.prefetch_hoist import kernel_groups

    fn = next(op for op in module.walk() if op.name == "func.func")
    where = []
    for kernel in kernel_groups(fn.body.block):
        loops = [i for i, op in enumerate(kernel) if any(isinstance(o, t.MatmulOp) for o in op.walk())]
        prefetches = [i for i, op in enumerate(kernel) if isinstance(op, t.DmaOp)
                      and t.PREFETCH_FOR_NEXT_ATTR in op.attributes]
        if len(loops) == 1 and prefetches:
            where.append("ahead" if all(i < loops[0] for i in prefetches) else "after")
    return where


def run(x: np.ndarray, precision: str = "bf16") -> tuple[np.ndarray, int, list[str]]:
    module = parse_with_weights(*projected_attention(S, H, D), "attn.mlir")
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target=server precision={precision}}}", module)
    where = placement(module)
    apply_pass("tile-plan-memory{target=server}", module)
    (y,), counters = npu_matches_tile(module, [x], "server")
    return y, counters.cycles, where


def test_o_weights_requested_ahead_of_the_attention_loop(monkeypatch):
    from infer.passes.graph_to_tile import attention, prefetch_hoist

    monkeypatch.setattr(attention, "PIPELINED_STEPS", 1)  # (the head groups in a loop)

    x = np.random.default_rng(15).standard_normal((1, S, H * D)).astype(np.float32)
    graph_ref = run_entry(parse_with_weights(*projected_attention(S, H, D), "attn.mlir"), [x])[0]
    y1, cycles1, where1 = run(x)
    monkeypatch.setattr(prefetch_hoist, "_ahead_of_the_loop", lambda before, anchor, run: None)
    y0, cycles0, where0 = run(x)
    assert "ahead" in where1 and "ahead" not in where0
    assert y1.tobytes() == y0.tobytes()
    np.testing.assert_allclose(y1, graph_ref, rtol=3e-2, atol=3e-2)
    assert cycles1 < cycles0, (cycles1, cycles0)


def test_a_loop_that_loads_its_operands_keeps_them_after(monkeypatch):
    from infer.passes.graph_to_tile import attention

    monkeypatch.setattr(attention, "PIPELINED_STEPS", 1)  # (the head groups in a loop)
    x = np.random.default_rng(16).standard_normal((1, S, H * D)).astype(np.float32)
    _, _, where = run(x, "fp32")
    assert where and "ahead" not in where


def test_head_groups_in_sequence_prepare_the_next_group_ahead(monkeypatch):
    """The same self-attention: its two head groups (6 heads each, one key tile) are emitted in
    sequence, the second group's queries and keys prepared ahead of the first group's outputs
    (attention.PIPELINED_STEPS): the same values within rounding (the o projection after the
    attention then starts from its bias rows), close to the graph interpreter, fewer cycles
    than with the groups in a loop."""
    from infer.passes.graph_to_tile import attention

    x = np.random.default_rng(18).standard_normal((1, S, H * D)).astype(np.float32)
    graph_ref = run_entry(parse_with_weights(*projected_attention(S, H, D), "attn.mlir"), [x])[0]
    y1, cycles1, _ = run(x)
    monkeypatch.setattr(attention, "PIPELINED_STEPS", 1)
    y0, cycles0, _ = run(x)
    np.testing.assert_allclose(y1, y0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y1, graph_ref, rtol=3e-2, atol=3e-2)
    assert cycles1 < cycles0, (cycles1, cycles0)


def test_o_weights_and_first_operand_before_the_last_heads(monkeypatch):
    """The same self-attention with its head groups in sequence (straight-line products): the o
    projection's weight DMAs go in front of the attention's last products that stream at
    least as many rows as the DMAs take cycles (prefetch_hoist._before_the_last_products), and
    o's first k step's copy of the first heads' outputs goes ahead of o's residual load and of
    the last heads' normalisation (`_operand_preparation` passes over the kernel's loads). The
    same bits as with the DMAs after the last product, fewer cycles."""
    from infer.dialects import tile as t
    from infer.passes.graph_to_tile import prefetch_hoist
    from infer.passes.graph_to_tile.prefetch_hoist import root_alloc
    from infer.passes.tile_memory_plan import LIVE_FROM_PREVIOUS

    def lowered():
        module = parse_with_weights(*projected_attention(S, H, D), "attn.mlir")
        apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}", module)
        return module

    def run_module(module, x):
        apply_pass("tile-plan-memory{target=server}", module)
        (y,), counters = npu_matches_tile(module, [x], "server")
        return y, counters.cycles

    x = np.random.default_rng(19).standard_normal((1, S, H * D)).astype(np.float32)
    module = lowered()
    ops = list(next(op for op in module.walk() if op.name == "func.func").body.block.ops)
    matmuls = [i for i, op in enumerate(ops) if isinstance(op, t.MatmulOp)]  # the attention's, top level
    prefetches = [i for i, op in enumerate(ops) if t.PREFETCH_FOR_NEXT_ATTR in op.attributes
                  and matmuls[0] < i]
    assert prefetches and max(prefetches) < matmuls[-1]  # in front of the last products
    # o's residual (x) is the function argument's last load; o's first operand copy is ahead of it
    x_loads = [i for i, op in enumerate(ops) if isinstance(op, t.DmaOp)
               and t.root_buffer(op.src) is ops[0].parent_block().args[0]]
    # (o's k step copies: the merged heads' fp32 [S, H*D] tile into a bf16 [S, 128] operand)
    first_copy = next(i for i, op in enumerate(ops) if isinstance(op, t.VectorOp) and op.op.data == "copy"
                      and LIVE_FROM_PREVIOUS in root_alloc(op.dst).attributes
                      and str(op.dst.type) == 'memref<128x128xbf16, "spad">'
                      and str(op.a.type) == f'memref<{S}x{H * D}xf32, "spad">')
    assert first_copy < x_loads[-1], (first_copy, x_loads[-1])
    y1, cycles1 = run_module(module, x)
    monkeypatch.setattr(prefetch_hoist, "_before_the_last_products", lambda *args: None)
    y0, cycles0 = run_module(lowered(), x)
    assert y1.tobytes() == y0.tobytes()
    assert cycles1 < cycles0, (cycles1, cycles0)
