"""graph.top_k compiled for both configs (passes/graph_to_tile/top_k.py): the indices equal the
reference interpreter's exactly on rows with ties, infinities and NaN, along the last axis and
a middle one, largest and smallest, over several row tiles, with the race checker on; the k
rounds are one hardware loop whatever k."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.dialects.graph_interpreter import run_module
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from helpers.sim_modes import assert_sim_modes_agree

BOTH = pytest.mark.parametrize("target", ["edge", "server"])


def top_k_module(shape: tuple[int, ...], k: int, axis: int, largest: bool):
    out = list(shape)
    out[axis] = k
    x, y = "x".join(map(str, shape)), "x".join(map(str, out))
    text = f"""func.func @main(%x: tensor<{x}xf32> {{graph.name = "x"}}) -> (tensor<{y}xi64> {{graph.name = "indices"}}) {{
  %i = graph.top_k %x {{k = {k} : i64, axis = {axis} : i64, largest = {str(largest).lower()}}} : (tensor<{x}xf32>) -> tensor<{y}xi64>
  func.return %i : tensor<{y}xi64>
}}"""
    m = parse_ir(make_context(), text, "top_k.mlir")
    verify_module(m)
    return m


def awkward_rows(shape: tuple[int, ...], axis: int, seed: int) -> np.ndarray:
    """Values rounded to halves (ties), with +inf, -inf and NaN scattered so that no row
    along `axis` holds both NaN and +inf (the one case the NPU orders differently)."""
    rng = np.random.default_rng(seed)
    x = np.round(rng.standard_normal(shape) * 2).astype(np.float32) / 2
    rows = np.moveaxis(x, axis, -1).reshape(-1, shape[axis])
    for r, row in enumerate(rows):
        kind = r % 5
        if kind == 1:
            row[rng.integers(0, row.size, 3)] = -np.inf
        elif kind == 2:
            row[rng.integers(0, row.size, 2)] = np.inf
        elif kind == 3:
            row[rng.integers(0, row.size, 2)] = np.nan
            row[rng.integers(0, row.size, 2)] = -np.inf
        elif kind == 4:
            row[:] = -np.inf  # every element -inf: index order
    return np.moveaxis(rows.reshape(np.moveaxis(x, axis, -1).shape), -1, axis).copy()


@BOTH
@pytest.mark.parametrize("shape, k, axis, largest", [
    ((300, 37), 5, 1, True),     # several row tiles, ties and specials
    ((300, 37), 37, 1, False),   # a whole sort, smallest first
    ((4, 23, 6), 4, 1, True),    # a middle axis: transposed last and back
    ((23, 5), 3, 0, False),      # the first axis
])
def test_top_k_indices_equal_the_reference(target, shape, k, axis, largest):
    m = top_k_module(shape, k, axis, largest)
    x = awkward_rows(shape, axis, seed=k)
    (want,) = run_module(m, [x])
    exe = infer.compile(m, target=target, precision="bf16")
    ys = exe.run([x], check_races=True)
    assert ys[0].dtype == np.int64
    np.testing.assert_array_equal(ys[0], want)
    assert_sim_modes_agree(exe, [x], ys)


@BOTH
def test_nan_ranks_as_inf_on_the_npu(target):
    """The documented difference: a row holding NaN and +inf orders them by index on the NPU
    (NaN is made +inf), where the graph op ranks NaN above +inf."""
    x = np.array([[1.0, np.inf, 0.0, np.nan, 2.0]], np.float32)
    m = top_k_module((1, 5), 3, 1, True)
    (want,) = run_module(m, [x])
    assert want.tolist() == [[3, 1, 4]]
    ys = infer.compile(m, target=target, precision="fp32").run([x])
    assert ys[0].tolist() == [[1, 3, 4]]


def test_the_rounds_are_one_loop_whatever_k():
    """(tile-to-npu may unroll a loop of a few rounds: from some k on the program stops growing)"""
    lengths = {k: len(infer.compile(top_k_module((8, 256), k, 1, True), target="edge").program) for k in (40, 250)}
    assert lengths[40] == lengths[250], lengths


def test_torch_sort_and_gather_compile():
    """torch.sort (graph.top_k of the whole axis) and torch.gather (the one-hot take along the
    axis) on the NPU equal torch."""
    import torch

    class SortGather(torch.nn.Module):
        def forward(self, x, i):
            s = torch.sort(x, dim=-1, descending=True)
            return s.values, s.indices, torch.gather(x, 1, i)

    x = torch.round(torch.randn(5, 9, generator=torch.Generator().manual_seed(6)) * 2) / 2
    i = torch.randint(0, 9, (5, 4), generator=torch.Generator().manual_seed(7))
    exe = infer.compile(SortGather(), target="edge", example_inputs=(x, i))
    ys = exe.run([x.numpy(), i.numpy()], check_races=True)
    for ours, theirs in zip(ys, SortGather()(x, i)):
        np.testing.assert_array_equal(ours, theirs.numpy())
