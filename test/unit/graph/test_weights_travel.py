"""Weights travel with the module (dialects/weights.py): `clone()` keeps them, print + parse
keeps the file reference, and a pass on a clone never changes the original's weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from infer.dialects.graph_interpreter import run_module
from infer.dialects.ir_io import load_ir_file, make_context, module_to_text, parse_ir
from infer.dialects.weights import WeightStore, attach_weights, referenced_weights, weights_of
from infer.passes.graph_constant_fold import GraphConstantFoldPass

CTX = make_context()
# The transpose of fc.weight (32 elements > the inline limit) folds into a new weight.
BODY = """  func.func @main(%x: tensor<2x4xf32>) -> tensor<2x8xf32> {
    %w = graph.weight @fc.weight : tensor<4x8xf32>
    %t = graph.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
    %y = graph.linear %x, %t : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
    func.return %y : tensor<2x8xf32>
  }
}
"""
W = np.arange(32, dtype=np.float32).reshape(4, 8) / 8
X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
REF = X @ W  # linear(x, w^T^T)


def _in_memory():
    module = parse_ir(CTX, "builtin.module {\n" + BODY, "m.mlir")
    store = WeightStore()
    store.set("fc.weight", W)
    attach_weights(module, store)
    return module, store


def _from_file(tmp_path: Path):
    save_file({"fc.weight": W}, str(tmp_path / "w.safetensors"))
    path = tmp_path / "m.mlir"
    path.write_text('builtin.module attributes {graph.weights = "w.safetensors"} {\n' + BODY)
    return load_ir_file(path)


def test_clone_keeps_the_weights(tmp_path):
    for module in (_in_memory()[0], _from_file(tmp_path)):
        clone = module.clone()
        np.testing.assert_array_equal(weights_of(clone).get("fc.weight"), W)
        np.testing.assert_allclose(run_module(clone, [X])[0], REF, rtol=1e-6)
        assert str(clone) == str(module)  # the same text: the clone names the same file


def test_print_parse_keeps_the_file_reference(tmp_path):
    module = _from_file(tmp_path)
    text = str(module)
    assert 'graph.weights = "w.safetensors"' in text  # printed as it was written
    again = parse_ir(CTX, text, str(tmp_path / "again.mlir"))
    assert weights_of(again, tmp_path).file == tmp_path / "w.safetensors"
    np.testing.assert_array_equal(weights_of(again).get("fc.weight"), W)
    # in-memory weights get a file when the module is written, and that is what is printed
    module, _ = _in_memory()
    out = tmp_path / "out" / "m.mlir"
    out.parent.mkdir()
    out.write_text(module_to_text(module, out))
    (written,) = out.parent.glob("m.*.weights.safetensors")
    back = load_ir_file(out)
    assert f'graph.weights = "{written.name}"' in str(back)
    np.testing.assert_array_equal(weights_of(back).get("fc.weight"), W)


def test_pass_on_a_clone_leaves_the_original_weights(tmp_path):
    for module in (_in_memory()[0], _from_file(tmp_path)):
        before = str(module)
        clone = module.clone()
        GraphConstantFoldPass().apply(CTX, clone)
        assert referenced_weights(clone) == ["fc.weight.transpose"]
        np.testing.assert_array_equal(weights_of(clone).get("fc.weight.transpose"), W.T)
        np.testing.assert_allclose(run_module(clone, [X])[0], REF, rtol=1e-6)
        # the original: same IR, same weights, none of the clone's
        assert str(module) == before and referenced_weights(module) == ["fc.weight"]
        assert "fc.weight.transpose" not in weights_of(module)
        np.testing.assert_allclose(run_module(module, [X])[0], REF, rtol=1e-6)
        # and the other way round: a write to the original after clone() stays the original's
        clone2 = module.clone()
        weights_of(module).set("fc.weight", W * 2)
        np.testing.assert_array_equal(weights_of(clone2).get("fc.weight"), W)
        np.testing.assert_array_equal(weights_of(clone).get("fc.weight"), W)


def test_attach_shares_and_a_module_without_weights_prints_none():
    module, store = _in_memory()
    other = parse_ir(CTX, "builtin.module {\n" + BODY, "other.mlir")
    attach_weights(other, store)  # explicit sharing: one store, two modules
    weights_of(module).set("extra", np.ones(3, np.float32))
    assert "extra" in weights_of(other) and weights_of(other) is store
    # no weights: no attribute, until something is written
    bare = parse_ir(CTX, "builtin.module {\n" + BODY, "bare.mlir")
    empty = weights_of(bare)
    assert "graph.weights" not in str(bare) and "fc.weight" not in empty
    empty.set("fc.weight", W)
    assert weights_of(bare) is empty and 'graph.weights = "<in memory>"' in str(bare)
    np.testing.assert_allclose(run_module(bare, [X])[0], REF, rtol=1e-6)
