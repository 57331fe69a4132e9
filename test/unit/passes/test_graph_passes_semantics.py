"""Every graph pass preserves what a module computes.

Each representative module is run with the reference interpreter on random
inputs before and after the pass; results must be identical (bit for bit, up
to the sign of zero for `ignore-signed-zeros`, and NaN == NaN).
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from infer.dialects import graph as g
from infer.dialects.dtypes import to_numpy_dtype
from infer.dialects.graph_interpreter import run_module
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights, referenced_weights, weights_of
from infer.passes import infer_passes

CTX = make_context()

# -- representative modules ----------------------------------------------------

MLP = """
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x6xf32> {
  %w = graph.weight @fc1.weight : tensor<8x16xf32>
  %wt = graph.transpose %w {perm = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %b = graph.weight @fc1.bias : tensor<16xf32>
  %half = graph.constant dense<0.5> : tensor<f32>
  %b2 = graph.mul %b, %half : (tensor<16xf32>, tensor<f32>) -> tensor<16xf32>
  %h = graph.linear %x, %wt, %b2 : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %nz = graph.constant dense<-0.0> : tensor<f32>
  %h1 = graph.add %h, %nz : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %r = graph.relu %h1 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %r2 = graph.relu %r : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %c = graph.clip %r2 {max = 0.75 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %w2 = graph.weight @fc2.weight : tensor<6x16xf32>
  %w2t = graph.transpose %w2 {perm = array<i64: 1, 0>} : (tensor<6x16xf32>) -> tensor<16x6xf32>
  %y = graph.matmul %c, %w2t : (tensor<4x16xf32>, tensor<16x6xf32>) -> tensor<4x6xf32>
  %one = graph.constant dense<1.0> : tensor<6xf32>
  %y1 = graph.mul %y, %one : (tensor<4x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  %unused = graph.exp %y1 : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %p = graph.constant dense<0.0> : tensor<f32>
  %y2 = graph.add %y1, %p : (tensor<4x6xf32>, tensor<f32>) -> tensor<4x6xf32>
  func.return %y2 : tensor<4x6xf32>
}
"""

CNN = """
func.func @main(%x: tensor<2x3x8x8xf32>) -> tensor<2x4xf32> {
  %w = graph.weight @conv.weight : tensor<4x3x3x3xf32>
  %y = graph.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x8x8xf32>
  %s = graph.constant dense<[1.0, 2.0, 0.5, 1.5]> : tensor<4xf32>
  %m = graph.constant dense<[0.1, -0.2, 0.3, 0.0]> : tensor<4xf32>
  %v = graph.constant dense<[1.0, 4.0, 0.25, 2.0]> : tensor<4xf32>
  %bn = graph.batch_norm %y, %s, %m, %m, %v : (tensor<2x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x8x8xf32>
  %r = graph.relu %bn : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %c = graph.clip %r {min = 0.0 : f64, max = 6.0 : f64} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = graph.max_pool2d %c {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x4x4xf32>
  %t = graph.transpose %p {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %t2 = graph.transpose %t {perm = array<i64: 0, 3, 1, 2>} : (tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %pad = graph.pad %t2 {pads = array<i64: 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %g = graph.global_avg_pool %pad : (tensor<2x4x4x4xf32>) -> tensor<2x4x1x1xf32>
  %f = graph.reshape %g : (tensor<2x4x1x1xf32>) -> tensor<2x4x1xf32>
  %f2 = graph.reshape %f : (tensor<2x4x1xf32>) -> tensor<2x4xf32>
  func.return %f2 : tensor<2x4xf32>
}
"""

ATTENTION = """
func.func @main(%x: tensor<1x5x16xf32>) -> tensor<1x5x16xf32> {
  %wq = graph.weight @q.weight : tensor<16x16xf32>
  %q = graph.linear %x, %wq : (tensor<1x5x16xf32>, tensor<16x16xf32>) -> tensor<1x5x16xf32>
  %q4 = graph.reshape %q : (tensor<1x5x16xf32>) -> tensor<1x5x4x4xf32>
  %qh = graph.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x5x4x4xf32>) -> tensor<1x4x5x4xf32>
  %kt = graph.transpose %qh {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x4x5x4xf32>) -> tensor<1x4x4x5xf32>
  %s = graph.matmul %qh, %kt : (tensor<1x4x5x4xf32>, tensor<1x4x4x5xf32>) -> tensor<1x4x5x5xf32>
  %scale = graph.constant dense<0.5> : tensor<f32>
  %s2 = graph.mul %s, %scale : (tensor<1x4x5x5xf32>, tensor<f32>) -> tensor<1x4x5x5xf32>
  %p = graph.softmax %s2 : (tensor<1x4x5x5xf32>) -> tensor<1x4x5x5xf32>
  %o = graph.matmul %p, %qh : (tensor<1x4x5x5xf32>, tensor<1x4x5x4xf32>) -> tensor<1x4x5x4xf32>
  %ot = graph.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x5x4xf32>) -> tensor<1x5x4x4xf32>
  %o3 = graph.reshape %ot : (tensor<1x5x4x4xf32>) -> tensor<1x5x16xf32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %o4 = graph.div %o3, %one : (tensor<1x5x16xf32>, tensor<f32>) -> tensor<1x5x16xf32>
  %sl = graph.slice %o4 {starts = array<i64: 0, 0, 0>, ends = array<i64: 1, 5, 16>, steps = array<i64: 1, 1, 1>} : (tensor<1x5x16xf32>) -> tensor<1x5x16xf32>
  %cat = graph.concat %sl {axis = 1 : i64} : (tensor<1x5x16xf32>) -> tensor<1x5x16xf32>
  %sum = graph.reduce_sum %cat {axes = array<i64: 0>} : (tensor<1x5x16xf32>) -> tensor<1x5x16xf32>
  func.return %sum : tensor<1x5x16xf32>
}
"""

INTEGER = """
func.func @main(%x: tensor<6xi8>, %b: tensor<6xi1>, %f: tensor<6xf16>) -> (tensor<6xi8>, tensor<6xi1>, tensor<6xf16>, tensor<6xi32>) {
  %n = graph.neg %x : (tensor<6xi8>) -> tensor<6xi8>
  %nn = graph.neg %n : (tensor<6xi8>) -> tensor<6xi8>
  %a = graph.abs %n : (tensor<6xi8>) -> tensor<6xi8>
  %zero = graph.constant dense<0> : tensor<i8>
  %a2 = graph.sub %a, %zero : (tensor<6xi8>, tensor<i8>) -> tensor<6xi8>
  %r = graph.relu %nn : (tensor<6xi8>) -> tensor<6xi8>
  %c = graph.clip %r {min = -3.0 : f64, max = 2.5 : f64} : (tensor<6xi8>) -> tensor<6xi8>
  %s = graph.add %c, %a2 : (tensor<6xi8>, tensor<6xi8>) -> tensor<6xi8>
  %nb = graph.not %b : (tensor<6xi1>) -> tensor<6xi1>
  %nnb = graph.not %nb : (tensor<6xi1>) -> tensor<6xi1>
  %t = graph.constant dense<true> : tensor<i1>
  %w = graph.where %t, %f, %f : (tensor<i1>, tensor<6xf16>, tensor<6xf16>) -> tensor<6xf16>
  %one = graph.constant dense<1.0> : tensor<f16>
  %w2 = graph.pow %w, %one : (tensor<6xf16>, tensor<f16>) -> tensor<6xf16>
  %fl = graph.floor %w2 : (tensor<6xf16>) -> tensor<6xf16>
  %fl2 = graph.floor %fl : (tensor<6xf16>) -> tensor<6xf16>
  %ci = graph.cast %s : (tensor<6xi8>) -> tensor<6xi32>
  %ci2 = graph.cast %ci : (tensor<6xi32>) -> tensor<6xi32>
  %k = graph.constant dense<[1, 2, 3, 4, 5, 6]> : tensor<6xi32>
  %k2 = graph.mul %k, %k : (tensor<6xi32>, tensor<6xi32>) -> tensor<6xi32>
  %out = graph.add %ci2, %k2 : (tensor<6xi32>, tensor<6xi32>) -> tensor<6xi32>
  func.return %s, %nnb, %fl2, %out : tensor<6xi8>, tensor<6xi1>, tensor<6xf16>, tensor<6xi32>
}
"""

WEIGHTS = {
    "fc1.weight": (8, 16),
    "fc1.bias": (16,),
    "fc2.weight": (6, 16),
    "conv.weight": (4, 3, 3, 3),
    "q.weight": (16, 16),
}

MODULES = {"mlp": MLP, "cnn": CNN, "attention": ATTENTION, "integer": INTEGER}

PASSES = [
    ("graph-canonicalize", {}),
    ("graph-canonicalize", {"ignore_signed_zeros": True}),
    ("graph-constant-fold", {}),
    ("graph-constant-fold", {"inline_limit": 0}),
    ("graph-constant-fold", {"max_elements": 4}),
    ("graph-dce", {}),
    ("graph-shape-inference", {}),
    ("graph-fold-double-transpose", {}),
    ("graph-optimize", {}),
]


def _store(rng: np.random.Generator) -> WeightStore:
    store = WeightStore()
    for name, shape in WEIGHTS.items():
        store.set(name, rng.standard_normal(shape).astype(np.float32))
    return store


def _load(text: str, store: WeightStore) -> ModuleOp:
    module = parse_ir(CTX, text, "test.mlir")
    verify_module(module)
    attach_weights(module, store)
    return module


def _inputs(module: ModuleOp, rng: np.random.Generator) -> list[np.ndarray]:
    fn = next(op for op in module.walk() if op.name == "func.func")
    arrays = []
    for t in fn.function_type.inputs.data:
        dtype = to_numpy_dtype(t.get_element_type())
        shape = t.get_shape()
        if dtype == np.bool_:
            arrays.append(rng.random(shape) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            arrays.append(rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype))
        else:
            a = rng.standard_normal(shape) * 3
            a.reshape(-1)[:2] = [0.0, -0.0]  # signed zeros
            arrays.append(a.astype(dtype))
    return arrays


def _apply(name: str, options: dict, module: ModuleOp) -> None:
    pass_type: type[ModulePass] = infer_passes()[name]()
    pass_type(**options).apply(CTX, module)
    module.verify()


def _same(before: list[np.ndarray], after: list[np.ndarray], signed_zeros: bool) -> None:
    assert len(before) == len(after)
    for b, a in zip(before, after):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)  # NaN == NaN here
        if signed_zeros and b.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(a), np.signbit(b))


@pytest.mark.parametrize("module_name", sorted(MODULES))
@pytest.mark.parametrize(("pass_name", "options"), PASSES, ids=lambda v: str(v) if not isinstance(v, dict) else ",".join(f"{k}={x}" for k, x in v.items()) or "default")
def test_pass_preserves_semantics(module_name: str, pass_name: str, options: dict) -> None:
    rng = np.random.default_rng(0)
    store = _store(rng)
    module = _load(MODULES[module_name], store)
    before_ops = sum(1 for _ in module.walk())
    transformed = module.clone()  # keeps the weights
    _apply(pass_name, options, transformed)
    signed_zeros = not options.get("ignore_signed_zeros", False)
    for seed in range(3):
        inputs = _inputs(module, np.random.default_rng(seed))
        _same(run_module(module, inputs), run_module(transformed, inputs), signed_zeros)
    # Every weight the output references exists in the store.
    for name in referenced_weights(transformed):
        assert name in weights_of(transformed)
    assert sum(1 for _ in transformed.walk()) <= before_ops


def test_optimize_simplifies_every_module() -> None:
    rng = np.random.default_rng(0)
    store = _store(rng)
    for text in MODULES.values():
        module = _load(text, store)
        n = sum(1 for _ in module.walk())
        _apply("graph-optimize", {}, module)
        assert sum(1 for _ in module.walk()) < n


def test_constant_fold_stores_large_results_as_weights() -> None:
    rng = np.random.default_rng(0)
    store = _store(rng)
    module = _load(MLP, store)
    _apply("graph-constant-fold", {}, module)
    names = referenced_weights(module)
    assert "fc1.weight.transpose" in names and "fc2.weight.transpose" in names
    np.testing.assert_array_equal(store.get("fc1.weight.transpose"), store.get("fc1.weight").T)
    # fc1.bias * 0.5 has 16 elements (inline-limit 16): inlined.
    assert any(isinstance(op, g.ConstantOp) and op.output.type.get_shape() == (16,) for op in module.walk())
