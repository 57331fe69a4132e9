"""Paged KV decode on the NPU: a decode step and a prefill chunk of one layer (K/V writes in
place, paged attention whose block loop's trip count is read at run time) through
graph-to-tile, tile-to-npu and the simulator (races checked: conftest.py). The simulator is
bit-identical to the tile interpreter and matches the graph interpreter; one compiled program's
cycles follow the sequence's actual context length, not the pool's capacity."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from infer.dialects.ir_io import verify_module
from infer.dialects.npu import ProgramOp
from infer.dialects.npu_attrs import layout_from_module
from infer.dialects.weights import weights_of
from infer.passes.graph_to_tile.paged_kv import kv_heads_per_pass, superblock_blocks
from infer.passes.testing import apply_pass, run_entry
from infer.target.hw import load_config
from infer.target.sim import Simulator

from tile.test_paged_kv_lowering import step_inputs, step_module

TOL = {"fp32": 1e-4, "bf16": 5e-2}
DECODE = ((3, 4, 2, 1, 8, 4, 12, 3), [1, 6, 12])  # (B, Hq, Hkv, Sq, D, BS, NB, MB), lengths
CHUNK = ((2, 4, 2, 5, 8, 4, 12, 4), [5, 14])  # a chunk at start 0 and one at start 9


def compile_step(geometry, target: str, precision: str = "fp32"):
    module = step_module(geometry)
    apply_pass(f"graph-prepare-tiling,graph-to-tile{{target={target} precision={precision}}},"
               "tile-plan-memory", module)
    tile_module = module.clone()
    apply_pass("tile-to-npu", module)
    verify_module(module)
    program = next(o for o in module.walk() if isinstance(o, ProgramOp)).to_program()
    return tile_module, module, program, layout_from_module(module)


def simulate(module, program, layout, target, inputs):
    dram = layout.dram_image(inputs, weights_of(module))
    result = Simulator(target).run(program, dram)
    return layout.read_outputs(dram), result.cycles


@pytest.mark.parametrize("case", [DECODE, CHUNK], ids=["decode", "chunk"])
@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_paged_step_on_simulator(case, target, precision):
    geometry, lens = case
    xs = step_inputs(*geometry, lens)
    reference = run_entry(step_module(geometry), xs)
    tile_module, module, program, layout = compile_step(geometry, target, precision)
    tile_outputs = run_entry(tile_module, xs)
    outputs, _ = simulate(module, program, layout, target, xs)
    # the block loop's trip count is a register (read by `lds`), not an immediate
    assert any(i.name == "loop" and i.as_dict().get("count_base") for i in program.instrs)
    # several sequences or tokens: slots, block numbers and counts all come from the scratchpad
    names = {i.name for i in program.instrs}
    assert "lds" in names and "ld" not in names
    for sim, tile, graph in zip(outputs, tile_outputs, reference, strict=True):
        assert sim.tobytes() == tile.tobytes()
        np.testing.assert_allclose(sim, graph, rtol=TOL[precision], atol=TOL[precision])


# a prefill chunk whose output rows (Hq * Sq * Dv f32 = 80 KiB) overflow edge's 64 KiB accumulator:
# the kernel serves one KV head per pass over the blocks (SmolLM2's chunk of 32 did this on edge)
WIDE_CHUNK = ((1, 4, 2, 32, 160, 16, 6, 3), [40])


def test_chunk_wider_than_the_accumulator_takes_passes():
    geometry, lens = WIDE_CHUNK
    _, Hq, Hkv, Sq, _, _, _, _ = geometry
    hw = load_config("edge")
    assert Hq * Sq * 160 * 4 > hw.memory.accumulator_bytes
    assert kv_heads_per_pass(SimpleNamespace(hw=hw), Hkv, Hq // Hkv * Sq, 160) == 1
    assert kv_heads_per_pass(SimpleNamespace(hw=load_config("server")), Hkv, Hq // Hkv * Sq, 160) == Hkv
    xs = step_inputs(*geometry, lens)
    reference = run_entry(step_module(geometry), xs)
    tile_module, module, program, layout = compile_step(geometry, "edge")
    tile_outputs = run_entry(tile_module, xs)
    outputs, _ = simulate(module, program, layout, "edge", xs)
    for sim, tile, graph in zip(outputs, tile_outputs, reference, strict=True):
        assert sim.tobytes() == tile.tobytes()
        np.testing.assert_allclose(sim, graph, rtol=TOL["fp32"], atol=TOL["fp32"])


def test_cache_outputs_share_the_input_regions():
    _, _, _, layout = compile_step(DECODE[0], "edge")
    assert layout.aliases == {"output1": "arg6", "output2": "arg7"}
    by_name = {a.name: a for a in layout.args}
    assert by_name["output1"].offset == by_name["arg6"].offset
    assert by_name["output2"].offset == by_name["arg7"].offset


@pytest.mark.parametrize("target", ["edge", "server"])
def test_cycles_follow_the_context_length(target):
    """One program for a pool of 64 blocks of 16 tokens: the cost grows with the steps the
    context takes (a step gathers and computes G blocks: 1 on edge, whose 16-row array takes one
    block per P @ V; 8 on server), by about the same amount per step, and every step is right.
    The block numbers and trip counts are read from the scratchpad (`lds`, after one DMA of the
    table per kernel). On server a step's G gathers are in flight together, so a block costs a
    fraction of a DRAM latency (one block per step cost most of one: its gather's latency
    overlapped only the other buffer's short math). The loop takes the steps in pairs (its two
    buffers), an odd step's share costing less than an even one's, so the per-step costs are
    compared over intervals of an even number of steps."""
    geometry = (1, 4, 2, 1, 16, 16, 64, 64)
    hw = load_config(target)
    G = superblock_blocks(SimpleNamespace(hw=hw), 16, 64, 4, 16)
    assert G == (1 if target == "edge" else 8)
    _, module, program, layout = compile_step(geometry, target)
    names = [i.name for i in program.instrs]
    # 4 gathers of K and V (super-block 0, the pair loop's two, the last) and 2 trip counts; one
    # block per gather: K and V share the block number; G blocks: a hardware loop of G - 1 rows
    # and the peeled last row, per pool
    assert names.count("lds") == (6 if G == 1 else 4 * 2 * 2 + 2)
    assert names.count("ld") == 2  # the K and V writes' slots
    cycles = {}
    steps = (2, 4, 8)
    for s in steps:
        n = s * G * 16
        xs = step_inputs(*geometry, [n], seed=n)
        outputs, cycles[s] = simulate(module, program, layout, target, xs)
        np.testing.assert_allclose(outputs[0], run_entry(step_module(geometry), xs)[0],
                                   rtol=1e-4, atol=1e-4)
    per_step = [(cycles[4] - cycles[2]) / 2, (cycles[8] - cycles[4]) / 4]
    assert min(per_step) > 0 and max(per_step) < 1.25 * min(per_step), cycles
    if target == "server":
        assert max(per_step) / G < hw.dram.latency_cycles / 4, cycles


def test_unused_block_table_entries_are_never_read():
    """A sequence's block-table entries after its last block may hold anything (here -1, or a
    block past the pool): a step of G > 1 blocks gathers its padding from the table clamped to
    the sequence's last block (masked by the length), never from those entries."""
    geometry, lens = (3, 4, 2, 1, 8, 4, 30, 8), [1, 6, 12]  # DECODE with 8 entries per table: G = 2
    B, Hq, _, _, D, BS, NB, MB = geometry
    assert superblock_blocks(SimpleNamespace(hw=load_config("server")), BS, MB, Hq, D) > 1
    xs = step_inputs(*geometry, lens)
    tables = xs[4].copy()
    for b, n in enumerate(lens):
        tables[b, -(-n // BS):] = -1 if b % 2 else NB + 1000
    xs[4] = tables
    reference = run_entry(step_module(geometry), xs)
    tile_module, module, program, layout = compile_step(geometry, "server")
    outputs, _ = simulate(module, program, layout, "server", xs)
    for sim, tile, graph in zip(outputs, run_entry(tile_module, xs), reference, strict=True):
        assert sim.tobytes() == tile.tobytes()
        np.testing.assert_allclose(sim, graph, rtol=TOL["fp32"], atol=TOL["fp32"])
