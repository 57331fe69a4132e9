"""Small hand-built artifacts shared by the runtime tests."""

from __future__ import annotations

import numpy as np

from infer.runtime.artifact import Artifact, TensorSpec, save_safetensors
from infer.target import kernels
from infer.target.asm import Builder
from infer.target.hw import load_config


def target_toml(name: str) -> str:
    from infer.target.hw import _HERE

    return (_HERE / f"{name}.toml").read_text()


def bias_relu_artifact(target: str = "edge") -> Artifact:
    """y[4x16] = relu(x + b): x input at 0, weight b at 256, y output at 320."""
    fp32 = 2
    b = Builder()
    b.dma_load(dram=256, local=256, n0=64, n1=1, n2=1, signal=2)
    b.dma_load(dram=0, local=0, n0=64, n1=4, n2=1, ds1=64, ls1=64, wait=2, signal=1)
    b.vec_add(dst=512, a=0, b=256, rows=4, cols=16, dstride=64, astride=64, bstride=0, dt=fp32, at=fp32,
              bt=fp32, bmode=1, wait=1)
    b.vec_relu(dst=512, a=512, rows=4, cols=16, dstride=64, astride=64, dt=fp32, at=fp32, signal=3)
    b.dma_store(dram=320, local=512, n0=64, n1=4, n2=1, ds1=64, ls1=64, wait=3)
    b.halt()
    bias = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
    layout = {  # docs/codegen.md
        "version": 1, "target": target, "entry": "main", "alignment": 64, "dram_bytes": 640,
        "args": [{"index": 0, "name": "x", "offset": 0, "bytes": 256, "shape": [4, 16], "dtype": "f32", "output": False},
                 {"index": 1, "name": "y", "offset": 320, "bytes": 256, "shape": [4, 16], "dtype": "f32", "output": True}],
        "weights_offset": 256, "weights_bytes": 64,
        "weights": [{"name": "b", "offset": 256, "bytes": 64, "shape": [1, 16], "dtype": "f32"}],
        "arena_offset": 576, "arena_bytes": 0,
    }
    return Artifact(
        program=b.program().to_bytes(), weights=save_safetensors({"b": bias}),
        signature={"inputs": [TensorSpec("x", (4, 16), "float32")], "outputs": [TensorSpec("y", (4, 16), "float32")]},
        layout=layout, target_name=target, target_toml=target_toml(target), source="hand-written",
        ops=[{"name": "bias_add", "kind": "elementwise", "start": 0, "end": 3},
             {"name": "relu", "kind": "elementwise", "start": 3, "end": 6}],
    )


def gemm_artifact(M: int = 32, K: int = 64, N: int = 32, target: str = "edge") -> tuple[Artifact, np.ndarray, np.ndarray]:
    """The hand-written GEMM kernel as an artifact: A input, packed B weight, C output."""
    cfg = load_config(target)
    k = kernels.gemm(cfg, M, K, N, dtype="bf16")
    import ml_dtypes

    a = k.dram[0:M * K * 2].view(ml_dtypes.bfloat16).reshape(M, K).copy()
    b_off = -(-(M * K * 2) // 64) * 64
    c_off, _, _ = k.outputs["C"]
    bp = k.dram[b_off:c_off].copy()
    layout = {
        "version": 1, "target": target, "entry": "main", "alignment": 64, "dram_bytes": k.dram.size,
        "args": [{"index": 0, "name": "A", "offset": 0, "bytes": M * K * 2, "shape": [M, K], "dtype": "bf16",
                  "output": False},
                 {"index": 1, "name": "C", "offset": c_off, "bytes": M * N * 4, "shape": [M, N], "dtype": "f32",
                  "output": True}],
        "weights_offset": b_off, "weights_bytes": bp.size,
        "weights": [{"name": "B.packed", "offset": b_off, "bytes": bp.size, "shape": [bp.size], "dtype": "ui8"}],
        "arena_offset": c_off + M * N * 4, "arena_bytes": 0,
    }
    art = Artifact(
        program=k.program.to_bytes(), weights=save_safetensors({"B.packed": bp}),
        signature={"inputs": [TensorSpec("A", (M, K), "bfloat16")], "outputs": [TensorSpec("C", (M, N), "float32")]},
        layout=layout, target_name=target, target_toml=target_toml(target), source="kernels.gemm",
        ops=[{"name": "gemm", "kind": "matmul", "start": 0, "end": len(k.program)}],
    )
    return art, a, k.expected["C"]
