"""Hand-written NPU kernels (program generators) used by tests and benchmarks.

Each generator returns a `Kernel`: the program, a DRAM image holding the inputs, where the
outputs live, and the numpy reference. They are also worked examples of the ISA: decoupled
DMA/matrix/vector queues synchronised with semaphores, double buffering, hardware loops with
register-strided addresses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from infer.target import isa
from infer.target.asm import Builder, Program
from infer.target.hw import HardwareConfig, load_config

ACC = isa.ACC_BASE
DT = isa.DTYPE_CODE
NPD = {"int8": np.int8, "int32": np.int32, "fp32": np.float32, "bf16": ml_dtypes.bfloat16}


@dataclass
class Kernel:
    program: Program
    dram: np.ndarray
    outputs: dict[str, tuple[int, tuple[int, ...], str]] = field(default_factory=dict)
    expected: dict[str, np.ndarray] = field(default_factory=dict)
    macs: int = 0
    dram_bytes: int = 0  # minimum DRAM traffic (inputs read once + outputs written once)

    def read(self, name: str) -> np.ndarray:
        off, shape, dt = self.outputs[name]
        n = int(np.prod(shape)) * np.dtype(NPD[dt]).itemsize
        return self.dram[off:off + n].view(NPD[dt]).reshape(shape).copy()


class _Dram:
    def __init__(self) -> None:
        self.chunks: list[tuple[int, bytes]] = []
        self.top = 0

    def put(self, arr: np.ndarray) -> int:
        off = self.top
        self.chunks.append((off, np.ascontiguousarray(arr).tobytes()))
        self.top = -(-(off + arr.nbytes) // 64) * 64
        return off

    def reserve(self, nbytes: int) -> int:
        off = self.top
        self.top = -(-(off + nbytes) // 64) * 64
        return off

    def image(self) -> np.ndarray:
        d = np.zeros(self.top + 64, np.uint8)
        for off, b in self.chunks:
            d[off:off + len(b)] = np.frombuffer(b, np.uint8)
        return d


def pack_weights(b: np.ndarray, cols: int) -> np.ndarray:
    """K x N -> [N/cols][K][cols]: each column strip contiguous (burst-friendly DMA)."""
    k, n = b.shape
    return np.ascontiguousarray(b.reshape(k, n // cols, cols).transpose(1, 0, 2))


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# ----------------------------------------------------------------------------- GEMM
def gemm(cfg: HardwareConfig | str, M: int, K: int, N: int, dtype: str = "int8",
         double_buffer: bool = True, seed: int = 0, tm: int | None = None) -> Kernel:
    """C[M,N] (int32 | fp32) = A[M,K] @ B[K,N], weight-stationary, B packed in column strips.

    Per m-block the A block stays resident in the scratchpad; per n-strip: DMA the K x C strip
    of B (double-buffered), K/R pairs of mx.loadw + mx.matmul (a hardware loop whose addresses
    step by registers) accumulate into one of two accumulator buffers, and the tile is DMAed
    out while the next strip computes. `double_buffer=False` uses one B buffer and one
    accumulator buffer, so load, compute and store serialise.
    """
    cfg = load_config(cfg)
    R, C = cfg.matrix.rows, cfg.matrix.cols
    esz = 1 if dtype == "int8" else 2
    if K % R or N % C:
        raise ValueError(f"K must be a multiple of {R} and N of {C}")
    nbuf = 2 if double_buffer else 1
    if tm is None:
        tm = min(M, cfg.memory.accumulator_bytes // (2 * C * 4),
                 (cfg.memory.scratchpad_bytes - 2 * K * C * esz) // (K * esz))
    if M % tm:
        raise ValueError(f"M = {M} must be a multiple of the row block {tm}")
    rng = _rng(seed)
    if dtype == "int8":
        a = rng.integers(-128, 128, (M, K), dtype=np.int8)
        b = rng.integers(-128, 128, (K, N), dtype=np.int8)
        ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int32)  # exact
        odt = "int32"
    else:
        a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
        ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
        odt = "fp32"
    mem = _Dram()
    a_off = mem.put(a)
    b_off = mem.put(pack_weights(b, C))
    c_off = mem.reserve(M * N * 4)
    a_loc = 0
    b_loc = [tm * K * esz + i * K * C * esz for i in range(nbuf)]
    acc_loc = [ACC + i * tm * C * 4 for i in range(nbuf)]
    S_BFULL, S_BFREE, S_CFULL, S_CFREE, S_A, S_AFREE = 1, 2, 3, 4, 5, 6
    rW, rA = 1, 2
    dt = DT[dtype]
    kt_n = K // R
    nstrips = N // C
    bld = Builder()
    for _ in range(nbuf):  # initial tokens: every buffer starts free
        bld.nop(signal=S_BFREE, signal2=S_CFREE)
    strips = [(mb, j) for mb in range(M // tm) for j in range(nstrips)]

    def load_b(idx: int) -> None:
        j = strips[idx][1]
        bld.dma_load(dram=b_off + j * K * C * esz, local=b_loc[idx % nbuf], n0=K * C * esz,
                     n1=1, n2=1, wait=S_BFREE, signal=S_BFULL)

    for idx, (mb, j) in enumerate(strips):
        buf = idx % nbuf
        if j == 0:
            if mb > 0:  # the single A buffer is reused: wait until the previous block is done
                bld.nop(wait=S_AFREE)
            bld.dma_load(dram=a_off + mb * tm * K * esz, local=a_loc, n0=K * esz, n1=tm, n2=1,
                         ds1=K * esz, ls1=K * esz, signal=S_A)
            load_b(idx)
        if double_buffer and idx + 1 < len(strips) and strips[idx + 1][1] != 0:
            load_b(idx + 1)  # prefetch the next strip while this one computes
        mm = dict(act_base=rA, act=0, acc=acc_loc[buf], m=tm, astride=K * esz, cstride=C * 4,
                  dtype=dt)
        lw = dict(w_base=rW, w=0, k=R, n=C, stride=C * esz, dtype=dt)
        bld.li(rd=rW, imm=b_loc[buf])
        bld.li(rd=rA, imm=a_loc)
        first_wait = S_A if j == 0 else S_CFREE
        if j == 0:
            bld.nop(wait=S_CFREE)  # accumulator buffer free (token consumed by the front end)
        last = kt_n == 1
        bld.mx_loadw(**lw, wait=S_BFULL)
        bld.mx_matmul(**mm, accum=0, wait=first_wait,
                      signal=S_BFREE if last else 0, signal2=S_CFULL if last else 0)
        if kt_n > 2:
            with bld.loop(count=kt_n - 2):
                bld.addi(rd=rW, rs=rW, imm=R * C * esz)
                bld.addi(rd=rA, rs=rA, imm=R * esz)
                bld.mx_loadw(**lw)
                bld.mx_matmul(**mm, accum=1)
        if kt_n > 1:
            bld.addi(rd=rW, rs=rW, imm=R * C * esz)
            bld.addi(rd=rA, rs=rA, imm=R * esz)
            bld.mx_loadw(**lw)
            bld.mx_matmul(**mm, accum=1, signal=S_BFREE, signal2=S_CFULL)
        last_of_block = j == nstrips - 1
        bld.dma_store(dram=c_off + (mb * tm * N + j * C) * 4, local=acc_loc[buf], n0=C * 4,
                      n1=tm, n2=1, ds1=N * 4, ls1=C * 4, wait=S_CFULL, signal=S_CFREE,
                      signal2=S_AFREE if last_of_block and mb + 1 < M // tm else 0)
        if not double_buffer and idx + 1 < len(strips) and strips[idx + 1][1] != 0:
            load_b(idx + 1)
    bld.halt()
    prog = bld.program(kernel="gemm", M=M, K=K, N=N, dtype=dtype, double_buffer=double_buffer)
    return Kernel(prog, mem.image(), {"C": (c_off, (M, N), odt)}, {"C": ref}, M * K * N,
                  a.nbytes + b.nbytes + M * N * 4)
