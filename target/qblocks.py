"""GGUF block-quantized matrices in the layout `vec.dequant` reads (docs/isa.md,
"Block-quantized weights").

llama.cpp stores a quantized matrix of `rows x cols` (cols = the reduction dimension, a
multiple of 32) as `rows * cols / 32` blocks in row order, each block its fp16 scale d (q4_1:
then its fp16 minimum m) followed by its codes (q4: 16 bytes, element j in the low nibble of
byte j and element j + 16 in the high nibble; q8_0: 32 int8). The NPU keeps the same bits but
in two planes, so that a DMA moves whole bursts of codes and a tile's scales are one small
strided read:

- `split_blocks(raw, fmt, rows, cols, "row")`: the codes plane is `rows x (cols/2)` bytes
  (q8_0: `rows x cols`), each row the concatenation of its blocks' codes; the scales plane is
  `rows x (cols/32)` entries (fp16 d, or the pair d, m). `vec.dequant ... blocks=row`
  expands any tile of it into the matrix itself (rows x cols).
- `split_blocks(raw, fmt, rows, cols, "col")`: the transposed matrix, `cols x rows`, which is
  the k x n weight tile `mx.loadw` takes for `x @ W^T`. Codes plane `(cols/2) x rows` bytes
  (q8_0: `cols x rows`): packed row 16g + j, column n holds byte j of block (n, g); scales
  plane `(cols/32) x rows` entries. `vec.dequant ... blocks=col` expands it.

Both are byte permutations of the GGUF data (no bit is added or dropped: q4_1 stays 5 bits
per weight, q4_0 4.5, q8_0 8.5). Pure numpy: the compiler packs weights with it and the tests
check the simulator against `gguf.quants` through it.
"""

from __future__ import annotations

import numpy as np

from infer.target import isa

#: bytes of one GGUF block by format: scale (and min) entry + codes
BLOCK_BYTES = {name: isa.qscale_bytes(code) + isa.QBLOCK * isa.qformat_bits(code) // 8
               for code, name in isa.QFORMATS.items() if not name.startswith("reserved")}


def split_blocks(raw: np.ndarray, fmt: str, rows: int, cols: int,
                 blocks: str = "col") -> tuple[np.ndarray, np.ndarray]:
    """(codes plane, scales plane) of a GGUF `rows x cols` matrix in format `fmt` (raw: its
    bytes, `rows * cols / 32 * BLOCK_BYTES[fmt]` of them, any shape), laid out for
    `vec.dequant blocks=<blocks>`. The codes plane is uint8 (int8 for q8_0); the scales
    plane uint8 bytes, `2 or 4 * entries` per row."""
    if fmt not in BLOCK_BYTES:
        raise ValueError(f"unknown block format {fmt!r} (supported: {', '.join(BLOCK_BYTES)})")
    if blocks not in isa.QAXIS_CODE:
        raise ValueError(f"blocks must be 'col' or 'row', got {blocks!r}")
    if cols % isa.QBLOCK:
        raise ValueError(f"{cols} columns are not a whole number of {isa.QBLOCK}-element blocks")
    code = isa.QFORMAT_CODE[fmt]
    nb, sbytes = cols // isa.QBLOCK, isa.qscale_bytes(code)
    data = np.ascontiguousarray(raw, np.uint8).reshape(-1)
    if data.size != rows * nb * BLOCK_BYTES[fmt]:
        raise ValueError(f"{data.size} bytes is not a {rows}x{cols} {fmt} matrix "
                         f"({rows * nb * BLOCK_BYTES[fmt]} bytes)")
    b = data.reshape(rows, nb, BLOCK_BYTES[fmt])
    scales, codes = b[..., :sbytes], b[..., sbytes:]  # (rows, nb, sbytes), (rows, nb, cb)
    if blocks == "row":
        codes_plane = codes.reshape(rows, -1)
        scales_plane = scales.reshape(rows, nb * sbytes)
    else:
        # element (k, n) of the transposed matrix: codes byte j of block (n, k // 32) goes to
        # row (k // 32) * cb + j of column n
        codes_plane = codes.transpose(1, 2, 0).reshape(-1, rows)
        scales_plane = scales.transpose(1, 0, 2).reshape(nb, rows * sbytes)
    codes_plane = np.ascontiguousarray(codes_plane)
    if isa.qformat_bits(code) == 8:
        codes_plane = codes_plane.view(np.int8)
    return codes_plane, np.ascontiguousarray(scales_plane)
