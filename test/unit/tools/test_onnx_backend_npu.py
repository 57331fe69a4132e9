"""The official ONNX node tests on NpuBackend (import + compile-npu + simulator).

Every node test the installed onnx generates runs; the expected failures are
listed in infer/tools/npu_xfail.json. A failure not in the list fails, and so
does a listed test that passes (regenerate the list with
`python -m infer.tools.onnx_xfail --backend npu --write`), so the list stays
exact. Most failures are ops or dtypes the tile lowering does not handle yet;
the whole file takes about a minute (most unsupported tests fail at graph-to-tile).
"""

from __future__ import annotations

import numpy as np
import pytest

from infer.tools.onnx_backend import NpuBackend, default_target

from helpers.onnx_node_tests import NodeTests

NODE_TESTS = NodeTests("npu", NpuBackend)


@pytest.fixture(autouse=True)
def _check_races(monkeypatch):
    """Every compiled node test also runs the simulator's race checker."""
    monkeypatch.setenv("INFER_SIM_CHECK_RACES", "1")


def test_backend_protocol(monkeypatch):
    from onnx import TensorProto, helper

    assert NpuBackend.supports_device("CPU") and not NpuBackend.supports_device("CUDA")
    node = helper.make_node("Relu", ["a"], ["c"])
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    (c,) = NpuBackend.run_node(node, [a])
    np.testing.assert_array_equal(c, np.maximum(a, 0))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    model = helper.make_model(helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "g", [x], [y]))
    rep = NpuBackend.prepare(model, target="server")
    (out,) = rep.run({"x": np.zeros((4, 8), np.float32)})
    np.testing.assert_allclose(out, 0.5, rtol=1e-6)
    assert rep.last_executable.target == "server" and rep.last_executable.last_report.cycles > 0
    monkeypatch.setenv("INFER_TARGET", "server")
    assert default_target() == "server" and NpuBackend.prepare(model).target == "server"
    monkeypatch.delenv("INFER_TARGET")
    assert NpuBackend.prepare(model).target == "edge"


def test_xfail_list_names_existing_tests():
    NODE_TESTS.check_list_names_existing_tests()


def test_xfail_list_gives_every_reason():
    NODE_TESTS.check_every_entry_gives_a_reason()


@pytest.mark.parametrize("name", sorted(NODE_TESTS.cases))
def test_onnx_node_npu(name: str):
    NODE_TESTS.check(name)
