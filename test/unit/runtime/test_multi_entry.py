"""Several functions of one module in one artifact: one weights section, one address per
weight and per shared argument in every entry point, each entry checked against the reference
interpreter; a DeviceSession keeps a shared buffer resident across calls; `infer compile
--entry` and its errors."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.dialects import graph as g
from infer.dialects.weights import WeightStore, attach_weights
from infer.frontend import Model
from infer.frontend.builder import GraphBuilder
from infer.frontend.hf_import import _combine
from infer.runtime import Artifact, DeviceSession, Executable
from infer.runtime.session import SessionError
from infer.tools.cli import main


def _two_functions() -> Model:
    """@wide(x[4,16], state[8,16]) -> (relu(x W^T + b) [4,32], sum of state's rows, 2 * state) and
    @narrow(x[2,16], state[8,16]) -> (x W^T + b [2,32], the same sum): both read W and b,
    both take `state`."""
    rng = np.random.default_rng(0)
    store = WeightStore()
    w = rng.standard_normal((32, 16)).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    keys = store.add("w", w), store.add("bias", bias)
    funcs = []
    for name, rows, relu in (("wide", 4, True), ("narrow", 2, False)):
        b = GraphBuilder(store)
        x = b.input("x", (rows, 16), np.float32)
        state = b.input("state", (8, 16), np.float32)
        y = b.op(g.LinearOp, [x, b.file_weight(keys[0], w.shape, np.float32),
                                b.file_weight(keys[1], bias.shape, np.float32)])
        if relu:
            y = b.op(g.ReluOp, [y])
        total = b.op(g.ReduceSumOp, [state], axes=g.i64_array([0]), keepdims=g.bool_attr(True))  # [1, 16]
        if relu:  # @wide also returns a new state (doubled)
            doubled = b.op(g.AddOp, [state, state])
            funcs.append((name, b.finish([y, total, doubled], ["y", "total", "state"])))
        else:
            funcs.append((name, b.finish([y, total], ["y", "total"])))
    module = _combine(funcs, store)
    attach_weights(module, store)
    return Model(module)


@pytest.fixture(scope="module")
def model():
    return _two_functions()


@pytest.fixture(scope="module")
def exe(model):
    return infer.compile(model, target="edge")


def _inputs(rows, seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((rows, 16)).astype(np.float32),
            "state": rng.standard_normal((8, 16)).astype(np.float32)}


def test_every_function_is_an_entry_point_sharing_the_weights(exe, model, tmp_path):
    art = Artifact.load(exe.save(tmp_path / "two.npu"))
    assert art.entry_names() == ["wide", "narrow"]
    assert sorted(art.weight_arrays()) == sorted({w.name for e in art.entry_names()
                                                  for w in art.for_entry(e).parsed_layout().weights})
    layouts = [art.for_entry(e).parsed_layout() for e in art.entry_names()]
    assert len({lay.weights_offset for lay in layouts}) == 1
    assert len({lay.arena_offset for lay in layouts}) == 1
    assert {w.name: w.offset for w in layouts[0].weights} == {w.name: w.offset for w in layouts[1].weights}
    state = [next(a for a in lay.inputs if a.name == "state") for lay in layouts]
    assert state[0].offset == state[1].offset  # a shared argument: one address
    for entry, rows in (("wide", 4), ("narrow", 2)):
        inputs = _inputs(rows, rows)
        got = Executable(art.for_entry(entry)).run(inputs)
        ref = model.run(inputs, entry=entry)
        for a, b in zip(got, ref, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * np.abs(b).max())


def test_a_session_keeps_a_resident_buffer_across_entries(exe, model):
    sess = DeviceSession(exe.artifact, resident=["state"])
    assert sess.resident == ["state"]
    state = _inputs(2, 5)["state"]
    sess.write("state", state)
    for entry, rows in (("narrow", 2), ("wide", 4), ("narrow", 2)):
        x = _inputs(rows, rows)["x"]
        out = sess.run(entry, {"x": x})
        ref = model.run({"x": x, "state": state}, entry=entry)
        assert sorted(out) == ["total", "y"]  # the new state stays on the device
        np.testing.assert_allclose(out["total"], ref[1], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["y"], ref[0], rtol=1e-4, atol=1e-4 * np.abs(ref[0]).max())
        assert sess.last_report.cycles > 0
        if entry == "wide":
            state = ref[2]
    np.testing.assert_array_equal(sess.read("state"), state)
    assert sess.copied_bytes == state.nbytes  # no alias: @wide's new state was moved within DRAM once
    with pytest.raises(SessionError, match="entry 'wide' takes inputs x; unexpected state"):
        sess.run("wide", {"x": np.zeros((4, 16), np.float32), "state": state})
    with pytest.raises(SessionError, match="no entry point 'decode'"):
        sess.run("decode", {})


def test_single_entry_and_the_cli(model, tmp_path, capsys):
    mlir = model.save(tmp_path / "two.mlir")
    out = tmp_path / "narrow.npu"
    assert main(["compile", str(mlir), "--entry", "narrow", "-o", str(out), "-q"]) == 0
    art = Artifact.load(out)
    assert art.entry_names() == ["narrow"] and art.entries == []
    assert main(["compile", str(mlir), "--entry", "main", "-o", str(out), "-q"]) == 1
    assert "the module has no function @main (its functions: @wide, @narrow)" in capsys.readouterr().err
    both = tmp_path / "both.npu"
    assert main(["compile", str(mlir), "-o", str(both), "-q"]) == 0
    assert main(["run", str(both), "--entry", "narrow", "--check", "-q"]) == 0
    assert "total" in capsys.readouterr().out
    assert main(["run", str(both), "--entry", "decode", "-q"]) == 1
    assert "the artifact has no entry point 'decode' (entry points: wide, narrow)" in capsys.readouterr().err


def test_compile_a_gguf_decoder_from_the_cli(tmp_path, capsys):
    """A GGUF file compiles as a paged decoder with the cache and batch options; --entry picks
    one of its functions; the options are refused for a model that is not a decoder."""
    from helpers.gguf_models import write_llama_gguf

    gguf = write_llama_gguf(tmp_path / "tiny.gguf", "Q8_0")
    out = tmp_path / "decode.npu"
    assert main(["compile", str(gguf), "-t", "server", "--entry", "decode", "--chunk", "8", "--max-context", "32",
                 "--block-size", "8", "--num-blocks", "9", "--batch", "2", "-o", str(out), "-q"]) == 0
    art = Artifact.load(out)
    assert art.entry_names() == ["decode"]
    assert art.meta["paged_kv"] == {"block_size": 8, "num_blocks": 9, "max_len": 32, "chunk": 8, "batch": 2}
    shapes = {s.name: s.shape for s in art.inputs}
    assert shapes["input_ids"] == (2, 1) and shapes["block_tables"] == (2, 4) and shapes["k_0"] == (72, 32)
    assert art.parsed_layout().aliases == {f"{kv}_{i}": f"{kv}_{i}" for i in range(2) for kv in "kv"}
    capsys.readouterr()
    assert main(["compile", str(gguf), "--entry", "prefill", "-o", str(out), "-q"]) == 1
    assert "the module has no function @prefill (its functions: @prefill_chunk, @decode)" in capsys.readouterr().err
    mlir = _two_functions().save(tmp_path / "two.mlir")
    assert main(["compile", str(mlir), "--block-size", "8", "-o", str(out), "-q"]) == 1
    assert "--block-size applies to decoders" in capsys.readouterr().err
