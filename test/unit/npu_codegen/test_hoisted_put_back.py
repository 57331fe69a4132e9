"""A cross-kernel prefetch put back into its own kernel (tile_to_npu/hoisted.py) on the server
config: a GQA attention (12 query heads over 2 KV heads, 6 of a group interleaved) with a mask,
whose head-major output a linear reads. graph-to-tile moves the linear's weight DMAs and their
preparation in front of the attention's last heads, and with them the attention needed 17
semaphores of server's 16 at every degrade level (found by the differential fuzzer, seed 11).
tile-to-npu now puts the move back and compiles the function again: the program runs bit for
bit as the tile interpreter with the race checker on, close to the graph interpreter, and with
the same bits as a program compiled with no prefetch moved at all."""

from __future__ import annotations

import numpy as np

from infer.dialects import tile as t
from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import parse_with_weights
from helpers.tile_programs import npu_matches_tile

HQ, HKV, S, T, D, N = 12, 2, 6, 2, 4, 8


def attention_then_linear() -> tuple[str, dict[str, np.ndarray]]:
    q, kv = f"tensor<1x{HQ}x{S}x{D}xf32>", f"tensor<1x{HKV}x{T}x{D}xf32>"
    mask, out = f"tensor<1x{HQ}x{S}x{T}xi1>", f"tensor<1x{HQ}x{S}x{N}xf32>"
    text = f"""func.func @main(%q: {q}, %k: {kv}, %v: {kv}) -> {out} {{
  %m = graph.weight @m : {mask}
  %a = graph.attention %q, %k, %v, %m : ({q}, {kv}, {kv}, {mask}) -> {q}
  %w = graph.weight @w : tensor<{N}x{D}xf32>
  %b = graph.weight @b : tensor<{N}xf32>
  %y = graph.linear %a, %w, %b : ({q}, tensor<{N}x{D}xf32>, tensor<{N}xf32>) -> {out}
  func.return %y : {out}
}}"""
    rng = np.random.default_rng(0)
    keep = rng.random((1, HQ, S, T)) > 0.3
    keep[..., 0] = True  # (every query row attends to at least one key)
    return text, {"m": keep, "w": rng.standard_normal((N, D)).astype(np.float32),
                  "b": rng.standard_normal(N).astype(np.float32)}


def inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal(shape).astype(np.float32)
            for shape in ((1, HQ, S, D), (1, HKV, T, D), (1, HKV, T, D))]


def compile_and_run(monkeypatch, hoist: bool) -> tuple[np.ndarray, list[int], set[str]]:
    """-> (the npu output, what each sink_hoisted call put back, the labels graph-to-tile set)."""
    from infer.passes.graph_to_tile import driver as graph_driver
    from infer.passes.tile_to_npu import driver as npu_driver, hoisted

    if not hoist:
        monkeypatch.setattr(graph_driver, "hoist_weight_prefetches", lambda *args, **kwargs: 0)
    put_back: list[int] = []

    def counting(block, failed):
        put_back.append(hoisted.sink_hoisted(block, failed))
        return put_back[-1]

    monkeypatch.setattr(npu_driver, "sink_hoisted", counting)
    module = parse_with_weights(*attention_then_linear(), "gqa.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16},tile-plan-memory{target=server}",
               module)
    labels = {name for op in module.walk() for name in (t.HOISTED_ATTR, t.HOIST_ORIGIN_ATTR)
              if name in op.attributes}
    (y,), _ = npu_matches_tile(module, inputs(), "server")
    return y, put_back, labels


def test_prefetch_put_back_where_the_kernel_before_cannot_fit(monkeypatch):
    graph_ref = run_entry(parse_with_weights(*attention_then_linear(), "gqa.mlir"), inputs())[0]
    y, put_back, labels = compile_and_run(monkeypatch, hoist=True)
    assert labels == {t.HOISTED_ATTR, t.HOIST_ORIGIN_ATTR}  # graph-to-tile moved the linear's prefetch
    assert put_back == [1]  # one move put back, after the attention ran out of semaphores with it
    np.testing.assert_allclose(y, graph_ref, rtol=5e-2, atol=5e-2)
    y_never_moved, put_back_never, labels_never = compile_and_run(monkeypatch, hoist=False)
    assert not labels_never and put_back_never == []
    assert y.tobytes() == y_never_moved.tobytes()


def test_sink_hoisted_restores_the_kernel_order(monkeypatch):
    """On the tile IR: the move's allocs and index ops go back before the origin alloc, its DMAs
    and preparation before the first op after it that emits code, labels removed."""
    from infer.passes.graph_to_tile.prefetch_hoist import kernel_groups
    from infer.passes.tile_to_npu.hoisted import sink_hoisted

    module = parse_with_weights(*attention_then_linear(), "gqa.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16}", module)
    block = next(op for op in module.walk() if op.name == "func.func").body.block
    before = kernel_groups(block)
    moved = [op for op in block.ops if t.HOISTED_ATTR in op.attributes]
    dmas = [op for op in moved if isinstance(op, t.DmaOp)]
    assert dmas and all(t.PREFETCH_FOR_NEXT_ATTR in op.attributes for op in dmas)
    into = next(i for i, kernel in enumerate(before) if dmas[0] in kernel)
    assert sink_hoisted(block, before[into]) == 1
    assert sink_hoisted(block, before[into]) == 0  # (already put back)
    after = kernel_groups(block)
    assert len(after) == len(before)
    assert all(op in after[into + 1] for op in moved)  # every moved op is in its own kernel again
    assert not any(name in op.attributes for op in block.ops
                   for name in (t.HOISTED_ATTR, t.HOIST_ORIGIN_ATTR, t.PREFETCH_FOR_NEXT_ATTR))
    module.verify()
