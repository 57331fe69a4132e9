"""A norm epilogue's last passes by column blocks (norms.normalize `tail_columns`, gemm.py on
latency-bound targets) and the next kernel's first rounding copy right behind the first block
(prefetch_hoist._operand_preparation): in a BERT block's FFN on the server config (o projection +
residual + layer norm, the up projection reading the norm's kept rows in three k steps) the
up projection's first k step starts while the vector unit finishes the norm's other blocks.
Every element gets the same operations: the same bits as one full-width tail (the simulator
bit for bit the tile interpreter, race checker on), close to the graph interpreter, fewer
cycles."""

from __future__ import annotations

import numpy as np

from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import o_norm_ffn, parse_with_weights
from helpers.tile_programs import npu_matches_tile


def run(inputs: list[np.ndarray]) -> tuple[np.ndarray, int, list[str]]:
    """-> (output, cycles, the top-level vector ops from the norm's rsqrt to the up projection's
    first product loop: 'tail' for the norm's, 'copy' for the up projection's rounding copy)."""
    from infer.dialects import tile as t

    module = parse_with_weights(*o_norm_ffn(), "o_ffn.mlir")
    apply_pass("graph-prepare-tiling,graph-fuse-activation-prologue{target=server},"
               "graph-to-tile{target=server precision=bf16}", module)
    fn = next(op for op in module.walk() if op.name == "func.func")
    ops = list(fn.body.block.ops)
    start = next(i for i, op in enumerate(ops) if isinstance(op, t.VectorOp) and op.op.data == "rsqrt")
    order = []
    for op in ops[start + 1:]:
        if isinstance(op, t.VectorOp):
            order.append("copy" if op.op.data == "copy" and op.dst.type.get_element_type().name == "bf16"
                         else "tail")
        elif any(isinstance(o, t.MatmulOp) for o in op.walk()):
            break
    apply_pass("tile-plan-memory{target=server}", module)
    (y,), counters = npu_matches_tile(module, inputs, "server")
    return y, counters.cycles, order


def test_the_up_projection_starts_behind_the_norms_first_block(monkeypatch):
    from infer.passes.graph_to_tile import gemm

    rng = np.random.default_rng(17)
    inputs = [rng.standard_normal((128, 384)).astype(np.float32) for _ in range(2)]
    graph_ref = run_entry(parse_with_weights(*o_norm_ffn(), "o_ffn.mlir"), inputs)[0]
    y1, cycles1, order1 = run(inputs)
    assert order1[:4] == ["tail", "tail", "tail", "copy"] and order1.count("tail") == 9, order1
    monkeypatch.setattr(gemm, "NORM_TAIL_BY_BLOCKS", False)
    y0, cycles0, order0 = run(inputs)
    assert order0.index("copy") == 3 and order0.count("tail") == 3, order0
    assert y1.tobytes() == y0.tobytes()
    np.testing.assert_allclose(y1, graph_ref, rtol=5e-2, atol=5e-2)
    assert cycles1 < cycles0, (cycles1, cycles0)
