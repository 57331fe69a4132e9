"""The conv cost model knows when tile-to-npu builds a row tile's window an iteration ahead
(`tiling_cost.window_prepared_ahead`, docs/codegen.md "Pipelined preparation"): such a window
does not queue behind the tile before's epilogue on the in-order vector unit. Without that
term the model ranked the 1x1 conv 256->128 at 56x56 (fp32 input, server, bf16) with two
output-channel tiles first (the window built in a row loop around them, not ahead), 16.0 K
simulated cycles; with it, one output-channel tile, whose windows are built ahead."""

from __future__ import annotations

import bench_roofline  # bench/ is on the test path (pyproject.toml)
import numpy as np

import infer
from infer.passes import tiling_cost

SHAPE = (256, 56, 128, 1, 1, 0)  # C, H, O, kernel, stride, pad


def run() -> tuple[np.ndarray, int, int]:
    """-> (output, simulated cycles, the conv kernel's predicted cycles)."""
    model = bench_roofline.conv_model(*SHAPE)
    x = np.random.default_rng(1).standard_normal((1, SHAPE[0], SHAPE[1], SHAPE[1])).astype(np.float32)
    exe = infer.compile(model, target="server", precision="bf16")
    (y,) = exe.run([x])
    conv = next(o for o in exe.last_report.ops if o.kernel_class == "conv2d")
    return y, exe.last_report.counters.cycles, conv.predicted


def test_window_prepared_ahead_conditions(monkeypatch) -> None:
    """Ahead: one output-channel tile per row tile with one channel step. Not ahead: two
    output-channel tiles inside the row loop, or several channel steps (the window is built per
    step inside the step loop, which has no epilogue to get ahead of)."""
    asked = {}
    window_prepared_ahead = tiling_cost.window_prepared_ahead

    def spy(hw, s, T):
        asked[T] = window_prepared_ahead(hw, s, T)
        return asked[T]

    monkeypatch.setattr(tiling_cost, "window_prepared_ahead", spy)
    run()

    def tiles(**fields):
        return [T for T in asked if T.orientation == "pixels" and all(getattr(T, k) == v for k, v in fields.items())]

    assert tiles(TO=128, TOH=8, TC=256) and all(asked[T] for T in tiles(TO=128, TOH=8, TC=256))
    assert tiles(TO=64, TOH=8, TC=256, outer="rows") and not any(asked[T] for T in tiles(TO=64, outer="rows"))
    assert tiles(TO=128, TOH=8, TC=128) and not any(asked[T] for T in tiles(TC=128))


def test_prepared_ahead_picks_the_faster_tiling(monkeypatch) -> None:
    y1, cycles1, predicted1 = run()
    monkeypatch.setattr(tiling_cost, "window_prepared_ahead", lambda hw, s, T: False)
    y0, cycles0, _ = run()
    assert cycles1 < 0.75 * cycles0, (cycles1, cycles0)  # 10.4 K against 16.0 K when measured
    # the pick is now predicted within 15 % (the term's absence had it 34 % over for this tiling)
    assert abs(predicted1 - cycles1) <= 0.15 * cycles1, (predicted1, cycles1)
    np.testing.assert_allclose(y1, y0, rtol=2e-2, atol=2e-2)  # other tilings: bf16 roundings
