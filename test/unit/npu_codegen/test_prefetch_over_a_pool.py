"""A classifier's weights requested over the global pool before it (prefetch_hoist.py
`_passed_over`, `_host_before`), server bf16, ResNet-50's tail: a bottleneck (1x1 2048->512,
3x3 512->512, 1x1 512->2048 whose residual is the input, read from DRAM), the global average
pool, a 2048->1000 linear. The pool has no products to put the linear's 4 MB of weights among
and loads nothing, so they go into a kernel before it: not after the last conv's products (its
residual loads and its store rule out going ahead of them), but ahead of the 3x3 conv's, whose
products stream longer than the transfer takes (24,173 cycles against 26,997 with the weights
requested by the linear itself). The same bits (the simulator bit for bit the tile
interpreter, race checker on), close to the graph interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects import tile as t
from infer.passes.graph_to_tile import prefetch_hoist
from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import parse_with_weights
from helpers.tile_programs import npu_matches_tile


def tail() -> tuple[str, dict[str, np.ndarray]]:
    """x [1, 2048, 7, 7] -> a bottleneck (1x1 2048->512, 3x3 512->512, 1x1 512->2048, each with
    bias and relu, + x before the last relu) -> global average pool -> linear 2048->1000."""
    wide, x = "tensor<1x2048x7x7xf32>", "tensor<1x512x7x7xf32>"
    pooled, flat = "tensor<1x2048x1x1xf32>", "tensor<1x2048xf32>"
    text = f"""func.func @main(%in: {wide} {{graph.name = "x"}}) -> (tensor<1x1000xf32> {{graph.name = "y"}}) {{
  %w0 = graph.weight @w0 : tensor<512x2048x1x1xf32>
  %b0 = graph.weight @b0 : tensor<512xf32>
  %c0 = graph.conv2d %in, %w0, %b0 : ({wide}, tensor<512x2048x1x1xf32>, tensor<512xf32>) -> {x}
  %r0 = graph.relu %c0 : ({x}) -> {x}
  %w1 = graph.weight @w1 : tensor<512x512x3x3xf32>
  %b1 = graph.weight @b1 : tensor<512xf32>
  %c1 = graph.conv2d %r0, %w1, %b1 {{padding = array<i64: 1, 1, 1, 1>}} : ({x}, tensor<512x512x3x3xf32>, tensor<512xf32>) -> {x}
  %r1 = graph.relu %c1 : ({x}) -> {x}
  %w2 = graph.weight @w2 : tensor<2048x512x1x1xf32>
  %b2 = graph.weight @b2 : tensor<2048xf32>
  %c2 = graph.conv2d %r1, %w2, %b2 : ({x}, tensor<2048x512x1x1xf32>, tensor<2048xf32>) -> {wide}
  %s = graph.add %c2, %in : ({wide}, {wide}) -> {wide}
  %r2 = graph.relu %s : ({wide}) -> {wide}
  %g = graph.global_avg_pool %r2 : ({wide}) -> {pooled}
  %f = graph.reshape %g : ({pooled}) -> {flat}
  %fw = graph.weight @fw : tensor<1000x2048xf32>
  %fb = graph.weight @fb : tensor<1000xf32>
  %y = graph.linear %f, %fw, %fb : ({flat}, tensor<1000x2048xf32>, tensor<1000xf32>) -> tensor<1x1000xf32>
  func.return %y : tensor<1x1000xf32>
}}"""
    rng = np.random.default_rng(21)
    weights = {"w0": (rng.standard_normal((512, 2048, 1, 1)) / np.sqrt(2048)).astype(np.float32),
               "b0": (rng.standard_normal(512) * 0.1).astype(np.float32),
               "w1": (rng.standard_normal((512, 512, 3, 3)) / np.sqrt(4608)).astype(np.float32),
               "b1": (rng.standard_normal(512) * 0.1).astype(np.float32),
               "w2": (rng.standard_normal((2048, 512, 1, 1)) / np.sqrt(512)).astype(np.float32),
               "b2": (rng.standard_normal(2048) * 0.1).astype(np.float32),
               "fw": (rng.standard_normal((1000, 2048)) / np.sqrt(2048)).astype(np.float32),
               "fb": (rng.standard_normal(1000) * 0.1).astype(np.float32)}
    return text, weights


def run(inputs: list[np.ndarray]) -> tuple[np.ndarray, int, list[int]]:
    """-> (output, cycles, the index of each op-marker group holding the linear's weight DMAs
    with the group's first product after them)."""
    module = parse_with_weights(*tail(), "tail.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}", module)
    fn = next(op for op in module.walk() if op.name == "func.func")
    groups = prefetch_hoist.kernel_groups(fn.body.block)
    where = []
    for i, group in enumerate(groups):
        dmas = [j for j, op in enumerate(group) if isinstance(op, t.DmaOp)
                and t.PREFETCH_FOR_NEXT_ATTR in op.attributes and op.dst.type.get_shape() == (2048, 1000)]
        products = [j for j, op in enumerate(group) if prefetch_hoist.holds_matmul(op)]
        if dmas and products and max(dmas) < products[0]:
            where.append(i)
    apply_pass("tile-plan-memory{target=server}", module)
    (y,), counters = npu_matches_tile(module, inputs, "server")
    return y, counters.cycles, where


def test_classifier_weights_requested_ahead_of_the_convs_before_the_pool(monkeypatch):
    rng = np.random.default_rng(22)
    inputs = [rng.standard_normal((1, 2048, 7, 7)).astype(np.float32)]
    reference = run_entry(parse_with_weights(*tail(), "tail.mlir"), inputs)[0]
    y, cycles, where = run(inputs)
    monkeypatch.setattr(prefetch_hoist, "_passed_over", lambda before, run: False)
    y_own, cycles_own, where_own = run(inputs)
    # ahead of the products of one group: the 3x3 conv's (the first with products)
    assert len(where) == 1 and not where_own, (where, where_own)
    assert y.tobytes() == y_own.tobytes()
    np.testing.assert_allclose(y, reference, rtol=0, atol=0.02 * float(np.abs(reference).max()))
    assert cycles < cycles_own, (cycles, cycles_own)


def hosts_in_fp32() -> tuple[object, list[int]]:
    """The tail lowered in fp32 (hi and lo weight tiles: the linear's weights are 8.2 MB) up to
    the memory plan: (module, the op-marker groups holding the linear's weight DMAs)."""
    module = parse_with_weights(*tail(), "tail.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=fp32}", module)
    fn = next(op for op in module.walk() if op.name == "func.func")
    groups = prefetch_hoist.kernel_groups(fn.body.block)
    return module, [i for i, group in enumerate(groups) if any(
        isinstance(op, t.DmaOp) and t.PREFETCH_FOR_NEXT_ATTR in op.attributes
        and op.dst.type.get_shape() == (2048, 1000) for op in group)]


def test_classifier_weights_go_only_where_they_fit(monkeypatch):
    """In fp32 the 3x3 conv takes 10.1 MB of buffers (one channel step of 512), and the linear's
    8.2 MB of weights do not fit the 16 MiB scratchpad beside them: they go into the last conv
    instead (`_room_for`), and the program's buffers fit. Hosted by the 3x3 conv regardless, the
    memory plan fails (ResNet-50's fp32 server compile did)."""
    from infer.dialects.ir_io import IRError

    module, where = hosts_in_fp32()
    assert len(where) == 1, where
    apply_pass("tile-plan-memory{target=server}", module)
    rng = np.random.default_rng(23)
    inputs = [rng.standard_normal((1, 2048, 7, 7)).astype(np.float32)]
    (y,), _ = npu_matches_tile(module, inputs, "server")
    reference = run_entry(parse_with_weights(*tail(), "tail.mlir"), inputs)[0]
    np.testing.assert_allclose(y, reference, rtol=0, atol=1e-4 * float(np.abs(reference).max()))

    monkeypatch.setattr(prefetch_hoist, "_room_for", lambda *args: True)
    module, where_anyway = hosts_in_fp32()
    assert where_anyway and where_anyway[0] < where[0], (where_anyway, where)
    with pytest.raises(IRError, match="does not fit"):
        apply_pass("tile-plan-memory{target=server}", module)
