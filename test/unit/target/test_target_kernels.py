"""Hand-written kernels on both configs against numpy: bit-exact for int8/int32 (and the
bf16 elementwise kernel), tolerances for bf16 GEMM (fp32 accumulation order) and fp32 vector
math (one rounding per instruction)."""

import numpy as np
import pytest

from infer.target import kernels
from infer.target.sim import Simulator

CONFIGS = ["edge", "server"]


def run(cfg, k):
    c = Simulator(cfg).run(k.program, k.dram)
    (name, ref), = k.expected.items()
    return k.read(name), ref, c


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("db", [True, False])
def test_gemm_int8_exact(cfg, db):
    M, K, N = (96, 64, 48) if cfg == "edge" else (64, 256, 256)
    k = kernels.gemm(cfg, M, K, N, double_buffer=db, tm=M // 2 if cfg == "edge" else None)
    out, ref, c = run(cfg, k)
    np.testing.assert_array_equal(out, ref)
    assert c.macs == M * K * N


@pytest.mark.parametrize("cfg", CONFIGS)
def test_gemm_bf16(cfg):
    M, K, N = (32, 48, 32) if cfg == "edge" else (32, 256, 128)
    out, ref, _ = run(cfg, kernels.gemm(cfg, M, K, N, dtype="bf16"))
    # bf16 inputs are exact in fp32; only fp32 summation order differs from float64
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4 * np.sqrt(K))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_gemv_exact(cfg):
    K, N = (64, 96) if cfg == "edge" else (256, 384)
    out, ref, _ = run(cfg, kernels.gemv(cfg, K, N))
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_elementwise_exact(cfg, dtype):
    out, ref, _ = run(cfg, kernels.elementwise(cfg, 100, 40, dtype, tr=32))
    np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_softmax(cfg):
    out, ref, _ = run(cfg, kernels.softmax(cfg, 50, 72, tr=16))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out.sum(axis=1), 1, rtol=1e-5)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_layernorm(cfg):
    out, ref, _ = run(cfg, kernels.layernorm(cfg, 40, 96, tr=16))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
