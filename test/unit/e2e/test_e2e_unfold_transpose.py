"""MobileViT's unfold and fold permute [patches, ph, nw, pw]-style blocks: the two middle dims swap
and the innermost rows are a couple of elements. Each [u, v, C] block was its own DRAM round trip
(128 blocks of 16 elements: 65 K cycles on server); consecutive whole blocks are now one load and
one 3-D store per row of the block (transpose._batched_blocks; MobileViT-small-like model through
torch.export, server: 405,621 -> 181,706 cycles). Copies are exact: the outputs equal numpy's."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import infer
from infer.passes.graph_to_tile.transpose import _batched_blocks, canonical_perm
from infer.target.hw import load_config

CASES = [((128, 2, 4, 2), (0, 2, 1, 3)), ((96, 4, 2, 24), (0, 2, 1, 3)), ((2, 3, 5, 4, 6), (0, 1, 3, 2, 4))]


def _model(path):
    import onnx

    x = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, list(s)) for i, (s, _) in enumerate(CASES)]
    y = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [s[p] for p in perm])
         for i, (s, perm) in enumerate(CASES)]
    nodes = [helper.make_node("Transpose", [f"x{i}"], [f"y{i}"], perm=list(perm)) for i, (_, perm) in enumerate(CASES)]
    onnx.save(helper.make_model(helper.make_graph(nodes, "unfold", x, y), opset_imports=[helper.make_opsetid("", 18)]),
              str(path))
    return path


def test_whole_blocks_are_batched():
    hw = load_config("server")
    sizes, cp = canonical_perm(CASES[0][0], CASES[0][1])
    assert _batched_blocks(hw, sizes, cp, (2, 4, 2), 4) == 128  # every block in one load
    assert _batched_blocks(hw, sizes, cp, (1, 4, 2), 4) == 1  # not whole blocks: one by one


@pytest.mark.parametrize("target", ["edge", "server"])
def test_unfold_transposes_match_numpy(tmp_path, target):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s, _ in CASES]
    exe = infer.compile(str(_model(tmp_path / "unfold.onnx")), target=target)
    for got, x, (_, perm) in zip(exe.run(xs, check_races=True), xs, CASES, strict=True):
        np.testing.assert_array_equal(got, np.transpose(x, perm))
