"""graph-to-tile's opt-in autotuning (passes/graph_to_tile/autotune.py): on a tiny causal attention
kernel, the tiling it keeps simulates in no more cycles than the cost model's pick (both whole
programs run in the simulator's timing mode), it is the fastest candidate it measured, and the
second compile reads the cached result instead of simulating."""

from __future__ import annotations

import json

import pytest

import infer
from infer.passes.graph_to_tile import autotune
from infer.target.sim import Simulator
from infer.tools.driver import DriverError

Q, KV = "tensor<1x2x64x16xf32>", "tensor<1x1x64x16xf32>"
ATTENTION = f"""func.func @main(%q: {Q}, %k: {KV}, %v: {KV}) -> {Q} {{
  %a = graph.attention %q, %k, %v {{causal = true}} : ({Q}, {KV}, {KV}) -> {Q}
  func.return %a : {Q}
}}"""


def timing_cycles(exe) -> int:
    return Simulator("edge").run(exe.program, None, mode="timing").cycles


def test_autotune_keeps_the_fastest_and_caches(tmp_path, monkeypatch):
    path = tmp_path / "attention.mlir"
    path.write_text(ATTENTION)
    cache = tmp_path / "cache"
    cost_model = infer.compile(path, target="edge", precision="bf16")
    simulated = []
    measure = autotune.simulated_cycles
    monkeypatch.setattr(autotune, "simulated_cycles",
                        lambda *a, **k: simulated.append(a[2]) or measure(*a, **k))
    tuned = infer.compile(path, target="edge", precision="bf16", autotune=3, autotune_cache=str(cache))
    assert len(simulated) >= 3  # the recording run and the other top candidates
    (record_file,) = cache.glob("*.json")
    record = json.loads(record_file.read_text())
    measured = {tiles: cycles for _, tiles, cycles in record["measured"]}
    assert len(measured) == 3
    assert timing_cycles(tuned) == min(measured.values()) <= timing_cycles(cost_model)
    assert measured[record["picks"]["0"]] == min(measured.values())
    simulated.clear()
    again = infer.compile(path, target="edge", precision="bf16", autotune=3, autotune_cache=str(cache))
    assert simulated == []  # the cached picks, nothing simulated
    assert again.program == tuned.program


def test_cli_autotune_flag(tmp_path, capsys):
    from infer.tools.cli import main

    path = tmp_path / "attention.mlir"
    path.write_text(ATTENTION)
    cache = tmp_path / "cache"
    assert main(["compile", str(path), "--precision", "bf16", "--autotune=2", "--autotune-cache", str(cache),
                 "-o", str(tmp_path / "a.npu"), "-q"]) == 0
    (record_file,) = cache.glob("*.json")
    record = json.loads(record_file.read_text())
    assert record["top"] == 2 and len(record["measured"]) == 2
    with pytest.raises(SystemExit) as e:  # a count must be >= 1 (0 is "off": no flag)
        main(["compile", str(path), "--autotune=0"])
    assert e.value.code == 2 and "--autotune" in capsys.readouterr().err


def test_autotune_rejects_a_negative_count(tmp_path):
    path = tmp_path / "attention.mlir"
    path.write_text(ATTENTION)
    with pytest.raises(DriverError, match="autotune must be 0"):
        infer.compile(path, target="edge", precision="bf16", autotune=-1)


def test_the_cost_models_whole_program_is_kept_where_the_autotuned_one_is_slower(tmp_path, monkeypatch):
    """Autotuning measures each kernel alone; the driver runs the whole autotuned program and
    the whole program with the cost model's tilings in timing mode and keeps the faster
    (ResNet-50 on server: 380,984 autotuned cycles against 356,386)."""
    from infer.tools import driver

    path = tmp_path / "attention.mlir"
    path.write_text(ATTENTION)
    cache = str(tmp_path / "cache")
    cost_model = infer.compile(path, target="edge", precision="bf16")
    monkeypatch.setattr(driver, "whole_program_cycles", lambda program, cfg: None)  # (no check)
    tuned = infer.compile(path, target="edge", precision="bf16", autotune=3, autotune_cache=cache)
    assert tuned.program != cost_model.program  # (autotuning picks other attention tiles here)
    measure = Simulator("edge").run

    def cycles(slower: bool):
        calls = []

        def whole(program, cfg):  # the autotuned program is measured first
            calls.append(program)
            real = measure(program, None, mode="timing").cycles
            return real + 10**6 if slower and len(calls) == 1 else real
        return whole, calls

    for slower in (True, False):
        whole, calls = cycles(slower)
        monkeypatch.setattr(driver, "whole_program_cycles", whole)
        said = []
        exe = infer.compile(path, target="edge", precision="bf16", autotune=3, autotune_cache=cache,
                            progress=said.append)
        assert len(calls) == 2 and calls[0] == tuned.program and calls[1] == cost_model.program
        (line,) = [m for m in said if m.startswith("autotuned: ")]
        if slower:
            assert exe.program == cost_model.program
            assert line.endswith("with the cost model's tilings: keeping the cost model's")
        else:
            assert exe.program == tuned.program
            assert line.endswith("with the cost model's tilings")
