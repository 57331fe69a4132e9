"""Block-quantized weight formats (llama.cpp / GGML) and their exact dequantization.

A block-quantized weight is stored packed: each row of the logical weight (its
last dimension) is cut into blocks of `block_size` values, and each block is
`block_bytes` bytes holding an fp16 scale `d` (and, for q4_1, an fp16 minimum
`m`) followed by the quantized values. The packed tensor is a `ui8` tensor of
shape `[..., K / block_size * block_bytes]` for a logical `[..., K]` weight;
rows are independent, so any row subset or row permutation of the packed tensor
is the same subset or permutation of the logical one.

| format | block | bytes | layout (little-endian)                     | value j of a block              |
|--------|-------|-------|--------------------------------------------|---------------------------------|
| q8_0   | 32    | 34    | d:f16, q[32]:i8                            | d * q[j]                        |
| q4_0   | 32    | 18    | d:f16, qs[16]:u8 (two 4-bit values a byte) | d * (nibble(j) - 8)             |
| q4_1   | 32    | 20    | d:f16, m:f16, qs[16]:u8                    | d * nibble(j) + m               |

nibble(j) = qs[j] & 0xF for j < 16 and qs[j - 16] >> 4 for j >= 16 (the low
nibbles hold the first half of the block, the high nibbles the second half).

Arithmetic is float32, as llama.cpp's `dequantize_row_*` and gguf-py's
`gguf.quants.dequantize` do it: d and m are widened from fp16 exactly, d * q is
exact in float32 (an 11-bit significand times a value of at most 8 bits), and
q4_1's `+ m` rounds once (round to nearest even). So the result is the same bit
pattern whichever order or fused multiply-add a device uses. Non-finite scales
propagate as IEEE arithmetic says (inf * 0 is NaN).

`dequantize_blocks(packed, format)` is the numpy reference the graph
interpreter runs for `graph.dequantize_blocks`; its results are bit-identical
to `gguf.quants.dequantize` (tested on random blocks, subnormal and non-finite
scales, and the extreme nibbles).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BlockFormat:
    """The byte layout of one block format (what a lowering needs to unpack it)."""

    name: str
    block_size: int  # logical values per block
    block_bytes: int  # bytes per block
    bits: int  # bits per quantized value (4: two values a byte)
    has_min: bool  # an fp16 minimum after the scale (q4_1): value = d * q + m
    zero_point: int  # subtracted from an unsigned quantized value (q4_0: 8); q8_0 values are signed bytes

    @property
    def quants_offset(self) -> int:
        """Byte offset of the quantized values inside a block."""
        return 4 if self.has_min else 2

    def packed_last_dim(self, logical: int) -> int:
        """Bytes of one packed row holding `logical` values (a multiple of block_size)."""
        return logical // self.block_size * self.block_bytes

    def logical_last_dim(self, packed: int) -> int:
        """Values of one logical row stored in `packed` bytes (a multiple of block_bytes)."""
        return packed // self.block_bytes * self.block_size


BLOCK_FORMATS: dict[str, BlockFormat] = {
    f.name: f
    for f in (
        BlockFormat("q8_0", block_size=32, block_bytes=34, bits=8, has_min=False, zero_point=0),
        BlockFormat("q4_0", block_size=32, block_bytes=18, bits=4, has_min=False, zero_point=8),
        BlockFormat("q4_1", block_size=32, block_bytes=20, bits=4, has_min=True, zero_point=0),
    )
}


def block_format(name: str) -> BlockFormat:
    """The format named `name`; a ValueError lists the supported ones."""
    fmt = BLOCK_FORMATS.get(name)
    if fmt is None:
        raise ValueError(f"unknown block format {name!r} (supported: {', '.join(BLOCK_FORMATS)})")
    return fmt


def _f16_field(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The fp16 at byte `offset` of every block, widened exactly to float32: [n, 1]."""
    return np.ascontiguousarray(blocks[:, offset : offset + 2]).view("<f2").astype(np.float32)


def dequantize_blocks(packed: np.ndarray, format: str) -> np.ndarray:
    """float32 values of a packed weight: [..., P] uint8 -> [..., P / block_bytes * block_size]."""
    fmt = block_format(format)
    packed = np.asarray(packed)
    if packed.dtype != np.uint8:
        raise ValueError(f"a packed {fmt.name} weight is uint8, got {packed.dtype}")
    if packed.ndim < 1 or packed.shape[-1] % fmt.block_bytes:
        raise ValueError(
            f"a packed {fmt.name} row is a multiple of {fmt.block_bytes} bytes, got shape {packed.shape}"
        )
    out_shape = (*packed.shape[:-1], fmt.logical_last_dim(packed.shape[-1]))
    blocks = np.ascontiguousarray(packed).reshape(-1, fmt.block_bytes)
    d = _f16_field(blocks, 0)
    quants = blocks[:, fmt.quants_offset :]
    if fmt.bits == 8:
        q = quants.view(np.int8).astype(np.float32)
    else:
        half = fmt.block_size // 2
        q = np.empty((blocks.shape[0], fmt.block_size), np.float32)
        q[:, :half] = quants & np.uint8(0x0F)
        q[:, half:] = quants >> np.uint8(4)
        if fmt.zero_point:
            q -= np.float32(fmt.zero_point)  # exact: small integers
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite scales: IEEE results
        q *= d  # exact in float32
        if fmt.has_min:
            q += _f16_field(blocks, 2)  # the one rounding
    return q.reshape(out_shape)


__all__ = ["BLOCK_FORMATS", "BlockFormat", "block_format", "dequantize_blocks"]
