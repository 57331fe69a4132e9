"""graph.transpose, and the K transposes of attention and `transpose_b` matmuls: permuted copies
of big blocks through the scratchpad (`permute_copy`).

The DMA copies a box with the same shape on both sides, and each side is a row-major sub-box of
a (re)view of a contiguous buffer: the dims of one DMA must be in the same order in its source
and its destination. A permutation therefore needs one loop over a permuted dim, and the scheme
makes that loop short and every DMA big. The permutation is first made canonical
(`canonical_perm`: size-1 dims dropped, runs of dims adjacent in both orders merged). Dims
outside the block are loops. DMA boxes are given as (extent, source stride, destination
stride) per dim and mapped onto views whose origin is split over the view's dims by stride
(`box_dma`), so no runtime division appears. Tile sizes come from
tiling_cost.choose_permute_rows / choose_permute_block (docs/tiling.md, "Transposes").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects.builtin import f32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects import tile as t
from infer.dialects.dtypes import element_type_of, num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile.builder import Emitter, Index
from infer.passes.graph_to_tile.context import LoweringContext, latency_bound
from infer.passes.graph_to_tile import head_layout
from infer.passes.graph_to_tile.copies import copy_dram, lower_reshape_view

Terms = list[tuple[Index, int]]  # an element offset: sum of index * coefficient


def canonical_perm(shape: Sequence[int], perm: Sequence[int]) -> tuple[list[int], list[int]]:
    """The same permutation on the fewest dims: size-1 dims dropped, runs of dims adjacent
    (and in order) in both the input and the output merged. -> (dim sizes in input order,
    perm: output dim k is input dim perm[k])."""
    keep = [d for d in range(len(shape)) if shape[d] != 1]
    pos_in = {d: i for i, d in enumerate(keep)}
    groups: list[list[int]] = []
    for d in (p for p in perm if shape[p] != 1):
        if groups and pos_in[d] == pos_in[groups[-1][-1]] + 1:
            groups[-1].append(d)
        else:
            groups.append([d])
    by_in = sorted(range(len(groups)), key=lambda gi: pos_in[groups[gi][0]])
    rank = {gi: r for r, gi in enumerate(by_in)}
    return [num_elements([shape[d] for d in groups[gi]]) for gi in by_in], [rank[gi] for gi in range(len(groups))]


def _box_side(em: Emitter, buf: SSAValue, total: int, strides: Sequence[int], terms: Terms) -> tuple[SSAValue, list[Index]]:
    """View a contiguous buffer of `total` elements so that box dims of the given element
    strides (descending, each dividing the one before) are a row-major sub-box, and split
    the origin (sum of index * coefficient) over the view's dims: each term goes to the
    dim with the largest stride dividing its coefficient. Offsets built from a tensor's
    own nested strides always land inside that dim's extent."""
    assert total % strides[0] == 0 and all(strides[k - 1] % strides[k] == 0 for k in range(1, len(strides)))
    shape = [total // strides[0]] + [strides[k - 1] // strides[k] for k in range(1, len(strides))]
    index: list[Index] = [0] * len(strides)
    for iv, coef in terms:
        if coef == 0 or (isinstance(iv, int) and iv == 0):
            continue
        k = next(k for k, s in enumerate(strides) if coef % s == 0)
        index[k] = em.add(index[k], em.mul(iv, coef // strides[k]))
    return em.view(buf, shape), index


def box_dma(em: Emitter, src: SSAValue, src_total: int, dst: SSAValue, dst_total: int,
            dims: Sequence[tuple[int, int, int]], src_terms: Terms, dst_terms: Terms) -> None:
    """One tile.dma of a box given as (extent, src stride, dst stride) per dim, in elements,
    outermost first (both strides descending). Extent-1 dims are dropped; an innermost
    dim that is not contiguous on both sides gets a unit dim after it (rows of one
    element). At most 3 dims remain (one DMA instruction)."""
    box = [d for d in dims if d[0] != 1]
    if not box or box[-1][1] != 1 or box[-1][2] != 1:
        box.append((1, 1, 1))
    assert len(box) <= 3, box
    src_view, src_index = _box_side(em, src, src_total, [d[1] for d in box], src_terms)
    dst_view, dst_index = _box_side(em, dst, dst_total, [d[2] for d in box], dst_terms)
    em.dma(src_view, src_index, dst_view, dst_index, [d[0] for d in box])


def permute_copy(ctx: LoweringContext, src: SSAValue, shape: Sequence[int], perm: Sequence[int],
                 dst: SSAValue) -> str:
    """dst = transpose(src, perm), DRAM -> DRAM through the scratchpad in big blocks
    (returns a description for debug-tiling). On the canonical permutation:

    * innermost dim kept (rows of C contiguous elements): a block [Tu, Tv, TC] of the two
      dims u (the output's second innermost) and v (the input's) is one 3-D DMA load in
      input order; a loop over u or v stores it with the permuted strides (2-D DMAs of
      [Tv, TC] / [Tu, TC]). The remaining dims are loops.
    * innermost dim j moved (it becomes a row dim, the output's rows are dim i): a block
      [Ti, Tj] is loaded in input order, transposed on chip by a loop of vector copies of
      one column (or row) each, and stored as [Tj, Ti] in output order.

    Block buffers are double buffered."""
    em, hw = ctx.emitter, ctx.hw
    sizes, cp = canonical_perm(shape, perm)
    n = len(sizes)
    if n <= 1:
        copy_dram(ctx, src, dst, tuple(shape) or (1,))
        return "a plain copy (the permutation moves no data)"
    elem, elem_size = element_type_of(src), t.elem_bytes(src)
    total = num_elements(sizes)
    in_strides = [num_elements(sizes[d + 1:]) for d in range(n)]
    out_pos = {d: k for k, d in enumerate(cp)}
    out_strides = [num_elements([sizes[cp[k]] for k in range(out_pos[d] + 1, n)]) for d in range(n)]
    desc = f"canonical {'x'.join(map(str, sizes))} perm {cp}: "

    def nest(block_dims: Sequence[int], body: Callable[[Terms, Terms], None]) -> None:
        others = [d for d in cp if d not in block_dims]  # loops, in output order
        outer = [d for d in others if sizes[d] > 1]

        def loop(k: int, terms_in: Terms, terms_out: Terms) -> None:
            if k == len(outer):
                body(terms_in, terms_out)
                return
            d = outer[k]
            em.range(sizes[d], lambda x: loop(k + 1, terms_in + [(x, in_strides[d])],
                                               terms_out + [(x, out_strides[d])]))

        loop(0, [], [])

    if cp[-1] == n - 1:  # rows of C contiguous elements stay rows
        C, v, u = sizes[-1], n - 2, cp[n - 2]
        kept = ctx.on_chip_as(src, (total,))
        if kept is not None and t.elem_bytes(kept) == elem_size:
            return desc + _store_permuted_rows(ctx, kept, dst, sizes, in_strides, out_strides, u, v, nest)
        outer = num_elements([sizes[d] for d in cp[:-2] if d not in (u, v)])
        loops = sum(1 for d in cp[:-2] if d not in (u, v) and sizes[d] > 1)
        choice = tiling_cost.choose_permute_rows(hw, sizes[u], sizes[v], C, elem_size, outer, loops, u == v - 1)
        ctx.predict(choice.cycles)
        Tu, Tv, TC = choice.tiles
        batched = _batched_blocks(hw, sizes, cp, choice.tiles, elem_size)
        if batched > 1:
            return desc + _permute_batched_blocks(ctx, src, dst, sizes, cp, in_strides, out_strides, choice, batched)
        block = em.alloc((Tu, Tv, TC), elem, "spad", 2)
        block_size = Tu * Tv * TC

        def rows_block(terms_in: Terms, terms_out: Terms, u0: Index, tu: int, v0: Index, tv: int,
                       c0: Index, tcn: int) -> None:
            box_dma(em, src, total, block, block_size,
                    [(tu, in_strides[u], Tv * TC), (tv, in_strides[v], TC), (tcn, 1, 1)],
                    terms_in + [(u0, in_strides[u]), (v0, in_strides[v]), (c0, 1)], [])
            if choice.loop == 1:  # one store per v: L[:, w, :] -> out rows of u
                em.range(tv, lambda w: box_dma(
                    em, block, block_size, dst, total, [(tu, Tv * TC, out_strides[u]), (tcn, 1, 1)], [(w, TC)],
                    terms_out + [(u0, out_strides[u]), (em.add(v0, w), out_strides[v]), (c0, 1)]))
            else:  # one store per u: L[w] -> out rows of v
                em.range(tu, lambda w: box_dma(
                    em, block, block_size, dst, total, [(tv, TC, out_strides[v]), (tcn, 1, 1)], [(w, Tv * TC)],
                    terms_out + [(em.add(u0, w), out_strides[u]), (v0, out_strides[v]), (c0, 1)]))

        nest((u, v, n - 1), lambda terms_in, terms_out: em.tiles(sizes[u], Tu, lambda u0, tu: em.tiles(
            sizes[v], Tv, lambda v0, tv: em.tiles(
                C, TC, lambda c0, tcn: rows_block(terms_in, terms_out, u0, tu, v0, tv, c0, tcn)))))
        return (desc + f"blocks {Tu}x{Tv}x{TC} (one load each, one store per {'vu'[choice.loop]}): "
                f"{choice.dmas} DMAs, est {choice.cycles} cycles")

    # the innermost dim j moves: transpose [Ti, Tj] blocks on the vector unit; on latency-bound
    # targets a dim h outermost in both orders (attention's heads) may join the block, [Th, Ti,
    # Tj]: the double-buffered blocks keep only two DRAM round trips in flight (on edge the
    # bandwidth bounds the copy and per-h blocks pipeline better)
    i, j = cp[-1], n - 1
    outer = num_elements([sizes[d] for d in cp if d not in (i, j)])
    loops = sum(1 for d in cp if d not in (i, j) and sizes[d] > 1)
    h = 0 if n == 3 and cp[0] == 0 and i != 0 and latency_bound(hw) else None
    choice = tiling_cost.choose_permute_block(hw, sizes[i], sizes[j], elem_size, outer, loops, i == n - 2,
                                              out_pos[j] == n - 2, sizes[h] if h is not None else 1)
    ctx.predict(choice.cycles)
    Ti, Tj, Th = choice.tiles
    block = Th * Ti * Tj
    loaded = em.alloc((Th * Ti, Tj) if Th > 1 else (Ti, Tj), elem, "spad", 2)
    transposed = em.alloc((Th * Tj, Ti) if Th > 1 else (Tj, Ti), elem, "spad", 2)

    def transposed_block(terms_in: Terms, terms_out: Terms, i0: Index, ti: int, j0: Index, tj: int,
                         h0: Index = 0, th: int = 1) -> None:
        h_in = [(th, in_strides[h], Ti * Tj)] if Th > 1 and h is not None else []
        h_out = [(th, Tj * Ti, out_strides[h])] if Th > 1 and h is not None else []
        h_terms_in = [(h0, in_strides[h])] if Th > 1 and h is not None else []
        h_terms_out = [(h0, out_strides[h])] if Th > 1 and h is not None else []
        box_dma(em, src, total, loaded, block, h_in + [(ti, in_strides[i], Tj), (tj, 1, 1)],
                terms_in + h_terms_in + [(i0, in_strides[i]), (j0, 1)], [])

        def copies(hh: Index) -> None:
            if choice.loop == 0:  # row r of the loaded block -> column r of the transposed one
                em.range(ti, lambda r: em.vec("copy", transposed, [em.mul(hh, Tj), r], em.view(loaded, (block, 1)),
                                              [em.add(em.mul(hh, Ti * Tj), em.mul(r, Tj)), 0], tj, 1))
            else:  # column c of the loaded block -> row c of the transposed one
                em.range(tj, lambda c: em.vec("copy", em.view(transposed, (block, 1)),
                                              [em.add(em.mul(hh, Tj * Ti), em.mul(c, Ti)), 0],
                                              loaded, [em.mul(hh, Ti), c], ti, 1))

        if Th > 1:
            em.range(th, copies)
        else:
            copies(0)
        box_dma(em, transposed, block, dst, total, h_out + [(tj, Ti, out_strides[j]), (ti, 1, 1)], [],
                terms_out + h_terms_out + [(j0, out_strides[j]), (i0, 1)])

    if Th > 1 and h is not None:
        nest((h, i, j), lambda terms_in, terms_out: em.tiles(sizes[h], Th, lambda h0, th: em.tiles(
            sizes[i], Ti, lambda i0, ti: em.tiles(
                sizes[j], Tj, lambda j0, tj: transposed_block(terms_in, terms_out, i0, ti, j0, tj, h0, th)))))
    else:
        nest((i, j), lambda terms_in, terms_out: em.tiles(sizes[i], Ti, lambda i0, ti: em.tiles(
            sizes[j], Tj, lambda j0, tj: transposed_block(terms_in, terms_out, i0, ti, j0, tj))))
    return (desc + f"blocks {f'{Th}x' if Th > 1 else ''}{Ti}x{Tj} transposed by vector copies of one "
            f"{'row' if choice.loop == 0 else 'column'} each: {choice.dmas} DMAs, est {choice.cycles} cycles "
            f"(vector {choice.vector})")


def _batched_blocks(hw, sizes: Sequence[int], cp: Sequence[int], tiles: tuple[int, int, int], esize: int) -> int:
    """How many whole [u, v, C] blocks one load takes (1: the blocks one by one): with four
    canonical dims, the first outermost in both orders, and the chosen block the whole of the
    other three, consecutive blocks of the first dim are one contiguous load and each store a
    3-D box over them (MobileViT's unfold and fold, [128, 2, 4, 2] -> [128, 4, 2, 2]: 128 blocks
    of 16 elements, each a DRAM round trip, were 65 K cycles on server)."""
    if len(sizes) != 4 or cp[0] != 0 or sizes[0] == 1 or tuple(tiles) != (sizes[cp[2]], sizes[2], sizes[3]):
        return 1
    whole = sizes[1] * sizes[2] * sizes[3]
    n0, n1, n2 = tiling_cost.dma_box_limits()
    cap = max(1, hw.memory.scratchpad_bytes // (4 * esize))  # two buffers in half the scratchpad
    if whole * esize > n0:
        return 1
    return max(1, min(sizes[0], cap // whole, n1, n2))


def _permute_batched_blocks(ctx: LoweringContext, src: SSAValue, dst: SSAValue, sizes: Sequence[int],
                            cp: Sequence[int], in_strides: Sequence[int], out_strides: Sequence[int],
                            choice: tiling_cost.PermuteChoice, batched: int) -> str:
    """permute_copy's rows case for _batched_blocks: To blocks [u, v, C] per load (one 2-D DMA
    of To contiguous blocks), stored by one 3-D DMA per v (or per u) over the To blocks."""
    em = ctx.emitter
    total = num_elements(sizes)
    u, v = cp[2], 2
    eu, ev, C = sizes[u], sizes[v], sizes[3]
    whole = eu * ev * C
    block = em.alloc((batched * whole,), element_type_of(src), "spad", 2)
    block_size = batched * whole
    stores = ev if choice.loop == 1 else eu
    # (the model's cycles for one block per load, scaled by the loads: its estimate is per block)
    ctx.predict(max(1, choice.cycles * -(-sizes[0] // batched) // sizes[0]))

    def blocks(o0: Index, to: int) -> None:
        box_dma(em, src, total, block, block_size, [(to, in_strides[0], whole), (whole, 1, 1)],
                [(o0, in_strides[0])], [])
        if choice.loop == 1:  # one store per v: the To blocks' [u, C] rows of that v
            em.range(ev, lambda w: box_dma(
                em, block, block_size, dst, total,
                [(to, whole, out_strides[0]), (eu, ev * C, out_strides[u]), (C, 1, 1)], [(w, C)],
                [(o0, out_strides[0]), (w, out_strides[v])]))
        else:  # one store per u
            em.range(eu, lambda w: box_dma(
                em, block, block_size, dst, total,
                [(to, whole, out_strides[0]), (ev, C, out_strides[v]), (C, 1, 1)], [(w, ev * C)],
                [(o0, out_strides[0]), (w, out_strides[u])]))

    em.tiles(sizes[0], batched, blocks)
    return (f"{batched} whole blocks {eu}x{ev}x{C} per load, one 3-D store per {'vu'[choice.loop]}: "
            f"{-(-sizes[0] // batched) * (1 + stores)} DMAs")


def _store_permuted_rows(ctx: LoweringContext, kept: SSAValue, dst: SSAValue, sizes: Sequence[int],
                         in_strides: Sequence[int], out_strides: Sequence[int], u: int, v: int,
                         nest: Callable[[Sequence[int], Callable[[Terms, Terms], None]], None]) -> str:
    """The rows path of permute_copy when the kernel before left the whole source on chip
    (`LoweringContext.keep_on_chip`: a one-tile GEMM's result, e.g. a projection before its
    head split): per index of the shorter of u and v one strided DMA stores the rows of the
    other straight from that tile. No block is loaded: the load waited for the producer's store
    and a DRAM latency, and the next kernel's weight prefetch queued behind it on the load
    engine (the Llama prefill's q, k and v head splits on server)."""
    em, hw = ctx.emitter, ctx.hw
    total = num_elements(sizes)
    C = sizes[-1]
    loop_dim, row_dim = (v, u) if sizes[v] <= sizes[u] else (u, v)
    nbytes = total * t.elem_bytes(kept)
    ctx.predict(-(-nbytes // hw.dram.bytes_per_cycle) + hw.dram.latency_cycles)
    nest((u, v, len(sizes) - 1), lambda terms_in, terms_out: em.range(sizes[loop_dim], lambda w: box_dma(
        em, kept, total, dst, total, [(sizes[row_dim], in_strides[row_dim], out_strides[row_dim]), (C, 1, 1)],
        terms_in + [(w, in_strides[loop_dim])], terms_out + [(w, out_strides[loop_dim])])))
    return f"stored from the tile the kernel before left on chip, one DMA per index of dim {loop_dim}"


def transposed_copy(ctx: LoweringContext, src: SSAValue, shape: Sequence[int]) -> SSAValue:
    """A DRAM copy of src with its last two dims swapped (a loop nest of its own)."""
    with ctx.stage(what="transposed copy"):
        rank = len(shape)
        dst = ctx.emitter.alloc((*shape[:-2], shape[-1], shape[-2]), f32, "dram")
        permute_copy(ctx, src, shape, (*range(rank - 2), rank - 1, rank - 2), dst)
        return dst


def lower_transpose(ctx: LoweringContext, op: Operation) -> None:
    assert isinstance(op, g.TransposeOp)
    if head_layout.defer(ctx, op):
        return  # the attention reading it reads its input instead
    shape = shape_of(op.input)
    moved = canonical_perm(shape, g.i64_values(op.perm))[1]
    if moved == sorted(moved):
        # only size-1 dims move (e.g. a decode step's [B, 1, H, D] -> [B, H, 1, D]): the bytes
        # are already in the output's order, so the result is a view, like a reshape
        lower_reshape_view(ctx, op.input, op.results[0])
        return
    name = ctx.kernel_name()
    desc = permute_copy(ctx, ctx.buffer(op.input), shape, g.i64_values(op.perm), ctx.output_buffer(op.results[0]))
    ctx.debug(f"[graph-to-tile] {name}: transpose {'x'.join(map(str, shape))} perm {list(g.i64_values(op.perm))}: {desc}")
