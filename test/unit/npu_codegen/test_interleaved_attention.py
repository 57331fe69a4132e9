"""Attention with several heads interleaved stage by stage (attention.py, "Interleaved heads") and
attention's K transpose in multi-head blocks (transpose.permute_copy, server only). Checked on the
server config, where the cost model picks them: the program runs bit-identically to the tile
interpreter with the simulator's race checker on, the outputs match the graph interpreter, and
the interleaved kernel takes fewer cycles than the same tiling one head at a time (the override
`TQxTKVx1`). Also on server: P's row sums computed by the matrix unit through V's column of ones
(attention.py, "Row sums on the matrix unit")."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.npu import ProgramOp
from infer.dialects.npu_attrs import layout_from_module
from infer.dialects.weights import WeightStore, attach_weights, weights_of
from infer.passes.testing import apply_pass, run_entry
from infer.target.sim import Simulator

CTX = make_context()
TARGET = "server"


def attention_ir(Hq: int, Hkv: int, S: int, D: int, causal: bool) -> str:
    q, kv = f"tensor<1x{Hq}x{S}x{D}xf32>", f"tensor<1x{Hkv}x{S}x{D}xf32>"
    return f"""func.func @main(%q: {q}, %k: {kv}, %v: {kv}) -> {q} {{
  %a = graph.attention %q, %k, %v {{causal = {str(causal).lower()}}} : ({q}, {kv}, {kv}) -> {q}
  func.return %a : {q}
}}"""


def compile_and_run(shape: tuple[int, int, int, int], causal: bool, capsys, overrides: str = "",
                    precision: str = "bf16"):
    """-> (cycles, the npu output, the graph interpreter's output, the debug-tiling log)."""
    Hq, Hkv, S, D = shape
    module = parse_ir(CTX, attention_ir(Hq, Hkv, S, D, causal), "att.mlir")
    verify_module(module)
    attach_weights(module, WeightStore())
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal((1, Hq, S, D)).astype(np.float32),
              rng.standard_normal((1, Hkv, S, D)).astype(np.float32),
              rng.standard_normal((1, Hkv, S, D)).astype(np.float32)]
    graph_ref = run_entry(module, inputs)[0]
    extra = f' overrides="{overrides}"' if overrides else ""
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={TARGET} precision={precision} debug-tiling=true{extra}}},"
               f"tile-plan-memory{{target={TARGET}}}", module)
    log = capsys.readouterr().err
    tile_ref = run_entry(module, inputs)[0]
    apply_pass("tile-to-npu", module)
    verify_module(module)
    prog = next(o for o in module.walk() if isinstance(o, ProgramOp)).to_program()
    layout = layout_from_module(module)
    dram = layout.dram_image(inputs, weights_of(module))
    counters = Simulator(TARGET).run(prog, dram, check_races=True)
    y = layout.read_outputs(dram)[0]
    assert y.tobytes() == tile_ref.tobytes()  # bit-identical to the tile interpreter
    return counters.cycles, y, graph_ref, log


@pytest.mark.parametrize("shape,causal", [((4, 4, 128, 32), False),  # one query head per kv head (BERT)
                                          ((8, 2, 256, 64), True)],  # GQA 8/2: a group shares K and V
                         ids=["mha", "gqa_causal"])
def test_interleaved_heads_bit_identical_and_faster(shape, causal, capsys):
    cycles, y, graph_ref, log = compile_and_run(shape, causal, capsys)
    assert "heads interleaved" in log
    np.testing.assert_allclose(y, graph_ref, rtol=5e-2, atol=5e-2)
    tiles = next(line for line in log.splitlines() if "flash tiles" in line).split("TQxTKV = ")[1].split()[0]
    one_head, y1, _, log1 = compile_and_run(shape, causal, capsys, overrides=f"kernel0={tiles}x1")
    assert "heads interleaved" not in log1 and f"TQxTKV = {tiles}" in log1
    np.testing.assert_allclose(y1, graph_ref, rtol=5e-2, atol=5e-2)
    # (measured: mha 4,686 against 5,198 cycles, GQA 13,152 against 21,874; before key tiles
    # went through the weight path's transposer, whose saved K transpose was a larger share of
    # the one-head program, mha was 6,292 against 7,284)
    assert cycles < 0.95 * one_head, (cycles, one_head)


@pytest.mark.parametrize("causal", [False, True])
def test_resident_operands_load_once(capsys, monkeypatch, causal):
    """server, bf16, GQA 8/2 at 256 positions: Q, K and V fit on chip, so each is loaded by one
    DMA before the loops and every step copies its tiles from there (no DMA per step and head).
    Turned off (`RESIDENT_OPERANDS_SHARE` beyond the scratchpad), the steps load their tiles:
    the same bits, and with the causal mask more cycles. (Without it the two are within 0.5 %:
    11,009 resident against 10,955 loaded per step since free semaphores are reused longest idle
    first; the Llama prefill on server 307,939 against 315,925.)"""
    from infer.passes.graph_to_tile import attention

    def operand_loads(module) -> int:
        from infer.dialects import tile as t
        from infer.passes.tile_to_npu.common import root_buffer

        args = set(next(iter(op for op in module.walk() if op.name == "func.func")).body.block.args)
        return sum(1 for op in module.walk() if isinstance(op, t.DmaOp) and root_buffer(op.src) in args)

    captured = {}
    real = apply_pass

    def counting(pipeline, module):
        real(pipeline, module)
        if pipeline.startswith("graph-prepare-tiling"):
            captured["loads"] = operand_loads(module)

    monkeypatch.setattr(sys.modules[__name__], "apply_pass", counting)
    cycles, y, graph_ref, _ = compile_and_run((8, 2, 256, 64), causal, capsys)
    np.testing.assert_allclose(y, graph_ref, rtol=3e-2, atol=3e-2)
    assert captured["loads"] == 3, captured
    monkeypatch.setattr(attention, "RESIDENT_OPERANDS_SHARE", 1 << 40)
    cycles_off, y_off, _, _ = compile_and_run((8, 2, 256, 64), causal, capsys)
    assert captured["loads"] > 3, captured
    assert y.tobytes() == y_off.tobytes()
    if causal:
        assert cycles < cycles_off, (cycles, cycles_off)


def test_one_key_tile_needs_no_running_statistics(capsys, monkeypatch):
    """server, bf16, 4 heads at 128 positions, D = 32 (MiniLM's shape): the keys fit one score
    tile, so the kernel computes its softmax without the online softmax's running statistics (no
    fills of m, l and O, no rescaling by alpha; P.V writes O). The same bits as with them, fewer
    cycles."""
    from infer.dialects import tile as t
    from infer.passes.graph_to_tile import attention

    fills = {}
    real = apply_pass

    def counting(pipeline, module):
        real(pipeline, module)
        if pipeline.startswith("graph-prepare-tiling"):
            fills["count"] = sum(1 for op in module.walk() if isinstance(op, t.FillOp))

    monkeypatch.setattr(sys.modules[__name__], "apply_pass", counting)
    # both with P's row sums on the vector unit (on the matrix unit: test_row_sums_on_the_matrix_unit)
    monkeypatch.setattr(attention, "ROW_SUMS_ON_MATRIX", False)
    cycles, y, graph_ref, log = compile_and_run((4, 4, 128, 32), False, capsys)
    assert "TQxTKV = 128x128" in log, log
    assert fills["count"] == 0, fills
    np.testing.assert_allclose(y, graph_ref, rtol=5e-2, atol=5e-2)
    monkeypatch.setattr(attention, "ONE_KEY_TILE_SOFTMAX", False)
    cycles_online, y_online, _, _ = compile_and_run((4, 4, 128, 32), False, capsys)
    assert fills["count"] > 0, fills
    assert y.tobytes() == y_online.tobytes()
    assert cycles < cycles_online, (cycles, cycles_online)


def test_row_sums_on_the_matrix_unit(capsys, monkeypatch):
    """bf16, GQA 8/2, causal, 256 positions, D = 64 on server's 128-column array: the online
    softmax's V tile carries a column of ones, so P.[V | 1] writes P's row sums into O's last
    column and the kernel has no `rsum` (nor l's updates): bit for bit the tile interpreter with
    the race checker on (compile_and_run), close to the graph interpreter, and fewer cycles
    than the vector unit's row sums (the flag off). The same with one key tile (MiniLM's 4 heads
    of 128 x 32: no running statistics, P.[V | 1] writes O and l). Not in fp32 emulation, where
    it measured no gain."""
    from infer.dialects import tile as t
    from infer.passes.graph_to_tile import attention

    tile_ops = {}
    real = apply_pass

    def counting(pipeline, module):
        real(pipeline, module)
        if pipeline.startswith("graph-prepare-tiling"):
            vector = [op for op in module.walk() if isinstance(op, t.VectorOp)]
            tile_ops["rsum"] = sum(1 for op in vector if op.op.data == "rsum")
            tile_ops["widths"] = {op.n.value.data for op in module.walk() if isinstance(op, t.MatmulOp)}

    monkeypatch.setattr(sys.modules[__name__], "apply_pass", counting)

    def on_the_matrix_unit(shape: tuple[int, int, int, int], causal: bool) -> None:
        """P.[V | 1] (Dv + 1 columns, no rsum) with the flag, the vector unit's rsum without it."""
        widened = shape[3] + 1
        monkeypatch.setattr(attention, "ROW_SUMS_ON_MATRIX", True)
        cycles, y, graph_ref, _ = compile_and_run(shape, causal, capsys)
        assert tile_ops["rsum"] == 0 and widened in tile_ops["widths"], tile_ops
        np.testing.assert_allclose(y, graph_ref, rtol=5e-2, atol=5e-2)
        monkeypatch.setattr(attention, "ROW_SUMS_ON_MATRIX", False)
        cycles_vector, y_vector, _, _ = compile_and_run(shape, causal, capsys)
        assert tile_ops["rsum"] > 0 and widened not in tile_ops["widths"], tile_ops
        np.testing.assert_allclose(y_vector, graph_ref, rtol=5e-2, atol=5e-2)
        assert cycles < cycles_vector, (shape, cycles, cycles_vector)

    on_the_matrix_unit((8, 2, 256, 64), True)
    on_the_matrix_unit((4, 4, 128, 32), False)  # one key tile
    monkeypatch.setattr(attention, "ROW_SUMS_ON_MATRIX", True)
    compile_and_run((8, 2, 256, 64), True, capsys, precision="fp32")
    assert tile_ops["rsum"] > 0 and 65 not in tile_ops["widths"], tile_ops
