"""The int8 path through tile and npu: integer kernels (linear_integer, matmul_integer) with
their requantize / dequantize epilogues and the standalone quantization ops give the graph
interpreter's bits on the tile interpreter and on the simulator, on both configs, for random
int8 data and shapes with remainders in every tile dimension."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.dialects.graph_interpreter import run_module
from infer.dialects.ir_io import make_context
from infer.dialects.tile_interpreter import run_tile_module
from infer.passes.graph_to_tile import GraphToTilePass

from helpers.graph_programs import parse_with_weights

CTX = make_context()
BOTH = pytest.mark.parametrize("target", ["edge", "server"])


def mlp(M: int, K: int, H: int, N: int, rng, *, zp: int = 0, x_zp: int = 0) -> tuple[str, dict[str, np.ndarray]]:
    """f32 -> requantize -> linear_integer (+bias, relu, per-channel requantize with zero point
    `zp`) -> matmul_integer (lhs zero point `zp`) -> dequantize (per channel) -> f32."""
    w1 = rng.integers(-127, 128, (H, K), dtype=np.int8)
    b1 = rng.integers(-5000, 5000, (H,), dtype=np.int32)
    w2 = rng.integers(-127, 128, (H, N), dtype=np.int8)
    m1 = (rng.uniform(0.5, 2.0, H) / (K * 64.0)).astype(np.float32)
    s2 = (rng.uniform(0.5, 2.0, N) * 1e-3).astype(np.float32)
    f = lambda a: ", ".join(repr(float(v)) for v in a)  # noqa: E731
    text = f"""func.func @main(%x: tensor<{M}x{K}xf32>) -> tensor<{M}x{N}xf32> {{
  %s = graph.constant dense<21.5> : tensor<1xf32>
  %xq = graph.requantize %x, %s {{zero_point = {x_zp} : i64}} : (tensor<{M}x{K}xf32>, tensor<1xf32>) -> tensor<{M}x{K}xi8>
  %w1 = graph.weight @w1 : tensor<{H}x{K}xi8>
  %b1 = graph.weight @b1 : tensor<{H}xi32>
  %a1 = graph.linear_integer %xq, %w1, %b1 {{input_zero_point = {x_zp} : i64}} : (tensor<{M}x{K}xi8>, tensor<{H}x{K}xi8>, tensor<{H}xi32>) -> tensor<{M}x{H}xi32>
  %r1 = graph.relu %a1 : (tensor<{M}x{H}xi32>) -> tensor<{M}x{H}xi32>
  %m1 = graph.constant dense<[{f(m1)}]> : tensor<{H}xf32>
  %h = graph.requantize %r1, %m1 {{axis = 1 : i64, zero_point = {zp} : i64}} : (tensor<{M}x{H}xi32>, tensor<{H}xf32>) -> tensor<{M}x{H}xi8>
  %w2 = graph.weight @w2 : tensor<{H}x{N}xi8>
  %a2 = graph.matmul_integer %h, %w2 {{lhs_zero_point = {zp} : i64}} : (tensor<{M}x{H}xi8>, tensor<{H}x{N}xi8>) -> tensor<{M}x{N}xi32>
  %s2 = graph.constant dense<[{f(s2)}]> : tensor<{N}xf32>
  %y = graph.dequantize_linear %a2, %s2 {{axis = 1 : i64}} : (tensor<{M}x{N}xi32>, tensor<{N}xf32>) -> tensor<{M}x{N}xf32>
  func.return %y : tensor<{M}x{N}xf32>
}}
"""
    return text, {"w1": w1, "b1": b1, "w2": w2}


def _three_ways(text: str, weights, x: np.ndarray, target: str, overrides: str = "") -> np.ndarray:
    """graph interpreter == tile interpreter == simulator, bit for bit; returns the output."""
    ref = run_module(parse_with_weights(text, weights), [x])[0]
    tile_module = parse_with_weights(text, weights)
    GraphToTilePass(target=target, precision="int8", overrides=overrides).apply(CTX, tile_module)
    assert "tile.matmul" in str(tile_module)
    tiled = run_tile_module(tile_module, [x])[0]
    np.testing.assert_array_equal(tiled, ref)
    exe = infer.compile(parse_with_weights(text, weights), target=target, precision="int8", graph_passes="")
    simulated = exe.run([x])[0]
    np.testing.assert_array_equal(simulated, ref)
    return ref


@BOTH
@pytest.mark.parametrize("shape,zp", [((37, 45, 70, 19), 0), ((5, 200, 33, 10), -7)])
def test_int8_mlp_is_bit_exact(target, shape, zp) -> None:
    rng = np.random.default_rng(sum(shape) + zp)
    text, weights = mlp(*shape, rng, zp=zp, x_zp=3 if zp else 0)
    x = rng.standard_normal(shape[:2]).astype(np.float32) * 3
    y = _three_ways(text, weights, x, target)
    assert np.abs(y).max() > 0 and np.unique(y).size > 10  # not saturated to nothing


def test_int8_remainder_tiles_are_bit_exact() -> None:
    """Small forced tiles: several m, n and k tiles, each with a remainder."""
    rng = np.random.default_rng(7)
    text, weights = mlp(37, 45, 70, 19, rng)
    x = rng.standard_normal((37, 45)).astype(np.float32) * 3
    _three_ways(text, weights, x, "edge", overrides="kernel1=16x32x16,kernel2=8x16x32")


def cnn(rng, *, zp: int = 0) -> tuple[str, dict[str, np.ndarray], tuple[int, ...]]:
    """f32 -> requantize -> conv2d_integer 3x3 pad 1 (+bias, relu, per-channel requantize with
    zero point `zp`) -> conv2d_integer 3x3 stride 2, 2 groups, asymmetric padding (input zero
    point `zp`) -> dequantize (per channel) -> relu (float) -> f32."""
    N, C, H, W, O1, O2 = 2, 3, 9, 11, 20, 6
    w1 = rng.integers(-127, 128, (O1, C, 3, 3), dtype=np.int8)
    b1 = rng.integers(-3000, 3000, (O1,), dtype=np.int32)
    w2 = rng.integers(-127, 128, (O2, O1 // 2, 3, 3), dtype=np.int8)
    m1 = (rng.uniform(0.5, 2.0, O1) / (27 * 48.0)).astype(np.float32)
    s2 = (rng.uniform(0.5, 2.0, O2) * 1e-3).astype(np.float32)
    f = lambda a: ", ".join(repr(float(v)) for v in a)  # noqa: E731
    x_t, a_t, h_t, y_t = (f"tensor<{N}x{C}x{H}x{W}xf32>", f"tensor<{N}x{O1}x{H}x{W}xi32>",
                          f"tensor<{N}x{O1}x{H}x{W}xi8>", f"tensor<{N}x{O2}x5x6xf32>")
    xq_t, a2_t = f"tensor<{N}x{C}x{H}x{W}xi8>", f"tensor<{N}x{O2}x5x6xi32>"
    text = f"""func.func @main(%x: {x_t}) -> {y_t} {{
  %s = graph.constant dense<19.0> : tensor<1xf32>
  %xq = graph.requantize %x, %s : ({x_t}, tensor<1xf32>) -> {xq_t}
  %w1 = graph.weight @w1 : tensor<{O1}x{C}x3x3xi8>
  %b1 = graph.weight @b1 : tensor<{O1}xi32>
  %a1 = graph.conv2d_integer %xq, %w1, %b1 {{padding = array<i64: 1, 1, 1, 1>}} : ({xq_t}, tensor<{O1}x{C}x3x3xi8>, tensor<{O1}xi32>) -> {a_t}
  %r1 = graph.relu %a1 : ({a_t}) -> {a_t}
  %m1 = graph.constant dense<[{f(m1)}]> : tensor<{O1}xf32>
  %h = graph.requantize %r1, %m1 {{axis = 1 : i64, zero_point = {zp} : i64}} : ({a_t}, tensor<{O1}xf32>) -> {h_t}
  %w2 = graph.weight @w2 : tensor<{O2}x{O1 // 2}x3x3xi8>
  %a2 = graph.conv2d_integer %h, %w2 {{stride = array<i64: 2, 2>, padding = array<i64: 1, 2, 1, 0>, groups = 2 : i64, input_zero_point = {zp} : i64}} : ({h_t}, tensor<{O2}x{O1 // 2}x3x3xi8>) -> {a2_t}
  %s2 = graph.constant dense<[{f(s2)}]> : tensor<{O2}xf32>
  %d = graph.dequantize_linear %a2, %s2 {{axis = 1 : i64}} : ({a2_t}, tensor<{O2}xf32>) -> {y_t}
  %y = graph.relu %d : ({y_t}) -> {y_t}
  func.return %y : {y_t}
}}
"""
    return text, {"w1": w1, "b1": b1, "w2": w2}, (N, C, H, W)


@BOTH
@pytest.mark.parametrize("zp", [0, 5])
def test_int8_cnn_is_bit_exact(target, zp) -> None:
    rng = np.random.default_rng(11 + zp)
    text, weights, shape = cnn(rng, zp=zp)
    x = rng.standard_normal(shape).astype(np.float32) * 3
    y = _three_ways(text, weights, x, target)
    assert (y > 0).mean() > 0.2 and np.unique(y).size > 10


def late_cnn(rng, zp: int) -> tuple[str, dict[str, np.ndarray], tuple[int, ...]]:
    """A late-ResNet-stage shape: few pixels, many channels (conv.py's "channels" orientation,
    several channel steps on edge): f32 -> requantize (zero point `zp`) -> conv2d_integer 3x3
    pad 1 (+bias, per-channel requantize) -> conv2d_integer 1x1 stride 2 on an odd width ->
    dequantize (per channel)."""
    N, C, H, W, O1, O2 = 1, 160, 7, 7, 144, 96
    w1 = rng.integers(-127, 128, (O1, C, 3, 3), dtype=np.int8)
    b1 = rng.integers(-3000, 3000, (O1,), dtype=np.int32)
    w2 = rng.integers(-127, 128, (O2, O1, 1, 1), dtype=np.int8)
    m1 = (rng.uniform(0.5, 2.0, O1) / (C * 9 * 48.0)).astype(np.float32)
    s2 = (rng.uniform(0.5, 2.0, O2) * 1e-3).astype(np.float32)
    f = lambda a: ", ".join(repr(float(v)) for v in a)  # noqa: E731
    x_t, a_t, h_t = f"tensor<{N}x{C}x{H}x{W}xf32>", f"tensor<{N}x{O1}x{H}x{W}xi32>", f"tensor<{N}x{O1}x{H}x{W}xi8>"
    xq_t, a2_t, y_t = f"tensor<{N}x{C}x{H}x{W}xi8>", f"tensor<{N}x{O2}x4x4xi32>", f"tensor<{N}x{O2}x4x4xf32>"
    text = f"""func.func @main(%x: {x_t}) -> {y_t} {{
  %s = graph.constant dense<19.0> : tensor<1xf32>
  %xq = graph.requantize %x, %s {{zero_point = {zp} : i64}} : ({x_t}, tensor<1xf32>) -> {xq_t}
  %w1 = graph.weight @w1 : tensor<{O1}x{C}x3x3xi8>
  %b1 = graph.weight @b1 : tensor<{O1}xi32>
  %a1 = graph.conv2d_integer %xq, %w1, %b1 {{padding = array<i64: 1, 1, 1, 1>, input_zero_point = {zp} : i64}} : ({xq_t}, tensor<{O1}x{C}x3x3xi8>, tensor<{O1}xi32>) -> {a_t}
  %m1 = graph.constant dense<[{f(m1)}]> : tensor<{O1}xf32>
  %h = graph.requantize %a1, %m1 {{axis = 1 : i64, zero_point = {zp} : i64}} : ({a_t}, tensor<{O1}xf32>) -> {h_t}
  %w2 = graph.weight @w2 : tensor<{O2}x{O1}x1x1xi8>
  %a2 = graph.conv2d_integer %h, %w2 {{stride = array<i64: 2, 2>, input_zero_point = {zp} : i64}} : ({h_t}, tensor<{O2}x{O1}x1x1xi8>) -> {a2_t}
  %s2 = graph.constant dense<[{f(s2)}]> : tensor<{O2}xf32>
  %y = graph.dequantize_linear %a2, %s2 {{axis = 1 : i64}} : ({a2_t}, tensor<{O2}xf32>) -> {y_t}
  func.return %y : {y_t}
}}
"""
    return text, {"w1": w1, "b1": b1, "w2": w2}, (N, C, H, W)


@BOTH
def test_int8_late_stage_convs_are_bit_exact(target) -> None:
    rng = np.random.default_rng(3)
    text, weights, shape = late_cnn(rng, -4)
    x = rng.standard_normal(shape).astype(np.float32) * 3
    y = _three_ways(text, weights, x, target)
    assert np.unique(y).size > 100


def test_cli_compiles_int8_and_runs_the_reference_bits(tmp_path) -> None:
    """`infer compile MODEL --precision int8 --calibration calib.npz` -> an artifact whose
    simulated outputs are the reference int8 interpreter's (`infer.quantize` on the same
    samples), and `infer run --check` on it passes."""
    import subprocess
    import sys
    from pathlib import Path

    from helpers.onnx_models import mlp_onnx

    model = mlp_onnx(tmp_path / "mlp.onnx", batch=6, d_in=40, hidden=50, d_out=12)
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((3, 6, 40)).astype(np.float32))
    x = rng.standard_normal((6, 40)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    infer_bin = str(Path(sys.executable).parent / "infer")
    compiled = subprocess.run([infer_bin, "compile", str(model), "-t", "server", "--precision", "int8", "--calibration",
                               "calib.npz", "-o", "mlp.npu"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert compiled.returncode == 0, compiled.stderr
    assert "int8" in compiled.stderr + compiled.stdout
    ran = subprocess.run([infer_bin, "run", "mlp.npu", "--inputs", "in.npz", "--output", "out.npz", "--check"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    qmodel, report = infer.quantize(str(model), str(tmp_path / "calib.npz"))
    assert report.float_layers == []
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["y"], qmodel.run([x])[0])


@BOTH
@pytest.mark.parametrize("zp", [0, -3])
def test_float_ops_between_integer_kernels_are_bit_exact(target, zp) -> None:
    """linear_integer -> dequantize -> float add (row) + relu -> per-tensor requantize (zero
    point `zp`) in one kernel: the f32 tile requantized on chip."""
    M, K, N = 29, 70, 45
    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (N, K), dtype=np.int8)
    shift = ", ".join(repr(float(v)) for v in rng.standard_normal(N).astype(np.float32))
    text = f"""func.func @main(%x: tensor<{M}x{K}xf32>) -> tensor<{M}x{N}xf32> {{
  %s = graph.constant dense<30.0> : tensor<1xf32>
  %xq = graph.requantize %x, %s : (tensor<{M}x{K}xf32>, tensor<1xf32>) -> tensor<{M}x{K}xi8>
  %w = graph.weight @w : tensor<{N}x{K}xi8>
  %a = graph.linear_integer %xq, %w : (tensor<{M}x{K}xi8>, tensor<{N}x{K}xi8>) -> tensor<{M}x{N}xi32>
  %sc = graph.constant dense<0.0007> : tensor<1xf32>
  %d = graph.dequantize_linear %a, %sc : (tensor<{M}x{N}xi32>, tensor<1xf32>) -> tensor<{M}x{N}xf32>
  %b = graph.constant dense<[{shift}]> : tensor<{N}xf32>
  %e = graph.add %d, %b : (tensor<{M}x{N}xf32>, tensor<{N}xf32>) -> tensor<{M}x{N}xf32>
  %r = graph.relu %e : (tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32>
  %m = graph.constant dense<23.0> : tensor<1xf32>
  %q = graph.requantize %r, %m {{zero_point = {zp} : i64}} : (tensor<{M}x{N}xf32>, tensor<1xf32>) -> tensor<{M}x{N}xi8>
  %s2 = graph.constant dense<0.05> : tensor<1xf32>
  %y = graph.dequantize_linear %q, %s2 : (tensor<{M}x{N}xi8>, tensor<1xf32>) -> tensor<{M}x{N}xf32>
  func.return %y : tensor<{M}x{N}xf32>
}}
"""
    x = rng.standard_normal((M, K)).astype(np.float32) * 2
    y = _three_ways(text, {"w": w}, x, target)
    assert np.unique(y).size > 10


@BOTH
@pytest.mark.parametrize("per_channel", [False, True])
def test_dequantize_of_an_int32_constant_is_bit_exact(target, per_channel) -> None:
    """A standalone dequantize_linear of a compile-time int32 tensor (an imported Gemm's
    quantized bias when no kernel takes it, and the import does not fold it): the constant is
    read as int32, not as the f32 values the lowering holds constants in."""
    M, N = 4, 10
    rng = np.random.default_rng(2)
    b = rng.integers(-50000, 50000, (N,), dtype=np.int32)
    scales = (rng.uniform(0.5, 2, N) * 1e-4).astype(np.float32)
    s_type = f"tensor<{N}xf32>" if per_channel else "tensor<1xf32>"
    s_value = "dense<[" + ", ".join(repr(float(v)) for v in scales) + "]>" if per_channel else "dense<0.00013>"
    axis = " {axis = 0 : i64}" if per_channel else ""
    text = f"""func.func @main(%x: tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32> {{
  %b = graph.weight @b : tensor<{N}xi32>
  %s = graph.constant {s_value} : {s_type}
  %d = graph.dequantize_linear %b, %s{axis} : (tensor<{N}xi32>, {s_type}) -> tensor<{N}xf32>
  %y = graph.add %x, %d : (tensor<{M}x{N}xf32>, tensor<{N}xf32>) -> tensor<{M}x{N}xf32>
  func.return %y : tensor<{M}x{N}xf32>
}}
"""
    x = rng.standard_normal((M, N)).astype(np.float32)
    ref = run_module(parse_with_weights(text, {"b": b}), [x])[0]
    assert np.abs(ref).max() > 1  # the bias matters
    simulated = infer.compile(parse_with_weights(text, {"b": b}), target=target, precision="int8", graph_passes="").run([x])[0]
    np.testing.assert_array_equal(simulated, ref)
