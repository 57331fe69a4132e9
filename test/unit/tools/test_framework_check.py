"""`infer run --check --framework MODEL.onnx`: onnxruntime names the odd one out when the
simulator and the reference interpreter disagree (tools/framework_check.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, save

from infer.tools.cli import main
from infer.tools.framework_check import judge
from infer.tools.reference import GraphReference


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    d = tmp_path_factory.mktemp("framework")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    save(model, str(d / "m.onnx"))
    assert main(["compile", str(d / "m.onnx"), "-o", str(d / "m.npu"), "-q"]) == 0
    np.savez(d / "in.npz", x=np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8))
    return d


def _run(d, *extra: str) -> int:
    return main(["run", str(d / "m.npu"), "--inputs", str(d / "in.npz"), "--check", "-q", *extra])


def test_a_wrong_reference_is_named_and_does_not_fail_the_run(compiled, monkeypatch, capsys):
    real = GraphReference.outputs
    monkeypatch.setattr(GraphReference, "outputs", lambda self, art, xs: [r + 1 for r in real(self, art, xs)])
    assert _run(compiled) == 1  # without the judge: a mismatch
    capsys.readouterr()
    assert _run(compiled, "--framework", str(compiled / "m.onnx")) == 0
    out = capsys.readouterr().out
    assert "y: the reference interpreter is the odd one out: the simulator agrees with onnxruntime" in out


def test_a_wrong_simulator_is_named_and_fails_the_run(compiled, monkeypatch, capsys):
    from infer.target import sim

    monkeypatch.setitem(sim.VECTOR_FUNCTIONS, "relu", np.abs)  # the simulator's relu is wrong
    assert _run(compiled, "--framework", str(compiled / "m.onnx")) == 1
    assert "y: the compiled program is the odd one out" in capsys.readouterr().out


def test_outputs_that_agree_need_no_judge(compiled, capsys):
    assert _run(compiled, "--framework", str(compiled / "m.onnx")) == 0
    assert "judged by onnxruntime" not in capsys.readouterr().out


def test_framework_needs_check_and_a_readable_model(compiled, tmp_path, monkeypatch, capsys):
    assert main(["run", str(compiled / "m.npu"), "--framework", str(compiled / "m.onnx")]) == 1
    assert "needs --check" in capsys.readouterr().err
    real = GraphReference.outputs
    monkeypatch.setattr(GraphReference, "outputs", lambda self, art, xs: [r + 1 for r in real(self, art, xs)])
    assert _run(compiled, "--framework", str(tmp_path / "missing.onnx")) == 1
    assert "infer run: error: --framework:" in capsys.readouterr().err


def test_three_way_disagreement_blames_nobody_in_particular():
    sim, ref, fw = np.array([1.0, 2.0]), np.array([-1.0, 5.0]), np.array([3.0, -2.0])
    (v,) = judge(["y"], [sim], [ref], {"y": fw})
    assert v.odd_one_out == "all three" and "all disagree" in v.line()
    assert judge(["y"], [sim], [sim], {"y": fw}) == []  # simulator and reference agree: nothing to judge
