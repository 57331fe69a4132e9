"""Pass registry, canonicalization trait hook-up, dynamic shapes, and the
writing-a-pass doc staying in sync with its example."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType
from xdsl.passes import ModulePass

from infer.dialects import graph as g
from infer.dialects.graph_interpreter import run_module
from infer.dialects.ir_io import IRError, make_context, parse_ir, verify_module
from infer.passes import infer_passes
from infer.dialects.graph_canonicalization import _ROOTS, graph_canonicalization_patterns, patterns_for
from infer.passes.graph_shape_inference import GraphShapeInferencePass

ROOT = Path(__file__).resolve().parents[3]
GRAPH_PASSES = {
    "graph-canonicalize", "graph-constant-fold", "graph-dce", "graph-shape-inference",
    "graph-fold-double-transpose", "graph-optimize", "graph-fold-batch-norm", "graph-fuse",
    "graph-prepare-tiling",
}


def test_registered_passes_load_under_their_name() -> None:
    passes = infer_passes()
    assert GRAPH_PASSES <= set(passes)
    for name in GRAPH_PASSES:
        cls = passes[name]()
        assert issubclass(cls, ModulePass) and cls.name == name
        cls()  # every option has a default


def test_pipeline_forwards_options() -> None:
    cls = infer_passes()["graph-optimize"]()
    steps = cls(max_elements=7, ignore_signed_zeros=True, require_static=True).passes()
    assert [p.name for p in steps] == [
        "graph-canonicalize", "graph-constant-fold", "graph-dce", "graph-shape-inference"
    ]
    assert steps[0].ignore_signed_zeros and steps[1].max_elements == 7 and steps[3].require_static


def test_patterns_for_every_root_op() -> None:
    patterns = graph_canonicalization_patterns()
    assert {type(p) for p in patterns} == set(_ROOTS)
    for op_type in g.Graph.operations:
        expected = {cls for cls, roots in _ROOTS.items() if op_type in roots}
        assert {type(p) for p in patterns_for(op_type)} == expected
    assert patterns_for(g.TransposeOp) and not patterns_for(g.Conv2dOp)


DYNAMIC_OK = g.DYNAMIC == DYNAMIC_INDEX

DYNAMIC = """
func.func @main(%x: tensor<2x3xf32>) -> tensor<?x?xf32> {
  %t = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<?x2xf32>
  %e = graph.exp %t : (tensor<?x2xf32>) -> tensor<?x?xf32>
  func.return %e : tensor<?x?xf32>
}
"""


@pytest.mark.xfail(
    not DYNAMIC_OK, strict=True,
    reason="graph.DYNAMIC (-1) is not xDSL's DYNAMIC_INDEX, so `?` results do not verify",
)
def test_shape_inference_refines_and_preserves_semantics() -> None:
    ctx = make_context()
    module = parse_ir(ctx, DYNAMIC, "dynamic.mlir")
    verify_module(module)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    (before,) = run_module(module, [x])
    GraphShapeInferencePass().apply(ctx, module)
    module.verify()
    fn = next(op for op in module.walk() if op.name == "func.func")
    (out,) = fn.function_type.outputs.data
    assert isinstance(out, TensorType) and out.get_shape() == (3, 2)
    (after,) = run_module(module, [x])
    np.testing.assert_array_equal(before, after)


@pytest.mark.xfail(not DYNAMIC_OK, strict=True, reason="see above")
def test_require_static_names_the_op() -> None:
    ctx = make_context()
    module = parse_ir(ctx, DYNAMIC.replace("%x: tensor<2x3xf32>", "%x: tensor<?x3xf32>").replace(
        "(tensor<2x3xf32>) -> tensor<?x2xf32>", "(tensor<?x3xf32>) -> tensor<?x?xf32>").replace(
        "(tensor<?x2xf32>) -> tensor<?x?xf32>", "(tensor<?x?xf32>) -> tensor<?x?xf32>"), "dyn.mlir")
    verify_module(module)
    with pytest.raises(IRError, match=r"^dyn.mlir:3:3: error: 'graph.transpose' op result #0 still has a dynamic shape"):
        GraphShapeInferencePass(require_static=True).apply(ctx, module)


def test_doc_example_is_the_pass_and_its_test() -> None:
    doc = (ROOT / "docs/writing-a-pass.md").read_text()
    blocks = re.findall(r"```(\w+)\n(.*?)```", doc, re.S)
    source = (ROOT / "passes/graph_fold_double_transpose.py").read_text()
    assert ("python", source) in blocks, "docs/writing-a-pass.md must show the example pass verbatim"
    test = (ROOT / "test/filecheck/passes/graph-fold-double-transpose.mlir").read_text().splitlines()
    (mlir,) = [b for lang, b in blocks if lang == "mlir"]
    for line in mlir.splitlines():
        assert not line or line in test, f"doc line not in the lit test: {line!r}"


def test_prepare_tiling_pipeline_forwards_options() -> None:
    cls = infer_passes()["graph-prepare-tiling"]()
    steps = cls(max_elements=9, erase_dead=False, max_epilogue=2, kinds=("matmul",), target="server").passes()
    assert [p.name for p in steps] == ["graph-optimize", "graph-cse", "graph-lower-runtime-conv",
                                      "graph-raise-activations", "graph-raise-rms-norm", "graph-raise-rotary",
                                      "graph-raise-attention", "graph-raise-linear",
                                      "graph-fold-batch-norm", "graph-merge-summed-convs", "graph-dce", "graph-fuse",
                                      "graph-fuse-norm-prologue"]
    assert steps[0].max_elements == 9 and not steps[8].erase_dead and steps[9].target == "server"
    assert steps[11].max_epilogue == 2 and steps[11].kinds == ("matmul",)
