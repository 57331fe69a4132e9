"""A standalone elementwise kernel whose batch entries are small tiles (Mamba's [L, D, N]
discretization, a MoE layer's rows spread over its experts) takes several whole entries per tile
(`TileFrame.batch_count`) instead of a loop of tiny tiles, each a DRAM round trip: operands that
are a row, a scalar or a shared tile of each entry are loaded with a DMA whose broadcast dims
have a source step of 0 (the same DRAM rows read again). Elementwise fp32 ops are exact, so the
outputs equal numpy's bit for bit, with the race checker on."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import infer
from helpers.sim_modes import assert_sim_modes_agree
from infer.dialects.ir_io import make_context
from infer.passes.pipelines import LowerToTilePass

B, R, C = 96, 4, 8
SHAPES = {  # name: shape (against the output [B, R, C])
    "x": ("B", "R", "C"),  # full
    "a": ("B", 1, "C"),  # a row per entry
    "c": ("B", "R", 1),  # a column per entry
    "s": ("B", 1, 1),  # a scalar per entry
    "t": (1, "R", "C"),  # a tile shared by the entries
    "u": (1, "R", 1),  # a column shared by the entries
    "v": (1, 1, "C"),  # a row shared by the entries
}


def _inputs(b, r, c):
    dims = {"B": b, "R": r, "C": c}
    return {n: tuple(dims.get(d, d) for d in s) for n, s in SHAPES.items()}


def _model(path, b=B, r=R, c=C):
    import onnx

    nodes = [helper.make_node("Mul", ["x", "a"], ["p"]), helper.make_node("Add", ["p", "c"], ["q"]),
             helper.make_node("Mul", ["q", "t"], ["r"]), helper.make_node("Sub", ["r", "u"], ["w"]),
             helper.make_node("Mul", ["w", "s"], ["z"]), helper.make_node("Add", ["z", "v"], ["y"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in _inputs(b, r, c).items()]
    graph = helper.make_graph(nodes, "stacked", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, r, c])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def _feeds(b, r, c):
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in _inputs(b, r, c).items()}


def _want(f):
    return ((f["x"] * f["a"] + f["c"]) * f["t"] - f["u"]) * f["s"] + f["v"]


# (the edge config's 256 KiB scratchpad takes 1000 x 3 x 40 in several tiles of whole entries,
# and a remainder tile)
@pytest.mark.parametrize("target, dims", [("edge", (B, R, C)), ("server", (B, R, C)), ("edge", (1000, 3, 40))])
def test_stacked_entries_match_numpy(tmp_path, target, dims):
    feeds = _feeds(*dims)
    exe = infer.compile(str(_model(tmp_path / "stacked.onnx", *dims)), target=target)
    inputs = [feeds[n] for n in exe.input_names]
    got = exe.run(inputs, check_races=True)
    np.testing.assert_array_equal(got[0], _want(feeds))
    assert_sim_modes_agree(exe, inputs, got)


def test_entries_are_stacked_with_broadcast_loads(tmp_path):
    """The kernel's loads: the row, scalar and shared operands with a step 0 (broadcast) dim,
    and no loop over the 96 entries one by one."""
    module = infer.import_model(str(_model(tmp_path / "stacked.onnx"))).module.clone()
    LowerToTilePass(target="server", precision="fp32").apply(make_context(), module)
    text = str(module)
    broadcast_loads = [line for line in text.splitlines() if "tile.dma" in line and "src_steps" in line]
    assert len(broadcast_loads) == 4, "\n".join(broadcast_loads)  # a, s by entry, t, u shared; v a plain row
    assert all("src_steps = array<i64: 1, 0, 1>" in line or "src_steps = array<i64: 0, 1, 1>" in line
               for line in broadcast_loads)
    assert "scf.for" not in text  # all 96 entries in one tile (was a loop of 96 [4, 8] tiles)
