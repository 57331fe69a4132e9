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


# ----------------------------------------------------------------------------- GEMV
def gemv(cfg: HardwareConfig | str, K: int, N: int, nbuf: int = 4, seed: int = 0) -> Kernel:
    """y[1,N] int32 = x[1,K] int8 @ W[K,N] int8: the decode-step shape, bandwidth-bound.

    Weight strips (K x C, packed contiguous) stream through `nbuf` scratchpad buffers; each
    strip is K/R mx.loadw + mx.matmul(m=1) pairs in a hardware loop. y stays in the
    accumulator (one row per strip, contiguous) and is stored once at the end.
    """
    cfg = load_config(cfg)
    R, C = cfg.matrix.rows, cfg.matrix.cols
    if K % R or N % C:
        raise ValueError(f"K must be a multiple of {R} and N of {C}")
    rng = _rng(seed)
    x = rng.integers(-128, 128, (1, K), dtype=np.int8)
    w = rng.integers(-128, 128, (K, N), dtype=np.int8)
    ref = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.int32)
    mem = _Dram()
    x_off = mem.put(x)
    w_off = mem.put(pack_weights(w, C))
    y_off = mem.reserve(N * 4)
    strip = K * C
    x_loc = 0
    s_loc = [-(-K // 64) * 64 + i * strip for i in range(nbuf)]
    if s_loc[-1] + strip > cfg.memory.scratchpad_bytes or N * 4 > cfg.memory.accumulator_bytes:
        raise ValueError("GEMV does not fit the local memories; use fewer buffers")
    S_FULL, S_FREE, S_X, S_DONE = 1, 2, 3, 4
    rW, rA = 1, 2
    kt_n = K // R
    ns = N // C
    bld = Builder()
    for _ in range(nbuf):
        bld.nop(signal=S_FREE)
    bld.dma_load(dram=x_off, local=x_loc, n0=K, n1=1, n2=1, signal=S_X)

    def load(j: int) -> None:
        bld.dma_load(dram=w_off + j * strip, local=s_loc[j % nbuf], n0=strip, n1=1, n2=1,
                     wait=S_FREE, signal=S_FULL)

    for j in range(min(nbuf, ns)):
        load(j)
    for j in range(ns):
        lw = dict(w_base=rW, w=0, k=R, n=C, stride=C, dtype=DT["int8"])
        mm = dict(act_base=rA, act=0, acc=ACC + j * C * 4, m=1, astride=K, cstride=C * 4,
                  dtype=DT["int8"])
        bld.li(rd=rW, imm=s_loc[j % nbuf])
        bld.li(rd=rA, imm=x_loc)
        _kloop(bld, kt_n, lw, mm, rW, rA, R * C, R, lw_wait=S_FULL,
               mm_wait=S_X if j == 0 else 0, signal=S_FREE,
               signal2=S_DONE if j == ns - 1 else 0)
        if j + nbuf < ns:
            load(j + nbuf)
    bld.dma_store(dram=y_off, local=ACC, n0=N * 4, n1=1, n2=1, wait=S_DONE)
    bld.halt()
    prog = bld.program(kernel="gemv", K=K, N=N)
    return Kernel(prog, mem.image(), {"y": (y_off, (1, N), "int32")}, {"y": ref}, K * N,
                  x.nbytes + w.nbytes + N * 4)


def _kloop(bld: Builder, kt_n: int, lw: dict[str, int], mm: dict[str, int], rW: int, rA: int,
           wstep: int, astep: int, lw_wait: int, mm_wait: int, signal: int,
           signal2: int) -> None:
    """K/R (loadw, matmul) pairs: first peeled (waits, overwrite), middle in a hardware loop
    stepping the weight and activation registers, last peeled (signals)."""
    last = kt_n == 1
    bld.mx_loadw(**lw, wait=lw_wait)
    bld.mx_matmul(**mm, accum=0, wait=mm_wait, signal=signal if last else 0,
                  signal2=signal2 if last else 0)
    if kt_n > 2:
        with bld.loop(count=kt_n - 2):
            bld.addi(rd=rW, rs=rW, imm=wstep)
            bld.addi(rd=rA, rs=rA, imm=astep)
            bld.mx_loadw(**lw)
            bld.mx_matmul(**mm, accum=1)
    if kt_n > 1:
        bld.addi(rd=rW, rs=rW, imm=wstep)
        bld.addi(rd=rA, rs=rA, imm=astep)
        bld.mx_loadw(**lw)
        bld.mx_matmul(**mm, accum=1, signal=signal, signal2=signal2)


# ----------------------------------------------------------------------------- row-tiled vector kernels
def _row_tiled(cfg: HardwareConfig, ins: list[np.ndarray], dtype: str, tr: int, body,
               consts: list[np.ndarray] = (), scratch_tiles: int = 0) -> tuple[Builder, _Dram, int]:
    """Double-buffered row tiles: DMA all inputs of a tile in one 3-D transfer (one plane per
    input), run `body(bld, buf_loc, const_locs, scratch_loc, rows)` on the vector unit (its
    first instruction must wait S_IN, its last signal S_OUT), store plane 0 back."""
    rows, cols = ins[0].shape
    esz = np.dtype(NPD[dtype]).itemsize
    mem = _Dram()
    offs = [mem.put(a) for a in ins]
    plane_d = offs[1] - offs[0] if len(ins) > 1 else 0
    if any(o - offs[0] != i * plane_d for i, o in enumerate(offs)):
        raise AssertionError("inputs must be equally spaced in DRAM")
    out_off = mem.reserve(rows * cols * esz)
    const_offs = [mem.put(c) for c in consts]
    tile_bytes = tr * cols * esz
    plane_l = -(-tile_bytes // 64) * 64
    buf = [i * plane_l * len(ins) for i in range(2)]
    top = 2 * plane_l * len(ins)
    const_locs = []
    for c in consts:
        const_locs.append(top)
        top += -(-c.nbytes // 64) * 64
    scratch = top
    top += scratch_tiles * plane_l + 2 * 64 * -(-tr * 4 // 64)
    if top > cfg.memory.scratchpad_bytes:
        raise ValueError(f"row tile of {tr} rows does not fit the scratchpad")
    S_IN, S_OUT, S_FREE, S_C = 1, 2, 3, 4
    bld = Builder()
    bld.nop(signal=S_FREE)
    bld.nop(signal=S_FREE)
    for c_off, c_loc, c in zip(const_offs, const_locs, consts):
        bld.dma_load(dram=c_off, local=c_loc, n0=c.nbytes, n1=1, n2=1, signal=S_C)
        bld.nop(wait=S_C)
    ntiles = -(-rows // tr)

    def load(t: int) -> None:
        r = min(tr, rows - t * tr)
        bld.dma_load(dram=offs[0] + t * tile_bytes, local=buf[t % 2], n0=cols * esz, n1=r,
                     n2=len(ins), ds1=cols * esz, ds2=plane_d, ls1=cols * esz, ls2=plane_l,
                     wait=S_FREE, signal=S_IN)

    load(0)
    for t in range(ntiles):
        r = min(tr, rows - t * tr)
        if t + 1 < ntiles:
            load(t + 1)
        body(bld, buf[t % 2], plane_l, const_locs, scratch, r)
        bld.dma_store(dram=out_off + t * tile_bytes, local=buf[t % 2], n0=cols * esz, n1=r,
                      n2=1, ds1=cols * esz, ls1=cols * esz, wait=S_OUT, signal=S_FREE)
    bld.halt()
    return bld, mem, out_off


def _v(bld: Builder, op: str, dst: int, a: int, rows: int, cols: int, dt: str, *,
       dstride: int, astride: int, b: int = 0, bstride: int = 0, bmode: str = "tile",
       imm: float = 0.0, bt: str | None = None, at: str | None = None, **sync: int) -> None:
    kw: dict[str, int] = dict(dst=dst, a=a, rows=rows, cols=cols, dt=DT[dt], at=DT[at or dt],
                              dstride=dstride, astride=astride)
    if isa.VECTOR_OP_BY_NAME[op].reads_b:
        kw.update(b=b, bstride=bstride, bt=DT[bt or dt], bmode=isa.BMODE_CODE[bmode],
                  imm=isa.f32_bits(imm))
    bld.emit("vec." + op, **sync, **kw)


def elementwise(cfg: HardwareConfig | str, rows: int, cols: int, dtype: str = "fp32",
                tr: int = 64, seed: int = 0) -> Kernel:
    """z = relu(x + y) * 0.5, row-tiled and double-buffered."""
    cfg = load_config(cfg)
    rng = _rng(seed)
    x = rng.standard_normal((rows, cols)).astype(NPD[dtype])
    y = rng.standard_normal((rows, cols)).astype(NPD[dtype])
    f32 = np.float32
    # each vector instruction stores (and so rounds to `dtype`) its result
    xy = (x.astype(f32) + y.astype(f32)).astype(NPD[dtype]).astype(f32)
    ref = (np.maximum(xy, 0).astype(NPD[dtype]).astype(f32) * f32(0.5)).astype(NPD[dtype])
    esz = np.dtype(NPD[dtype]).itemsize
    st = cols * esz

    def body(bld: Builder, X: int, plane: int, _c: list[int], _s: int, r: int) -> None:
        _v(bld, "add", X, X, r, cols, dtype, dstride=st, astride=st, b=X + plane, bstride=st,
           wait=1)
        _v(bld, "relu", X, X, r, cols, dtype, dstride=st, astride=st)
        _v(bld, "mul", X, X, r, cols, dtype, dstride=st, astride=st, bmode="imm", imm=0.5,
           signal=2)

    bld, mem, out = _row_tiled(cfg, [x, y], dtype, tr, body)
    return Kernel(bld.program(kernel="elementwise"), mem.image(),
                  {"z": (out, (rows, cols), dtype)}, {"z": ref}, 0, 3 * x.nbytes)


def softmax(cfg: HardwareConfig | str, rows: int, cols: int, tr: int = 32,
            seed: int = 0) -> Kernel:
    """Row softmax in fp32: rmax, sub (col broadcast), exp, rsum, recip, mul."""
    cfg = load_config(cfg)
    x = (_rng(seed).standard_normal((rows, cols)) * 4).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    st = cols * 4

    def body(bld: Builder, X: int, _p: int, _c: list[int], S: int, r: int) -> None:
        _v(bld, "rmax", S, X, r, cols, "fp32", dstride=4, astride=st, wait=1)
        _v(bld, "sub", X, X, r, cols, "fp32", dstride=st, astride=st, b=S, bstride=4,
           bmode="col")
        _v(bld, "exp", X, X, r, cols, "fp32", dstride=st, astride=st)
        _v(bld, "rsum", S, X, r, cols, "fp32", dstride=4, astride=st)
        _v(bld, "recip", S, S, r, 1, "fp32", dstride=4, astride=4)
        _v(bld, "mul", X, X, r, cols, "fp32", dstride=st, astride=st, b=S, bstride=4,
           bmode="col", signal=2)

    bld, mem, out = _row_tiled(cfg, [x], "fp32", tr, body)
    return Kernel(bld.program(kernel="softmax"), mem.image(), {"y": (out, (rows, cols), "fp32")},
                  {"y": ref.astype(np.float32)}, 0, 2 * x.nbytes)


def layernorm(cfg: HardwareConfig | str, rows: int, cols: int, tr: int = 32, eps: float = 1e-5,
              seed: int = 0) -> Kernel:
    """Row layer norm in fp32 with gamma/beta (row-vector broadcast)."""
    cfg = load_config(cfg)
    rng = _rng(seed)
    x = (rng.standard_normal((rows, cols)) * 3 + 1).astype(np.float32)
    gamma = rng.standard_normal((1, cols)).astype(np.float32)
    beta = rng.standard_normal((1, cols)).astype(np.float32)
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    ref = ((x - mu) / np.sqrt(var + eps) * gamma + beta).astype(np.float32)
    st = cols * 4
    inv = 1.0 / cols

    def body(bld: Builder, X: int, plane: int, c: list[int], S: int, r: int) -> None:
        G, B = c
        T = S + 2 * 64 * -(-tr * 4 // 64)  # a scratch tile after the two column vectors
        S2 = S + 64 * -(-tr * 4 // 64)
        _v(bld, "rsum", S, X, r, cols, "fp32", dstride=4, astride=st, wait=1)
        _v(bld, "mul", S, S, r, 1, "fp32", dstride=4, astride=4, bmode="imm", imm=inv)
        _v(bld, "sub", X, X, r, cols, "fp32", dstride=st, astride=st, b=S, bstride=4,
           bmode="col")
        _v(bld, "mul", T, X, r, cols, "fp32", dstride=st, astride=st, b=X, bstride=st)
        _v(bld, "rsum", S2, T, r, cols, "fp32", dstride=4, astride=st)
        _v(bld, "mul", S2, S2, r, 1, "fp32", dstride=4, astride=4, bmode="imm", imm=inv)
        _v(bld, "add", S2, S2, r, 1, "fp32", dstride=4, astride=4, bmode="imm", imm=eps)
        _v(bld, "rsqrt", S2, S2, r, 1, "fp32", dstride=4, astride=4)
        _v(bld, "mul", X, X, r, cols, "fp32", dstride=st, astride=st, b=S2, bstride=4,
           bmode="col")
        _v(bld, "mul", X, X, r, cols, "fp32", dstride=st, astride=st, b=G, bmode="row")
        _v(bld, "add", X, X, r, cols, "fp32", dstride=st, astride=st, b=B, bmode="row",
           signal=2)

    bld, mem, out = _row_tiled(cfg, [x], "fp32", tr, body, consts=[gamma, beta],
                               scratch_tiles=1)
    return Kernel(bld.program(kernel="layernorm"), mem.image(),
                  {"y": (out, (rows, cols), "fp32")}, {"y": ref}, 0, 2 * x.nbytes)
