"""`infer sweep` (tools/sweep.py): a small sweep on a local Ray instance, its numbers against a
direct compile and timing run of the same config, the cache on a re-run, the plots, and bad
--param input. One module-scoped sweep: Ray's start-up costs several seconds."""

from __future__ import annotations

import csv
import tomllib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import infer
from infer.target.hw import config_path
from infer.tools.cli import main
from infer.tools.sweep import derive_toml, parse_params, run_sweep


def _tiny_model(path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 48)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 48])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    work = tmp_path_factory.mktemp("sweep")
    model = _tiny_model(work / "tiny.onnx")
    # 48 is not a power of two: an invalid point, reported and skipped
    first = run_sweep(model, "edge", ["matrix.rows=16,32,48"], precision="bf16", out_dir=work / "out")
    again = run_sweep(model, "edge", ["matrix.rows=16,32,48"], precision="bf16", out_dir=work / "out")
    return work, model, first, again


def test_sweep_points_match_a_direct_run(sweep):
    work, model, first, _ = sweep
    rows = {r["matrix.rows"]: r for r in first.rows}
    assert [r["status"] for r in first.rows] == ["ok", "ok", "invalid"]
    assert "matrix.rows must be a positive power of two" in rows[48]["reason"]
    assert first.computed == 2
    # the point with 32 rows, compiled and run here in the timing mode, gives the sweep's numbers
    text = derive_toml(config_path("edge").read_text(), {"matrix.rows": 32})
    toml = work / "rows32.toml"
    toml.write_text(text)
    exe = infer.compile(str(model), target=str(toml), precision="bf16")
    exe.run([np.zeros((8, 32), np.float32)], mode="timing")
    rep = exe.last_report
    r = rows[32]
    assert r["cycles"] == rep.cycles and r["macs"] == rep.macs == 8 * 32 * 48
    assert r["energy_uj"] == pytest.approx(rep.energy.total_pj * 1e-6, rel=1e-9)
    assert r["area_mm2"] == pytest.approx(rep.energy.area["total"], rel=1e-9)
    assert rows[32]["area_mm2"] > rows[16]["area_mm2"]  # twice the processing elements
    with open(first.csv_path) as f:
        table = list(csv.DictReader(f))
    assert [t["matrix.rows"] for t in table] == ["16", "32", "48"]
    for col in ("cycles", "energy_uj", "area_mm2"):
        assert float(table[1][col]) == pytest.approx(float(r[col]), rel=1e-9)
    assert table[2]["status"] == "invalid" and table[2]["cycles"] == ""
    # Pareto: a point on neither front would be dominated in both by the other one
    assert any(int(t["pareto_energy"]) for t in table[:2]) and any(int(t["pareto_area"]) for t in table[:2])


def test_sweep_rerun_hits_the_cache(sweep):
    _, _, first, again = sweep
    assert again.computed == 0
    assert [r.get("cached") for r in again.rows[:2]] == [1, 1]
    for a, b in zip(first.rows, again.rows, strict=True):
        assert {k: a.get(k) for k in ("cycles", "energy_uj", "area_mm2", "status")} == \
            {k: b.get(k) for k in ("cycles", "energy_uj", "area_mm2", "status")}


def test_sweep_plots_written(sweep):
    _, _, first, _ = sweep
    names = sorted(p.name for p in first.plots)
    assert names == ["area.png", "energy.png", "latency.png", "pareto.png"]
    for p in first.plots:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.parametrize("param,msg", [
    ("matrix.rowz=16,32", "--param matrix.rowz: not a key of edge.toml (did you mean matrix.rows"),
    ("matrix.rows=16,abc", "--param matrix.rows: 'abc' is not an integer"),
    ("matrix.rows=16.5", "--param matrix.rows: '16.5' is not an integer"),
    ("matrix.dtypes=int8", "--param matrix.dtypes: only numbers can be swept"),
    ("matrix.rows", "--param 'matrix.rows': expected KEY=V1,V2,..."),
])
def test_bad_param_is_one_error(tmp_path, capsys, param, msg):
    model = _tiny_model(tmp_path / "tiny.onnx")
    assert main(["sweep", str(model), "--param", param, "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("infer sweep: error: ") and msg in err and "\n" not in err, err


def test_tied_keys_and_toml_edit():
    base = config_path("edge").read_text()
    (p,) = parse_params(["matrix.rows+matrix.cols=32,64"], base)
    assert p.keys == ("matrix.rows", "matrix.cols") and p.values == (32, 64)
    text = derive_toml(base, {"matrix.rows": 32, "matrix.cols": 32, "energy.mac_pj.bf16": 0.5})
    data = tomllib.loads(text)
    assert (data["matrix"]["rows"], data["matrix"]["cols"], data["energy"]["mac_pj"]["bf16"]) == (32, 32, 0.5)
    assert "# systolic array R" in text  # comments kept
