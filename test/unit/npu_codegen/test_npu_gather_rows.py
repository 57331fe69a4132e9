"""tile.gather_rows -> npu: `ld` the index (`lds` from the scratchpad), scale by the row
pitch, one row DMA from the register address (rows 0..n-2 in a hardware loop, the last
peeled); simulator bit-identical to the tile interpreter, hand-written tile IR and an
embedding lookup through graph-to-tile."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func

from infer.dialects.dtypes import element_type_name
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.npu import ProgramOp
from infer.dialects.weights import weights_of
from infer.dialects.npu_attrs import layout_from_module
from infer.passes.testing import apply_pass, run_entry
from infer.passes.tile_to_npu import LoweringError
from infer.target.hw import load_config
from infer.target.sim import Simulator

from helpers.tile_programs import lower, mr, run_both

CTX = make_context()


def gather_ir(V: int, W: int, N: int, TR: int, TC: int, ity: str, buffers: int, target: str = "edge",
              relu: bool = False) -> str:
    """y[N, W] = table[idx] in [TR, TC] tiles (gather into a local tile, optional relu on the
    vector unit, DMA store)."""
    T, I, Y = mr((V, W), "f32", "dram"), mr((N,), ity, "dram"), mr((N, W), "f32", "dram")
    L = mr((TR, TC), "f32", "spad")
    epi = ""
    src = "%buf"
    if relu:
        epi = (f'        tile.vector "relu" %o[%c0, %c0], %buf[%c0, %c0] {{rows = {TR} : i64, cols = {TC} : i64}} : {L}, {L}\n')
        src = "%o"
    oalloc = f"        %o = tile.alloc {{buffers = {buffers} : i64}} : {L}\n" if relu else ""
    return f"""builtin.module attributes {{tile.target = "{target}"}} {{
  func.func @main(%tab: {T} {{graph.name = "table"}}, %idx: {I} {{graph.name = "idx"}}, %y: {Y} {{graph.name = "y", tile.output}}) {{
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cN = arith.constant {N} : index
    %cTR = arith.constant {TR} : index
    %cW = arith.constant {W} : index
    %cTC = arith.constant {TC} : index
    scf.for %r = %c0 to %cN step %cTR {{
      scf.for %c = %c0 to %cW step %cTC {{
        %buf = tile.alloc {{buffers = {buffers} : i64}} : {L}
{oalloc}        tile.gather_rows %tab[%c], %idx[%r], %buf[%c0, %c0] {{rows = {TR} : i64, cols = {TC} : i64}} : {T}, {I}, {L}
{epi}        tile.dma {src}[%c0, %c0], %y[%r, %c] {{shape = array<i64: {TR}, {TC}>}} : {L}, {Y}
      }}
    }}
    func.return
  }}
}}
"""


def _inputs(V, W, N, ity, seed=0):
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((V, W)).astype(np.float32)
    idx = rng.integers(0, V, N)
    if ity == "i64":
        idx = idx.astype(np.int64)
        idx[::3] |= np.int64(7) << 40  # high words are ignored (the low 32 bits are read)
    else:
        idx = idx.astype(np.int32)
    return [table, idx]


@pytest.mark.parametrize("ity", ["i32", "i64"])
@pytest.mark.parametrize("buffers", [1, 2])
@pytest.mark.parametrize("relu", [False, True])
def test_gather_rows_bit_identical(ity, buffers, relu):
    V, W, N, TR, TC = 50, 48, 24, 8, 16
    table, idx = _inputs(V, W, N, ity)
    if ity == "i64":
        # the tile interpreter reads the low word too; keep the high bits to prove it
        assert (idx >> 32).any()
    prog, counters, (y,) = run_both(gather_ir(V, W, N, TR, TC, ity, buffers, relu=relu), [table, idx])
    low = (idx.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    ref = table[low]
    np.testing.assert_array_equal(y, np.maximum(ref, 0) if relu else ref)
    names = [i.name for i in prog.instrs]
    assert "ld" in names and "muli" in names


@pytest.mark.parametrize("rows", [1, 2, 3, 5])
def test_gather_rows_small_tiles(rows):
    V, W = 7, 8
    table, idx = _inputs(V, W, rows * 2, "i32", seed=rows)
    run_both(gather_ir(V, W, rows * 2, rows, W, "i32", 2), [table, idx])


def test_gather_rows_dram_destination_is_an_error():
    text = f"""builtin.module attributes {{tile.target = "edge"}} {{
  func.func @main(%tab: {mr((4, 8), "f32", "dram")}, %idx: {mr((2,), "i32", "dram")}, %y: {mr((2, 8), "f32", "dram")} {{tile.output}}) {{
    %c0 = arith.constant 0 : index
    tile.gather_rows %tab[%c0], %idx[%c0], %y[%c0, %c0] {{rows = 2 : i64, cols = 8 : i64}} : {mr((4, 8), "f32", "dram")}, {mr((2,), "i32", "dram")}, {mr((2, 8), "f32", "dram")}
    func.return
  }}
}}
"""
    with pytest.raises(LoweringError, match="DRAM destination"):
        lower(text)


EMBED = """
func.func @main(%ids: tensor<2x12xINDEX> {graph.name = "ids"}) -> (tensor<2x12x32xf32> {graph.name = "y"}) {
  %tab = graph.constant dense<TABLE> : tensor<40x32xf32>
  %e = graph.gather %tab, %ids {axis = 0 : i64} : (tensor<40x32xf32>, tensor<2x12xINDEX>) -> tensor<2x12x32xf32>
  %r = graph.relu %e : (tensor<2x12x32xf32>) -> tensor<2x12x32xf32>
  func.return %r : tensor<2x12x32xf32>
}
"""


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("ity", ["i32", "i64"])
def test_embedding_graph_to_simulator(target, ity):
    rng = np.random.default_rng(3)
    table = rng.standard_normal((40, 32)).astype(np.float32)
    vals = ", ".join("[" + ", ".join(f"{v:.6e}" for v in r) + "]" for r in table)
    text = EMBED.replace("INDEX", ity).replace("TABLE", "[" + vals + "]")
    module = parse_ir(CTX, text, "embed.mlir")
    verify_module(module)
    ids = rng.integers(0, 40, (2, 12)).astype(np.int64 if ity == "i64" else np.int32)
    graph_ref = run_entry(module, [ids])[0]
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target}}},tile-plan-memory", module)
    fn = next(o for o in module.walk() if isinstance(o, func.FuncOp))
    # graph-to-tile may narrow i64 inputs to i32 (the runtime converts them)
    ids = ids.astype(np.dtype(element_type_name(fn.function_type.inputs.data[0].get_element_type()).replace("i", "int")))
    tile_ref = run_entry(module, [ids])[0]
    apply_pass("tile-to-npu", module)
    verify_module(module)
    layout = layout_from_module(module)
    prog = next(o for o in module.walk() if isinstance(o, ProgramOp)).to_program()
    dram = layout.dram_image([ids], weights_of(module))
    Simulator(target).run(prog, dram)
    (y,) = layout.read_outputs(dram)
    assert y.tobytes() == tile_ref.tobytes()
    np.testing.assert_array_equal(y, graph_ref)


def test_gather_rows_with_indices_in_the_scratchpad_reads_them_with_lds():
    """Indices copied to the scratchpad by one DMA: each row's index is read with `lds` (a
    scratchpad latency, not a DRAM one), ordered after that DMA (races checked: conftest.py),
    and the rows are the tile interpreter's."""
    V, W, N = 40, 16, 12
    T, I, Y = mr((V, W), "f32", "dram"), mr((N,), "i32", "dram"), mr((N, W), "f32", "dram")
    I2, L2, L1, B = mr((1, N), "i32", "dram"), mr((1, N), "i32", "spad"), mr((N,), "i32", "spad"), mr((N, W), "f32", "spad")
    text = f"""builtin.module attributes {{tile.target = "server"}} {{
  func.func @main(%tab: {T} {{graph.name = "table"}}, %idx: {I} {{graph.name = "idx"}}, %y: {Y} {{graph.name = "y", tile.output}}) {{
    %c0 = arith.constant 0 : index
    %idx2 = tile.view %idx : {I} -> {I2}
    %local = tile.alloc {{buffers = 1 : i64}} : {L2}
    tile.dma %idx2[%c0, %c0], %local[%c0, %c0] {{shape = array<i64: 1, {N}>}} : {I2}, {L2}
    %ids = tile.view %local : {L2} -> {L1}
    %buf = tile.alloc {{buffers = 1 : i64}} : {B}
    tile.gather_rows %tab[%c0], %ids[%c0], %buf[%c0, %c0] {{rows = {N} : i64, cols = {W} : i64}} : {T}, {L1}, {B}
    tile.dma %buf[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: {N}, {W}>}} : {B}, {Y}
    func.return
  }}
}}
"""
    table, idx = _inputs(V, W, N, "i32", seed=3)
    prog, counters, (y,) = run_both(text, [table, idx], target="server")
    np.testing.assert_array_equal(y, table[idx])
    names = [i.name for i in prog.instrs]
    assert "ld" not in names and "lds" in names
    # N reads at the scratchpad's latency, none at DRAM's
    assert counters.stalls["scalar_load"] == N * load_config("server").scalar.local_load_cycles


def test_gather_rows_from_a_scratchpad_table_is_a_vector_copy_per_row():
    """A scratchpad table (loaded by one DMA): each row is one `vec.copy` whose source base is
    the scaled index register, no row DMA; the rows are the tile interpreter's (races checked:
    conftest.py)."""
    V, W, N = 40, 16, 12
    T, I, Y = mr((V, W), "f32", "dram"), mr((N,), "i32", "dram"), mr((N, W), "f32", "dram")
    LT, B = mr((V, W), "f32", "spad"), mr((N, W), "f32", "spad")
    text = f"""builtin.module attributes {{tile.target = "server"}} {{
  func.func @main(%tab: {T} {{graph.name = "table"}}, %idx: {I} {{graph.name = "idx"}}, %y: {Y} {{graph.name = "y", tile.output}}) {{
    %c0 = arith.constant 0 : index
    %local = tile.alloc : {LT}
    tile.dma %tab[%c0, %c0], %local[%c0, %c0] {{shape = array<i64: {V}, {W}>}} : {T}, {LT}
    %buf = tile.alloc : {B}
    tile.gather_rows %local[%c0], %idx[%c0], %buf[%c0, %c0] {{rows = {N} : i64, cols = {W} : i64}} : {LT}, {I}, {B}
    tile.dma %buf[%c0, %c0], %y[%c0, %c0] {{shape = array<i64: {N}, {W}>}} : {B}, {Y}
    func.return
  }}
}}
"""
    table, idx = _inputs(V, W, N, "i32", seed=4)
    prog, _, (y,) = run_both(text, [table, idx], target="server")
    np.testing.assert_array_equal(y, table[idx])
    names = [i.name for i in prog.instrs]
    assert names.count("dma.load") == 1 and "vec.copy" in names  # the table's load alone


def test_embedding_table_on_chip_is_chosen_where_it_pays(monkeypatch, capsys):
    """server, 512 rows of a 1024 x 64 table: the cost model puts the table in the scratchpad
    (row DMAs each hold a DMA channel for a DRAM latency); the same bits as the row DMAs
    (`LOCAL_TABLE_SHARE` beyond the scratchpad), fewer cycles."""
    from infer.passes.graph_to_tile import gather

    V, W, N = 1024, 64, 512
    ids_t, tab_t, out_t = f"tensor<1x{N}xi32>", f"tensor<{V}x{W}xf32>", f"tensor<1x{N}x{W}xf32>"
    text = f"""func.func @main(%ids: {ids_t}) -> {out_t} {{
  %t = graph.weight @table : {tab_t}
  %y = graph.gather %t, %ids {{axis = 0 : i64}} : ({tab_t}, {ids_t}) -> {out_t}
  func.return %y : {out_t}
}}"""
    from infer.dialects.weights import WeightStore, attach_weights

    rng = np.random.default_rng(5)
    table = rng.standard_normal((V, W)).astype(np.float32)
    ids = rng.integers(0, V, (1, N)).astype(np.int32)

    def run() -> tuple[np.ndarray, int, str]:
        module = parse_ir(CTX, text, "embed.mlir")
        store = WeightStore()
        store.set("table", table)
        attach_weights(module, store)
        apply_pass("graph-prepare-tiling,graph-to-tile{target=server debug-tiling=true},tile-plan-memory", module)
        log = capsys.readouterr().err
        apply_pass("tile-to-npu", module)
        layout = layout_from_module(module)
        prog = next(o for o in module.walk() if isinstance(o, ProgramOp)).to_program()
        dram = layout.dram_image([ids], weights_of(module))
        counters = Simulator("server").run(prog, dram, check_races=True)
        return layout.read_outputs(dram)[0], counters.cycles, log

    y, cycles, log = run()
    assert "the table in the scratchpad" in log, log
    np.testing.assert_array_equal(y[0], table[ids[0]])
    monkeypatch.setattr(gather, "LOCAL_TABLE_SHARE", 1 << 40)
    y_off, cycles_off, log_off = run()
    assert "the table in the scratchpad" not in log_off
    assert y.tobytes() == y_off.tobytes()
    assert cycles < cycles_off, (cycles, cycles_off)
