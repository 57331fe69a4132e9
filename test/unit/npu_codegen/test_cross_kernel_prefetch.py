"""Cross-kernel weight prefetch of the plain GEMM (passes/graph_to_tile/gemm.py,
`prefetch_weights`): a GEMM whose packed weight fits beside the kernel before's buffers loads it
whole as its first instructions, into scratchpad bytes the kernel before does not use
(`tile.live_from_previous`), so the load overlaps that kernel; the program stays bit-identical to
the tile interpreter with the race checker on, and is faster than without the prefetch."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects import tile as t
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_to_tile import conv, gemm
from infer.passes.testing import apply_pass, run_entry
from infer.passes.tile_memory_plan import LIVE_FROM_PREVIOUS
from helpers.graph_programs import linear_chain
from helpers.tile_programs import npu_matches_tile

CTX = make_context()


def compile_and_run(text: str, weights: dict[str, np.ndarray], target: str, x: np.ndarray):
    """graph -> tile (interpreted) -> npu (simulated, race checker on): bit-identical outputs.
    Returns (output, simulated cycles, the shapes of the single bf16 scratchpad buffers kept apart
    from the kernel before: the prefetched weights; the streamed weight tiles are rings)."""
    module = parse_ir(CTX, text, "chain.mlir")
    verify_module(module)
    store = WeightStore()
    for name, value in weights.items():
        store.set(name, value)
    attach_weights(module, store)
    graph_ref = run_entry(module, [x])[0]
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision=bf16}},"
               f"tile-plan-memory{{target={target}}}", module)
    prefetched = [a.buffer.type.get_shape() for a in module.walk() if isinstance(a, t.AllocOp)
                  and LIVE_FROM_PREVIOUS in a.attributes and str(a.buffer.type.element_type) == "bf16"
                  and t.space_of(a.buffer) == "spad" and a.buffers.value.data == 1]
    (y,), counters = npu_matches_tile(module, [x], target)
    np.testing.assert_allclose(y, graph_ref, rtol=0.05, atol=0.05)  # bf16 products
    return y, counters.cycles, prefetched


def test_two_gemm_chain_prefetches_the_second_weights(monkeypatch):
    """server: the second linear's weights (256x256 bf16) load during the first linear; the
    program is faster than with the prefetch turned off, and computes the same bits. (With the
    first result kept on chip, test_kept_results.py, the second GEMM's weights stream in time
    anyway at this size: both programs take the same cycles, so that is off here.)"""
    monkeypatch.setattr(gemm, "KEPT_RESULT_READERS", 0)
    text, weights = linear_chain(128, 256, 256, 256)
    x = np.random.default_rng(4).standard_normal((128, 256)).astype(np.float32)
    y, cycles, prefetched = compile_and_run(text, weights, "server", x)
    assert (256, 256) in prefetched  # the second weight, whole
    monkeypatch.setattr(gemm, "PREFETCH_SHARE", 0.0)  # no room: weights stream per k step
    y_off, cycles_off, none = compile_and_run(text, weights, "server", x)
    assert (256, 256) not in none
    assert y.tobytes() == y_off.tobytes()
    assert cycles < cycles_off, (cycles, cycles_off)


@pytest.mark.parametrize("share", [None, "just short"])
def test_no_prefetch_without_room(monkeypatch, share):
    """The weights are not prefetched where they do not fit beside the kernel before's buffers
    and this kernel's: edge, a 512x256 second weight (256 KB, the whole scratchpad); or, for the
    server chain above, a share of the memories just short of what it needs (and with exactly
    that share it is prefetched). The program is still bit-identical (race checker on)."""
    if share is None:
        text, weights = linear_chain(64, 128, 512, 256)
        x = np.random.default_rng(5).standard_normal((64, 128)).astype(np.float32)
        _, _, prefetched = compile_and_run(text, weights, "edge", x)
        assert (512, 256) not in prefetched and (256, 512) not in prefetched
        return
    text, weights = linear_chain(128, 256, 256, 256)
    x = np.random.default_rng(4).standard_normal((128, 256)).astype(np.float32)
    seen: list[float] = []
    original = gemm.prefetch_weights

    def spy(ctx, packs, tn, nest_spad, nest_acc):
        prev, mem = ctx.previous_nest, ctx.hw.memory
        if prev is not None:  # the share of the binding memory the prefetch needs
            seen.append(max((prev.spad + nest_spad + 256 * 256 * 2) / mem.scratchpad_bytes,
                            (prev.acc + nest_acc) / mem.accumulator_bytes))
        return original(ctx, packs, tn, nest_spad, nest_acc)

    monkeypatch.setattr(gemm, "prefetch_weights", spy)
    compile_and_run(text, weights, "server", x)
    need = seen[-1]
    monkeypatch.setattr(gemm, "prefetch_weights", original)
    monkeypatch.setattr(gemm, "PREFETCH_SHARE", need * (1 - 1e-6))
    _, _, prefetched = compile_and_run(text, weights, "server", x)
    assert (256, 256) not in prefetched
    monkeypatch.setattr(gemm, "PREFETCH_SHARE", need)
    _, _, prefetched = compile_and_run(text, weights, "server", x)
    assert (256, 256) in prefetched


def conv_chain(C: int, H: int, O: int, seed: int, scale: float) -> tuple[str, dict[str, np.ndarray], np.ndarray]:
    """x [1, C, H, H] -> 3x3 conv to O channels + bias -> relu -> 1x1 conv O -> O: the IR, its
    weights and an input."""
    x, y = f"tensor<1x{C}x{H}x{H}xf32>", f"tensor<1x{O}x{H}x{H}xf32>"
    text = f"""
func.func @main(%x: {x} {{graph.name = "x"}}) -> ({y} {{graph.name = "y"}}) {{
  %w1 = graph.weight @w1 : tensor<{O}x{C}x3x3xf32>
  %b1 = graph.weight @b1 : tensor<{O}xf32>
  %c1 = graph.conv2d %x, %w1, %b1 {{stride = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>}} : ({x}, tensor<{O}x{C}x3x3xf32>, tensor<{O}xf32>) -> {y}
  %r = graph.relu %c1 : ({y}) -> {y}
  %w2 = graph.weight @w2 : tensor<{O}x{O}x1x1xf32>
  %c2 = graph.conv2d %r, %w2 {{stride = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>}} : ({y}, tensor<{O}x{O}x1x1xf32>) -> {y}
  func.return %c2 : {y}
}}
"""
    rng = np.random.default_rng(seed)
    weights = {"w1": (rng.standard_normal((O, C, 3, 3)) * scale).astype(np.float32),
               "b1": rng.standard_normal(O).astype(np.float32),
               "w2": (rng.standard_normal((O, O, 1, 1)) * scale).astype(np.float32)}
    return text, weights, rng.standard_normal((1, C, H, H)).astype(np.float32)


def spy_on_conv_prefetches(monkeypatch) -> list[tuple[int, ...] | None]:
    """The shapes of the packed weights conv.prefetch_packed makes resident (None: it declined),
    in call order."""
    made: list[tuple[int, ...] | None] = []
    original = conv.prefetch_packed

    def spy(ctx, packs, *args, **kwargs):
        tile = original(ctx, packs, *args, **kwargs)
        made.append(None if tile is None else tile.hi.type.get_shape())
        return tile

    monkeypatch.setattr(conv, "prefetch_packed", spy)
    return made


def test_conv_chain_prefetches_small_weights(monkeypatch):
    """server: a 1x1 conv after a 3x3 conv reads its whole packed weight (within the DRAM's
    bandwidth-delay product) from a buffer loaded during the 3x3 conv; bit-identical, race
    checker on."""
    text, weights, x = conv_chain(16, 16, 32, seed=6, scale=0.1)
    made = spy_on_conv_prefetches(monkeypatch)
    compile_and_run(text, weights, "server", x)
    assert made[-1] == (32, 32)  # the 1x1 conv's packed [O, C] weight, resident


def test_conv_bf16_weights_resident_beyond_the_bandwidth_delay_product_on_server(monkeypatch):
    """server, bf16: a 1x1 512->512 conv (512 KB of packed bf16 weights, past the DRAM's
    500 KB bandwidth-delay product) after a 3x3 conv reads its whole packed weight from a buffer
    loaded during the 3x3 conv (`tiling_cost.conv_weights_resident`); with the old rule
    (bandwidth-delay product only) it streams weight blocks instead. Same bits (race checker on,
    tile interpreter = simulator), fewer cycles resident. fp32's hi/lo copies, edge and int8 keep
    the old rule."""
    from infer.passes import tiling_cost
    from infer.target.hw import load_config

    server, edge = load_config("server"), load_config("edge")
    nbytes = 512 * 512 * 2
    assert not tiling_cost.weights_in_flight(server, nbytes)
    assert tiling_cost.conv_weights_resident(server, nbytes, 1)
    assert not tiling_cost.conv_weights_resident(server, 2 * nbytes, 2)  # fp32: hi and lo
    assert not tiling_cost.conv_weights_resident(server, nbytes, 1, "int8")
    assert not tiling_cost.conv_weights_resident(edge, nbytes, 1)
    text, weights, x = conv_chain(64, 7, 512, seed=7, scale=0.05)
    made = spy_on_conv_prefetches(monkeypatch)
    y, cycles, prefetched = compile_and_run(text, weights, "server", x)
    assert made[-1] is not None and 512 in made[-1] and made[-1][0] * made[-1][1] == 512 * 512
    assert made[-1] in prefetched  # whole, kept apart from the 3x3 conv's buffers
    made.clear()
    monkeypatch.setattr(tiling_cost, "conv_weights_resident",
                        lambda hw, weight_bytes, copies, matmul_dtype="bf16":
                        tiling_cost.weights_in_flight(hw, weight_bytes))
    y_old, cycles_old, _ = compile_and_run(text, weights, "server", x)
    assert made == []  # (prefetch_packed is not even asked: the weights stream)
    assert y.tobytes() == y_old.tobytes()
    assert cycles < cycles_old, (cycles, cycles_old)
