"""Ring chains (tile-to-npu, `rotation.DegradeLevel.SHARED_RING_CHAINS`, docs/codegen.md): a
kernel short of semaphores first lets a double buffer that is filled by another one's last
access (the accumulator's epilogue writing the store tile) share that buffer's free semaphores,
before it gives up double buffering on its outer loops. A 1x1 conv on an edge config with 12
semaphores: full overlap needs more, the chains fit; the program is race-free, bit-identical to
the tile interpreter and to the full-overlap program of the stock config, and faster than the
program with less overlap it compiled to before."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from infer.passes.testing import apply_pass
from infer.passes.tile_to_npu import kernels, rotation
from infer.target import isa
from helpers.graph_programs import parse_with_weights, pointwise_conv
from helpers.tile_programs import npu_matches_tile

C, H, O = 64, 16, 32


def conv_module():
    return parse_with_weights(*pointwise_conv(C, H, O), "conv.mlir")


def compile_and_run(config: str, monkeypatch):
    """(outputs, cycles, the kernel's degrade level, its rotation plan's chains)."""
    levels: list[int] = []
    chains: list[dict] = []
    degrade = kernels.KernelByKernel._degrade

    def recording_degrade(self, failed):
        back_to = degrade(self, failed)
        levels.append(max(self.codegen.degrade.values()))
        return back_to

    plan_ring_groups = rotation._plan_ring_groups

    def recording_groups(plan, chain_loops=frozenset()):
        plan_ring_groups(plan, chain_loops)
        if chain_loops:
            chains.append(rotation.ring_chains(plan, chain_loops))

    monkeypatch.setattr(kernels.KernelByKernel, "_degrade", recording_degrade)
    monkeypatch.setattr(rotation, "_plan_ring_groups", recording_groups)
    module = conv_module()
    apply_pass(f'lower-to-tile{{target="{config}" precision=bf16}}', module)
    x = np.random.default_rng(1).standard_normal((1, C, H, H)).astype(np.float32)
    (y,), counters = npu_matches_tile(module, [x], config)
    return y, counters.cycles, (levels[-1] if levels else 0), chains


@pytest.fixture
def few_semaphores(tmp_path) -> str:
    config = tmp_path / "edge12.toml"
    config.write_text(re.sub(r"(?m)^semaphores = \d+", "semaphores = 12",
                             (Path(isa.__file__).parent / "edge.toml").read_text()))
    return str(config)


def test_chained_rings_fit_where_full_overlap_does_not(few_semaphores, monkeypatch):
    y, cycles, level, chains = compile_and_run(few_semaphores, monkeypatch)
    assert level == rotation.DegradeLevel.SHARED_RING_CHAINS
    # the accumulator -> store tile chain (the epilogue reads one and writes the other)
    spaces = {(str(b.buffer.type), str(a.buffer.type)) for found in chains for b, a in found.items()}
    assert any('"acc"' in a and '"spad"' in b for b, a in spaces), spaces
    # the stock config keeps full overlap: the same operations, so the same bits
    y_full, cycles_full, level_full, _ = compile_and_run(str(Path(isa.__file__).parent / "edge.toml"),
                                                         monkeypatch)
    assert level_full == rotation.DegradeLevel.FULL_OVERLAP
    assert y.tobytes() == y_full.tobytes()
    # without the chains the kernel gives up more overlap (on 12 semaphores: the software
    # pipeline too): slower
    monkeypatch.setattr(rotation, "ring_chains", lambda plan, loops: {})
    y_outer, cycles_outer, level_outer, _ = compile_and_run(few_semaphores, monkeypatch)
    assert level_outer > rotation.DegradeLevel.SHARED_RING_CHAINS
    assert y_outer.tobytes() == y.tobytes()
    assert cycles < cycles_outer, (cycles, cycles_outer, cycles_full)
