"""graph.top_k: the indices of the k largest (or smallest) elements along one axis, on the
vector unit.

Whole rows in a tile, [TR, K] (an axis with dims after it is first transposed to the last
place, [M, K, N] -> [M, N, K], and the [M, N, k] result back, as softmax does). Per row tile,
k rounds of a loop (a hardware loop, whatever k), each the argmax step of reductions.py with
the elements taken so far left out:

- m = rmax(x); the first index i whose x == m among the elements not taken yet is the
  smallest of iota + K (x != m) + 2K taken (an rmax of its negation): an element not at the
  maximum comes after every one at it, a taken one after every other;
- column `round` of the result is i; the one-hot of i (the only element of that sum equal
  to i) is added to `taken` (as 2K) and its x becomes -inf.

The maximum over what is left can be -inf only when every element left is -inf: the taken
term then orders those by index after the untaken ones, so an input's -inf elements come
out in index order like any other equal values. NaN ranks as +inf: made +inf first (the
graph op ranks NaN above +inf, so a row holding both orders them by index instead); the
smallest are the largest of -x. The selection adds and compares small integers in f32
(exact) and never computes with x's values: the indices are the reference's wherever no
row holds both NaN and +inf.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import f32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import LoweringContext, error
from infer.passes.graph_to_tile.transpose import permute_copy

#: vector passes over a [TR, K] tile: making NaN +inf (and the negation for the smallest),
#: and each round of the selection
SETUP_PASSES = 6
ROUND_PASSES = 19


def _footprint(tr: int, K: int, k: int) -> int:
    """Scratchpad bytes: x [TR, K] x2, three [TR, K] work tiles, the iota row, the result
    [TR, k] x2 and a column."""
    return tr * K * 4 * 5 + K * 4 + tr * k * 4 * 2 + tr * 4


def lower_top_k(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.TopKOp)
    shape = shape_of(op.input)
    axis = op.normalized_axis()
    k = op.k.value.data
    M, K, N = num_elements(shape[:axis]), shape[axis], num_elements(shape[axis + 1:])
    if k == 0 or M * N == 0:
        raise error(op, "top_k with an empty result (k = 0 or an empty input) is not supported on the NPU")
    if _footprint(1, K, k) > ctx.hw.memory.scratchpad_bytes // 2:
        raise error(op, f"top_k along an axis of {K} elements: a row does not fit half the scratchpad of "
                        f"target '{ctx.hw.name}' (rows are selected whole)")
    name = ctx.kernel_name()
    em = ctx.emitter
    rows = M * N
    choice = tiling_cost.choose_rows(ctx.hw, rows, K, bytes_in=4, bytes_out=0,
                                     vec_cost=SETUP_PASSES + ROUND_PASSES * k, live_tiles=5, whole_row=True,
                                     footprint=lambda tr, c: _footprint(tr, c, k))
    ctx.predict(choice.cycles)
    ctx.debug(f"[graph-to-tile] {name}: top_k {'x'.join(map(str, shape))} axis {axis} k {k} "
              f"{'largest' if op.largest.value.data else 'smallest'}: {choice.rows} rows a tile"
              + (", the axis transposed last and back" if N > 1 else ""))
    src, out = ctx.buffer(op.input), ctx.output_buffer(op.output)
    if N > 1:  # [M, K, N] -> rows of [M, N, K], and the [M, N, k] result back to [M, k, N]
        with ctx.stage(what="transposed copy"):
            rows_src = em.alloc((M, N, K), f32, "dram")
            permute_copy(ctx, em.view(src, (M, K, N)), (M, K, N), (0, 2, 1), rows_src)
        rows_out = em.alloc((M, N, k), f32, "dram")
        _select(ctx, em.view(rows_src, (rows, K)), em.view(rows_out, (rows, k)), rows, K, k,
                op.largest.value.data, choice.rows)
        with ctx.stage(what="transposed copy"):
            permute_copy(ctx, rows_out, (M, N, k), (0, 2, 1), em.view(out, (M, k, N)))
    else:
        _select(ctx, em.view(src, (rows, K)), em.view(out, (rows, k)), rows, K, k, op.largest.value.data,
                choice.rows)


def _select(ctx: LoweringContext, src: SSAValue, dst: SSAValue, rows: int, K: int, k: int, largest: bool,
            TR: int) -> None:
    """dst[rows, k] = the indices (f32) of the k most extreme elements of each row of src[rows, K]."""
    em = ctx.emitter
    TR = max(1, min(TR, rows))
    iota = ctx.weight("iota", np.arange(K, dtype=np.float32).reshape(1, K), f32)
    iota_row = em.alloc((1, K), f32, "spad")
    z = [0, 0]
    em.dma(iota, z, iota_row, z, [1, K])
    x = em.alloc((TR, K), f32, "spad", 2)
    work = em.alloc((TR, K), f32, "spad")  # compare results and one-hots
    order = em.alloc((TR, K), f32, "spad")  # the selection sum
    taken = em.alloc((TR, K), f32, "spad")  # 2K where taken, else 0
    result = em.alloc((TR, k), f32, "spad", 2)
    column = em.alloc((TR, 1), f32, "spad")

    def tile(r0: Index, tr: int) -> None:
        em.dma(src, [r0, 0], x, z, [tr, K])
        # NaN -> +inf: x = mask(x, x == x) + (1 / (x == x) - 1)
        em.vec("eq", work, z, x, z, tr, K, x, z, bmode="tile")
        em.vec("mask", x, z, x, z, tr, K, work, z, bmode="tile")
        em.vec("recip", work, z, work, z, tr, K)
        em.vec("add", work, z, work, z, tr, K, bmode="imm", imm=-1.0)
        em.vec("add", x, z, x, z, tr, K, work, z, bmode="tile")
        if not largest:
            em.vec("neg", x, z, x, z, tr, K)
        em.fill(taken, z, tr, K, 0.0)

        def select(round_: Index) -> None:
            em.vec("rmax", column, z, x, z, tr, K)
            em.vec("eq", order, z, x, z, tr, K, column, z, bmode="col")  # 1 at the maximum
            em.vec("mul", order, z, order, z, tr, K, bmode="imm", imm=-float(K))
            em.vec("add", order, z, order, z, tr, K, bmode="imm", imm=float(K))  # K elsewhere
            em.vec("add", order, z, order, z, tr, K, iota_row, z, bmode="row")
            em.vec("add", order, z, order, z, tr, K, taken, z, bmode="tile")
            em.vec("neg", order, z, order, z, tr, K)
            em.vec("rmax", column, z, order, z, tr, K)  # -(the first untaken maximum's index)
            em.vec("neg", result, [0, round_], column, z, tr, 1)
            em.vec("eq", work, z, order, z, tr, K, column, z, bmode="col")  # its one-hot
            em.vec("mul", order, z, work, z, tr, K, bmode="imm", imm=2.0 * K)
            em.vec("add", taken, z, taken, z, tr, K, order, z, bmode="tile")
            # x there -> -inf: mask(x, 1 - onehot) + (1 - 1 / (1 - onehot)) (0 or -inf: exact)
            em.vec("mul", work, z, work, z, tr, K, bmode="imm", imm=-1.0)
            em.vec("add", work, z, work, z, tr, K, bmode="imm", imm=1.0)
            em.vec("mask", x, z, x, z, tr, K, work, z, bmode="tile")
            em.vec("recip", work, z, work, z, tr, K)
            em.vec("neg", work, z, work, z, tr, K)
            em.vec("add", work, z, work, z, tr, K, bmode="imm", imm=1.0)
            em.vec("add", x, z, x, z, tr, K, work, z, bmode="tile")

        em.range(k, select)
        em.dma(result, z, dst, [r0, 0], [tr, k])

    em.tiles(rows, TR, tile)
