"""graph.reduce_sum / reduce_mean / reduce_max / reduce_min over any axes.

One step per run of adjacent reduced axes, the last run first, intermediates in DRAM (each
step a loop nest of its own): a trailing run is [M, K] rows -> `rsum`/`rmax` per column chunk
combined per row (min = -rmax(-x)); an inner run is [M, K, N] -> [TK, TN] tiles combined
tile-wise (`add`/`max`/`min`) into one accumulator tile, then a halving tree over its rows.
Mean multiplies by 1/count at the last step. reduce_prod is refused (no product reduction on
the vector unit).
"""

from __future__ import annotations

from xdsl.dialects.builtin import f32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import NEG_INF, LoweringContext, error
from infer.passes.graph_to_tile.copies import copy_dram

_KINDS = {g.ReduceSumOp: "sum", g.ReduceMeanOp: "sum", g.ReduceMaxOp: "max", g.ReduceMinOp: "min"}


def lower_reduce(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.ReduceOp)
    if isinstance(op, g.ReduceProdOp):
        raise error(op, "reduce_prod has no tile lowering (no log/exp-free product on the vector unit)")
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
                _reduce_rows(ctx, current, dst, M, K, kind, scale if last else None)
            else:
                _reduce_middle(ctx, current, dst, M, K, N, kind, scale if last else None)
        current, current_shape = dst, new_shape


def _reduce_rows(ctx: LoweringContext, src: SSAValue, dst: SSAValue, M: int, K: int, kind: str,
                 scale: float | None) -> None:
    """dst[M, 1] = reduce over the rows of src[M, K]: rsum/rmax per column chunk."""
    em = ctx.emitter
    choice = tiling_cost.choose_rows(ctx.hw, M, K, bytes_in=4, bytes_out=0, vec_cost=2, live_tiles=2,
                                     footprint=lambda tr, tcn: tr * tcn * 8 + 2 * tr * 8)  # x x2, part/res columns x2
    ctx.predict(choice.cycles)
    x2, out2 = em.view(src, (M, K)), em.view(dst, (M, 1))
    x_tile = em.alloc((choice.rows, choice.cols), f32, "spad", 2)
    partial = em.alloc((choice.rows, 1), f32, "spad", 2)
    total = em.alloc((choice.rows, 1), f32, "spad", 2)
    z = [0, 0]

    def tile(r0: Index, tr: int) -> None:
        em.fill(total, z, tr, 1, NEG_INF if kind != "sum" else 0.0)

        def chunk(c0: Index, cn: int) -> None:
            em.dma(x2, [r0, c0], x_tile, z, [tr, cn])
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

    em.tiles(M, choice.rows, tile)


def _reduce_middle(ctx: LoweringContext, src: SSAValue, dst: SSAValue, M: int, K: int, N: int, kind: str,
                   scale: float | None) -> None:
    """dst[M, 1, N] = reduce over K of src[M, K, N]: [TK, TN] tiles combined tile-wise
    into an accumulator tile, then a halving tree over its rows."""
    em = ctx.emitter
    vector_op = {"sum": "add", "max": "max", "min": "min"}[kind]
    capacity = ctx.staging_tile_elements
    TN = min(N, capacity)
    TK = max(1, min(K, capacity // TN))
    x3 = em.view(src, (M, K, N))
    out2 = em.view(dst, (M, N))
    x_tile3 = em.alloc((1, TK, TN), f32, "spad", 2)
    x_tile = em.view(x_tile3, (TK, TN))
    acc = em.alloc((TK, TN), f32, "spad", 2)
    z = [0, 0]
    init = {"sum": 0.0, "max": NEG_INF, "min": -NEG_INF}[kind]

    def tile(m: Index, n0: Index, tn: int) -> None:
        em.fill(acc, z, min(TK, K), tn, init)

        def k_step(k0: Index, tk: int) -> None:
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
        em.dma(acc, z, out2, [m, n0], [1, tn])

    em.range(M, lambda m: em.tiles(N, TN, lambda n0, tn: tile(m, n0, tn)))
