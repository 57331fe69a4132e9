"""tile.gather_rows in the tile interpreter: i32 and i64 (low 32 bits) indices, a
column origin, local and DRAM destinations, out-of-range indices."""

from __future__ import annotations

import numpy as np
import pytest

from infer.dialects.graph_interpreter import InterpreterError
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.tile_interpreter import run_tile_module

CTX = make_context()

TEXT = """
builtin.module attributes {tile.target = "edge"} {
  func.func @main(%table: memref<20x16xf32, "dram">, %ids: memref<6xIDX, "dram">, %out: memref<6x16xf32, "dram"> {tile.output}, %out2: memref<4x8xf32, "dram"> {tile.output}) {
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c8 = arith.constant 8 : index
    tile.gather_rows %table[%c0], %ids[%c0], %out[%c0, %c0] {rows = 6 : i64, cols = 16 : i64} : memref<20x16xf32, "dram">, memref<6xIDX, "dram">, memref<6x16xf32, "dram">
    %s = tile.alloc : memref<4x8xf32, "spad">
    tile.gather_rows %table[%c8], %ids[%c2], %s[%c0, %c0] {rows = 4 : i64, cols = 8 : i64} : memref<20x16xf32, "dram">, memref<6xIDX, "dram">, memref<4x8xf32, "spad">
    tile.dma %s[%c0, %c0], %out2[%c0, %c0] {shape = array<i64: 4, 8>} : memref<4x8xf32, "spad">, memref<4x8xf32, "dram">
    func.return
  }
}
"""


def run(idx_type: str, ids: np.ndarray):
    m = parse_ir(CTX, TEXT.replace("IDX", idx_type), "t.mlir")
    verify_module(m)
    table = np.arange(20 * 16, dtype=np.float32).reshape(20, 16)
    return table, run_tile_module(m, [table, ids])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_gather_rows(dtype):
    ids = np.array([3, 0, 19, 7, 7, 1], dtype)
    table, (out, out2) = run("i32" if dtype == np.int32 else "i64", ids)
    np.testing.assert_array_equal(out, table[ids])
    np.testing.assert_array_equal(out2, table[ids[2:6], 8:16])


def test_i64_reads_low_32_bits():
    ids = np.array([3 + (5 << 32), 0, 1, 2, 4, 5], np.int64)  # high word ignored
    table, (out, _) = run("i64", ids)
    assert out[0, 0] == table[3, 0]


def test_out_of_range_and_negative_indices_are_errors():
    with pytest.raises(InterpreterError, match=r"index 20 \(#2\) is outside the table's 20 rows"):
        run("i32", np.array([0, 1, 20, 0, 0, 0], np.int32))
    with pytest.raises(InterpreterError, match=r"index -1 .*no wrap-around"):
        run("i32", np.array([-1, 1, 2, 0, 0, 0], np.int32))
