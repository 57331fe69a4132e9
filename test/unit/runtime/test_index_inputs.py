"""Integer inputs that select rows of a table (token ids) or of a paged KV pool (write slots):
the compiled gathers and cache writes use them as they are, so the runtime checks them against
the table's or pool's size, which the layout carries (`DramRegion.index_bound`): an index past
it is one RunError naming the input, the index and its position (a token id past the table used
to read other DRAM bytes and return a wrong result, a slot past the pool to overwrite the bytes
after it), and a negative token id counts from the end as in the reference interpreter (it used
to fault) when nothing but gathers reads the input; else it is refused. A paged attention's
context lengths and the blocks each sequence uses are checked against the block table and the
pool, as the reference interpreter does (a length past the table ran and returned a result, a
block past the pool read other bytes)."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.dialects.ir_io import make_context, parse_ir
from infer.passes.testing import run_entry
from infer.runtime.boundary import BoundaryError, gather_indices, paged_metadata
from infer.runtime.executable import RunError
from infer.target.layout import DramRegion

CTX = make_context()
V, W = 40, 32

EMBED = """
func.func @main(%ids: tensor<2x12xi64> {graph.name = "ids"}) -> (tensor<2x12x32xf32> {graph.name = "y"}) {
  %tab = graph.constant dense<TABLE> : tensor<40x32xf32>
  %e = graph.gather %tab, %ids {axis = 0 : i64} : (tensor<40x32xf32>, tensor<2x12xi64>) -> tensor<2x12x32xf32>
  %r = graph.relu %e : (tensor<2x12x32xf32>) -> tensor<2x12x32xf32>
  func.return %r : tensor<2x12x32xf32>
}
"""

# the ids are also read as values (their f32 cast is a second result): a wrapped negative index
# would change that result, so negative ids are refused rather than wrapped
EMBED_AND_VALUES = """
func.func @main(%ids: tensor<2x12xi64> {graph.name = "ids"}) -> (tensor<2x12x32xf32> {graph.name = "y"}, tensor<2x12xf32> {graph.name = "v"}) {
  %tab = graph.constant dense<TABLE> : tensor<40x32xf32>
  %e = graph.gather %tab, %ids {axis = 0 : i64} : (tensor<40x32xf32>, tensor<2x12xi64>) -> tensor<2x12x32xf32>
  %v = graph.cast %ids : (tensor<2x12xi64>) -> tensor<2x12xf32>
  func.return %e, %v : tensor<2x12x32xf32>, tensor<2x12xf32>
}
"""


# the ids select rows of two tables of different sizes: checked against the smaller, and a
# negative id would mean a different row of each, so negative ids are refused
TWO_TABLES = """
func.func @main(%ids: tensor<2x12xi64> {graph.name = "ids"}) -> (tensor<2x12x32xf32> {graph.name = "y"}, tensor<2x12x32xf32> {graph.name = "z"}) {
  %tab = graph.constant dense<TABLE> : tensor<40x32xf32>
  %small = graph.constant dense<0.5> : tensor<30x32xf32>
  %e = graph.gather %tab, %ids {axis = 0 : i64} : (tensor<40x32xf32>, tensor<2x12xi64>) -> tensor<2x12x32xf32>
  %f = graph.gather %small, %ids {axis = 0 : i64} : (tensor<30x32xf32>, tensor<2x12xi64>) -> tensor<2x12x32xf32>
  func.return %e, %f : tensor<2x12x32xf32>, tensor<2x12x32xf32>
}
"""


def _module(text: str):
    table = np.random.default_rng(3).standard_normal((V, W)).astype(np.float32)
    rows = ", ".join("[" + ", ".join(f"{v:.6e}" for v in r) + "]" for r in table)
    return parse_ir(CTX, text.replace("TABLE", "[" + rows + "]"), "embed.mlir")


def _ids(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, V, (2, 12)).astype(np.int64)


@pytest.fixture(scope="module")
def embed():
    return infer.compile(_module(EMBED), target="edge", precision="fp32")


def test_the_layout_carries_the_table_size(embed):
    (ids,) = embed.layout.inputs
    assert (ids.name, ids.index_bound, ids.index_wraps) == ("ids", V, True)
    mixed = infer.compile(_module(EMBED_AND_VALUES), target="edge", precision="fp32")
    assert (mixed.layout.inputs[0].index_bound, mixed.layout.inputs[0].index_wraps) == (V, False)
    two = infer.compile(_module(TWO_TABLES), target="edge", precision="fp32")
    assert (two.layout.inputs[0].index_bound, two.layout.inputs[0].index_wraps) == (30, False)
    ids = _ids() % 30
    want = run_entry(_module(TWO_TABLES), [ids])
    for got, expected in zip(two.run([ids]), want, strict=True):
        np.testing.assert_array_equal(got, expected)
    ids[0, 0] = 30
    with pytest.raises(RunError, match=r"index 30 at \[0, 0\] is outside \[0, 30\): it selects rows of a table of 30"):
        two.run([ids])


def test_negative_ids_count_from_the_end_as_in_the_reference(embed, tmp_path):
    ids = _ids()
    ids[0, 3], ids[1, 0], ids[1, 11] = -1, -V, -7
    want = run_entry(_module(EMBED), [ids])[0]
    (got,) = embed.run([ids])
    np.testing.assert_array_equal(got, want)
    # and so after a save and load (the bound is part of the artifact's layout)
    embed.save(tmp_path / "e.npu")
    (again,) = infer.load(tmp_path / "e.npu").run([ids])
    np.testing.assert_array_equal(again, want)


@pytest.mark.parametrize("bad, where", [(V, (0, 5)), (V + 7, (1, 2)), (-V - 1, (1, 9)), (2**40, (0, 0))])
def test_an_id_past_the_table_is_one_error(embed, bad, where):
    ids = _ids()
    ids[where] = bad
    with pytest.raises(RunError) as e:
        embed.run([ids])
    assert str(e.value) == (f"input 'ids': index {bad} at {list(where)} is outside [-{V}, {V}) (negative ones "
                            f"count from the end): it selects rows of a table of {V}")


def test_ids_read_as_values_too_are_not_wrapped():
    exe = infer.compile(_module(EMBED_AND_VALUES), target="edge", precision="fp32")
    ids = _ids()
    y, v = exe.run([ids])
    want_y, want_v = run_entry(_module(EMBED_AND_VALUES), [ids])
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(v, want_v)
    ids[1, 4] = -1
    with pytest.raises(RunError, match=r"input 'ids': index -1 at \[1, 4\] is outside \[0, 40\): it selects rows"):
        exe.run([ids])


def test_gather_indices_wraps_checks_and_keeps_the_dtype():
    a = np.array([[0, -1, 5], [-6, 2, 3]], np.int32)
    got = gather_indices("x", a, 6, True)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [[0, 5, 5], [0, 2, 3]])
    assert gather_indices("x", a[:, :0], 6, False).size == 0
    with pytest.raises(BoundaryError, match=r"index -1 at \[0, 1\] is outside \[0, 6\)"):
        gather_indices("x", a, 6, False)
    with pytest.raises(BoundaryError, match=r"index 6 at \[1, 0\] is outside \[-6, 6\)"):
        gather_indices("x", np.array([[0, 1, 2], [6, 7, -7]]), 6, True)


KV_WRITE = """
func.func @main(%k0: tensor<64x32xf32> {graph.name = "k"}, %rows: tensor<2x32xf32> {graph.name = "rows"}, %slots: tensor<2xi32> {graph.name = "slots"}) -> (tensor<64x32xf32> {graph.name = "k_out"}) {
  %k1 = graph.kv_cache_write %k0, %rows, %slots : (tensor<64x32xf32>, tensor<2x32xf32>, tensor<2xi32>) -> tensor<64x32xf32>
  func.return %k1 : tensor<64x32xf32>
}
"""


def test_kv_cache_write_slots_stay_in_the_pool():
    exe = infer.compile(_module(KV_WRITE), target="edge", precision="fp32")
    assert [(r.name, r.index_bound, r.index_wraps) for r in exe.layout.inputs] == [
        ("k", 0, False), ("rows", 0, False), ("slots", 64, False)]
    pool = np.zeros((64, 32), np.float32)
    rows = np.random.default_rng(1).standard_normal((2, 32)).astype(np.float32)
    slots = np.array([3, 63], np.int32)
    (got,) = exe.run([pool, rows, slots])
    np.testing.assert_array_equal(got, run_entry(_module(KV_WRITE), [pool, rows, slots])[0])
    # 64 wrote the row past the pool; a negative slot is an error in the reference too
    for bad, at in ((64, 1), (-1, 0)):
        slots = np.array([3, 63], np.int32)
        slots[at] = bad
        with pytest.raises(RunError, match=rf"input 'slots': index {bad} at \[{at}\] is outside \[0, 64\)"):
            exe.run([pool, rows, slots])


PAGED = """
func.func @main(%q: tensor<2x4x1x8xf32> {graph.name = "q"}, %kc: tensor<64x16xf32> {graph.name = "k"}, %vc: tensor<64x16xf32> {graph.name = "v"}, %bt: tensor<2x4xi32> {graph.name = "block_tables"}, %n: tensor<2xi32> {graph.name = "context_lens"}) -> (tensor<2x4x1x8xf32> {graph.name = "o"}) {
  %o = graph.paged_attention %q, %kc, %vc, %bt, %n {block_size = 16 : i64} : (tensor<2x4x1x8xf32>, tensor<64x16xf32>, tensor<64x16xf32>, tensor<2x4xi32>, tensor<2xi32>) -> tensor<2x4x1x8xf32>
  func.return %o : tensor<2x4x1x8xf32>
}
"""


def test_paged_attention_lengths_and_used_blocks_are_checked():
    exe = infer.compile(_module(PAGED), target="edge", precision="fp32")
    regions = {r.name: r for r in exe.layout.inputs}
    assert regions["context_lens"].length_bound == 4 * 16  # a table row: 4 blocks of 16 tokens
    assert regions["block_tables"].block_table == (4, 16, 4)  # 64 pool rows / 16; lengths: argument 4
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 1, 8)).astype(np.float32)
    k, v = rng.standard_normal((2, 64, 16)).astype(np.float32)
    tables = np.array([[2, 0, 99, -5], [1, 3, 0, 0]], np.int32)  # entries past a sequence's length: unread
    lens = np.array([20, 40], np.int32)
    (got,) = exe.run([q, k, v, tables, lens])
    (want,) = run_entry(_module(PAGED), [q, k, v, tables, lens])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    for t, n, message in (
            (tables, [65, 3], "input 'context_lens': length 65 of sequence 0 is outside 0 .. 64"),
            (tables, [20, -1], "input 'context_lens': length -1 of sequence 1 is outside 0 .. 64"),
            ([[2, 4, 0, 0], [1, 3, 0, 0]], lens, "input 'block_tables': sequence 0 uses block 4, outside the pool's 0 .. 3"),
            ([[2, 0, 0, 0], [1, -1, 0, 0]], lens, "input 'block_tables': sequence 1 uses block -1, outside the pool's 0 .. 3")):
        with pytest.raises(RunError) as e:
            exe.run([q, k, v, np.array(t, np.int32), np.array(n, np.int32)])
        assert str(e.value).startswith(message)


def test_paged_metadata_reads_only_the_blocks_a_length_uses():
    lens = DramRegion("n", 0, (3,), "i32", index=1, length_bound=32)
    tables = DramRegion("t", 0, (3, 2), "i32", index=0, block_table=(5, 16, 1))
    table = np.array([[4, -9], [0, 4], [7, 7]], np.int32)
    paged_metadata([(tables, "t", table), (lens, "n", np.array([16, 32, 0], np.int32))])
    with pytest.raises(BoundaryError, match="sequence 0 uses block -9"):
        paged_metadata([(tables, "t", table), (lens, "n", np.array([17, 32, 0], np.int32))])
    with pytest.raises(BoundaryError, match="length 33 of sequence 1 is outside 0 .. 32"):
        paged_metadata([(tables, "t", table), (lens, "n", np.array([16, 33, 0], np.int32))])
