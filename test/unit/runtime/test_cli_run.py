"""`infer run` / `infer compile` command lines (artifacts built by hand; the
compiled end-to-end cases live in test_compile.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from infer.tools.cli import main

from helpers.runtime_artifacts import bias_relu_artifact


@pytest.fixture
def artifact(tmp_path):
    return str(bias_relu_artifact().save(tmp_path / "m.npu"))


def test_run_prints_outputs_and_report(artifact, tmp_path, capsys):
    x = np.ones((4, 16), np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    rc = main(["run", artifact, "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "out.npz"),
               "--trace", str(tmp_path / "t.json"), "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "y: float32 4x16" in out and "performance (edge" in out and "top ops by cycles" in out
    with np.load(tmp_path / "out.npz") as f:
        np.testing.assert_array_equal(f["y"], np.maximum(x + np.linspace(-1, 1, 16, dtype=np.float32), 0))
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["cycles"] > 0 and [o["name"] for o in report["ops"]] == ["bias_add", "relu"]
    assert "running" in err  # progress on stderr


def test_run_random_inputs_note(artifact, capsys):
    assert main(["run", artifact]) == 0
    assert "deterministic random inputs" in capsys.readouterr().err


@pytest.mark.parametrize("content, msg", [
    (b"garbage", "not an infer .npu artifact"),
    (None, "truncated artifact"),
])
def test_run_bad_artifact_one_line(tmp_path, capsys, content, msg):
    data = bias_relu_artifact().to_bytes()[:-5] if content is None else content
    (tmp_path / "bad.npu").write_bytes(data)
    assert main(["run", str(tmp_path / "bad.npu")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("infer run: error:") and msg in err and "\n" not in err


def test_run_missing_file(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.npu")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_run_inputs_missing_name(artifact, tmp_path, capsys):
    np.savez(tmp_path / "in.npz", z=np.ones(3))
    assert main(["run", artifact, "--inputs", str(tmp_path / "in.npz")]) == 1
    assert "missing input(s) x" in capsys.readouterr().err


def test_run_wrong_input_shape(artifact, tmp_path, capsys):
    np.savez(tmp_path / "in.npz", x=np.ones((2, 2), np.float32))
    assert main(["run", artifact, "--inputs", str(tmp_path / "in.npz")]) == 1
    assert "expected shape [4, 16]" in capsys.readouterr().err


def test_check_without_graph_ir_is_an_error(artifact, capsys):
    assert main(["run", artifact, "--check"]) == 1
    assert "no graph-level IR" in capsys.readouterr().err


def test_compile_bad_target(tmp_path, capsys):
    assert main(["compile", str(tmp_path / "m.onnx"), "-t", "nowhere", "-o", str(tmp_path / "m.npu")]) == 1
    assert "unknown hardware config 'nowhere'" in capsys.readouterr().err


def test_compile_missing_model(tmp_path, capsys):
    assert main(["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.npu")]) == 1
    err = capsys.readouterr().err
    assert "infer compile: error:" in err and "no such file" in err and "Traceback" not in err


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["compile", "x.onnx", "--precision", "fp7"])
    assert e.value.code == 2


def test_run_modes(artifact, tmp_path, capsys):
    """`--mode`: the same outputs in fast, reference and functional mode, the same cycles in
    fast, reference and timing mode; timing mode computes no outputs."""
    np.savez(tmp_path / "in.npz", x=np.ones((4, 16), np.float32))
    reports, ys = {}, {}
    for mode in ("fast", "reference", "functional", "timing"):
        args = ["run", artifact, "--inputs", str(tmp_path / "in.npz"), "--mode", mode,
                "--json", str(tmp_path / f"{mode}.json")]
        if mode != "timing":
            args += ["--output", str(tmp_path / f"{mode}.npz")]
        rc = main(args)
        out, err = capsys.readouterr()
        assert rc == 0, err
        reports[mode] = json.loads((tmp_path / f"{mode}.json").read_text())
        assert reports[mode]["simulation_mode"] == mode
        if mode == "timing":
            assert "outputs: not computed (timing mode)" in out
        else:
            assert "y: float32 4x16" in out
            with np.load(tmp_path / f"{mode}.npz") as f:
                ys[mode] = f["y"]
        if mode == "functional":
            assert "functional-only run" in out
    assert ys["fast"].tobytes() == ys["reference"].tobytes() == ys["functional"].tobytes()
    cycles = {m: reports[m]["cycles"] for m in reports}
    assert cycles["fast"] == cycles["reference"] == cycles["timing"] > 0 and cycles["functional"] == 0


def test_run_timing_mode_refuses_outputs(artifact, tmp_path, capsys):
    assert main(["run", artifact, "--mode", "timing", "--output", str(tmp_path / "o.npz")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("infer run: error: --mode timing computes no data") and "\n" not in err.strip()


@pytest.mark.parametrize("flag", ["--plot", "--trace"])
def test_run_functional_mode_refuses_timing_outputs(artifact, tmp_path, capsys, flag):
    assert main(["run", artifact, "--mode", "functional", flag, str(tmp_path / "t")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"infer run: error: --mode functional has no timing model: it cannot {flag}")
    assert "\n" not in err.strip() and not (tmp_path / "t").exists()


def test_run_help_documents_modes(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--mode {fast,reference,functional,timing}" in out
    assert "functional (outputs only, no timing model)" in out and "timing (cycles and counters only" in out


def test_run_what_if_simulates_the_program_again_with_resources_unlimited(artifact, tmp_path, capsys):
    from infer.runtime import load
    from infer.target.hw import WHAT_IF_RESOURCES, unlimited

    x = np.linspace(-2, 2, 64, dtype=np.float32).reshape(4, 16)
    np.savez(tmp_path / "in.npz", x=x)
    rc = main(["run", artifact, "--inputs", str(tmp_path / "in.npz"), "--what-if", "-q",
               "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    w = report["what_if"]
    assert w["cycles"] == report["cycles"] > 0 and w["instructions"] > 0
    assert "what bounds it" in out and all(f"  {label} " in out for label in WHAT_IF_RESOURCES.values())
    assert f"none limited: {w['none']:,} cycles" in out
    # each figure is the same program run on the changed config, outputs unchanged
    exe = load(artifact)
    y0 = exe.run([x])
    for r in WHAT_IF_RESOURCES:
        y = exe.run([x], config=unlimited(exe.config, [r]))
        assert exe.last_report.cycles == w["unlimited"][r] <= w["cycles"]
        np.testing.assert_array_equal(y[0], y0[0])
        exe.run([x], config=unlimited(exe.config, [o for o in WHAT_IF_RESOURCES if o != r]))
        assert exe.last_report.cycles == w["only"][r]
    assert w["unlimited"]["dram"] < w["cycles"]  # a DMA in, a DMA out: DRAM latency bounds it
    assert w["none"] <= min(w["only"].values()) and w["streaming"] == 0  # (a bias add and a relu: no matmul)
    exe.run([x])  # the artifact's own config again
    assert exe.last_report.cycles == w["cycles"]


def test_run_functional_mode_refuses_what_if(artifact, capsys):
    assert main(["run", artifact, "--mode", "functional", "--what-if"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("infer run: error: --mode functional has no timing model: it cannot --what-if")
