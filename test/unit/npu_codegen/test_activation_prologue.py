"""An activation moved into the product that reads it (graph-fuse-activation-prologue, applied
where gemm.py stages the product's activations): a transformer FFN (x [M, 384] -> 1536, bias,
GELU -> 384, bias, residual) on the server config. With the pass and without it the simulator's
outputs are the same bits (each bit-identical to the tile interpreter, race checker on), close
to the graph interpreter, and the run takes fewer cycles (the down projection's first matmul no
longer waits for the GELU of the whole up projection). On edge the pass leaves the module as it
is. Also the up projection's k steps in sequence without an accumulator fill (gemm.py)."""

from __future__ import annotations

import numpy as np
import pytest

from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import norm_then_projections, parse_with_weights
from helpers.tile_programs import npu_matches_tile


def print_ir(module) -> str:
    return str(module)
K, N = 384, 1536


def ffn(M: int, approximate: str) -> tuple[str, dict[str, np.ndarray]]:
    text = f"""
func.func @main(%x: tensor<{M}x{K}xf32> {{graph.name = "x"}}) -> (tensor<{M}x{K}xf32> {{graph.name = "y"}}) {{
  %w1 = graph.weight @w1 : tensor<{N}x{K}xf32>
  %b1 = graph.weight @b1 : tensor<{N}xf32>
  %w2 = graph.weight @w2 : tensor<{K}x{N}xf32>
  %b2 = graph.weight @b2 : tensor<{K}xf32>
  %h = graph.linear %x, %w1, %b1 : (tensor<{M}x{K}xf32>, tensor<{N}x{K}xf32>, tensor<{N}xf32>) -> tensor<{M}x{N}xf32>
  %g = graph.gelu %h {{approximate = "{approximate}"}} : (tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32>
  %d = graph.linear %g, %w2, %b2 : (tensor<{M}x{N}xf32>, tensor<{K}x{N}xf32>, tensor<{K}xf32>) -> tensor<{M}x{K}xf32>
  %y = graph.add %d, %x : (tensor<{M}x{K}xf32>, tensor<{M}x{K}xf32>) -> tensor<{M}x{K}xf32>
  func.return %y : tensor<{M}x{K}xf32>
}}
"""
    rng = np.random.default_rng(3)
    return text, {"w1": (rng.standard_normal((N, K)) * 0.05).astype(np.float32),
                  "b1": rng.standard_normal(N).astype(np.float32),
                  "w2": (rng.standard_normal((K, N)) * 0.03).astype(np.float32),
                  "b2": rng.standard_normal(K).astype(np.float32)}


def module_of(M: int, approximate: str):
    return parse_with_weights(*ffn(M, approximate), "ffn.mlir")


def compile_and_run(M: int, precision: str, approximate: str, prologue: bool, x: np.ndarray):
    """-> (simulated output, cycles, the graph-level module after the graph passes)."""
    module = module_of(M, approximate)
    apply_pass("graph-prepare-tiling" + (",graph-fuse-activation-prologue{target=server}" if prologue else ""), module)
    graph_text = print_ir(module)
    apply_pass(f"graph-to-tile{{target=server precision={precision}}},tile-plan-memory{{target=server}}", module)
    (y,), counters = npu_matches_tile(module, [x], "server")
    return y, counters.cycles, graph_text


@pytest.mark.parametrize("precision,M,approximate", [("bf16", 128, "none"), ("fp32", 128, "none"),
                                                      ("bf16", 512, "tanh")])
def test_activation_prologue_same_bits_fewer_cycles(precision, M, approximate, monkeypatch):
    from infer.passes.graph_to_tile import gemm

    # every bias added after its products: with the GELU in the up projection's n loop (no
    # prologue) the down projection does not start from its bias rows, with the prologue it may
    # (gemm.bias_in_accumulator), which rounds differently
    monkeypatch.setattr(gemm, "BIAS_FILL_SHARE", 0.0)
    x = np.random.default_rng(4).standard_normal((M, K)).astype(np.float32)
    graph_ref = run_entry(module_of(M, approximate), [x])[0]
    y0, cycles0, text0 = compile_and_run(M, precision, approximate, False, x)
    y1, cycles1, text1 = compile_and_run(M, precision, approximate, True, x)
    # the GELU moved from the up projection's kernel into the down projection's
    assert text0.index("graph.gelu") < text0.index("graph.kernel", text0.index("graph.kernel") + 1)
    assert text1.index("graph.gelu") > text1.index("graph.kernel", text1.index("graph.kernel") + 1)
    assert y1.tobytes() == y0.tobytes()
    tol = 5e-2 if precision == "bf16" else 1e-4
    np.testing.assert_allclose(y1, graph_ref, rtol=tol, atol=tol)
    assert cycles1 < cycles0, (cycles1, cycles0)


def test_edge_unchanged():
    module = module_of(128, "none")
    apply_pass("graph-prepare-tiling", module)
    before = print_ir(module)
    apply_pass("graph-fuse-activation-prologue{target=edge}", module)
    assert print_ir(module) == before


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_one_tile_k_steps_in_sequence_without_a_fill(precision, monkeypatch):
    """A one-tile nest of 2-3 k steps on server (the FFN's up projection: K = 384) runs its steps
    in sequence on two single-buffered tile sets, the first step's products writing the
    accumulator: no `tile.fill` of the accumulator, the same bits as the k loop with its fill,
    and fewer cycles (the fill sat between the kernel before and the first matmul on the
    in-order vector unit)."""
    from infer.passes.graph_to_tile import gemm

    M = 128
    x = np.random.default_rng(5).standard_normal((M, K)).astype(np.float32)

    def run() -> tuple[np.ndarray, int, str]:
        module = module_of(M, "none")
        apply_pass("graph-prepare-tiling,graph-fuse-activation-prologue{target=server},"
                   f"graph-to-tile{{target=server precision={precision}}}", module)
        tile_text = print_ir(module)
        apply_pass("tile-plan-memory{target=server}", module)
        (y,), counters = npu_matches_tile(module, [x], "server")
        return y, counters.cycles, tile_text

    y1, cycles1, text1 = run()
    monkeypatch.setattr(gemm, "SEQUENCED_K_STEPS", 0)
    y0, cycles0, text0 = run()
    # the up projection's fill is gone (the down projection, 1536 deep, keeps its k loop and fill)
    assert text1.count("tile.fill") == text0.count("tile.fill") - 1
    assert y1.tobytes() == y0.tobytes()
    assert cycles1 < cycles0, (cycles1, cycles0)


def test_next_kernel_weights_prefetched_before_the_epilogue(monkeypatch):
    """On server the down projection's weight prefetch (cross-kernel, into buffers kept apart)
    moves into the up projection, before its epilogue (prefetch_hoist.py; here its result's
    store, its bias and GELU being the down projection's prologue): the front end dispatches it
    without waiting behind that epilogue. The same bits as without the move."""
    from infer.dialects import tile as t
    from infer.passes.graph_to_tile import driver

    M = 128
    x = np.random.default_rng(5).standard_normal((M, K)).astype(np.float32)

    def run() -> tuple[np.ndarray, int, list[str]]:
        module = module_of(M, "none")
        apply_pass("graph-prepare-tiling,graph-fuse-activation-prologue{target=server},"
                   "graph-to-tile{target=server precision=bf16},tile-plan-memory{target=server}", module)
        fn = next(op for op in module.walk() if op.name == "func.func")
        # (a DMA named by its direction: with the up projection's bias moved into the down
        # projection's prologue, the prefetch overtakes the up projection's store only)
        order = [f"{op.name} from {t.space_of(op.src)}" if isinstance(op, t.DmaOp) else op.name
                 for op in fn.body.block.ops
                 if isinstance(op, t.DmaOp | t.VectorOp | t.MatmulOp) or op.name == "scf.for"]
        (y,), counters = npu_matches_tile(module, [x], "server")
        return y, counters.cycles, order

    y1, cycles1, order1 = run()
    monkeypatch.setattr(driver, "hoist_weight_prefetches", lambda block, **_: 0)
    y0, cycles0, order0 = run()
    assert order1 != order0  # DMAs moved up
    assert y1.tobytes() == y0.tobytes()
    assert cycles1 <= cycles0, (cycles1, cycles0)


def norm_then_two_projections(M: int, K: int = K) -> tuple[str, dict[str, np.ndarray]]:
    """x -> layer norm -> two linear projections of it (a transformer's q and k)."""
    return norm_then_projections(M, K, {"q": K, "k": K}, chained=False, seed=6)


@pytest.mark.parametrize("k_in,moved", [(384, "copy"), (512, "fill")])
def test_next_kernel_operand_preparation_before_the_epilogue(monkeypatch, k_in, moved):
    """On server the k projection's preparation moves with its weight prefetch into the q
    projection, ahead of q's bias-add epilogue (prefetch_hoist.py `_operand_preparation`): with
    K = 384 (three k steps in sequence) its first operand tiles (the layer norm's output copied
    to bf16), with K = 512 (a k loop) its accumulator's fill. k's first matmul no longer waits
    behind that epilogue on the in-order vector unit. The same bits as without the move, close
    to the graph interpreter, fewer cycles."""
    import functools

    from infer.dialects import tile as t
    from infer.passes.graph_to_tile import driver, gemm

    # q's bias added after its products (its epilogue, which k's preparation overtakes), not as
    # its accumulator's starting value (gemm.bias_in_accumulator: test_bias_in_accumulator.py)
    monkeypatch.setattr(gemm, "BIAS_FILL_SHARE", 0.0)
    M = 128
    x = np.random.default_rng(7).standard_normal((M, k_in)).astype(np.float32)
    graph_ref = run_entry(parse_with_weights(*norm_then_two_projections(M, k_in), "qk.mlir"), [x])

    def run() -> tuple[list[np.ndarray], int, bool]:
        module = parse_with_weights(*norm_then_two_projections(M, k_in), "qk.mlir")
        apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16},"
                   "tile-plan-memory{target=server}", module)
        fn = next(op for op in module.walk() if op.name == "func.func")
        ops = list(fn.body.block.ops)
        # q's bias add (its epilogue) and q's last matmul nest before it: is k's preparation (a
        # copy into its first operand tile, or its accumulator's fill) between the two?
        products = [i for i, op in enumerate(ops) if any(isinstance(o, t.MatmulOp) for o in op.walk())]
        bias = next(i for i, op in enumerate(ops) if i > products[0] and isinstance(op, t.VectorOp)
                    and op.op.data == "add")
        last_product = max(i for i in products if i < bias)
        between = ops[last_product:bias]
        found = ([op for op in between if isinstance(op, t.VectorOp) and op.op.data == "copy"] if moved == "copy"
                 else [op for op in between if isinstance(op, t.FillOp)])
        ys, counters = npu_matches_tile(module, [x], "server")
        return ys, counters.cycles, bool(found)

    ys1, cycles1, moved1 = run()
    monkeypatch.setattr(driver, "hoist_weight_prefetches",
                        functools.partial(driver.hoist_weight_prefetches, preparation=False))
    ys0, cycles0, moved0 = run()
    assert moved1 and not moved0
    assert [y.tobytes() for y in ys1] == [y.tobytes() for y in ys0]
    for y, ref in zip(ys1, graph_ref):
        np.testing.assert_allclose(y, ref, rtol=5e-2, atol=5e-2)
    assert cycles1 < cycles0, (cycles1, cycles0)
