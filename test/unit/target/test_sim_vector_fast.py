"""sim_core.vector_compute_fast (the fast and functional engines' vector ops) against
vector_compute (the reference engine's definition), bit for bit, on values that stress the
shortcuts: NaNs with any payload and sign, infinities, signed zeros, subnormals, every bf16
pattern; strided, broadcast and overlapping operands."""

from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import pytest

from infer.target.asm import parse_instr
from infer.target.sim_core import NP_DTYPES, VectorSpec, vector_compute, vector_compute_fast

DT = {"int8": 0, "int32": 1, "fp32": 2, "bf16": 3, "fp8e4m3": 4}


def _spec(op: str, dt: str, at: str, bt: str | None = None, bmode: str | None = None,
          imm: str | None = None) -> VectorSpec:
    text = f"vec.{op} dst=0, a=0, rows=1, cols=1, dt={dt}, at={at}"
    if bt is not None:
        text += f", bt={bt}"
    if bmode is not None:
        text += f", bmode={bmode}"
    if imm is not None:
        text += f", imm={imm}"
    return VectorSpec.of(parse_instr(text))


def _nasty_f32(rng: np.random.Generator, n: int) -> np.ndarray:
    special = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, 0x7FA12345, 0x7F800000,
                        0xFF800000, 0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x3F800000,
                        0x7F7FFFFF, 0xFF7FFFFF], np.uint32)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    pick = rng.integers(0, 4, n) == 0
    bits[pick] = rng.choice(special, int(pick.sum()))
    return bits.view(np.float32)


def _memory(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    if kind == "fp32":
        return _nasty_f32(rng, n)
    if kind == "bf16":
        return rng.integers(0, 2**16, n, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16)
    return rng.integers(-128, 128, n).astype(NP_DTYPES[DT[kind]])


CASES = [
    ("copy", "fp32", "fp32", None, None, None),
    ("copy", "fp32", "bf16", None, None, None),
    ("copy", "bf16", "bf16", None, None, None),
    ("copy", "bf16", "fp32", None, None, None),
    ("neg", "fp32", "fp32", None, None, None),
    ("abs", "fp32", "fp32", None, None, None),
    ("add", "fp32", "fp32", "fp32", "tile", None),
    ("sub", "fp32", "fp32", "bf16", "tile", None),
    ("sub", "bf16", "fp32", "bf16", "tile", None),
    ("mul", "fp32", "fp32", "fp32", "row", None),
    ("add", "fp32", "bf16", "fp32", "col", None),
    ("mul", "fp32", "fp32", "fp32", "imm", "-0.0"),
    ("add", "fp32", "fp32", "fp32", "imm", "inf"),
    ("mul", "fp32", "int8", "int8", "imm", "0.0"),
    ("mul", "bf16", "int8", "int8", "imm", "0.0"),
    ("mul", "int32", "int32", "int8", "imm", "0.0"),
    ("mul", "fp8e4m3", "int8", "int8", "imm", "0.0"),
    ("max", "fp32", "fp32", "fp32", "tile", None),
    ("relu", "fp32", "fp32", None, None, None),
]


@pytest.mark.parametrize("op,dt,at,bt,bmode,imm", CASES)
def test_fast_vector_ops_are_the_reference_bits(op, dt, at, bt, bmode, imm):
    rng = np.random.default_rng(zlib.crc32(repr((op, dt, at, bt, bmode, imm)).encode()))
    spec = _spec(op, dt, at, bt, bmode, imm)
    lanes, rows, cols = 3, 5, 37
    for layout in ("contiguous", "strided", "broadcast", "in place"):
        a_mem = _memory(rng, at, lanes * rows * cols * 2)
        a = a_mem.reshape(lanes, rows, 2 * cols)[:, :, :cols]
        if layout == "contiguous":
            a = np.ascontiguousarray(a)
        elif layout == "broadcast":
            a = np.broadcast_to(a[:1], a.shape)
        b = None
        if bmode in ("tile", "row", "col"):
            shape = {"tile": (lanes, rows, cols), "row": (lanes, 1, cols),
                     "col": (lanes, rows, 1)}[bmode]
            b = _memory(rng, bt, int(np.prod(shape))).reshape(shape)
        dtype = NP_DTYPES[DT[dt]]
        outs = []
        for fn in (vector_compute, vector_compute_fast):
            if layout == "in place" and a.dtype == dtype:
                mem = a_mem.copy()
                aa = mem.reshape(lanes, rows, 2 * cols)[:, :, :cols]
                dst = aa  # the destination is operand a
            else:
                aa = a
                dst = np.zeros((lanes, rows, 2 * cols), dtype)[:, :, 1:cols + 1]
            with np.errstate(all="ignore"):  # inf and NaN are data
                fn(spec, aa, b, dst, DT[dt])
            outs.append(np.ascontiguousarray(dst).view(np.uint8).copy())
        assert np.array_equal(outs[0], outs[1]), (op, dt, at, layout)


def test_every_bf16_pattern_copies_as_the_reference():
    spec = _spec("copy", "bf16", "bf16")
    a = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16)
    outs = []
    for fn in (vector_compute, vector_compute_fast):
        dst = np.zeros(2**16, ml_dtypes.bfloat16).reshape(256, 256)
        fn(spec, a.reshape(256, 256), None, dst, 3)
        outs.append(dst.view(np.uint16).copy())
    assert np.array_equal(outs[0], outs[1])
