"""A strided conv's stride-phase windows placed one at a time between its planes' products
(conv.ConvKernel.interleaves_planes, windows.WindowLoader.load's `after_plane`) on the server
config: a 3x3/2 conv whose windows are built on chip emits the taps of each plane one plane
behind its placement, so the array multiplies a plane while the vector unit places the next,
where it had waited for all four. The same bits as every plane first (the simulator bit for bit
the tile interpreter, race checker on), close to the graph interpreter, fewer cycles."""

from __future__ import annotations

import numpy as np
import pytest

from infer.passes.testing import apply_pass, run_entry

from helpers.graph_programs import parse_with_weights
from helpers.tile_programs import npu_matches_tile


def strided_conv(C: int, H: int, O: int) -> tuple[str, dict[str, np.ndarray]]:
    """A 3x3 stride-2 conv (padding 1) with bias and relu, random weights."""
    OH = (H + 2 - 3) // 2 + 1
    x, y = f"tensor<1x{C}x{H}x{H}xf32>", f"tensor<1x{O}x{OH}x{OH}xf32>"
    text = f"""
func.func @main(%x: {x} {{graph.name = "x"}}) -> ({y} {{graph.name = "y"}}) {{
  %w = graph.weight @w : tensor<{O}x{C}x3x3xf32>
  %b = graph.weight @b : tensor<{O}xf32>
  %c = graph.conv2d %x, %w, %b {{stride = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>}} : ({x}, tensor<{O}x{C}x3x3xf32>, tensor<{O}xf32>) -> {y}
  %r = graph.relu %c : ({y}) -> {y}
  func.return %r : {y}
}}
"""
    rng = np.random.default_rng(21)
    return text, {"w": (rng.standard_normal((O, C, 3, 3)) * 0.05).astype(np.float32),
                  "b": rng.standard_normal(O).astype(np.float32) * 0.1}


def run(C: int, H: int, O: int, x: np.ndarray) -> tuple[np.ndarray, int]:
    module = parse_with_weights(*strided_conv(C, H, O), "conv.mlir")
    apply_pass("graph-prepare-tiling,graph-to-tile{target=server precision=bf16},tile-plan-memory{target=server}",
               module)
    (y,), counters = npu_matches_tile(module, [x], "server")
    return y, counters.cycles


@pytest.mark.parametrize("C,H,O", [(128, 56, 128), (256, 28, 256)])
def test_planes_placed_between_their_products(monkeypatch, C, H, O):
    from infer.passes.graph_to_tile import conv, windows

    calls: list[bool] = []
    original = windows.WindowLoader.load

    def spy(self, *args, after_plane=None, **kwargs):
        calls.append(after_plane is not None)
        return original(self, *args, after_plane=after_plane, **kwargs)

    monkeypatch.setattr(windows.WindowLoader, "load", spy)
    x = np.random.default_rng(22).standard_normal((1, C, H, H)).astype(np.float32)
    graph_ref = run_entry(parse_with_weights(*strided_conv(C, H, O), "conv.mlir"), [x])[0]
    y1, cycles1 = run(C, H, O, x)
    assert calls and all(calls), calls  # every window load interleaved
    calls.clear()
    monkeypatch.setattr(conv.ConvKernel, "interleaves_planes", lambda self, bufs, looped, weights_loaded: False)
    y0, cycles0 = run(C, H, O, x)
    assert calls and not any(calls), calls
    assert y1.tobytes() == y0.tobytes()
    scale = float(np.abs(graph_ref).max())
    np.testing.assert_allclose(y1, graph_ref, rtol=0, atol=0.02 * scale)  # bf16 products
    assert cycles1 < cycles0, (cycles1, cycles0)
