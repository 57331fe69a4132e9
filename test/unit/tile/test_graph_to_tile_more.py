"""graph-to-tile coverage beyond GEMM/conv/norms: data movement (slice, concat,
broadcast, pad), where, reductions, gather (embedding lookup), rotary, attention
with explicit masks, casts. Graph interpreter (before) vs tile interpreter
(after), both targets and both precisions (fp32: rtol = atol = 1e-4, bf16: 5e-2).
"""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.passes.graph_to_tile import GraphToTilePass
from infer.passes.testing import check_pass_preserves_semantics

CTX = make_context()
TOL = {"fp32": 1e-4, "bf16": 5e-2}
BOTH = pytest.mark.parametrize("target", ["edge", "server"])
PREC = pytest.mark.parametrize("precision", ["fp32", "bf16"])
RNG = np.random.default_rng(1)


def module(text: str, weights: dict[str, np.ndarray] | None = None):
    m = parse_ir(CTX, text, "test.mlir")
    verify_module(m)
    store = WeightStore()
    for k, v in (weights or {}).items():
        store.set(k, v)
    attach_weights(m, store)
    return m


def check(m, target: str, precision: str, **kw):
    tol = TOL[precision]
    r = check_pass_preserves_semantics(m, GraphToTilePass(target=target, precision=precision),
                                       rtol=tol, atol=tol, **kw)
    assert "graph." not in str(r.module).replace("graph.name", "").replace("graph.weights", "")
    return r


def fn(args: str, results: str, body: str) -> str:
    return f"func.func @main({args}) -> ({results}) {{\n{body}\n}}\n"


# ---------------------------------------------------------------------------
# 1. data movement
# ---------------------------------------------------------------------------

SLICE = fn("%x: tensor<2x5x9x7xf32>", "tensor<2x2x4x7xf32>, tensor<1x5x3x2xf32>, tensor<2x5x9x3xf32>, tensor<2x3x2x7xf32>", """
  %a = graph.slice %x {starts = array<i64: 0, 1, 2, 0>, ends = array<i64: 2, 5, 9, 7>, steps = array<i64: 1, 2, 2, 1>} : (tensor<2x5x9x7xf32>) -> tensor<2x2x4x7xf32>
  %b = graph.slice %x {starts = array<i64: 1, 0, 1, 1>, ends = array<i64: 2, 5, 8, 7>, steps = array<i64: 1, 1, 3, 4>} : (tensor<2x5x9x7xf32>) -> tensor<1x5x3x2xf32>
  %c = graph.slice %x {starts = array<i64: 0, 0, 0, 6>, ends = array<i64: 2, 5, 9, 3>, steps = array<i64: 1, 1, 1, -1>} : (tensor<2x5x9x7xf32>) -> tensor<2x5x9x3xf32>
  %d = graph.slice %x {starts = array<i64: 0, 4, 8, 0>, ends = array<i64: 2, 1, -1, 7>, steps = array<i64: 1, -1, -5, 1>} : (tensor<2x5x9x7xf32>) -> tensor<2x3x2x7xf32>
  func.return %a, %b, %c, %d : tensor<2x2x4x7xf32>, tensor<1x5x3x2xf32>, tensor<2x5x9x3xf32>, tensor<2x3x2x7xf32>""")

CONCAT = fn("%x: tensor<2x3x4xf32>, %y: tensor<2x5x4xf32>, %z: tensor<2x3x6xf32>", "tensor<2x11x4xf32>, tensor<2x3x10xf32>, tensor<4x3x4xf32>", """
  %c = graph.constant dense<1.5> : tensor<2x3x4xf32>
  %a = graph.concat %x, %y, %c {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x5x4xf32>, tensor<2x3x4xf32>) -> tensor<2x11x4xf32>
  %b = graph.concat %x, %z {axis = -1 : i64} : (tensor<2x3x4xf32>, tensor<2x3x6xf32>) -> tensor<2x3x10xf32>
  %d = graph.concat %x, %x {axis = 0 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<4x3x4xf32>
  func.return %a, %b, %d : tensor<2x11x4xf32>, tensor<2x3x10xf32>, tensor<4x3x4xf32>""")

BROADCAST = fn("%x: tensor<3x1x5xf32>, %y: tensor<4x1xf32>, %s: tensor<1xf32>", "tensor<2x3x4x5xf32>, tensor<3x4x6xf32>, tensor<2x3xf32>", """
  %a = graph.broadcast %x : (tensor<3x1x5xf32>) -> tensor<2x3x4x5xf32>
  %b = graph.broadcast %y : (tensor<4x1xf32>) -> tensor<3x4x6xf32>
  %c = graph.broadcast %s : (tensor<1xf32>) -> tensor<2x3xf32>
  func.return %a, %b, %c : tensor<2x3x4x5xf32>, tensor<3x4x6xf32>, tensor<2x3xf32>""")

PAD = fn("%x: tensor<2x3x5x6xf32>", "tensor<2x3x8x9xf32>, tensor<3x3x5x7xf32>", """
  %a = graph.pad %x {pads = array<i64: 0, 0, 1, 2, 0, 0, 2, 1>} : (tensor<2x3x5x6xf32>) -> tensor<2x3x8x9xf32>
  %b = graph.pad %x {pads = array<i64: 1, 0, 0, 0, 0, 0, 0, 1>, value = -2.5 : f64} : (tensor<2x3x5x6xf32>) -> tensor<3x3x5x7xf32>
  func.return %a, %b : tensor<2x3x8x9xf32>, tensor<3x3x5x7xf32>""")

RESHAPE = fn("%x: tensor<2x3x4xf32>", "tensor<4x6xf32>", """
  %t = graph.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %r = graph.reshape %t : (tensor<4x2x3xf32>) -> tensor<4x6xf32>
  %y = graph.relu %r : (tensor<4x6xf32>) -> tensor<4x6xf32>
  func.return %y : tensor<4x6xf32>""")


@BOTH
@PREC
@pytest.mark.parametrize("text", [SLICE, CONCAT, BROADCAST, PAD, RESHAPE], ids=["slice", "concat", "broadcast", "pad", "reshape"])
def test_data_movement(text, target, precision):
    check(module(text), target, precision)


def test_large_rows_are_tiled():
    """Rows wider than a staging tile are cut into column tiles."""
    m = module(fn("%x: tensor<3x5000xf32>", "tensor<3x4999xf32>, tensor<3x10000xf32>", """
  %a = graph.slice %x {starts = array<i64: 0, 1>, ends = array<i64: 3, 5000>, steps = array<i64: 1, 1>} : (tensor<3x5000xf32>) -> tensor<3x4999xf32>
  %b = graph.concat %x, %x {axis = 1 : i64} : (tensor<3x5000xf32>, tensor<3x5000xf32>) -> tensor<3x10000xf32>
  func.return %a, %b : tensor<3x4999xf32>, tensor<3x10000xf32>"""))
    check(m, "edge", "fp32", seeds=(0,))


# ---------------------------------------------------------------------------
# 2. reductions
# ---------------------------------------------------------------------------

REDUCE = fn("%x: tensor<2x3x5x6xf32>", "tensor<2x3x5x1xf32>, tensor<2x1x5x6xf32>, tensor<3x5xf32>, tensor<2x3x1x1xf32>, tensor<1x3x1x6xf32>, tensor<f32>", """
  %a = graph.reduce_sum %x {axes = array<i64: -1>} : (tensor<2x3x5x6xf32>) -> tensor<2x3x5x1xf32>
  %b = graph.reduce_max %x {axes = array<i64: 1>} : (tensor<2x3x5x6xf32>) -> tensor<2x1x5x6xf32>
  %c = graph.reduce_mean %x {axes = array<i64: 0, 3>, keepdims = false} : (tensor<2x3x5x6xf32>) -> tensor<3x5xf32>
  %d = graph.reduce_min %x {axes = array<i64: 2, 3>} : (tensor<2x3x5x6xf32>) -> tensor<2x3x1x1xf32>
  %e = graph.reduce_min %x {axes = array<i64: 0, 2>} : (tensor<2x3x5x6xf32>) -> tensor<1x3x1x6xf32>
  %f = graph.reduce_mean %x {keepdims = false} : (tensor<2x3x5x6xf32>) -> tensor<f32>
  func.return %a, %b, %c, %d, %e, %f : tensor<2x3x5x1xf32>, tensor<2x1x5x6xf32>, tensor<3x5xf32>, tensor<2x3x1x1xf32>, tensor<1x3x1x6xf32>, tensor<f32>""")


@BOTH
@PREC
def test_reductions(target, precision):
    check(module(REDUCE), target, precision)


def test_reduce_long_axis_tree():
    m = module(fn("%x: tensor<2x700x9xf32>", "tensor<2x1x9xf32>, tensor<2x1x9xf32>", """
  %a = graph.reduce_sum %x {axes = array<i64: 1>} : (tensor<2x700x9xf32>) -> tensor<2x1x9xf32>
  %b = graph.reduce_max %x {axes = array<i64: 1>} : (tensor<2x700x9xf32>) -> tensor<2x1x9xf32>
  func.return %a, %b : tensor<2x1x9xf32>, tensor<2x1x9xf32>"""))
    check(m, "edge", "fp32", seeds=(0,))


WHERE = fn("%x: tensor<2x3x8xf32>, %y: tensor<8xf32>", "tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>", """
  %c = graph.constant dense<[true, false, true, true, false, false, true, false]> : tensor<8xi1>
  %c2 = graph.constant dense<[[true], [false], [true]]> : tensor<3x1xi1>
  %ninf = graph.constant dense<-1.0e+30> : tensor<f32>
  %a = graph.where %c, %x, %y : (tensor<8xi1>, tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  %b = graph.where %c2, %ninf, %x : (tensor<3x1xi1>, tensor<f32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %e = graph.exp %a : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %d = graph.where %c2, %e, %x : (tensor<3x1xi1>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  func.return %a, %b, %d : tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>""")


@BOTH
@PREC
def test_where_compile_time_condition(target, precision):
    check(module(WHERE), target, precision)


# the branch not taken holds inf or NaN (exp overflows, log of a negative): the select must not
# let it through (c*x + (1-c)*y gives 0*inf = NaN); softplus with its threshold is this pattern
WHERE_SPECIAL = fn("%x: tensor<4x8xf32>", "tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>", """
  %c = graph.constant dense<[true, false, true, true, false, false, true, false]> : tensor<8xi1>
  %big = graph.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %lg = graph.log %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %a = graph.where %c, %x, %big : (tensor<8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %b = graph.where %c, %lg, %x : (tensor<8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %t = graph.constant dense<20.0> : tensor<f32>
  %over = graph.greater %x, %t : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  %soft = graph.where %over, %x, %big : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %z = graph.constant dense<0.0> : tensor<f32>
  %pos = graph.greater %x, %z : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  %safe = graph.where %pos, %lg, %x : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %a, %b, %soft, %safe : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>""")


@BOTH
@PREC
def test_where_does_not_leak_inf_or_nan_from_the_branch_not_taken(target, precision):
    # the columns the compile-time mask takes x from: large (exp is inf) and positive; the
    # others: negative or zero (log is NaN or -inf), so each output is finite only if nothing
    # leaks from the branch not taken
    x = np.zeros((4, 8), np.float32)
    x[:, [0, 2, 3, 6]] = [[100.0, 95.0, 0.5, 300.0], [120.0, 2.0, 89.0, 30.0],
                          [1e4, 25.0, 0.25, 91.0], [7.0, 150.0, 3.0, 1.5]]
    x[:, [1, 4, 5, 7]] = [[-3.0, -0.5, 0.0, -1e4], [-0.0, -2.0, -7.5, -0.25],
                          [-1.0, 0.0, -30.0, -0.0], [-100.0, -4.0, -0.125, -9.0]]
    r = check(module(WHERE_SPECIAL), target, precision, inputs=[[x]])
    assert '"mask"' in str(r.module)
    for out in r.after[0]:
        assert np.isfinite(out).all()


# ---------------------------------------------------------------------------
# 3. gather
# ---------------------------------------------------------------------------

EMBED = fn("%ids: tensor<2x7xi64> {graph.name = \"input_ids\"}, %pos: tensor<7xi32>", "tensor<2x7x40xf32>, tensor<7x40xf32>, tensor<2x7x40xf32>", """
  %tok = graph.weight @tok : tensor<50x40xf32>
  %pw = graph.weight @pos : tensor<16x40xf32>
  %e = graph.gather %tok, %ids {axis = 0 : i64} : (tensor<50x40xf32>, tensor<2x7xi64>) -> tensor<2x7x40xf32>
  %p = graph.gather %pw, %pos {axis = 0 : i64} : (tensor<16x40xf32>, tensor<7xi32>) -> tensor<7x40xf32>
  %s = graph.add %e, %p : (tensor<2x7x40xf32>, tensor<7x40xf32>) -> tensor<2x7x40xf32>
  func.return %e, %p, %s : tensor<2x7x40xf32>, tensor<7x40xf32>, tensor<2x7x40xf32>""")


def embed_inputs(seed: int):
    r = np.random.default_rng(seed)
    ids = r.integers(0, 50, (2, 7)).astype(np.int64)
    ids[0, 0] = 49
    return [ids, r.integers(0, 16, 7).astype(np.int32)]


@BOTH
@PREC
def test_gather_embedding_runtime_indices(target, precision):
    m = module(EMBED, {"tok": RNG.standard_normal((50, 40)).astype(np.float32),
                       "pos": RNG.standard_normal((16, 40)).astype(np.float32)})
    r = check(m, target, precision, inputs=[embed_inputs(0), embed_inputs(1)])
    assert "tile.gather_rows" in str(r.module)


def test_gather_wide_rows_and_casts():
    """Rows wider than a staging tile (column tiles), i32 -> i64 cast and reshape of the ids."""
    m = module(fn("%ids: tensor<6xi32>", "tensor<2x3x9000xf32>", """
  %tok = graph.weight @tok : tensor<10x9000xf32>
  %c = graph.cast %ids : (tensor<6xi32>) -> tensor<6xi64>
  %r = graph.reshape %c : (tensor<6xi64>) -> tensor<2x3xi64>
  %e = graph.gather %tok, %r {axis = 0 : i64} : (tensor<10x9000xf32>, tensor<2x3xi64>) -> tensor<2x3x9000xf32>
  func.return %e : tensor<2x3x9000xf32>"""), {"tok": RNG.standard_normal((10, 9000)).astype(np.float32)})
    check(m, "edge", "fp32", inputs=[[np.array([9, 0, 3, 3, 7, 1], np.int32)]])


def test_gather_compile_time_indices_any_axis():
    m = module(fn("%x: tensor<3x5x4xf32>", "tensor<3x2x4xf32>, tensor<2x5x4xf32>", """
  %i = graph.constant dense<[4, -5]> : tensor<2xi64>
  %a = graph.gather %x, %i {axis = 1 : i64} : (tensor<3x5x4xf32>, tensor<2xi64>) -> tensor<3x2x4xf32>
  %j = graph.constant dense<[2, 0]> : tensor<2xi32>
  %b = graph.gather %x, %j {axis = 0 : i64} : (tensor<3x5x4xf32>, tensor<2xi32>) -> tensor<2x5x4xf32>
  %b2 = graph.gather %x, %j {axis = 0 : i64} : (tensor<3x5x4xf32>, tensor<2xi32>) -> tensor<2x5x4xf32>
  %c = graph.add %b, %b2 : (tensor<2x5x4xf32>, tensor<2x5x4xf32>) -> tensor<2x5x4xf32>
  func.return %a, %c : tensor<3x2x4xf32>, tensor<2x5x4xf32>"""))
    check(m, "server", "fp32")


GATHER_PATTERNS = {
    "roll": [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 0, 1, 2],  # torch.roll as torch.export writes it
    "reversal": list(range(13, -1, -1)),
    "nearest_x2": [i // 2 for i in range(28)],  # two phases
    "nearest_x3": [i // 3 for i in range(42)],  # three phases of a 3x upsample
    "repeats": [0, 0, 0, 5, 5, 9, 9, 9, 9],  # runs of step 0
    "irregular": [7, 2, 11, 2, 0, 13],  # one box per index
    "long": [i % 14 for i in range(70)],  # 70 indices, more than MAX_BOX_COPIES, in 5 runs
}


@pytest.mark.parametrize("pattern", sorted(GATHER_PATTERNS))
@BOTH
def test_gather_compile_time_indices_as_strided_boxes(pattern, target):
    """Compile-time indices on an inner axis are a few strided box copies (gather.index_boxes):
    runs of evenly stepping indices or the output's phases modulo a period."""
    from infer.passes.graph_to_tile.gather import index_boxes

    idx = GATHER_PATTERNS[pattern]
    n = len(idx)
    assert len(index_boxes(np.array(idx))) <= {"irregular": 6, "repeats": 3, "long": 5}.get(pattern, 3)
    values = ", ".join(map(str, idx))
    m = module(fn("%x: tensor<2x14x6xf32>", f"tensor<2x{n}x6xf32>", f"""
  %i = graph.constant dense<[{values}]> : tensor<{n}xi64>
  %a = graph.gather %x, %i {{axis = 1 : i64}} : (tensor<2x14x6xf32>, tensor<{n}xi64>) -> tensor<2x{n}x6xf32>
  func.return %a : tensor<2x{n}x6xf32>"""))
    check(m, target, "fp32")


# ---------------------------------------------------------------------------
# 4. rotary, attention masks
# ---------------------------------------------------------------------------

ROTARY = fn("%q: tensor<2x3x10x16xf32>, %cos: tensor<10x16xf32>, %sin: tensor<10x16xf32>, %cp: tensor<2x1x10x8xf32>, %sp: tensor<2x1x10x8xf32>, %c1: tensor<1x16xf32>, %s1: tensor<1x16xf32>",
            "tensor<2x3x10x16xf32>, tensor<2x3x10x16xf32>, tensor<2x3x10x16xf32>, tensor<2x3x10x16xf32>, tensor<2x3x10x16xf32>", """
  %a = graph.rotary %q, %cos, %sin : (tensor<2x3x10x16xf32>, tensor<10x16xf32>, tensor<10x16xf32>) -> tensor<2x3x10x16xf32>
  %b = graph.rotary %q, %cos, %sin {interleaved = true} : (tensor<2x3x10x16xf32>, tensor<10x16xf32>, tensor<10x16xf32>) -> tensor<2x3x10x16xf32>
  %c = graph.rotary %q, %cp, %sp : (tensor<2x3x10x16xf32>, tensor<2x1x10x8xf32>, tensor<2x1x10x8xf32>) -> tensor<2x3x10x16xf32>
  %d = graph.rotary %q, %cp, %sp {interleaved = true} : (tensor<2x3x10x16xf32>, tensor<2x1x10x8xf32>, tensor<2x1x10x8xf32>) -> tensor<2x3x10x16xf32>
  %e = graph.rotary %q, %c1, %s1 {interleaved = true} : (tensor<2x3x10x16xf32>, tensor<1x16xf32>, tensor<1x16xf32>) -> tensor<2x3x10x16xf32>
  func.return %a, %b, %c, %d, %e : tensor<2x3x10x16xf32>, tensor<2x3x10x16xf32>, tensor<2x3x10x16xf32>, tensor<2x3x10x16xf32>, tensor<2x3x10x16xf32>""")


@BOTH
@PREC
def test_rotary_half_interleaved_partial(target, precision):
    check(module(ROTARY), target, precision)


def test_rotary_precomputed_tables():
    """Llama-style: cos/sin tables are weights (precomputed at compile time)."""
    pos = np.arange(12)[:, None] / (10000 ** (np.arange(0, 8, 2) / 8))[None, :]
    emb = np.concatenate([pos, pos], -1)
    m = module(fn("%q: tensor<1x4x12x8xf32>", "tensor<1x4x12x8xf32>", """
  %c = graph.weight @cos : tensor<12x8xf32>
  %s = graph.weight @sin : tensor<12x8xf32>
  %a = graph.rotary %q, %c, %s : (tensor<1x4x12x8xf32>, tensor<12x8xf32>, tensor<12x8xf32>) -> tensor<1x4x12x8xf32>
  func.return %a : tensor<1x4x12x8xf32>"""), {"cos": np.cos(emb).astype(np.float32), "sin": np.sin(emb).astype(np.float32)})
    check(m, "edge", "fp32")


ATTN = fn("%q: tensor<2x4x9x16xf32>, %k: tensor<2x2x13x16xf32>, %v: tensor<2x2x13x8xf32>, %pad: tensor<2x1x1x13xf32>, %full: tensor<2x4x9x13xf32>",
          "tensor<2x4x9x8xf32>, tensor<2x4x9x8xf32>, tensor<2x4x9x8xf32>", """
  %bm = graph.constant dense<true> : tensor<9x13xi1>
  %a = graph.attention %q, %k, %v, %pad : (tensor<2x4x9x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x8xf32>, tensor<2x1x1x13xf32>) -> tensor<2x4x9x8xf32>
  %b = graph.attention %q, %k, %v, %full {causal = true} : (tensor<2x4x9x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x8xf32>, tensor<2x4x9x13xf32>) -> tensor<2x4x9x8xf32>
  %c = graph.attention %q, %k, %v, %bm : (tensor<2x4x9x16xf32>, tensor<2x2x13x16xf32>, tensor<2x2x13x8xf32>, tensor<9x13xi1>) -> tensor<2x4x9x8xf32>
  func.return %a, %b, %c : tensor<2x4x9x8xf32>, tensor<2x4x9x8xf32>, tensor<2x4x9x8xf32>""")


def attn_inputs(seed: int):
    r = np.random.default_rng(seed)
    q, k = r.standard_normal((2, 4, 9, 16)), r.standard_normal((2, 2, 13, 16))
    v = r.standard_normal((2, 2, 13, 8))
    pad = np.zeros((2, 1, 1, 13))
    pad[0, ..., 10:] = -1e9  # BERT-style padding mask
    pad[1, ..., 3:5] = -np.inf
    full = r.standard_normal((2, 4, 9, 13))
    return [x.astype(np.float32) for x in (q, k, v, pad, full)]


def bool_mask_text() -> str:
    rng = np.random.default_rng(3)
    bits = rng.random((9, 13)) < 0.6
    bits[:, 0] = True
    rows = ", ".join("[" + ", ".join("true" if b else "false" for b in row) + "]" for row in bits)
    return ATTN.replace("dense<true> : tensor<9x13xi1>", f"dense<[{rows}]> : tensor<9x13xi1>")


@BOTH
@PREC
def test_attention_explicit_masks(target, precision):
    check(module(bool_mask_text()), target, precision, inputs=[attn_inputs(0), attn_inputs(1)])


def test_attention_masks_small_tiles():
    """Several kv tiles and q tiles (override) so the mask offsets move."""
    m = module(bool_mask_text())
    tol = TOL["fp32"]
    check_pass_preserves_semantics(m, GraphToTilePass(target="edge", overrides="kernel0=4x5,kernel1=4x5,kernel2=4x5"),
                                   rtol=tol, atol=tol, inputs=[attn_inputs(2)])


# ---------------------------------------------------------------------------
# 5. casts
# ---------------------------------------------------------------------------

CASTS = fn("%x: tensor<3x7x11xf32>", "tensor<3x7x11xf32>, tensor<3x7x11xf32>", """
  %b = graph.cast %x : (tensor<3x7x11xf32>) -> tensor<3x7x11xbf16>
  %bf = graph.cast %b : (tensor<3x7x11xbf16>) -> tensor<3x7x11xf32>
  %s = graph.constant dense<3.0> : tensor<f32>
  %xs = graph.mul %x, %s : (tensor<3x7x11xf32>, tensor<f32>) -> tensor<3x7x11xf32>
  %i = graph.cast %xs : (tensor<3x7x11xf32>) -> tensor<3x7x11xi32>
  %if = graph.cast %i : (tensor<3x7x11xi32>) -> tensor<3x7x11xf32>
  func.return %bf, %if : tensor<3x7x11xf32>, tensor<3x7x11xf32>""")


@BOTH
@PREC
def test_cast_round_trips(target, precision):
    x = RNG.standard_normal((3, 7, 11)).astype(np.float32)
    x.flat[:8] = [0.5, -0.5, 1.5, -2.5, 2.0, -3.0, 1 / 3, -0.0]  # ties and exact integers (x3 below)
    r = check(module(CASTS), target, precision, inputs=[[x]])
    np.testing.assert_array_equal(r.after[0][1], r.before[0][1])  # truncation is exact
    np.testing.assert_array_equal(r.after[0][0], r.before[0][0])  # bf16 rounding is exact


def test_sine_and_cosine_over_many_periods():
    """sin/cos: range reduction by 2 pi then a degree-11 polynomial, exact zero at 0."""
    m = module(fn("%x: tensor<6x50xf32>", "tensor<6x50xf32>, tensor<6x50xf32>", """
  %s = graph.sin %x : (tensor<6x50xf32>) -> tensor<6x50xf32>
  %c = graph.cos %x : (tensor<6x50xf32>) -> tensor<6x50xf32>
  func.return %s, %c : tensor<6x50xf32>, tensor<6x50xf32>"""))
    x = np.linspace(-60, 60, 300, dtype=np.float32).reshape(6, 50)
    x[0, :4] = [0.0, -0.0, np.pi / 2, -np.pi]
    r = check(m, "edge", "fp32", inputs=[[x]])
    np.testing.assert_allclose(r.after[0][0], np.sin(x.astype(np.float64)), rtol=0, atol=2e-5)
    assert r.after[0][0][0, 0] == 0.0
