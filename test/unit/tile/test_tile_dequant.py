"""tile.dequant: the tile interpreter expands block-quantized weights bit for bit as the
simulator's vec.dequant does and as gguf.quants dequantizes them."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.tile_interpreter import run_tile_module
from infer.target import isa
from infer.target.asm import Builder
from infer.target.qblocks import BLOCK_BYTES, split_blocks
from infer.target.sim import Simulator

CTX = make_context()
QTYPE = {"q4_0": GGMLQuantizationType.Q4_0, "q4_1": GGMLQuantizationType.Q4_1,
         "q8_0": GGMLQuantizationType.Q8_0}
ELEM = {"f32": (np.float32, isa.DTYPE_CODE["fp32"]), "bf16": (ml_dtypes.bfloat16, isa.DTYPE_CODE["bf16"])}


def _mr(shape, elem, space):
    return f'memref<{"x".join(map(str, shape))}x{elem}, "{space}">'


def _blocks(fmt: str, rows: int, cols: int, seed: int) -> np.ndarray:
    """GGUF bytes with random codes and finite scales, some subnormal or negative."""
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 256, (rows * cols // 32, BLOCK_BYTES[fmt]), dtype=np.uint8)
    sb = isa.qscale_bytes(isa.QFORMAT_CODE[fmt])
    h = rng.choice(np.array([0x0001, 0x83FF, 0x3C00, 0x7BFF, 0x2E66, 0xB555], np.uint16),
                   (b.shape[0], sb // 2))
    b[:, :sb] = h.view(np.uint8).reshape(-1, sb)
    return b


def _tile_module(fmt: str, blocks: str, out: tuple[int, int], qshape, sshape, elem: str) -> str:
    """Load both planes, expand them one 32-element block row (blocks=col) or the whole tile
    (blocks=row) per tile.dequant, store the result."""
    code = "i8" if fmt == "q8_0" else "ui8"
    Q, S, O = _mr(qshape, code, "dram"), _mr(sshape, "f16", "dram"), _mr(out, elem, "dram")
    QL, SL, OL = _mr(qshape, code, "spad"), _mr(sshape, "f16", "spad"), _mr(out, elem, "spad")
    rows, cols = out
    consts = {0}
    ops = []
    if blocks == "col":
        crow = qshape[0] // (rows // 32)
        for g in range(rows // 32):
            consts |= {32 * g, crow * g, g}
            ops.append(f"tile.dequant %o[%c{32 * g}, %c0], %ql[%c{crow * g}, %c0], %sl[%c{g}, %c0] "
                       f'{{rows = 32 : i64, cols = {cols} : i64, format = "{fmt}", blocks = "col"}} '
                       f": {OL}, {QL}, {SL}")
    else:
        ops.append(f"tile.dequant %o[%c0, %c0], %ql[%c0, %c0], %sl[%c0, %c0] "
                   f'{{rows = {rows} : i64, cols = {cols} : i64, format = "{fmt}", blocks = "row"}} '
                   f": {OL}, {QL}, {SL}")
    cdefs = "\n".join(f"  %c{c} = arith.constant {c} : index" for c in sorted(consts))
    body = "\n  ".join(ops)
    return f"""builtin.module attributes {{tile.target = "edge"}} {{
func.func @main(%q: {Q}, %s: {S}, %y: {O} {{tile.output}}) {{
{cdefs}
  %ql = tile.alloc : {QL}
  %sl = tile.alloc : {SL}
  %o = tile.alloc : {OL}
  tile.dma %q[%c0, %c0], %ql[%c0, %c0] {{shape = array<i64: {qshape[0]}, {qshape[1]}>}} : {Q}, {QL}
  tile.dma %s[%c0, %c0], %sl[%c0, %c0] {{shape = array<i64: {sshape[0]}, {sshape[1]}>}} : {S}, {SL}
  {body}
  tile.dma %o[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: {rows}, {cols}>}} : {OL}, {O}
  func.return
}}
}}
"""


def _simulated(codes: np.ndarray, scales: np.ndarray, fmt: str, blocks: str,
               out: tuple[int, int], elem: str) -> np.ndarray:
    """The same tile through one vec.dequant on the simulator."""
    npdt, dt = ELEM[elem]
    esz = np.dtype(npdt).itemsize
    dram = np.zeros(0x3000 + out[0] * out[1] * esz, np.uint8)
    dram[:codes.nbytes] = codes.view(np.uint8).reshape(-1)
    dram[0x2000:0x2000 + scales.nbytes] = scales.reshape(-1)
    b = Builder()
    b.dma_load(dram=0, local=0, n0=codes.nbytes, n1=1, n2=1)
    b.dma_load(dram=0x2000, local=0x2000, n0=scales.nbytes, n1=1, n2=1, signal=1)
    b.vec_dequant(dst=0x3000, q=0, s=0x2000, rows=out[0], cols=out[1], dstride=out[1] * esz,
                  qstride=codes.shape[1], sstride=scales.shape[1], dt=dt,
                  fmt=isa.QFORMAT_CODE[fmt], blocks=isa.QAXIS_CODE[blocks], wait=1, signal=2)
    b.dma_store(dram=0x3000, local=0x3000, n0=out[0] * out[1] * esz, n1=1, n2=1, wait=2)
    b.halt()
    Simulator("edge").run(b.program(), dram)
    return dram[0x3000:].view(npdt).reshape(out)


@pytest.mark.parametrize(("fmt", "blocks", "elem"), [("q4_1", "col", "bf16"), ("q4_0", "col", "f32"),
                                                     ("q8_0", "row", "f32"), ("q4_1", "row", "f32")])
def test_tile_dequant_matches_simulator_and_gguf(fmt, blocks, elem):
    n, k = 16, 96  # a GGUF matrix of n rows of k (the reduction dimension)
    raw = _blocks(fmt, n, k, seed=len(fmt) + len(blocks))
    codes, scales = split_blocks(raw, fmt, n, k, blocks)
    out = (k, n) if blocks == "col" else (n, k)
    module = parse_ir(CTX, _tile_module(fmt, blocks, out, codes.shape,
                                        (scales.shape[0], scales.shape[1] // 2), elem), "t.mlir")
    verify_module(module)
    (y,) = run_tile_module(module, [codes, scales.view(np.float16)])
    sim = _simulated(codes, scales, fmt, blocks, out, elem)
    assert y.dtype == sim.dtype and y.tobytes() == sim.tobytes()
    ref = dequantize(raw.reshape(n, -1), QTYPE[fmt]).astype(ELEM[elem][0])
    got = y.T if blocks == "col" else y  # tobytes: the logical (C-order) elements
    assert got.tobytes() == ref.tobytes()
