"""The official ONNX node tests on ReferenceBackend (import + graph interpreter).

Every node test the installed onnx generates runs; the expected failures are
listed in infer/frontend/onnx_xfail_reference.json. A failure not in the list
fails, and so does a listed test that passes (regenerate the list with
`python -m infer.tools.onnx_xfail --write`), so the list stays exact; each entry
gives the reason the test fails (the failure it had when the list was written).
"""

from __future__ import annotations

import pytest

from infer.frontend.onnx_backend import ReferenceBackend

from helpers.onnx_node_tests import NodeTests

NODE_TESTS = NodeTests("reference", ReferenceBackend)


def test_backend_protocol():
    import numpy as np
    from onnx import TensorProto, helper

    assert ReferenceBackend.supports_device("CPU")
    assert not ReferenceBackend.supports_device("CUDA")
    node = helper.make_node("Add", ["a", "b"], ["c"])
    a, b = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
    (c,) = ReferenceBackend.run_node(node, [a, b])
    np.testing.assert_array_equal(c, a + b)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])
    model = helper.make_model(helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "g", [x, s], [y]))
    rep = ReferenceBackend.prepare(model)
    (out,) = rep.run([np.arange(8, dtype=np.float32).reshape(2, 4), np.array([4, 2])])
    assert out.shape == (4, 2)
    (out,) = rep.run({"x": np.zeros((3, 4), np.float32), "s": np.array([2, 6])})
    assert out.shape == (2, 6)


def test_xfail_list_names_existing_tests():
    NODE_TESTS.check_list_names_existing_tests()


def test_xfail_list_gives_every_reason():
    NODE_TESTS.check_every_entry_gives_a_reason()


@pytest.mark.parametrize("name", sorted(NODE_TESTS.cases))
def test_onnx_node(name: str):
    NODE_TESTS.check(name)
