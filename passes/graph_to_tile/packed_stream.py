"""A packed product that is not resident, streamed: every weight step of an m tile, across its
n tiles, in one software pipeline (docs/gguf.md, "Streamed products").

The steps of an m tile are s = n * full_k + k (n tile n, k step k), in that order. Step s is

    expand(s + 1) ; load(s + D) ; product(s)

load: the step's activation columns, codes and scales DMAd into ring slot s % D; expand: the
activations split to bf16 and the codes expanded (`tile.dequant`) into expansion slot s % E;
product: the array multiplies expansion slot s % E into its n tile's accumulator. The codes and
scales planes are tile-major ([N/TN][K/32 rows][TN], `packed_gemm._plane_weights`), so step s's
codes are rows [s * code_rows, (s + 1) * code_rows) of the codes plane and its scales rows
[s * TK/32, (s + 1) * TK/32) of the scales plane whatever its n tile: an n tile's last steps load
the next n tile's first ones, and only an m tile's first step waits for the DRAM.

Why D = 3 where it divides: the front end issues product(s)'s loadw/matmul pairs only as fast
as the array takes them, so load(s + D) leaves about when product(s) starts. With D = 2 a step
has one product's time to cross the DRAM latency and transfer its bytes; SmolLM2's LM head on
server (1 x 576 -> 49152, q8_0) measured gaps between steps wherever a step's transfer plus the
latency outlasted a product, and with a restart per n tile (loads, then the first expansion,
then the first product: ~4.6 K cycles per n tile on edge's 576 x 1536 q4_1 products) the old
per-tile pipeline paid that once per n tile.

Static slots: the code is emitted per group of U = lcm(D, E) consecutive steps, so step s's
slots are its position in the group; full_k must be a multiple of U (`ring_depths`). The n
loop is an `scf.for` over all n tiles but the last one or two (peeled: they load nothing, or
the narrower remainder tile), and its groups an `scf.for` over all but the last group (peeled:
its loads cross into the next n tile). Same ops on the same tiles in the same k order as
`packed_gemm`'s other tiled paths: the results are theirs, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from xdsl.dialects.builtin import IntegerType, Signedness, bf16, f16, f32, i8
from xdsl.ir import SSAValue

from infer.dialects.block_quant import block_format
from infer.passes import tiling_cost
from infer.passes.graph_to_tile import packed_gemm  # (it imports this module: read at call time)
from infer.passes.graph_to_tile.builder import Index, tile_extents
from infer.passes.graph_to_tile.context import LoweringContext
from infer.passes.graph_to_tile.matrix_unit import Bf16Tile, split_on_chip
from infer.target import isa

QBLOCK = isa.QBLOCK
ui8 = IntegerType(8, Signedness.UNSIGNED)

#: (load ring depth D, expansion depth E) in order of preference: a third load slot where the
#: step count allows it, a third expansion slot only where the two-deep one does not divide
RING_DEPTHS = ((3, 2), (3, 3), (2, 2))


def ring_depths(full_k: int) -> tuple[int, int] | None:
    """(D, E) for a product of full_k weight steps per n tile, or None (fewer than two steps,
    or a count no group size divides: packed_gemm's per-step rotation path)."""
    if full_k < 2:
        return None
    return next(((d, e) for d, e in RING_DEPTHS if full_k % math.lcm(d, e) == 0), None)


def n_tile_emissions(N: int, TN: int) -> list[tuple[int, int | None, str]]:
    """The n tiles `lower_streamed` emits code for, as (width, the next tile's width or None,
    "loop" or "peeled"): an scf.for over all n tiles but the last one or two (absent when it
    has no trip), then the tile before a narrower remainder, then the last tile. Each emission
    allocates its own epilogue buffers."""
    n_tiles = -(-N // TN)
    tn_last = N - (n_tiles - 1) * TN
    out: list[tuple[int, int | None, str]] = []
    if n_tiles - (1 if tn_last == TN else 2) > 0:
        out.append((TN, TN, "loop"))
    if n_tiles >= 2 and tn_last != TN:
        out.append((TN, tn_last, "peeled"))
    out.append((tn_last, None, "peeled"))
    return out


def footprint(ctx: LoweringContext, M: int, N: int, K: int, tm: int, tn: int, tk: int, fmt_name: str,
              two_pass: bool, extra_spad: int, epilogue_bytes: Callable[[int, int], int]) -> tuple[int, int]:
    """(scratchpad, accumulator) bytes of a streamed product's buffers for tiles tm x tn x tk
    (ring_depths(K // tk) not None); `extra_spad`: the bias tiles; `epilogue_bytes(rows,
    cols)`: an epilogue emission's buffers."""
    depths = ring_depths(K // tk)
    assert depths is not None
    D, E = depths
    copies = ctx.bf16_copies
    entry = isa.qscale_bytes(isa.QFORMAT_CODE[fmt_name])
    code_bytes = tk * block_format(fmt_name).bits // 8 * tn
    load_slot = tm * tk * 4 + code_bytes + tk // QBLOCK * tn * entry
    x_parts = 2 if copies == 2 or two_pass else 1
    expand_slot = tm * tk * 2 * x_parts + tk * tn * 2 * copies + (tk * tn * 4 if copies == 2 else 0)
    epilogues = sum(epilogue_bytes(rows, cols) for rows in tile_extents(M, tm)
                    for cols, _, _ in n_tile_emissions(N, tn))
    # the loop's accumulator rotates between two halves; the peeled tiles share a third; two
    # passes stacked: each twice the rows, and as many [tm, tn] tiles their halves are summed into
    acc_words = 3 * tm * tn * (3 if two_pass and copies == 1 else 1)
    return D * load_slot + E * expand_slot + extra_spad + epilogues, acc_words * 4


def estimated_cycles(ctx: LoweringContext, M: int, N: int, K: int, fmt_name: str, two_pass: bool,
                     e: tiling_cost.Estimate) -> int:
    """The cost model's estimate of a streamed product, with what it does not count: the array
    takes a weight tile's load and then its activation rows, one after the other (a k tile
    shorter than the array's rows loads faster but streams the same rows: on SmolLM2's LM head
    on server a 32-row tile took 6 cycles, 64 rows 10, 96 rows 13.9), and each m tile's first
    step waits for the DRAM's latency (as `packed_gemm._rank_by_latency` counts one per weight
    tile of the other paths)."""
    hw = ctx.hw
    tm, tn, tk = e.tiles
    copies = ctx.bf16_copies
    rows_per_weight_tile = ctx.matmul_passes if copies == 2 else (2 if two_pass else 1)
    array = 0
    for m, m_count in _sizes(M, tm):
        for n, n_count in _sizes(N, tn):
            for k, k_count in _sizes(tk, hw.matrix.rows):
                for c, c_count in _sizes(n, hw.matrix.cols):
                    load = copies * -(-k * c * 2 // hw.matrix.weight_load_bytes_per_cycle)
                    rows = m * rows_per_weight_tile * hw.matrix.cycles_per_row
                    array += m_count * n_count * (K // tk) * k_count * c_count * (load + rows)
    return max(e.cycles, array) + -(-M // tm) * hw.dram.latency_cycles


def _sizes(extent: int, tile: int) -> list[tuple[int, int]]:
    """(tile size, how many) of `extent` cut into tiles of `tile`."""
    full, rem = divmod(extent, tile)
    return [(tile, full)] * (full > 0) + [(rem, 1)] * (rem > 0)


def lower_streamed(ctx: LoweringContext, spec: packed_gemm.TiledProduct) -> None:
    """Emit the streamed product of `spec` (ring_depths of its step count not None)."""
    em = ctx.emitter
    two_pass = packed_gemm.two_pass_activations(ctx, spec.TM)
    finish_tile = packed_gemm.tile_finisher(ctx, spec)
    emit_dequant, emit_packed_product = packed_gemm.emit_dequant, packed_gemm.emit_packed_product
    fmt_name, TM, TN, TK, K, N = spec.fmt_name, spec.TM, spec.TN, spec.TK, spec.K, spec.N
    full_k = K // TK
    depths = ring_depths(full_k)
    assert depths is not None and K % TK == 0
    D, E = depths
    U = math.lcm(D, E)
    copies = ctx.bf16_copies
    entry = isa.qscale_bytes(isa.QFORMAT_CODE[fmt_name])
    code_rows = TK * block_format(fmt_name).bits // 8
    scale_rows = TK // QBLOCK
    codes_type = i8 if fmt_name == "q8_0" else ui8
    z = [0, 0]

    x_staging = [em.alloc((TM, TK), f32, "spad") for _ in range(D)]
    codes = [em.alloc((code_rows, TN), codes_type, "spad") for _ in range(D)]
    scales = [em.alloc((scale_rows, TN * entry // 2), f16, "spad") for _ in range(D)]

    def bf16_tile(rows: int, cols: int, lo: bool) -> Bf16Tile:
        return Bf16Tile(em.alloc((rows, cols), bf16, "spad"), em.alloc((rows, cols), bf16, "spad") if lo else None)

    # bf16 in two passes: hi and lo stacked in one tile (lo's rows right below hi's), one matmul
    # of 2 tm rows per weight tile into a 2 TM-row accumulator whose halves are summed into
    # `total` before the tile's epilogue (packed_gemm.emit_packed_product, `stacked`)
    stacked = two_pass
    if stacked:
        x_tile = [Bf16Tile(t, t) for t in (em.alloc((2 * TM, TK), bf16, "spad") for _ in range(E))]
    else:
        x_tile = [bf16_tile(TM, TK, copies == 2) for _ in range(E)]
    w_tile = [bf16_tile(TK, TN, copies == 2) for _ in range(E)]
    w_expanded = [em.alloc((TK, TN), f32, "spad") for _ in range(E)] if copies == 2 else None
    acc_rows = 2 * TM if stacked else TM
    acc_loop = em.alloc((acc_rows, TN), f32, "acc", 2)  # rotates over the n loop
    acc_peeled = em.alloc((acc_rows, TN), f32, "acc")
    total_loop = em.alloc((TM, TN), f32, "acc", 2) if stacked else acc_loop
    total_peeled = em.alloc((TM, TN), f32, "acc") if stacked else acc_peeled

    n_tiles = -(-N // TN)
    tn_last = N - (n_tiles - 1) * TN
    groups = full_k // U

    def m_tile(m0: Index, tm: int) -> None:
        def load(n: Index, k: Index, slot: int, tn: int) -> None:
            step = em.add(em.mul(n, full_k), k)
            em.dma(spec.xv, [m0, em.mul(k, TK)], x_staging[slot], z, [tm, TK])
            em.dma(spec.codes_w, [em.mul(step, code_rows), 0], codes[slot], z, [code_rows, tn])
            em.dma(spec.scales_w, [em.mul(step, scale_rows), 0], scales[slot], z, [scale_rows, tn * entry // 2])

        def expand(slot: int, e: int, tn: int) -> None:
            em.round_parts(x_staging[slot], z, x_tile[e].hi, x_tile[e].lo, z, tm, TK,
                           lo_index=[tm, 0] if stacked else None)
            target = w_expanded[e] if w_expanded is not None else w_tile[e].hi
            emit_dequant(em, target, codes[slot], z, scales[slot], z, TK, tn, fmt_name)
            if w_expanded is not None:
                split_on_chip(em, w_expanded[e], w_tile[e], TK, tn)

        def group(n: Index, g: Index, last: bool, tn: int, tn_next: int | None, acc: SSAValue) -> None:
            """Steps g*U .. g*U + U - 1 of n tile n; `last`: the tile's last group, whose
            look-ahead crosses into n tile n + 1 (width tn_next; None: there is none)."""
            for i in range(U):
                if not (last and i == U - 1):
                    expand((i + 1) % D, (i + 1) % E, tn)
                elif tn_next is not None:
                    expand(0, 0, tn_next)  # (U is a multiple of D and E)
                j = i + D
                if not (last and j >= U):
                    load(n, em.add(em.mul(g, U), j), j % D, tn)
                elif tn_next is not None:
                    load(em.add(n, 1), j - U, j % D, tn_next)
                emit_packed_product(ctx, x_tile[i % E], w_tile[i % E], acc, tm, TK, tn, stacked=stacked)

        def n_tile(n: Index, tn: int, tn_next: int | None, acc: SSAValue, total: SSAValue) -> None:
            em.fill(acc, z, 2 * tm if stacked else tm, tn, 0.0)
            if groups > 1:
                em.loop(0, groups - 1, 1, lambda g: group(n, g, False, tn, tn, acc))
            group(n, groups - 1, True, tn, tn_next, acc)
            if stacked:  # the hi rows' products plus the lo rows'
                em.vec("add", total, z, acc, z, tm, tn, acc, [tm, 0], bmode="tile")
            finish_tile(total, m0, tm, em.mul(n, TN), tn)

        emissions = n_tile_emissions(N, TN)
        first_width = emissions[0][0]
        for j in range(D):
            load(0, j, j, first_width)
        expand(0, 0, first_width)
        for tn, tn_next, kind in emissions:
            if kind == "loop":
                em.loop(0, n_tiles - (1 if tn_last == TN else 2), 1,
                        lambda n: n_tile(n, TN, TN, acc_loop, total_loop))
            else:
                n_tile(n_tiles - (1 if tn_next is None else 2), tn, tn_next, acc_peeled, total_peeled)

    em.tiles(spec.M, TM, m_tile)

