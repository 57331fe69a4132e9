"""graph-to-tile preserves what modules compute: graph interpreter (before) vs
tile interpreter (after), on random inputs, for both targets and precisions.

Tolerances: precision=fp32 (3-pass bf16 emulation) within rtol = atol = 1e-4;
precision=bf16 (matmul inputs rounded to bf16, fp32 accumulation) within
rtol = atol = 5e-2 (bf16 has 8 mantissa bits: ~4e-3 relative per input).
"""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects.ir_io import IRError, make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_to_tile import GraphToTilePass
from infer.passes.testing import check_pass_preserves_semantics

CTX = make_context()
TOL = {"fp32": 1e-4, "bf16": 5e-2}


def module(text: str, weights: dict[str, np.ndarray] | None = None):
    m = parse_ir(CTX, text, "test.mlir")
    verify_module(m)
    store = WeightStore()
    for k, v in (weights or {}).items():
        store.set(k, v.astype(np.float32))
    attach_weights(m, store)
    return m


def check(m, target: str, precision: str, **kw):
    tol = TOL[precision]
    r = check_pass_preserves_semantics(m, GraphToTilePass(target=target, precision=precision),
                                       rtol=tol, atol=tol, **kw)
    return max(float(np.max(np.abs(a - b))) for A, B in zip(r.after, r.before) for a, b in zip(A, B))


RNG = np.random.default_rng(0)

MLP = """
func.func @main(%x: tensor<2x37x48xf32> {graph.name = "x"}) -> (tensor<2x37x10xf32> {graph.name = "y"}) {
  %w1 = graph.weight @fc1.weight : tensor<72x48xf32>
  %b1 = graph.weight @fc1.bias : tensor<72xf32>
  %w2 = graph.weight @fc2.weight : tensor<10x72xf32>
  %h = graph.linear %x, %w1, %b1 : (tensor<2x37x48xf32>, tensor<72x48xf32>, tensor<72xf32>) -> tensor<2x37x72xf32>
  %g = graph.gelu %h : (tensor<2x37x72xf32>) -> tensor<2x37x72xf32>
  %y = graph.linear %g, %w2 : (tensor<2x37x72xf32>, tensor<10x72xf32>) -> tensor<2x37x10xf32>
  %half = graph.constant dense<0.5> : tensor<f32>
  %y2 = graph.mul %y, %half : (tensor<2x37x10xf32>, tensor<f32>) -> tensor<2x37x10xf32>
  %t = graph.tanh %y2 : (tensor<2x37x10xf32>) -> tensor<2x37x10xf32>
  func.return %t : tensor<2x37x10xf32>
}
"""
MLP_W = {"fc1.weight": RNG.standard_normal((72, 48)) * 0.2, "fc1.bias": RNG.standard_normal(72),
         "fc2.weight": RNG.standard_normal((10, 72)) * 0.2}

BMM = """
func.func @main(%a: tensor<3x20x40xf32>, %b: tensor<3x33x40xf32>, %r: tensor<3x20x33xf32>, %c: tensor<33xf32>) -> tensor<3x20x33xf32> {
  %s = graph.matmul %a, %b {transpose_b = true} : (tensor<3x20x40xf32>, tensor<3x33x40xf32>) -> tensor<3x20x33xf32>
  %t = graph.add %s, %r : (tensor<3x20x33xf32>, tensor<3x20x33xf32>) -> tensor<3x20x33xf32>
  %u = graph.sub %t, %c : (tensor<3x20x33xf32>, tensor<33xf32>) -> tensor<3x20x33xf32>
  %v = graph.sigmoid %u : (tensor<3x20x33xf32>) -> tensor<3x20x33xf32>
  func.return %v : tensor<3x20x33xf32>
}
"""

ELEMENTWISE = """
func.func @main(%x: tensor<2x3x5x7xf32>, %s: tensor<1x3x1x1xf32>, %row: tensor<7xf32>) -> (tensor<2x3x5x7xf32>, tensor<2x3x5x7xf32>) {
  %a = graph.mul %x, %s : (tensor<2x3x5x7xf32>, tensor<1x3x1x1xf32>) -> tensor<2x3x5x7xf32>
  %b = graph.add %a, %row : (tensor<2x3x5x7xf32>, tensor<7xf32>) -> tensor<2x3x5x7xf32>
  %c = graph.silu %b : (tensor<2x3x5x7xf32>) -> tensor<2x3x5x7xf32>
  %d = graph.leaky_relu %x {alpha = 0.1 : f64} : (tensor<2x3x5x7xf32>) -> tensor<2x3x5x7xf32>
  %two = graph.constant dense<2.0> : tensor<f32>
  %e = graph.div %d, %two : (tensor<2x3x5x7xf32>, tensor<f32>) -> tensor<2x3x5x7xf32>
  %f = graph.clip %e {min = -0.1 : f64, max = 0.6 : f64} : (tensor<2x3x5x7xf32>) -> tensor<2x3x5x7xf32>
  func.return %c, %f : tensor<2x3x5x7xf32>, tensor<2x3x5x7xf32>
}
"""


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_mlp(target, precision):
    check(module(MLP, MLP_W), target, precision)


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_batched_matmul_transpose_b_epilogue(target, precision):
    check(module(BMM), target, precision)


@pytest.mark.parametrize("target", ["edge", "server"])
def test_elementwise_broadcasting(target):
    check(module(ELEMENTWISE), target, "fp32")


def test_fp32_emulation_is_tight():
    err = check(module(MLP, MLP_W), "edge", "fp32")
    assert err < 2e-5


def test_unsupported_op_is_located_error():
    m = module("""
func.func @main(%x: tensor<1x2x5x5xf32>, %w: tensor<3x2x3x3xf32>) -> tensor<1x3x3x3xf32> {
  %y = graph.conv2d %x, %w : (tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x3x3xf32>
  func.return %y : tensor<1x3x3x3xf32>
}
""")
    with pytest.raises(IRError, match=r"test.mlir:3:\d+: error: 'graph.conv2d' op graph-to-tile: conv2d needs a compile-time weight"):
        GraphToTilePass().apply(CTX, m)


def test_tiling_differs_between_targets():
    logs = {}
    for target in ("edge", "server"):
        m = module(MLP, MLP_W)
        from infer.passes.graph_to_tile.context import LoweringSession
        from infer.passes.graph_to_tile.driver import FunctionLowering
        from infer.target.hw import load_config

        c = LoweringSession(load_config(target), "fp32", {}, False, m)
        from xdsl.dialects import func

        fn = next(o for o in m.ops if isinstance(o, func.FuncOp))
        FunctionLowering(c, fn).run()
        logs[target] = [line for line in c.log if "tiles" in line]
    assert logs["edge"] != logs["server"]


def test_override_applies():
    m = module(MLP, MLP_W)
    GraphToTilePass(overrides="kernel0=16x16x16").apply(CTX, m)
    text = str(m)
    assert "memref<16x16xbf16, \"spad\">" in text


CNN = """
func.func @main(%x: tensor<2x3x11x11xf32> {graph.name = "image"}) -> (tensor<2x8x6x6xf32>, tensor<2x8x1x1xf32>, tensor<2x8x3x3xf32>, tensor<2x8x4x4xf32>) {
  %w = graph.weight @c1.weight : tensor<8x3x3x3xf32>
  %b = graph.weight @c1.bias : tensor<8xf32>
  %y = graph.conv2d %x, %w, %b {stride = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>} : (tensor<2x3x11x11xf32>, tensor<8x3x3x3xf32>, tensor<8xf32>) -> tensor<2x8x6x6xf32>
  %sc = graph.weight @bn.scale : tensor<8xf32>
  %sh = graph.weight @bn.bias : tensor<8xf32>
  %mu = graph.weight @bn.mean : tensor<8xf32>
  %var = graph.weight @bn.var : tensor<8xf32>
  %bn = graph.batch_norm %y, %sc, %sh, %mu, %var : (tensor<2x8x6x6xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x6x6xf32>
  %r = graph.relu %bn : (tensor<2x8x6x6xf32>) -> tensor<2x8x6x6xf32>
  %w2 = graph.weight @c2.weight : tensor<8x4x3x3xf32>
  %y2 = graph.conv2d %r, %w2 {padding = array<i64: 1, 1, 1, 1>, groups = 2} : (tensor<2x8x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<2x8x6x6xf32>
  %s = graph.add %y2, %r : (tensor<2x8x6x6xf32>, tensor<2x8x6x6xf32>) -> tensor<2x8x6x6xf32>
  %gp = graph.global_avg_pool %s : (tensor<2x8x6x6xf32>) -> tensor<2x8x1x1xf32>
  %mp = graph.max_pool2d %s {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>} : (tensor<2x8x6x6xf32>) -> tensor<2x8x3x3xf32>
  %ap = graph.avg_pool2d %s {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, ceil_mode = true} : (tensor<2x8x6x6xf32>) -> tensor<2x8x4x4xf32>
  func.return %s, %gp, %mp, %ap : tensor<2x8x6x6xf32>, tensor<2x8x1x1xf32>, tensor<2x8x3x3xf32>, tensor<2x8x4x4xf32>
}
"""
CNN_W = {"c1.weight": RNG.standard_normal((8, 3, 3, 3)) * 0.3, "c1.bias": RNG.standard_normal(8),
         "bn.scale": RNG.uniform(0.5, 1.5, 8), "bn.bias": RNG.standard_normal(8),
         "bn.mean": RNG.standard_normal(8) * 0.1, "bn.var": RNG.uniform(0.5, 2, 8),
         "c2.weight": RNG.standard_normal((8, 4, 3, 3)) * 0.3}


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cnn_residual_batch_norm_pooling(target, precision):
    check(module(CNN, CNN_W), target, precision)


@pytest.mark.parametrize("target", ["edge", "server"])
def test_cnn_after_fold_batch_norm_and_fuse(target):
    m = module(CNN, CNN_W)
    tol = TOL["fp32"]
    r = check_pass_preserves_semantics(
        m, f"graph-fold-batch-norm,graph-fuse,graph-to-tile{{target={target}}}", rtol=tol, atol=tol)
    assert "graph." not in str(r.module).replace("graph.name", "").replace("graph.weights", "")


@pytest.mark.parametrize("target", ["edge", "server"])
def test_batch_norm_over_features_in_row_tiles(target):
    """BatchNorm1d of [N, C] activations (no conv or linear to fold it into): rows of C features
    with the parameters as row vectors (a [C, 1] column tile per sample before)."""
    m = module("""
func.func @main(%x: tensor<37x48xf32>) -> tensor<37x48xf32> {
  %sc = graph.weight @bn.scale : tensor<48xf32>
  %sh = graph.weight @bn.bias : tensor<48xf32>
  %mu = graph.weight @bn.mean : tensor<48xf32>
  %var = graph.weight @bn.var : tensor<48xf32>
  %y = graph.batch_norm %x, %sc, %sh, %mu, %var : (tensor<37x48xf32>, tensor<48xf32>, tensor<48xf32>, tensor<48xf32>, tensor<48xf32>) -> tensor<37x48xf32>
  func.return %y : tensor<37x48xf32>
}
""", {"bn.scale": RNG.uniform(0.5, 1.5, 48), "bn.bias": RNG.standard_normal(48),
      "bn.mean": RNG.standard_normal(48) * 0.1, "bn.var": RNG.uniform(0.5, 2, 48)})
    check(m, target, "fp32")
    GraphToTilePass(target=target).apply(CTX, m)
    vector_ops = [line for line in str(m).splitlines() if "tile.vector" in line]
    assert vector_ops and all('bmode = "row"' in line and "cols = 48" in line for line in vector_ops)


def test_conv_residual_with_short_last_row_tile():
    """64 channels 28x28, 3x3 pad 1 and a fused residual add: edge tiles the 28 output rows
    as 16 + 12, and the short last row tile stores from its own, smaller buffers."""
    m = module("""
func.func @main(%x: tensor<1x64x28x28xf32>, %res: tensor<1x64x28x28xf32>) -> tensor<1x64x28x28xf32> {
  %w = graph.weight @w : tensor<64x64x3x3xf32>
  %y = graph.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x64x28x28xf32>, tensor<64x64x3x3xf32>) -> tensor<1x64x28x28xf32>
  %s = graph.add %y, %res : (tensor<1x64x28x28xf32>, tensor<1x64x28x28xf32>) -> tensor<1x64x28x28xf32>
  func.return %s : tensor<1x64x28x28xf32>
}
""", {"w": RNG.standard_normal((64, 64, 3, 3)) * 0.05})
    check(m, "edge", "fp32")


def test_resnet_sized_conv_is_compact():
    """A ResNet-50 stage conv (256 -> 64 channels, 3x3, 56x56) lowers to a few ops per loop body
    (the kernel and the nest that prepares its padded input planes: the size does not grow with
    the problem)."""
    m = module("""
func.func @main(%x: tensor<1x256x56x56xf32>) -> tensor<1x64x56x56xf32> {
  %w = graph.weight @w : tensor<64x256x3x3xf32>
  %y = graph.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x256x56x56xf32>, tensor<64x256x3x3xf32>) -> tensor<1x64x56x56xf32>
  %r = graph.relu %y : (tensor<1x64x56x56xf32>) -> tensor<1x64x56x56xf32>
  func.return %r : tensor<1x64x56x56xf32>
}
""", {"w": np.zeros((64, 256, 3, 3))})
    for target in ("edge", "server"):
        mm = m.clone()  # keeps m's weights; the f32 `w` set below is the clone's alone
        from infer.dialects.weights import weights_of

        weights_of(mm).set("w", np.zeros((64, 256, 3, 3), np.float32))
        GraphToTilePass(target=target).apply(CTX, mm)
        verify_module(mm)
        n_ops = sum(1 for _ in mm.walk())
        assert n_ops < 250, (target, n_ops)


BLOCK = """
func.func @main(%x: tensor<1x24x32xf32> {graph.name = "hidden"}) -> (tensor<1x24x32xf32> {graph.name = "out"}) {
  %g = graph.weight @ln.weight : tensor<32xf32>
  %b = graph.weight @ln.bias : tensor<32xf32>
  %h = graph.layer_norm %x, %g, %b : (tensor<1x24x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<1x24x32xf32>
  %wq = graph.weight @q.weight : tensor<32x32xf32>
  %wk = graph.weight @k.weight : tensor<16x32xf32>
  %wv = graph.weight @v.weight : tensor<16x32xf32>
  %q = graph.linear %h, %wq : (tensor<1x24x32xf32>, tensor<32x32xf32>) -> tensor<1x24x32xf32>
  %k = graph.linear %h, %wk : (tensor<1x24x32xf32>, tensor<16x32xf32>) -> tensor<1x24x16xf32>
  %v = graph.linear %h, %wv : (tensor<1x24x32xf32>, tensor<16x32xf32>) -> tensor<1x24x16xf32>
  %q4 = graph.reshape %q : (tensor<1x24x32xf32>) -> tensor<1x24x4x8xf32>
  %k4 = graph.reshape %k : (tensor<1x24x16xf32>) -> tensor<1x24x2x8xf32>
  %v4 = graph.reshape %v : (tensor<1x24x16xf32>) -> tensor<1x24x2x8xf32>
  %qt = graph.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x24x4x8xf32>) -> tensor<1x4x24x8xf32>
  %kt = graph.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x24x2x8xf32>) -> tensor<1x2x24x8xf32>
  %vt = graph.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x24x2x8xf32>) -> tensor<1x2x24x8xf32>
  %a = graph.attention %qt, %kt, %vt {causal = true} : (tensor<1x4x24x8xf32>, tensor<1x2x24x8xf32>, tensor<1x2x24x8xf32>) -> tensor<1x4x24x8xf32>
  %at = graph.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x24x8xf32>) -> tensor<1x24x4x8xf32>
  %a3 = graph.reshape %at : (tensor<1x24x4x8xf32>) -> tensor<1x24x32xf32>
  %wo = graph.weight @o.weight : tensor<32x32xf32>
  %o = graph.linear %a3, %wo : (tensor<1x24x32xf32>, tensor<32x32xf32>) -> tensor<1x24x32xf32>
  %r = graph.add %o, %x : (tensor<1x24x32xf32>, tensor<1x24x32xf32>) -> tensor<1x24x32xf32>
  %w1 = graph.weight @fc1.weight : tensor<64x32xf32>
  %h2 = graph.rms_norm %r, %g : (tensor<1x24x32xf32>, tensor<32xf32>) -> tensor<1x24x32xf32>
  %f = graph.linear %h2, %w1 : (tensor<1x24x32xf32>, tensor<64x32xf32>) -> tensor<1x24x64xf32>
  %fa = graph.gelu %f {approximate = "tanh"} : (tensor<1x24x64xf32>) -> tensor<1x24x64xf32>
  %w2 = graph.weight @fc2.weight : tensor<32x64xf32>
  %f2 = graph.linear %fa, %w2 : (tensor<1x24x64xf32>, tensor<32x64xf32>) -> tensor<1x24x32xf32>
  %y = graph.add %f2, %r : (tensor<1x24x32xf32>, tensor<1x24x32xf32>) -> tensor<1x24x32xf32>
  %sm = graph.softmax %y : (tensor<1x24x32xf32>) -> tensor<1x24x32xf32>
  func.return %sm : tensor<1x24x32xf32>
}
"""
BLOCK_W = {"ln.weight": RNG.uniform(0.5, 1.5, 32), "ln.bias": RNG.standard_normal(32) * 0.1,
           "q.weight": RNG.standard_normal((32, 32)) * 0.2, "k.weight": RNG.standard_normal((16, 32)) * 0.2,
           "v.weight": RNG.standard_normal((16, 32)) * 0.2, "o.weight": RNG.standard_normal((32, 32)) * 0.2,
           "fc1.weight": RNG.standard_normal((64, 32)) * 0.2, "fc2.weight": RNG.standard_normal((32, 64)) * 0.2}


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_transformer_block(target, precision):
    check(module(BLOCK, BLOCK_W), target, precision)


@pytest.mark.parametrize("overrides", ["kernel4=8x8", "kernel4=16x8", "kernel4=8x16", "kernel4=5x7"])
def test_flash_attention_multi_tile_causal(overrides):
    """Several query and key tiles (online softmax rescaling, causal band masks, remainders).
    kernel4 is the attention: its three head-split transposes are folded into it (head_layout.py)."""
    m = module(BLOCK, BLOCK_W)
    tol = TOL["fp32"]
    r = check_pass_preserves_semantics(m, GraphToTilePass(overrides=overrides), rtol=tol, atol=tol)
    tq, tkv = overrides.split("=")[1].split("x")
    assert f"memref<{tq}x{tkv}xf32, \"acc\">" in str(r.module)  # the score tile, on chip


@pytest.mark.parametrize("target", ["edge", "server"])
def test_transformer_block_after_fuse(target):
    tol = TOL["fp32"]
    check_pass_preserves_semantics(module(BLOCK, BLOCK_W), f"graph-fuse,graph-to-tile{{target={target}}}",
                                   rtol=tol, atol=tol)


def test_vector_box_wider_than_one_instruction_is_split():
    """A vector op or fill over more columns than the ISA's 16-bit `cols` field encodes becomes
    several instructions whose boxes tile the original one; a row-broadcast operand moves
    with the column chunks only."""
    from xdsl.dialects.builtin import f32
    from xdsl.ir import Block

    from infer.dialects import tile as t
    from infer.passes.graph_to_tile.builder import Emitter

    cols = 70000
    block = Block(arg_types=[t.memref((2, cols), f32, "spad"), t.memref((1, cols), f32, "spad")])
    em = Emitter(block)
    x, row = block.args
    em.vec("add", x, [0, 0], x, [0, 0], 2, cols, row, [0, 0], bmode="row")
    em.fill(x, [0, 0], 2, cols, 0.0)

    def static(indices) -> list[int]:
        return [v.owner.value.value.data for v in indices]

    vecs = [o for o in block.ops if isinstance(o, t.VectorOp)]
    fills = [o for o in block.ops if isinstance(o, t.FillOp)]
    assert [(static(o.dst_indices), static(o.b_indices), o.cols.value.data) for o in vecs] == [
        ([0, 0], [0, 0], 65535), ([0, 65535], [0, 65535], cols - 65535)]
    assert [o.rows.value.data for o in vecs] == [2, 2]
    assert sum(o.cols.value.data for o in fills) == cols


@pytest.mark.parametrize("target", ["edge", "server"])
def test_strided_max_pool_reads_whole_rows(target):
    """A 3x3 stride-2 padded max pool reads its taps from the input's stride-phase planes: no
    window DMA steps over columns (one element per DRAM burst), and the result matches."""
    m = module("""
func.func @main(%x: tensor<1x8x18x18xf32>) -> tensor<1x8x9x9xf32> {
  %o = graph.max_pool2d %x {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>} : (tensor<1x8x18x18xf32>) -> tensor<1x8x9x9xf32>
  func.return %o : tensor<1x8x9x9xf32>
}
""")
    check(m.clone(), target, "fp32")
    GraphToTilePass(target=target).apply(CTX, m)
    from infer.dialects import tile as t

    dmas = [o for o in m.walk() if isinstance(o, t.DmaOp)]
    assert dmas and all("src_steps" not in o.properties or list(o.properties["src_steps"].get_values())[-1] == 1
                        for o in dmas)
