"""A paged decode step of a GGUF Llama with fewer kernels per layer (issue 11): every RMSNorm is
the prologue of the packed products that read it (graph-fuse-norm-prologue), the products on
the same activations (q/k/v, gate/up) are one kernel (graph_to_tile/packed_siblings.py), a
product whose activations are an earlier product's result follows it in the same nest
(`packed_siblings.chained`: o -> gate/up -> down -> q/k/v), and the rotary and the KV-cache
append run on the projections' tiles (product_consumers.py).

The decode step of a tiny 2-layer Q4_1 Llama (helpers.gguf_models, batch 2, different
context lengths) compiled for both configs: the simulator's outputs (logits and the pools it
wrote in place, races checked) equal the tile interpreter's bit for bit and the graph
interpreter's within the e2e criteria (fp32: 1e-3 of the range; bf16: cosine >= 0.999), and
the program has the expected kernels where the products are resident: per layer paged
attention and one kernel of products.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects.func import FuncOp

import infer
from helpers.tile_programs import tile_module
from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.dialects.graph_interpreter import run_module
from infer.dialects.ir_io import make_context
from infer.dialects.tile_interpreter import run_tile_module
from infer.passes.pipelines import GraphPrepareTilingPass

pytest.importorskip("gguf")

BS, NB, MAX_LEN = 4, 12, 16


def decode_model(path, batch: int = 2):
    """The paged import's @decode (batch 2) alone, as @main."""
    from helpers.gguf_models import write_llama_gguf

    model = infer.import_model(str(write_llama_gguf(path, "Q4_1")), batch=batch, kv_cache="paged", chunk=4,
                               max_len=MAX_LEN, block_size=BS, num_blocks=NB)
    for fn in [o for o in model.module.body.block.ops if isinstance(o, FuncOp)]:
        if fn.sym_name.data == "decode":
            fn.sym_name = type(fn.sym_name)("main")
        else:
            fn.detach()
    return model


def decode_inputs(model, lens):
    rng = np.random.default_rng(3)
    fn = next(o for o in model.module.body.block.ops if isinstance(o, FuncOp))
    max_blocks = fn.function_type.inputs.data[3].get_shape()[1]
    B = len(lens)
    tables = rng.permutation(NB)[: B * max_blocks].reshape(B, max_blocks).astype(np.int32)
    lens = np.array(lens, np.int32)
    slots = np.array([tables[b, (n - 1) // BS] * BS + (n - 1) % BS for b, n in enumerate(lens)], np.int32)
    ids = rng.integers(0, 256, (B, 1)).astype(np.int32)
    pools = [rng.standard_normal(tuple(ty.get_shape())).astype(np.float32) * 0.5
             for ty in fn.function_type.inputs.data[5:]]
    return [ids, (lens - 1).reshape(B, 1), slots, tables, lens, *pools]


def test_batch_one_step_takes_the_attention_output_on_chip(tmp_path):
    """At batch 1 the paged attention's output accumulator holds the whole output, and the o
    projection after it copies it into its staging tile (LoweringContext.keep_on_chip) instead
    of loading it back from DRAM: the simulator still equals the tile interpreter bit for bit."""
    model = decode_model(tmp_path / "tiny.gguf", batch=1)
    xs = decode_inputs(model, [6])
    tiles, weights = tile_module(model.module, "server", "bf16")
    expected = run_tile_module(tiles, xs, weights=weights)
    ys = infer.compile(model, target="server", precision="bf16").run(xs, check_races=True)
    for y, want in zip(ys, expected, strict=True):
        assert np.asarray(y).tobytes() == np.asarray(want).tobytes()
    # per layer one vector copy reads the attention's output accumulator [heads, D], viewed as
    # the o projection's [1, heads x D] row, into the product's activations
    from_acc = [o for o in tiles.walk() if isinstance(o, t.VectorOp) and o.op.data == "copy"
                and t.space_of(o.a) == "acc" and isinstance(o.a.owner, t.ViewOp)
                and o.a.type.get_shape()[0] == 1 and o.a.owner.operands[0].type.get_shape()[0] > 1]
    assert len(from_acc) == 2


def test_norms_become_prologues_of_the_packed_products(tmp_path):
    model = decode_model(tmp_path / "tiny.gguf")
    GraphPrepareTilingPass().apply(make_context(), model.module)
    kernels = [o for o in model.module.walk() if isinstance(o, g.KernelOp)]
    assert not [k for k in kernels if k.kind.data == "norm"]
    with_norm = [k for k in kernels if k.kind.data == "matmul" and any(isinstance(o, g.RmsNormOp) for o in k.walk())]
    assert len(with_norm) == 2 * (3 + 2) + 1  # per layer q, k, v, gate, up; the LM head


@pytest.mark.parametrize("target,precision", [("server", "fp32"), ("edge", "bf16")])
def test_fused_decode_step_matches_the_interpreters(tmp_path, target, precision):
    model = decode_model(tmp_path / "tiny.gguf")
    xs = decode_inputs(model, [3, 10])
    reference = run_module(model.module, xs)

    tiles, weights = tile_module(model.module, target, precision)
    expected = run_tile_module(tiles, xs, weights=weights)

    exe = infer.compile(model, target=target, precision=precision)
    ys = exe.run(xs, check_races=True)
    for y, want in zip(ys, expected, strict=True):
        assert np.asarray(y).tobytes() == np.asarray(want).tobytes()  # the tile program, bit for bit
    for y, ref in zip(ys, reference, strict=True):
        y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
        if precision == "fp32":
            assert np.abs(y - ref).max() <= 1e-3 * (ref.max() - ref.min())
        else:
            assert (y.ravel() @ ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref)) >= 0.999
    # no normalised row goes to DRAM and no projection comes back from it for the rotary or
    # the cache append, and the products between two paged attentions follow each other in
    # one nest: at this size the products are resident on both configs, so the step is q/k/v
    # (with the rotary and the K/V append on their tiles), then per layer paged attention and
    # one kernel o -> gate/up -> down -> the next layer's q/k/v (the last: the LM head)
    classes = [a.data["class"].data for o in tiles.walk()
               if (a := o.attributes.get(t.ROOFLINE_ATTR)) is not None and "class" in a.data]
    assert classes == ["gather"] * 3 + ["linear"] + ["paged_attention", "linear"] * 2
    # the slots of the appends and the block loops' trip counts are read from the scratchpad
    # (one DMA per kernel, then `lds`: no DRAM latency on the front end per entry)
    read = [o.indices if isinstance(o, t.ScatterRowsOp) else o.buffer for o in tiles.walk()
            if isinstance(o, t.ScatterRowsOp | t.LoadIndexOp)]
    assert len(read) == 2 * (2 + 2)  # per layer: the K and V appends, the two trip counts
    assert {t.space_of(v) for v in read} == {"spad"}


def test_the_next_products_first_expansion_runs_before_the_last_epilogue(tmp_path, monkeypatch):
    """A chained group whose next product's planes were prefetched early enough expands that
    product's first weight step after its own last matmuls and before its last epilogue
    (packed_gemm._pre_expand_next: the vector unit would otherwise wait for the array's drain
    with the expansion queued behind the epilogue). On a server config whose DRAM latency is
    short enough for the tiny model's planes to arrive in time (the real server's 500 cycles
    need SmolLM2-sized groups: bench_decode.py), the program changes and its outputs do not:
    the same bits as without it and as the tile interpreter, races checked."""
    from infer.passes.graph_to_tile import packed_gemm
    from infer.target import hw

    config = tmp_path / "server_short_latency.toml"
    text = (Path(hw.__file__).parent / "server.toml").read_text()
    config.write_text(text.replace('name = "server"', 'name = "server_short_latency"')
                      .replace("latency_cycles = 500", "latency_cycles = 4"))
    xs = None
    runs = {}
    for steps in (0, 1):
        monkeypatch.setattr(packed_gemm, "PRE_EXPANDED_STEPS", steps)
        model = decode_model(tmp_path / f"tiny{steps}.gguf", batch=1)
        xs = decode_inputs(model, [6]) if xs is None else xs
        exe = infer.compile(model, target=str(config), precision="bf16")
        runs[steps] = (exe.run(xs, check_races=True), exe.program.to_bytes())
        if steps:
            tiles, weights = tile_module(model.module, str(config), "bf16")
            expected = run_tile_module(tiles, xs, weights=weights)
            for y, want in zip(runs[steps][0], expected, strict=True):
                assert np.asarray(y).tobytes() == np.asarray(want).tobytes()
    (before, program_before), (after, program_after) = runs[0], runs[1]
    assert program_after != program_before
    for y, want in zip(after, before, strict=True):
        assert np.asarray(y).tobytes() == np.asarray(want).tobytes()
