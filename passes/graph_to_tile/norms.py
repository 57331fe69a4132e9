"""Row-wise kernels on the vector unit: graph.layer_norm, rms_norm, softmax; and batch_norm.

* layer/rms norm, softmax and log_softmax work on whole rows [TR, D] (D = the product of the
  normalized dims): `rsum`/`rmax` to a column, `bmode=col` broadcasts, `rsqrt`, the scale/bias
  as `bmode=row` rows; log_softmax is x - max - ln(sum(exp(x - max))). (Log-)softmax along an
  axis with dims after it ([M, K, T], T > 1) transposes to [M, T, K] and back around the rows
  (transpose.permute_copy, helper nests).
* batch_norm without a preceding conv (graph-fold-batch-norm folds the others): per-channel
  compile-time scale and shift as `bmode=col` columns on [channels, pixels] tiles.
* layer/rms norm rows in a GEMM's epilogue (gemm.py's norm epilogue): `normalize`, the
  instruction sequence `lower_rowwise` emits, and `rows_choice`, its kernel's estimate.
* the RMSNorm prologue of a resident packed product (packed_gemm.py): its parameter tiles
  (`prologue_params`) and the rows normalised in place with `lower_rowwise`'s instructions
  (`normalize_rows`).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import bf16, f32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import element_name_of, num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import LoweringContext, error, latency_bound
from infer.passes.graph_to_tile.transpose import permute_copy


#: a one-tile norm result stays on chip for the kernels named within this many names after it
KEPT_NORM_READERS = 3


def lower_rowwise(ctx: LoweringContext, op: Operation) -> None:
    """graph.layer_norm, rms_norm, softmax, log_softmax."""
    assert isinstance(op, g.NormOp | g.AxisOp)
    em = ctx.emitter
    shape = shape_of(op.input)
    axis = op.axis.value.data % len(shape)
    is_softmax = isinstance(op, g.SoftmaxOp | g.LogSoftmaxOp)
    is_log = isinstance(op, g.LogSoftmaxOp)
    trailing = 1
    if is_softmax:
        trailing = num_elements(shape[axis + 1:])
        shape = (num_elements(shape[:axis]) * trailing, shape[axis])  # rows of the transposed [M, T, K]
        axis = 1
    M, D = num_elements(shape[:axis]), num_elements(shape[axis:])
    name = ctx.kernel_name()
    override = ctx.override(name, 1)
    has_bias = isinstance(op, g.LayerNormOp) and op.bias is not None
    params = 0 if is_softmax else 1 + (1 if has_bias else 0)

    out_buffer = ctx.output_buffer(op.results[0]) if is_softmax else ctx.narrow_output_buffer(op.results[0])
    narrow = ctx.is_bf16_buffer(out_buffer)

    choice = rows_choice(ctx, op, M, D, narrow, override[0] if override else None)
    if _footprint(1, D, narrow, params) > ctx.hw.memory.scratchpad_bytes:
        raise error(op, f"a row of {D} elements does not fit the scratchpad of target '{ctx.hw.name}'")
    ctx.debug(tiling_cost.describe_rows(name, op.name.split(".")[1], "x".join(map(str, shape)), choice))
    x2 = em.view(ctx.buffer(op.input), (M, D))
    out2 = em.view(out_buffer, (M, D))
    if trailing > 1:  # [M, K, T] -> rows of [M, T, K], and back after
        blocks = (M // trailing, D, trailing)
        final = out2
        x2 = em.view(_permuted(ctx, x2, blocks), (M, D))
        out2 = em.alloc((M, D), f32, "dram")
    TR = choice.rows
    # rows the kernel before left on chip (`keep_on_chip`: a gather's one tile) are copied on the
    # vector unit instead of loaded back, a wait for that kernel's store and a DRAM latency
    kept2 = ctx.on_chip_as(x2, (M, D)) if trailing == 1 and element_name_of(x2) == "f32" else None
    if kept2 is not None and _footprint(M, D, narrow, params) <= ctx.hw.memory.scratchpad_bytes // 2:
        # rows on chip need no load pipeline: one tile, whose result stays on chip in turn
        TR = M
        ctx.predict(rows_choice(ctx, op, M, D, narrow, M, from_chip=True).cycles)
    else:
        ctx.predict(choice.cycles)
    x_tile = em.alloc((TR, D), f32, "spad", 2)
    y_tile = em.alloc((TR, D), f32, "spad", 2)
    # a narrowed (bf16) output: the last instruction writes a bf16 tile (it rounds its f32 result
    # once, as the consumers would)
    out_tile = em.alloc((TR, D), bf16, "spad", 2) if narrow else y_tile
    column = em.alloc((TR, 1), f32, "spad", 2)
    z = [0, 0]
    param_rows = norm_param_rows(ctx, op, name) if not is_softmax else []
    param_tiles = [em.alloc((1, D), f32, "spad") for _ in param_rows]
    for src, dst in zip(param_rows, param_tiles):
        em.dma(src, z, dst, z, [1, D])

    def tile(r0: Index, tr: int) -> None:
        if kept2 is not None:
            em.vec("copy", x_tile, z, kept2, [r0, 0], tr, D)
        else:
            em.dma(x2, [r0, 0], x_tile, z, [tr, D])
        if is_log:  # x - m - ln(sum(exp(x - m)))
            em.vec("rmax", column, z, x_tile, z, tr, D)
            em.vec("sub", x_tile, z, x_tile, z, tr, D, column, z, bmode="col")
            em.vec("exp", y_tile, z, x_tile, z, tr, D)
            em.vec("rsum", column, z, y_tile, z, tr, D)
            em.vec("log", column, z, column, z, tr, 1)
            em.vec("sub", y_tile, z, x_tile, z, tr, D, column, z, bmode="col")
        elif is_softmax:
            em.vec("rmax", column, z, x_tile, z, tr, D)
            em.vec("sub", y_tile, z, x_tile, z, tr, D, column, z, bmode="col")
            em.vec("exp", y_tile, z, y_tile, z, tr, D)
            em.vec("rsum", column, z, y_tile, z, tr, D)
            em.vec("recip", column, z, column, z, tr, 1)
            em.vec("mul", y_tile, z, y_tile, z, tr, D, column, z, bmode="col")
        else:
            assert isinstance(op, g.NormOp)
            normalize(em, op, x_tile, y_tile, out_tile, column, param_tiles, tr, D)
        em.dma(out_tile, z, out2, [r0, 0], [tr, D])
        if TR >= M and trailing == 1 and latency_bound(ctx.hw):
            # the whole result in one tile: the GEMMs after it (a layer's q, k and v projections)
            # copy it instead of loading it back
            ctx.keep_on_chip(out2, out_tile, next_kernels=KEPT_NORM_READERS)

    em.tiles(M, TR, tile)
    if trailing > 1:
        with ctx.stage(what="transposed copy"):
            permute_copy(ctx, out2, (M // trailing, trailing, D), (0, 2, 1), final)


def _footprint(tr: int, d: int, narrow: bool, params: int) -> int:
    """x, y [TR, D] x2 (+ a bf16 output), a column x2, scale/bias rows."""
    return tr * d * (20 if narrow else 16) + tr * 8 + params * d * 4


def rows_choice(ctx: LoweringContext, op: Operation, M: int, D: int, narrow: bool,
                rows: int | None = None, from_chip: bool = False) -> tiling_cost.RowChoice:
    """The row tiling of `lower_rowwise`'s kernel for `op` on [M, D] (a bf16 output: `narrow`),
    `rows` given by hand or chosen by the cost model (also gemm.py's estimate of a norm
    epilogue lowered as a kernel of its own). `from_chip`: the rows are copied on the vector
    unit from the tile the kernel before kept, not loaded."""
    params = len(param_rows_of(op))
    copy = ctx.hw.vector.cost.get("copy", 1) if from_chip else 0
    choice = tiling_cost.choose_rows(ctx.hw, M, D, bytes_in=0 if from_chip else 4, bytes_out=(2 if narrow else 4),
                                     vec_cost=_row_vector_cost(ctx, op, params, True) + copy,
                                     column_cost=_row_vector_cost(ctx, op, params, False), live_tiles=3,
                                     override=rows, whole_row=True,
                                     footprint=lambda tr, d: _footprint(tr, d, narrow, params))
    choice.rows = min(choice.rows, M)
    return choice


def norm_param_rows(ctx: LoweringContext, op: g.NormOp, hint: str) -> list[SSAValue]:
    """The DRAM rows [1, D] of a norm's scale (and bias) over its D normalized elements: a
    compile-time one as a weight (`hint`.param), a runtime one of the normalized shape viewed."""
    shape = shape_of(op.input)
    axis = op.axis.value.data % len(shape)
    D = num_elements(shape[axis:])
    rows = []
    for param in param_rows_of(op):
        array = ctx.constant(param)
        if array is not None:
            row = np.ascontiguousarray(np.broadcast_to(array, shape[axis:]).reshape(1, D).astype(np.float32))
            rows.append(ctx.weight(f"{hint}.param", row, f32))
        elif num_elements(shape_of(param)) == D:
            rows.append(ctx.emitter.view(ctx.buffer(param), (1, D)))
        else:
            raise error(op, "a runtime scale/bias must have the normalized shape")
    return rows


def normalize(em, op: g.NormOp, x: SSAValue, y: SSAValue, out: SSAValue, column: SSAValue,
              params: list[SSAValue], tr: int, D: int, tail_columns: int | None = None) -> None:
    """out[:tr] = op(x[:tr]) (layer or rms norm over rows of D) with y a [tr, D] f32 temporary
    (it may be `out`), `column` [tr, 1] and the scale (and bias) rows `params` on chip; x is
    centred in place for layer_norm. The one instruction sequence of a norm: the norm kernel
    (`lower_rowwise`) and gemm.py's norm epilogue both emit it, so they agree bit for bit.
    `tail_columns`: the last passes (the scaling by the row statistic, the scale and bias rows)
    run block of columns by block, each block finished before the next: every element gets the
    same operations, and the next kernel's first k step can read the first block while the
    vector unit finishes the others (prefetch_hoist._operand_preparation)."""
    z = [0, 0]
    if isinstance(op, g.LayerNormOp):  # center the rows first
        em.vec("rsum", column, z, x, z, tr, D)
        em.vec("mul", column, z, column, z, tr, 1, bmode="imm", imm=1.0 / D)
        em.vec("sub", x, z, x, z, tr, D, column, z, bmode="col")
    em.vec("rdot", column, z, x, z, tr, D, x, z, bmode="tile")  # the rows' sums of squares
    em.vec("mul", column, z, column, z, tr, 1, bmode="imm", imm=1.0 / D)
    em.vec("add", column, z, column, z, tr, 1, bmode="imm", imm=op.epsilon.value.data)
    em.vec("rsqrt", column, z, column, z, tr, 1)
    step = tail_columns or D
    for c0 in range(0, D, step):
        c, w = [0, c0], min(step, D - c0)
        em.vec("mul", y, c, x, c, tr, w, column, z, bmode="col")
        if len(params) > 1:
            em.vec("mul", y, c, y, c, tr, w, params[0], c, bmode="row")
            em.vec("add", out, c, y, c, tr, w, params[1], c, bmode="row")
        else:
            em.vec("mul", out, c, y, c, tr, w, params[0], c, bmode="row")


def norm_vector_cost(ctx: LoweringContext, op: Operation) -> tuple[int, int]:
    """`normalize`'s vector cycles per `lanes` elements of its whole-tile instructions and
    per `lanes` rows of its column instructions."""
    params = len(param_rows_of(op))
    return _row_vector_cost(ctx, op, params, True), _row_vector_cost(ctx, op, params, False)


def param_rows_of(op: Operation) -> list[SSAValue]:
    """The scale (and bias) a norm multiplies (adds) row-wise; none for softmax."""
    if not isinstance(op, g.NormOp):
        return []
    has_bias = isinstance(op, g.LayerNormOp) and op.bias is not None
    return [op.scale] + ([op.bias] if has_bias else [])


# the vector instructions of one row tile in `lower_rowwise` (`tile`): (op, on the whole tile?)
_ROW_OPS = {
    "log_softmax": [("rmax", True), ("sub", True), ("exp", True), ("rsum", True), ("log", False), ("sub", True)],
    "softmax": [("rmax", True), ("sub", True), ("exp", True), ("rsum", True), ("recip", False), ("mul", True)],
    "layer_norm": [("rsum", True), ("mul", False), ("sub", True)],
    "norm": [("rdot", True), ("mul", False), ("add", False), ("rsqrt", False), ("mul", True)],
}


def _row_vector_cost(ctx: LoweringContext, op: Operation, params: int, whole: bool) -> int:
    """Vector-unit cycles per `lanes` elements of a row tile's whole-tile instructions (`whole`),
    or per `lanes` rows of its column instructions, from the target's per-op costs."""
    cost = ctx.hw.vector.cost
    kind = op.name.split(".")[1]
    ops = list(_ROW_OPS.get(kind, []))
    if kind in ("layer_norm", "rms_norm"):
        ops = (ops if kind == "layer_norm" else []) + _ROW_OPS["norm"] + [("mul", True)] + [("add", True)] * (params - 1)
    return sum(cost.get(name, 1) for name, on_tile in ops if on_tile == whole)


def _permuted(ctx: LoweringContext, x: SSAValue, shape: tuple[int, int, int]) -> SSAValue:
    """A DRAM copy of x viewed [M, K, T] as [M, T, K] (a loop nest of its own)."""
    with ctx.stage(what="transposed copy"):
        dst = ctx.emitter.alloc((shape[0], shape[2], shape[1]), f32, "dram")
        permute_copy(ctx, x, shape, (0, 2, 1), dst)
        return dst


def lower_batch_norm(ctx: LoweringContext, op: Operation) -> None:
    """y = x * k + (bias - mean * k), k = scale / sqrt(var + eps), per channel (dim 1)."""
    assert isinstance(op, g.BatchNormOp)
    values = [ctx.constant(v) for v in (op.scale, op.bias, op.mean, op.var)]
    if any(v is None for v in values):
        raise error(op, "batch_norm needs compile-time scale/bias/mean/var")
    scale, bias, mean, var = (np.asarray(a, np.float64) for a in values)
    k = scale / np.sqrt(var + op.epsilon.value.data)
    shift = bias - mean * k
    per_channel = (1, len(k)) + (1,) * (len(shape_of(op.input)) - 2)
    k32, shift32 = k.astype(np.float32).reshape(per_channel), shift.astype(np.float32).reshape(per_channel)
    out_shape = shape_of(op.output)
    batches, channels, pixels = (num_elements(out_shape[:1]), num_elements(out_shape[1:2]),
                                 num_elements(out_shape[2:]))
    if pixels == 1:  # [N, C] (BatchNorm1d on features): rows of C, the parameters row vectors
        # (a [C, 1] column tile per sample, a loop of DRAM round trips, otherwise)
        _scale_and_shift(ctx, op, k32.reshape(1, channels), shift32.reshape(1, channels), 1, batches, channels,
                         per_row=False)
    else:
        _scale_and_shift(ctx, op, k32.reshape(channels, 1), shift32.reshape(channels, 1), batches, channels, pixels,
                         per_row=True)


def _scale_and_shift(ctx: LoweringContext, op: Operation, k: np.ndarray, shift: np.ndarray, batches: int,
                     rows_total: int, cols_total: int, per_row: bool) -> None:
    """y = x * k + shift on x viewed [batches * rows, cols] in row tiles per batch entry; k and
    shift are [rows, 1] columns (`bmode=col`, a channel per row) or [1, cols] rows (`bmode=row`)."""
    em = ctx.emitter
    out2 = em.view(ctx.output_buffer(op.output), (batches * rows_total, cols_total))
    x2 = em.view(ctx.buffer(op.input), (batches * rows_total, cols_total))
    scale, shifts = ctx.weight("bn.scale", k.copy(), f32), ctx.weight("bn.shift", shift.copy(), f32)
    name = ctx.kernel_name()
    override = ctx.override(name, 1)
    choice = tiling_cost.choose_rows(ctx.hw, rows_total, cols_total, bytes_in=4, bytes_out=4, vec_cost=2, live_tiles=3,
                                     override=(override[0] if override else None),  # x x2, scale/shift x2:
                                     footprint=lambda tr, tc: tr * tc * 8 + 2 * (tr if per_row else tc) * 8)
    ctx.predict(choice.cycles)
    ctx.debug(tiling_cost.describe_rows(name, "batch_norm", "x".join(map(str, shape_of(op.output))), choice))
    x_tile = em.alloc((choice.rows, choice.cols), f32, "spad", 2)
    param_shape = (choice.rows, 1) if per_row else (1, choice.cols)
    scale_tile, shift_tile = em.alloc(param_shape, f32, "spad", 2), em.alloc(param_shape, f32, "spad", 2)
    z = [0, 0]

    def body(b: Index, r0: Index, rows: int, c0: Index, cols: int) -> None:
        row = em.add(em.mul(b, rows_total), r0)
        em.dma(x2, [row, c0], x_tile, z, [rows, cols])
        at, box = ([r0, 0], [rows, 1]) if per_row else ([0, c0], [1, cols])
        em.dma(scale, at, scale_tile, z, box)
        em.dma(shifts, at, shift_tile, z, box)
        mode = "col" if per_row else "row"
        em.vec("mul", x_tile, z, x_tile, z, rows, cols, scale_tile, z, bmode=mode)
        em.vec("add", x_tile, z, x_tile, z, rows, cols, shift_tile, z, bmode=mode)
        em.dma(x_tile, z, out2, [row, c0], [rows, cols])

    em.range(batches, lambda b: em.tiles(rows_total, choice.rows, lambda r0, rows: em.tiles(
        cols_total, choice.cols, lambda c0, cols: body(b, r0, rows, c0, cols))))


def prologue_params(ctx: LoweringContext, norm: g.RmsNormOp, M: int, K: int) -> tuple[SSAValue, SSAValue]:
    """The scratchpad tiles of an rms_norm prologue of a resident packed product
    (packed_gemm.py): (row sums of squares [M, 1], the scale row [1, K], DMAd here: it reads no
    value an earlier kernel writes)."""
    em = ctx.emitter
    scale = ctx.constant(norm.scale)
    if scale is not None:
        row = np.ascontiguousarray(np.broadcast_to(scale, (K,)).reshape(1, K).astype(np.float32))
        src = ctx.weight("rms_norm.param", row, f32)
    else:
        src = em.view(ctx.buffer(norm.scale), (1, K))
    gamma = em.alloc((1, K), f32, "spad")
    em.dma(src, [0, 0], gamma, [0, 0], [1, K])
    return em.alloc((M, 1), f32, "spad"), gamma


def normalize_rows(em, norm: g.RmsNormOp, params: tuple[SSAValue, SSAValue], x: SSAValue, x0: int,
                   M: int, K: int) -> None:
    """x[x0:x0+M] = rms_norm(x[x0:x0+M]) in place: `lower_rowwise`'s instructions in its
    order (so the rows are bit for bit the norm kernel's)."""
    column, gamma = params
    z, at = [0, 0], [x0, 0]
    em.vec("rdot", column, z, x, at, M, K, x, at, bmode="tile")  # the rows' sums of squares
    em.vec("mul", column, z, column, z, M, 1, bmode="imm", imm=1.0 / K)
    em.vec("add", column, z, column, z, M, 1, bmode="imm", imm=norm.epsilon.value.data)
    em.vec("rsqrt", column, z, column, z, M, 1)
    em.vec("mul", x, at, x, at, M, K, column, z, bmode="col")
    em.vec("mul", x, at, x, at, M, K, gamma, z, bmode="row")
