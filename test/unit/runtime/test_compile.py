"""End to end: infer.compile (import -> compile-npu -> artifact) and the simulator,
checked against the graph-level reference interpreter. Needs tile-to-npu."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.passes import infer_passes
from infer.tools.cli import main

from helpers.onnx_models import mlp_onnx

pytestmark = pytest.mark.skipif("tile-to-npu" not in infer_passes(), reason="tile-to-npu is not registered yet")


def _x(shape=(4, 16)):
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    return mlp_onnx(tmp_path_factory.mktemp("mlp") / "mlp.onnx")


@pytest.fixture(scope="module")
def exe(mlp):
    return infer.compile(mlp, target="edge")


def test_mlp_matches_reference(exe, mlp):
    x = _x()
    (y,) = exe.run([x])
    (ref,) = infer.import_model(mlp).run([x])
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    (y2,) = exe.run({"x": x})
    np.testing.assert_array_equal(y, y2)


def test_report_after_run(exe):
    exe.run([_x()])
    r = exe.last_report
    assert r.cycles > 0 and r.macs > 0 and r.dram_bytes > 0
    assert 0 < r.matrix_peak_fraction <= 1
    assert "performance (edge" in r.summary()


def test_save_load_round_trip(exe, tmp_path):
    path = exe.save(tmp_path / "mlp.npu")
    back = infer.load(path)
    x = _x()
    np.testing.assert_array_equal(back.run([x])[0], exe.run([x])[0])
    assert back.artifact.graph_ir and back.artifact.target_name == "edge"


def test_compiled_program_is_what_its_bytes_decode_to(exe):
    """The compiler hands the artifact the Program it encoded (Artifact.known_decoding: not
    decoded again); it is instruction for instruction what the program section decodes to."""
    from infer.target.asm import Program

    decoded = Program.from_bytes(exe.artifact.program)
    assert exe.program.instrs == decoded.instrs and len(decoded.instrs) > 10


def test_check_against_reference(exe):
    from infer.runtime.check import check

    x = _x()
    outs = exe.run([x])
    (c,) = check(exe.artifact, [x], outs, exe.reference)
    assert c.ok() and c.cosine > 0.99999 and c.sqnr_db > 60


def test_compile_model_and_mlir_sources(mlp, tmp_path):
    m = infer.import_model(mlp)
    ir = m.save(tmp_path / "mlp.mlir")
    x = _x()
    (ref,) = m.run([x])
    for source in (m, str(ir)):
        (y,) = infer.compile(source).run([x])
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_server_target_and_bf16(mlp):
    x = _x()
    (ref,) = infer.import_model(mlp).run([x])
    server = infer.compile(mlp, target="server")
    (y,) = server.run([x])
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    assert server.last_report.counters.config == "server"
    (yb,) = infer.compile(mlp, precision="bf16").run([x])
    err = np.abs(yb - ref).max() / np.abs(ref).max()
    assert 1e-6 < err < 5e-2  # bf16 products: visibly less exact than the fp32 emulation


def test_cli_compile_and_run_check(mlp, tmp_path, capsys):
    out = tmp_path / "m.npu"
    assert main(["compile", str(mlp), "-t", "edge", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "pass tile-to-npu" in err and f"wrote {out}" in err
    assert main(["run", str(out), "--check"]) == 0
    text = capsys.readouterr().out
    assert "y: float32 4x10" in text and "cycles" in text and "SQNR" in text and "OK" in text


def test_cli_compile_timing_report_and_quiet(mlp, exe, tmp_path, capsys):
    """--timing: a row per pass of compile-npu (named pipelines with their stages, in order) and
    per phase around it, wall and CPU time; timing it changes nothing in the program. --quiet
    (compile and run): no progress lines on stderr."""
    from infer.passes.pipelines_npu import CompileNpuPass

    out = tmp_path / "m.npu"
    assert main(["compile", str(mlp), "-t", "edge", "-o", str(out), "--timing", "--quiet"]) == 0
    err = capsys.readouterr().err
    report = err[err.index("Pass execution timing report"):]
    assert err.startswith("===") and "pass tile-to-npu" not in err and "wrote" not in err
    assert "User Time (CPU)" in report and "Wall Time" in report
    names = [line.split("%)")[-1].strip() for line in report.splitlines() if "%)" in line]
    stages = [p.name for p in CompileNpuPass(target="edge").flatten()]
    assert names[0] == "import" and names[1] == "compile-npu" and names[-1] == "Total"
    assert [n for n in names if n in stages] == stages  # every stage, in pipeline order
    assert {"graph-prepare-tiling", "graph-optimize", "packaging", "graph reference IR"} <= set(names)
    assert infer.load(out).artifact.program == exe.artifact.program
    assert main(["run", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert " s] " not in err and "running" not in err  # (the random-inputs note stays)
