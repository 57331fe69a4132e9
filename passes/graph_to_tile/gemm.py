"""graph.linear and graph.matmul (2-D and batched) on the matrix unit, with a fused epilogue.

Loop nest `m` (TM rows streamed) -> `n` -> `k`: `fill acc 0`; per k step DMA x[m0:, k0:]
(f32) and split it to bf16 on the vector unit; DMA the weight tile; array-sized matmuls
accumulate into an accumulator tile [TM, TN]. Then the epilogue on the accumulator tile: the
bias (`bmode=row`), the kernel's elementwise ops (elementwise.apply_epilogue), one DMA store.
A norm epilogue (graph-fuse: a layer/rms norm over the N columns last in the kernel) runs on
whole output rows (one n tile of N columns, the norm kernel's instructions: norms.normalize)
where the cost model predicts it faster than a norm kernel after this one (else deferred to one).

Compile-time weights are pre-packed as W^T padded to whole tiles in tile-contiguous order
[N/TN][Kp][TN], so each weight tile is one contiguous DMA. A runtime right operand (`q.k^T`-
style matmuls) is DMA'd per tile and split on chip; `transpose_b` on a runtime operand, and
`transpose_a`, first make a transposed DRAM copy of that operand (transpose.transposed_copy).
Tile sizes come from tiling_cost.choose_gemm with this kernel's exact local-buffer footprint.

An activation prologue (graph-fuse-activation-prologue: a GELU moved here from the product
before) is applied where the activations are staged: the rounding copy of each step's slice
becomes the activation's instruction writing bf16 (fp32 emulation: writing the fp32 tile that is
then split), so the bits are those of the activation computed by the kernel before and rounded
here, and the vector unit activates the next slices while the array multiplies. Where the
producer's bias moved with it, each slice first gets the bias row added into the fp32 staging
tile the activation reads (the producer's sum, computed here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np
from xdsl.dialects.builtin import bf16, f32
from xdsl.ir import Operation, SSAValue

from infer.dialects import graph as g
from infer.dialects.dtypes import num_elements, shape_of
from infer.passes import tiling_cost
from infer.passes.graph_to_tile import norms
from infer.passes.graph_to_tile.builder import Index, tile_extents
from infer.passes.graph_to_tile.context import KERNEL_OVERLAP_SHARE, LoweringContext, error, latency_bound
from infer.passes.graph_to_tile.elementwise import (TileFrame, apply_epilogue, epilogue_cost, epilogue_footprint,
                                                   materialize_misfits, preload_operands)
from infer.passes.graph_to_tile.matrix_unit import (
    Bf16Tile,
    alloc_bf16_tile,
    emit_tile_product,
    packed_weight_parts,
    prefetch_packed,
    split_on_chip,
)
from infer.passes.graph_to_tile.copies import copy_box
from infer.passes.graph_to_tile.transpose import transposed_copy
from infer.passes.graph_to_tile.vector_math import activation_instruction

#: ctx.derived key (with the product op): its activation prologue (takes_activation_prologue)
ACTIVATION_PROLOGUE = "activation prologue"
#: ctx.derived key (with the product op): the bias add before its activation prologue
PROLOGUE_BIAS = "prologue bias"


def lower_gemm(ctx: LoweringContext, op: Operation, epilogue: Sequence[Operation], result: SSAValue) -> None:
    """`op` (graph.linear or graph.matmul) followed by the elementwise `epilogue` ops on its
    output tiles; `result` (the last of them, or op's result) is stored. A layer/rms norm last in
    `epilogue` (graph-fuse's norm epilogue) normalises whole output rows before the store where
    the cost model finds that faster (`_norm_epilogue_choice`), else it becomes a kernel of its own
    after this one (LoweringContext.defer)."""
    em, hw = ctx.emitter, ctx.hw
    prologue_op = ctx.derived.pop((ACTIVATION_PROLOGUE, op), None)
    # the activation applied to the activations as they are staged (None: a rounding copy)
    activation = activation_instruction(prologue_op) if prologue_op is not None else None
    # the bias row added to them first (the producer's, moved here with its activation)
    prologue_bias = ctx.derived.pop((PROLOGUE_BIAS, op), None)
    # the prologue's first op, whose input is the product's source
    source_op = prologue_bias if prologue_bias is not None else prologue_op
    norm = epilogue[-1] if epilogue and isinstance(epilogue[-1], g.NormOp) else None
    sum_out = None  # the rows before the norm, where the kernel returns them too
    if norm is not None:  # (the norm's result; `result` below: the rows it normalises)
        normed, epilogue = result, epilogue[:-1]
        result = norm.input
        keep_sum = any(isinstance(use.operation, g.YieldOp) for use in result.uses)
    lhs_src: SSAValue | None = None  # the lhs in DRAM when not ctx.buffer(x) (a transposed copy)
    rows_flattened = False  # a batched lhs against one compile-time weight: its rows as one operand
    if isinstance(op, g.LinearOp):
        x, weight, bias = op.input, op.weight, op.bias
        if source_op is not None:
            x = source_op.operands[0]
        w = ctx.constant(weight)
        x_shape = shape_of(x)
        K = x_shape[-1]
        N = shape_of(weight)[0]
        lhs_batch: tuple[int, ...] = ()
        M = num_elements(x_shape[:-1])
        batch: tuple[int, ...] = ()
        w_t = None if w is None else np.ascontiguousarray(np.asarray(w, np.float32).T)
        runtime_rhs = None
        if w is None:
            raise error(op, "graph.linear with a runtime weight is not supported (use graph.matmul)")
    else:
        assert isinstance(op, g.MatmulOp)
        x, weight, bias = op.lhs, op.rhs, None
        if source_op is not None:
            x = source_op.operands[0]
        x_shape, w_shape = shape_of(x), shape_of(weight)
        if op.transpose_a.value.data:
            # like a runtime transpose_b: a transposed DRAM copy of the lhs first (graph-canonicalize
            # folds a transpose feeding the lhs into transpose_a; ONNX Gemm's transA gives it too)
            lhs_src = transposed_copy(ctx, ctx.buffer(x), x_shape)
            x_shape = (*x_shape[:-2], x_shape[-1], x_shape[-2])
        if len(x_shape) == 1:
            x_shape = (1, x_shape[0])
        if len(w_shape) == 1:
            w_shape = (w_shape[0], 1)
        transpose_b = bool(op.transpose_b.value.data)
        w = ctx.constant(weight)
        if w is not None and num_elements(w_shape[:-2]) == 1:
            w2 = np.asarray(w, np.float32).reshape(w_shape[-2:])
            w_t = np.ascontiguousarray(w2.T if transpose_b else w2)
            K, N = w_t.shape
            runtime_rhs = None
            # one [K, N] weight for every matrix of the lhs: its rows are one [M, K] operand, as
            # graph.linear's are (ONNX writes a linear layer on [B, H, W, C] activations as a
            # MatMul: ConvNeXt's MLPs were 16 batches of 16-row products, 8x the cycles)
            rows_flattened = num_elements(x_shape[:-2]) > 1
            batch = () if rows_flattened else tuple(x_shape[:-2])
            lhs_batch = batch
            M = num_elements(x_shape[:-1]) if rows_flattened else x_shape[-2]
        else:
            w_t = None
            src = ctx.buffer(weight)
            if transpose_b:
                src = transposed_copy(ctx, src, w_shape)
                w_shape = (*w_shape[:-2], w_shape[-1], w_shape[-2])
            K, N = w_shape[-2], w_shape[-1]
            M = x_shape[-2]
            if len(shape_of(op.lhs)) > 1 and len(shape_of(op.rhs)) > 1:
                batch = tuple(shape_of(result)[:-2])
            else:
                batch = tuple(np.broadcast_shapes(x_shape[:-2], w_shape[:-2]))
            lhs_batch = tuple(x_shape[:-2])
            runtime_rhs = (src, tuple(w_shape[:-2]))
    out_shape = shape_of(result)
    batches = num_elements(batch)
    # (a bf16 output costs a vector pass over each output tile: on server MiniLM's vector-bound
    # GELU projection lost more to it than its consumer gained, 412.9 K -> 414.0 K cycles)
    out2 = None
    if norm is None:
        out_buffer = ctx.narrow_output_buffer(result)
        narrow_out = ctx.is_bf16_buffer(out_buffer)  # stored through a bf16 copy of the output tile
        out2 = em.view(out_buffer, (batches * M, N))
    else:  # the buffer once it is known which value is stored (the norm's or its input rows)
        narrow_out = False
    if lhs_batch and num_elements(lhs_batch) not in (1, batches):  # [3, 1] against [3, 2]: a full copy
        lhs_src = _batch_broadcast_copy(ctx, lhs_src if lhs_src is not None else ctx.buffer(x), lhs_batch, batch,
                                        x_shape[-2:])
        lhs_batch = batch
    if runtime_rhs and num_elements(runtime_rhs[1]) not in (1, batches):
        runtime_rhs = (_batch_broadcast_copy(ctx, runtime_rhs[0], runtime_rhs[1], batch, (K, N)), batch)
    lhs_full = num_elements(lhs_batch) == batches and batches > 1
    lhs_buffer = lhs_src if lhs_src is not None else ctx.buffer(x)
    # activations held as bf16 (a narrowed producer's output): staged as bf16 and copied into the
    # operand tile (a DMA straight into it would make the matmul the first consumer of two loads,
    # which the software pipeline does not take: the k loop ran at half speed)
    narrow_x = ctx.is_bf16_buffer(lhs_buffer)
    xv = em.view(lhs_buffer, ((batches if lhs_full else 1) * M, K))
    if isinstance(op, g.LinearOp) or rows_flattened:
        frame_groups = ((), tuple(out_shape[:-1]), (N,))
        batches, M = 1, num_elements(out_shape[:-1])
    else:
        frame_groups = (tuple(batch), (M,), (N,))
    name = ctx.kernel_name()
    copies = ctx.bf16_copies
    materialize_misfits(ctx, epilogue, [op.results[0]], frame_groups)
    epilogue_bytes = epilogue_footprint(ctx, epilogue, result, [op.results[0]], frame_groups)

    def footprint(tm: int, tn: int, tk: int, narrow: bool | None = None) -> tuple[int, int]:
        # x staging f32 + bf16 hi(/lo); weight bf16 hi(/lo) (+ f32 staging when a runtime
        # operand); bias row; epilogue tiles -- all double buffered; the accumulator tile
        spad = 2 * (tm * tk * ((2 if narrow_x else 4) + 2 * copies) + tk * tn * (2 * copies + (4 if runtime_rhs else 0)))
        spad += (2 * tn * 4 if bias is not None else 0) + (2 * tm * tn * 2 if (narrow_out if narrow is None else narrow) else 0)
        # each emitted tile shape (full, remainder) allocates its own epilogue buffers
        spad += sum(epilogue_bytes(a, b) for a in tile_extents(M, tm) for b in tile_extents(N, tn))
        return spad, 2 * tm * tn * 4

    produced = {r for e in epilogue for r in e.results}
    spec = tiling_cost.GemmSpec(
        lhs_bytes=(2 if narrow_x else 4), lhs_split=True, rhs_bytes=(4 if runtime_rhs else 2 * copies),
        rhs_split=runtime_rhs is not None, passes=ctx.matmul_passes, batch=batches, bias=bias is not None,
        epi_cost=epilogue_cost(ctx, epilogue) + (1 if bias is not None else 0) + (1 if narrow_out else 0),
        epi_tiles=sum(1 for e in epilogue for v in e.operands
                      if v not in produced and v is not op.results[0] and shape_of(v) == out_shape),
        footprint=footprint)
    choice = tiling_cost.choose_gemm(hw, M, N, K, spec, override=ctx.override(name, 3))
    norm_rows = False  # the norm epilogue on whole rows in this kernel
    if norm is not None:
        decided = _norm_epilogue_choice(ctx, norm, normed, M, N, K, spec, choice, footprint,
                                        ctx.override(name, 3) is not None, keep_sum)
        norm_rows, choice, spec, footprint = decided.whole_rows, decided.choice, decided.spec, decided.footprint
        stored = normed if norm_rows else result
        out_buffer = ctx.narrow_output_buffer(stored)
        narrow_out = ctx.is_bf16_buffer(out_buffer)
        out2 = em.view(out_buffer, (batches * M, N))
        if norm_rows and keep_sum:
            sum_out = em.view(ctx.output_buffer(result), (batches * M, N))
    ctx.predict(choice.best.cycles)
    TM, TN, TK = choice.tiles
    ctx.debug(tiling_cost.describe_choice(name, op.name.split(".")[1], f"M={M} N={N} K={K}"
                                          + (f" batch={batches}" if batches > 1 else ""), choice))
    if norm is not None:
        ctx.debug(f"[graph-to-tile] {name}: {norm.name.split('.')[1]} epilogue "
                  + ("on whole output rows" if norm_rows else "as a kernel of its own after this one")
                  + f": {decided.why}")
    # activations resident per m tile: with constant weights and several n tiles, each m
    # tile's [TM, K] rows are loaded and split once into a block that every n tile reads, and
    # each n tile's weights come as one whole-K [K, TN] tile whose first depth step writes the
    # accumulator: no activation reloads per n tile (MiniLM's FFN up projection on edge read
    # its activations 12 times), and no accumulator fill, which on the in-order vector unit
    # waited behind the previous tile's epilogue while the matrix unit idled. Where the block
    # and two whole-K weight tiles fit the scratchpad in place of the streamed tiles.
    # (the widest n tile, halving the chosen one, with which they fit)
    resident_x = False
    # (not with epilogue operand tiles, e.g. a residual: their loads after the matmuls held the
    # Llama prefill's gated FFN at 1.7x its predicted cycles on edge)
    if w_t is not None and batches == 1 and not spec.epi_tiles and ctx.override(name, 3) is None and not norm_rows:
        tn = TN
        while tn >= min(TN, hw.matrix.cols) and -(-N // tn) > 1 and not resident_x:
            x_res_spad = footprint(TM, tn, TK)[0] + 2 * 2 * copies * (TM * K + K * tn - TM * TK - TK * tn)
            if x_res_spad <= hw.memory.scratchpad_bytes:
                # taken where the cost model predicts it faster than the streamed tiles
                # (MiniLM edge: the FFN up and output projections, not q/k/v)
                resident_x = tiling_cost.gemm_estimate(hw, M, N, K, TM, tn, K, replace(
                    spec, resident_lhs=True)).cycles < choice.best.cycles
                TN = tn if resident_x else TN
                break
            tn //= 2
    spad_need, acc_need = footprint(TM, TN, TK)
    if resident_x:
        spad_need += 2 * 2 * copies * (TM * K + K * TN - TM * TK - TK * TN)
    x_on_chip = _activations_on_chip(ctx, lhs_buffer if lhs_src is None else None,
                                     (batches if lhs_full else 1) * M, K, spad_need)
    TKw = K if resident_x else TK  # the packed weight's k tile
    # pre-packed weights: [N/TN tiles][Kp][TN] so one weight tile is one contiguous DMA
    packs: list[SSAValue] = []
    Kp = -(-K // TKw) * TKw
    if w_t is not None:
        Np = -(-N // TN) * TN
        padded = np.zeros((Kp, Np), np.float32)
        padded[:K, :N] = w_t
        blocked = padded.reshape(Kp, Np // TN, TN).transpose(1, 0, 2).reshape(Np // TN * Kp, TN)
        hint = (weight.owner.weight_key if isinstance(weight.owner, g.WeightOp) else f"{name}.weight") + ".packed"
        packs = packed_weight_parts(ctx, hint, blocked)
    bias_row = em.view(ctx.buffer(bias), (1, N)) if bias is not None else None
    # one (m, n) tile: no loop encloses the nest
    single = batches == 1 and M <= TM and N <= TN
    # the bias as the accumulator's starting value (bias_in_accumulator): its row is loaded
    # first, ahead of the weights, into a tile of its own
    bias_first = single and bias_row is not None and bias_in_accumulator(ctx, TM, TN, lhs_buffer)
    # ... except where its epilogue adds a residual that is not on chip while its activations
    # are (the kernel before's result): then the bias joins that residual before the last
    # products instead (_residual_with_bias), and no fill waits ahead of the kernel before's
    # epilogue, which makes those activations (MiniLM's o projection after the attention's
    # outputs: 127,604 -> 126,992 cycles on server)
    residual = _residual_add(op, epilogue)
    if (bias_first and RESIDUAL_WITH_BIAS and residual is not None
            and ctx.on_chip(ctx.buffer(residual[1])) is None
            and lhs_buffer is not None and ctx.on_chip(lhs_buffer) is not None):
        bias_first = False
    bias_tile = None
    if bias_first:
        ctx.debug(f"[graph-to-tile] {name}: the accumulator starts as the bias rows (the kernel before: "
                  f"{ctx.previous_prediction} cycles predicted)")
        bias_tile = em.alloc((1, TN), f32, "spad")
        em.dma(bias_row, [0, 0], bias_tile, [0, 0], [1, N])
    # the epilogue's first add of a residual the kernel before left on chip: the accumulator's
    # fill starts from residual + bias rows in one pass (_fill_residual)
    fill_residual = _fill_residual(ctx, op, epilogue, M, N) if bias_first and RESIDUAL_WITH_BIAS else None
    # the activation prologue's bias row [1, K], loaded once at the kernel's start
    prologue_row = None
    if prologue_bias is not None:
        prologue_row = em.alloc((1, K), f32, "spad")
        em.dma(em.view(ctx.buffer(prologue_bias.operands[1]), (1, K)), [0, 0], prologue_row, [0, 0], [1, K])
    # the whole packed weight prefetched across the kernel boundary when it fits (see
    # prefetch_weights): no weight DMA in the loop nest
    resident = prefetch_weights(ctx, packs, TN, spad_need - 2 * TKw * TN * 2 * copies, acc_need) if packs else None
    if resident is not None or resident_x or x_on_chip is not None:
        # the cost model's cycles of this nest with its weights and/or activations resident, or
        # its activations on chip already (the tiles stay those chosen for streaming them:
        # residency is decided once they are known)
        estimate = tiling_cost.gemm_estimate(hw, M, N, K, TM, TN, TKw, replace(
            spec, resident_weights=resident is not None, resident_lhs=resident_x,
            lhs_on_chip=x_on_chip is not None))
        ctx.predict(estimate.cycles - choice.best.cycles)
    if resident is not None or resident_x:
        ctx.debug(f"[graph-to-tile] {name}: " + ", ".join(
            ([f"weights resident ({resident.hi.type}), loaded during the kernel before"] if resident is not None else [])
            + ([f"activations resident per m tile ([{TM}, {K}]), whole-K weight tiles"] if resident_x else []))
            + f": est {estimate.cycles} cycles")
    # the kept activations as one bf16 operand for the whole nest (see _whole_operand)
    x_whole = _whole_operand(ctx, x_on_chip, lhs_buffer, M, K, spad_need, activation) if (
        resident is not None and batches == 1 and copies == 1 and M > TM and prologue_row is None) else None
    if x_whole is not None:
        resident_x = False
        ctx.debug(f"[graph-to-tile] {name}: activations kept on chip, one bf16 operand [{M}, {K}] for every tile")
    # a one-tile nest of 2-3 k steps on a latency-bound target: the steps in sequence, on two
    # sets of single-buffered tiles taken in turn (the halves the double-buffered k loop would
    # rotate), the first step's products writing the accumulator: no fill pass, which on the
    # in-order vector unit sat between the kernel before's epilogue and this kernel's first
    # matmul (MiniLM's FFN up projection on server: 400 cycles). (A first step peeled off the k
    # loop instead left the loop's tiles used outside it, so they stopped rotating: slower.)
    in_sequence = (latency_bound(hw) and single and x_whole is None and not resident_x
                   and TK < K <= SEQUENCED_K_STEPS * TK)
    halves = 1 if in_sequence else 2  # buffers of each tile a k step uses

    # local buffers (resident activations: x is the m tile's block)
    x_staging = em.alloc((TM, TK), bf16 if narrow_x else f32, "spad", halves) if x_whole is None else None
    x_tile = alloc_bf16_tile(ctx, TM, K if resident_x else TK, halves) if x_whole is None else x_whole
    out_bf16 = em.alloc((TM, TN), bf16, "spad", 2) if narrow_out else None
    w_tile = alloc_bf16_tile(ctx, TKw, TN, halves) if resident is None else resident
    w_staging = em.alloc((TK, TN), f32, "spad", halves) if runtime_rhs else None
    loop_tiles = _StepTiles(x_staging, x_tile, w_tile, w_staging)
    # the steps in sequence take loop_tiles (single-buffered then) and this second set in turn
    sequence = (loop_tiles, _StepTiles(
        em.alloc((TM, TK), bf16 if narrow_x else f32, "spad") if x_staging is not None else None,
        alloc_bf16_tile(ctx, TM, TK, 1), alloc_bf16_tile(ctx, TKw, TN, 1) if resident is None else resident,
        em.alloc((TK, TN), f32, "spad") if runtime_rhs else None)) if in_sequence else None
    # one output tile: no loop rotates the accumulator tile, so one buffer (a second only took
    # capacity from the kept results and the next kernel's prefetched weights; docs/tiling.md,
    # "Accumulator space")
    ring = 1 if single else 2
    acc = em.alloc((TM, TN), f32, "acc", ring)
    if bias_row is not None and bias_tile is None:
        bias_tile = em.alloc((1, TN), f32, "spad", 2)
    # the norm epilogue: its temporary [TM, N], row statistics and scale (and bias) rows, DMAd once
    norm_tiles = None
    if norm_rows:
        assert isinstance(norm, g.NormOp)
        params = [em.alloc((1, N), f32, "spad") for _ in norms.param_rows_of(norm)]
        norm_tiles = (em.alloc((TM, N), f32, "spad", ring), em.alloc((TM, 1), f32, "spad", ring), params)
        for src, dst in zip(norms.norm_param_rows(ctx, norm, name), params, strict=True):
            em.dma(src, [0, 0], dst, [0, 0], [1, N])
    rhs_view = None
    rhs_full = False
    if runtime_rhs:
        rhs_src, rhs_batch = runtime_rhs
        rhs_full = num_elements(rhs_batch) == batches and batches > 1
        rhs_view = em.view(rhs_src, ((batches if rhs_full else 1) * K, N))

    def tile_body(b: Index, m0: Index, tm: int, n_tile: Index, n0: Index, tn: int) -> None:
        z = [0, 0]
        early_bias = single and bias_row is not None and bias_tile is not None
        if early_bias and not bias_first:
            # before the k loop: in a nest without loops the planner would otherwise give the bias
            # row the weight tile's bytes, and its load would wait for the last matmul
            em.dma(bias_row, [0, n0], bias_tile, z, [1, tn])
        if fill_residual is not None:  # the accumulator starts as the residual plus the bias rows
            assert bias_tile is not None
            em.vec("add", acc, z, fill_residual[1], z, tm, tn, bias_tile, z, bmode="row")
        elif bias_first:  # the accumulator starts as the bias rows; every product adds to it
            assert bias_tile is not None
            em.fill(acc, z, tm, tn, 0.0)
            em.vec("add", acc, z, acc, z, tm, tn, bias_tile, z, bmode="row")
        first_writes = not bias_first  # (the first product overwrites the accumulator)
        # the bias added to the epilogue's residual before the last k step's products instead of
        # to the accumulator after them (_residual_with_bias): (residual tensor, its biased tile)
        biased = _residual_with_bias(ctx, op, epilogue, TileFrame(*frame_groups, b, m0, n0, tm, tn)) if (
            RESIDUAL_WITH_BIAS and in_sequence and bias_tile is not None and not bias_first
            and x_on_chip is not None) else None

        def k_step(k0: Index, tk: int, tiles: _StepTiles = loop_tiles, first: bool = False,
                   last: bool = False) -> None:
            stage_x(em.add(em.mul(b, M) if lhs_full else 0, m0), k0, tm, tk, (0, 0), tiles)
            if last and biased is not None:  # (after the last step's staging, on the vector unit)
                em.vec("add", biased[1], z, biased[2], z, tm, tn, bias_tile, z, bmode="row")
            if resident is not None:
                rhs_row = em.add(em.mul(n_tile, Kp), k0)
                for c0, width in _column_loops(tn, hw.matrix.cols, split=last and SPLIT_LAST_PRODUCTS):
                    emit_tile_product(ctx, tiles.x, resident, acc, tm, tk, width, overwrite=first and first_writes,
                                      rhs_at=(rhs_row, c0), acc_at=(0, c0))
                return
            w = tiles.w
            if packs:
                row = em.add(em.mul(n_tile, Kp), k0)
                em.dma(packs[0], [row, 0], w.hi, [0, 0], [TK, TN])
                if w.lo is not None:
                    em.dma(packs[1], [row, 0], w.lo, [0, 0], [TK, TN])
            else:
                assert rhs_view is not None and tiles.w_staging is not None
                rhs_row = em.add(em.mul(b, K) if rhs_full else 0, k0)
                em.dma(rhs_view, [rhs_row, n0], tiles.w_staging, [0, 0], [tk, tn])
                split_on_chip(em, tiles.w_staging, w, tk, tn)
            for c0, width in _column_loops(tn, hw.matrix.cols, split=last and SPLIT_LAST_PRODUCTS):
                emit_tile_product(ctx, tiles.x, w, acc, tm, tk, width, overwrite=first and first_writes,
                                  rhs_at=(0, c0), acc_at=(0, c0))

        if x_whole is not None:  # whole K in place: the first product writes the accumulator
            assert resident is not None
            emit_tile_product(ctx, x_whole, resident, acc, tm, K, tn, overwrite=first_writes,
                              lhs_at=(m0, 0), rhs_at=(em.mul(n_tile, Kp), 0))
        elif resident_x:
            w_row = em.mul(n_tile, Kp)
            if resident is None:
                for part, dst in zip(packs, (w_tile.hi, w_tile.lo), strict=False):
                    if dst is not None:
                        em.dma(part, [w_row, 0], dst, [0, 0], [K, TN])
            emit_tile_product(ctx, x_tile, w_tile, acc, tm, K, tn, overwrite=first_writes, rhs_at=(w_row, 0) if resident is not None else (0, 0))
        elif sequence is not None:
            for i, k0 in enumerate(range(0, K, TK)):
                k_step(k0, min(TK, K - k0), sequence[i % 2], first=i == 0, last=k0 + TK >= K)
        else:
            if first_writes:
                em.fill(acc, [0, 0], tm, tn, 0.0)
            em.tiles(K, TK, k_step)
        if bias_row is not None and bias_tile is not None and not bias_first and biased is None:
            if not early_bias:
                em.dma(bias_row, [0, n0], bias_tile, z, [1, tn])
            em.vec("add", acc, z, acc, z, tm, tn, bias_tile, z, bmode="row")
        frame = TileFrame(*frame_groups, b, m0, n0, tm, tn)
        if fill_residual is not None:  # (its add done: the accumulator holds its result)
            tile = apply_epilogue(ctx, epilogue[1:], {fill_residual[0].results[0]: acc}, frame, result)
        else:
            tile = apply_epilogue(ctx, epilogue, {op.results[0]: acc}, frame, result,
                                  loaded={biased[0]: ("tile", biased[1])} if biased is not None else None)
        if norm_tiles is not None:  # whole rows (tn = N): the norm kernel's instructions
            assert isinstance(norm, g.NormOp)
            if sum_out is not None:  # (stored first: a layer norm centres the tile in place)
                em.dma(tile, z, sum_out, [em.add(em.mul(b, M), m0), n0], [tm, tn])
            y, column, params = norm_tiles
            out = out_bf16 if out_bf16 is not None else y  # (its last instruction rounds to bf16)
            # (by column blocks of the array's depth on a latency-bound target: the next
            # kernel's first k step reads the first block, prefetch_hoist._operand_preparation)
            norms.normalize(em, norm, tile, y, out, column, params, tm, tn,
                            tail_columns=hw.matrix.rows if NORM_TAIL_BY_BLOCKS and latency_bound(hw) else None)
            tile = out
        elif out_bf16 is not None:  # rounded here instead of by each consumer: the same bits
            em.vec("copy", out_bf16, z, tile, z, tm, tn)
            tile = out_bf16
        em.dma(tile, z, out2, [em.add(em.mul(b, M), m0), n0], [tm, tn])
        if single and tuple(shape_of(tile)) == (M, N):
            # the whole result in one local tile: a next kernel reading all of it copies the
            # tile instead of loading it back (which waits for this store and a DRAM latency)
            ctx.keep_on_chip(out2, tile, next_kernels=KEPT_RESULT_READERS)

    def stage_x(row0: Index, k0: Index, tm: int, tk: int, dst_at: tuple[Index, Index],
                tiles: _StepTiles = loop_tiles) -> None:
        """Rows [row0, +tm) x columns [k0, +tk) of the activations into the bf16 operand tile
        (of `tiles`)."""
        x_staging, x_tile = tiles.x_staging, tiles.x
        assert x_staging is not None
        z = [0, 0]
        if x_on_chip is None:
            em.dma(xv, [row0, k0], x_staging, z, [tm, tk])
            if prologue_row is not None:  # the producer's bias, then its activation
                em.vec("add", x_staging, z, x_staging, z, tm, tk, prologue_row, [0, k0], bmode="row")
            if activation is not None and x_tile.lo is None:  # activated as it is rounded
                em.vec(activation, x_tile.hi, dst_at, x_staging, z, tm, tk)
                return
            if activation is not None:
                em.vec(activation, x_staging, z, x_staging, z, tm, tk)
            split_on_chip(em, x_staging, x_tile, tm, tk, dst_at=dst_at)
        elif prologue_row is not None:  # the kept rows plus the producer's bias, activated
            em.vec("add", x_staging, z, x_on_chip, [row0, k0], tm, tk, prologue_row, [0, k0], bmode="row")
            if x_tile.lo is None:
                em.vec(activation or "copy", x_tile.hi, dst_at, x_staging, z, tm, tk)
                return
            em.vec(activation or "copy", x_staging, z, x_staging, z, tm, tk)
            split_on_chip(em, x_staging, x_tile, tm, tk, dst_at=dst_at)
        elif x_tile.lo is None:  # one rounding copy (or the activation) reads the kept rows in place
            em.vec(activation or "copy", x_tile.hi, dst_at, x_on_chip, [row0, k0], tm, tk)
        else:  # (the fp32 split overwrites its source, which later kernels may still read)
            em.vec(activation or "copy", x_staging, z, x_on_chip, [row0, k0], tm, tk)
            split_on_chip(em, x_staging, x_tile, tm, tk, dst_at=dst_at)

    def load_block(m0: Index, tm: int, k0: Index, tk: int) -> None:
        stage_x(m0, k0, tm, tk, (0, k0))

    def over_n(b: Index, m0: Index, tm: int) -> None:
        if resident_x:
            em.tiles(K, TK, lambda k0, tk: load_block(m0, tm, k0, tk))
        # the n loop counts tiles (n_tile), so the packed weight row is affine in it
        em.counted_tiles(N, TN, lambda j, n0, tn: tile_body(b, m0, tm, j, n0, tn))

    em.range(batches, lambda b: em.tiles(M, TM, lambda m0, tm: over_n(b, m0, tm)))
    if norm is not None and not norm_rows:
        ctx.defer(norm)


def _fill_residual(ctx: LoweringContext, op: Operation, epilogue: Sequence[Operation], M: int,
                   N: int) -> tuple[Operation, SSAValue] | None:
    """For a one-tile nest that starts from its bias rows (`bias_in_accumulator`) and whose
    epilogue starts by adding a full [M, N] operand the kernel before left on chip
    (`LoweringContext.on_chip_as`: a transformer's residual, the layer norm's output two kernels
    before): (that add, the kept tile). The accumulator's fill then writes residual + bias rows in
    one pass, where a zero fill and the bias row took two, and the epilogue loses the add after
    the last matmul (MiniLM's FFN down projection: its residual, then its layer norm)."""
    residual = _residual_add(op, epilogue)
    if residual is None:
        return None
    kept = ctx.on_chip_as(ctx.buffer(residual[1]), (M, N))
    return (residual[0], kept) if kept is not None else None


def _residual_add(op: Operation, epilogue: Sequence[Operation]) -> tuple[Operation, SSAValue] | None:
    """(the epilogue's first op, its other operand) when that op adds an operand of the
    product's full shape to the product (a residual), else None."""
    first = epilogue[0] if epilogue else None
    if not isinstance(first, g.AddOp) or op.results[0] not in first.operands:
        return None
    other = next((v for v in first.operands if v is not op.results[0]), None)
    if other is None or shape_of(other) != shape_of(op.results[0]):
        return None
    return first, other


def _residual_with_bias(ctx: LoweringContext, op: Operation, epilogue: Sequence[Operation],
                        frame: TileFrame) -> tuple[SSAValue, SSAValue, SSAValue] | None:
    """For a one-tile nest whose k steps run in sequence (on activations kept on chip: the
    caller) and whose epilogue starts by adding a full-tile operand to the product (a
    transformer's residual, before its layer norm): that operand loaded now, before the products
    (`preload_operands`), and a tile for it plus the bias row, which the nest adds before its
    last k step's products; the epilogue then adds the product and that tile, one pass after the
    last matmul where the bias and the residual took two (MiniLM's o projection after the
    attention, which does not start from its bias rows: `bias_in_accumulator`). With k steps
    that load their activations, the operand's DMA held them up on the in-order load engine (a
    block whose first projection does: 14,292 -> 14,394 cycles), so the caller leaves those.
    -> (the operand, the biased tile, the loaded tile), or None."""
    residual = _residual_add(op, epilogue)
    if residual is None:
        return None
    first, other = residual
    kind, tile = preload_operands(ctx, [first], [op.results[0]], frame)[other]
    if kind != "tile":
        return None
    # a tile of its own: the loaded one may be a tile kept on chip that later kernels read
    return other, ctx.emitter.alloc((frame.rows, frame.cols), f32, "spad"), tile


class _StepTiles(NamedTuple):
    """The local tiles a k step uses: the activations' staging and bf16 operand tiles, the
    weight tile (the resident weights where they are) and a runtime weight's staging tile."""

    x_staging: SSAValue | None
    x: Bf16Tile
    w: Bf16Tile
    w_staging: SSAValue | None


def takes_activation_prologue(ctx: LoweringContext, op: Operation, prologue: Sequence[Operation]) -> bool:
    """The prologue check for a linear/matmul on a dense weight: True (and the activation recorded
    for lower_gemm) when the prologue is one activation with a one-instruction vector lowering
    (`vector_math.activation_instruction`) that makes the product's activations, optionally
    after the producer's bias row added to its input (graph-fuse-activation-prologue moves it
    with the activation: a `graph.add` of a [K] vector read by the activation only)."""
    if not prologue or len(prologue) > 2 or activation_instruction(prologue[-1]) is None:
        return False
    activation = prologue[-1]
    if op.operands[0] is not activation.results[0] or any(
            use.operation is not op or use.index != 0 for use in activation.results[0].uses):
        return False
    if len(prologue) == 2:
        add = prologue[0]
        if (not isinstance(add, g.AddOp) or activation.operands[0] is not add.results[0]
                or len(list(add.results[0].uses)) != 1
                or shape_of(add.operands[1]) != shape_of(add.results[0])[-1:]
                or shape_of(add.operands[0]) != shape_of(add.results[0])):
            return False
        ctx.derived[(PROLOGUE_BIAS, op)] = add
    ctx.derived[(ACTIVATION_PROLOGUE, op)] = activation
    return True


#: a one-tile nest of at most this many k steps emits them in sequence, without an accumulator
#: fill (latency-bound targets; see lower_gemm)
SEQUENCED_K_STEPS = 3

#: a one-tile nest adds its bias to the epilogue's residual ahead of its products: in its
#: accumulator's fill (_fill_residual) or before its last k step's products (_residual_with_bias)
RESIDUAL_WITH_BIAS = True

#: the share of the kernel before's predicted cycles that a one-tile nest's bias fill may take
#: (bias_in_accumulator)
BIAS_FILL_SHARE = 0.1


def bias_in_accumulator(ctx: LoweringContext, tm: int, tn: int, lhs_buffer: SSAValue) -> bool:
    """Whether a one-tile nest with a bias starts its accumulator as the bias rows (a fill and a
    row add before the products, which then all accumulate) instead of adding the bias after
    its last product, so the pass comes off the path from this kernel's last matmul to its
    consumers (the attention after q/k/v, the layer norm after o and down). On a latency-bound
    target, where the two passes are hidden:
    - the kernel before ends in an epilogue on the vector unit (`previous_epilogue`): the fill
      is accumulator preparation, which prefetch_hoist.py moves ahead of that epilogue, beside
      that kernel's products; or
    - the kernel before ends in its products, no vector work after its last matmul
      (`previous_drains`), and this nest's activations are its result (`lhs_buffer`,
      `previous_outputs`): the nest's first vector work, staging them, waits for that kernel's
      last matmul to drain anyway, and the fill takes no longer than the drain (MiniLM's FFN
      down projection after an up projection whose bias and GELU moved into it), or this
      nest does not read that result: the fill runs while the kernel before's products
      stream, the vector unit idle, and this nest ends in its products too (MiniLM's v
      projection after k: the attention's first score tiles no longer wait behind v's bias
      add, 476 cycles in the first layer);
    and the two passes take at most BIAS_FILL_SHARE of the kernel before's predicted cycles: a
    wider fill (MiniLM's FFN up projection, 128 x 1536 after the 128 x 384 o projection) holds
    up the kernel before's epilogue on the in-order vector unit for longer than the add it
    saves. After a kernel that ends in other vector work (an attention's last heads) the fill
    sits before this kernel's first matmul (docs/tiling.md, "The bias in the accumulator")."""
    hw = ctx.hw
    if not latency_bound(hw):
        return False
    cost = hw.vector.cost
    fill = -(-tm * tn // hw.vector.lanes) * (cost.get("mul", 1) + cost.get("add", 1))
    if fill > BIAS_FILL_SHARE * ctx.previous_prediction:
        return False
    if ctx.previous_epilogue:
        return True
    reads_previous = any(lhs_buffer is b for b in ctx.previous_outputs)
    return ctx.previous_drains and (not reads_previous or fill <= hw.matrix.fill_drain_cycles)


#: a norm epilogue's last passes run by column blocks on latency-bound targets (norms.normalize)
NORM_TAIL_BY_BLOCKS = True

#: a one-tile nest's last k step in sequence runs its products as two column loops (_column_loops)
SPLIT_LAST_PRODUCTS = True


def _column_loops(width: int, array_cols: int, split: bool) -> list[tuple[int, int]]:
    """(first column, width) of the loops a k step's products over `width` columns are emitted
    as: one, or with `split` and three or more array-wide column tiles, the first half of the
    tiles and then the rest. The next kernel reads this result by column blocks when it is a
    k loop over it (MiniLM's FFN down projection over the up projection's 1536 columns, its
    GELU in the prologue): tile-to-npu orders its first step after the products that wrote
    those columns, so with the last step's columns in two loops it waits for the first loop
    only, and its first prologue runs while the second loop's products stream (MiniLM on
    server: the matrix unit's 600-cycle gap between the two kernels of every layer is gone)."""
    tiles = -(-width // array_cols)
    if not split or tiles < 3:
        return [(0, width)]
    half = -(-tiles // 2) * array_cols
    return [(0, half), (half, width - half)]


#: a one-tile GEMM's result stays on chip for the kernels named within this many names after it
#: (a transformer layer's q, k and v projections of the rows before them)
KEPT_RESULT_READERS = 3


def _activations_on_chip(ctx: LoweringContext, lhs_buffer: SSAValue | None, rows: int, K: int,
                         spad_need: int) -> SSAValue | None:
    """A [rows, K] view of the local tile in which the kernel before left all of `lhs_buffer`
    (`LoweringContext.keep_on_chip`: a one-tile GEMM's result), when it has the buffer's
    elements and fits beside this nest's buffers (`spad_need`) within KERNEL_OVERLAP_SHARE of
    the scratchpad; else None (the rows are loaded from DRAM)."""
    if lhs_buffer is None:
        return None
    element_bytes = 2 if ctx.is_bf16_buffer(lhs_buffer) else 4
    if spad_need + rows * K * element_bytes > KERNEL_OVERLAP_SHARE * ctx.hw.memory.scratchpad_bytes:
        return None
    return ctx.on_chip_as(lhs_buffer, (rows, K))


def _whole_operand(ctx: LoweringContext, x_on_chip: SSAValue | None, lhs_buffer: SSAValue, M: int,
                   K: int, spad_need: int, activation: str | None = None) -> Bf16Tile | None:
    """The kept activations (`_activations_on_chip`) as one bf16 [M, K] operand that every
    tile's products read in place, rounded by one vector copy before the nest (none when they
    are kept as bf16), or None when that copy does not fit beside the nest's buffers within
    KERNEL_OVERLAP_SHARE of the scratchpad. Why: per k step the rounding copy of the step's
    activations sat in the in-order vector queue behind the previous m tile's epilogue, so the
    matrix unit waited for that epilogue (the Llama prefill's gated projection: its SiLU and
    product, 1.8 K cycles per m tile on server); with the operand whole, the nest's only vector
    work is the accumulator's epilogue, and the first product of each tile writes the
    accumulator (no fill). For nests of several m tiles only: in a one-tile nest the
    per-step copies let the first matmul start after the first step's copy (MiniLM server
    189.3 K -> 189.8 K cycles with the whole operand there too). `activation`: the vector
    instruction of an activation prologue, which the copy applies (kept bf16 rows, which no copy
    reads: None, the per-step staging applies it)."""
    if x_on_chip is None:
        return None
    if ctx.is_bf16_buffer(lhs_buffer):
        return Bf16Tile(x_on_chip, None) if activation is None else None
    em = ctx.emitter
    if spad_need + M * K * (4 + 2) > KERNEL_OVERLAP_SHARE * ctx.hw.memory.scratchpad_bytes:
        return None
    whole = em.alloc((M, K), bf16, "spad")
    em.vec(activation or "copy", whole, (0, 0), x_on_chip, (0, 0), M, K)
    return Bf16Tile(whole, None)


class NormEpilogue(NamedTuple):
    """`_norm_epilogue_choice`'s answer: whether the norm runs on whole rows in the GEMM, and the
    GEMM's tiling choice, spec and footprint for that (why: for debug-tiling)."""

    whole_rows: bool
    choice: tiling_cost.Choice
    spec: tiling_cost.GemmSpec
    footprint: Callable[..., tuple[int, int]]
    why: str


def _norm_epilogue_choice(ctx: LoweringContext, norm: g.NormOp, normed: SSAValue, M: int, N: int, K: int,
                          spec: tiling_cost.GemmSpec, choice: tiling_cost.Choice,
                          footprint: Callable[..., tuple[int, int]], overridden: bool,
                          keep_sum: bool) -> NormEpilogue:
    """Whether the GEMM applies its norm epilogue (over the N output columns) on whole rows:
    one n tile of N columns, the norm kernel's instructions on each output tile before the
    store, against the product's tiles as chosen and the norm as a kernel of its own after it
    (its DRAM round trips: the rows stored, loaded again, the result stored). Taken where the
    cost model predicts fewer cycles (on server a norm kernel is a few DRAM latencies; on edge
    the accumulator holds few rows of a wide N and the norm kernel is bandwidth-bound).
    `keep_sum`: the rows before the norm are stored too (a pre-norm block's residual sum)."""
    hw = ctx.hw
    narrow = ctx.narrows(normed)
    whole, column = norms.norm_vector_cost(ctx, norm)
    params = len(norms.param_rows_of(norm))

    def with_norm(tm: int, tn: int, tk: int) -> tuple[int, int]:  # + the norm's y x2, column x2, rows
        spad, acc = footprint(tm, tn, tk, narrow)
        return spad + 2 * tm * tn * 4 + 2 * tm * 4 + params * tn * 4, acc

    # (a bf16 output: the norm's last instruction writes it, no copy pass)
    fused_spec = replace(spec, epi_cost=spec.epi_cost + whole, footprint=with_norm,
                         out_bytes=spec.out_bytes * (2 if keep_sum else 1))
    apart = NormEpilogue(False, choice, spec, footprint, "")
    if overridden:  # tiles given by hand: whole rows if their n tile is
        if choice.tiles[1] < N:
            return apart._replace(why="the n tile given is not the whole row")
        fused = tiling_cost.choose_gemm(hw, M, N, K, fused_spec, override=choice.tiles)
        return NormEpilogue(True, fused, fused_spec, with_norm, "the n tile given is the whole row")
    fused = tiling_cost.choose_gemm(hw, M, N, K, fused_spec, tn_cands=[N])
    # the norm's dependent chain of instructions (one vector latency each) after the last product
    steps = (3 if isinstance(norm, g.LayerNormOp) else 0) + 6 + params
    chain = steps * hw.vector.latency + -(-fused.tiles[0] // hw.vector.lanes) * column
    kernel = norms.rows_choice(ctx, norm, M * spec.batch, N, narrow).cycles
    whole_rows = fused.best.cycles + chain
    why = (f"est {whole_rows} cycles ({'x'.join(map(str, fused.tiles))}) against {choice.best.cycles} + "
           f"{kernel} for the norm kernel")
    if not tiling_cost.fits(hw, fused.best) or whole_rows >= choice.best.cycles + kernel:
        return apart._replace(why=why if tiling_cost.fits(hw, fused.best) else "whole rows do not fit")
    return NormEpilogue(True, fused, fused_spec, with_norm, why)


#: the share of the scratchpad and accumulator the kernel before's buffers, this kernel's and its
#: prefetched weights may take together (matrix_unit.prefetch_packed)
PREFETCH_SHARE = KERNEL_OVERLAP_SHARE


def prefetch_weights(ctx: LoweringContext, packs: Sequence[SSAValue], tn: int, nest_spad: int,
                     nest_acc: int) -> Bf16Tile | None:
    """The whole packed weight ([N/TN * Kp, TN] per bf16 part) prefetched across the kernel
    boundary (matrix_unit.prefetch_packed): the k loop then has no weight DMA and each weight
    byte is read once, however many m tiles."""
    return prefetch_packed(ctx, list(packs), nest_spad, nest_acc, PREFETCH_SHARE)


def _batch_broadcast_copy(ctx: LoweringContext, src: SSAValue, src_batch: Sequence[int], batch: Sequence[int],
                          matrix: Sequence[int]) -> SSAValue:
    """A DRAM copy of an operand [*src_batch, rows, cols] whose batch dims broadcast only in part
    against the product's `batch` (numpy's rules: [1, 2] against [3, 2]), repeated to the whole
    batch (a loop nest of its own), so the product reads one matrix per batch entry or one for
    all, as it does without broadcasting."""
    in_shape = (1,) * (len(batch) - len(src_batch)) + tuple(src_batch) + tuple(matrix)
    out_shape = tuple(batch) + tuple(matrix)
    dst = ctx.emitter.alloc(out_shape, src.type.element_type, "dram")  # type: ignore[attr-defined]
    steps = [0 if (a == 1 and b != 1) else 1 for a, b in zip(in_shape, out_shape, strict=True)]
    copy_box(ctx, ctx.emitter.view(src, in_shape), in_shape, [0] * len(out_shape), steps, dst, out_shape,
             [0] * len(out_shape), out_shape)
    return dst
