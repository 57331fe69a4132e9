"""graph.reduce_sum / reduce_mean / reduce_max / reduce_min / reduce_prod over any axes, and
graph.argmax / argmin.

One step per run of adjacent reduced axes, the last run first, intermediates in DRAM (each
step a loop nest of its own): a trailing run is [M, K] rows -> `rsum`/`rmax` per column chunk
combined per row (min = -rmax(-x); prod: a halving tree of `mul`s over the chunk's columns);
an inner run is [M, K, N] -> [TK, TN] tiles combined tile-wise (`add`/`max`/`min`/`mul`) into
one accumulator tile, then a halving tree over its rows. Mean multiplies by 1/count at the
last step. Reducing an empty axis fills the result with the reduction's identity (0, 1,
-inf, +inf).

argmax/argmin along one axis, viewed [M, K, N]: with N = 1 and whole rows in a tile, the
extreme m = rmax (argmin: of -x), then the first index where x == m is
min(iota + K (x != m)) (an rmax of its negation); otherwise the rows k of [TK, TN] tiles are
scanned in order keeping the best value and its index (a counter row), replacing where the
new row is strictly better (the first occurrence wins, as numpy's).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import f32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import KEPT_TILE_READERS, MAX_IDENTITY, LoweringContext, error, latency_bound
from infer.passes.graph_to_tile.copies import copy_dram, fill_dram

_KINDS = {g.ReduceSumOp: "sum", g.ReduceMeanOp: "sum", g.ReduceMaxOp: "max", g.ReduceMinOp: "min",
          g.ReduceProdOp: "prod"}
_IDENTITY = {"sum": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}
_COMBINE = {"sum": "add", "max": "max", "min": "min", "prod": "mul"}


def lower_reduce(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.ReduceOp)
    shape = shape_of(op.input)
    axes = set(op.reduced_axes())
    kind = _KINDS[type(op)]
    count = num_elements([shape[a] for a in axes])
    scale = 1.0 / count if isinstance(op, g.ReduceMeanOp) else None
    name = ctx.kernel_name()
    ctx.debug(f"[graph-to-tile] {name}: {op.name.split('.')[1]} {'x'.join(map(str, shape))} axes {sorted(axes)}")
    em = ctx.emitter
    out = ctx.output_buffer(op.output)
    if not shape or not axes:
        copy_dram(ctx, ctx.buffer(op.input), out, shape or (1,))
        return
    if count == 0:  # an empty reduction: the identity (mean: 0 / 0)
        fill_dram(ctx, out, shape_of(op.output), float("nan") if scale is not None else _IDENTITY[kind])
        return
    # runs of reduced axes, last first; each step reduces one run to 1
    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(shape):
        if i in axes:
            j = i
            while j < len(shape) and j in axes:
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    current, current_shape = ctx.buffer(op.input), list(shape)
    for n, (a, b) in enumerate(reversed(runs)):
        last = n == len(runs) - 1
        new_shape = current_shape[:a] + [1] * (b - a) + current_shape[b:]
        dst = em.view(out, tuple(new_shape)) if last else em.alloc(tuple(new_shape), f32, "dram")
        M, K, N = (num_elements(current_shape[:a]), num_elements(current_shape[a:b]),
                   num_elements(current_shape[b:]))
        with ctx.stage(what="reduction step"):
            if N == 1:
                reduce_rows(ctx, current, dst, M, K, kind, scale if last else None)
            else:
                _reduce_middle(ctx, current, dst, M, K, N, kind, scale if last else None)
        current, current_shape = dst, new_shape


def reduce_rows(ctx: LoweringContext, src: SSAValue, dst: SSAValue, M: int, K: int, kind: str,
                scale: float | None, rows: int | None = None, describe: tuple[str, str, str] | None = None) -> None:
    """dst[M, 1] = reduce over the rows of src[M, K]: rsum/rmax per column chunk. `rows`: an
    override of the rows per tile; `describe`: (kernel name, what, shape) for the tiling
    choice's debug line (the global pools, which are this reduction of [N.C, H.W])."""
    em = ctx.emitter
    cost = ctx.hw.vector.cost
    # per chunk a row reduction over the tile (min: negated first; prod: a halving tree of
    # about as many multiplies), per row the total's fill, its update per chunk and the scale
    vec_cost = 2 * cost["mul"] if kind == "prod" else cost["rsum" if kind == "sum" else "rmax"] + (
        cost["neg"] if kind == "min" else 0)
    column_cost = cost["mul"] + cost["add"] + (cost["mul"] if scale is not None else 0)
    choice = tiling_cost.choose_rows(ctx.hw, M, K, bytes_in=4, bytes_out=0, vec_cost=vec_cost,
                                     column_cost=column_cost, live_tiles=2, override=rows,
                                     footprint=lambda tr, tcn: tr * tcn * 8 + 2 * tr * 8,  # x x2, part/res columns x2
                                     contiguous_rows=True)
    if describe is not None:
        ctx.debug(tiling_cost.describe_rows(*describe, choice))
    x2, out2 = em.view(src, (M, K)), em.view(dst, (M, 1))
    # one tile on a latency-bound target: rows the kernel before left on chip are read in place
    # (sum and max only read them) and the result stays on chip for the kernels after
    one_tile = latency_bound(ctx.hw) and M <= choice.rows and K <= choice.cols
    kept = ctx.on_chip_as(src, (M, K)) if one_tile and kind in ("sum", "max") else None
    # choose_rows counts no store (its results are a column, not bytes per element): the last
    # tile's result store ends the kernel; read in place, the vector work, then that store
    last_store = tiling_cost.dma_round_trip(ctx.hw, min(M, choice.rows) * 4)
    ctx.predict(int((choice.cycles if kept is None else choice.vector) + last_store))
    x_tile = em.alloc((choice.rows, choice.cols), f32, "spad", 2) if kept is None else kept
    partial = em.alloc((choice.rows, 1), f32, "spad", 2)
    total = em.alloc((choice.rows, 1), f32, "spad", 2)
    z = [0, 0]

    def tile(r0: Index, tr: int) -> None:
        em.fill(total, z, tr, 1, {"sum": 0.0, "prod": 1.0}.get(kind, MAX_IDENTITY))

        def chunk(c0: Index, cn: int) -> None:
            if kept is None:
                em.dma(x2, [r0, c0], x_tile, z, [tr, cn])
            if kind == "prod":  # a halving tree over the chunk's columns, then into the total
                cols = cn
                while cols > 1:
                    half = cols // 2
                    em.vec("mul", x_tile, z, x_tile, z, tr, half, x_tile, [0, cols - half], bmode="tile")
                    cols -= half
                em.vec("mul", total, z, total, z, tr, 1, x_tile, z, bmode="tile")
                return
            if kind == "min":
                em.vec("neg", x_tile, z, x_tile, z, tr, cn)
            em.vec("rsum" if kind == "sum" else "rmax", partial, z, x_tile, z, tr, cn)
            em.vec("add" if kind == "sum" else "max", total, z, total, z, tr, 1, partial, z, bmode="tile")

        em.tiles(K, choice.cols, chunk)
        if kind == "min":
            em.vec("neg", total, z, total, z, tr, 1)
        if scale is not None:
            em.vec("mul", total, z, total, z, tr, 1, bmode="imm", imm=scale)
        em.dma(total, z, out2, [r0, 0], [tr, 1])
        if one_tile:
            ctx.keep_on_chip(out2, total, next_kernels=KEPT_TILE_READERS)

    em.tiles(M, choice.rows, tile)


def _reduce_middle(ctx: LoweringContext, src: SSAValue, dst: SSAValue, M: int, K: int, N: int, kind: str,
                   scale: float | None) -> None:
    """dst[M, 1, N] = reduce over K of src[M, K, N]: [TK, TN] tiles combined tile-wise
    into an accumulator tile, then a halving tree over its rows."""
    em = ctx.emitter
    vector_op = _COMBINE[kind]
    capacity = ctx.staging_tile_elements
    TN = min(N, capacity)
    TK = max(1, min(K, capacity // TN))
    x3 = em.view(src, (M, K, N))
    out2 = em.view(dst, (M, N))
    # one tile on a latency-bound target: a source the kernel before left on chip is read in
    # place, and the result row stays on chip for the kernels after (`res`)
    one_tile = latency_bound(ctx.hw) and M == 1 and N <= TN and K <= TK
    kept = ctx.on_chip_as(src, (K, N)) if one_tile else None
    x_tile3 = em.alloc((1, TK, TN), f32, "spad", 2) if kept is None else None
    x_tile = em.view(x_tile3, (TK, TN)) if kept is None else kept
    acc = em.alloc((TK, TN), f32, "spad", 2)
    res = em.alloc((1, TN), f32, "spad") if one_tile else None
    z = [0, 0]
    init = {"sum": 0.0, "prod": 1.0, "max": MAX_IDENTITY, "min": -MAX_IDENTITY}[kind]

    def tile(m: Index, n0: Index, tn: int) -> None:
        em.fill(acc, z, min(TK, K), tn, init)

        def k_step(k0: Index, tk: int) -> None:
            if kept is None:
                em.dma(x3, [m, k0, n0], x_tile3, [0, 0, 0], [1, tk, tn])
            em.vec(vector_op, acc, z, acc, z, tk, tn, x_tile, z, bmode="tile")

        em.tiles(K, TK, k_step)
        rows = min(TK, K)
        while rows > 1:
            half = rows // 2
            em.vec(vector_op, acc, z, acc, z, half, tn, acc, [rows - half, 0], bmode="tile")
            rows -= half
        if scale is not None:
            em.vec("mul", acc, z, acc, z, 1, tn, bmode="imm", imm=scale)
        if res is None:
            em.dma(acc, z, out2, [m, n0], [1, tn])
            return
        em.vec("copy", res, z, acc, z, 1, tn)  # (a [1, N] tile: what the kernels after read)
        em.dma(res, z, out2, [m, n0], [1, tn])
        ctx.keep_on_chip(out2, res, next_kernels=KEPT_TILE_READERS)

    em.range(M, lambda m: em.tiles(N, TN, lambda n0, tn: tile(m, n0, tn)))


# -- argmax / argmin -------------------------------------------------------------------------------


def lower_arg_reduce(ctx: LoweringContext, op: Operation) -> None:
    """graph.argmax / argmin: the index of the first extreme value along one axis (see the
    module docstring), as f32-held integers."""
    assert isinstance(op, g.ArgReduceOp)
    shape = shape_of(op.input)
    (axis,) = op.reduced_axes()
    M, K, N = num_elements(shape[:axis]), shape[axis], num_elements(shape[axis + 1:])
    is_max = isinstance(op, g.ArgmaxOp)
    name = ctx.kernel_name()
    em = ctx.emitter
    out = ctx.output_buffer(op.output)
    if K == 0 or M * N == 0:
        raise error(op, "argmax/argmin of an empty axis has no result")
    whole_rows = N == 1 and K <= ctx.staging_tile_elements
    ctx.debug(f"[graph-to-tile] {name}: {op.name.split('.')[1]} {'x'.join(map(str, shape))} axis {axis}: "
              + ("whole rows" if whole_rows else "a scan over the axis"))
    if whole_rows:
        _arg_rows(ctx, ctx.buffer(op.input), out, M, K, is_max)
    else:
        _arg_scan(ctx, ctx.buffer(op.input), out, M, K, N, is_max)


def _arg_rows(ctx: LoweringContext, src: SSAValue, dst: SSAValue, M: int, K: int, is_max: bool) -> None:
    """dst[M] = the first index of the row extreme of src[M, K] (whole rows in a tile)."""
    em = ctx.emitter
    choice = tiling_cost.choose_rows(ctx.hw, M, K, bytes_in=4, bytes_out=0, vec_cost=8, live_tiles=2, whole_row=True,
                                     footprint=lambda tr, k: tr * k * 8 + 2 * tr * 4 + k * 4)  # x x2, column x2, iota
    TR = min(choice.rows, M)
    x2, out2 = em.view(src, (M, K)), em.view(dst, (M, 1))
    iota = ctx.weight("iota", np.arange(K, dtype=np.float32).reshape(1, K), f32)
    iota_row = em.alloc((1, K), f32, "spad")
    em.dma(iota, [0, 0], iota_row, [0, 0], [1, K])
    x_tile = em.alloc((TR, K), f32, "spad", 2)
    column = em.alloc((TR, 1), f32, "spad", 2)
    z = [0, 0]

    def tile(r0: Index, tr: int) -> None:
        em.dma(x2, [r0, 0], x_tile, z, [tr, K])
        if not is_max:
            em.vec("neg", x_tile, z, x_tile, z, tr, K)
        em.vec("rmax", column, z, x_tile, z, tr, K)
        em.vec("eq", x_tile, z, x_tile, z, tr, K, column, z, bmode="col")  # 1 at the extremes
        em.vec("mul", x_tile, z, x_tile, z, tr, K, bmode="imm", imm=-float(K))
        em.vec("add", x_tile, z, x_tile, z, tr, K, bmode="imm", imm=float(K))  # K where not extreme
        em.vec("add", x_tile, z, x_tile, z, tr, K, iota_row, z, bmode="row")
        em.vec("neg", x_tile, z, x_tile, z, tr, K)
        em.vec("rmax", column, z, x_tile, z, tr, K)  # -(the first extreme's index)
        em.vec("neg", column, z, column, z, tr, 1)
        em.dma(column, z, out2, [r0, 0], [tr, 1])

    em.tiles(M, TR, tile)


def _arg_scan(ctx: LoweringContext, src: SSAValue, dst: SSAValue, M: int, K: int, N: int, is_max: bool) -> None:
    """dst[M, N] = the first index of the extreme over K of src[M, K, N]: rows scanned in order."""
    em = ctx.emitter
    capacity = ctx.staging_tile_elements
    TN = min(N, capacity)
    TK = max(1, min(K, capacity // TN))
    x3 = em.view(src, (M, K, N))
    out2 = em.view(dst, (M, N))
    x_tile3 = em.alloc((1, TK, TN), f32, "spad", 2)
    x_tile = em.view(x_tile3, (TK, TN))
    best = em.alloc((1, TN), f32, "spad", 2)
    index = em.alloc((1, TN), f32, "spad", 2)
    counter = em.alloc((1, TN), f32, "spad", 2)
    better = em.alloc((1, TN), f32, "spad", 2)
    z = [0, 0]

    def tile(m: Index, n0: Index, tn: int) -> None:
        em.fill(best, z, 1, tn, MAX_IDENTITY if is_max else -MAX_IDENTITY)
        em.fill(index, z, 1, tn, 0.0)
        em.fill(counter, z, 1, tn, 0.0)

        def k_step(k0: Index, tk: int) -> None:
            em.dma(x3, [m, k0, n0], x_tile3, [0, 0, 0], [1, tk, tn])

            def row(r: Index) -> None:
                if is_max:  # strictly better than the best so far
                    em.vec("lt", better, z, best, z, 1, tn, x_tile, [r, 0], bmode="tile")
                    em.vec("max", best, z, best, z, 1, tn, x_tile, [r, 0], bmode="tile")
                else:
                    em.vec("lt", better, z, x_tile, [r, 0], 1, tn, best, z, bmode="tile")
                    em.vec("min", best, z, best, z, 1, tn, x_tile, [r, 0], bmode="tile")
                # index = better ? counter : index, as index + better (counter - index) (integers: exact)
                em.vec("mul", better, z, better, z, 1, tn, bmode="imm", imm=-1.0)
                em.vec("add", better, z, better, z, 1, tn, bmode="imm", imm=1.0)
                em.vec("mul", index, z, index, z, 1, tn, better, z, bmode="tile")
                em.vec("mul", better, z, better, z, 1, tn, bmode="imm", imm=-1.0)
                em.vec("add", better, z, better, z, 1, tn, bmode="imm", imm=1.0)
                em.vec("mul", better, z, better, z, 1, tn, counter, z, bmode="tile")
                em.vec("add", index, z, index, z, 1, tn, better, z, bmode="tile")
                em.vec("add", counter, z, counter, z, 1, tn, bmode="imm", imm=1.0)

            em.range(tk, row)

        em.tiles(K, TK, k_step)
        em.dma(index, z, out2, [m, n0], [1, tn])

    em.range(M, lambda m: em.tiles(N, TN, lambda n0, tn: tile(m, n0, tn)))
