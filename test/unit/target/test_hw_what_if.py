"""`hw.unlimited`: the same program simulated again with one resource unlimited removes exactly
that resource's cycles (bench/bench_decode.py's "what bounds it" line), and a simulator reused
for another config is a new one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infer.target.asm import assemble
from infer.target.hw import WHAT_IF_RESOURCES, ConfigError, load_config, unlimited
from infer.target.sim import Simulator

SERVER = load_config("server")
DMA_BYTES = 65536

# each program is bound by one resource; `removed` is what unlimiting that resource saves
PROGRAMS = {
    "dram": (f"dma.load dram=0, local=0, n0={DMA_BYTES}, n1=1, n2=1\nhalt",
             # the transfer's cycles beyond one, and the latency beyond one cycle
             math.ceil(DMA_BYTES / SERVER.dram.bytes_per_cycle) - 1 + SERVER.dram.latency_cycles - 1),
    "weight_path": ("mx.loadw w=0, k=128, n=128, stride=256, dtype=bf16\nhalt",
                    128 * 128 * 2 // SERVER.matrix.weight_load_bytes_per_cycle - 1),
    "vector": ("vec.exp dst=0, a=0, rows=64, cols=512, dstride=2048, astride=2048, dt=fp32, at=fp32\nhalt",
               # 64 groups of lanes at exp's cost, down to one group; the latency down to one
               (64 * 512 // SERVER.vector.lanes - 1) * SERVER.vector.cost["exp"] + SERVER.vector.latency - 1),
    "drain": ("mx.loadw w=0, k=128, n=128, stride=256, dtype=bf16\n"
              "mx.matmul act=0x10000, acc=0x2000000, m=16, astride=256, cstride=512, dtype=bf16, accum=0\nhalt",
              SERVER.matrix.fill_drain_cycles - 1),
}


def cycles(cfg, text: str) -> int:
    return Simulator(cfg).run(assemble(text), np.zeros(1 << 20, np.uint8), mode="reference").cycles


@pytest.mark.parametrize("bound", list(PROGRAMS))
def test_unlimiting_a_resource_removes_its_cycles_only(bound):
    text, removed = PROGRAMS[bound]
    base = cycles(SERVER, text)
    assert removed > 0
    for resource in WHAT_IF_RESOURCES:
        if bound == "drain" and resource == "weight_path":
            continue  # (its matmul waits for a weight load)
        expected = base - removed if resource == bound else base
        assert cycles(unlimited(SERVER, [resource]), text) == expected, resource


def test_unlimited_changes_only_its_fields():
    cfg = unlimited(SERVER, ["dram", "drain"])
    assert cfg.dram.latency_cycles == 1 and cfg.dram.bytes_per_cycle > SERVER.dram.bytes_per_cycle
    assert cfg.matrix.fill_drain_cycles == 1
    assert cfg.dram.burst_bytes == SERVER.dram.burst_bytes
    assert (cfg.vector, cfg.memory, cfg.dma, cfg.scalar) == (SERVER.vector, SERVER.memory, SERVER.dma, SERVER.scalar)
    assert cfg.matrix.weight_load_bytes_per_cycle == SERVER.matrix.weight_load_bytes_per_cycle
    assert SERVER.dram.latency_cycles == 500  # the base is not changed
    assert unlimited(SERVER, []) is SERVER


def test_unknown_resource_names_the_known_ones():
    with pytest.raises(ConfigError, match="unknown what-if resource 'cache' .*dram, weight_path, vector, drain"):
        unlimited(SERVER, ["cache"])


def test_a_reused_simulator_follows_the_config():
    sim = Simulator(SERVER)
    assert Simulator.reuse(sim, SERVER) is sim
    assert Simulator.reuse(sim, load_config("server")) is sim  # an equal config
    other = Simulator.reuse(sim, unlimited(SERVER, ["dram"]))
    assert other is not sim and other.cfg.dram.latency_cycles == 1
