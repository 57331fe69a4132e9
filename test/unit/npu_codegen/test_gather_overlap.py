"""The loads of the kernels after a long row gather issued around it (graph_to_tile/
gather_overlap.py) on the server config: a BERT-style embedding (a 128-token lookup in a DRAM
table, the token-type lookup in a two-row table, the sum with the position rows, the layer norm)
and the first projection. The token-type lookup's loads go in front of the row loop, the later
kernels' loads (position rows, norm parameters, the projection's weights and bias) right after
it; the same bits as without the move (tile interpreter = simulator, race checker on), close
to numpy, and fewer cycles."""

from __future__ import annotations

import numpy as np
from xdsl.ir import BlockArgument

from infer.dialects import tile as t
from infer.passes.testing import apply_pass

from helpers.graph_programs import parse_with_weights
from helpers.tile_programs import npu_matches_tile

# (a 2.6 MB word table: past the eighth of the scratchpad a gather copies on chip,
# gather.LOCAL_TABLE_SHARE, so a DMA per row, as MiniLM's 30522-row table; the two-row type
# table is copied on chip, a vector copy per row)
V, N, D = 5000, 128, 128
EMBED = f"""
func.func @main(%ids: tensor<1x{N}xi32> {{graph.name = "ids"}}, %types: tensor<1x{N}xi32> {{graph.name = "types"}}) -> (tensor<1x{N}x{D}xf32> {{graph.name = "q"}}) {{
  %word = graph.weight @word : tensor<{V}x{D}xf32>
  %e = graph.gather %word, %ids {{axis = 0 : i64}} : (tensor<{V}x{D}xf32>, tensor<1x{N}xi32>) -> tensor<1x{N}x{D}xf32>
  %type = graph.weight @type : tensor<2x{D}xf32>
  %f = graph.gather %type, %types {{axis = 0 : i64}} : (tensor<2x{D}xf32>, tensor<1x{N}xi32>) -> tensor<1x{N}x{D}xf32>
  %pos = graph.weight @pos : tensor<{N}x{D}xf32>
  %s = graph.add %e, %f : (tensor<1x{N}x{D}xf32>, tensor<1x{N}x{D}xf32>) -> tensor<1x{N}x{D}xf32>
  %s2 = graph.add %s, %pos : (tensor<1x{N}x{D}xf32>, tensor<{N}x{D}xf32>) -> tensor<1x{N}x{D}xf32>
  %g = graph.weight @g : tensor<{D}xf32>
  %b = graph.weight @b : tensor<{D}xf32>
  %n = graph.layer_norm %s2, %g, %b {{epsilon = 1.0e-12 : f64}} : (tensor<1x{N}x{D}xf32>, tensor<{D}xf32>, tensor<{D}xf32>) -> tensor<1x{N}x{D}xf32>
  %wq = graph.weight @wq : tensor<{D}x{D}xf32>
  %bq = graph.weight @bq : tensor<{D}xf32>
  %q = graph.linear %n, %wq, %bq : (tensor<1x{N}x{D}xf32>, tensor<{D}x{D}xf32>, tensor<{D}xf32>) -> tensor<1x{N}x{D}xf32>
  func.return %q : tensor<1x{N}x{D}xf32>
}}
"""


def _weights(rng) -> dict[str, np.ndarray]:
    return {"word": rng.standard_normal((V, D)).astype(np.float32),
            "type": rng.standard_normal((2, D)).astype(np.float32),
            "pos": rng.standard_normal((N, D)).astype(np.float32),
            "g": (1 + 0.1 * rng.standard_normal(D)).astype(np.float32),
            "b": (0.1 * rng.standard_normal(D)).astype(np.float32),
            "wq": (rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32),
            "bq": (0.1 * rng.standard_normal(D)).astype(np.float32)}


def _run(weights, inputs, overlap: bool, monkeypatch):
    """-> (output, cycles, the top-level tile ops in order)."""
    from infer.passes.graph_to_tile import driver

    if not overlap:
        monkeypatch.setattr(driver, "hoist_loads_around_row_gathers", lambda block, rows, spad: 0)
    module = parse_with_weights(EMBED, weights, "embed.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=fp32},tile-plan-memory{target=server}", module)
    body = next(op for op in module.walk() if isinstance(op, t.GatherRowsOp)).parent_block()
    ops = list(body.ops)
    (y,), counters = npu_matches_tile(module, inputs, "server")
    monkeypatch.undo()
    return y, counters.cycles, ops


def test_loads_go_around_the_row_gather(monkeypatch):
    rng = np.random.default_rng(11)
    weights = _weights(rng)
    ids = rng.integers(0, V, (1, N)).astype(np.int32)
    types = rng.integers(0, 2, (1, N)).astype(np.int32)
    y, cycles, ops = _run(weights, [ids, types], True, monkeypatch)
    y_off, cycles_off, ops_off = _run(weights, [ids, types], False, monkeypatch)

    s = weights["word"][ids[0]] + weights["type"][types[0]] + weights["pos"]
    n = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-12) * weights["g"] + weights["b"]
    np.testing.assert_allclose(y[0], n @ weights["wq"].T + weights["bq"], rtol=1e-4, atol=1e-4)
    assert y.tobytes() == y_off.tobytes()
    assert cycles < cycles_off, (cycles, cycles_off)

    def weight_key(op) -> str:
        source = t.root_buffer(op.src).owner
        return source.weight_key if isinstance(source, t.WeightOp) else ""

    word_gather = next(i for i, op in enumerate(ops) if isinstance(op, t.GatherRowsOp) and t.space_of(op.table) == "dram")
    type_gather = next(i for i, op in enumerate(ops) if isinstance(op, t.GatherRowsOp) and t.space_of(op.table) != "dram")
    moved = [i for i, op in enumerate(ops) if t.PREFETCH_FOR_LATER_ATTR in op.attributes]
    # the type lookup's indices and table in front of the row loop
    ahead = [ops[i] for i in moved if i < word_gather]
    assert any(weight_key(op) == "type" for op in ahead)
    assert any(isinstance(t.root_buffer(op.src), BlockArgument) for op in ahead)
    # the later kernels' loads right after it, before the type lookup's row copies: the position
    # rows (a folded constant), the norm's parameters, the projection's packed weights
    after = [ops[i] for i in moved if word_gather < i < type_gather]
    assert any(weight_key(op).startswith("const") and list(op.shape.get_values()) == [N, D] for op in after)
    assert sum(1 for op in after if weight_key(op).split(".")[-1].startswith("param")) == 2
    assert any(".weight.packed" in weight_key(op) for op in after)
    assert not any(t.PREFETCH_FOR_LATER_ATTR in op.attributes for op in ops_off)


def test_moved_buffers_stay_within_their_share_of_the_scratchpad(monkeypatch):
    """The moved loads' buffers live from the gather on: a kernel whose buffers would take the
    moved ones past MOVED_BUFFERS_SHARE of the scratchpad ends the moves (here the first one:
    nothing moves)."""
    from infer.passes.graph_to_tile import gather_overlap

    weights = _weights(np.random.default_rng(12))

    def moved() -> int:
        module = parse_with_weights(EMBED, weights, "embed.mlir")
        apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}", module)
        return sum(1 for op in module.walk() if t.PREFETCH_FOR_LATER_ATTR in op.attributes)

    assert moved() > 0
    monkeypatch.setattr(gather_overlap, "MOVED_BUFFERS_SHARE", 1e-6)
    assert moved() == 0
