"""Per-layer check (`Executable.check`, `infer run --check`): the value each kernel leaves in
the simulated DRAM, copied right after it ran, against the same op of the compiled graph IR
on the reference interpreter. The demo CNN on edge, a kernel corrupted mid-run (DRAM hook)
and through its weights, old artifacts, the CLI table."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import infer
from infer.passes import infer_passes
from infer.runtime import ArtifactError, Executable
from infer.runtime.artifact import Artifact, marker_values, save_safetensors
from infer.tools.cli import main

pytestmark = pytest.mark.skipif("tile-to-npu" not in infer_passes(), reason="tile-to-npu is not registered")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from infer.tools.demo import build_demo_model

    path = build_demo_model(tmp_path_factory.mktemp("demo") / "demo.onnx")
    exe = infer.compile(path, target="edge")
    saved = exe.save(tmp_path_factory.mktemp("art") / "demo.npu")
    return infer.load(saved), saved  # what a user has: a saved artifact, loaded back


@pytest.fixture(scope="module")
def image():
    return np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)


def test_demo_one_row_per_kernel_all_close(demo, image):
    exe, _ = demo
    ops = exe.artifact.ops
    assert exe.artifact.layer_ir is not None and all(marker_values(o) for o in ops)
    msgs: list[str] = []
    rep = exe.check({"image": image}, progress=msgs.append)
    assert [r.kernel for r in rep.layers] == [o["name"] for o in ops]  # one row per kernel
    assert [r.name for r in rep.layers] == ["conv2d+relu_0", "max_pool2d_0", "conv2d+relu_1",
                                            "conv2d+add+relu_0", "global_avg_pool_0", "linear_0"]
    assert rep.layers[-1].output == "logits" and all(r.output is None for r in rep.layers[:-1])
    for r in rep.layers:
        assert r.comparison is not None and r.comparison.shape_ok, r
        assert r.cosine > 0.9999 and r.sqnr_db > 60 and r.max_abs < 1e-3, r
    assert rep.ok() and rep.first_bad is None and not rep.uncompared_kernels
    assert [c.name for c in rep.outputs] == ["logits"] and rep.outputs_ok()
    # the run's outputs are the plain run's, and the performance report is there too
    np.testing.assert_array_equal(rep.sim_outputs[0], exe.run([image])[0])
    assert exe.last_report is not None and exe.last_report.ops
    assert any("per-layer DRAM snapshots" in m for m in msgs)
    d = json.loads(json.dumps(rep.as_dict()))
    assert d["ok"] and len(d["layers"]) == len(ops) and d["layers"][0]["kernel"] == "kernel0"
    table = rep.table()
    assert "conv2d+relu_0" in table and "output logits" in table and "SQNR dB" in table


def _region(exe: Executable, k: int):
    (v,) = marker_values(exe.artifact.ops[k])
    return exe.artifact.ops[k]["end"], v


def test_corrupted_kernel_output_is_localised(demo, image):
    """Garbage written over kernel2's result right after it ran: rows 0-1 stay exact, kernel2
    is the first layer out of tolerance, and the later layers inherit its error."""
    exe, _ = demo
    pc, v = _region(exe, 2)

    def corrupt(at: int, dram: np.ndarray) -> None:
        vals = dram[v.offset:v.offset + v.nbytes].view(np.float32)
        vals[::3] = 7.0

    rep = exe.check([image], on_pc={pc: corrupt})
    bad = rep.first_bad
    assert bad is not None and bad.kernel == "kernel2" and bad.name == "conv2d+relu_1"
    assert all(r.ok() for r in rep.layers[:2])
    assert bad.cosine < 0.999 and bad.sqnr_db < 30
    assert not rep.ok()
    table = rep.table()
    assert "<- first out of tolerance" in table and "first layer out of tolerance: conv2d+relu_1 (kernel2)" in table
    line = next(x for x in table.splitlines() if "kernel2" in x)
    assert "first out of tolerance" in line


def test_corrupted_weight_is_localised(demo, image):
    """A weight of kernel3 patched in the artifact: the error starts at kernel3."""
    exe, _ = demo
    arrays = {k: np.array(a) for k, a in exe.artifact.weight_arrays().items()}
    # the conv's packed weights: `packed_hi`, or `packed_t_hi` when the cost model makes them stationary
    name = next(k for k in arrays if k.startswith("kernel3.") and ".packed" in k and k.endswith("_hi"))
    arrays[name] = -arrays[name]
    art = dataclasses.replace(exe.artifact, weights=save_safetensors(arrays))
    rep = Executable(art, exe.reference).check([image])
    assert rep.first_bad is not None and rep.first_bad.kernel == "kernel3"
    assert all(r.ok() for r in rep.layers[:3]) and not rep.outputs_ok()


def test_kernels_without_a_value_are_listed_not_compared(demo, image):
    exe, _ = demo
    ops = [dict(o) for o in exe.artifact.ops]
    del ops[1]["values"]  # as for a kernel computing a value inside a fused graph op
    rep = Executable(dataclasses.replace(exe.artifact, ops=ops), exe.reference).check([image])
    assert [r.kernel for r in rep.layers] == ["kernel0", "kernel2", "kernel3", "kernel4", "kernel5"]
    assert rep.uncompared_kernels == ["kernel1"] and rep.ok()
    assert "not compared: 1 kernel(s) defining no graph-level value" in rep.table()


def test_artifact_without_layer_reference_checks_outputs_only(demo, image):
    exe, _ = demo
    art = dataclasses.replace(exe.artifact, layer_ir=None, layer_weights=None)
    rep = Executable(art, exe.reference).check([image])
    assert rep.layers == [] and rep.outputs_ok() and "outputs only" in rep.note
    assert "output logits" in rep.table()


def test_layer_sections_round_trip_and_bad_values_are_refused(demo):
    exe, _ = demo
    back = Artifact.from_bytes(exe.artifact.to_bytes())
    assert back.layer_ir == exe.artifact.layer_ir and back.layer_weights == exe.artifact.layer_weights
    assert back.ops == exe.artifact.ops
    ops = [dict(o) for o in exe.artifact.ops]
    ops[0]["values"] = [{"layer": 2, "offset": exe.layout.total_bytes, "shape": [4], "dtype": "f32"}]
    with pytest.raises(ArtifactError, match="outside the DRAM image"):
        dataclasses.replace(exe.artifact, ops=ops).validate()
    ops[0]["values"] = [{"offset": 0, "shape": [4], "dtype": "f32"}]  # neither layer nor output
    with pytest.raises(ArtifactError, match="bad value entry"):
        dataclasses.replace(exe.artifact, ops=ops).validate()


def test_cli_run_check_prints_the_table(demo, image, tmp_path, capsys):
    _, path = demo
    np.savez(tmp_path / "in.npz", image=image)
    rc = main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--check", "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = out.splitlines()
    head = next(i for i, x in enumerate(lines) if x.split()[:3] == ["layer", "kernel", "kind"])
    rows = lines[head + 1:head + 8]
    assert [x.split()[0] for x in rows] == ["conv2d+relu_0", "max_pool2d_0", "conv2d+relu_1", "conv2d+add+relu_0",
                                           "global_avg_pool_0", "linear_0", "output"]
    assert all(float(x.split()[3]) > 0.9999 for x in rows[:6]) and float(rows[6].split()[4]) > 0.9999
    assert "per output:" in out and "logits: cosine" in out and "MISMATCH" not in out
    assert "per-layer DRAM snapshots" in err and "Traceback" not in err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["cycles"] > 0 and len(report["check"]["layers"]) == 6 and report["check"]["ok"]


def test_cli_run_check_bad_input_is_one_line(demo, tmp_path, capsys):
    _, path = demo
    np.savez(tmp_path / "in.npz", image=np.ones((1, 3, 8, 8), np.float32))
    assert main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--check"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("infer run: error:") and "expected shape [1, 3, 32, 32]" in err[-1]
    assert not any("Traceback" in x for x in err)


def test_fan_out_relays_stay_in_their_kernel():
    """A ResNet bottleneck on edge: tile-to-npu inserts front-end relay nops (fan-out beyond two
    signals) after a producer while a later kernel is emitted; the later kernel's marker must not
    swallow the earlier kernel's last instructions (its result would be read half written)."""
    import torch

    torch.manual_seed(0)

    class Bottleneck(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = torch.nn.Conv2d(64, 64, 1), torch.nn.Conv2d(64, 64, 3, padding=1)
            self.c3, self.ds = torch.nn.Conv2d(64, 256, 1), torch.nn.Conv2d(64, 256, 1)

        def forward(self, x):
            return torch.relu(self.c3(torch.relu(self.c2(torch.relu(self.c1(x))))) + self.ds(x))

    x = torch.randn(1, 64, 8, 8)
    exe = infer.compile(Bottleneck().eval(), target="edge", example_inputs=(x,))
    rep = exe.check([x.numpy()], trace=False)
    assert [r.name for r in rep.layers] == ["conv2d+relu_0", "conv2d+relu_1", "conv2d_0", "conv2d+add+relu_0"]
    assert rep.ok() and not rep.uncompared_kernels, rep.table()


def test_padded_pool_is_one_marker():
    """A max pool with padding lowers to a padding copy and the pool (two groups without
    weights): one marker named after it, not a marker of its own for the copy with the pool
    merged into the next conv's marker."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(3, 2, padding=1), torch.nn.Conv2d(8, 8, 1)).eval()
    x = torch.randn(1, 3, 16, 16)
    exe = infer.compile(model, target="edge", example_inputs=(x,))
    assert [o["name"] for o in exe.artifact.ops] == ["kernel0", "kernel1", "kernel2"]
    assert [o["kind"] for o in exe.artifact.ops] == ["matmul", "max", "matmul"]
    rep = exe.check([x.numpy()], trace=False)
    assert [(r.name, r.kernel) for r in rep.layers] == [("conv2d+relu_0", "kernel0"), ("max_pool2d_0", "kernel1"),
                                                        ("conv2d_0", "kernel2")]
    assert rep.ok()


def test_a_layer_computing_nan_that_a_where_discards_is_not_flagged(tmp_path):
    """where(x > 0, log(x), 0), the log also a model output: it holds NaN (and -inf at 0)
    where x <= 0, as the reference does; the check compares its finite values, counts the
    others, and flags nothing (it flagged the log's row with a NaN cosine before)."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Log", ["x"], ["lg"]),
             helper.make_node("Greater", ["x", "zero"], ["pos"]),
             helper.make_node("Where", ["pos", "lg", "zero"], ["y"])]
    graph = helper.make_graph(nodes, "safe_log", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16]),
                               helper.make_tensor_value_info("lg", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])
    path = tmp_path / "safe_log.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    exe = infer.compile(path, target="edge")
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    x[0, :3] = 0.0
    report = exe.check([x])
    assert report.ok(), report.table()
    log_row = next(r for r in report.layers if r.comparison is not None and r.comparison.specials)
    assert log_row.comparison.specials == int((x <= 0).sum()) and log_row.comparison.special_mismatches == 0
    assert "NaN/inf as the reference" in report.table() and "out of tolerance" not in report.table()
    lg = next(c for c in report.outputs if c.name == "lg")
    assert lg.ok() and lg.specials == int((x <= 0).sum()) and lg.cosine > 0.9999
    np.testing.assert_allclose(report.sim_outputs[0], np.where(x > 0, np.log(np.where(x > 0, x, 1)), 0),
                               rtol=1e-5, atol=1e-6)


def test_a_bool_layer_is_compared_exactly(tmp_path):
    """A comparison's mask (held as 0 / 1 in f32 DRAM) is compared, not skipped, and exactly:
    one flipped element of 4096 fails it (its SQNR would pass a tolerance)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Greater", ["x", "t"], ["m"], name="gt"),
             helper.make_node("Not", ["m"], ["nm"], name="not"),
             helper.make_node("Cast", ["nm"], ["f"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Mul", ["f", "x"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "mask", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64]),
                               helper.make_tensor_value_info("m", TensorProto.BOOL, [64, 64])],  # its own kernel
                              [numpy_helper.from_array(np.float32(-3.0), "t")])
    path = tmp_path / "mask.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    exe = infer.compile(path, target="edge")
    x = np.random.default_rng(4).standard_normal((64, 64)).astype(np.float32)
    clean = exe.check([x])
    assert clean.ok()
    mask_row = clean.layers[0]
    assert mask_row.comparison is not None and mask_row.comparison.exact and mask_row.comparison.max_abs == 0
    assert "(bool, held as 0 / 1: exact)" in clean.table()

    pc, v = _region(exe, 0)

    def flip_one(at: int, dram: np.ndarray) -> None:
        vals = dram[v.offset:v.offset + v.nbytes].view(np.float32)
        vals[5] = 1.0 - vals[5]

    rep = exe.check([x], on_pc={pc: flip_one})
    bad = rep.first_bad
    assert bad is not None and bad is rep.layers[0] and bad.comparison.max_abs == 1.0
    assert bad.sqnr_db > 30  # a tolerance would have passed it
