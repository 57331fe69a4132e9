"""graph-fold-batch-norm and graph-fuse preserve what a module computes.

Each model (an MLP, a small residual CNN with batch norms, a transformer block
with an RMSNorm/SwiGLU variant) runs with the reference interpreter on random
inputs before and after the passes: graph-fuse must be bit-exact, batch norm
folding within 1e-5 (it changes the rounding).
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from infer.dialects import graph as g
from infer.dialects.graph_interpreter import evaluate_op, run_module
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights, referenced_weights, weights_of
from infer.passes import infer_passes

CTX = make_context()

MLP = """
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x6xf32> {
  %w1 = graph.weight @fc1.weight : tensor<16x8xf32>
  %b1 = graph.weight @fc1.bias : tensor<16xf32>
  %h = graph.linear %x, %w1 : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %hb = graph.add %h, %b1 : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %a = graph.gelu %hb : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %w2 = graph.weight @fc2.weight : tensor<6x16xf32>
  %b2 = graph.weight @fc2.bias : tensor<6xf32>
  %y = graph.linear %a, %w2, %b2 : (tensor<4x16xf32>, tensor<6x16xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  %t = graph.tanh %y : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %s = graph.softmax %t : (tensor<4x6xf32>) -> tensor<4x6xf32>
  func.return %s : tensor<4x6xf32>
}
"""

CNN = """
func.func @main(%x: tensor<2x3x8x8xf32>) -> tensor<2x5xf32> {
  %w1 = graph.weight @conv1.weight : tensor<8x3x3x3xf32>
  %b1 = graph.weight @conv1.bias : tensor<8xf32>
  %c1 = graph.conv2d %x, %w1, %b1 {padding = array<i64: 1, 1, 1, 1>} : (tensor<2x3x8x8xf32>, tensor<8x3x3x3xf32>, tensor<8xf32>) -> tensor<2x8x8x8xf32>
  %g1 = graph.weight @bn1.weight : tensor<8xf32>
  %be1 = graph.weight @bn1.bias : tensor<8xf32>
  %m1 = graph.weight @bn1.running_mean : tensor<8xf32>
  %v1 = graph.weight @bn1.running_var : tensor<8xf32>
  %n1 = graph.batch_norm %c1, %g1, %be1, %m1, %v1 : (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x8x8xf32>
  %r1 = graph.relu %n1 : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %w2 = graph.weight @conv2.weight : tensor<8x8x3x3xf32>
  %c2 = graph.conv2d %r1, %w2 {padding = array<i64: 1, 1, 1, 1>} : (tensor<2x8x8x8xf32>, tensor<8x8x3x3xf32>) -> tensor<2x8x8x8xf32>
  %g2 = graph.weight @bn2.weight : tensor<8xf32>
  %be2 = graph.weight @bn2.bias : tensor<8xf32>
  %m2 = graph.weight @bn2.running_mean : tensor<8xf32>
  %v2 = graph.weight @bn2.running_var : tensor<8xf32>
  %n2 = graph.batch_norm %c2, %g2, %be2, %m2, %v2 : (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x8x8xf32>
  %res = graph.add %n2, %r1 : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %r2 = graph.relu %res : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %p = graph.max_pool2d %r2 {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>} : (tensor<2x8x8x8xf32>) -> tensor<2x8x4x4xf32>
  %w3 = graph.weight @conv3.weight : tensor<8x8x1x1xf32>
  %c3 = graph.conv2d %p, %w3 : (tensor<2x8x4x4xf32>, tensor<8x8x1x1xf32>) -> tensor<2x8x4x4xf32>
  %half = graph.constant dense<0.5> : tensor<f32>
  %m3 = graph.mul %m2, %half : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %n3 = graph.batch_norm %c3, %g2, %be2, %m3, %v2 : (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x4x4xf32>
  %r3 = graph.relu %n3 : (tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32>
  %gp = graph.global_avg_pool %r3 : (tensor<2x8x4x4xf32>) -> tensor<2x8x1x1xf32>
  %f = graph.reshape %gp : (tensor<2x8x1x1xf32>) -> tensor<2x8xf32>
  %wf = graph.weight @fc.weight : tensor<5x8xf32>
  %bf = graph.weight @fc.bias : tensor<5xf32>
  %l = graph.linear %f, %wf, %bf : (tensor<2x8xf32>, tensor<5x8xf32>, tensor<5xf32>) -> tensor<2x5xf32>
  %g4 = graph.weight @bn4.weight : tensor<5xf32>
  %be4 = graph.weight @bn4.bias : tensor<5xf32>
  %m4 = graph.weight @bn4.running_mean : tensor<5xf32>
  %v4 = graph.weight @bn4.running_var : tensor<5xf32>
  %n4 = graph.batch_norm %l, %g4, %be4, %m4, %v4 : (tensor<2x5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>) -> tensor<2x5xf32>
  func.return %n4 : tensor<2x5xf32>
}
"""

# Pre-norm transformer block: layer_norm, q/k/v (GQA: 2 query heads, 1 kv head),
# causal attention, output projection + residual, RMSNorm, SwiGLU MLP + residual.
TRANSFORMER = """
func.func @main(%x: tensor<1x6x16xf32>) -> tensor<1x6x16xf32> {
  %lw = graph.weight @ln.weight : tensor<16xf32>
  %lb = graph.weight @ln.bias : tensor<16xf32>
  %ln = graph.layer_norm %x, %lw, %lb : (tensor<1x6x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<1x6x16xf32>
  %wq = graph.weight @q.weight : tensor<16x16xf32>
  %bq = graph.weight @q.bias : tensor<16xf32>
  %q = graph.linear %ln, %wq, %bq : (tensor<1x6x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<1x6x16xf32>
  %q4 = graph.reshape %q : (tensor<1x6x16xf32>) -> tensor<1x6x2x8xf32>
  %qh = graph.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x6x2x8xf32>) -> tensor<1x2x6x8xf32>
  %wk = graph.weight @k.weight : tensor<8x16xf32>
  %k = graph.linear %ln, %wk : (tensor<1x6x16xf32>, tensor<8x16xf32>) -> tensor<1x6x8xf32>
  %kh = graph.reshape %k : (tensor<1x6x8xf32>) -> tensor<1x1x6x8xf32>
  %wv = graph.weight @v.weight : tensor<8x16xf32>
  %v = graph.linear %ln, %wv : (tensor<1x6x16xf32>, tensor<8x16xf32>) -> tensor<1x6x8xf32>
  %vh = graph.reshape %v : (tensor<1x6x8xf32>) -> tensor<1x1x6x8xf32>
  %att = graph.attention %qh, %kh, %vh {causal = true} : (tensor<1x2x6x8xf32>, tensor<1x1x6x8xf32>, tensor<1x1x6x8xf32>) -> tensor<1x2x6x8xf32>
  %at = graph.transpose %att {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x6x8xf32>) -> tensor<1x6x2x8xf32>
  %a3 = graph.reshape %at : (tensor<1x6x2x8xf32>) -> tensor<1x6x16xf32>
  %wo = graph.weight @o.weight : tensor<16x16xf32>
  %bo = graph.weight @o.bias : tensor<16xf32>
  %o = graph.linear %a3, %wo, %bo : (tensor<1x6x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<1x6x16xf32>
  %h = graph.add %x, %o : (tensor<1x6x16xf32>, tensor<1x6x16xf32>) -> tensor<1x6x16xf32>
  %rw = graph.weight @rms.weight : tensor<16xf32>
  %n = graph.rms_norm %h, %rw {epsilon = 1.0e-06 : f64} : (tensor<1x6x16xf32>, tensor<16xf32>) -> tensor<1x6x16xf32>
  %wg = graph.weight @gate.weight : tensor<32x16xf32>
  %gt = graph.linear %n, %wg : (tensor<1x6x16xf32>, tensor<32x16xf32>) -> tensor<1x6x32xf32>
  %wu = graph.weight @up.weight : tensor<32x16xf32>
  %up = graph.linear %n, %wu : (tensor<1x6x16xf32>, tensor<32x16xf32>) -> tensor<1x6x32xf32>
  %sg = graph.silu %gt : (tensor<1x6x32xf32>) -> tensor<1x6x32xf32>
  %gu = graph.mul %sg, %up : (tensor<1x6x32xf32>, tensor<1x6x32xf32>) -> tensor<1x6x32xf32>
  %wd = graph.weight @down.weight : tensor<16x32xf32>
  %d = graph.linear %gu, %wd : (tensor<1x6x32xf32>, tensor<16x32xf32>) -> tensor<1x6x16xf32>
  %y = graph.add %h, %d : (tensor<1x6x16xf32>, tensor<1x6x16xf32>) -> tensor<1x6x16xf32>
  func.return %y : tensor<1x6x16xf32>
}
"""

MODULES = {"mlp": MLP, "cnn": CNN, "transformer": TRANSFORMER}


def _store(text: str, rng: np.random.Generator) -> WeightStore:
    """Random weights for every graph.weight of `text` (variances positive)."""
    module = parse_ir(CTX, text, "model.mlir")
    store = WeightStore()
    for op in module.walk():
        if isinstance(op, g.WeightOp) and op.weight_key not in store:
            shape = op.output.type.get_shape()
            if op.weight_key.endswith("running_var"):
                a = rng.uniform(0.5, 2.0, shape)
            else:
                a = rng.standard_normal(shape) * 0.5
            store.set(op.weight_key, a.astype(np.float32))
    return store


def _load(text: str, store: WeightStore) -> ModuleOp:
    module = parse_ir(CTX, text, "model.mlir")
    verify_module(module)
    attach_weights(module, store)
    return module


def _transform(module: ModuleOp, *passes: tuple[str, dict]) -> ModuleOp:
    after = module.clone()  # keeps the weights
    for name, options in passes:
        infer_passes()[name]()(**options).apply(CTX, after)
        verify_module(after)
    return after


def _inputs(module: ModuleOp, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    fn = next(op for op in module.walk() if op.name == "func.func")
    return [rng.standard_normal(t.get_shape()).astype(np.float32) * 2 for t in fn.function_type.inputs.data]


def _kinds(module: ModuleOp) -> list[str]:
    return [op.kind.data for op in module.walk() if isinstance(op, g.KernelOp)]


def _ops(module: ModuleOp, op_type: type) -> list:
    return [op for op in module.walk() if isinstance(op, op_type)]


FUSE_OPTIONS = [{}, {"max_epilogue": 0}, {"max_epilogue": 1}, {"kinds": ("matmul", "elementwise")}]


@pytest.mark.parametrize("options", FUSE_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
@pytest.mark.parametrize("name", sorted(MODULES))
def test_fuse_is_exact(name: str, options: dict) -> None:
    store = _store(MODULES[name], np.random.default_rng(0))
    module = _load(MODULES[name], store)
    fused = _transform(module, ("graph-fuse", options))
    assert _kinds(fused)
    for seed in range(3):
        inputs = _inputs(module, seed)
        for a, b in zip(run_module(module, inputs), run_module(fused, inputs), strict=True):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_fold_batch_norm_then_fuse_within_tolerance(name: str) -> None:
    store = _store(MODULES[name], np.random.default_rng(1))
    module = _load(MODULES[name], store)
    after = _transform(module, ("graph-fold-batch-norm", {}), ("graph-fuse", {}))
    for seed in range(3):
        inputs = _inputs(module, seed)
        for a, b in zip(run_module(module, inputs), run_module(after, inputs), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
    for weight in referenced_weights(after):
        assert weight in weights_of(after)


def test_fold_batch_norm_cnn() -> None:
    store = _store(CNN, np.random.default_rng(2))
    module = _load(CNN, store)
    folded = _transform(module, ("graph-fold-batch-norm", {}))
    # bn1 (conv + bias), bn2 (conv, no bias) and bn4 (linear, BatchNorm1d) fold; bn3's
    # mean is computed at run time, so it stays.
    (bn,) = _ops(folded, g.BatchNormOp)
    assert isinstance(bn.mean.owner, g.MulOp)
    names = set(referenced_weights(folded))
    assert {"conv1.weight.bn_folded", "conv1.bias.bn_folded", "conv2.weight.bn_folded",
            "conv2.bias.bn_folded", "fc.weight.bn_folded", "fc.bias.bn_folded"} <= names
    assert not any(n.startswith(("bn1.", "bn4.")) for n in names)
    w, gamma, var = store.get("conv1.weight"), store.get("bn1.weight"), store.get("bn1.running_var")
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5)
    np.testing.assert_allclose(weights_of(folded).get("conv1.weight.bn_folded"), w * scale[:, None, None, None],
                               rtol=1e-6)
    assert "conv1.weight.bn_folded" not in store  # the pass ran on a clone: the original's weights are as they were
    for seed in range(3):
        inputs = _inputs(module, seed)
        (a,), (b,) = run_module(module, inputs), run_module(folded, inputs)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_cnn_kernels() -> None:
    store = _store(CNN, np.random.default_rng(0))
    module = _load(CNN, store)
    after = _transform(module, ("graph-fold-batch-norm", {}), ("graph-fuse", {}))
    # conv-bn-relu; conv-bn + skip add + relu; maxpool; 1x1 conv; bn3's mean (mul)
    # on its own; the unfolded bn3 stays outside, relu after it; global pool; linear(+bn1d).
    assert _kinds(after) == ["conv", "conv", "pool", "conv", "elementwise", "elementwise", "pool", "matmul"]
    kernels = _ops(after, g.KernelOp)
    residual = kernels[1]
    assert [op.name for op in residual.body.block.ops] == ["graph.conv2d", "graph.add", "graph.relu", "graph.yield"]
    # the skip input is the first kernel's result, passed in as an operand
    assert kernels[0].results[0] in list(residual.inputs)


def test_transformer_kernels() -> None:
    store = _store(TRANSFORMER, np.random.default_rng(0))
    module = _load(TRANSFORMER, store)
    after = _transform(module, ("graph-fuse", {}))
    assert _kinds(after) == [
        "norm", "matmul", "matmul", "matmul", "attention", "matmul", "matmul", "matmul", "matmul"
    ]
    body = {k.results[0].name_hint: [op.name for op in k.body.block.ops][:-1] for k in _ops(after, g.KernelOp)}
    # out projection + residual, and the rms_norm of the sum as its norm epilogue: the kernel
    # returns the sum (the down projection's residual) and its norm (the gate's and up's input)
    assert body["h"] == ["graph.linear", "graph.add", "graph.rms_norm"]
    out_proj = next(k for k in _ops(after, g.KernelOp) if k.results[0].name_hint == "h")
    assert [r.name_hint for r in out_proj.results] == ["h", "n"]
    # no norm epilogue: the first layer_norm reads a function argument
    without = _transform(module, ("graph-fuse", {"norm_epilogue": False}))
    assert _kinds(without) == [
        "norm", "matmul", "matmul", "matmul", "attention", "matmul", "norm", "matmul", "matmul", "matmul"
    ]
    # the SwiGLU gate: silu and the mul by the up projection join the gate's kernel
    assert body["gu"] == ["graph.linear", "graph.silu", "graph.mul"]
    assert body["y"] == ["graph.linear", "graph.add"]  # down projection + residual
    gate = next(k for k in _ops(after, g.KernelOp) if k.results[0].name_hint == "gu")
    up = next(k for k in _ops(after, g.KernelOp) if k.results[0].name_hint == "up")
    assert up.results[0] in list(gate.inputs)
    # weights stay outside, as operands
    assert not any(isinstance(op, g.WeightOp) for k in _ops(after, g.KernelOp) for op in k.body.walk())


def test_fuse_is_idempotent() -> None:
    store = _store(TRANSFORMER, np.random.default_rng(0))
    module = _load(TRANSFORMER, store)
    once = _transform(module, ("graph-fuse", {}))
    twice = _transform(once, ("graph-fuse", {}))
    assert str(once) == str(twice)


def test_evaluate_op_runs_a_kernel() -> None:
    store = _store(MLP, np.random.default_rng(0))
    module = _transform(_load(MLP, store), ("graph-fuse", {}))
    kernel = _ops(module, g.KernelOp)[0]
    x = _inputs(module, 0)[0]
    operands = [x, store.get("fc1.weight"), store.get("fc1.bias")]
    (out,) = evaluate_op(kernel, operands)
    h = x @ operands[1].T + operands[2]
    reference = evaluate_op(kernel.body.block.first_op.next_op.next_op, [h])[0]  # gelu alone
    assert out.shape == (4, 16) and out.dtype == np.float32
    np.testing.assert_allclose(out, reference, rtol=1e-6, atol=1e-6)


def test_fuse_rejects_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="kinds must be among"):
        infer_passes()["graph-fuse"]()(kinds=("fancy",)).apply(CTX, ModuleOp([]))
