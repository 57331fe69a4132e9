"""graph.conv2d (NCHW; groups, stride, dilation, padding) on the matrix unit: an implicit GEMM
over padded-width windows, with a fused epilogue.

The input is read as the stride-phase planes of its padded form (planes.py), built on chip: a
tile of TOH output rows of TO output channels loads, per channel step of TC channels, the input
rows its window needs (one DMA per row phase, whole rows) and the vector unit pads, splits the
stride phases and rounds them to bf16 (`hi`, and `lo` for the fp32 emulation) into one window
per plane: TOH + halo plane rows laid end to end. One window serves every tap: tap (kh, kw) is
the window shifted by its flat offset, so output pixel q = oh.Wq + ow of the tile reads window
element q + offset (columns OW..Wq-1 of each output row are computed and never stored). A
padded or strided input (`Planes.preparable`) can instead have its planes prepared once in DRAM
by a helper nest before the loops (`prepare_planes`; a strided one's are the phases the taps
read, subsampled): the cost model picks per conv (`ConvTiles.on_chip_padding`). Two
orientations:

* "pixels": the channel-major window [TC, Lw] is the array's stationary operand (k = channels,
  n = flat pixels), the weights [TO, taps.TC] stream through it (m = TO rows);
  acc[TO, TOH.Wq] (+)= W[TO, C] . X[C, pixels]. Good when a tile has many pixels.
* "channels": the window is pixel-major [Lw, TC] (transposed while it is built), the weights
  are stationary (k = channels, n = output channels) and the pixels stream (m = TOH.Wq rows,
  each tap a row shift); acc[pixels, TO] (+)= X^T . W^T, transposed back to [TO, pixels]
  before the epilogue. Good when the output has few pixels and many channels (late ResNet
  stages on a 128x128 array).

With a single channel step the first matmul pass into each accumulator column block
overwrites it (no fill); several steps zero the accumulator and stay one (pipelined) loop.
Then the bias per output channel (`bmode=col`, all biases loaded once), the kernel's
elementwise ops (residual add, BN-folded ops, activation) on the [TO, TOH.Wq] tile
(elementwise.TileFrame with `pitch`), one DMA store of the valid [TO, TOH, OW] box (or, where
`tiling_cost.stores_deferred`, a slice of it per channel step of the next row tile). The
orientation, tile sizes and loop order (output-channel tiles or row tiles outside; with a
single channel step the operand the inner loop does not change is loaded once per outer tile,
single-buffered) are the cost model's choice (tiling_cost.choose_conv). Row tiles whose window
reaches into the padding are emitted on their own (planes.row_tiles). Grouped convs run group
by group, or with r groups merged into one of block-diagonal weights where the cost model ranks
that faster (grouped_conv.py: a depthwise conv's channels fill the array's depth).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import bf16, f32
from xdsl.ir import Attribute, Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import num_elements, shape_of
from infer.dialects.ir_io import LoweringError
from infer.passes import tiling_cost
from infer.passes.tiling_tuning import pick_index
from infer.passes.graph_to_tile.builder import Index, tile_extents
from infer.passes.graph_to_tile.context import STAGE, LoweringContext, error, latency_bound
from infer.passes.graph_to_tile.conv_store import (KEPT_CONV_OUTPUT_READERS, kept_output_readers, stage_output_tile,
                                                  store_compact_tile, store_output_tile, store_staged_rows)
from infer.passes.graph_to_tile.depthwise import is_depthwise, lower_depthwise_on_vector, vector_tiles
from infer.passes.graph_to_tile.elementwise import (TileFrame, apply_epilogue, epilogue_cost, epilogue_footprint,
                                                   materialize_misfits, relu_alone, relu_of_sum)
from infer.passes.graph_to_tile.grouped_conv import MergedGroups, group_merges, merged_weights
from infer.passes.graph_to_tile.matrix_unit import Bf16Tile, emit_tile_product, packed_weight_parts, prefetch_packed
from infer.passes.graph_to_tile.planes import Planes, PreparedWindows, prepare_estimate, prepare_planes
from infer.passes.graph_to_tile.windows import (WindowLoader, copies_kept_rows, gathers_columns, kept_window,
                                               loads_in_place, row_tile_plan, row_tiles, staged_width)


#: array-wide column blocks of a tile's last matmuls per group between the roundings of the
#: output rows they complete (`ConvKernel._products_rounding_rows`)
ROUNDED_ROW_GROUP_BLOCKS = 8

#: the most output rows of padded width rounded one op each, straight-line, between a tile's last
#: matmuls (`ConvKernel.rows_rounded_in_products`): as a loop per group, each loop's exit drain
#: stopped the front end until its rows were rounded (ResNet-50 server 356,386 -> 356,812 cycles)
ROUNDED_ROWS_STRAIGHT_LINE = 128


@dataclass(frozen=True)
class IntegerConvParts:
    """What an int8 conv kernel (integer_conv.py) tells conv_spec instead of the bf16 defaults:
    its epilogue's scratchpad bytes per (rows, cols) tile, its channel vectors (folded bias,
    requantize scales: [O, 1] words each), vector cost per output element, the full-size
    operand tiles its float ops load, and the bytes of a stored element."""

    epilogue_bytes: Callable[[int, int], int]
    vectors: int
    epi_cost: int
    epi_tiles: int
    out_bytes: int


#: DMAs a hoisted weight block (one channel step, loaded once per output tile) is split into, in
#: the channels orientation: its first taps' matmuls start after their rows arrive. ResNet-50's
#: 3x3/2 512->512 conv on server waited 5.2 K cycles for its 4.7 MB block in one DMA.
HOISTED_WEIGHT_PIECES = 8


def conv_planes(op: g.Conv2dOp) -> Planes:
    _, _, H, W = shape_of(op.input)
    _, _, KH, KW = shape_of(op.weight)
    _, _, OH, OW = shape_of(op.results[0])
    return Planes(H, W, KH, KW, tuple(g.i64_values(op.stride)), tuple(g.i64_values(op.dilation)),  # type: ignore[arg-type]
                  tuple(g.i64_values(op.padding)), OH, OW)  # type: ignore[arg-type]


def plane_tap_grid(p: Planes, KH: int, KW: int, plane: int) -> tuple[list[int], list[int]]:
    """The kernel rows and columns whose taps read stride-phase plane `plane` (a grid)."""
    rp, cp = p.phases[plane]
    khs = [kh for kh in range(KH) if (p.dilation[0] * kh) % p.stride[0] == rp]
    kws = [kw for kw in range(KW) if (p.dilation[1] * kw) % p.stride[1] == cp]
    return khs, kws


def bias_parts(bias: np.ndarray, parts: int) -> np.ndarray:
    """[O, parts] f32 columns of bf16 values summing to the bias (each the bf16 rounding of what
    the ones before leave): against `parts` rows of ones in an im2col operand, the matmul adds
    the bias to fp32's precision (`ConvKernel.bias_rows`); bf16 values, so the fp32
    emulation's lo parts of them are zero."""
    out = np.zeros((bias.shape[0], parts), np.float32)
    rest = bias.astype(np.float32)
    for j in range(parts):
        out[:, j] = rest.astype(ml_dtypes.bfloat16).astype(np.float32)
        rest = (rest - out[:, j]).astype(np.float32)
    return out


def im2col_chunks(taps: int, tc: int, rows: int, extra: int = 0) -> list[tuple[int, int, int, int]]:
    """The im2col depth taps.tc (+ `extra` rows after the taps: the bias rows) in chunks of at
    most `rows` (the array's depth), the partial one first (its matmuls cost what a full chunk's
    do, and it needs the fewest tap copies before the array starts): (k0, k, first tap, end tap)
    per chunk, the taps whose rows [t.tc, (t+1).tc) reach into it (copied with the first chunk
    they reach). One chunk: the im2col is built whole (conv.py `products`)."""
    depth = taps * tc + extra
    first = depth % rows or rows
    bounds = [0] + list(range(first, depth + 1, rows))
    chunks, copied = [], 0
    for k0, k1 in zip(bounds, bounds[1:]):
        end = min(taps, -(-k1 // tc))
        chunks.append((k0, k1 - k0, copied, end))
        copied = end
    return chunks


def conv_footprint_counts(steps: int, o_tiles: int, outer: str, looped: bool, groups: int,
                          single_acc: bool = False) -> tuple[int, int, int]:
    """(window, weight block, accumulator and epilogue) buffers of a conv's looped or edge row
    tiles: 2 where they rotate on a loop around their uses (the channel steps; the row loop for
    looped tiles; the output-channel loop when it is inside the rows'), else 1. Grouped convs
    (merged depthwise ones too) rotate them on the groups' loop: single-buffered, each group's
    window load waited for the group before's products and its store, and a merged depthwise
    conv ran at about 1.5x the cost model's estimate, which assumes that overlap (144 channels
    at 56x56 on server: 34.3 K simulated against 20.7 K). `single_acc`: one accumulator tile
    (and epilogue tiles) whatever the loops (tiling_cost.ConvTiles.single_acc)."""
    inner_o = outer == "rows" and o_tiles >= 2
    grouped = groups >= 2
    window = 2 if steps > 1 or looped or grouped else 1
    weights = 2 if steps > 1 or (outer == "rows" and (inner_o or looped)) or grouped else 1
    acc = 2 if (looped or inner_o or grouped) and not single_acc else 1
    return window, weights, acc


@dataclass(frozen=True)
class ConvFootprint:
    """(orientation, TO, TOH, TC, outer, im2col, prepared) -> the (scratchpad, accumulator) bytes
    of a conv kernel's local buffers: those of the looped row tiles and of the edge row tiles
    (ConvKernel.buffer_counts), the hoisted weights, the biases; `prepared`: windows loaded from
    planes prepared in DRAM (else built on chip). A value made of everything the footprint reads
    (hashable), so ConvSpec equality covers it and choose_conv can reuse the ranking of an
    identical kernel."""

    p: Planes
    O: int
    Cg: int
    KH: int
    KW: int
    groups: int
    operand: int  # bytes per window / weight element
    copies: int  # bf16 parts per operand (hi, lo)
    staged: int  # bytes per input element in DRAM (the staging tile)
    vectors: int  # bytes of the channel vectors (biases, scales)
    epilogue_bytes: Callable[[int, int], int]
    narrow_out: bool = False  # the output tile copied to a compact bf16 tile before its store
    bias: bool = False  # a float bias an im2col operand may carry (tiling_cost.im2col_bias_rows)
    array_rows: int = 0  # the matrix unit's depth

    def __call__(self, orientation: str, to: int, toh: int, tc: int, outer: str, im2col: bool,
                 prepared: bool, whole: bool = False, single_acc: bool = False) -> tuple[int, int]:
        p, operand, copies, staged = self.p, self.operand, self.copies, self.staged
        O, Cg, groups = self.O, self.Cg, self.groups
        P = len(p.phases)
        sw = p.stride[1]
        pixel_major = orientation == "channels"
        width = staged_width(p, pixel_major)  # (WindowLoader's staging rows)
        nw = -(-p.W // sw)
        row_phases = len({rp for rp, _ in p.phases})
        rq, lw, tq = p.window_rows(toh), p.window_length(toh), toh * p.Wq
        steps, o_tiles = -(-Cg // tc), -(-(O // groups) // to)
        single = steps == 1
        tiles, (lo, hi) = row_tile_plan(p, toh, not prepared)
        kinds = ([True] if hi > lo else []) + ([False] if len(tiles) > hi - lo else [])
        weights = to * self.KH * self.KW * tc * operand * copies
        whole = whole and not single and outer == "o"  # (ConvKernel.whole_block)
        spad = weights if single and outer == "o" else to * self.KH * self.KW * Cg * operand * copies if whole else 0
        spad += self.vectors
        acc = 0
        if single and outer == "o" and groups >= 2:
            spad += weights  # (the hoisted block, double-buffered on the groups' loop)
        for looped in kinds:
            wb, kb, ab = conv_footprint_counts(steps, o_tiles, outer, looped, groups, single_acc)
            in_place = loads_in_place(p, orientation == "channels", copies == 1 and staged == operand)
            if not prepared and not in_place:
                spad += wb * row_phases * tc * rq * width * staged  # staging (input rows)
                if gathers_columns(p, pixel_major):
                    spad += wb * rq * nw * tc * (operand if copies == 1 else 4)  # gathered tile
            spad += wb * P * tc * lw * operand * copies  # the windows (bf16 hi(/lo), or int8)
            if im2col:
                depth = self.KH * self.KW * tc + tiling_cost.im2col_bias_rows(self.bias, self.KH * self.KW, tc, Cg,
                                                                               self.array_rows, orientation)
                spad += wb * depth * tq * operand * copies
            if orientation == "channels":
                spad += ab * to * tq * 4  # the accumulator transposed back
            if not (single and outer == "o") and not whole:
                spad += kb * weights
            sizes = {t[1] for i, t in enumerate(tiles) if (lo <= i < hi) == looped}
            # epilogue tiles: one set per tile shape (sizes x output-channel extents); double-
            # buffered ones are counted x2 by epilogue_bytes, single-buffered pools hold one
            epi = sum(self.epilogue_bytes(a, s * p.Wq) for a in tile_extents(O // groups, to) for s in sizes)
            spad += epi if ab == 2 else epi // 2
            if self.narrow_out:  # ConvKernel.finish: [to, toh.OW] bf16 per tile shape
                spad += ab * sum(a * s * p.OW * 2 for a in tile_extents(O // groups, to) for s in sizes)
            acc += ab * to * tq * 4
        return spad, acc


def fuses_relu(epilogue: Sequence[Operation], value: SSAValue, result: SSAValue) -> bool:
    """Whether a float conv's epilogue (on its result `value`, returning `result`) is a relu
    alone or an add of `value` and a relu of that sum alone (a residual): then the add before
    the relu computes it (`add_relu`, `ConvKernel.epilogue`)."""
    if relu_alone(epilogue, value) is not None:
        return True
    return len(epilogue) == 2 and value in epilogue[0].operands and relu_of_sum(epilogue, 0, result) is not None


def conv_spec(ctx: LoweringContext, op: g.Conv2dOp | MergedGroups, epilogue: Sequence[Operation], result: SSAValue,
              p: Planes, integer: IntegerConvParts | None = None) -> tiling_cost.ConvSpec:
    """What the cost model needs to know about this conv kernel (its shape, its planes, its
    epilogue and its exact local-buffer footprint); `integer`: an int8 kernel's operand sizes
    and epilogue (integer_conv.py) instead of the bf16 ones."""
    N, C = shape_of(op.input)[:2]
    H, W = p.H, p.W
    O, Cg, KH, KW = shape_of(op.weight)
    groups = op.groups.value.data
    copies = ctx.bf16_copies if integer is None else 1
    out_shape = shape_of(result)
    P = len(p.phases)
    row_phases = len({rp for rp, _ in p.phases})
    if integer is None:
        materialize_misfits(ctx, epilogue, [op.results[0]], ((N,), (O,), (p.OH, p.OW)))
        epilogue_bytes = epilogue_footprint(ctx, epilogue, result, [op.results[0]], ((N,), (O,), (p.OH, p.OW)))
    else:
        epilogue_bytes = integer.epilogue_bytes
    has_bias = op.bias is not None
    # a compile-time float bias an im2col operand with spare depth may carry (`ConvKernel.bias_rows`)
    im2col_bias = integer is None and has_bias and groups == 1 and ctx.constant(op.bias) is not None
    # planes in DRAM, or (ConvTiles.on_chip_padding) windows built on chip from the input rows
    prepared = p.preparable
    vectors = O * 4 if has_bias else 0
    if integer is not None:
        vectors = integer.vectors * O * 4
    # activations held as bf16 in DRAM (storage.read_only_as_bf16_activations): the input read,
    # and the output stored, at 2 bytes an element
    narrow_in = integer is None and ctx.held_as_bf16(op.input)
    narrow_out = integer is None and ctx.narrows(result)
    footprint = ConvFootprint(p, O, Cg, KH, KW, groups, operand=2 if integer is None else 1, copies=copies,
                              staged=1 if integer is not None else 2 if narrow_in else 4, vectors=vectors,
                              epilogue_bytes=epilogue_bytes, narrow_out=narrow_out,
                              bias=im2col_bias, array_rows=ctx.hw.matrix.rows)
    produced = {r for e in epilogue for r in e.results}
    # per plane, the trips of its tap loops: the code-size rule's input (passes/tiling_code.py)
    tap_nests = tuple(tuple(len(g) for g in plane_tap_grid(p, KH, KW, plane)) for plane in range(P))
    if integer is not None:
        return tiling_cost.ConvSpec(
            batch=N, groups=groups, Og=O // groups, Cg=Cg, taps=KH * KW, OH=p.OH, OW=p.OW, Wq=p.Wq, H=H, W=W,
            stride=p.stride[0], halo_rows=p.window_rows(1) - 1, prepared=False, planes=P, row_phases=row_phases,
            copies=1, passes=1, epi_cost=integer.epi_cost, epi_tiles=integer.epi_tiles, in_bytes=1,
            operand_bytes=1, out_bytes=integer.out_bytes, matmul_dtype="int8", footprint=footprint,
            tap_nests=tap_nests, in_place_windows=loads_in_place(p, False, True))
    return tiling_cost.ConvSpec(
        batch=N, groups=groups, Og=O // groups, Cg=Cg, taps=KH * KW, OH=p.OH, OW=p.OW, Wq=p.Wq, H=H, W=W,
        stride=p.stride[0], halo_rows=p.window_rows(1) - 1, prepared=prepared, planes=P, row_phases=row_phases,
        copies=copies, passes=ctx.matmul_passes,
        epi_cost=epilogue_cost(ctx, epilogue) + (1 if has_bias else 0) + (1 if narrow_out else 0),
        bias_in_transpose=has_bias, bias_in_im2col=im2col_bias,
        relu_fused=("" if not fuses_relu(epilogue, op.results[0], result)
                    else "bias" if len(epilogue) == 1 else "sum"),
        in_bytes=2 if narrow_in else 4, out_bytes=2 if narrow_out else 4, compact_store=narrow_out,
        epi_tiles=sum(1 for e in epilogue for v in e.operands
                      if shape_of(v) == out_shape and v not in produced and v is not op.results[0]),
        footprint=footprint, tap_nests=tap_nests, in_place_windows=loads_in_place(p, False, narrow_in and copies == 1),
        input_on_chip=copies_kept_rows(p, N) and kept_window(ctx, ctx.buffer(op.input), (C, H * W)) is not None,
        prepare_cycles=(prepare_estimate(ctx.hw, N * C, p, "bf16", copies, False, 2 if narrow_in else 4),
                        prepare_estimate(ctx.hw, N * C, p, "bf16", copies, True, 2 if narrow_in else 4, C))
        if prepared else (0, 0),
        edge_row_tiles=EdgeRowTiles(p) if any(p.pads) else None)


@dataclass(frozen=True)
class EdgeRowTiles:
    """TOH -> the row tiles of on-chip padded windows emitted on their own (not in the row
    loop). A value (like ConvFootprint), so ConvSpec equality covers it."""

    p: Planes

    def __call__(self, toh: int) -> int:
        tiles, (lo, hi) = row_tile_plan(self.p, toh, True)
        return len(tiles) - (hi - lo)


def fastest_groups(ctx: LoweringContext, op: g.Conv2dOp | g.Conv2dIntegerOp, epilogue: Sequence[Operation],
                   result: SSAValue, p: Planes, merge: bool,
                   memo: dict | None, integer: IntegerConvParts | None = None,
                   ) -> tuple[g.Conv2dOp | MergedGroups, tiling_cost.ConvSpec, int]:
    """(the conv as lowered, its spec, r): a grouped conv with r of its groups merged into one of
    block-diagonal weights (grouped_conv.py) for the r the cost model ranks fastest, 1 (the op
    itself) when none is faster or `merge` is off (an override's tiles are for the groups as
    they are). The ranked r are one of the tiling choices autotuning measures (tiling_tuning):
    it may take another r than the cost model's."""
    spec = conv_spec(ctx, op, epilogue, result, p, integer)  # type: ignore[arg-type]
    groups, Cg = op.groups.value.data, shape_of(op.weight)[1]
    merges = group_merges(groups, Cg, ctx.hw.matrix.rows) if merge else [1]
    if len(merges) == 1:
        return op, spec, 1  # type: ignore[return-value]
    ranked = []
    for r in merges:
        view = op if r == 1 else MergedGroups.of(op, r)
        view_spec = spec if r == 1 else conv_spec(ctx, view, epilogue, result, p, integer)
        cycles = tiling_cost.fastest_conv_cycles(ctx.hw, view_spec, memo)
        if cycles < float("inf") or r == 1:
            ranked.append((cycles, r, view, view_spec))
    ranked.sort(key=lambda c: (c[0], c[1]))
    _, r, view, spec = ranked[pick_index([("merged groups", c[1]) for c in ranked])]
    return view, spec, r  # type: ignore[return-value]


def lower_conv(ctx: LoweringContext, op: Operation, epilogue: Sequence[Operation], result: SSAValue) -> None:
    """`op` (graph.conv2d) followed by the elementwise `epilogue` ops on its output tiles;
    `result` (the last of them, or op's result) is stored."""
    assert isinstance(op, g.Conv2dOp)
    w = ctx.constant(op.weight)
    if w is None:
        raise error(op, "conv2d needs a compile-time weight (graph-lower-runtime-conv, part of graph-prepare-tiling, "
                        "makes a conv2d of a run-time weight an im2col matmul)")
    N = shape_of(op.input)[0]
    p = conv_planes(op)
    name = ctx.kernel_name()
    override = ctx.override(name, 3)
    if override is not None and override[1] % p.OW:
        raise LoweringError(f"error: {STAGE}: {name}: the pixel tile (TN) must be a multiple of OW = {p.OW}")
    memo = ctx.session.rankings_for(ctx.hw)
    view, spec, merge = fastest_groups(ctx, op, epilogue, result, p, override is None, memo)
    if merge > 1:
        w = merged_weights(np.asarray(w, np.float32), op.groups.value.data, merge)
    O, Cg, KH, KW = shape_of(view.weight)
    groups = view.groups.value.data
    choice = tiling_cost.choose_conv(ctx.hw, spec, override=override and (override[0], override[1] // p.OW, override[2]),
                                     memo=memo)
    # a depthwise conv on the vector unit where the cost model ranks it faster (depthwise.py;
    # ties keep the matrix unit): a choice autotuning measures, as the merge factors
    vector = (vector_tiles(ctx, op, result, p, epilogue_cost(ctx, epilogue) + (1 if op.bias is not None else 0),
                           epilogue_footprint(ctx, epilogue, result, [op.results[0]],
                                              ((N,), (shape_of(op.weight)[0],), (p.OH, p.OW))))
              if override is None and is_depthwise(op) else None)
    if vector is not None:
        units = sorted([(choice.best.cycles, "matrix"), (vector[2], "vector")], key=lambda c: (c[0], c[1] != "matrix"))
        if units[pick_index([("depthwise on", unit) for _, unit in units])][1] == "vector":
            lower_depthwise_on_vector(ctx, op, epilogue, result, p, name, vector, choice.best.cycles)
            return
    ctx.predict(choice.best.cycles - choice.best.helper)  # prepare_planes predicts its own nest
    ctx.debug(tiling_cost.describe_conv(name, f"O={O // groups} P={p.OH}x{p.OW} C={Cg} taps={KH}x{KW}"
                                        + (f" stride={p.stride[0]}x{p.stride[1]}" if p.stride != (1, 1) else "")
                                        + (f" groups={groups}" if groups > 1 else "")
                                        + (f" ({merge} merged in each)" if merge > 1 else "") + f" batch={N}", choice))
    ConvKernel(ctx, name, view, epilogue, result, p, choice.tiles, np.asarray(w, np.float32),
               footprint=(choice.best.spad, choice.best.acc), spec=spec).emit()


class ConvKernel:
    """The loop nest of one conv kernel for chosen tiles (see the module docstring). bf16 (and
    the fp32 emulation's hi/lo) operands; integer_conv.IntegerConvKernel overrides the operand
    and accumulator types, the input, the weights and the epilogue for int8."""

    operand_type: Attribute = bf16  # windows and weight blocks
    accumulator_type: Attribute = f32
    #: a one-step tile of several taps (no im2col) has its first tap's product overwrite the
    #: accumulator, emitted ahead of the taps' loop nest, instead of zeroing the accumulator
    #: first: the zeroing was a vector pass over the whole tile at the head of each such kernel,
    #: behind the kernel before's epilogue and ahead of the window (ResNet-50 server: 100-300
    #: cycles before the first matmul of each 3x3 conv at 28x28, 14x14 and 7x7)
    FIRST_TAP_OVERWRITES = True

    def __init__(self, ctx: LoweringContext, name: str, op: g.Conv2dOp | MergedGroups, epilogue: Sequence[Operation],
                 result: SSAValue, p: Planes, tiles: tiling_cost.ConvTiles, w: np.ndarray,
                 footprint: tuple[int, int] | None = None, spec: tiling_cost.ConvSpec | None = None):
        self.ctx, self.em, self.name = ctx, ctx.emitter, name
        self.spec = spec  # what the cost model ranked (`defers_stores` asks it)
        self.op, self.epilogue_ops, self.result, self.p = op, epilogue, result, p
        N, C, _, _ = shape_of(op.input)
        O, Cg, KH, KW = shape_of(op.weight)
        self.N, self.C, self.O, self.Cg, self.KH, self.KW = N, C, O, Cg, KH, KW
        self.groups = op.groups.value.data
        self.Og = O // self.groups
        self.taps = [(kh, kw) for kh in range(KH) for kw in range(KW)]
        self.channels_wide = tiles.orientation == "channels"
        TO, TOH, TC = min(tiles.TO, self.Og), min(tiles.TOH, p.OH), min(tiles.TC, Cg)
        self.tiles = tiling_cost.ConvTiles(tiles.orientation, TO, TOH, TC, tiles.outer, tiles.im2col,
                                           tiles.on_chip_padding, tiles.whole_weights and TC < Cg and tiles.outer == "o",
                                           tiles.single_acc)
        self.TQ = TOH * p.Wq
        em = self.em
        self.copies = self.operand_copies()
        self.single = TC >= Cg
        # the weight blocks of a stride-1 tap conv are one buffer per kernel row (each DMA'd on
        # its own) and the taps' loop over the kernel rows is unrolled: each row's matmuls wait
        # for that row's weights only, so the first ones start after a KH-th of a large block
        # (ResNet-50's 3x3 512->512: 4.7 MB) and the rest of it arrives beside them
        self.row_split_weights = tiling_cost.row_split_weights(self.tiles, len(p.phases), KH, Cg)
        # the first matmul overwrites the accumulator with one channel step (one product per
        # tile: one tap or the taps folded by im2col; or the first tap's, emitted ahead of the
        # taps' loop nest: `over_taps`, FIRST_TAP_OVERWRITES); several steps zero it first
        self.overwrites = self.single and (len(self.taps) == 1 or tiles.im2col or self.FIRST_TAP_OVERWRITES)
        # tiles emitted on their own (the edge row tiles) have their own buffers, single-buffered
        # and shared among them; the looped tiles' buffers rotate on their loop
        self._sets: dict[bool, _Buffers] = {}
        # rows of ones at the end of an im2col operand's depth whose weight columns hold the bias
        # in three bf16 parts: the matmuls add it, the epilogue has no bias pass
        bias = ctx.constant(op.bias) if self.bias_in_im2col and op.bias is not None and self.groups == 1 else None
        self.bias_rows = (tiling_cost.im2col_bias_rows(True, len(self.taps), TC, Cg, ctx.hw.matrix.rows,
                                                       tiles.orientation)
                          if bias is not None and tiles.im2col else 0)
        self.packs = self._pack_weights(w, None if bias is None else np.asarray(bias, np.float32))
        # the whole packed weight prefetched across the kernel boundary where it fits beside the
        # kernel before's buffers and this kernel's (`footprint`: the cost model's, its weight
        # blocks included): DMAd first and read in place (`weight_at`); no weight block DMAs in
        # the nest. Not with padded planes prepared in DRAM: their helper nest's allocs would
        # follow the DMAs and start a kernel of their own (the op markers' grouping). On server
        # bf16 weights of any size; else only weights within the DRAM's bandwidth-delay
        # product: a larger block arrives well after the first window, and the first matmul
        # waits for all of it where the streamed blocks let it start after one (kernel row)
        # block (`tiling_cost.conv_weights_resident`: why, and what was measured)
        helper = self.prepares_planes()
        hw = ctx.hw
        weight_bytes = sum(num_elements(shape_of(w)) * 2 for w in self.packs)
        whole = tiling_cost.conv_weights_resident(hw, weight_bytes, self.copies,
                                                  "bf16" if self.operand_type == bf16 else "int8")
        self.resident = (prefetch_packed(ctx, self.packs, *footprint) if footprint is not None and not helper and whole
                         else None)
        self._weight_origin: tuple[Index, Index] = (0, 0)
        # the compact bf16 output tile the last im2col chunk's row rounding wrote (`finish` stores it)
        self._rounded_rows: SSAValue | None = None
        # padded inputs: their planes prepared in DRAM first (planes.py); else built on chip
        self.planes = self.prepare_input()
        # the input the kernel before kept on chip, when it is this kernel's one window
        self.kept_input = self.window_on_chip()
        self._pools: dict[bool, dict] = {True: {}, False: {}}
        # with one channel step the weights of an output tile are loaded once per outer
        # output-channel tile (outer = "o"): single-buffered, shared by every row tile
        self.hoisted_weights = (self._weight_block(2 if self.groups >= 2 else 1)
                                if self.single and tiles.outer == "o" and self.resident is None
                                else None)
        # several channel steps with output-channel tiles outside (`ConvTiles.whole_weights`): the
        # output tile's whole block [TO, taps.Cg] loaded once per output tile, single-buffered;
        # each step reads its columns (`weight_at`): one weight DMA per output tile instead of
        # one per row tile and step
        self.whole_block = (self._whole_block() if self.tiles.whole_weights and self.resident is None
                            else None)
        # the bias of every output channel, loaded once before the loops
        self.alloc_vectors()
        self.out3 = em.view(self.output_buffer(), (N * O, p.OH, p.OW))
        # the whole bf16 output of several output-channel tiles, kept on chip for the next kernels
        self.kept_output = self.output_kept_whole(footprint)

    # -- what the int8 kernel overrides --------------------------------------------------------------
    def alloc_vectors(self) -> None:
        """The per-output-channel vectors, loaded once before the loops (`load_vectors`)."""
        self.bias = self.em.alloc((self.O, 1), f32, "spad") if self.op.bias is not None else None

    def load_vectors(self) -> None:
        if self.bias is not None:
            self.em.dma(self.em.view(self.ctx.buffer(self.op.bias), (self.O, 1)), [0, 0], self.bias, [0, 0],
                        [self.O, 1])

    #: the float kernel adds its f32 bias in the transposition back from "channels" (`finish`)
    bias_in_transpose = True

    #: ... or in the matmuls of an im2col operand with spare depth (`bias_rows`)
    bias_in_im2col = True

    #: the int8 kernel stores its own way (integer_conv.py)
    stores_deferrable = True

    def out_row(self, n: Index, gi: Index, o0: Index) -> Index:
        """The row of the [N.O, OH, OW] output view where output channel o0 of group gi of image
        n is."""
        return self.em.add(self.em.mul(n, self.O), self.em.add(self.em.mul(gi, self.Og), o0))

    def defers_stores(self) -> bool:
        """Does each row tile's output go out as slices stored by the next row tile's channel
        steps (one DMA per step, `tiling_cost.stores_deferred`) instead of one DMA after its
        epilogue? Not for an output kept on chip (stored from there) nor without the spec the
        cost model ranked."""
        return (self.stores_deferrable and self.spec is not None and self.kept_output is None
                and tiling_cost.stores_deferred(self.ctx.hw, self.spec, self.tiles))

    def epilogue(self, tile: SSAValue, frame: TileFrame, to: int, tq: int, bias_added: bool = False) -> SSAValue:
        """The bias (unless the transposition added it) and the fused elementwise ops on the
        [to, tq] accumulator tile (channels along rows from frame.row0); returns the tile to
        store. A relu after the bias add, or after an add of the biased tile (a residual), is
        computed by that add (`add_relu`, `fuses_relu`)."""
        em, ops, value = self.em, self.epilogue_ops, self.op.results[0]
        fuses = fuses_relu(ops, value, self.result) and self.p.Wq == self.p.OW
        if self.bias is not None and not bias_added and not self.bias_rows:
            if fuses and relu_alone(ops, value) is not None and not self.writes_kept_f32():
                # into the tile the relu would write
                out = em.alloc((frame.rows, frame.cols), f32, "spad", 2)
                em.vec("add_relu", out, [0, 0], tile, [0, 0], to, tq, self.bias, [frame.row0, 0], bmode="col")
                return out
            if fuses:
                # out of place: the add_relu of the residual then reads a tile the vector unit
                # wrote. Reading the accumulator, it would be that tile's last reader, and
                # signal its next round's matmuls beside the store and the next kernel that
                # read the rows it writes: one consumer more than an instruction signals
                # (conv_store.py `_store_from_kept`; ResNet-50 server 387 K -> 413 K cycles)
                biased = em.alloc((frame.rows, frame.cols), f32, "spad", 2)
                em.vec("add", biased, [0, 0], tile, [0, 0], to, tq, self.bias, [frame.row0, 0], bmode="col")
                return apply_epilogue(self.ctx, ops, {value: biased}, frame, self.result, fuse_relu=True)
            em.vec("add", tile, [0, 0], tile, [0, 0], to, tq, self.bias, [frame.row0, 0], bmode="col")
        return apply_epilogue(self.ctx, ops, {value: tile}, frame, self.result, fuse_relu=fuses and bias_added)

    def writes_kept_f32(self) -> bool:
        """Does the epilogue's last op write the rows of the kernel's whole output kept on chip
        in f32 itself (conv_store.py `_store_from_kept`)? That op may not read the accumulator:
        as its last reader it would signal one consumer more than an instruction can (a
        bottleneck's f32 trunk at 28x28 on server, its relu fused with the bias add: 16.6 K
        cycles, as many as with the next conv's windows not prepared ahead)."""
        return self.kept_output is not None and self.kept_output.type.get_element_type() == f32  # type: ignore[attr-defined]

    def rows_rounded_in_products(self, to: int, toh: int) -> str | None:
        """The vector op that rounds the accumulator's output rows into the compact bf16 output
        between the column groups of the tile's last matmuls (`_products_rounding_rows`: the
        last im2col chunk's, or a 1x1 conv's one product), or None (the epilogue after them):
        "relu" or "copy" where the matmuls add the bias (im2col bias rows) or there is none,
        else "add_relu" or "add" of the bias. For the kernel's one tile, in the "pixels"
        orientation, of a chunked im2col conv or a one-step 1x1 conv whose epilogue is a relu
        alone or nothing, with a bf16 output not kept by row tiles: the whole-tile epilogue ran
        after the last matmul with the array idle (ResNet-50 on server: the stem's relu, 1.6 K
        cycles before its max pool could start; its 3x3 64->64 convs at 56x56 and the 1x1 64->64
        after the pool, 408 each before the next conv could)."""
        p, ops, value = self.p, self.epilogue_ops, self.op.results[0]
        chunked = self.tiles.im2col and tiling_cost.chunked_im2col(len(self.taps), self.tiles.TC,
                                                                   self.ctx.hw.matrix.rows, self.copies)
        if self.channels_wide or not (chunked or (len(self.taps) == 1 and self.single)):
            return None
        if not (self.N == 1 and self.groups == 1 and to == self.O and toh == p.OH):
            return None
        if p.Wq != p.OW and toh > ROUNDED_ROWS_STRAIGHT_LINE:
            return None
        if self.kept_output is not None or self.defers_stores() or not self.ctx.is_bf16_buffer(self.out3):
            return None
        if ops and relu_alone(ops, value) is None:
            return None
        if self.bias is not None and not self.bias_rows:
            if ops and not fuses_relu(ops, value, self.result):  # (as the epilogue: `fuses_relu`)
                return None
            return "add_relu" if ops else "add"
        return "relu" if ops else "copy"

    def operand_copies(self) -> int:
        return self.ctx.bf16_copies

    def prepares_planes(self) -> bool:
        """Does the kernel start with the helper nest that prepares its input's planes in DRAM
        (`prepare_input`)?"""
        return self.p.preparable and not self.tiles.on_chip_padding

    def prepare_input(self) -> list[SSAValue] | None:
        """Padded or strided inputs: their planes prepared in DRAM (planes.py); None: windows
        built on chip from `input_source()` (unpadded stride-1 inputs, and the others where the
        cost model builds them on chip: ConvTiles.on_chip_padding)."""
        if not self.prepares_planes():
            return None
        return prepare_planes(self.ctx, self.ctx.buffer(self.op.input), self.N * self.C, self.p, "bf16",
                              self.copies, 0.0, pixel_major=self.C if self.channels_wide else 0)

    def input_source(self) -> SSAValue:
        return self.ctx.buffer(self.op.input)

    def window_on_chip(self) -> SSAValue | None:
        """The input as the kernel before kept it on chip (its whole bf16 output:
        conv_store.store_output_tile), viewed as this kernel's window [C, H.W], when that is the
        kernel's only window: a 1x1 stride-1 unpadded conv of one image with one channel step
        and one row tile, channel-major ("pixels"), bf16 operands. The matmuls read it in place:
        no load, so nothing waits for the kernel before's store and a DRAM round trip."""
        T, p = self.tiles, self.p
        if not (self.N == 1 and self.groups == 1 and p.raw and len(self.taps) == 1 and self.single
                and T.TOH >= p.OH and not self.channels_wide and not T.im2col and self.copies == 1
                and self.operand_type == bf16 and self.ctx.is_bf16_buffer(self.input_source())):
            return None
        return kept_window(self.ctx, self.input_source(), (self.C, p.H * p.W))

    def output_kept_whole(self, footprint: tuple[int, int] | None) -> SSAValue | None:
        """One [O, OH.OW] scratchpad buffer of the output's element type (bf16, or f32: the
        residual trunk a residual add reads too) for the whole output of a conv of several
        tiles (output-channel tiles, row tiles or both), on a latency-bound target: each tile's
        rows are written into it (conv_store), its store DMAs them from there, and the next kernels read
        the buffer instead of loading the output back (`LoweringContext.keep_on_chip`; a 1x1
        conv reads a bf16 one in place, `window_on_chip`; a `WindowLoader` copies or rounds its
        rows): their load waited for this kernel's last store and a DRAM latency of its own,
        the front end with it (ResNet-50's 1x1 256 -> 1024 at 14x14 on server: four tiles of 256
        channels, then the next block's 1x1 conv loads all 1024 channels). Only where the buffer
        fits beside the kernel's own buffers within 3/4 of the scratchpad and takes at most a
        quarter of it (it stays live to its last reader; the 56x56 stage's f32 trunk is 3.2 MB),
        without padded-width columns (the tiles' rows are then one run of the buffer), and not
        for a model output (no kernel reads it)."""
        T, p, ctx = self.tiles, self.p, self.ctx
        elem = self.out3.type.get_element_type()  # type: ignore[attr-defined]
        if not (self.N == 1 and self.groups == 1 and (T.TOH < p.OH or T.TO < self.O) and p.Wq == p.OW
                and footprint is not None and latency_bound(ctx.hw) and elem in (bf16, f32)
                and self.result not in ctx.destinations):  # (a model output no kernel reads)
            return None
        nbytes = self.O * p.OH * p.OW * (2 if elem == bf16 else 4)
        spad = ctx.hw.memory.scratchpad_bytes
        if nbytes > spad // 4 or footprint[0] + nbytes > spad * 3 // 4:
            return None
        return self.em.alloc((self.O, p.OH * p.OW), elem, "spad")

    def kept_output_readers(self) -> int:
        """The kernels named next that may read the output kept whole (`output_kept_whole`):
        KEPT_CONV_OUTPUT_READERS, and for a small f32 trunk one more (conv_store
        `kept_output_readers`): the residual add of the next block's third conv then copies its
        blocks out of it (elementwise.kept_block) instead of loading them. Small: the late
        ResNet-50 stage on server (2048 x 49, 392 KB), whose expanding convs' long epilogues go
        behind the next tile's matmuls with their residual loads issued late (tile-to-npu,
        docs/codegen.md "Deferred epilogue"), 1.9 K cycles; the 14x14 stage's trunk (784 KB)
        has its residual loads issued a tile ahead, and copied on the in-order vector unit
        instead they cost 0.13 K cycles per block."""
        assert self.kept_output is not None
        elem = self.kept_output.type.get_element_type()  # type: ignore[attr-defined]
        return kept_output_readers(self.ctx, self.kept_output) if elem == f32 else KEPT_CONV_OUTPUT_READERS

    def border(self) -> float:
        return 0.0

    def output_buffer(self) -> SSAValue:
        """bf16 where every consumer reads it as matrix-unit activations (`finish` then stores a
        compact bf16 copy of the tile)."""
        return self.ctx.narrow_output_buffer(self.result)

    def weight_parts(self, hint: str, packed: np.ndarray) -> list[SSAValue]:
        return packed_weight_parts(self.ctx, hint, packed)

    def _weight_block(self, buffers: int) -> list[Bf16Tile]:
        """The weight block of a channel step: one buffer, or with `row_split_weights` one per
        kernel row (its KW taps), each its own alloc (its own DMA, first use and rotation)."""
        em, T = self.em, self.tiles
        parts = self.KH if self.row_split_weights else 1
        taps = len(self.taps) // parts
        shape = (taps * T.TC, T.TO) if self.channels_wide else (T.TO, taps * T.TC + self.bias_rows)
        return [Bf16Tile(em.alloc(shape, self.operand_type, "spad", buffers),
                         em.alloc(shape, self.operand_type, "spad", buffers) if self.copies == 2 else None)
                for _ in range(parts)]

    def _whole_block(self) -> Bf16Tile:
        em, T = self.em, self.tiles
        depth = len(self.taps) * self.Cg + self.bias_rows
        shape = (depth, T.TO) if self.channels_wide else (T.TO, depth)
        return Bf16Tile(em.alloc(shape, self.operand_type, "spad"),
                        em.alloc(shape, self.operand_type, "spad") if self.copies == 2 else None)

    def load_whole_block(self, gi: Index, o_tile: Index, o0: Index, to: int) -> None:
        """The whole weight block of output tile o_tile: one DMA per copy (hi, lo)."""
        em, depth = self.em, len(self.taps) * self.Cg + self.bias_rows
        assert self.whole_block is not None
        for pack, dst in zip(self.packs, (self.whole_block.hi, self.whole_block.lo), strict=False):
            if dst is None:
                continue
            if self.channels_wide:
                nO = -(-self.Og // self.tiles.TO)
                em.dma(pack, [em.mul(em.add(em.mul(gi, nO), o_tile), depth), 0], dst, [0, 0], [depth, self.tiles.TO])
            else:
                em.dma(pack, [em.add(em.mul(gi, self.Og), o0), 0], dst, [0, 0], [to, depth])

    def buffer_counts(self, looped: bool) -> tuple[int, int, int]:
        """(window, weight block, accumulator and epilogue) buffers of looped or edge row tiles:
        2 where they rotate on a loop (the channel steps; the row loop for looped tiles; the
        output-channel loop when it is inside; the groups' loop), else 1 (`conv_footprint_counts`)."""
        T = self.tiles
        return conv_footprint_counts(-(-self.Cg // T.TC), -(-self.Og // T.TO), T.outer, looped, self.groups,
                                     T.single_acc)

    def buffers(self, looped: bool) -> "_Buffers":
        """The local buffers of looped or of edge row tiles (made on first use)."""
        if looped not in self._sets:
            with self.em.no_pool():
                self._sets[looped] = self._make_buffers(looped)
        return self._sets[looped]

    def _make_buffers(self, looped: bool) -> "_Buffers":
        """Allocated outside any alloc pool (they are made on first use, which may be inside a
        pooled tile): they rotate on the nest's own loops, and a pool would single-buffer them
        and hand them out again, by shape, to other code emitted in a pooled block."""
        em, T, p = self.em, self.tiles, self.p
        window_buffers, weight_buffers, acc_buffers = self.buffer_counts(looped)
        loader: WindowLoader | PreparedWindows | None
        if self.kept_input is not None:
            loader = None  # (the window is the kept input, read in place)
        elif self.planes is not None:
            loader = PreparedWindows(self.ctx, p, self.planes, self.N, self.C, T.TC, T.TOH,
                                     pixel_major=self.channels_wide, buffers=window_buffers)
        else:
            # the input rows copied from the kernel before's output kept on chip, if it is
            kept = (kept_window(self.ctx, self.input_source(), (self.C, p.H * p.W))
                    if copies_kept_rows(p, self.N) else None)
            loader = WindowLoader(self.ctx, p, self.input_source(), self.C, T.TC, T.TOH,
                                  pixel_major=self.channels_wide, targets=[self.operand_type] * self.copies,
                                  border=self.border(), buffers=window_buffers, kept=kept)
        windows = ([Bf16Tile(self.kept_input, None)] if loader is None
                   else [Bf16Tile(ws[0], ws[1] if len(ws) == 2 else None) for ws in loader.windows])
        wblock = ([] if self.resident is not None or self.whole_block is not None
                  else self.hoisted_weights or self._weight_block(weight_buffers))
        if self.channels_wide:
            acc = em.alloc((self.TQ, T.TO), self.accumulator_type, "acc", acc_buffers)
            acc_t = em.alloc((T.TO, self.TQ), self.accumulator_type, "spad", acc_buffers)
        else:
            acc, acc_t = em.alloc((T.TO, self.TQ), self.accumulator_type, "acc", acc_buffers), None
        im2col = None
        if T.im2col:
            shape = ((self.TQ, len(self.taps) * T.TC) if self.channels_wide
                     else (len(self.taps) * T.TC + self.bias_rows, self.TQ))
            im2col = Bf16Tile(em.alloc(shape, self.operand_type, "spad", window_buffers),
                              em.alloc(shape, self.operand_type, "spad", window_buffers) if self.copies == 2
                              else None)
        return _Buffers(loader, windows, wblock, acc, acc_t, im2col)

    # -- weights -------------------------------------------------------------------------------
    def _pack_weights(self, w: np.ndarray, bias: np.ndarray | None = None) -> list[SSAValue]:
        """pixels: rows (g, o), columns (channel step, tap, channel): the block of a channel step
        is [TO, taps.tc] at column taps.c0; with `bias_rows`, three more columns: the bias in
        bf16 parts (`bias_parts`). channels: per (g, output tile j, channel step, tap,
        channel) a row of TO output channels (zero past Og): the block [taps.tc, TO] starts at row
        (g.nO + j).taps.Cg + taps.c0, one contiguous run."""
        TO, TC = self.tiles.TO, self.tiles.TC
        G, Og, Cg, KH, KW = self.groups, self.Og, self.Cg, self.KH, self.KW
        taps = KH * KW
        w5 = w.reshape(G, Og, Cg, KH, KW)
        steps = [(c0, min(TC, Cg - c0)) for c0 in range(0, Cg, TC)]
        if not self.channels_wide:
            cols = [w5[:, :, c0:c0 + tc].reshape(G, Og, tc, taps).transpose(0, 1, 3, 2).reshape(G * Og, taps * tc)
                    for c0, tc in steps]
            if self.bias_rows:
                assert bias is not None
                cols.append(bias_parts(bias, self.bias_rows))
            packed = np.concatenate(cols, axis=1)
        else:
            nO = -(-Og // TO)
            wp = np.zeros((G, nO * TO, Cg, taps), w.dtype)
            wp[:, :Og] = w5.reshape(G, Og, Cg, taps)
            wp = wp.reshape(G, nO, TO, Cg, taps)
            blocks = [wp[:, :, :, c0:c0 + tc].transpose(0, 1, 4, 3, 2).reshape(G, nO, taps * tc, TO)
                      for c0, tc in steps]
            packed = np.concatenate(blocks, axis=2).reshape(G * nO * taps * Cg, TO)
        owner = self.op.weight.owner
        hint = owner.weight_key if isinstance(owner, g.WeightOp) else f"{self.name}.weight"
        return self.weight_parts(hint + (".packed_t" if self.channels_wide else ".packed"),
                                 np.ascontiguousarray(packed))

    def load_weights(self, wblock: list[Bf16Tile], gi: Index, o_tile: Index, o0: Index, to: int, c0: Index,
                     tc: int, pieces: int = 1) -> None:
        """The weight block of output tile o_tile, channel step c0: one DMA per part (kernel
        row, `row_split_weights`) and bf16 copy; resident weights: the block's origin in them.
        `pieces`: a channels-orientation part (one contiguous run of rows, tap by tap) in up to
        that many DMAs of consecutive rows, so the matmuls of its first taps wait for their own
        rows only (dependencies are byte ranges), not for the whole block."""
        em, taps = self.em, len(self.taps)
        if self.whole_block is not None:  # the step's columns (rows) of the output tile's block
            self._weight_origin = (em.mul(c0, taps), 0) if self.channels_wide else (0, em.mul(c0, taps))
            return
        if self.resident is not None:
            if self.channels_wide:
                nO = -(-self.Og // self.tiles.TO)
                self._weight_origin = (em.add(em.mul(em.add(em.mul(gi, nO), o_tile), taps * self.Cg),
                                              em.mul(c0, taps)), 0)
            else:
                self._weight_origin = (em.add(em.mul(gi, self.Og), o0), em.mul(c0, taps))
            return
        span = taps // len(wblock) * tc  # a part's rows (channels) or columns (pixels)
        for i, block in enumerate(wblock):
            span_i = span + (self.bias_rows if i == len(wblock) - 1 else 0)  # (the bias columns after the taps)
            for pack, dst in zip(self.packs, (block.hi, block.lo), strict=False):
                if dst is None:
                    continue
                if self.channels_wide:
                    nO = -(-self.Og // self.tiles.TO)
                    row = em.add(em.mul(em.add(em.mul(gi, nO), o_tile), taps * self.Cg), em.mul(c0, taps))
                    cuts = [span * k // pieces for k in range(pieces + 1)]
                    for r0, r1 in zip(cuts, cuts[1:]):
                        if r1 > r0:
                            em.dma(pack, [em.add(row, i * span + r0), 0], dst, [r0, 0], [r1 - r0, self.tiles.TO])
                else:
                    em.dma(pack, [em.add(em.mul(gi, self.Og), o0), em.add(em.mul(c0, taps), i * span)], dst, [0, 0],
                           [to, span_i])

    def load_window(self, bufs: "_Buffers", n: Index, gi: Index, rows: tuple[Index, int, int, int], c0: Index,
                    tc: int, after_plane: Callable[[int], None] | None = None) -> None:
        """The window of channel step c0 for rows; `after_plane`: WindowLoader.load's (only with a
        WindowLoader: `interleaves_planes`)."""
        oh0, toh, top, bottom = rows
        if bufs.loader is None:  # the kept input (`window_on_chip`)
            return
        channel = self.em.add(self.em.mul(gi, self.Cg), c0)
        if after_plane is None:
            bufs.loader.load(n, channel, oh0, toh, tc, top, bottom)
        else:
            assert isinstance(bufs.loader, WindowLoader)
            bufs.loader.load(n, channel, oh0, toh, tc, top, bottom, after_plane=after_plane)

    def weight_at(self, bufs: "_Buffers", part: int, tc: int,
                  at: tuple[Index, Index]) -> tuple[Bf16Tile, tuple[Index, Index]]:
        """The weight operand of part `part` (kernel row) of the current block and the origin of
        `at` (relative to the block) in it: the block buffer, or the resident weights."""
        block = self.resident if self.resident is not None else self.whole_block
        if block is None:
            return bufs.wblock[part], at
        em = self.em
        shift = part * (len(self.taps) // self.parts) * tc  # a part's rows (channels) or columns (pixels)
        r0, c0 = self._weight_origin
        if self.channels_wide:
            return block, (em.add(em.add(r0, shift), at[0]), em.add(c0, at[1]))
        return block, (em.add(r0, at[0]), em.add(em.add(c0, shift), at[1]))

    @property
    def parts(self) -> int:
        return self.KH if self.row_split_weights else 1

    # -- one output tile -------------------------------------------------------------------------
    def plane_taps(self, plane: int) -> tuple[int, int, int, int]:
        """The taps reading `plane` as a grid: (kh0, kh step, count) x (kw0, kw step, count) ->
        (kh0, nh, kw0, nw) with steps sh/gcd and sw/gcd folded in `tap_at`."""
        khs, kws = plane_tap_grid(self.p, self.KH, self.KW, plane)
        return khs[0], len(khs), kws[0], len(kws)

    def tap_steps(self, plane: int) -> tuple[int, int]:
        khs, kws = plane_tap_grid(self.p, self.KH, self.KW, plane)
        return (khs[1] - khs[0] if len(khs) > 1 else 1), (kws[1] - kws[0] if len(kws) > 1 else 1)

    def over_taps(self, body: Callable[..., None], planes: Sequence[int] | None = None,
                  first: Callable[..., None] | None = None) -> None:
        """body(plane, tap index, window offset) for every tap (of `planes`, default all): per
        plane a loop nest over its taps (both affine in the loop variables: the taps of one
        plane are a grid). With `row_split_weights` the kernel rows are unrolled: body(plane,
        tap index within the row, window offset, kernel row). `first`: called instead of body
        for the first tap, emitted ahead of the nest (the rest of its kernel row, then the other
        rows): the product that overwrites the accumulator, which is then not zeroed first."""
        em, p = self.em, self.p
        for plane in range(len(p.phases)) if planes is None else planes:
            kh0, nh, kw0, nw = self.plane_taps(plane)
            # weights loaded per kernel row: the rows' tap loops are emitted one after the other,
            # each reading its row's part of the weights (tap index within the row)
            split = self.row_split_weights
            dkh, dkw = self.tap_steps(plane)
            # row shift (dh.kh) // sh and column shift (dw.kw) // sw grow by dh.dkh/sh, dw.dkw/sw
            row_step = p.dilation[0] * dkh // p.stride[0]
            col_step = p.dilation[1] * dkw // p.stride[1]
            base_t, base_off = kh0 * self.KW + kw0, p.offset(kh0, kw0)

            def tap(a: Index, b: Index, plane: int = plane, base_t: int = base_t, base_off: int = base_off,
                    dkh: int = dkh, dkw: int = dkw, row_step: int = row_step, col_step: int = col_step,
                    body: Callable[..., None] = body) -> None:
                offset = em.add(em.add(em.mul(a, row_step * p.Wq), em.mul(b, col_step)), base_off)
                if split:  # a: a compile-time kernel row
                    body(plane, em.add(em.mul(b, dkw), base_t % self.KW), offset, kh0 + a * dkh)  # type: ignore[operator]
                    return
                t = em.add(em.add(em.mul(a, dkh * self.KW), em.mul(b, dkw)), base_t)
                body(plane, t, offset)

            if first is not None:  # (the first tap alone, then the taps after it)
                tap(0, 0, body=first)  # type: ignore[call-arg]
                em.range(nw - 1, lambda b, tap=tap: tap(0, em.add(b, 1)))
                if split:
                    for a in range(1, nh):
                        em.range(nw, lambda b, a=a, tap=tap: tap(a, b))
                else:
                    em.range(nh - 1, lambda a, tap=tap, nw=nw: em.range(nw, lambda b: tap(em.add(a, 1), b)))
                first = None
            elif split:
                for a in range(nh):
                    em.range(nw, lambda b, a=a, tap=tap: tap(a, b))
            else:
                em.range(nh, lambda a, tap=tap, nw=nw: em.range(nw, lambda b: tap(a, b)))

    def products(self, bufs: "_Buffers", to: int, toh: int, tc: int, first: bool,
                 planes: Sequence[int] | None = None) -> None:
        """Every tap's matmuls of one channel step into the accumulator tile: per tap a product
        with the shifted window (a loop nest over the taps; `first`: one tap, which overwrites
        the accumulator), or, with im2col, the windows' tap shifts copied into one [taps.tc,
        pixels] operand first and one product of depth taps.tc. `planes`: only the taps of
        those planes (`interleaves_planes`; not with im2col)."""
        ctx, em, p = self.ctx, self.em, self.p
        tq = toh * p.Wq
        if bufs.im2col is not None and tiling_cost.chunked_im2col(len(self.taps), tc, ctx.hw.matrix.rows,
                                                                            self.copies):
            self.chunked_im2col_products(bufs, to, tq, tc, first)
            return
        if bufs.im2col is not None:
            cols = bufs.im2col
            self.fill_bias_rows(cols, tc, tq)

            def gather(plane: int, t: Index, offset: Index) -> None:
                for src, dst in ((bufs.windows[plane].hi, cols.hi), (bufs.windows[plane].lo, cols.lo)):
                    if src is None or dst is None:
                        continue
                    if self.channels_wide:
                        em.vec("copy", dst, [0, em.mul(t, tc)], src, [offset, 0], tq, tc)
                    else:
                        em.vec("copy", dst, [em.mul(t, tc), 0], src, [0, offset], tc, tq)

            self.over_taps(gather)
            depth = len(self.taps) * tc + self.bias_rows
            weights, at = self.weight_at(bufs, 0, tc, (0, 0))
            if self.channels_wide:
                emit_tile_product(ctx, cols, weights, bufs.acc, tq, depth, to, rhs_at=at, overwrite=first)
            else:
                emit_tile_product(ctx, weights, cols, bufs.acc, to, depth, tq, width_outer=True, lhs_at=at,
                                  overwrite=first)
            return

        def product(plane: int, t: Index, offset: Index, part: int = 0, overwrite: bool = False) -> None:
            # (t: the tap within the part)
            if self.channels_wide:
                weights, at = self.weight_at(bufs, part, tc, (em.mul(t, tc), 0))
                emit_tile_product(ctx, bufs.windows[plane], weights, bufs.acc, tq, tc, to,
                                  lhs_at=(offset, 0), rhs_at=at, overwrite=overwrite)
            else:
                weights, at = self.weight_at(bufs, part, tc, (0, em.mul(t, tc)))
                emit_tile_product(ctx, weights, bufs.windows[plane], bufs.acc, to, tc, tq, width_outer=True,
                                  lhs_at=at, rhs_at=(0, offset), overwrite=overwrite)

        if len(self.taps) == 1 and first and (op := self.rows_rounded_in_products(to, toh)) is not None:
            weights, at = self.weight_at(bufs, 0, tc, (0, 0))
            self._products_rounding_rows(weights, at, bufs.windows[0], bufs.acc, to, tc, tq, 0, True, op)
        elif len(self.taps) == 1:
            product(0, 0, 0, overwrite=first)
        elif first and self.FIRST_TAP_OVERWRITES and (planes is None or planes[0] == 0):
            # (the first plane's first tap overwrites: the taps of a one-step tile are its
            # products, and plane 0 comes first, interleaved or not)
            self.over_taps(product, planes, first=lambda *args: product(*args, overwrite=True))
        else:
            self.over_taps(product, planes)

    def fill_bias_rows(self, cols: Bf16Tile, tc: int, tq: int) -> None:
        """The im2col operand's bias rows (`bias_rows`, after the taps' rows): ones, and zeros
        in the fp32 emulation's lo part (the bias parts are bf16 values)."""
        if self.bias_rows:
            for dst, value in ((cols.hi, 1.0), (cols.lo, 0.0)):
                if dst is not None:
                    self.em.fill(dst, [len(self.taps) * tc, 0], self.bias_rows, tq, value)

    def chunked_im2col_products(self, bufs: "_Buffers", to: int, tq: int, tc: int, first: bool) -> None:
        """im2col deeper than the array: per chunk of array rows of the [taps.tc] depth, the tap
        shifts it holds copied (one `copy` per tap, straight-line; the next chunk's before this
        chunk's matmuls), then that chunk's matmuls.
        The matmuls of a chunk wait only for its own copies (the dependency tracker sees
        each copy's rows), so the array starts after the first chunk's copies instead of
        all of them and the rest of the copies overlap the matmuls (the in-order vector unit
        would otherwise build every tap before the first matmul)."""
        ctx, em, p = self.ctx, self.em, self.p
        cols = bufs.im2col

        def copy_taps(t_lo: int, t_hi: int, c0: int = 0, width: int = tq) -> None:
            """The taps' rows, columns [c0, c0 + width) ("pixels" orientation; all otherwise)."""
            if t_hi == len(self.taps) and t_hi > t_lo and c0 == 0:  # (the last chunk's rows hold the bias rows)
                self.fill_bias_rows(cols, tc, tq)
            for t in range(t_lo, t_hi):
                plane, ro, co = p.tap(*self.taps[t])
                offset = ro * p.Wq + co
                for src, dst in ((bufs.windows[plane].hi, cols.hi), (bufs.windows[plane].lo, cols.lo)):
                    if src is None or dst is None:
                        continue
                    if self.channels_wide:
                        em.vec("copy", dst, [0, t * tc], src, [offset, 0], tq, tc)
                    else:
                        em.vec("copy", dst, [t * tc, c0], src, [0, offset + c0], tc, width)

        chunks = im2col_chunks(len(self.taps), tc, ctx.hw.matrix.rows, self.bias_rows)
        assert not self.bias_rows or chunks[-1][3] > chunks[-1][2]  # (copy_taps fills them with its taps)
        groups = self.copy_column_groups(chunks, tq)
        rows_op = self.rows_rounded_in_products(to, tq // p.Wq)
        if groups:
            # every chunk's copies by column groups of whole array-wide blocks (a block's
            # matmul reads its own columns): the first chunk's groups all ahead of its matmuls,
            # each later chunk's group right after the chunk before's matmuls of those columns.
            # The array starts after the first group's copies, and a chunk's block waits only
            # for its own columns' copies, made while the array works through the chunk before
            for c0, width in groups:
                copy_taps(*chunks[0][2:], c0, width)
            for i, (k0, k, _, _) in enumerate(chunks):
                weights, at = self.weight_at(bufs, 0, tc, (0, k0))
                if rows_op is not None and i == len(chunks) - 1:
                    self._products_rounding_rows(weights, at, cols, bufs.acc, to, k, tq, k0, first and k0 == 0, rows_op)
                    break
                for c0, width in groups:
                    emit_tile_product(ctx, weights, cols, bufs.acc, to, k, width, width_outer=True, lhs_at=at,
                                      rhs_at=(k0, c0), acc_at=(0, c0), overwrite=first and k0 == 0)
                    if i + 1 < len(chunks):
                        copy_taps(*chunks[i + 1][2:], c0, width)
            return
        # else whole chunks: the copies run one chunk ahead of the matmuls when the vector queue
        # holds them: the front end dispatches a chunk's copies before it waits on the matrix
        # queue behind the chunk before's matmuls (more copies than the queue holds would hold up
        # the matmuls' dispatch instead: the stem's 42 taps of its second chunk)
        queue = ctx.hw.vector.queue_depth
        ahead = [(t_hi - t_lo) * self.copies <= queue for _, _, t_lo, t_hi in chunks]
        # with the second chunk's copies between column groups of the first chunk's matmuls,
        # the first chunk's copies go by those column groups too, each group's right before its
        # matmuls: the array starts after one group's copies instead of all of the chunk's (the
        # server stem's first chunk: 8 taps over 12,880 columns, 608 cycles before its first
        # matmul)
        split_first = len(chunks) > 1 and not ahead[1] and self.interleaves_copies(tq, chunks[1])
        if not split_first:
            copy_taps(*chunks[0][2:])
        for i, (k0, k, _, _) in enumerate(chunks):
            if i + 1 < len(chunks) and ahead[i + 1]:
                copy_taps(*chunks[i + 1][2:])
            if i > 0 and not ahead[i] and not self.interleaves_copies(tq, chunks[i]):
                copy_taps(*chunks[i][2:])
            if i + 1 < len(chunks) and not ahead[i + 1] and self.interleaves_copies(tq, chunks[i + 1]):
                # the next chunk's copies, more than the vector queue holds, in groups that go
                # between column groups of this chunk's matmuls: the front end dispatches each
                # group while the matrix unit works through the columns before it (the server
                # stem's 43 taps had run after all of the first chunk's matmuls, the array idle)
                weights, at = self.weight_at(bufs, 0, tc, (0, k0))
                _, _, t_lo, t_hi = chunks[i + 1]
                per_group = max(1, queue // self.copies)
                groups = tiling_cost.column_groups(tq, ctx.hw.matrix.cols, -(-(t_hi - t_lo) // per_group))
                # (as many tap groups as column groups: fewer columns than wanted make them larger)
                per_group = max(per_group, -(-(t_hi - t_lo) // len(groups)))
                bounds = [min(t_hi, t_lo + j * per_group) for j in range(len(groups) + 1)]
                if split_first and i == 0:
                    copy_taps(*chunks[0][2:], *groups[0])
                for g, ((c0, width), t_a, t_b) in enumerate(zip(groups, bounds, bounds[1:], strict=False)):
                    emit_tile_product(ctx, weights, cols, bufs.acc, to, k, width, width_outer=True, lhs_at=at,
                                      rhs_at=(k0, c0), acc_at=(0, c0), overwrite=first and k0 == 0)
                    if split_first and i == 0 and g + 1 < len(groups):
                        # (ahead of the next chunk's copies: the front end dispatches them once
                        # this group's matmuls are queued, and the next group waits for its own)
                        copy_taps(*chunks[0][2:], *groups[g + 1])
                    copy_taps(t_a, t_b)
                continue
            if self.channels_wide:
                weights, at = self.weight_at(bufs, 0, tc, (k0, 0))
                emit_tile_product(ctx, cols, weights, bufs.acc, tq, k, to, lhs_at=(0, k0), rhs_at=at,
                                  overwrite=first and k0 == 0)
            elif rows_op is not None and i == len(chunks) - 1:
                weights, at = self.weight_at(bufs, 0, tc, (0, k0))
                self._products_rounding_rows(weights, at, cols, bufs.acc, to, k, tq, k0, first and k0 == 0, rows_op)
            else:
                weights, at = self.weight_at(bufs, 0, tc, (0, k0))
                emit_tile_product(ctx, weights, cols, bufs.acc, to, k, tq, width_outer=True, lhs_at=at,
                                  rhs_at=(k0, 0), overwrite=first and k0 == 0)

    def _products_rounding_rows(self, weights: Bf16Tile, at: tuple[Index, Index], cols: Bf16Tile, acc: SSAValue,
                                to: int, k: int, tq: int, k0: int, overwrite: bool, op: str) -> None:
        """The tile's last matmuls (depth rows [k0, k0 + k) of `cols`: the last im2col chunk, or
        a 1x1 conv's window) by column groups of ROUNDED_ROW_GROUP_BLOCKS array-wide blocks,
        each followed by the rounding (`op`, `rows_rounded_in_products`) of the output rows the
        group before it completed into a compact bf16 tile, which `finish` stores. One group
        behind: the front end reaches those rows' ops once the group before has drained, not
        while the matmuls after it wait to be dispatched. One op per output row where the rows
        have padded-width columns (every channel's OW valid columns of the row: no box of
        several rows; straight-line, at most ROUNDED_ROWS_STRAIGHT_LINE), else one per group."""
        em, p = self.em, self.p
        toh = tq // p.Wq
        compact = em.alloc((to, toh * p.OW), bf16, "spad", 2)
        block = self.ctx.hw.matrix.cols
        groups = tiling_cost.column_groups(tq, block, -(-tq // (block * ROUNDED_ROW_GROUP_BLOCKS)))
        bias = ({"b": self.bias, "b_index": [0, 0], "bmode": "col"} if op in ("add", "add_relu") else {})
        rounded = 0

        def round_rows(upto: int) -> None:
            nonlocal rounded
            if p.Wq == p.OW and upto > rounded:
                em.vec(op, compact, [0, rounded * p.OW], acc, [0, rounded * p.OW], to, (upto - rounded) * p.OW, **bias)
            elif p.Wq != p.OW:
                for oh in range(rounded, upto):
                    em.vec(op, compact, [0, oh * p.OW], acc, [0, oh * p.Wq], to, p.OW, **bias)
            rounded = max(rounded, upto)

        complete = 0  # output rows whose OW valid columns the groups so far computed
        for c0, width in groups:
            emit_tile_product(self.ctx, weights, cols, acc, to, k, width, width_outer=True, lhs_at=at,
                              rhs_at=(k0, c0), acc_at=(0, c0), overwrite=overwrite)
            round_rows(complete)
            complete = (c0 + width - p.OW) // p.Wq + 1 if c0 + width >= p.OW else 0
        round_rows(toh)
        self._rounded_rows = compact

    def copy_column_groups(self, chunks: list[tuple[int, int, int, int]], tq: int) -> list[tuple[int, int]]:
        """The column groups `chunked_im2col_products` copies and multiplies each chunk in
        (pixels orientation), or [] (whole chunks): `tiling_cost.im2col_copy_groups`."""
        if self.channels_wide:
            return []
        most = max(t_hi - t_lo for _, _, t_lo, t_hi in chunks)
        return tiling_cost.im2col_copy_groups(self.ctx.hw, tq, most, self.copies)

    def interleaves_planes(self, bufs: "_Buffers", looped: bool, weights_loaded: bool) -> bool:
        """Are the stride-phase planes' products emitted between the planes' placements, one
        plane behind (plane k's taps after plane k+1's window: the WindowLoader's
        `after_plane`), instead of after every plane? The in-order front end reached the first
        product only once the vector queue had taken nearly every plane's gathers and copies,
        so the array waited for all four planes of a 3x3/2 conv where its first taps read one;
        a plane's products right after its own placement fill the matrix queue and hold the
        front end before the next plane's copies instead. For the windows of several phases
        built on chip, placed in the planes' order (so the taps' products, and the sums, come
        in the usual order), in a tile emitted once (a looped tile keeps its loads and their
        vector preparation together, which tile-to-npu issues an iteration ahead:
        docs/codegen.md "Pipelined preparation") with one channel step and its weights already
        on chip (resident or loaded ahead), no im2col."""
        loader = bufs.loader
        return (not looped and self.single and len(self.p.phases) > 1 and isinstance(loader, WindowLoader)
                and loader.plane_order() == list(range(len(self.p.phases)))
                and bufs.im2col is None and not self.row_split_weights
                and (weights_loaded or self.resident is not None))

    def interleaves_copies(self, tq: int, chunk: tuple[int, int, int, int]) -> bool:
        """Are the tap copies of im2col chunk `chunk` emitted between column groups of the chunk
        before's matmuls (`chunked_im2col_products`)? In the "pixels" orientation, where the
        chunk before's product spans at least two array-wide column blocks."""
        return not self.channels_wide and tq > self.ctx.hw.matrix.cols and chunk[3] > chunk[2]

    def _transpose(self, src: SSAValue, dst: SSAValue, rows: int, cols: int,
                   bias: SSAValue | None = None, row0: Index = 0) -> None:
        """dst[:cols, :rows] = src[:rows, :cols]^T by a loop of copies over the smaller side;
        with `bias` (the [O, 1] per-output-channel vector, dst's rows its entries from `row0`)
        each copy is an add of the bias instead: the same sums as adding it to the transposed
        tile afterwards, without that pass over it on the in-order vector unit (whose next
        tile's window building waits behind this epilogue)."""
        em = self.em
        src_rows, src_cols = src.type.get_shape()  # type: ignore[attr-defined]
        dst_rows, dst_cols = dst.type.get_shape()  # type: ignore[attr-defined]
        if rows <= cols:  # row r of src -> column r of dst (dst's rows: the output channels)
            flat = em.view(src, (src_rows * src_cols, 1))
            if bias is None:
                em.range(rows, lambda r: em.vec("copy", dst, [0, r], flat, [em.mul(r, src_cols), 0], cols, 1))
            else:
                em.range(rows, lambda r: em.vec("add", dst, [0, r], flat, [em.mul(r, src_cols), 0], cols, 1,
                                                bias, [row0, 0], bmode="col"))
        else:  # column j of src -> row j of dst (output channel j)
            flat = em.view(dst, (dst_rows * dst_cols, 1))
            if bias is None:
                em.range(cols, lambda j: em.vec("copy", flat, [em.mul(j, dst_cols), 0], src, [0, j], rows, 1))
            else:
                em.range(cols, lambda j: em.vec("add", flat, [em.mul(j, dst_cols), 0], src, [0, j], rows, 1,
                                                bias, [em.add(row0, j), 0], bmode="row"))

    def finish(self, bufs: "_Buffers", n: Index, gi: Index, o0: Index, to: int, oh0: Index, toh: int,
               staged: SSAValue | None = None) -> None:
        """Bias, epilogue and the store of one output tile; with `staged` (`defers_stores`) the
        tile is written there and stored by the next tile's channel steps instead."""
        em, p = self.em, self.p
        tq = toh * p.Wq
        tile = bufs.acc
        r0 = em.add(em.mul(gi, self.Og), o0)
        whole = (self.N == 1 and self.groups == 1 and to == self.O and toh == p.OH
                 and latency_bound(self.ctx.hw))
        if self._rounded_rows is not None:  # (`chunked_im2col_products` wrote the compact tile)
            compact, self._rounded_rows = self._rounded_rows, None
            store_compact_tile(self.ctx, p, self.out3, compact, em.add(em.mul(n, self.O), r0), oh0, to, toh, whole)
            return
        # the bias added by the transposition back from the "channels" orientation
        fused_bias = self.bias if bufs.acc_t is not None and self.bias_in_transpose else None
        if bufs.acc_t is not None:
            self._transpose(bufs.acc, bufs.acc_t, tq, to, fused_bias, r0)
            tile = bufs.acc_t
        pitch = p.Wq if p.Wq != p.OW else 0
        frame = TileFrame((self.N,), (self.O,), (p.OH, p.OW), n, r0, em.mul(oh0, p.OW), to, tq, pitch, oh0)
        result_tile = self.epilogue(tile, frame, to, tq, bias_added=fused_bias is not None)
        if staged is not None:
            stage_output_tile(em, p, result_tile, to, toh, staged)
            return
        # the kernel's one tile, kept on chip where the next kernel's load of it would be a DRAM
        # round trip long against its transfer (context.latency_bound; on edge the scratchpad is
        # small and the DRAM's bandwidth, not its latency, bounds the kernels): `whole`
        store_output_tile(self.ctx, p, self.out3, result_tile, em.add(em.mul(n, self.O), r0), oh0, to, toh, whole,
                          self.kept_output)

    # -- the nest --------------------------------------------------------------------------------
    def emit(self) -> None:
        em, p, T = self.em, self.p, self.tiles
        TO, TOH, TC = T.TO, T.TOH, T.TC
        single = self.single

        def out_tiles(body: Callable[[Index, Index, int], None]) -> None:
            """body(tile index, o0, to) over the output-channel tiles (the tile index is a loop
            variable, so the packed weight row is affine in it)."""
            full, rem = divmod(self.Og, TO)
            if full == 1:
                body(0, 0, TO)
            elif full > 1:
                em.loop(0, full, 1, lambda j: body(j, em.mul(j, TO), TO))
            if rem:
                body(full, full * TO, rem)

        def tile(bufs: _Buffers, n: Index, gi: Index, j: Index, o0: Index, to: int,
                 rows: tuple[Index, int, int, int], window_loaded: bool, weights_loaded: bool,
                 once: bool = False, staged: SSAValue | None = None, looped: bool = True) -> None:
            oh0, toh = rows[0], rows[1]

            def store_previous_rows(step_number: Index) -> None:
                # rows of the tile before this one (the row loop's previous iteration), a slice
                # per channel step: the DMAs go out between the steps' window loads instead of
                # one transfer ahead of them all (`defers_stores`)
                assert staged is not None and not isinstance(oh0, int)
                piece = to // (self.Cg // TC)
                out_row = self.out_row(n, gi, o0)
                em.after_first(oh0, 0, lambda: store_staged_rows(em, p, self.out3, staged, out_row,
                                                                 em.sub(oh0, toh), em.mul(step_number, piece),
                                                                 piece, toh))

            def step(c0: Index, tc: int, first: bool, step_number: Index | None = None) -> None:
                # windows of several prepared planes: the weight block first, so the loads'
                # first consumers (the first matmul, then each plane's) come in load order and
                # all of them are issued one step early (rotation.pipelinable_loads)
                weights_first = self.planes is not None and len(p.phases) > 1
                # (one step of a tile emitted once: its block in pieces, as a hoisted one's)
                pieces = HOISTED_WEIGHT_PIECES if single and once else 1
                if not weights_loaded and weights_first:
                    self.load_weights(bufs.wblock, gi, j, o0, to, c0, tc, pieces)
                if not window_loaded and self.interleaves_planes(bufs, looped, weights_loaded):
                    if not weights_loaded:  # (resident: the block's origin, no DMA)
                        self.load_weights(bufs.wblock, gi, j, o0, to, c0, tc, pieces)
                    placed: list[int] = []

                    def plane_products(plane: int) -> None:
                        # (one plane behind: the vector unit places a plane while the array
                        # multiplies the one before)
                        if placed:
                            self.products(bufs, to, toh, tc, first, (placed[-1],))
                        placed.append(plane)

                    self.load_window(bufs, n, gi, rows, c0, tc, after_plane=plane_products)
                    self.products(bufs, to, toh, tc, first, (placed[-1],))
                    assert placed == list(range(len(p.phases))), placed  # (interleaves_planes)
                else:
                    if not window_loaded:
                        self.load_window(bufs, n, gi, rows, c0, tc)
                    if not weights_loaded and not weights_first:
                        self.load_weights(bufs.wblock, gi, j, o0, to, c0, tc, pieces)
                    self.products(bufs, to, toh, tc, first)
                if staged is not None and step_number is not None:
                    store_previous_rows(step_number)

            if single and self.overwrites:
                step(0, self.Cg, True)
            else:  # zero the accumulator; the steps stay one loop (software-pipelined)
                em.fill(bufs.acc, [0, 0], *((toh * p.Wq, to) if self.channels_wide else (to, toh * p.Wq)), 0.0)
                if staged is not None:  # (counted steps: each stores its slice of the tile before)
                    em.loop(0, self.Cg // TC, 1, lambda k: step(em.mul(k, TC), TC, False, k))
                else:
                    em.tiles(self.Cg, TC, lambda c0, tc: step(c0, tc, False))
            self.finish(bufs, n, gi, o0, to, oh0, toh, staged)

        def per_image(n: Index, gi: Index) -> None:
            if T.outer == "o":
                def over_rows(j: Index, o0: Index, to: int) -> None:
                    if self.hoisted_weights is not None or (self.resident is not None and single):
                        # (loaded once per output tile, ahead of its row tiles: in pieces)
                        self.load_weights(self.hoisted_weights or [], gi, j, o0, to, 0, TC, HOISTED_WEIGHT_PIECES)
                    if self.whole_block is not None:
                        self.load_whole_block(gi, j, o0, to)

                    def row(oh0: Index, toh: int, top: int, bottom: int, looped: bool) -> None:
                        with em.alloc_pool(self._pools[looped], single=self.buffer_counts(looped)[2] == 1):
                            tile(self.buffers(looped), n, gi, j, o0, to, (oh0, toh, top, bottom), False, single,
                                 looped=looped,
                                 staged=staged)
                    if staged is None:
                        row_tiles(em, p, TOH, self.planes is None, row)
                        return
                    # every row tile in one loop; each stores the tile before it, the last one
                    # is stored after the loop
                    em.loop(0, p.OH, TOH, lambda oh0: row(oh0, TOH, 0, 0, True))
                    store_staged_rows(em, p, self.out3, staged, self.out_row(n, gi, o0), p.OH - TOH, 0, to, TOH)
                out_tiles(over_rows)
            else:
                def over_outputs(oh0: Index, toh: int, top: int, bottom: int, looped: bool) -> None:
                    rows = (oh0, toh, top, bottom)
                    bufs = self.buffers(looped)
                    with em.alloc_pool(self._pools[looped], single=self.buffer_counts(looped)[2] == 1):
                        if single:
                            self.load_window(bufs, n, gi, rows, 0, TC)
                        once = not looped and self.Og <= TO  # (one row tile, one output tile)
                        out_tiles(lambda j, o0, to: tile(bufs, n, gi, j, o0, to, rows, single, False, once,
                                                         looped=looped))
                row_tiles(em, p, TOH, self.planes is None, over_outputs)

        staged = None
        if self.defers_stores():  # one buffer: read by the next tile's steps, then written again
            with em.no_pool():
                staged = em.alloc((T.TO, TOH * p.OW), self.out3.type.get_element_type(), "spad", 1)  # type: ignore[attr-defined]
        self.load_vectors()
        em.range(self.N, lambda n: em.range(self.groups, lambda gi: per_image(n, gi)))
        if self.kept_output is not None:
            self.ctx.keep_on_chip(self.out3, self.kept_output, next_kernels=self.kept_output_readers(), charged=True)


class _Buffers:
    """The local buffers of one kind of emitted row tile (looped or edge)."""

    def __init__(self, loader: WindowLoader | PreparedWindows | None, windows: list[Bf16Tile], wblock: list[Bf16Tile],
                 acc: SSAValue, acc_t: SSAValue | None, im2col: Bf16Tile | None):
        self.loader, self.windows, self.wblock, self.acc, self.acc_t = loader, windows, wblock, acc, acc_t
        self.im2col = im2col

