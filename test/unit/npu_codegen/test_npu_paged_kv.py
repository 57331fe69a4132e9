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
from infer.passes.graph_to_tile.paged_kv import kv_heads_per_pass
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
    """One program for a pool of 16 blocks of 16 tokens: the cost grows with the blocks the
    context uses (context 16 / 128 / 256: 1 / 8 / 16 blocks), by about the same amount per
    block, and every step is right. The block numbers and trip counts are read from the
    scratchpad (`lds`, after one DMA of the table per kernel): on server a block costs less
    than a DRAM latency (its gather's DMA latency overlaps the other buffer's math; with a
    front-end `ld` per block it cost that `ld`'s DRAM latency on top)."""
    geometry = (1, 4, 2, 1, 16, 16, 16, 16)
    _, module, program, layout = compile_step(geometry, target)
    names = [i.name for i in program.instrs]
    assert names.count("lds") == 6  # 4 gathers' block numbers (block 0, the pair loop's two, the last), 2 trip counts
    assert names.count("ld") == 2  # the K and V writes' slots
    cycles = {}
    for n in (16, 128, 256):
        xs = step_inputs(*geometry, [n], seed=n)
        outputs, cycles[n] = simulate(module, program, layout, target, xs)
        np.testing.assert_allclose(outputs[0], run_entry(step_module(geometry), xs)[0],
                                   rtol=1e-4, atol=1e-4)
    per_block = [(cycles[128] - cycles[16]) / 7, (cycles[256] - cycles[128]) / 8]
    assert min(per_block) > 0 and max(per_block) < 1.25 * min(per_block), cycles
    if target == "server":
        assert max(per_block) < load_config(target).dram.latency_cycles, cycles
