"""graph.linear / graph.matmul whose weight is `graph.dequantize_blocks` of a `graph.weight`:
the blocks stay packed in DRAM and are expanded on chip next to the matrix unit.

The pattern (docs/gguf.md): `linear(x, dequantize_blocks(W))` with W the GGUF bytes of an
[N, K] matrix (blocks of 32 along K), or `matmul(x, dequantize_blocks(W)) {transpose_b}`,
the same product. The product needs W^T (k x n tiles for `mx.loadw`), whose blocks run down
the columns: `infer.target.qblocks.split_blocks(raw, fmt, N, K, "col")` turns the GGUF bytes
into a codes plane and a scales plane at compile time (a byte permutation: q4_1 stays 5 bits
per weight), cut here into tile-major order [N/TN][K/32 rows of the tile][TN] so that each
tile's codes and scales are one contiguous DMA each. Both planes are new weights of the
module's weight store (ui8 / i8 codes, f16 scales); the dense weight is never materialised.

Loop nest as gemm.py's (m -> n -> k): per n tile one DMA brings the scales of its whole k
extent; per k step the activation tile and the codes tile are DMAd first (so tile-to-npu
software-pipelines them one iteration ahead: docs/codegen.md), the activations are split to
bf16 (hi and lo on a decode's few rows: `two_pass_activations`), `tile.dequant` expands the
codes into the bf16 weight tile (bf16) or an f32 tile split into hi/lo (fp32 emulation), and
`emit_packed_product` feeds the array. The expanded values are exactly those of the graph interpreter's
`dequantize_blocks` (then rounded to bf16 once, as for any weight), so the tile program
agrees with the graph within the usual bf16/fp32 tolerance and with the simulator bit for bit.

Tile sizes: tiling_cost.choose_gemm with this kernel's footprint and TK a multiple of the
block that divides K (no remainder k tile, whose use outside the k loop would stop the buffer
rotation on it), re-ranked with the latencies the cost model does not count
(`_rank_by_latency`). A product that is not resident streams its (n, k) weight steps through
explicit rings (`packed_stream`: loads three deep where the step count allows, expansions two)
unless its k tile count fits no ring group (the per-step path below, whose rings are the tile
dialect's two-deep `buffers`).

RMSNorm prologue (graph-fuse-norm-prologue): a kernel `rms_norm -> linear` whose product is
resident loads the norm's input rows instead of the normalised ones and normalises them in the
activations' staging tile with the norm kernel's own vector instructions (bit for bit its
result); the normalised rows never go to DRAM. A tiled product leaves the prologue to the
driver (a norm kernel shared by the products that read it).

Anything else (a matmul without transpose_b, batched weights, a packed tensor that is not a
weight) goes to gemm.lower_gemm, which folds the dequantization to a dense weight.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, IntegerType, Signedness, StringAttr, bf16, f16, f32, i8, i64
from xdsl.dialects import func
from xdsl.ir import BlockArgument, Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.dialects.block_quant import block_format
from infer.dialects.dtypes import num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile import gemm, norms, packed_stream, product_consumers
from infer.passes.graph_to_tile.builder import Emitter, Index, tile_extents
from infer.passes.graph_to_tile.context import LoweringContext, error
from infer.passes.graph_to_tile.elementwise import (TileFrame, apply_epilogue, epilogue_cost, epilogue_footprint,
                                                    preload_operands)
from infer.passes.graph_to_tile.matrix_unit import Bf16Tile, alloc_bf16_tile, emit_tile_product, split_on_chip
from infer.target import isa
from infer.target.qblocks import split_blocks
from infer.target.sim_core import dequant_occupancy

ui8 = IntegerType(8, Signedness.UNSIGNED)
QBLOCK = isa.QBLOCK
#: ctx.derived key: scratchpad bytes of the resident products lowered so far in this nest
CHAIN_BYTES = ("resident chain bytes",)
#: buffers of the per-step path's codes ring (the tile dialect allows 1 or 2: double buffering)
WEIGHT_DEPTH = 2
#: streamed estimates this close to the fastest count as ties in `_rank_by_latency`
NEAR = 0.02


def packed_weight_of(op: Operation) -> tuple[g.DequantizeBlocksOp, g.WeightOp] | None:
    """(dequantize_blocks, packed weight) when `op` multiplies by a 2-D packed GGUF weight in
    the x @ W^T form, else None."""
    if isinstance(op, g.LinearOp):
        weight = op.weight
    elif isinstance(op, g.MatmulOp) and op.transpose_b.value.data and not op.transpose_a.value.data:
        weight = op.rhs
        if len(shape_of(op.lhs)) < 2:
            return None
    else:
        return None
    return packed_source(weight)


def packed_source(value: SSAValue) -> tuple[g.DequantizeBlocksOp, g.WeightOp] | None:
    """(dequantize_blocks, packed weight) when `value` (or what a graph.kernel block argument
    stands for) is a 2-D packed GGUF weight expanded by dequantize_blocks, else None."""
    dq = _outside_kernel(value).owner
    if not isinstance(dq, g.DequantizeBlocksOp) or len(shape_of(value)) != 2:
        return None
    packed = dq.input.owner
    if not isinstance(packed, g.WeightOp):
        return None
    return dq, packed


def _outside_kernel(value: SSAValue) -> SSAValue:
    """The value a graph.kernel region's block argument stands for (graph-fuse wraps the
    matmul in a kernel whose inputs are its operands), or `value` itself."""
    if isinstance(value, BlockArgument):
        kernel = value.block.parent_op()
        if isinstance(kernel, g.KernelOp):
            return kernel.inputs[value.index]
    return value


def lower_gemm_or_packed(ctx: LoweringContext, op: Operation, epilogue: Sequence[Operation],
                         result: SSAValue) -> None:
    """The lowering table's entry for linear and matmul: packed GGUF weights here, the rest
    by gemm.lower_gemm."""
    found = packed_weight_of(op)
    if found is None:
        gemm.lower_gemm(ctx, op, epilogue, result)
    elif epilogue and isinstance(epilogue[-1], g.NormOp):  # a norm epilogue: a kernel of its own after
        lower_packed_gemm(ctx, op, epilogue[:-1], epilogue[-1].operands[0], *found)
        ctx.defer(epilogue[-1])
    else:
        lower_packed_gemm(ctx, op, epilogue, result, *found)


def _norm_prologue_of(op: Operation) -> g.RmsNormOp | None:
    """The rms_norm (over the last dim) in front of `op` in its kernel that makes `op`'s
    activations, or None."""
    norm = op.operands[0].owner
    if not isinstance(norm, g.RmsNormOp) or norm.parent_block() is not op.parent_block():
        return None
    rank = len(shape_of(norm.input))
    return norm if norm.axis.value.data % rank == rank - 1 else None


def takes_prologue(ctx: LoweringContext, op: Operation, prologue: Sequence[Operation],
                   epilogue: Sequence[Operation], result: SSAValue) -> bool:
    """The lowering table's prologue check for linear/matmul: an rms_norm prologue of a
    product on packed weights (`takes_norm_prologue`), an activation prologue of a product on
    dense ones (`gemm.takes_activation_prologue`)."""
    if packed_weight_of(op) is None:
        return gemm.takes_activation_prologue(ctx, op, prologue)
    return takes_norm_prologue(ctx, op, prologue, epilogue, result)


def takes_norm_prologue(ctx: LoweringContext, op: Operation, prologue: Sequence[Operation],
                        epilogue: Sequence[Operation], result: SSAValue) -> bool:
    """The lowering table's prologue check for linear/matmul: True (and the norm recorded for
    lower_packed_gemm) when the prologue is the rms_norm of the activations and the product
    on packed weights is resident (then normalised on chip)."""
    found = packed_weight_of(op)
    norm = _norm_prologue_of(op)
    if found is None or norm is None or list(prologue) != [norm]:
        return False
    if ctx.session.overrides.get(f"kernel{ctx.session.counter}") is not None:
        return False  # tiles given by hand: the norm stays a kernel of its own
    K = shape_of(norm.input)[-1]
    if ctx.constant(norm.scale) is None and num_elements(shape_of(norm.scale)) != K:
        return False
    M, N, K, (TM, TN, TK) = _choose_tiles(ctx, op, found[0], epilogue, result, None, prologue=True)
    if not holds_whole(M, N, K, (TM, TN, TK)):
        return False
    ctx.derived[("norm prologue", op)] = norm
    return True


def _plane_weights(ctx: LoweringContext, hint: str, raw: np.ndarray, fmt: str, N: int, K: int,
                   TN: int, Kp: int) -> tuple[SSAValue, SSAValue]:
    """The codes and scales planes of W^T in tile-major order, as tile.weights: codes
    [N/TN * Kp/2 (q8_0: Kp)][TN] ui8/i8, scales [N/TN * Kp/32][TN * entry / 2] f16 (zero
    padding past N and K: zero codes and scales, which expand to zeros the tiles never use)."""
    key = ("packed planes", hint, TN, Kp)
    if key in ctx.derived:  # planned by a look-ahead (_lower_resident's prefetch)
        return ctx.derived[key]
    codes, scales = split_blocks(raw, fmt, N, K, "col")  # (K/2 or K) x N, K/32 x N*entry bytes
    entry = isa.qscale_bytes(isa.QFORMAT_CODE[fmt])
    Np = -(-N // TN) * TN
    tiles = Np // TN

    def tile_major(plane: np.ndarray, rows: int, width: int) -> np.ndarray:
        padded = np.zeros((rows, Np * width), np.uint8)
        padded[: plane.shape[0], : plane.shape[1]] = plane.view(np.uint8)
        return np.ascontiguousarray(padded.reshape(rows, tiles, TN * width).transpose(1, 0, 2)
                                    .reshape(tiles * rows, TN * width))

    codes_tm = tile_major(codes, Kp * codes.shape[0] // K, 1)
    scales_tm = tile_major(scales, Kp // QBLOCK, entry).view(np.float16)
    code_elem = i8 if fmt == "q8_0" else ui8
    if fmt == "q8_0":
        codes_tm = codes_tm.view(np.int8)
    planes = (plane_weight(ctx, hint + ".codes", codes_tm, code_elem),
              plane_weight(ctx, hint + ".scales", scales_tm, f16))
    ctx.derived[key] = planes
    return planes


def plane_weight(ctx: LoweringContext, hint: str, data: np.ndarray, elem) -> SSAValue:
    """A codes or scales plane as a DRAM `tile.weight` of element type `elem` (ui8/i8, f16),
    stored as it is (LoweringContext.weight converts to f32/bf16/i32/i8 only)."""
    name = ctx.store.add(hint, data)
    return ctx.emitter.hoist(t.WeightOp(name, t.memref(data.shape, elem, "dram"))).results[0]


def _choose_tiles(ctx: LoweringContext, op: Operation, dq: g.DequantizeBlocksOp, epilogue: Sequence[Operation],
                  result: SSAValue, name: str | None,
                  prologue: bool = False) -> tuple[int, int, int, tuple[int, int, int]]:
    """(M, N, K, (TM, TN, TK)) of a packed product: the cost model's choice re-ranked by
    exposed latencies. `name` None: a look-ahead (no override, no debug output). `prologue`:
    an rms_norm prologue on chip (its scale row and column of sums of squares in the footprint)."""
    hw = ctx.hw
    fmt_name = dq.block_format.data
    fmt = block_format(fmt_name)
    N, K = shape_of(dq.output)
    bias = op.bias if isinstance(op, g.LinearOp) else None
    x = op.input if isinstance(op, g.LinearOp) else op.lhs  # type: ignore[attr-defined]
    M = num_elements(shape_of(x)[:-1])
    out_shape = shape_of(result)
    frame_groups = ((), tuple(out_shape[:-1]), (N,))
    copies = ctx.bf16_copies
    code_bytes = fmt.bits / 8  # per weight
    entry = isa.qscale_bytes(isa.QFORMAT_CODE[fmt_name])
    epilogue_bytes = epilogue_footprint(ctx, epilogue, result, [op.results[0]], frame_groups)

    def footprint(tm: int, tn: int, tk: int) -> tuple[int, int]:
        extra = (2 * tn * 4 if bias is not None else 0) + (K * 4 + M * 4 if prologue else 0)
        if streamed(tk):
            return packed_stream.footprint(ctx, M, N, K, tm, tn, tk, fmt_name, two_pass_activations(ctx, tm), extra,
                                           epilogue_bytes)
        extra += sum(epilogue_bytes(a, b) for a in tile_extents(M, tm) for b in tile_extents(N, tn))
        # x staging f32 + bf16 hi(/lo), double buffered; codes and scales rings; the expanded
        # weight bf16 hi(/lo) double buffered (+ an f32 expansion tile for fp32 emulation)
        spad = 2 * tm * tk * (4 + 2 * (2 if copies == 2 or two_pass_activations(ctx, tm) else 1))
        spad += WEIGHT_DEPTH * int(tk * tn * code_bytes) + 2 * -(-K // tk) * tk // QBLOCK * tn * entry
        spad += 2 * tk * tn * 2 * copies + (2 * tk * tn * 4 if copies == 2 else 0)
        # a resident product in two passes stacks them: a [2 tm, tn] accumulator and the [tm, tn]
        # tile its halves are summed into (_lower_resident)
        stacked = holds_whole(M, N, K, (tm, tn, tk)) and two_pass_activations(ctx, tm)
        return spad + extra, (3 if stacked else 2) * tm * tn * 4

    def streamed(tk: int) -> bool:  # lower_packed_gemm's choice between the tiled paths
        return K % tk == 0 and packed_stream.ring_depths(K // tk) is not None

    produced = {r for e in epilogue for r in e.results}
    spec = tiling_cost.GemmSpec(
        lhs_bytes=4, lhs_split=True, rhs_bytes=code_bytes + entry / QBLOCK, rhs_split=copies == 2,  # type: ignore[arg-type]
        passes=ctx.matmul_passes, batch=1,
        epi_cost=epilogue_cost(ctx, epilogue) + (1 if bias is not None else 0),
        epi_tiles=sum(1 for e in epilogue for v in e.operands
                      if v not in produced and v is not op.results[0] and shape_of(v) == out_shape),
        footprint=footprint, schedule=False)
    # k tiles: whole blocks that divide K, so the k loop has no remainder tile after it (a use
    # outside the loop would stop tile-to-npu from rotating the weight buffers on it)
    tk_cands = [c for c in range(QBLOCK, K + 1, QBLOCK) if K % c == 0]
    choice = tiling_cost.choose_gemm(hw, M, N, K, spec, tk_cands=tk_cands,
                                     override=ctx.override(name, 3) if name is not None else None)
    if not choice.overridden:
        cost_model_tiles = choice.tiles
        choice = _rank_by_latency(ctx, M, N, K, fmt_name, choice, streamed)
        if choice.tiles != cost_model_tiles and name is not None:
            ctx.debug(f"[graph-to-tile] {name}:   packed weights: {'x'.join(map(str, choice.tiles))} instead of "
                      f"{'x'.join(map(str, cost_model_tiles))} (latencies counted: _rank_by_latency)")
    if name is not None:
        ctx.debug(tiling_cost.describe_choice(name, op.name.split(".")[1] + f" ({fmt_name} packed)",
                                              f"M={M} N={N} K={K}", choice))
    return M, N, K, choice.tiles


def lower_packed_gemm(ctx: LoweringContext, op: Operation, epilogue: Sequence[Operation], result: SSAValue,
                      dq: g.DequantizeBlocksOp, packed: g.WeightOp) -> None:
    em = ctx.emitter
    fmt_name = dq.block_format.data
    fmt = block_format(fmt_name)
    x = op.input if isinstance(op, g.LinearOp) else op.lhs  # type: ignore[attr-defined]
    bias = op.bias if isinstance(op, g.LinearOp) else None
    out_shape = shape_of(result)
    norm = ctx.derived.pop(("norm prologue", op), None)
    name = ctx.kernel_name()
    M, N, K, (TM, TN, TK) = _choose_tiles(ctx, op, dq, epilogue, result, name, prologue=norm is not None)
    resident = holds_whole(M, N, K, (TM, TN, TK))
    if norm is not None and not resident:  # (takes_norm_prologue chose the same tiles)
        raise error(op, f"{name}: an rms_norm prologue needs a resident product")
    xv = em.view(ctx.buffer(norm.input if norm is not None else x), (M, K))
    frame_groups = ((), tuple(out_shape[:-1]), (N,))
    copies = ctx.bf16_copies
    entry = isa.qscale_bytes(isa.QFORMAT_CODE[fmt_name])
    if TK % QBLOCK:
        raise error(op, f"{name}: the k tile {TK} of a {fmt_name} weight must be a multiple of {QBLOCK}")
    Kp = -(-K // TK) * TK
    codes_w, scales_w = _plane_weights(ctx, packed.weight_key, np.asarray(ctx.store.get(packed.weight_key)),
                                       fmt_name, N, K, TN, Kp)
    code_rows = TK * fmt.bits // 8  # codes-plane rows of one k tile
    code_rows_p = Kp * fmt.bits // 8
    bias_row = em.view(ctx.buffer(bias), (1, N)) if bias is not None else None
    if resident:
        from infer.passes.graph_to_tile import packed_siblings

        # (imported here: packed_siblings uses this module's helpers)
        packed_siblings.start_nest(ctx, op)
        others = packed_siblings.siblings(ctx, op, norm, M, K)
        after = packed_siblings.consumers(ctx, op, M, N)
        out2 = em.view(ctx.output_buffer(result), (M, N)) \
            if after is None and packed_siblings.needed_outside(ctx, op, others) else None
        kernel = op.parent_op()
        if isinstance(kernel, g.KernelOp) and result in ctx.buffers:  # chained groups may read it
            ctx.buffers[kernel.outputs[0]] = ctx.buffers[result]
        first = ResidentProduct(op, epilogue, result, fmt_name, N, codes_w, scales_w, bias_row, out2, frame_groups,
                                after=after)
        _lower_resident(ctx, [first, *others], xv, M, K, norm)
        return
    spec = TiledProduct(op, epilogue, result, fmt_name, xv, em.view(ctx.output_buffer(result), (M, N)), bias_row,
                         codes_w, scales_w, frame_groups, M, N, K, TM, TN, TK)
    full_k, rem_k = divmod(K, TK)
    if not rem_k and packed_stream.ring_depths(full_k) is not None:
        packed_stream.lower_streamed(ctx, spec)
        return
    # local buffers
    two_pass = two_pass_activations(ctx, TM)
    x_staging = em.alloc((TM, TK), f32, "spad", 2)
    x_tile = Bf16Tile(em.alloc((TM, TK), bf16, "spad", 2),
                      em.alloc((TM, TK), bf16, "spad", 2) if copies == 2 or two_pass else None)
    codes_tile = em.alloc((code_rows, TN), i8 if fmt_name == "q8_0" else ui8, "spad", WEIGHT_DEPTH)
    scales_strip = em.alloc((Kp // QBLOCK, TN * entry // 2), f16, "spad", 2)
    w_tile = alloc_bf16_tile(ctx, TK, TN)
    w_expanded = em.alloc((TK, TN), f32, "spad", 2) if copies == 2 else None
    acc = em.alloc((TM, TN), f32, "acc", 2)
    z = [0, 0]

    def k_loop(m0: Index, tm: int, n_tile: Index, tn: int) -> None:
        # the scales of the whole k extent of this n tile: one DMA, issued an n tile ahead
        em.dma(scales_w, [em.mul(n_tile, Kp // QBLOCK), 0], scales_strip, z, [K // QBLOCK, tn * entry // 2])
        em.fill(acc, z, tm, tn, 0.0)

        def k_step(k_tile: Index, k0: Index, tk: int) -> None:
            # loads first, each with its own first consumer: tile-to-npu software-pipelines
            # them (issued one iteration ahead; docs/codegen.md)
            em.dma(xv, [m0, k0], x_staging, z, [tm, tk])
            # the k loop counts tiles, so the codes row is affine in it
            code_row = em.add(em.mul(n_tile, code_rows_p), em.mul(k_tile, code_rows))
            em.dma(codes_w, [code_row, 0], codes_tile, z, [tk * fmt.bits // 8, tn])
            split_on_chip(em, x_staging, x_tile, tm, tk)
            target = w_expanded if w_expanded is not None else w_tile.hi
            emit_dequant(em, target, codes_tile, [0, 0], scales_strip, [em.mul(k_tile, TK // QBLOCK), 0], tk, tn,
                         fmt_name)
            if w_expanded is not None:
                split_on_chip(em, w_expanded, w_tile, tk, tn)
            emit_packed_product(ctx, x_tile, w_tile, acc, tm, tk, tn)

        if full_k == 1:
            k_step(0, 0, TK)
        elif full_k > 1:
            em.loop(0, full_k, 1, lambda j: k_step(j, em.mul(j, TK), TK))
        if rem_k:
            k_step(full_k, full_k * TK, rem_k)

    _emit_tiles(ctx, spec, acc, k_loop)


@dataclass(frozen=True)
class TiledProduct:
    """A packed product that is not resident (tiles of TM x TN, k in steps of TK): what both
    tiled emitters read."""

    op: Operation
    epilogue: Sequence[Operation]
    result: SSAValue
    fmt_name: str
    xv: SSAValue  # the activations [M, K] in DRAM
    out2: SSAValue  # the result [M, N] in DRAM
    bias_row: SSAValue | None
    codes_w: SSAValue
    scales_w: SSAValue
    frame_groups: tuple
    M: int
    N: int
    K: int
    TM: int
    TN: int
    TK: int


def _emit_tiles(ctx: LoweringContext, spec: TiledProduct, acc: SSAValue,
                k_loop: Callable[[Index, int, Index, int], None]) -> None:
    """The m -> n tile loops of a tiled product around `k_loop(m0, tm, n_tile, tn)`, which
    leaves the tile's product in `acc`; then per tile the bias, the epilogue and the store."""
    finish = tile_finisher(ctx, spec)

    def over_n(m0: Index, tm: int) -> None:
        def tile_body(n_tile: Index, n0: Index, tn: int) -> None:
            k_loop(m0, tm, n_tile, tn)
            finish(acc, m0, tm, n0, tn)

        ctx.emitter.counted_tiles(spec.N, spec.TN, tile_body)

    ctx.emitter.tiles(spec.M, spec.TM, over_n)


def tile_finisher(ctx: LoweringContext, spec: TiledProduct) -> Callable[[SSAValue, Index, int, Index, int], None]:
    """finish(acc, m0, tm, n0, tn): an output tile's bias, epilogue and store."""
    em = ctx.emitter
    z = [0, 0]
    bias_tile = em.alloc((1, spec.TN), f32, "spad", 2) if spec.bias_row is not None else None

    def finish(acc: SSAValue, m0: Index, tm: int, n0: Index, tn: int) -> None:
        if spec.bias_row is not None and bias_tile is not None:
            em.dma(spec.bias_row, [0, n0], bias_tile, z, [1, tn])
            em.vec("add", acc, z, acc, z, tm, tn, bias_tile, z, bmode="row")
        frame = TileFrame(*spec.frame_groups, 0, m0, n0, tm, tn)
        tile = apply_epilogue(ctx, spec.epilogue, {spec.op.results[0]: acc}, frame, spec.result)
        em.dma(tile, z, spec.out2, [m0, n0], [tm, tn])

    return finish


def holds_whole(M: int, N: int, K: int, tiles: tuple[int, int, int]) -> bool:
    """Whether tiles (TM, TN, TK) hold the whole [M, K] x [K, N] product in one tile: a
    resident product (`_lower_resident`)."""
    tm, tn, tk = tiles
    return M <= tm and N <= tn and K == tk


def two_pass_activations(ctx: LoweringContext, rows: int) -> bool:
    """Whether a bf16 packed product on `rows` activation rows takes them as two bf16 passes,
    hi = bf16(x) and lo = bf16(x - hi), through each loaded weight tile (the weights stay one
    bf16 pass). A second pass costs `rows` more streamed rows per weight tile and no weight
    load (tile-to-npu skips the `mx.loadw` of the tile still loaded), so it is taken while both
    passes stream within the next tile's weight load with room to spare (the array
    double-buffers its weights): 2 rows < an array-sized bf16 tile's load cycles (16 on both
    configs: decode steps up to batch 7; at 8 the array has no slack left and edge's batch-8
    step took 32 % more cycles; a prefill chunk's 32 rows stay one pass). It removes the
    activations' bf16 rounding, half the rounding of a bf16 product: SmolLM2's bf16 decode
    logits against transformers (docs/paged-kv.md)."""
    if ctx.bf16_copies != 1:  # fp32 emulation splits both operands anyway
        return False
    hw = ctx.hw.matrix
    load_cycles = hw.rows * hw.cols * 2 // hw.weight_load_bytes_per_cycle
    return 2 * rows < load_cycles


def emit_packed_product(ctx: LoweringContext, lhs: Bf16Tile, rhs: Bf16Tile, acc: SSAValue, rows: int, depth: int,
                        width: int, *, lhs_at: tuple[Index, Index] = (0, 0), rhs_at: tuple[Index, Index] = (0, 0),
                        overwrite: bool = False, stacked: bool = False) -> None:
    """acc[:rows, :width] (+)= lhs @ rhs of a packed product: `matrix_unit.emit_tile_product`,
    except for bf16 activations in two passes (`two_pass_activations`: lhs.lo set, rhs.lo
    not), where each array-sized weight box takes the hi rows, then the lo rows (the second
    matmul reuses the loaded weight tile). `stacked`: lhs holds the lo rows right below the hi
    rows (`lhs_at` + rows, one tile): each weight box takes all 2 x rows in one matmul into
    acc[:2 * rows], whose two halves the caller adds (one matrix instruction per weight tile
    instead of two: the array's in-order queue issues the next `mx.loadw` one cycle after a
    tile's last matmul starts, so a batch-1 GEMV kept the weight path idle 2 cycles a tile)."""
    if lhs.lo is None or rhs.lo is not None:
        emit_tile_product(ctx, lhs, rhs, acc, rows, depth, width, lhs_at=lhs_at, rhs_at=rhs_at, overwrite=overwrite)
        return
    em = ctx.emitter
    array_rows, array_cols = ctx.hw.matrix.rows, ctx.hw.matrix.cols
    passes = ((lhs.hi, 2 * rows),) if stacked else ((lhs.hi, rows), (lhs.lo, rows))

    def product(k0: Index, k: int, n0: Index, n: int, first: bool = False) -> None:
        lhs_i = [lhs_at[0], em.add(lhs_at[1], k0)]
        rhs_i = [em.add(rhs_at[0], k0), em.add(rhs_at[1], n0)]
        for i, (part, m) in enumerate(passes):
            em.matmul(part, lhs_i, rhs.hi, rhs_i, acc, [0, n0], m, k, n, accumulate=i > 0 or not first)

    # as emit_tile_product: depth outer, the first depth step (overwriting) before the rest
    first_depth = min(depth, array_rows) if overwrite else 0
    if overwrite:
        em.tiles(width, array_cols, lambda n0, n: product(0, first_depth, n0, n, True))
    em.tiles(depth - first_depth, array_rows,
             lambda k0, k: em.tiles(width, array_cols, lambda n0, n: product(em.add(k0, first_depth), k, n0, n)))


def _chunk_rows(K: int, steps: int = 3) -> int:
    """Rows of W^T expanded per step of a resident product: the smallest multiple of the block
    that divides K in at most `steps` steps. Three steps use the first step's tile and the two
    halves of the double-buffered one once each: no step waits for the array to release a
    buffer (a release comes a fill/drain latency after the step's last matmul, longer than a
    step of a decode-sized matrix)."""
    return min(c for c in range(QBLOCK, K + 1, QBLOCK) if K % c == 0 and K // c <= steps)


@dataclass
class ResidentProduct:
    """One product of `_lower_resident`: its anchor, epilogue and result, its planes, and where
    its result goes (`out2` None: it stays on chip, read only by later products' epilogues,
    whose block arguments `on_chip` lists as index of the product that makes them)."""

    op: Operation
    epilogue: Sequence[Operation]
    result: SSAValue
    fmt_name: str
    N: int
    codes_w: SSAValue
    scales_w: SSAValue
    bias_row: SSAValue | None
    out2: SSAValue | None
    frame_groups: tuple
    on_chip: dict[SSAValue, int] = field(default_factory=dict)
    after: product_consumers.Consumers | None = None  # rotary / KV append done on its tile


def _lower_resident(ctx: LoweringContext, products: Sequence[ResidentProduct], xv: SSAValue | None, M: int, K: int,
                    norm: g.RmsNormOp | None = None, x_tile_src: SSAValue | None = None) -> None:
    """Whole products in one tile each (decode-shaped: M rows of a small batch) on the same
    activations `xv` [M, K] (several: packed_siblings.py's group, e.g. q/k/v or gate/up, loaded,
    normalised and split once): cross-kernel weight prefetch and an expansion overlapped with
    the matrix unit.

    * The codes and scales planes of the first product are DMAd first, then the activations,
      then the other products' planes: the weight loads read no value an earlier kernel writes,
      so the load engine runs them while the previous kernel still computes (only the
      activations wait for its store).
    * W^T is expanded in up to three straight-line steps of KC rows (`_chunk_rows`), each
      into its own rows of the weight tile, the first before the activations' conversion (the
      vector unit runs in order: behind it the expansion would wait for the previous kernel's
      store) and step j+1 (or the next product's step 0) before step j's matmuls in program
      order (behind them, the front end would dispatch it only once the 8-deep matrix queue
      had taken them all), so `vec.dequant` of step j+1 overlaps the array's
      `mx.loadw`/matmuls of step j. (In a loop the tile's rows would be one hull and every
      step would wait for the previous one's matmuls.) A product's epilogue follows the next
      product's first matmuls, so the vector unit does not wait for the array's drain.
    * Consecutive resident products use alternate halves of buffers allocated twice as large
      (`LoweringContext.resident_products` counts them): the planner gives the next kernel the
      same bytes, and with one half each the next kernel's weight DMAs and expansion do not wait
      for this kernel's readers of those bytes (write-after-read). The first matmul overwrites
      the accumulator (no fill, which would wait for the previous kernel's store of it).
    * `norm`: an rms_norm prologue: `xv` holds the norm's input rows, normalised in the staging
      tile (`norms.normalize_rows`) before the split.
    * The activations are copied from a tile the kernel before left on chip when it recorded
      one for `xv` (`LoweringContext.keep_on_chip`: paged attention's output), not loaded; the
      epilogues' DRAM operands (a residual) are DMAd with the activations
      (`elementwise.preload_operands`), not after the last matmul.
    * Write-after-read waits on in-flight DMAs: a result tile stored to DRAM stays live into
      the next kernel (`Emitter.live_into_next`), and a chained group's buffers and the planes
      `_prefetch_next` loads get bytes apart from the group before
      (`Emitter.live_from_previous`).
    * `x_tile_src`: the activations are an earlier group's result tile (packed_siblings.chained:
      o -> gate/up -> down -> q/k/v), copied into the staging tile instead of loaded (`xv`
      None); after its last product the next chained group is lowered the same way."""
    em = ctx.emitter
    KC = _chunk_rows(K)
    steps = K // KC
    z = [0, 0]
    copies = ctx.bf16_copies
    head = x_tile_src is None  # the kernel's first group (chained groups live in the same nest)
    if head:
        ctx.derived[CHAIN_BYTES] = 0
    spad_bytes = {"f32": 4, "bf16": 2, "f16": 2, "ui8": 1, "i8": 1}

    def alloc(shape: tuple[int, int], elem, space: str = "spad") -> SSAValue:
        buffer = em.alloc(shape, elem, space)
        if space == "spad":
            ctx.derived[CHAIN_BYTES] += shape[0] * shape[1] * spad_bytes[str(elem)]
            if not head:
                # a chained group's buffers get bytes apart from the group before (its weight
                # planes and expanded tiles): its early plane DMAs and first expansion then
                # wait for nothing the group before still reads
                em.live_from_previous(buffer)
        return buffer

    x_rows = 2 * M if head else M
    x0 = (ctx.resident_products % 2) * M if head else 0
    x_staging = alloc((x_rows, K), f32)
    # bf16 in two passes: hi and lo stacked in one tile, hi rows [xh, xh + M) and lo rows the M
    # below them, so each weight tile takes one matmul of 2M rows (emit_packed_product)
    stacked = two_pass_activations(ctx, M)
    acc_rows = 2 * M if stacked else M
    if stacked:
        parts = alloc((2 * x_rows, K), bf16)
        x_tile, xh = Bf16Tile(parts, parts), 2 * x0
    else:
        x_tile, xh = Bf16Tile(alloc((x_rows, K), bf16), alloc((x_rows, K), bf16) if copies == 2 else None), x0

    @dataclass
    class Planes:  # one product's on-chip buffers and their row origins
        codes: SSAValue
        scales: SSAValue
        w_tile: Bf16Tile
        w_expanded: SSAValue | None
        acc: SSAValue
        bias_tile: SSAValue | None
        c0: int
        s0: int
        w0: int
        e0: int
        expanded: int = 0  # steps expanded before this group (`_pre_expand_next`)
        #: stacked: the [M, N] tile the hi and lo halves of `acc` are summed into (the product's
        #: result as later ops view it: a view keeps the whole buffer's element count)
        total: SSAValue | None = None

    def load_planes(p: ResidentProduct, double: bool) -> Planes:
        # double: two halves, the kernel's first product (see above); the others have their
        # own bytes in this nest
        fmt = block_format(p.fmt_name)
        entry = isa.qscale_bytes(isa.QFORMAT_CODE[p.fmt_name])
        N = p.N
        half, n = (ctx.resident_products % 2, 2) if double else (0, 1)
        ctx.resident_products += 1 if double else 0
        code_rows, scale_rows = K * fmt.bits // 8, K // QBLOCK
        codes = alloc((n * code_rows, N), i8 if p.fmt_name == "q8_0" else ui8)
        scales = alloc((n * scale_rows, N * entry // 2), f16)
        c0, s0 = half * code_rows, half * scale_rows
        prefetched = ctx.derived.pop(("prefetched planes", p.op), None)
        if prefetched is not None:  # the previous resident product loaded them
            codes, scales = prefetched
            c0 = s0 = 0
        else:
            load_planes_by_step(ctx, p.codes_w, p.scales_w, codes, scales, c0, s0, K, N, fmt.bits, entry)
        pre = ctx.derived.pop(("pre-expanded", p.op), None)
        if pre is not None and prefetched is not None:  # its first steps are expanded already
            w_tile, w_expanded, expanded = pre
            return Planes(codes, scales, w_tile, w_expanded, em.alloc((acc_rows, N), f32, "acc"),
                          alloc((1, N), f32) if p.bias_row is not None else None, 0, 0, 0, 0, expanded,
                          em.alloc((M, N), f32, "acc") if stacked else None)
        w_tile = Bf16Tile(alloc((n * K, N), bf16), alloc((n * K, N), bf16) if copies == 2 else None)
        w_expanded = alloc((n * KC, N), f32) if copies == 2 else None
        return Planes(codes, scales, w_tile, w_expanded, em.alloc((acc_rows, N), f32, "acc"),
                      alloc((1, N), f32) if p.bias_row is not None else None,
                      c0, s0, half * K, half * KC, total=em.alloc((M, N), f32, "acc") if stacked else None)

    planes = [load_planes(products[0], head)]
    norm_params = norms.prologue_params(ctx, norm, M, K) if norm is not None else None
    if x_tile_src is None:
        assert xv is not None
        on_chip = ctx.on_chip_as(xv, (M, K))  # the kernel before left the rows on chip (paged attention)
        if on_chip is not None:
            em.vec("copy", x_staging, [x0, 0], on_chip, z, M, K)
        else:
            em.dma(xv, z, x_staging, [x0, 0], [M, K])
    # the epilogues' operands from DRAM (a residual): issued with the activations, not after
    # the last matmul, where each would add a DRAM latency (and wait for the matmuls reading
    # whatever bytes the planner gives it there)
    loaded = [preload_operands(ctx, p.epilogue, [p.op.results[0], *p.on_chip],
                               TileFrame(*p.frame_groups, 0, 0, 0, M, p.N)) for p in products]
    # after the activations: ahead of them, their transfer would delay the activations'
    planes += [load_planes(p, False) for p in products[1:]]
    for p in products:
        if p.after is not None:
            product_consumers.load_tables(ctx, p.after, M)
    _prefetch_next(ctx, products[-1].op)
    for p, b in zip(products, planes, strict=True):
        if p.bias_row is not None and b.bias_tile is not None:
            em.dma(p.bias_row, z, b.bias_tile, z, [1, p.N])

    def expand(i: int, j: int) -> None:
        p, b = products[i], planes[i]
        if j < b.expanded:
            return
        bits = block_format(p.fmt_name).bits
        codes_at, scales_at = [b.c0 + j * KC * bits // 8, 0], [b.s0 + j * KC // QBLOCK, 0]
        if b.w_expanded is None:
            emit_dequant(em, b.w_tile.hi, b.codes, codes_at, b.scales, scales_at, KC, p.N, p.fmt_name,
                         dst_at=[b.w0 + j * KC, 0])
        else:  # the f32 rows are reused by every step: the vector unit runs in order
            emit_dequant(em, b.w_expanded, b.codes, codes_at, b.scales, scales_at, KC, p.N, p.fmt_name,
                         dst_at=[b.e0, 0])
            _split_rows(em, b.w_expanded, b.e0, b.w_tile, b.w0 + j * KC, KC, p.N)

    results: list[SSAValue] = []

    def finish(i: int) -> None:  # bias, epilogue (earlier products' results on chip), store
        p, b = products[i], planes[i]
        acc = b.acc
        if b.total is not None:  # stacked: the hi rows' products plus the lo rows'
            acc = b.total
            em.vec("add", acc, z, b.acc, z, M, p.N, b.acc, [M, 0], bmode="tile")
        if b.bias_tile is not None:
            em.vec("add", acc, z, acc, z, M, p.N, b.bias_tile, z, bmode="row")
        frame = TileFrame(*p.frame_groups, 0, 0, 0, M, p.N)
        tiles = {p.op.results[0]: acc, **{arg: results[k] for arg, k in p.on_chip.items()}}
        tile = apply_epilogue(ctx, p.epilogue, tiles, frame, p.result, loaded[i])
        results.append(tile)
        if p.out2 is not None:
            em.dma(tile, z, p.out2, z, [M, p.N])
            em.live_into_next(tile)  # the next kernel must not wait for this store to reuse it
        if p.after is not None:
            product_consumers.emit(ctx, p.after, tile, M, p.N)

    expand(0, 0)
    if x_tile_src is not None:
        em.vec("copy", x_staging, [x0, 0], x_tile_src, z, M, K)
    if norm is not None and norm_params is not None:
        norms.normalize_rows(em, norm, norm_params, x_staging, x0, M, K)
    em.round_parts(x_staging, [x0, 0], x_tile.hi, x_tile.lo, [xh, 0], M, K, lo_index=[xh + M, 0] if stacked else None)
    for i, (p, b) in enumerate(zip(products, planes, strict=True)):
        for j in range(steps):
            if j + 1 < steps:
                expand(i, j + 1)
            elif i + 1 < len(products):
                expand(i + 1, 0)
            emit_packed_product(ctx, x_tile, b.w_tile, b.acc, M, KC, p.N, lhs_at=(xh, j * KC),
                                rhs_at=(b.w0 + j * KC, 0), overwrite=j == 0, stacked=stacked)
            if j == 0 and i > 0:
                finish(i - 1)
    # the array's work after the last expansion: the last step's weight loads and the drain
    tail = (KC * products[-1].N * 2 * copies // ctx.hw.matrix.weight_load_bytes_per_cycle
            + ctx.hw.matrix.fill_drain_cycles)
    _pre_expand_next(ctx, products[-1].op, sum(_expansion_cycles(ctx, K, p.N) for p in products), tail)
    finish(len(products) - 1)
    from infer.passes.graph_to_tile import packed_siblings

    chain = packed_siblings.chained(ctx, list(products), results, M)
    if chain is not None:
        nxt_products, src, K2, norm2 = chain
        _lower_resident(ctx, nxt_products, None, M, K2, norm2, x_tile_src=src)


def _prefetch_next(ctx: LoweringContext, op: Operation) -> None:
    """Cross-kernel prefetch: DMA the codes and scales planes of the next packed product of the
    function (when it is resident too) into buffers of their own, here, before this product's
    matmuls. Without it the next kernel's weight loads are dispatched only after the front end
    has queued this kernel's ~50 matrix instructions (an 8-deep queue), so they could not
    overlap this kernel's work. The next product finds them in `ctx.derived`; if its own
    lowering then chooses other tiles (its fused epilogue is not known here), it loads its
    planes itself and these bytes were read for nothing."""
    found = _next_packed_product(op)
    if found is None:
        return
    nxt, dq, packed = found
    M, N, K, (TM, TN, TK) = _choose_tiles(ctx, nxt, dq, (), nxt.results[0], None,
                                          prologue=_norm_prologue_of(nxt) is not None)
    if not holds_whole(M, N, K, (TM, TN, TK)):
        return
    em = ctx.emitter
    fmt_name = dq.block_format.data
    fmt = block_format(fmt_name)
    entry = isa.qscale_bytes(isa.QFORMAT_CODE[fmt_name])
    codes_w, scales_w = _plane_weights(ctx, packed.weight_key, np.asarray(ctx.store.get(packed.weight_key)),
                                       fmt_name, N, K, TN, K)
    codes = em.alloc((2 * K * fmt.bits // 8, N), i8 if fmt_name == "q8_0" else ui8, "spad")
    scales = em.alloc((2 * (K // QBLOCK), N * entry // 2), f16, "spad")
    for buffer in (codes, scales):  # apart from the kernel before's buffers, as the planes above
        em.live_from_previous(buffer)
    load_planes_by_step(ctx, codes_w, scales_w, codes, scales, 0, 0, K, N, fmt.bits, entry)
    ctx.derived[("prefetched planes", nxt)] = (codes, scales)


def load_planes_by_step(ctx: LoweringContext, codes_w: SSAValue, scales_w: SSAValue, codes: SSAValue,
                        scales: SSAValue, c0: int, s0: int, K: int, N: int, bits: int, entry: int) -> None:
    """DMA a resident product's codes and scales planes into rows c0 / s0 of `codes` / `scales`,
    one pair of DMAs per expansion step (`_chunk_rows`) in step order: the first expansion
    waits for its own rows only, not for the whole matrix (the DMAs take the DRAM's slots in
    issue order, so the first step's rows arrive first). In bf16 only: fp32 emulation's
    expansions (to fp32, then split) are longer than the whole planes' transfer, and its decode
    step was 0.9 % slower by steps (SmolLM2 on server, batch 1), so it keeps one DMA each."""
    em = ctx.emitter
    KC = _chunk_rows(K) if ctx.bf16_copies == 1 else K
    code_rows, scale_rows = KC * bits // 8, KC // QBLOCK
    for j in range(K // KC):
        em.dma(codes_w, [j * code_rows, 0], codes, [c0 + j * code_rows, 0], [code_rows, N])
        em.dma(scales_w, [j * scale_rows, 0], scales, [s0 + j * scale_rows, 0], [scale_rows, N * entry // 2])


def _split_rows(em: Emitter, src: SSAValue, src_row: int, dst: Bf16Tile, dst_row: int, rows: int, cols: int) -> None:
    """split_on_chip at row offsets: hi = bf16(src); fp32 emulation: lo = bf16(src - hi)."""
    em.round_parts(src, [src_row, 0], dst.hi, dst.lo, [dst_row, 0], rows, cols)


def _expansion_cycles(ctx: LoweringContext, K: int, N: int) -> int:
    """Vector-unit cycles of expanding a K x N weight matrix (docs/isa.md's `vec.dequant`
    occupancy: two bf16 or one fp32 weight per lane per cycle; fp32 emulation expands to fp32)."""
    return dequant_occupancy(ctx.hw, K * N, 4 if ctx.bf16_copies == 2 else 2)


#: steps of the next product expanded ahead (`_pre_expand_next`); measured on SmolLM2's server
#: decode step (bf16, B = 1): one 306,521 -> 297,851 cycles, two 306,520 (the second expansion
#: then delays the epilogue behind it)
PRE_EXPANDED_STEPS = 1


def _pre_expand_next(ctx: LoweringContext, op: Operation, lead: int, tail: int) -> None:
    """Expand the first step of the next resident product here, after this group's last
    matmuls and before its last epilogue, when `_prefetch_next` loaded its planes and they
    arrive in time: the vector unit runs in order, and the epilogue waits for the array's last
    products and drain anyway (gate/up -> down on server: ~650 idle vector cycles, down's first
    expansion behind the SiLU in program order). The next product's `load_planes` takes the
    expanded tile (`("pre-expanded", op)`).

    `lead`: the vector cycles of this group's own expansions, which come after the prefetch was
    issued; planes that take longer (a DRAM latency plus their transfer) would stall the vector
    unit and the epilogue behind it (o -> gate/up: 1.1 MB behind a 0.3 K-cycle group). `tail`:
    the array's cycles after this group's last expansion, the window the epilogue waits for
    anyway; a longer expansion delays the epilogue (fp32 emulation's, with the hi/lo split's
    three passes: SmolLM2's server prefill chunk was 1.3 % slower before this was checked)."""
    found = _next_packed_product(op) if PRE_EXPANDED_STEPS > 0 else None
    if found is None:
        return
    nxt, dq, _ = found
    planes = ctx.derived.get(("prefetched planes", nxt))
    if planes is None or not _next_kernel_holds(op, nxt):
        return
    N, K = shape_of(dq.output)  # whole (a prefetched product is resident: one tile)
    fmt_name = dq.block_format.data
    bits = block_format(fmt_name).bits
    plane_bytes = K * bits // 8 * N + K // QBLOCK * N * isa.qscale_bytes(isa.QFORMAT_CODE[fmt_name])
    hw = ctx.hw
    copies = ctx.bf16_copies
    KC = _chunk_rows(K)
    steps = min(PRE_EXPANDED_STEPS, K // KC)
    split = 3 * -(-KC * N // hw.vector.lanes) if copies == 2 else 0  # copy, sub, copy
    if (lead < hw.dram.latency_cycles + plane_bytes / hw.dram.bytes_per_cycle
            or steps * (_expansion_cycles(ctx, KC, N) + split) > tail):
        return
    em = ctx.emitter
    w_tile = Bf16Tile(em.alloc((K, N), bf16, "spad"), em.alloc((K, N), bf16, "spad") if copies == 2 else None)
    w_expanded = em.alloc((KC, N), f32, "spad") if copies == 2 else None
    for buffer in (w_tile.hi, w_tile.lo, w_expanded):
        if buffer is not None:  # apart from this group's buffers, as the prefetched planes
            em.live_from_previous(buffer)
    codes, scales = planes
    for j in range(steps):
        codes_at, scales_at = [j * KC * bits // 8, 0], [j * KC // QBLOCK, 0]
        if w_expanded is None:
            emit_dequant(em, w_tile.hi, codes, codes_at, scales, scales_at, KC, N, fmt_name, dst_at=[j * KC, 0])
        else:  # fp32 emulation: expanded to fp32, then split into the two bf16 halves
            emit_dequant(em, w_expanded, codes, codes_at, scales, scales_at, KC, N, fmt_name)
            _split_rows(em, w_expanded, 0, w_tile, j * KC, KC, N)
    ctx.derived[("pre-expanded", nxt)] = (w_tile, w_expanded, steps)


def _next_kernel_holds(op: Operation, nxt: Operation) -> bool:
    """Is `nxt` in the graph kernel right after `op`'s (only views, weights and constants in
    between)? A product expanded ahead is then lowered next (chained, or the next kernel), not
    after other kernels that would size their buffers around its tile."""
    from infer.passes.graph_to_tile.packed_siblings import _BETWEEN

    kernel, target = op.parent_op(), nxt.parent_op()
    if not isinstance(kernel, g.KernelOp) or not isinstance(target, g.KernelOp):
        return False
    after = kernel.next_op
    while after is not None and isinstance(after, _BETWEEN):
        after = after.next_op
    return after is target


def _next_packed_product(op: Operation) -> tuple[Operation, g.DequantizeBlocksOp, g.WeightOp] | None:
    """The first linear/matmul on packed weights after `op` in its function (looking inside
    fused graph.kernel regions), with its dequantize_blocks and packed weight."""
    top = op
    while top.parent_op() is not None and not isinstance(top.parent_op(), func.FuncOp):
        top = top.parent_op()  # type: ignore[assignment]
    nxt = top.next_op
    while nxt is not None:
        for inner in nxt.walk():
            if isinstance(inner, (g.LinearOp, g.MatmulOp)):
                found = packed_weight_of(inner)
                if found is not None:
                    return inner, *found
        nxt = nxt.next_op
    return None


def _rank_by_latency(ctx: LoweringContext, M: int, N: int, K: int, fmt_name: str, choice: tiling_cost.Choice,
                     streamed: Callable[[int], bool]) -> tiling_cost.Choice:
    """Re-rank the fitting candidates with the latencies the cost model (bandwidth) does not
    count. Loop depth first, as the cost model.

    A resident product (one tile: chained with its neighbours in one nest, its result kept on
    chip for the next products, which no estimate here counts) is kept wherever it wins with
    one DRAM latency per weight tile counted for every candidate: each weight tile is a chain
    DMA -> vec.dequant -> mx.loadw, and a 576x1536 q4_1 GEMV on server took 7188 cycles in 18
    k tiles, 3641 in one.

    Otherwise a streamed product (`packed_stream`) is taken if one fits: the per-step rotation
    path (one k step per n tile) expands a weight tile only after the previous tile's product,
    in program order (4 x 1024 -> 4096 on server: 17.3 K cycles in two such n tiles, 8.4 K
    streamed in four k steps). Streamed candidates are ranked by
    `packed_stream.estimated_cycles`; those within NEAR of the fastest are ties (the array's
    time is the same for every tiling whose k tiles fill its rows), and of those the one that
    moves the fewest DRAM bytes wins (each n tile re-reads its activations)."""
    hw = ctx.hw
    depth = hw.scalar.loop_depth

    def resident(e: tiling_cost.Estimate) -> bool:
        return holds_whole(M, N, K, e.tiles)

    def per_tile_latency(e: tiling_cost.Estimate) -> tuple:
        tm, tn, tk = e.tiles
        tiles = -(-M // tm) * -(-N // tn) * -(-K // tk)
        return (e.loops > depth, e.cycles + tiles * hw.dram.latency_cycles, e.spad + e.acc)

    best = min(choice.candidates, key=per_tile_latency)
    candidates = [e for e in choice.candidates if e.loops <= depth and not resident(e) and streamed(e.tiles[2])]
    if not resident(best) and candidates:
        estimates = {e.tiles: packed_stream.estimated_cycles(ctx, M, N, K, fmt_name,
                                                             two_pass_activations(ctx, e.tiles[0]), e)
                     for e in candidates}
        fastest = min(estimates.values())
        near = [e for e in candidates if estimates[e.tiles] <= fastest * (1 + NEAR)]
        best = min(near, key=lambda e: (e.memory, estimates[e.tiles], e.spad + e.acc))
    return tiling_cost.Choice(best.tiles, best, choice.candidates, rejected=choice.rejected)


def emit_dequant(em, dst: SSAValue, codes: SSAValue, codes_at: Sequence[Index], scales: SSAValue,
                 scales_at: Sequence[Index], rows: int, cols: int, fmt: str, dst_at: Sequence[Index] = (0, 0),
                 blocks: str = "col") -> None:
    """dst[dst_at + (:rows, :cols)] = tile.dequant of the codes and scales tiles at the given
    origins (blocks down the columns, or along the rows with blocks="row")."""
    em.insert(t.DequantOp.build(
        operands=[dst, [em.index_value(i) for i in dst_at], codes, [em.index_value(i) for i in codes_at], scales,
                  [em.index_value(i) for i in scales_at]],
        properties={"rows": IntegerAttr(rows, i64), "cols": IntegerAttr(cols, i64),
                    "format": StringAttr(fmt), "blocks": StringAttr(blocks)}))
