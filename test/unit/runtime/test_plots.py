"""runtime/plots.py: `infer run --plot DIR` writes the roofline, the engine timeline and the time
by op kind as PNG images, from a traced run of a small compiled model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.runtime_artifacts import bias_relu_artifact

import infer
from infer.runtime import Executable
from infer.target.hw import load_config
from infer.runtime.plots import PLOTS, merged_intervals, plot_roofline, plot_time_by_kind, plot_timeline, run_data
from infer.tools.cli import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png_image(path, min_width: int = 600) -> None:
    """A valid, non-blank PNG: the signature, a decodable image of a plausible size with ink."""
    import matplotlib.image

    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 10_000, path
    img = matplotlib.image.imread(path)
    assert img.ndim == 3 and img.shape[1] >= min_width and img.shape[0] >= 200, img.shape
    dark = (img[..., :3].mean(axis=2) < 0.5).mean()  # axes, text, bars
    assert 0.002 < dark < 0.9, (path, dark)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo's residual CNN (conv, pooling, residual add, linear) compiled for the server
    config, saved, and run once with a trace."""
    from infer.tools.demo import build_demo_model

    tmp = tmp_path_factory.mktemp("plots")
    exe = infer.compile(str(build_demo_model(tmp / "demo.onnx")), target="server")
    path = exe.save(tmp / "demo.npu")
    exe.run(np.random.default_rng(0).standard_normal(exe.artifact.inputs[0].shape).astype(np.float32))
    return path, exe.last_report


def test_infer_run_plot_writes_pngs(demo_run, tmp_path, capsys):
    path, _ = demo_run
    out = tmp_path / "plots"
    assert main(["run", str(path), "--plot", str(out)]) == 0
    err = capsys.readouterr().err
    for name in PLOTS:
        assert (out / name).is_file() and str(out / name) in err
        assert_png_image(out / name)


def test_plots_read_the_report_dict(demo_run, tmp_path):
    """Roofline and time by kind also take `Report.as_dict()` after a JSON round trip (as
    `infer run --json` writes it); the numbers they place come from the report."""
    _, rep = demo_run
    d = json.loads(json.dumps(rep.as_dict()))
    data = run_data(d)
    assert (data["peak"], data["bandwidth"]) == (128 * 128, 1000)  # server.toml
    assert d["peak_macs_per_cycle_by_dtype"] == load_config("server").peak_macs_per_cycle_by_dtype
    assert data["macs"] == rep.macs > 0 and len(data["ops"]) == len(rep.ops)
    assert sum(o["macs"] for o in data["ops"]) == rep.macs  # every MAC belongs to an op
    kinds = {o["kind"] for o in data["ops"]}
    assert any("matmul" in k or "conv" in k for k in kinds) and len(kinds) >= 3, kinds
    plot_roofline(d, tmp_path / "r.png")
    plot_time_by_kind(d, tmp_path / "k.png")
    assert_png_image(tmp_path / "r.png")
    assert_png_image(tmp_path / "k.png")
    with pytest.raises(ValueError, match="traced run"):
        plot_timeline(d, tmp_path / "t.png")
    with pytest.raises(ValueError, match="'peak_macs_per_cycle' is missing"):
        plot_roofline({"cycles": 1}, tmp_path / "x.png")


def test_roofline_has_a_roof_per_dtype_used(tmp_path):
    """An int8 run sits under the int8 roof (twice bf16's on server), not the base one; a run
    mixing dtypes draws both roofs and scales the plot to the higher."""
    base = {"config": "server", "cycles": 1000, "macs": 10**6, "dram_bytes": 10**4,
            "peak_macs_per_cycle": 16384, "dram_bytes_per_cycle": 1000,
            "peak_macs_per_cycle_by_dtype": {"int8": 32768, "bf16": 16384}}
    int8 = run_data({**base, "macs_by_dtype": {"int8": 10**6}})
    assert int8["peak"] == 32768 and int8["roofs"] == {"int8": 32768}
    mixed = run_data({**base, "macs_by_dtype": {"int8": 6 * 10**5, "bf16": 4 * 10**5}})
    assert mixed["peak"] == 32768 and mixed["roofs"] == {"int8": 32768, "bf16": 16384}
    old = run_data({k: v for k, v in base.items() if k != "peak_macs_per_cycle_by_dtype"})
    assert old["peak"] == 16384 and old["roofs"] == {"base": 16384}  # a report without the breakdown
    assert_png_image(plot_roofline({**base, "macs_by_dtype": {"int8": 6 * 10**5, "bf16": 4 * 10**5}},
                                   tmp_path / "m.png"))


def test_run_without_op_markers_is_one_op(tmp_path):
    """A report without per-op numbers (untraced run) plots the whole program as one op; the
    timeline of a traced run without markers draws the engines in one colour."""
    exe = Executable(bias_relu_artifact())
    exe.run(np.ones((4, 16), np.float32), trace=False)
    data = run_data(exe.last_report)
    assert [(o["name"], o["cycles"]) for o in data["ops"]] == [("program", exe.last_report.cycles)]
    assert_png_image(plot_time_by_kind(exe.last_report, tmp_path / "k.png"))
    assert_png_image(plot_roofline(exe.last_report, tmp_path / "r.png"))  # no MACs: only the roofs
    art = bias_relu_artifact()
    art.ops = []
    exe = Executable(art)
    exe.run(np.ones((4, 16), np.float32))
    assert exe.last_report.ops is None and exe.last_report.counters.events
    assert_png_image(plot_timeline(exe.last_report, tmp_path / "t.png"))


def test_merged_intervals():
    """One lane's intervals merge when they share the key and the gap is within the tolerance
    (overlaps count from the furthest end so far); a key change always starts a new bar."""
    start = np.array([10, 0, 4, 30, 33, 40, 60])
    end = np.array([12, 5, 9, 32, 36, 45, 61])
    key = np.array([0, 0, 0, 0, 0, 1, 1])
    s, e, k = merged_intervals(start, end, key, tolerance=0)
    assert s.tolist() == [0, 10, 30, 33, 40, 60] and e.tolist() == [9, 12, 32, 36, 45, 61]
    assert k.tolist() == [0, 0, 0, 0, 1, 1]
    s, e, k = merged_intervals(start, end, key, tolerance=1)
    assert s.tolist() == [0, 30, 40, 60] and e.tolist() == [12, 36, 45, 61] and k.tolist() == [0, 0, 1, 1]
    s, e, k = merged_intervals(start, end, key, tolerance=20)
    assert s.tolist() == [0, 40] and e.tolist() == [36, 61] and k.tolist() == [0, 1]
