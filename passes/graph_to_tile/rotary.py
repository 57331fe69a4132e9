"""graph.rotary: rotary position embeddings on the vector unit.

x [P, S, D] in row tiles [TS, R] (R = the rotated features): y = x*cos + rot(x)*sin. Half
layout: rot = [-x2, x1] as column sub-boxes; interleaved: the tile viewed [TS*R/2, 2] so
even/odd features are columns 0/1. cos/sin broadcast over x's leading dims by index arithmetic
(a constant 1-dim reads row 0) and over S by a `bmode=row` operand; features R..D are copied.
With one position (S = 1: decode) and cos/sin shared by the dim before S (the heads), that dim
is taken as the rows instead. With several positions and cos/sin shared by every plane (the
heads of a prefill), each position tile's cos/sin rows are loaded once and the planes loop
inside, instead of reading them again per plane.
"""

from __future__ import annotations

from xdsl.dialects.builtin import f32
from xdsl.ir import Operation

from infer.dialects import graph as g
from infer.dialects.dtypes import num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile import head_layout
from infer.passes.graph_to_tile.builder import Index
from infer.passes.graph_to_tile.context import LoweringContext, latency_bound


#: a prefill rotary's kept result may take at most 1/KEPT_OUTPUT_SHARE of the scratchpad, and
#: only the kernels named within KEPT_OUTPUT_READERS after it read it (q's rotary, then k's,
#: then the attention)
KEPT_OUTPUT_SHARE = 16
KEPT_OUTPUT_READERS = 2


def lower_rotary(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.RotaryOp)
    em = ctx.emitter
    x_shape = shape_of(op.input)
    D, S = x_shape[-1], x_shape[-2]
    cs_shape = shape_of(op.cos)
    R = cs_shape[-1]
    half = R // 2
    cs_shape = (1,) * (len(x_shape) - len(cs_shape)) + cs_shape
    if S == 1 and len(x_shape) >= 3 and cs_shape[-3] == 1:
        # one position (a decode step) and cos/sin shared by the dim before it (the heads):
        # that dim becomes the rows of one tile with a broadcast cos/sin row, instead of a loop
        # of one-row tiles (each a DMA round trip)
        x_shape = tuple(x_shape[:-2]) + (D,)
        cs_shape = tuple(cs_shape[:-3]) + (1, R)
        S = x_shape[-2]
    lead_x, lead_cs = x_shape[:-2], cs_shape[:-2]
    per_position = cs_shape[-2] != 1 or S == 1  # cos/sin have a row per position (else one row)
    interleaved = bool(op.interleaved.value.data)
    name = ctx.kernel_name()
    # x, y, tmp [TS, R] and cos, sin [TS or 1, R] and the pass-through rest [TS, D - R], x2 each;
    # an interleaved tile is TS*R/2 rows of one vector instruction
    per_row = 8 * (3 * R + 2 * (R if per_position else 0) + (D - R))
    fixed = 0 if per_position else 2 * 8 * R
    TS = max(1, min(S, ctx.staging_tile_elements // max(D, 1), tiling_cost.vector_limits()[0] // max(1, R // 2),
                    (ctx.hw.memory.scratchpad_bytes - fixed) // max(1, per_row)))
    ctx.debug(f"[graph-to-tile] {name}: rotary {'interleaved' if interleaved else 'half'} "
              f"{'x'.join(map(str, x_shape))} R={R}: rows of {TS}")
    planes = num_elements(lead_x)
    # the head-split transpose before it deferred (head_layout.py): plane p's rows are the
    # columns p*D.. of the [S, H*D] source, read on chip where the projection left it
    seq_major = head_layout.sequence_major(ctx, op.input)
    source = em.view(seq_major, (S, planes * D)) if seq_major is not None else None
    kept2 = ctx.on_chip_as(seq_major, (S, planes * D)) if seq_major is not None else None
    x3 = em.view(ctx.buffer(op.input), (planes, S, D)) if seq_major is None else None
    out3 = em.view(ctx.output_buffer(op.output), (planes, S, D))
    cs_planes = num_elements(lead_cs)
    cos3 = em.view(ctx.buffer(op.cos), (cs_planes, cs_shape[-2], R))
    sin3 = em.view(ctx.buffer(op.sin), (cs_planes, cs_shape[-2], R))
    TSc = TS if per_position else 1
    x_tile3 = em.alloc((1, TS, R), f32, "spad", 2) if kept2 is None else None
    # the whole result kept on chip for the attention after it (`keep_on_chip`), where it takes at
    # most 1/KEPT_OUTPUT_SHARE of the scratchpad on a latency-bound target: each tile is also
    # copied into its rows of one [planes*S, D] tile, before its store (the attention loaded
    # the result back, waiting for the last store and a DRAM latency before its first score
    # tile; a copy after the store would wait for the store to release the double-buffered tile)
    y_all = (em.alloc((planes * S, D), f32, "spad")
             if (latency_bound(ctx.hw) and seq_major is not None and planes * S * D * 4
                 <= ctx.hw.memory.scratchpad_bytes // KEPT_OUTPUT_SHARE) else None)
    y_tile3 = em.alloc((1, TS, R), f32, "spad", 2)
    cos_tile3 = em.alloc((1, TSc, R), f32, "spad", 2)
    sin_tile3 = em.alloc((1, TSc, R), f32, "spad", 2)
    tmp = em.alloc((TS, R), f32, "spad", 2)
    rest3 = em.alloc((1, TS, D - R), f32, "spad", 2) if D > R else None
    x_tile = em.view(x_tile3, (TS, R)) if x_tile3 is not None else None
    y_tile = em.view(y_tile3, (TS, R))
    cos_tile, sin_tile = em.view(cos_tile3, (TSc, R)), em.view(sin_tile3, (TSc, R))
    cs_mode = "tile" if per_position else "row"
    z = [0, 0]

    def load_cos_sin(pc: Index, s0: Index, ts: int) -> None:
        cs0 = s0 if per_position else 0
        tsc = ts if per_position else 1
        em.dma(cos3, [pc, cs0, 0], cos_tile3, [0, 0, 0], [1, tsc, R])
        em.dma(sin3, [pc, cs0, 0], sin_tile3, [0, 0, 0], [1, tsc, R])

    def tile(p: Index, pc: Index | None, s0: Index, ts: int) -> None:
        """Rows s0..s0+ts of plane p; pc: the cos/sin plane to load first (None: loaded)."""
        if kept2 is not None:  # the rows in place in the kept tile
            x, x0 = kept2, [s0, em.mul(p, D)]
        else:
            assert x_tile is not None and x_tile3 is not None
            x, x0 = x_tile, [0, 0]
            if source is not None:
                em.dma(source, [s0, em.mul(p, D)], x_tile, z, [ts, R])
            else:
                assert x3 is not None
                em.dma(x3, [p, s0, 0], x_tile3, [0, 0, 0], [1, ts, R])
        if pc is not None:
            load_cos_sin(pc, s0, ts)
        x_hi = [x0[0], em.add(x0[1], half)]
        em.vec("mul", y_tile, z, x, x0, ts, R, cos_tile, z, bmode=cs_mode)
        if not interleaved:
            em.vec("mul", tmp, z, x, x_hi, ts, half, sin_tile, z, bmode=cs_mode)
            em.vec("mul", tmp, [0, half], x, x0, ts, half, sin_tile, [0, half], bmode=cs_mode)
            em.vec("sub", y_tile, z, y_tile, z, ts, half, tmp, z, bmode="tile")
            em.vec("add", y_tile, [0, half], y_tile, [0, half], ts, half, tmp, [0, half], bmode="tile")
        else:
            assert seq_major is None  # (rotary_reads_sequence_major: half layout only)
            pairs = ts * half
            all_pairs = TS * half
            assert x_tile is not None
            x_pairs, y_pairs, tmp_pairs = (em.view(b, (all_pairs, 2)) for b in (x_tile, y_tile, tmp))
            if per_position:
                sin_pairs = em.view(sin_tile, (all_pairs, 2))
                em.vec("mul", tmp_pairs, z, x_pairs, [0, 1], pairs, 1, sin_pairs, z, bmode="tile")
                em.vec("mul", tmp_pairs, [0, 1], x_pairs, z, pairs, 1, sin_pairs, [0, 1], bmode="tile")
                em.vec("sub", y_pairs, z, y_pairs, z, pairs, 1, tmp_pairs, z, bmode="tile")
                em.vec("add", y_pairs, [0, 1], y_pairs, [0, 1], pairs, 1, tmp_pairs, [0, 1], bmode="tile")
            else:
                # rot(x) * sin with one sin row: swap pairs into tmp, then a row-mode multiply
                em.vec("neg", tmp_pairs, z, x_pairs, [0, 1], pairs, 1)
                em.vec("copy", tmp_pairs, [0, 1], x_pairs, z, pairs, 1)
                em.vec("mul", tmp, z, tmp, z, ts, R, sin_tile, z, bmode="row")
                em.vec("add", y_tile, z, y_tile, z, ts, R, tmp, z, bmode="tile")
        if y_all is not None:
            em.vec("copy", y_all, [em.add(em.mul(p, S), s0), 0], y_tile, z, ts, R)
        em.dma(y_tile3, [0, 0, 0], out3, [p, s0, 0], [1, ts, R])
        if rest3 is not None:
            assert x3 is not None  # (rotary_reads_sequence_major: R = D only)
            em.dma(x3, [p, s0, R], rest3, [0, 0, 0], [1, ts, D - R])
            em.dma(rest3, [0, 0, 0], out3, [p, s0, R], [1, ts, D - R])

    def nest(k: int, p: Index, pc: Index) -> None:
        if k == len(lead_x):
            em.tiles(S, TS, lambda s0, ts: tile(p, pc, s0, ts))
            return
        x_stride = num_elements(lead_x[k + 1:])
        cs_stride = num_elements(lead_cs[k + 1:])
        cs_full = lead_cs[k] != 1
        em.range(lead_x[k], lambda i: nest(k + 1, em.add(p, em.mul(i, x_stride)),
                                           em.add(pc, em.mul(i, cs_stride)) if cs_full else pc))

    if per_position and cs_planes == 1 and planes > 1:
        # every plane (head) rotates by the same rows: each position tile's cos/sin rows are
        # loaded once and the planes run inside (reading them again per plane moved 2.3x the
        # compulsory bytes of the edge Llama prefill's rotary kernels)
        def positions(s0: Index, ts: int) -> None:
            load_cos_sin(0, s0, ts)
            em.range(planes, lambda p: tile(p, None, s0, ts))

        em.tiles(S, TS, positions)
    else:
        nest(0, 0, 0)
    if y_all is not None:
        ctx.keep_on_chip(out3, y_all, next_kernels=KEPT_OUTPUT_READERS)
