"""Static code size of a tiled loop nest, as tile-to-npu emits it (for the tiling cost model).

A tile choice sets the trip counts of a kernel's loop nest, and the nest's shape sets how many
instructions the program holds: tile-to-npu (passes/tile_to_npu/codegen.py, `emit_for`) makes
each `scf.for` one hardware `loop` while the nest has hardware loop levels left
(`scalar.loop_depth`), and emits a loop beyond that depth iteration by iteration (up to
`MAX_INLINED_TRIP` trips; longer ones do not lower). Such a program is unrolled: its size
grows with the trip counts instead of staying one loop body ("loops stay loops"). The cost
model uses `code_size` to rank tiles whose nest stays within the depth before those that
unroll, and to compare the code of candidates that both do.

The copies per level follow `emit_for`'s rules, approximately: a loop of 2 trips is emitted as
two copies of its body (after its peeled last iteration, or the two halves of a rotation loop,
one hardware iteration is left, which is inlined) and takes no loop level; a longer one is a
hardware loop whose body appears about twice (the body plus its peeled first or last iteration,
or the two halves of a double-buffer rotation) and takes one level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infer.passes.tiling_cost import ConvSpec, ConvTiles

MAX_INLINED_TRIP = 16  # tile_to_npu.codegen.MAX_INLINED_TRIP: the longest loop emitted iteration by iteration


@dataclass
class Loop:
    """One `scf.for` of `trips` iterations around `body` (instruction counts and nested loops)."""

    trips: int
    body: list[int | Loop] = field(default_factory=list)
    # a hardware loop even with 2 trips: tile-to-npu emits a 2-trip loop iteration by iteration
    # only when a double buffer rotates on it (one body copy per half)
    hardware: bool = False


@dataclass
class CodeSize:
    instructions: int = 0
    unrolled: bool = False  # some loop of >= 2 trips is emitted iteration by iteration (no level left)
    feasible: bool = True  # no loop beyond the depth has more than MAX_INLINED_TRIP trips


def code_size(body: list[int | Loop], loop_depth: int) -> CodeSize:
    """The static instructions of `body` (a list of straight-line instruction counts and loops)
    at the top of the nest, with `loop_depth` hardware loop levels."""
    out = CodeSize()
    out.instructions = _size(body, loop_depth, out)
    return out


def _size(body: list[int | Loop], levels_left: int, out: CodeSize) -> int:
    total = 0
    for node in body:
        if isinstance(node, int):
            total += node
        elif node.trips <= 0:
            continue
        elif node.trips == 1:
            total += _size(node.body, levels_left, out)
        elif node.trips == 2 and not node.hardware:
            total += 2 * _size(node.body, levels_left, out)
        elif levels_left >= 1:
            total += 2 + 3 * _size(node.body, levels_left - 1, out)  # + the loop and its counter steps
        else:
            out.unrolled = True
            out.feasible = out.feasible and node.trips <= MAX_INLINED_TRIP
            total += node.trips * _size(node.body, 0, out)
    return total


def _counts(total: int, tile: int) -> list[tuple[int, int]]:
    """[(extent, how many)] of `Emitter.tiles(total, tile)`: the full tiles and the remainder."""
    tile = max(1, min(tile, total))
    full, rem = divmod(total, tile)
    return [(tile, full)] + ([(rem, 1)] if rem else [])


def conv_nest(s: ConvSpec, T: ConvTiles, rows: int, cols: int, window_instrs: int,
              pixels: int) -> list[int | Loop]:
    """The loop nest graph-to-tile's conv lowering (passes/graph_to_tile/conv.py, `_ConvKernel.emit`)
    emits for tiles T: images and groups, the outer and inner tile loops, the channel steps,
    per step the window's loads and building (`window_instrs`, and a transpose loop of
    min(TC, pixels) copies when the window is pixel-major and built on chip) and the weight
    block's DMAs, the taps' loops (`ConvSpec.tap_nests`, per plane), and emit_tile_product's
    k-subtile and n-subtile loops of array-sized matmuls (an mx.loadw and an mx.matmul per
    pass); per output tile the zeroing, the transpose back (channels), bias, epilogue and store."""
    TO, TOH, TC = min(T.TO, s.Og), min(T.TOH, s.OH), min(T.TC, s.Cg)
    channels = T.orientation == "channels"
    single = TC >= s.Cg
    overwrites = single and (s.taps == 1 or T.im2col)
    pair = 2 * s.passes
    # weights DMA'd per kernel row (graph_to_tile/conv.py `row_split_weights`)
    from infer.passes.tiling_cost import chunked_im2col, row_split_weights  # (tiling_cost imports this module)

    row_split = bool(s.tap_nests) and row_split_weights(T, s.planes, s.tap_nests[0][0], s.Cg)

    def product(to: int, tq: int, tc: int) -> list[int | Loop]:
        depth = tc * s.taps if T.im2col else tc
        first = min(depth, rows) if overwrites else 0
        k_loops = [(k, nk) for k, nk in _counts(depth - first, rows) if depth > first]
        n_counts = _counts(to if channels else tq, cols)
        if channels:  # the depth loop outside the width loop
            head: list[int | Loop] = [Loop(nn, [pair]) for _, nn in n_counts] if first else []
            return head + [Loop(nk, [Loop(nn, [pair]) for _, nn in n_counts]) for _, nk in k_loops]
        return [Loop(nn, ([pair] if first else []) + [Loop(nk, [pair]) for _, nk in k_loops])
                for _, nn in n_counts]

    def products(to: int, tq: int, tc: int) -> list[int | Loop]:
        if T.im2col and chunked_im2col(s.taps, tc, rows, s.copies):  # (conv.im2col_chunks) straight-line tap copies, per
            chunks = -(-s.taps * tc // rows)  # chunk its matmuls over the width
            n_counts = _counts(to if channels else tq, cols)
            return [s.taps * s.copies] + [Loop(nn, [pair]) for _ in range(chunks) for _, nn in n_counts]
        if T.im2col:
            gather: list[int | Loop] = [Loop(nh, [Loop(nw, [s.copies])]) for nh, nw in s.tap_nests]
            return gather + product(to, tq, tc)
        if s.taps == 1 or not s.tap_nests:
            return product(to, tq, tc)
        if row_split:  # the kernel rows' tap loops one after the other
            return [Loop(nw, product(to, tq, tc)) for nh, nw in s.tap_nests for _ in range(nh)]
        return [Loop(nh, [Loop(nw, product(to, tq, tc))]) for nh, nw in s.tap_nests]

    def step(to: int, toh: int, tc: int, window: bool, weights: bool) -> list[int | Loop]:
        body: list[int | Loop] = []
        if window:
            body.append(window_instrs)
            if channels and not s.prepared:
                body += [Loop(min(tc, pixels), [1]) for _ in range(s.planes)]
        if weights:
            body.append(s.copies * (s.tap_nests[0][0] if row_split else 1))
        return body + products(to, toh * s.Wq, tc)

    def tile(to: int, toh: int, window_loaded: bool, weights_loaded: bool) -> list[int | Loop]:
        if single and overwrites:
            body = step(to, toh, s.Cg, not window_loaded, not weights_loaded)
        else:
            body = [2] + [Loop(n, step(to, toh, tc, not window_loaded, not weights_loaded))
                          for tc, n in _counts(s.Cg, TC)]
        if channels:
            body.append(Loop(min(to, toh * s.Wq), [1]))
        return body + [3 + s.epi_tiles]  # bias, epilogue, store (and the epilogue's operand loads)

    o_counts, r_counts = _counts(s.Og, TO), _counts(s.OH, TOH)
    # on one accumulator tile (ConvTiles.single_acc) no buffer of the output tiles rotates on
    # their loops, so a 2-trip tile loop stays a hardware loop (a conservative reading: a window
    # or weight block loaded once per tile may still rotate on it)
    hw_loop = T.single_acc
    if T.outer == "o":
        hoisted = [s.copies * (s.tap_nests[0][0] if row_split else 1)] if single else []
        outer: list[int | Loop] = [Loop(no, hoisted + [Loop(nr, tile(to, toh, False, single), hw_loop)
                                                       for toh, nr in r_counts], hw_loop)
                                   for to, no in o_counts]
    else:
        outer = [Loop(nr, ([window_instrs] if single else []) + [Loop(no, tile(to, toh, single, False), hw_loop)
                                                                for to, no in o_counts], hw_loop)
                 for toh, nr in r_counts]
    return [Loop(s.batch, [Loop(s.groups, outer)])]
