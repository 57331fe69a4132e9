"""The tile-level interpreter: hand-written tile IR checked against numpy, and one
program run both by the tile interpreter and (hand-assembled) by the simulator."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.tile_interpreter import InterpreterError, output_arguments, run_tile_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.target import isa
from infer.target.asm import Builder
from infer.target.sim import Simulator

CTX = make_context()
BF16 = np.dtype(ml_dtypes.bfloat16)


def _module(body: str):
    text = 'builtin.module attributes {tile.target = "edge"} {\n' + body + "\n}\n"
    module = parse_ir(CTX, text, "test.mlir")
    verify_module(module)
    return module


def _mr(shape, elem, space):
    return f'memref<{"x".join(map(str, shape))}x{elem}, "{space}">'


# ------------------------------------------------------------------ tiled matmul


def _tiled_matmul_ir(M: int, K: int, N: int, elem: str, acc: str, T: int = 16) -> str:
    """y = x @ w tiled over n (16 wide) and k (chunks of 16) with scf.for for the
    full tiles and static edge tiles; the accumulator is zero-filled, every chunk
    accumulates."""
    nfull, kfull = N // T * T, K // T * T
    X, W, Y = _mr((M, K), elem, "dram"), _mr((K, N), elem, "dram"), _mr((M, N), acc, "dram")
    L, R, A = _mr((M, K), elem, "spad"), _mr((T, T), elem, "spad"), _mr((M, T), acc, "acc")

    def n_tile(j: str, n: int) -> str:
        lines = [f"tile.fill %acc[%c0, %c0] {{rows = {M} : i64, cols = {n} : i64, value = 0.0 : f32}} : {A}"]

        def chunk(k0: str, kk: int) -> str:
            return (
                f"tile.dma %w[{k0}, {j}], %rhs[%c0, %c0] {{shape = array<i64: {kk}, {n}>}} : {W}, {R}\n"
                f"tile.matmul %lhs[%c0, {k0}], %rhs[%c0, %c0], %acc[%c0, %c0] "
                f"{{m = {M} : i64, k = {kk} : i64, n = {n} : i64, accumulate = true}} : {L}, {R}, {A}"
            )

        if kfull:
            lines.append(f"scf.for %k = %c0 to %ckfull step %cT {{\n{chunk('%k', T)}\n}}")
        if K > kfull:
            lines.append(chunk("%ckfull", K - kfull))
        lines.append(f"tile.dma %acc[%c0, %c0], %y[%c0, {j}] {{shape = array<i64: {M}, {n}>}} : {A}, {Y}")
        return "\n".join(lines)

    parts = []
    if nfull:
        parts.append(f"scf.for %j = %c0 to %cnfull step %cT {{\n{n_tile('%j', T)}\n}}")
    if N > nfull:
        parts.append(n_tile("%cnfull", N - nfull))
    body = "\n".join(parts)
    return f"""
func.func @main(%x: {X}, %w: {W}, %y: {Y} {{tile.output}}) {{
  %c0 = arith.constant 0 : index
  %cT = arith.constant {T} : index
  %cnfull = arith.constant {nfull} : index
  %ckfull = arith.constant {kfull} : index
  %lhs = tile.alloc : {L}
  %rhs = tile.alloc : {R}
  %acc = tile.alloc : {A}
  tile.dma %x[%c0, %c0], %lhs[%c0, %c0] {{shape = array<i64: {M}, {K}>}} : {X}, {L}
  {body}
  func.return
}}"""


@pytest.mark.parametrize(("M", "K", "N"), [(5, 40, 20), (3, 16, 16), (7, 9, 33), (4, 32, 5)])
def test_tiled_matmul_bf16(M: int, K: int, N: int) -> None:
    module = _module(_tiled_matmul_ir(M, K, N, "bf16", "f32"))
    rng = np.random.default_rng(M * 1000 + K * 10 + N)
    x = rng.standard_normal((M, K)).astype(BF16)
    w = rng.standard_normal((K, N)).astype(BF16)
    (y,) = run_tile_module(module, [x, w])
    assert y.dtype == np.float32 and y.shape == (M, N)
    # exact products of bf16 values in f64, summed; fp32 accumulation differs by rounding only
    ref = x.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    # chunk by chunk in fp32, as the hardware does: bit-identical
    ref32 = np.zeros((M, N), np.float32)
    for k0 in range(0, K, 16):
        ref32 += x[:, k0:k0 + 16].astype(np.float32) @ w[k0:k0 + 16].astype(np.float32)
    np.testing.assert_array_equal(y, ref32)


@pytest.mark.parametrize(("M", "K", "N"), [(5, 40, 20), (2, 17, 3)])
def test_tiled_matmul_i8(M: int, K: int, N: int) -> None:
    module = _module(_tiled_matmul_ir(M, K, N, "i8", "i32"))
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 127, (M, K), endpoint=True, dtype=np.int8)
    w = rng.integers(-128, 127, (K, N), endpoint=True, dtype=np.int8)
    (y,) = run_tile_module(module, {"arg0": x, "arg1": w})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, x.astype(np.int64) @ w.astype(np.int64))


def _single_matmul(elem: str, acc: str, m: int, k: int, n: int) -> str:
    X, W, Y = _mr((m, k), elem, "dram"), _mr((k, n), elem, "dram"), _mr((m, n), acc, "dram")
    L, R, A = _mr((m, k), elem, "spad"), _mr((k, n), elem, "spad"), _mr((m, n), acc, "acc")
    return f"""
func.func @main(%x: {X}, %w: {W}, %y: {Y} {{tile.output}}) {{
  %c0 = arith.constant 0 : index
  %l = tile.alloc : {L}
  %r = tile.alloc : {R}
  %a = tile.alloc : {A}
  tile.dma %x[%c0, %c0], %l[%c0, %c0] {{shape = array<i64: {m}, {k}>}} : {X}, {L}
  tile.dma %w[%c0, %c0], %r[%c0, %c0] {{shape = array<i64: {k}, {n}>}} : {W}, {R}
  tile.dma %y[%c0, %c0], %a[%c0, %c0] {{shape = array<i64: {m}, {n}>}} : {Y}, {A}
  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {{m = {m} : i64, k = {k} : i64, n = {n} : i64, accumulate = true}} : {L}, {R}, {A}
  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {{m = {m} : i64, k = {k} : i64, n = {n} : i64, accumulate = true}} : {L}, {R}, {A}
  tile.dma %a[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: {m}, {n}>}} : {A}, {Y}
  func.return
}}"""


def test_int8_matmul_saturates_int32() -> None:
    # 16 products of (-128)(-128) = 2^18; accumulated 2^13 times > 2^31: use a loop of
    # accumulating matmuls on one tile and check saturation at int32 max
    m, k, n = 1, 16, 1
    body = _single_matmul("i8", "i32", m, k, n)
    module = _module(body)
    x = np.full((m, k), -128, np.int8)
    w = np.full((k, n), -128, np.int8)
    # the output argument starts zeroed; two accumulating matmuls: 2 * 16 * 2^14
    (y,) = run_tile_module(module, [x, w])
    assert y[0, 0] == 2 * 16 * 16384
    # now a loop of 2^13 matmuls saturates
    looped = body.replace(
        "  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 1 : i64, k = 16 : i64, n = 1 : i64, accumulate = true}"
        ' : memref<1x16xi8, "spad">, memref<16x1xi8, "spad">, memref<1x1xi32, "acc">\n',
        "", 1,
    ).replace(
        "  tile.dma %a[%c0, %c0], %y",
        '  %c1 = arith.constant 1 : index\n  %cn = arith.constant 8200 : index\n'
        '  scf.for %i = %c0 to %cn step %c1 {\n'
        '    tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 1 : i64, k = 16 : i64, n = 1 : i64, '
        'accumulate = true} : memref<1x16xi8, "spad">, memref<16x1xi8, "spad">, memref<1x1xi32, "acc">\n'
        "  }\n  tile.dma %a[%c0, %c0], %y",
    )
    (y,) = run_tile_module(_module(looped), [x, w])
    assert y[0, 0] == 2**31 - 1


# ------------------------------------------------------------------ vector ops


def _vector_ir(op: str, rows: int, cols: int, a_t: str, d_t: str, *, bmode: str | None = None,
               b_t: str = "f32", imm: float | None = None, a_space: str = "spad") -> str:
    """dst = op(a[, b]) on a rows x cols tile at origin (1, 2) of bigger buffers."""
    R, C = rows + 2, cols + 3
    reduce = op in ("rsum", "rmax")
    dshape = (rows, 1) if reduce else (rows, cols)
    A, Ad = _mr((R, C), a_t, a_space), _mr((R, C), a_t, "dram")
    D, Dd = _mr((R, C), d_t, "spad"), _mr(dshape, d_t, "dram")
    args = [f"%a_in: {Ad}"]
    lines = [
        f"%la = tile.alloc : {A}",
        f"tile.dma %a_in[%c0, %c0], %la[%c0, %c0] {{shape = array<i64: {R}, {C}>}} : {Ad}, {A}",
        f"%ld = tile.alloc : {D}",
    ]
    attrs = f"rows = {rows} : i64, cols = {cols} : i64"
    b_operand = ""
    if bmode is not None:
        attrs += f', bmode = "{bmode}"'
        if bmode == "imm":
            attrs += f", imm = {imm!r} : f32"
        else:
            bshape = {"tile": (R, C), "row": (1, C), "col": (R, 1)}[bmode]
            B, Bd = _mr(bshape, b_t, "spad"), _mr(bshape, b_t, "dram")
            args.append(f"%b_in: {Bd}")
            lines += [
                f"%lb = tile.alloc : {B}",
                f"tile.dma %b_in[%c0, %c0], %lb[%c0, %c0] {{shape = array<i64: {bshape[0]}, {bshape[1]}>}} : {Bd}, {B}",
            ]
            bo = {"tile": "%c1, %c2", "row": "%c0, %c2", "col": "%c1, %c0"}[bmode]
            b_operand = f", %lb[{bo}]"
            B_type = f", {B}"
    args.append(f"%out: {Dd} {{tile.output}}")
    lines.append(
        f'tile.vector "{op}" %ld[%c1, %c2], %la[%c1, %c2]{b_operand} {{{attrs}}} : {D}, {A}'
        + (B_type if b_operand else "")
    )
    lines.append(
        f"tile.dma %ld[%c1, %c2], %out[%c0, %c0] {{shape = array<i64: {dshape[0]}, {dshape[1]}>}} : {D}, {Dd}"
    )
    return (
        f"func.func @main({', '.join(args)}) {{\n  %c0 = arith.constant 0 : index\n"
        "  %c1 = arith.constant 1 : index\n  %c2 = arith.constant 2 : index\n  "
        + "\n  ".join(lines) + "\n  func.return\n}"
    )


def _run_vector(op: str, a: np.ndarray, d_t: str, b: np.ndarray | None = None, **kw) -> np.ndarray:
    """Embed a (and b) at origin (1, 2) of bigger random buffers and run the op."""
    rows, cols = a.shape
    names = {np.dtype(np.float32): "f32", BF16: "bf16", np.dtype(np.int8): "i8", np.dtype(np.int32): "i32"}
    rng = np.random.default_rng(7)
    big = rng.standard_normal((rows + 2, cols + 3)).astype(a.dtype)
    big[1:1 + rows, 2:2 + cols] = a
    inputs = [big]
    if b is not None:
        bmode = kw["bmode"]
        bshape = {"tile": (rows + 2, cols + 3), "row": (1, cols + 3), "col": (rows + 2, 1)}[bmode]
        bbig = rng.standard_normal(bshape).astype(b.dtype)
        if bmode == "tile":
            bbig[1:1 + rows, 2:2 + cols] = b
        elif bmode == "row":
            bbig[0:1, 2:2 + cols] = b
        else:
            bbig[1:1 + rows, 0:1] = b
        inputs.append(bbig)
        kw["b_t"] = names[b.dtype]
    module = _module(_vector_ir(op, rows, cols, names[a.dtype], d_t, **kw))
    (out,) = run_tile_module(module, inputs)
    return out


RNG = np.random.default_rng(42)
A32 = (RNG.standard_normal((3, 5)) * 4).astype(np.float32)
B32 = (RNG.standard_normal((3, 5)) * 4).astype(np.float32)


@pytest.mark.parametrize(
    ("op", "fn"),
    [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("max", np.maximum), ("min", np.minimum)],
)
@pytest.mark.parametrize("bmode", ["tile", "row", "col", "imm"])
def test_vector_binary_f32(op, fn, bmode) -> None:
    if bmode == "imm":
        out = _run_vector(op, A32, "f32", bmode="imm", imm=1.5)
        np.testing.assert_array_equal(out, fn(A32, np.float32(1.5)))
        return
    b = {"tile": B32, "row": B32[:1], "col": B32[:, :1]}[bmode]
    out = _run_vector(op, A32, "f32", b, bmode=bmode)
    np.testing.assert_array_equal(out, fn(A32, b))


@pytest.mark.parametrize(
    ("op", "fn"),
    [
        ("copy", lambda a: a),
        ("neg", np.negative),
        ("abs", np.abs),
        ("relu", lambda a: np.maximum(a, 0)),
        ("exp", np.exp),
        ("tanh", np.tanh),
        ("sigmoid", lambda a: 1 / (1 + np.exp(-a))),
        ("silu", lambda a: a / (1 + np.exp(-a))),
        ("gelu", lambda a: 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a**3)))),
        ("sqrt", lambda a: np.sqrt(np.abs(a))),
        ("rsqrt", lambda a: 1 / np.sqrt(np.abs(a))),
        ("recip", lambda a: 1 / a),
        ("erf", lambda a: np.vectorize(math.erf)(a)),
        ("gelu_erf", lambda a: 0.5 * a * (1 + np.vectorize(math.erf)(a / np.sqrt(2)))),
    ],
)
def test_vector_unary_f32(op, fn) -> None:
    a = np.abs(A32) if op in ("sqrt", "rsqrt") else A32
    out = _run_vector(op, a, "f32")
    np.testing.assert_allclose(out, fn(a.astype(np.float64)), rtol=2e-6, atol=1e-6)


def test_vector_reductions() -> None:
    out = _run_vector("rsum", A32, "f32")
    assert out.shape == (3, 1)
    np.testing.assert_allclose(out, A32.sum(axis=1, keepdims=True), rtol=1e-6)
    out = _run_vector("rmax", A32, "f32")
    np.testing.assert_array_equal(out, A32.max(axis=1, keepdims=True))
    # integer sums are exact in int64 and saturate when stored as i32/i8
    ai = np.array([[100, 100, 100], [-100, -100, -100]], np.int8)
    np.testing.assert_array_equal(_run_vector("rsum", ai, "i32"), [[300], [-300]])
    np.testing.assert_array_equal(_run_vector("rsum", ai, "i8"), [[127], [-128]])


def test_vector_casts_round_and_saturate() -> None:
    a = np.array([[0.5, 1.5, 2.5, -0.5, -1.5], [300.0, -300.0, 126.6, np.nan, -127.5]], np.float32)
    np.testing.assert_array_equal(
        _run_vector("copy", a, "i8"), [[0, 2, 2, 0, -2], [127, -128, 127, 0, -128]]
    )
    # f32 -> bf16 rounds to nearest even
    x = np.array([[1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0]], np.float32)
    out = _run_vector("copy", x, "bf16")
    assert out.dtype == BF16
    np.testing.assert_array_equal(out.astype(np.float32), [[1.0, 1.0 + 2**-6, 1.0]])
    # bf16 -> f32 is exact
    xb = A32.astype(BF16)
    np.testing.assert_array_equal(_run_vector("copy", xb, "f32"), xb.astype(np.float32))
    # int32 -> int8 saturates
    ai = np.array([[1000, -1000, 5]], np.int32)
    np.testing.assert_array_equal(_run_vector("copy", ai, "i8"), [[127, -128, 5]])


def test_vector_f32_to_i32_saturates() -> None:
    big = np.array([[3e9, -3e9, 1.0]], np.float32)
    np.testing.assert_array_equal(_run_vector("copy", big, "i32"), [[2**31 - 1, -(2**31), 1]])


def test_vector_integer_math_is_exact() -> None:
    a = np.array([[2**30, -(2**30), 7]], np.int32)
    b = np.array([[2**30, -(2**30), -9]], np.int32)
    # int64 compute, saturating store (not fp32: 2^30 + 1 would round)
    np.testing.assert_array_equal(_run_vector("add", a, "i32", b, bmode="tile"), [[2**31 - 1, -(2**31), -2]])
    a1 = np.array([[2**30 + 1, 3]], np.int32)
    np.testing.assert_array_equal(_run_vector("add", a1, "i32", bmode="imm", imm=2.0), [[2**30 + 3, 5]])
    # a non-integral immediate switches to fp32 math, rounded half to even on store
    np.testing.assert_array_equal(_run_vector("mul", np.array([[3, 5]], np.int32), "i32", bmode="imm", imm=0.5),
                                  [[2, 2]])
    # an int8 tile times an f32 column: fp32 math
    ai = np.array([[10, 20], [30, 40]], np.int8)
    col = np.array([[0.25], [0.5]], np.float32)
    np.testing.assert_array_equal(_run_vector("mul", ai, "f32", col, bmode="col"), [[2.5, 5.0], [15.0, 20.0]])


def test_vector_requant() -> None:
    acc = np.array([[100, -100, 250, 3000], [-3000, 7, 5, 0]], np.int32)
    scales = np.array([[0.1, 0.1, 0.5, 0.01]], np.float32)
    out = _run_vector("requant", acc, "i8", scales, bmode="row", a_space="acc")
    ref = np.clip(np.rint(acc.astype(np.float32) * scales), -128, 127).astype(np.int8)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, ref)
    out = _run_vector("requant", acc, "i8", bmode="imm", imm=0.05, a_space="acc")
    np.testing.assert_array_equal(out, np.clip(np.rint(acc.astype(np.float32) * np.float32(0.05)), -128, 127))


# ------------------------------------------------------------------ dma, views, weights

CONV_READ = """
func.func @main(%x: memref<2x9x9xf32, "dram">, %y: memref<2x4x4xf32, "dram"> {tile.output},
                %z: memref<6xf32, "dram"> {tile.output}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %t = tile.alloc : memref<2x4x4xf32, "spad">
  tile.dma %x[%c0, %c1, %c1], %t[%c0, %c0, %c0] {shape = array<i64: 2, 4, 4>, src_steps = array<i64: 1, 2, 2>} : memref<2x9x9xf32, "dram">, memref<2x4x4xf32, "spad">
  tile.dma %t[%c0, %c0, %c0], %y[%c0, %c0, %c0] {shape = array<i64: 2, 4, 4>} : memref<2x4x4xf32, "spad">, memref<2x4x4xf32, "dram">
  %flat = tile.view %x : memref<2x9x9xf32, "dram"> -> memref<162xf32, "dram">
  %row = tile.alloc : memref<6xf32, "spad">
  tile.dma %flat[%c3], %row[%c0] {shape = array<i64: 6>, src_steps = array<i64: 27>} : memref<162xf32, "dram">, memref<6xf32, "spad">
  %zv = tile.view %z : memref<6xf32, "dram"> -> memref<2x3xf32, "dram">
  %rv = tile.view %row : memref<6xf32, "spad"> -> memref<2x3xf32, "spad">
  tile.dma %rv[%c0, %c0], %zv[%c0, %c0] {shape = array<i64: 2, 3>} : memref<2x3xf32, "spad">, memref<2x3xf32, "dram">
  func.return
}"""


def test_dma_steps_and_views() -> None:
    module = _module(CONV_READ)
    assert output_arguments(module.body.block.first_op) == [1, 2]
    x = np.arange(162, dtype=np.float32).reshape(2, 9, 9)
    y, z = run_tile_module(module, [x])
    np.testing.assert_array_equal(y, x[:, 1:9:2, 1:9:2])
    np.testing.assert_array_equal(z, x.reshape(-1)[3::27][:6])
    assert x[0, 0, 0] == 0  # the caller's input is not written


WEIGHTED = """
func.func @main(%x: memref<4x8xbf16, "dram"> {graph.name = "x"}, %y: memref<4x16xf32, "dram"> {tile.output, graph.name = "y"}) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %w = tile.weight @fc : memref<8x16xbf16, "dram">
  %l = tile.alloc : memref<4x8xbf16, "spad">
  %r = tile.alloc {buffers = 2 : i64} : memref<8x16xbf16, "spad">
  %a = tile.alloc : memref<4x16xf32, "acc">
  tile.dma %x[%c0, %c0], %l[%c0, %c0] {shape = array<i64: 4, 8>} : memref<4x8xbf16, "dram">, memref<4x8xbf16, "spad">
  tile.dma %w[%c0, %c0], %r[%c0, %c0] {shape = array<i64: 8, 16>} : memref<8x16xbf16, "dram">, memref<8x16xbf16, "spad">
  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {m = 4 : i64, k = 8 : i64, n = 16 : i64} : memref<4x8xbf16, "spad">, memref<8x16xbf16, "spad">, memref<4x16xf32, "acc">
  tile.vector "add" %a[%c0, %c0], %a[%c0, %c0] {rows = 4 : i64, cols = 16 : i64, bmode = "imm", imm = 1.0 : f32} : memref<4x16xf32, "acc">, memref<4x16xf32, "acc">
  tile.dma %a[%c0, %c0], %y[%c0, %c0] {shape = array<i64: 4, 16>} : memref<4x16xf32, "acc">, memref<4x16xf32, "dram">
  func.return
}"""


def test_weights_and_named_inputs() -> None:
    module = _module(WEIGHTED)
    store = WeightStore()
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 16)).astype(BF16)
    store.set("fc", w)
    attach_weights(module, store)
    x = rng.standard_normal((4, 8)).astype(BF16)
    (y,) = run_tile_module(module, {"x": x})
    np.testing.assert_array_equal(y, x.astype(np.float32) @ w.astype(np.float32) + np.float32(1))
    # an explicit store overrides the module's
    other = WeightStore()
    other.set("fc", np.zeros((8, 16), BF16))
    (y0,) = run_tile_module(module, [x], weights=other)
    np.testing.assert_array_equal(y0, np.ones((4, 16), np.float32))


# ------------------------------------------------------------------ errors


def test_errors() -> None:
    module = _module(WEIGHTED)
    x = np.zeros((4, 8), BF16)
    with pytest.raises(InterpreterError, match=r"weight 'fc' not found .*\[at %w = tile.weight in @main\]"):
        run_tile_module(module, [x])
    with pytest.raises(InterpreterError, match=r"expected 1 input\(s\) \(x\), got 2"):
        run_tile_module(module, [x, x])
    with pytest.raises(InterpreterError, match=r"input 'x' \(#0\): expected dtype bfloat16, got float32"):
        run_tile_module(module, [np.zeros((4, 8), np.float32)])
    with pytest.raises(InterpreterError, match=r"unknown input name\(s\) 'y'"):
        run_tile_module(module, {"y": x})
    with pytest.raises(InterpreterError, match=r"no function @nope"):
        run_tile_module(module, [x], entry="nope")
    store = WeightStore()
    store.set("fc", np.zeros((8, 16), np.float32))
    with pytest.raises(InterpreterError, match=r"the store holds float32 8x16, but the op declares bfloat16"):
        run_tile_module(module, [x], weights=store)


def test_out_of_bounds_tile_is_an_error() -> None:
    body = CONV_READ.replace("%x[%c0, %c1, %c1], %t", "%x[%c0, %c3, %c1], %t")
    with pytest.raises(InterpreterError, match=r"dma source: tile \[3, 10\) step 2 in dim 1 is outside the buffer \(2x9x9\) \[at tile.dma in @main\]"):
        run_tile_module(_module(body), [np.zeros((2, 9, 9), np.float32)])


def test_writing_a_weight_is_an_error() -> None:
    text = """
func.func @main(%y: memref<2x2xf32, "dram"> {tile.output}) {
  %c0 = arith.constant 0 : index
  %w = tile.weight @w : memref<2x2xf32, "dram">
  %t = tile.alloc : memref<2x2xf32, "spad">
  tile.dma %t[%c0, %c0], %w[%c0, %c0] {shape = array<i64: 2, 2>} : memref<2x2xf32, "spad">, memref<2x2xf32, "dram">
  func.return
}"""
    module = _module(text)
    store = WeightStore()
    store.set("w", np.ones((2, 2), np.float32))
    attach_weights(module, store)
    with pytest.raises(InterpreterError, match=r"read-only .*\[at tile.dma in @main\]"):
        run_tile_module(module, [])
    np.testing.assert_array_equal(store.get("w"), np.ones((2, 2)))


def test_index_arith_extras() -> None:
    # min/max/ceildiv on indices (edge tiles): copy a 10-element vector in tiles of 4
    text = """
func.func @main(%x: memref<10xf32, "dram">, %y: memref<10xf32, "dram"> {tile.output}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c10 = arith.constant 10 : index
  %n = arith.ceildivsi %c10, %c4 : index
  %t = tile.alloc : memref<4xf32, "spad">
  scf.for %i = %c0 to %n step %c1 {
    %o = arith.muli %i, %c4 : index
    %o2 = arith.minsi %o, %c10 : index
    %o3 = arith.maxsi %o2, %c0 : index
    %last = arith.subi %n, %c1 : index
    %is_last = arith.cmpi eq, %i, %last : index
    scf.if %is_last {
      %e = arith.constant 2 : index
      %s = arith.subi %c10, %e : index
      tile.dma %x[%s], %t[%c0] {shape = array<i64: 2>} : memref<10xf32, "dram">, memref<4xf32, "spad">
      tile.dma %t[%c0], %y[%s] {shape = array<i64: 2>} : memref<4xf32, "spad">, memref<10xf32, "dram">
    } else {
      tile.dma %x[%o3], %t[%c0] {shape = array<i64: 4>} : memref<10xf32, "dram">, memref<4xf32, "spad">
      tile.dma %t[%c0], %y[%o3] {shape = array<i64: 4>} : memref<4xf32, "spad">, memref<10xf32, "dram">
    }
  }
  func.return
}"""
    x = np.arange(10, dtype=np.float32) + 1
    (y,) = run_tile_module(_module(text), [x])
    np.testing.assert_array_equal(y, x)


# ------------------------------------------------------------------ tile interpreter == simulator


MATMUL_RELU = """
func.func @main(%x: memref<{M}x{K}x{E}, "dram">, %w: memref<{K}x{N}x{E}, "dram">, %y: memref<{M}x{N}x{O}, "dram"> {{tile.output}}) {{
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %l = tile.alloc : memref<{M}x{K}x{E}, "spad">
  %r = tile.alloc : memref<{K}x{N}x{E}, "spad">
  %a = tile.alloc : memref<{M}x{N}x{A}, "acc">
  tile.dma %x[%c0, %c0], %l[%c0, %c0] {{shape = array<i64: {M}, {K}>}} : memref<{M}x{K}x{E}, "dram">, memref<{M}x{K}x{E}, "spad">
  tile.dma %w[%c0, %c0], %r[%c0, %c0] {{shape = array<i64: {K}, {N}>}} : memref<{K}x{N}x{E}, "dram">, memref<{K}x{N}x{E}, "spad">
  tile.matmul %l[%c0, %c0], %r[%c0, %c0], %a[%c0, %c0] {{m = {M} : i64, k = 16 : i64, n = {N} : i64}} : memref<{M}x{K}x{E}, "spad">, memref<{K}x{N}x{E}, "spad">, memref<{M}x{N}x{A}, "acc">
  tile.matmul %l[%c0, %c16], %r[%c16, %c0], %a[%c0, %c0] {{m = {M} : i64, k = {K2} : i64, n = {N} : i64, accumulate = true}} : memref<{M}x{K}x{E}, "spad">, memref<{K}x{N}x{E}, "spad">, memref<{M}x{N}x{A}, "acc">
  tile.vector "relu" %a[%c0, %c0], %a[%c0, %c0] {{rows = {M} : i64, cols = {N} : i64}} : memref<{M}x{N}x{A}, "acc">, memref<{M}x{N}x{A}, "acc">
  {OUT}
  func.return
}}"""

OUT_DIRECT = """tile.dma %a[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: {M}, {N}>}} : memref<{M}x{N}x{A}, "acc">, memref<{M}x{N}x{O}, "dram">"""
OUT_REQUANT = """%q = tile.alloc : memref<{M}x{N}xi8, "spad">
  tile.vector "requant" %q[%c0, %c0], %a[%c0, %c0] {{rows = {M} : i64, cols = {N} : i64, bmode = "imm", imm = {S} : f32}} : memref<{M}x{N}xi8, "spad">, memref<{M}x{N}x{A}, "acc">
  tile.dma %q[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: {M}, {N}>}} : memref<{M}x{N}xi8, "spad">, memref<{M}x{N}x{O}, "dram">"""


def _simulate_matmul_relu(x: np.ndarray, w: np.ndarray, out_dtype: np.dtype, scale: float | None) -> np.ndarray:
    """The same computation as MATMUL_RELU, hand-assembled for the simulator."""
    M, K = x.shape
    N = w.shape[1]
    es = x.dtype.itemsize
    mx_dt = isa.DTYPE_CODE["bf16" if x.dtype == BF16 else "int8"]
    acc_dt = isa.DTYPE_CODE["fp32" if x.dtype == BF16 else "int32"]
    X, W = 0, 1024
    Y = W + K * N * es
    SL, SR, SQ, ACC = 0, 4096, 8192, isa.ACC_BASE
    dram = np.zeros(Y + M * N * out_dtype.itemsize + 64, np.uint8)
    dram[X:X + x.nbytes] = x.reshape(-1).view(np.uint8)
    dram[W:W + w.nbytes] = w.reshape(-1).view(np.uint8)
    b = Builder()
    b.emit("dma.load", signal=1, dram=X, local=SL, n0=K * es, n1=M, n2=1, ds1=K * es, ls1=K * es)
    b.emit("dma.load", signal=2, dram=W, local=SR, n0=N * es, n1=K, n2=1, ds1=N * es, ls1=N * es)
    b.emit("mx.loadw", wait=2, w=SR, k=16, n=N, stride=N * es, dtype=mx_dt)
    b.emit("mx.matmul", wait=1, act=SL, acc=ACC, m=M, astride=K * es, cstride=N * 4, dtype=mx_dt, accum=0)
    b.emit("mx.loadw", w=SR + 16 * N * es, k=K - 16, n=N, stride=N * es, dtype=mx_dt)
    b.emit("mx.matmul", signal=3, act=SL + 16 * es, acc=ACC, m=M, astride=K * es, cstride=N * 4,
           dtype=mx_dt, accum=1)
    b.emit("vec.relu", wait=3, signal=4, dst=ACC, a=ACC, rows=M, cols=N, dstride=N * 4, astride=N * 4,
           dt=acc_dt, at=acc_dt)
    src, row_bytes = ACC, N * 4
    if scale is not None:
        b.emit("vec.requant", wait=4, signal=4, dst=SQ, a=ACC, rows=M, cols=N, dstride=N, astride=N * 4,
               dt=isa.DTYPE_CODE["int8"], at=acc_dt, bt=isa.DTYPE_CODE["fp32"], bmode=isa.BMODE_CODE["imm"],
               imm=isa.f32_bits(scale))
        src, row_bytes = SQ, N
    b.emit("dma.store", wait=4, dram=Y, local=src, n0=row_bytes, n1=M, n2=1, ds1=row_bytes, ls1=row_bytes)
    b.emit("halt")
    Simulator("edge").run(b.program(), dram)
    return dram[Y:Y + M * N * out_dtype.itemsize].view(out_dtype).reshape(M, N).copy()


@pytest.mark.parametrize(
    ("elem", "acc", "out", "scale"),
    [("bf16", "f32", "f32", None), ("i8", "i32", "i32", None), ("i8", "i32", "i8", 0.0123)],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_tile_interpreter_matches_simulator(elem, acc, out, scale, seed) -> None:
    M, K, N = 7, 24, 12
    fmt = dict(M=M, K=K, N=N, K2=K - 16, E=elem, A=acc, O=out, S=repr(scale))
    tail = (OUT_REQUANT if scale is not None else OUT_DIRECT).format(**fmt)
    module = _module(MATMUL_RELU.format(OUT=tail, **fmt))
    rng = np.random.default_rng(seed)
    if elem == "bf16":
        x = (rng.standard_normal((M, K)) * 3).astype(BF16)
        w = rng.standard_normal((K, N)).astype(BF16)
    else:
        x = rng.integers(-128, 127, (M, K), endpoint=True, dtype=np.int8)
        w = rng.integers(-128, 127, (K, N), endpoint=True, dtype=np.int8)
    (y_tile,) = run_tile_module(module, [x, w])
    out_dtype = {"f32": np.dtype(np.float32), "i32": np.dtype(np.int32), "i8": np.dtype(np.int8)}[out]
    y_sim = _simulate_matmul_relu(x, w, out_dtype, scale)
    assert y_tile.dtype == y_sim.dtype
    # bit-identical
    np.testing.assert_array_equal(y_tile.view(np.uint8), y_sim.view(np.uint8))
    assert np.count_nonzero(y_tile) > 0
