"""Cost model for tile-size selection (used by `graph-to-tile`).

Every number comes from the hardware description (`infer.target.hw`): array
rows/cols, scratchpad and accumulator capacity, DRAM bytes/cycle and burst
size, DMA setup and channels, vector lanes and per-op costs, latencies.

A GEMM-shaped kernel streams `M` rows of its left operand through the array
against a stationary `K x N` right operand (the weight tile). Tiles are
(TM, TN, TK); loops run m (outer), n, k (inner, accumulating in the
accumulator), so the left operand is re-read once per n tile and the right
operand once per m tile. Inputs are double buffered (2 copies each) and the
accumulator tile too, so each buffer gets half the memory.

    matrix  = steps * mm_per_step * max(matmul_cycles(TM, dtype), weight_load(k, n))
              + out_tiles * fill_drain
    memory  = sum(DMA bytes, each row rounded up to whole bursts) / bytes_per_cycle
              + DMAs * setup_cycles / channels
    vector  = steps * split_cost(lhs, rhs) + out_tiles * epilogue_cost
    cycles  = max(matrix, memory, vector) + out_tiles * (fill_drain + vector.latency)
              + dram.latency

`matmul_cycles(TM, dtype)` is TM * cycles_per_row at the dtype's MAC rate
(`matrix.macs_per_pe`: int8 at twice bf16 on the server config); weight loads move
the dtype's bytes (int8: 1, bf16: 2).

The bound of an op is the largest of the three terms.

(Over ~800 lines: every kernel family's estimate shares the schedule terms above; the static
code of a conv nest lives in tiling_code.py, and moving the conv estimate to its own module is
the next split.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from infer.passes.tiling_code import code_size, conv_nest
from infer.passes.tiling_tuning import pick_index
from infer.target import isa
from infer.target.hw import HardwareConfig


@dataclass(frozen=True)
class GemmSpec:
    """What a GEMM-shaped kernel moves and computes besides the MACs."""

    lhs_bytes: int = 4  # DRAM bytes per lhs element as loaded (f32 activation: 4, packed bf16: 2 per pass)
    lhs_split: bool = True  # lhs is fp32 in DRAM and is converted on the vector unit
    rhs_bytes: int = 2
    rhs_split: bool = False
    passes: int = 3  # matmuls per array tile: 3 (fp32 emulation) or 1 (bf16)
    taps: int = 1  # conv: kh * kw shifted windows accumulate into the same tile
    batch: int = 1  # independent problems (batched matmul, conv images)
    epi_cost: int = 0  # vector cost units per output element (sum of vector.cost of epilogue ops)
    epi_tiles: int = 0  # extra [TM, TN] fp32 operand tiles loaded per output tile (residual, ...)
    out_bytes: int = 4
    bias: bool = False  # a bias row is loaded per output tile after its k loop (one more DMA round trip)
    # flash attention (M = queries, N = keys, K = D): each [TM, TN] score tile is one step whose
    # softmax (`epi_cost`, `softmax_ops` vector instructions in a dependent chain) feeds a second
    # product P.V of `flash_dv` columns; 0: a plain GEMM
    flash_dv: int = 0
    softmax_ops: int = 0
    # flash attention over several key tiles: each score tile rescales the running O [TM,
    # flash_dv] by alpha (one vector pass over O); a softmax over one key tile does not
    flash_rescale: bool = True
    # flash attention: the score tiles of `interleave` heads interleaved stage by stage (one
    # head's softmax runs while the next head's scores are on the matrix unit), each with its
    # own buffers (`footprint` times interleave); `interleaves`: the counts the lowering can
    # emit, of which a tiling's estimate is that of the fastest that fits
    interleave: int = 1
    interleaves: tuple[int, ...] = (1,)
    # causal flash attention: Skv - Sq (the key offset of query 0); the tilings
    # `triangular_score_tiles` accepts visit only the key tiles up to each query tile's diagonal
    causal_offset: int | None = None
    # False: the throughput estimate alone (packed-weight GEMMs, which re-rank the candidates
    # by their own exposed latencies: packed_gemm._rank_by_latency)
    schedule: bool = True
    matmul_dtype: str = "bf16"  # the array's operand type: its MAC rate and weight-tile bytes
    lhs_row_contig: bool = True  # the lhs tile's rows are contiguous runs of TK elements
    # the whole weight is loaded into the scratchpad during the kernel before (gemm.py's
    # cross-kernel prefetch): no weight DMA per k step, each weight byte read once, and the
    # weights are there before the first activation tile (whose load waits for that kernel)
    resident_weights: bool = False
    # gemm.py's resident activations: each m tile's [TM, K] rows loaded and split once into
    # the scratchpad (before its n loop), each n tile one whole-K weight tile (tk = K) whose
    # product writes the accumulator (no fill)
    resident_lhs: bool = False
    # the activations are the tile the kernel before kept on chip (gemm.py's
    # `_activations_on_chip`): each step copies its rows on the vector unit instead of loading
    # them, so the only DRAM latency before the first matmul is a weight tile's (none with the
    # weights resident)
    lhs_on_chip: bool = False
    # flash attention with Q, K and V on chip before its loops (attention.py's resident
    # operands): no DMA per step, each step's tiles are vector copies
    resident_operands: bool = False
    # (tm, tn, tk) -> (scratchpad bytes, accumulator bytes) of every local buffer the
    # lowered loop nest keeps live at once (the lowering's own allocs, x2 when double
    # buffered, epilogue operands and temporaries included). None: the generic formula.
    footprint: Callable[[int, int, int], tuple[int, int]] | None = field(default=None, compare=False)


@dataclass
class Estimate:
    tiles: tuple[int, int, int]
    cycles: int
    matrix: int
    memory: int
    vector: int
    spad: int
    acc: int
    loops: int = 0  # hardware loops the lowered nest needs (trip count >= 2)
    interleave: int = 1  # flash attention: heads interleaved (GemmSpec.interleaves)

    @property
    def bound(self) -> str:
        terms = {"compute": self.matrix, "memory": self.memory, "vector": self.vector}
        return max(terms, key=lambda k: terms[k])


@dataclass
class Choice:
    tiles: tuple[int, int, int]
    best: Estimate
    candidates: list[Estimate] = field(default_factory=list)
    overridden: bool = False
    rejected: int = 0  # candidates that did not fit the memories


def _burst_bytes(hw: HardwareConfig, row_bytes: int) -> int:
    b = hw.dram.burst_bytes
    return -(-row_bytes // b) * b


def dma_round_trip(hw: HardwareConfig, nbytes: float) -> float:
    """Cycles from issuing one DMA of `nbytes` (bursts already counted) to its completion on an
    idle engine: setup, the transfer at the DRAM bandwidth, the DRAM latency (docs/isa.md)."""
    return hw.dma.setup_cycles + nbytes / hw.dram.bytes_per_cycle + hw.dram.latency_cycles


def pipeline_cycles(hw: HardwareConfig, tiles: int, load_bytes: float, compute: float, store_bytes: float,
                    loads: int = 1, stores: int = 1, pipelined: bool = True, rounds: int = 1) -> int:
    """Cycles of a loop of `tiles` iterations that loads a tile (`loads` DMAs of `load_bytes` in
    all), computes on it for `compute` cycles (vector occupancy, latency included) and stores
    `store_bytes` (`stores` DMAs; 0 bytes: nothing stored per tile), with double-buffered tiles:

    * the first tile's load, compute and store run back to back (pipeline fill and drain: one
      DMA round trip in, one out);
    * then one tile per period, the slowest of: DRAM bytes over the bandwidth (loads and stores
      share it), the compute, each DMA engine's channels (a transfer holds a channel for setup +
      transfer + latency), and the double-buffer recurrences: the load of tile i+2 reuses the
      buffer tile i's compute frees, and the compute of tile i+2 the output buffer tile i's store
      frees (a store completes after the DRAM latency), so two periods cover a load round trip
      plus a compute, or a compute plus a store round trip;
    * `pipelined=False` (tile-to-npu does not software-pipeline the loop, e.g. two loads whose
      first consumer is the same instruction): the next tile's loads are dispatched in program
      order, after the front end waited for this tile's, so a period holds a load round trip,
      the compute and the store's transfer (ahead of the next load on the DRAM);
    * `rounds` > 1: each tile is that many load -> compute pairs in series (window taps), each
      load a round trip of its share of the bytes."""
    bw, ch = hw.dram.bytes_per_cycle, hw.dma.channels
    ld = dma_round_trip(hw, load_bytes / rounds) if load_bytes else 0.0
    st = dma_round_trip(hw, store_bytes) if store_bytes else 0.0
    chain = rounds * (ld + compute / rounds)  # one tile's loads and compute
    per_dma = hw.dma.setup_cycles + hw.dram.latency_cycles
    period = max((load_bytes + store_bytes) / bw, compute, (ld + compute) / 2, (compute + st) / 2,
                 (loads * per_dma + load_bytes / bw) / ch, (stores * per_dma + store_bytes / bw) / ch if stores else 0)
    if not pipelined or rounds > 1 or tiles < 3:  # (a loop of 2 trips is not pipelined either)
        period = max(period, chain + store_bytes / bw)
    return int(chain + st + (tiles - 1) * period)


def spad_split_bytes(split: bool, passes: int) -> int:
    """Scratchpad bytes per element of one matmul input tile: the bf16 copies
    (hi, and lo in fp32 mode) plus the fp32 staging tile when split on chip."""
    copies = 2 if passes == 3 else 1
    return 2 * copies + (4 if split else 0)


def gemm_estimate(hw: HardwareConfig, M: int, N: int, K: int, tm: int, tn: int, tk: int,
                  spec: GemmSpec) -> Estimate:
    if len(spec.interleaves) > 1:  # flash attention: the fastest interleave that fits (ties: more heads)
        base = spec.footprint
        ests = [gemm_estimate(hw, M, N, K, tm, tn, tk, replace(
            spec, interleave=u, interleaves=(u,),
            footprint=None if base is None else lambda a, b, c, u=u: (u * base(a, b, c)[0], u * base(a, b, c)[1])))
            for u in spec.interleaves]
        fitting = [e for e in ests if fits(hw, e)] or ests[:1]
        return min(fitting, key=lambda e: (e.cycles, -e.interleave))
    R, C = hw.matrix.rows, hw.matrix.cols
    L = hw.vector.lanes
    cost = hw.vector.cost
    nm, nn, nk = -(-M // tm), -(-N // tn), -(-K // tk)
    out_tiles = spec.batch * nm * nn
    steps = out_tiles * nk * spec.taps
    # memory footprint (double-buffered inputs and accumulator tile)
    spad = 2 * (tm * tk * spad_split_bytes(spec.lhs_split, spec.passes)
                + tk * tn * spad_split_bytes(spec.rhs_split, spec.passes))
    spad += (spec.epi_tiles + 1) * tm * tn * 4 + 2 * max(tm, tn) * 4  # epilogue operands, bias row/col
    acc = 2 * tm * tn * 4
    if spec.footprint is not None:
        spad, acc = spec.footprint(tm, tn, tk)
    # matrix unit
    mm_per_step = -(-tk // R) * -(-tn // C) * spec.passes
    esz = 1 if spec.matmul_dtype == "int8" else 2
    wload = -(-min(tk, R) * min(tn, C) * esz // hw.matrix.weight_load_bytes_per_cycle)
    stream = hw.matrix.matmul_cycles(tm, spec.matmul_dtype)
    mm_step = mm_per_step * max(stream, wload)
    matrix = steps * mm_step
    mm_pv = 0
    if spec.flash_dv:  # P [TM, TN] . V [TN, Dv] after the softmax of each score tile
        wload_pv = -(-min(tn, R) * min(spec.flash_dv, C) * esz // hw.matrix.weight_load_bytes_per_cycle)
        mm_pv = -(-tn // R) * -(-spec.flash_dv // C) * spec.passes * max(stream, wload_pv)
        matrix += out_tiles * mm_pv
    # DRAM traffic: lhs once per n tile, rhs once per m tile
    lhs_row = tk * spec.lhs_bytes if spec.lhs_row_contig else spec.lhs_bytes
    lhs_rows = tm if spec.lhs_row_contig else tm * tk
    rhs_row = tn * spec.rhs_bytes
    lhs_b = 0 if spec.lhs_on_chip else steps * lhs_rows * _burst_bytes(hw, lhs_row)
    rhs_b = (spec.batch * nn * nk if spec.resident_weights else steps) * tk * _burst_bytes(hw, rhs_row)
    out_b = out_tiles * (1 + spec.epi_tiles) * tm * _burst_bytes(hw, tn * spec.out_bytes)
    dmas = steps * 2 + out_tiles * (1 + spec.epi_tiles)
    memory = (lhs_b + rhs_b + out_b) // hw.dram.bytes_per_cycle + dmas * hw.dma.setup_cycles // hw.dma.channels
    # vector unit: fp32 -> bf16 hi (/lo) splits, accumulator fill, epilogue
    split = cost["copy"] + (cost["sub"] if spec.passes == 3 else 0)  # (Emitter.round_parts)
    vec_step = (-(-tm * tk // L) * split if spec.lhs_split else 0) + (-(-tk * tn // L) * split if spec.rhs_split else 0)
    if spec.lhs_on_chip and spec.passes == 3:  # fp32 rows copied into the staging tile, then split
        vec_step += -(-tm * tk // L) * cost["copy"]
    acc_fill = -(-tm * tn // L) * cost["mul"]  # the accumulator tile is zeroed first
    epi = -(-tm * tn // L) * spec.epi_cost  # bias and epilogue ops (the acc fill is counted above)
    if spec.flash_dv and spec.flash_rescale:
        epi += -(-tm * spec.flash_dv // L) * cost["mul"]
    vector = steps * vec_step + out_tiles * (acc_fill + epi)
    resident_ops = spec.resident_operands
    if resident_ops:  # Q, K and V read once, before the loops
        lhs_b = spec.batch * M * _burst_bytes(hw, K * 4)
        rhs_b = spec.batch * N * (_burst_bytes(hw, K * 4) + _burst_bytes(hw, spec.flash_dv * 4))
        memory = (lhs_b + rhs_b + out_b) // hw.dram.bytes_per_cycle
    cycles = _gemm_schedule(hw, spec, out_tiles, nk * spec.taps,
                            0 if resident_ops or spec.lhs_on_chip else lhs_rows * _burst_bytes(hw, lhs_row),
                            0 if spec.resident_weights or resident_ops else tk * _burst_bytes(hw, rhs_row),
                            tm * _burst_bytes(hw, tn * spec.out_bytes),
                            tn * 4, mm_per_step, max(stream, wload), vec_step, acc_fill, epi,
                            ragged=bool(M % tm or N % tn), mm_pv=mm_pv,
                            pv_bytes=0 if resident_ops else tn * _burst_bytes(hw, spec.flash_dv * 4))
    if spec.resident_lhs:
        cycles = _resident_lhs_schedule(hw, spec, nm, out_tiles, tm, tn, K, mm_per_step * max(stream, wload), epi)
        memory = ((0 if spec.lhs_on_chip else spec.batch * nm * tm * _burst_bytes(hw, K * spec.lhs_bytes)) + out_b
                  + (0 if spec.resident_weights else out_tiles * K * _burst_bytes(hw, rhs_row))) // hw.dram.bytes_per_cycle
        vector = spec.batch * nm * -(-tm * K // L) * split + out_tiles * epi
    # the DRAM latencies no overlap hides: the first operand load's (none when the activations
    # are on chip and the weights resident) and the last store's
    first_load = not (spec.lhs_on_chip and (spec.resident_weights or spec.resident_operands))
    cycles = max(cycles, max(matrix, memory, vector) + (1 + first_load) * hw.dram.latency_cycles)
    visited = (triangular_score_tiles(M, N, tm, tn, spec.causal_offset)
               if spec.flash_dv and spec.causal_offset is not None else None)
    if visited is not None:  # fully masked score tiles are skipped: the steps scale with the visits
        # (per query tile a fence after its key loop: one softmax chain not overlapped)
        share = visited / (nm * nn)
        fence = spec.batch * (nm - 1) * (spec.softmax_ops * hw.vector.latency + mm_pv + hw.matrix.fill_drain_cycles) \
            // spec.interleave  # (the interleaved heads' fences overlap)
        matrix, memory, vector = int(matrix * share), int(memory * share), int(vector * share)
        cycles = int(cycles * share) + fence
    if not spec.schedule:
        fill = hw.matrix.fill_drain_cycles
        cycles = max(matrix + out_tiles * fill, memory, steps * vec_step + out_tiles * -(-tm * tn // L)
                     * (1 + spec.epi_cost)) + out_tiles * (fill + hw.vector.latency) + hw.dram.latency_cycles
    # loop nest of the lowering: [batch] m, n, k tiles, then k and n array tiles per step
    # (single-iteration loops are inlined by tile-to-npu); conv adds its tap loops
    loops = sum(x > 1 for x in (spec.batch, nm, nn, nk, -(-tk // R), -(-tn // C)))
    if spec.taps > 1:
        loops += 2
    return Estimate((tm, tn, tk), cycles, matrix, memory, vector, spad, acc, loops, spec.interleave)


def triangular_score_tiles(Sq: int, Skv: int, tq: int, tkv: int, offset: int | None) -> int | None:
    """Causal attention tiled TQ x TKV: the (query tile, key tile) pairs of one head that the
    triangular loop nest visits (key tiles 0 .. the one holding the query tile's last visible
    key), or None when the tiling keeps the dense loop (every pair, masked by the band). The
    triangular nest needs whole query tiles, key tiles that divide the query tile and the
    offset, and, with more than one query tile, TQ / TKV even: the key loop's trip count grows
    by TQ / TKV per query tile, which must keep its double-buffer halves (tile-to-npu's
    affine-bound loops, docs/codegen.md)."""
    if offset is None or offset < 0 or Sq % tq or tq % tkv or offset % tkv or tkv > Skv:
        return None
    q_tiles = Sq // tq
    if q_tiles > 1 and (tq // tkv) % 2:
        return None
    per_step = tq // tkv
    first = (tq + offset) // tkv
    return q_tiles * first + per_step * q_tiles * (q_tiles - 1) // 2


def _gemm_schedule(hw: HardwareConfig, spec: GemmSpec, out_tiles: int, steps: int, x_bytes: int, w_bytes: int,
                   out_bytes: int, bias_bytes: int, mm_count: int, mm_each: int, vec_step: int, acc_fill: int,
                   epi: int, ragged: bool = False, mm_pv: int = 0, pv_bytes: int = 0) -> int:
    """Cycles of the lowered GEMM nest as the simulator runs it: per output tile `steps` k steps
    (load the activation tile and the weight tile, split the activations to bf16 on the vector
    unit, matmuls), then the bias row, the epilogue and the store of the tile.

    * k step period: the DRAM bytes, the matmuls, the split, or the load chain: the front end
      waits for the activation tile (its split is the buffer's first consumer) before it
      dispatches a pre-packed weight tile's DMA, so with double buffers two steps cover an
      activation round trip (sharing the bandwidth with the weight tile), the split and a
      weight round trip. A runtime right operand is split too and loads beside the activations.
    * one output tile's chain: the first loads, its k steps, the last matmul and the array's
      fill and drain (or the round trip of the bias row and the epilogue's operand tiles,
      dispatched after the last weight load),
      the epilogue on the vector unit, the store's round trip.
    * flash attention: per score tile the scores, the online softmax's dependent vector chain
      (one vector latency per instruction) and the P.V product in series.
    * output tile period: its k steps and the part of the next tile's first load chain the matrix
      queue does not hide, or half the accumulator's round trip (the double-buffered
      accumulator tile i+2 is zeroed once tile i's store completed)."""
    vlat, fill, bw = hw.vector.latency, hw.matrix.fill_drain_cycles, hw.dram.bytes_per_cycle
    mm_step = mm_count * mm_each
    # (no bytes: the step's operands are on chip already, no DMA)
    rt_xw = dma_round_trip(hw, x_bytes + w_bytes) if x_bytes + w_bytes else 0
    split = vec_step + vlat
    if spec.rhs_split:  # a runtime right operand: both operands DMAed together, both split
        head = rt_xw + split
        chain_step = head / 2
    elif spec.resident_weights:  # the k steps load the activations alone, pipelined from 3 steps
        head = rt_xw + split
        chain_step = rt_xw + split if steps >= 3 and not ragged else rt_xw + split + mm_step + fill
    else:  # (no weight tile to load: operands resident, nothing in flight before the matmuls)
        head = rt_xw + split + (dma_round_trip(hw, w_bytes) if w_bytes else 0)
        if steps >= 3 and not ragged:  # software-pipelined k loop: the next activation tile is in flight
            chain_step = dma_round_trip(hw, x_bytes) + split
        else:  # steps dispatched in program order (short k loops; and with remainder tiles, whose
            # second copy of the loop body leaves tile-to-npu too few semaphores to pipeline it, as
            # measured): the next step's loads wait for this step's matmuls
            chain_step = rt_xw + split + mm_step + fill
    # interleaved flash heads: `interleave` heads' step chains overlap, each on its own buffers
    lanes = spec.interleave if spec.flash_dv else 1
    step = max((x_bytes + w_bytes) / bw, mm_step, vec_step, chain_step / lanes)
    rt_store = dma_round_trip(hw, out_bytes)
    rt_bias = dma_round_trip(hw, (bias_bytes if spec.bias else 0) + spec.epi_tiles * out_bytes) \
        if spec.bias or spec.epi_tiles else 0
    tail = max(mm_step + fill, rt_bias) + epi + vlat + rt_store
    chain = head + (steps - 1) * step + tail
    acc_round = acc_fill + vlat + steps * max(mm_step, vec_step) + fill + max(0, rt_bias - mm_step - fill) \
        + epi + vlat + rt_store
    # the next tile's first loads are dispatched once the front end has queued this tile's last
    # matmuls: their round trips show beyond what the matrix queue still holds
    restart = max(0, head - hw.matrix.queue_depth // 2 * mm_each) if not spec.rhs_split else 0
    period = max(steps * step + restart, acc_round / (2 * lanes))
    if spec.flash_dv:  # the running max and sum chain each step to the last: scores, softmax, P.V in series
        # (the V tile's DMA is dispatched behind the softmax's instructions: its round trip
        # overlaps the softmax only)
        flash = (mm_step + fill + max(epi + spec.softmax_ops * vlat, dma_round_trip(hw, pv_bytes) if pv_bytes else 0)
                 + mm_pv + fill)
        # interleaved heads: the latencies of `interleave` score tiles' chains overlap, their
        # vector work (softmax, splits) runs in series on the one vector unit, the split of the
        # next key tile beside this tile's products (one head at a time, as on edge, the chain
        # and the other split in series: MiniLM at sequence 256 on edge, 627 K predicted
        # against 852 K simulated when the splits overlapped the chain too)
        work = epi + 2 * vec_step
        period = max(period, work + (flash - epi - vec_step) / spec.interleave, mm_step + mm_pv)
        chain += flash - (mm_step + fill)
    if out_tiles < 3:  # a 2-trip tile loop does not rotate its buffers: the tiles run in series
        period = max(period, chain)
    return int(chain + (out_tiles - 1) * period)


def _resident_lhs_schedule(hw: HardwareConfig, spec: GemmSpec, nm: int, out_tiles: int, tm: int, tn: int,
                           K: int, mm_tile: int, epi: int) -> int:
    """Cycles of gemm.py's nest with resident activations (`GemmSpec.resident_lhs`): per m tile
    its block's load and split (in series: the m loop is short), then one n tile per period,
    the slowest of its whole-K weight tile's and output's DRAM bytes, its matmuls and its
    epilogue (the weight tiles and accumulators double-buffered: no fill waits behind the
    previous epilogue), plus the first weight tile's round trip and the last tile's drain,
    epilogue and store."""
    bw, vlat, fill = hw.dram.bytes_per_cycle, hw.vector.latency, hw.matrix.fill_drain_cycles
    split = hw.vector.cost["copy"] + (hw.vector.cost["sub"] if spec.passes == 3 else 0)
    x_bytes = 0 if spec.lhs_on_chip else tm * _burst_bytes(hw, K * spec.lhs_bytes)
    if spec.lhs_on_chip and spec.passes == 3:  # copied out of the kept tile, then split
        split += hw.vector.cost["copy"]
    x_load = (dma_round_trip(hw, x_bytes) if x_bytes else 0) + -(-tm * K // hw.vector.lanes) * split + vlat
    w_bytes = 0 if spec.resident_weights else K * _burst_bytes(hw, tn * spec.rhs_bytes)
    out_bytes = tm * _burst_bytes(hw, tn * spec.out_bytes)
    period = max((w_bytes + out_bytes) / bw, mm_tile, epi + vlat)
    head = dma_round_trip(hw, w_bytes) if w_bytes else 0
    tail = fill + epi + vlat + dma_round_trip(hw, out_bytes)
    return int(spec.batch * nm * x_load + head + out_tiles * period + tail)


def fits(hw: HardwareConfig, e: Estimate) -> bool:
    return e.spad <= hw.memory.scratchpad_bytes and e.acc <= hw.memory.accumulator_bytes


def even_row_splits(OH: int) -> list[int]:
    """Tiles of output rows that split OH evenly into a power-of-two number of tiles and are
    not powers of two themselves (14 rows: 7; 56: 28, 14 and 7): no remainder tile, which a
    power-of-two tile leaves (14 = 8 + 6), and a tile half as large as the whole map. The conv
    ranking takes them only as `ConvTiles.single_acc` tiles (two of them do not fit the
    accumulator, one does: ResNet-50's 1x1 1024->256 at 14x14 on edge, 128 output channels
    of 7 rows, 261 K -> 228 K cycles); as double-buffered tiles the model ranked some better
    than they ran (server, 1x1/2 512->1024 at 28x28 in tiles of 7 rows: 11.0 K predicted, 15.5
    K simulated, against 10.0 K in 14-row tiles), but where `staged_rows_apart` holds (the
    server 1x1 64->64 at 56x56 in 14-row tiles: 3,822 predicted, 3,936 simulated, against 4,132
    in 8-row tiles)."""
    out = []
    parts = 2
    while OH % parts == 0 and OH // parts >= 2:
        if OH // parts & (OH // parts - 1):
            out.append(OH // parts)
        parts *= 2
    return out


def pow2_candidates(extent: int, unit: int, limit: int | None = None) -> list[int]:
    """unit * 2^i below the extent, plus the extent itself when it is smaller than a
    larger candidate (a single tile covering the whole dimension)."""
    out: list[int] = []
    t = unit
    while True:
        v = min(t, extent)
        if limit is not None and v > limit:
            break
        if v not in out:
            out.append(v)
        if t >= extent:
            break
        t *= 2
    return out or [min(extent, unit)]


def choose_gemm(hw: HardwareConfig, M: int, N: int, K: int, spec: GemmSpec,
                tm_cands: list[int] | None = None, tn_cands: list[int] | None = None,
                tk_cands: list[int] | None = None,
                override: tuple[int, int, int] | None = None) -> Choice:
    R, C = hw.matrix.rows, hw.matrix.cols
    tm_cands = tm_cands or pow2_candidates(M, R)
    tn_cands = tn_cands or pow2_candidates(N, C)
    tk_cands = tk_cands or pow2_candidates(K, R)
    if override is not None:
        pick_index([])  # (an overridden call keeps its number for the autotuner)
        e = gemm_estimate(hw, M, N, K, *override, spec)
        return Choice(override, e, [e], overridden=True)
    cands: list[Estimate] = []
    rejected = 0
    for tm in tm_cands:
        for tn in tn_cands:
            for tk in tk_cands:
                e = gemm_estimate(hw, M, N, K, tm, tn, tk, spec)
                if fits(hw, e):
                    cands.append(e)
                else:
                    rejected += 1
    if not cands:  # nothing fits: the smallest tile, reported as is
        pick_index([])
        e = gemm_estimate(hw, M, N, K, min(tm_cands), min(tn_cands), min(tk_cands), spec)
        return Choice(e.tiles, e, [e], rejected=rejected)
    # nests that fit the hardware loop depth first (deeper ones do not lower), then fewest
    # cycles; ties -> the smaller footprint
    depth = hw.scalar.loop_depth
    cands.sort(key=lambda e: (e.loops > depth, e.cycles, e.spad + e.acc))
    cands.insert(0, cands.pop(pick_index([e.tiles for e in cands])))  # (autotuning's pick, if any)
    return Choice(cands[0].tiles, cands[0], cands, rejected=rejected)


def stream_estimate(hw: HardwareConfig, read_bytes: float, write_bytes: float, vector_cycles: float = 0,
                    instructions: float = 0) -> int:
    """Cycles of a helper nest that streams data through the scratchpad (planes of conv
    inputs, copies): DRAM bytes over the bandwidth, the vector unit or the front end, whichever
    is slowest, plus one load and one store latency."""
    dram = (read_bytes + write_bytes) / hw.dram.bytes_per_cycle
    return int(max(dram, vector_cycles, instructions)) + 2 * (hw.dram.latency_cycles + hw.dma.setup_cycles)


# -- convolution (passes/graph_to_tile/conv.py) ----------------------------------------------------


@dataclass(frozen=True)
class ConvSpec:
    """A conv kernel as the cost model sees it: per group an implicit GEMM of Og output
    channels x OH.Wq padded-width pixels x Cg.taps over windows built on chip from the input
    rows (planes.WindowLoader): `row_phases` DMAs of input rows and `planes` windows per load."""

    batch: int
    groups: int
    Og: int
    Cg: int
    taps: int
    OH: int
    OW: int
    Wq: int
    H: int
    W: int
    stride: int
    halo_rows: int  # window plane rows beyond the tile's output rows
    # padded or strided (planes.Planes.preparable): bf16 planes can be prepared in DRAM by a
    # helper nest (a strided input's: the phases the taps read); else windows built on chip
    # (which such an input can also have: ConvTiles.on_chip_padding)
    prepared: bool
    planes: int
    row_phases: int
    copies: int
    passes: int
    epi_cost: int  # vector cost units per output element (bias and epilogue ops)
    epi_tiles: int  # full-size operand tiles the epilogue loads (residual, ...)
    # the float kernel's bias (one of `epi_cost`'s passes), which the "channels" orientation's
    # transposition back adds instead (graph_to_tile/conv.py `bias_in_transpose`): no pass of its own there
    bias_in_transpose: bool = False
    # ... and which an im2col operand with spare depth adds in its matmuls (`im2col_bias_rows`)
    bias_in_im2col: bool = False
    # a relu computed by the add before it (`add_relu`, graph_to_tile/conv.py `fuses_relu`; not
    # into padded-width tiles): "bias", a relu that is the whole epilogue, by the bias's own
    # pass; "sum", the relu of a residual add, where a vector op wrote the tile it adds to (the
    # bias's own pass or the transposition); "" none
    relu_fused: str = ""
    in_bytes: int = 4  # bytes per input element in DRAM
    # per stride-phase plane, the trips of its two tap loops (conv.py `over_taps`): 3x3 -> ((3, 3),)
    tap_nests: tuple[tuple[int, int], ...] = ()
    operand_bytes: int = 2  # bytes per window / weight element (bf16; int8: 1)
    out_bytes: int = 4  # bytes per stored output element
    compact_store: bool = False  # the output tile compacted (padded-width columns dropped) before its store
    matmul_dtype: str = "bf16"  # the array's operand type (its MAC rate)
    # channel-major windows are the input rows themselves, DMA'd in place with no copy
    # (graph_to_tile.windows.loads_in_place: an unpadded stride-1 input held in the operand type)
    in_place_windows: bool = False
    # the input (one image) is the kernel before's whole output, kept on chip
    # (graph_to_tile.conv_store.store_output_tile): windows built on chip copy its rows
    # on the vector unit instead of loading them (windows.WindowLoader's `kept`), and a 1x1
    # conv's one channel-major window is that tile itself (conv.py `ConvKernel.window_on_chip`)
    input_on_chip: bool = False
    # (orientation, TO, TOH, TC, outer, im2col, prepared, whole weights, single accumulator) ->
    # (scratchpad, accumulator) bytes of every local buffer; part of the spec's equality
    # (graph_to_tile.conv.ConvFootprint is a value): equal specs rank alike
    footprint: Callable[[str, int, int, int, str, bool, bool, bool, bool], tuple[int, int]] | None = None
    # the prepared planes' helper nest (planes.prepare_estimate): (channel-major, pixel-major) cycles
    prepare_cycles: tuple[int, int] = (0, 0)
    # TOH -> row tiles of windows padded on chip that are emitted on their own (windows.row_tile_plan;
    # graph_to_tile.conv.EdgeRowTiles, a value like the footprint)
    edge_row_tiles: Callable[[int], int] | None = None


@dataclass(frozen=True)
class ConvTiles:
    """orientation "pixels" (window stationary, weights stream: m = TO) or "channels" (weights
    stationary, pixels stream: m = TOH.Wq); TO output channels x TOH output rows per tile, TC
    input channels per step; `outer`: the loop outside ("o": output-channel tiles, "rows")."""

    orientation: str
    TO: int
    TOH: int
    TC: int
    outer: str = "o"
    im2col: bool = False  # the taps folded into the depth (copied into one operand per step)
    # a padded or strided input: its windows built on chip from the input rows (the padding
    # filled there, the stride phases split there) instead of loaded from stride-phase planes a
    # helper nest prepares in DRAM first
    on_chip_padding: bool = False
    # output-channel tiles outside and several channel steps: the tile's whole weight block
    # [TO, taps.Cg] loaded once per output tile (single-buffered), each step reading its columns,
    # instead of a step's block per row tile and step
    whole_weights: bool = False
    # one accumulator tile for every output tile (not two in turn): a tile's first matmul waits
    # until the tile before's epilogue has read its accumulator, but a tile twice as large fits
    # (`fitting_buffers`; graph_to_tile/conv.py `conv_footprint_counts`)
    single_acc: bool = False

    def text(self) -> str:
        return (f"{self.orientation} TO={self.TO} TOH={self.TOH} TC={self.TC} outer={self.outer}"
                + (" im2col" if self.im2col else "") + (" on-chip-padding" if self.on_chip_padding else "")
                + (" whole-weights" if self.whole_weights else "") + (" single-acc" if self.single_acc else ""))


@dataclass
class ConvEstimate:
    tiles: ConvTiles
    cycles: int
    matrix: int
    memory: int
    vector: int
    frontend: int
    spad: int
    acc: int
    feasible: bool = True  # the loop nest lowers (hardware loop depth)
    instructions: int = 0  # static instructions (code size, tiling_code.code_size)
    unrolled: bool = False  # the nest is deeper than scalar.loop_depth: tile-to-npu unrolls loops
    helper: int = 0  # of `cycles`, the prepared planes' helper nest (predicted with that nest)

    @property
    def bound(self) -> str:
        terms = {"compute": self.matrix, "memory": self.memory, "vector": self.vector, "front end": self.frontend}
        return max(terms, key=lambda k: terms[k])


@dataclass
class ConvChoice:
    tiles: ConvTiles
    best: ConvEstimate
    candidates: list[ConvEstimate] = field(default_factory=list)
    overridden: bool = False
    rejected: int = 0


def _counts(total: int, tile: int) -> list[tuple[int, int]]:
    """[(extent, how many)] of `tiles(total, tile)`: the full tiles and the remainder."""
    tile = max(1, min(tile, total))
    full, rem = divmod(total, tile)
    return [(tile, full)] + ([(rem, 1)] if rem else [])


def _loop_trips(total: int, tile: int) -> int:
    """Trips of the hardware loop `tiles(total, tile)` emits (0: no loop)."""
    full = total // max(1, min(tile, total))
    return full if full >= 2 else 0


def _nest_ok(hw: HardwareConfig, chain: list[int]) -> bool:
    """A nest of loops with these trip counts (outermost first; < 2 = no loop) lowers: loops
    deeper than scalar.loop_depth are unrolled by tile-to-npu, which allows 16 trips."""
    depth = 0
    for trips in chain:
        if trips >= 2:
            depth += 1
            if depth > hw.scalar.loop_depth and trips > 16:
                return False
    return True


# cycles per iteration of a transpose loop (one `copy` of a row or column and two address
# increments, dispatched one per cycle by the front end), when the copy itself is shorter
TRANSPOSE_STEP = 3


# the most chunks an im2col operand is built in (deeper ones are built whole). The edge stem's
# 147-deep operand is 10 chunks: in the "pixels" orientation chunked 0.95 M -> 0.83 M cycles
# inside ResNet-50 (issue 14, sixth session); in the "channels" orientation, which the stem took
# before its pixel-major planes' bursts were counted, the 10 chunks had lost 3.5 %. A chunk's tap
# copies are straight-line code, twice over in the fp32 emulation (hi and lo): there 8 chunks
# at most (10 grew fp32 ResNet-50's edge program by 1.3 k instructions, past 50 k).
MAX_IM2COL_CHUNKS = 10
MAX_IM2COL_CHUNKS_SPLIT = 8


#: rows of ones an im2col operand may carry for its bias (`im2col_bias_rows`): the bias in three
#: bf16 parts (each the rounding of what the parts before leave), exact to fp32's 24 bits
IM2COL_BIAS_ROWS = 3


def im2col_bias_rows(has_bias: bool, taps: int, tc: int, Cg: int, rows: int, orientation: str) -> int:
    """Rows of ones appended to an im2col operand's depth, against weight columns holding the
    bias parts, so the matmuls add the bias and the epilogue has no bias pass (graph_to_tile/
    conv.py `ConvKernel.bias_rows`): the whole bias pass over the output tile had run after the
    last matmul (the server stem: 1.6 K cycles on the vector unit). Where they fit in the depth's
    spare rows (no extra chunk, so no extra matmuls), in the "pixels" orientation (the operand's
    rows are its depth), with one channel step and a float bias (`has_bias`), and where the last
    chunk of a chunked operand (`conv.im2col_chunks`: the depth's last `rows` rows) begins a tap
    of its own, whose copies fill the bias rows (`tc` + the bias rows at most `rows`): a 2x3 conv
    of 15 channels on edge's 16 rows put the bias rows in a chunk whose only tap had begun in
    the chunk before (an assertion of graph-to-tile; fuzz seed 278)."""
    spare = -(taps * tc) % rows
    own_tap = taps * tc + IM2COL_BIAS_ROWS <= rows or tc + IM2COL_BIAS_ROWS <= rows
    return IM2COL_BIAS_ROWS if (has_bias and orientation == "pixels" and tc >= Cg
                                and spare >= IM2COL_BIAS_ROWS and own_tap) else 0


def column_groups(width: int, block: int, groups: int) -> list[tuple[int, int]]:
    """(start, width) of at most `groups` consecutive column groups covering `width`, each a
    whole number of `block`-wide blocks but the last (conv.py `chunked_im2col_products`)."""
    blocks = -(-width // block)
    per = -(-blocks // max(1, min(groups, blocks)))
    return [(c0, min(per * block, width - c0)) for c0 in range(0, width, per * block)]


def im2col_copy_groups(hw: HardwareConfig, width: int, taps: int, copies: int) -> list[tuple[int, int]]:
    """The column groups a chunked im2col in the "pixels" orientation copies and multiplies
    each chunk in (conv.py `chunked_im2col_products`), `taps` the most a chunk holds, `copies`
    per tap (2: fp32's hi and lo), or [] (whole chunks): as many groups of array-wide column
    blocks as the vector queue holds a chunk's copies, where that makes two or more. A block
    multiplies only its own columns, so the array starts after the first group's copies and a
    later chunk's block waits only for its own columns (ResNet-50 server's 3x3 64->64 at 56x56:
    13,060 -> 12,472 cycles; 12,378 with the first group ramped up)."""
    groups = column_groups(width, hw.matrix.cols, hw.vector.queue_depth // max(1, taps * copies))
    if len(groups) <= 1:
        return []
    # the first group ramped up (1, 2, 4, ... blocks): the array starts after one block's copies,
    # and the next group's (twice the blocks) are made while it works through this one (a
    # block's copies take half its matmuls' time in ResNet-50's 3x3 64->64: 2 taps of 64
    # channels, 32 cycles, against 64 rows of weights streamed; ResNet-50 server 356,668 ->
    # 356,386 cycles over its three)
    first_c0, first_width = groups[0]
    ramp, c0, blocks = [], first_c0, 1
    while c0 + blocks * hw.matrix.cols < first_c0 + first_width:
        ramp.append((c0, blocks * hw.matrix.cols))
        c0 += blocks * hw.matrix.cols
        blocks *= 2
    ramp.append((c0, first_c0 + first_width - c0))
    return ramp + groups[1:]


def chunked_im2col(taps: int, tc: int, rows: int, copies: int = 1) -> bool:
    """Is an im2col operand of taps.tc rows built and multiplied chunk by chunk of `rows` (the
    array's depth; graph_to_tile/conv.py `chunked_im2col_products`)? When it is deeper than the
    array and has at most MAX_IM2COL_CHUNKS chunks (MAX_IM2COL_CHUNKS_SPLIT with `copies` = 2,
    hi and lo; each chunk is a loop nest of its own)."""
    limit = MAX_IM2COL_CHUNKS if copies == 1 else MAX_IM2COL_CHUNKS_SPLIT
    return rows < taps * tc <= limit * rows


def row_split_weights(T: ConvTiles, planes: int, kernel_rows: int, Cg: int) -> bool:
    """Are the weight blocks of conv tiles T one buffer per kernel row, each DMA'd on its own,
    with the taps' kernel-row loop unrolled (graph_to_tile/conv.py `ConvKernel.row_split_weights`)?
    Stride-1 tap convs without im2col and with one channel step (with several, each step's
    block is loaded ahead of its matmuls anyway, and the unrolled rows inside the step loop
    grew ResNet-50's fp32 edge program past 50 k instructions). (One buffer with a DMA per row
    raced when the block rotated in a software-pipelined loop: the second DMA counted as the
    first one's consumer.)"""
    return not T.im2col and planes == 1 and kernel_rows > 1 and T.TC >= Cg


def conv_buffers(s: ConvSpec, T: ConvTiles) -> tuple[int, int]:
    """The (scratchpad, accumulator) bytes of tiles T (ConvEstimate.spad / .acc): the spec's
    footprint, or without one a double-buffered accumulator tile."""
    TO, TOH, TC = min(T.TO, s.Og), min(T.TOH, s.OH), min(T.TC, s.Cg)
    if s.footprint is not None:
        return s.footprint(T.orientation, TO, TOH, TC, T.outer, T.im2col, s.prepared and not T.on_chip_padding,
                           T.whole_weights, T.single_acc)
    if T.single_acc:
        return 0, TO * TOH * s.Wq * 4
    return 0, 2 * TO * TOH * s.Wq * 4


def conv_estimate(hw: HardwareConfig, s: ConvSpec, T: ConvTiles,
                  buffers: tuple[int, int] | None = None) -> ConvEstimate:
    """The cost model's estimate of tiles T; `buffers`: conv_buffers(s, T) if known."""
    if buffers is None:
        buffers = conv_buffers(s, T)
    # a padded input's planes: prepared in DRAM by the helper nest (its cycles counted here), or
    # its windows built on chip like an unpadded input's
    helper = edge_tiles = 0
    if s.prepared and T.on_chip_padding:
        s = replace(s, prepared=False)
        # the row tiles whose windows reach into the padding are emitted on their own
        edge_tiles = (s.edge_row_tiles(min(T.TOH, s.OH)) if s.edge_row_tiles is not None else 0) \
            * s.batch * s.groups * -(-s.Og // min(T.TO, s.Og))
    elif s.prepared:
        helper = s.prepare_cycles[1 if T.orientation == "channels" else 0]
    R, Ccols = hw.matrix.rows, hw.matrix.cols
    L = hw.vector.lanes
    vcost = hw.vector.cost
    bw, burst = hw.dram.bytes_per_cycle, hw.dram.burst_bytes
    wl_rate = hw.matrix.weight_load_bytes_per_cycle
    TO, TOH, TC = min(T.TO, s.Og), min(T.TOH, s.OH), min(T.TC, s.Cg)
    channels = T.orientation == "channels"
    nO, nR, nC = -(-s.Og // TO), -(-s.OH // TOH), -(-s.Cg // TC)
    single = nC == 1
    images = s.batch * s.groups
    o_counts, r_counts, c_counts = _counts(s.Og, TO), _counts(s.OH, TOH), _counts(s.Cg, TC)

    def bursts(nbytes: float) -> int:
        return -(-int(nbytes) // burst) * burst

    def wload(k: int, n: int) -> int:  # + 1: the next mx.loadw starts after the matmul does
        return -(-(k * n * s.operand_bytes) // wl_rate) + 1

    def stream(m: int) -> int:  # an mx.matmul of m rows at the operand type's MAC rate
        return hw.matrix.matmul_cycles(m, s.matmul_dtype)

    # matrix: per (o tile, row tile, channel step)
    matrix = 0
    matmuls = 0
    for to, no in o_counts:
        for toh, nr in r_counts:
            tq = toh * s.Wq
            for tc, nc in c_counts:
                step = count = 0
                depth, products = (tc * s.taps, 1) if T.im2col else (tc, s.taps)
                for k, nk in _counts(depth, R):
                    for n, nn in _counts(to if channels else tq, Ccols):
                        step += nk * nn * max(stream(tq if channels else to), wload(k, n))
                        count += nk * nn
                matrix += no * nr * nc * step * products * s.passes
                matmuls += no * nr * nc * count * products * s.passes
    matrix *= images
    matmuls *= images
    out_tiles = images * nO * nR
    steps = out_tiles * nC
    # DRAM traffic: window rows (f32), weight blocks, outputs and epilogue operands
    window_loads = images * nR * (1 if (T.outer == "rows" and single) else nO * nC)
    whole = T.whole_weights and T.outer == "o" and not single
    weight_loads = images * nO * (1 if (T.outer == "o" and (single or whole)) else nR * nC)
    avg_tc, avg_to, avg_toh = s.Cg / nC, s.Og / nO, s.OH / nR
    rq = avg_toh + s.halo_rows
    # windows built on chip from the kept input: its rows copied on chip (`ConvSpec.input_on_chip`,
    # set only where they can be: one image, a width the column stride divides,
    # windows.copies_kept_rows)
    kept = s.input_on_chip and not s.prepared
    # ... or, as a 1x1 conv's one channel-major window, read in place
    kept_in_place = (kept and single and nR == 1 and s.taps == 1 and s.Wq == s.W and not channels
                     and not T.im2col and s.copies == 1)
    if s.prepared and channels:  # pixel-major planes: a run per pixel, or one when all channels
        window_b = s.planes * s.copies * (bursts(rq * s.Wq * s.Cg * 2) if TC >= s.Cg
                                          else rq * s.Wq * bursts(avg_tc * 2))
    elif s.prepared:
        window_b = s.planes * s.copies * avg_tc * bursts(rq * s.Wq * 2)
    elif kept:
        window_b = 0
    elif s.stride == 1:
        window_b = s.row_phases * avg_tc * bursts(rq * s.W * s.in_bytes)
    else:
        window_b = s.row_phases * avg_tc * rq * bursts(s.W * s.in_bytes)
    w_tc = s.Cg if whole else avg_tc  # the channels of one weight load
    if channels:
        weight_b = s.copies * bursts(s.taps * w_tc * TO * s.operand_bytes)
    else:
        weight_b = s.copies * avg_to * bursts(s.taps * w_tc * s.operand_bytes)
    pitched = s.Wq != s.OW and not s.compact_store
    out_b = avg_to * (avg_toh * bursts(s.OW * s.out_bytes) if pitched else bursts(avg_toh * s.OW * s.out_bytes))
    load_bytes = window_loads * window_b + weight_loads * weight_b + out_tiles * out_b * s.epi_tiles
    store_bytes = out_tiles * out_b
    loads = window_loads * (0 if kept else s.planes * s.copies if s.prepared else s.row_phases) \
        + weight_loads * s.copies + out_tiles * s.epi_tiles
    stores = out_tiles
    lat, setup, chans = hw.dram.latency_cycles, hw.dma.setup_cycles, hw.dma.channels
    memory = int(max((load_bytes + store_bytes) / bw,
                     (loads * (setup + lat) + load_bytes / bw) / chans,
                     (stores * (setup + lat) + store_bytes / bw) / chans))
    # vector unit: building the windows, the epilogue
    nw = -(-s.W // s.stride)
    pixels = rq * nw
    split = vcost["copy"] + (vcost["sub"] if s.copies == 2 else 0)
    per_load = 0.0
    per_load_instrs = 0.0
    if s.prepared:
        pass  # windows straight from the prepared planes
    elif channels:  # transposes, then place (+ round)
        n_t = min(avg_tc, pixels)
        per_load += s.planes * n_t * max(-(-int(max(avg_tc, pixels)) // L) * vcost["copy"], TRANSPOSE_STEP)
        per_load_instrs += s.planes * n_t
    elif s.stride > 1:  # the column phase gather
        per_load += s.planes * -(-int(avg_tc * pixels) // L) * vcost["copy"]
        per_load_instrs += s.planes
    if not s.prepared and not (s.in_place_windows and not channels):
        per_load += s.planes * -(-int(avg_tc * pixels) // L) * split
        per_load_instrs += s.planes * (2 if s.copies == 2 else 1)
    if kept and not kept_in_place:  # the input rows copied from the kept tile (a row per channel)
        per_load += s.row_phases * -(-int(avg_tc * rq * s.W) // L) * vcost["copy"]
        per_load_instrs += s.row_phases
    tq_avg = avg_toh * s.Wq
    window_vector = window_loads * per_load
    window_instrs_run = window_loads * per_load_instrs
    overlap = 0.0  # per step: window vector cycles that run beside the step's matmuls
    if T.im2col:  # per step of every output tile (conv.py `products`) a copy per tap of [tc, pixels]
        tap_copy = s.copies * -(-int(avg_tc * tq_avg) // L) * vcost["copy"]
        window_vector += steps * s.taps * tap_copy
        window_instrs_run += steps * s.taps * s.copies
        if chunked_im2col(s.taps, TC, R, s.copies):  # (conv.im2col_chunks) the matmuls start after the first chunk's taps
            first = min(s.taps, -(-(s.taps * TC % R or R) // TC))
            # ... or its first column group's (`im2col_copy_groups`)
            groups = 1 if channels else max(1, len(im2col_copy_groups(hw, int(tq_avg), -(-R // TC), s.copies)))
            overlap = (s.taps - first / groups) * tap_copy
    per_tile = -(-int(avg_to * tq_avg) // L)
    # the accumulator is zeroed first (mul by 0, add) unless the first product of its one
    # channel step overwrites it (one tap, im2col, or the first tap's: conv.py
    # `ConvKernel.FIRST_TAP_OVERWRITES`)
    fill = 0 if single else 2
    # the "channels" orientation's transposition adds the bias (no pass of its own). Not counted
    # so for strided or one-step convs: there the pass stands in for per-tile costs the schedule
    # under-counts, and dropping it ranked slower tilings first (ResNet-50 server's 3x3/2 and
    # 1x1/2 convs at the 56 -> 28 transition +1.7 K and +4.4 K cycles; edge's 1x1 64->256 at
    # 56x56 in one-step 16-channel tiles 266 K -> 322-570 K each: 21.47 M -> 21.73 M)
    epi_cost = s.epi_cost - (1 if channels and s.bias_in_transpose and s.stride == 1 and not single else 0)
    bias_in_matmuls = T.im2col and im2col_bias_rows(s.bias_in_im2col, s.taps, TC, s.Cg, R, T.orientation)
    if bias_in_matmuls:
        epi_cost -= 1  # (the matmuls add the bias)
    # a bias pass of its own in the epilogue (the float kernel's bias is `bias_in_transpose`)
    bias_pass = s.bias_in_transpose and not channels and not bias_in_matmuls
    if s.Wq == s.OW and ((s.relu_fused == "bias" and bias_pass)
                         or (s.relu_fused == "sum" and (bias_pass or (channels and s.bias_in_transpose)))):
        epi_cost -= 1  # (the add before the relu computes it)
    vector = window_vector + out_tiles * per_tile * (epi_cost + fill)
    vec_instrs = window_instrs_run + out_tiles * (epi_cost + 1 + fill)
    if channels:
        n_t = min(avg_to, tq_avg)
        vector += out_tiles * n_t * max(-(-int(max(avg_to, tq_avg)) // L) * vcost["copy"], TRANSPOSE_STEP)
        vec_instrs += out_tiles * n_t
    # front end: every instruction is dispatched in order, one per cycle
    frontend = int(2 * matmuls + vec_instrs + loads + stores + 3 * (steps + out_tiles))
    # loop nest: n, groups, outer, inner, channel steps, then the inner chains
    row_loop = nR if nR >= 2 else 0
    outer_trips = _loop_trips(s.Og, TO) if T.outer == "o" else row_loop
    inner_trips = row_loop if T.outer == "o" else _loop_trips(s.Og, TO)
    head = [s.batch, s.groups, outer_trips, inner_trips, _loop_trips(s.Cg, TC)]
    tq_full = TOH * s.Wq
    if channels:
        chains = [[_loop_trips(TC - min(TC, R), R), _loop_trips(TO, Ccols)], [min(TO, tq_full)]]
        if not s.prepared:
            chains.append([min(TC, (TOH + s.halo_rows) * nw)])
    else:
        chains = [[_loop_trips(tq_full, Ccols), _loop_trips(TC - min(TC, R), R)]]
    # static code of the nest as tile-to-npu emits it (loops beyond the hardware depth unrolled)
    window_instrs = (s.planes * s.copies if s.prepared else s.row_phases) + (
        0 if s.prepared else s.planes * ((2 if s.copies == 2 else 1) + (1 if s.stride > 1 and not channels else 0)))
    code = code_size(conv_nest(s, T, R, Ccols, window_instrs, int(pixels)), hw.scalar.loop_depth)
    feasible = code.feasible and all(_nest_ok(hw, head + chain) for chain in chains)
    spad, acc = buffers
    overhead = lat + setup + hw.matrix.fill_drain_cycles + hw.vector.latency + out_tiles * hw.vector.latency // 4
    cycles = int(max(matrix, memory, vector, frontend)) + overhead
    ragged = bool(s.Og % TO or s.OH % TOH or s.Cg % TC)
    # the first output tile's step loads (and builds) what the tiles after it share: with one
    # channel step, a row tile's whole window (rows outside) or an output tile's whole weight
    # block (output-channel tiles outside), before its first matmul
    # the weight blocks of a stride-1 tap conv are DMA'd per kernel row (conv.py
    # `row_split_weights`): the first row's matmuls wait for its part only, the rest arrives beside them
    kernel_rows = s.tap_nests[0][0] if s.planes == 1 and s.tap_nests else 1
    late = 0.0
    if row_split_weights(T, s.planes, kernel_rows, s.Cg):
        late = weight_b * (kernel_rows - 1) / kernel_rows * weight_loads / max(1, steps)
    # a tap conv's step loop is software-pipelined too (its loads one step early); a window
    # built on chip from stride-1 rows is built in the step's own body, so it runs beside the
    # step before's matmuls only as far as the front end gets ahead of them: the matmuls the
    # matrix queue holds (with their weight loads). And only where the pipeline runs long: one
    # row tile, or 8+ steps per tile (many row tiles of a few steps each refill it at every
    # tile: the 3x3 64->64 at 56x56 in one-row tiles of 4 steps, 623 K predicted so, 824 K
    # simulated; in fp32 at 28x28 420 K / 513 K)
    lead = hw.matrix.queue_depth // 2 * stream(tq_full if channels else TO)
    windows_beside_matmuls = (T.on_chip_padding and s.stride == 1 and (nR == 1 or nC >= 8)
                              and window_vector / max(1, window_loads) <= lead)
    first_step = None
    if (single or whole) and ((T.outer == "rows" and nO >= 2) or (T.outer == "o" and nR * nC >= 2)):
        first_step = (window_b + weight_b, window_vector / max(1, window_loads))
    cycles = max(cycles, _conv_schedule(hw, out_tiles, nC, load_bytes, store_bytes, matrix, window_vector,
                                        vector - window_vector,
                                        pipelined=steps >= 3 and not ragged and s.groups == 1
                                        and (s.taps == 1 or windows_beside_matmuls),
                                        frontend=frontend, serial_tiles=edge_tiles,
                                        first_step=first_step,
                                        shared=nO if single and T.outer == "rows" else 1,
                                        window_instrs=window_instrs_run, overlap=overlap, late=late,
                                        prepared_ahead=window_prepared_ahead(hw, s, T),
                                        apart=staged_rows_apart(hw, s, T),
                                        single_acc=_tiles_per_iteration(T, nO, nR) if T.single_acc else None))
    if whole:  # each later output tile's block waits for the tile before's last matmul, then its round trip
        cycles += int((images * nO - 1) * dma_round_trip(hw, weight_b))
    return ConvEstimate(T, cycles + helper, int(matrix), memory, int(vector), frontend, spad, acc, feasible,
                        code.instructions, code.unrolled, helper)


def staged_rows_apart(hw: HardwareConfig, s: ConvSpec, T: ConvTiles) -> bool:
    """Whether `_conv_schedule` counts the double buffers' recurrences side by side: the staged
    f32 rows of a prepared-ahead row loop (`window_prepared_ahead`) of one output tile per row
    tile, freed by the copy that builds the window, and its output buffer, freed by the store
    whatever the accumulator's turn. Only where measured: with epilogue operand tiles (a
    residual's loads), several output-channel tiles (each refills the pipeline) or bf16 rows (in
    ResNet-50 on server, the same change predicted the 1x1 256->64 convs 5.6 K against 7.1 K
    simulated, and picked tiles that ran slower for the 64->256) the one chain stays."""
    nO = -(-s.Og // min(T.TO, s.Og))
    return (window_prepared_ahead(hw, s, T) and nO == 1 and not s.epi_tiles and s.in_bytes == 4
            and not s.input_on_chip)


def _tiles_per_iteration(T: ConvTiles, nO: int, nR: int) -> int:
    """Output tiles per iteration of the innermost tile loop of 3 or more trips (a 2-trip
    loop's iterations are emitted one after the other), 0 when there is none."""
    inner, outer = (nR, nO) if T.outer == "o" else (nO, nR)
    return 1 if inner >= 3 else inner if outer >= 3 else 0


def _conv_schedule(hw: HardwareConfig, out_tiles: int, steps: int, load_bytes: float, store_bytes: float,
                   matrix: float, window_vector: float, tile_vector: float, pipelined: bool,
                   frontend: float = 0, serial_tiles: int = 0,
                   first_step: tuple[float, float] | None = None, shared: int = 1,
                   window_instrs: float = 0, overlap: float = 0, late: float = 0,
                   prepared_ahead: bool = False, single_acc: int | None = None, apart: bool = False) -> int:
    """Cycles of the conv nest as the simulator runs it (the GEMM schedule's terms, from the
    totals): per channel step a load round trip (windows and weights), the window building on
    the vector unit, the matmuls; per output tile the array's fill and drain, the epilogue and
    the store's round trip. A software-pipelined step loop overlaps half of a step's chain
    (double buffers); a loop tile-to-npu does not pipeline (fewer than 3 steps, or remainder
    tiles: their second copy of the body, as measured) runs each step's chain in series.
    `serial_tiles` of the output tiles are emitted on their own (single-buffered: the row tiles
    whose on-chip windows reach into the padding) and run their whole chain in series.
    `first_step`: (load bytes, window vector cycles) of the first step when it loads more than
    the average (an operand shared by the tiles after it); `shared`: output tiles per window
    built on chip (the output-channel tiles of a row tile's window with one channel step).
    `overlap`: of a step's window vector cycles, those the step's matmuls need only as they go
    (the im2col chunks after the first): in the chains they run beside the matmuls. `late`: of
    a step's load bytes, those its first matmuls do not wait for (weights DMA'd per kernel row).
    `prepared_ahead`: tile-to-npu builds each tile's window an iteration ahead, so it does not
    queue behind the tile before's epilogue (`window_prepared_ahead`). `single_acc`: the output
    tiles share one accumulator tile, so a tile's matmuls start after the tile before's
    epilogue has read it (`ConvTiles.single_acc`): the output tiles per iteration of the
    hardware loop of 3 or more trips that runs them, 0 when none does (None: double-buffered).
    `apart`: the double buffers' recurrences counted side by side (`staged_rows_apart`)."""
    vlat, fill, bw = hw.vector.latency, hw.matrix.fill_drain_cycles, hw.dram.bytes_per_cycle
    n = max(1, out_tiles * steps)
    ld, vec, mm = load_bytes / n, window_vector / n, matrix / n

    def built_and_multiplied(vector: float, late_bytes: float = 0.0) -> float:  # window building, then the matmuls
        return vector - overlap + max(mm, overlap, late_bytes / bw)

    serial = dma_round_trip(hw, ld) + vlat + built_and_multiplied(vec)
    # double buffers: two steps cover a load's round trip and the buffer's consumer. A window
    # built on the vector unit frees its staged rows once built (the next load but one waits for
    # that, not for the matmuls) and is read by the matmuls from a second pair of buffers: two
    # recurrences side by side, not one chain (server, 1x1 64->64 at 56x56 in 8-row tiles: a
    # step every 360 cycles simulated, 474 in the one chain)
    pair = (max(dma_round_trip(hw, ld) + vlat + vec, vlat + built_and_multiplied(vec))
            if vec and apart else serial)
    fe = frontend / n  # a step's instructions: dispatched one per cycle, after the front end's wait
    step = max(ld / bw, mm, vec, fe, pair / 2 if pipelined else serial + fe)
    if pipelined and window_instrs > hw.vector.queue_depth * n:
        # a step's window building is more vector instructions than the vector queue holds
        # (the transposes of pixel-major windows): the front end waits for those beyond the
        # queue to issue (at least TRANSPOSE_STEP each) and dispatches the next step's loads only then
        beyond = 1 - hw.vector.queue_depth * n / window_instrs
        step = max(step, ld / bw + max(vec * beyond, (window_instrs / n - hw.vector.queue_depth) * TRANSPOSE_STEP))
    epi, store = tile_vector / out_tiles, store_bytes / out_tiles
    tail = fill + epi + vlat + dma_round_trip(hw, store)
    # two output tiles cover the accumulator's turn (the matmuls, the drain, the epilogue that
    # reads it) and the output buffer's (the epilogue writes it once the store of the tile
    # before last has completed): side by side where measured (`apart`, with an epilogue that
    # moves the tile out of the accumulator), else one chain as calibrated before
    turn = (max(steps * mm + fill, dma_round_trip(hw, store)) + epi + vlat if epi and apart
            else steps * mm + tail)
    period = max(steps * step, turn / 2, epi + store / bw)
    if vec and not prepared_ahead:
        # the vector unit runs in order: a tile's window building (its first step's) waits behind
        # the tile before's epilogue, which waits for that tile's last matmul to drain, and the
        # matmuls wait for the window: once per window built (`shared` tiles use one)
        period = max(period, (steps - 1) * mm + (fill + epi + vlat) / shared + built_and_multiplied(vec))
    # the first step: its loads' round trip (without the weight rows its first matmuls do not
    # wait for), the window building and the matmuls; later steps' loads are issued ahead
    first_load, first_vector = (ld, vec) if first_step is None else first_step
    first = dma_round_trip(hw, first_load - late) + vlat + built_and_multiplied(first_vector, late)
    if not late and first_step is None:
        first = serial
    chain = first + (steps - 1) * step + tail
    if single_acc is not None:
        # one accumulator tile (and output tile) for every output tile: the next tile's matmuls
        # wait for this tile's epilogue to read it, and its epilogue for this tile's store (a
        # 3x3 64->64 at 28x28 in fp32 on edge, 2 x 2 tiles on one accumulator: 450 K cycles
        # simulated, 485 K predicted by the matmuls and the epilogue alone, against 429 K / 488 K
        # for tiles of 2 rows on two); and where a hardware loop of 3 or more trips runs the
        # tiles, tile-to-npu drains that loop-carried dependency at the end of every iteration,
        # so the next iteration's loads wait for this one's store: the pipeline empties and
        # fills once per iteration (`single_acc` tiles per iteration; the stem on edge in 2-row
        # tiles, one per iteration: 841 K cycles simulated, 732 K without this)
        period = max(period, steps * mm + tail)
        if single_acc > 0:
            period += max(0.0, chain - steps * step) / single_acc
    if out_tiles - serial_tiles < 3:  # a 2-trip tile loop does not rotate its buffers: the tiles run in series
        period = max(period, chain)
    serial_tiles = min(serial_tiles, out_tiles - 1)
    return int(chain + (out_tiles - 1 - serial_tiles) * period + serial_tiles * max(period, chain))


def stores_deferred(hw: HardwareConfig, s: ConvSpec, T: ConvTiles) -> bool:
    """Are the conv's output tiles stored a slice per channel step of the next row tile
    (graph_to_tile/conv.py `ConvKernel.defers_stores`) instead of one DMA after each tile's
    epilogue? The DRAM serves transfers in the order they are issued, so a tile's store (a
    [128, 56] f32 tile: 1.8 K cycles on edge) held the next tile's window loads behind all of
    it. One loop over the row tiles (an unpadded stride-1 input, at least 3 tiles), the
    output-channel tiles outside it, several channel steps each storing as many output rows (TO
    a multiple of the steps), float operands, and a step's DRAM bytes (its window rows and its
    slice) within what the DRAM moves while the step's matmuls run: a kernel the DRAM bounds
    keeps one store per tile (the 1x1 256->128 at 56x56 on edge in 64-channel tiles, which
    reads its f32 input once per output-channel tile, went 549 K -> 585 K cycles with the
    slices between its loads). The conv schedule still charges each tile its store (it never
    charged the loads' wait behind it); told of the slices instead (the store's round trip out
    of the tile's tail, its bytes in the steps), it ranked ResNet-50's edge convs differently:
    21.47 M -> 21.70 M cycles."""
    steps = s.Cg // T.TC if T.TC and s.Cg % T.TC == 0 else 0
    TO, TOH = min(T.TO, s.Og), min(T.TOH, s.OH)
    if not (s.batch == 1 and s.groups == 1 and T.outer == "o" and not s.prepared and not T.im2col
            and steps >= 2 and s.Og % TO == 0 and TO % steps == 0 and s.OH % TOH == 0 and s.OH // TOH >= 3
            and s.Wq == s.OW and s.matmul_dtype == "bf16" and s.out_bytes in (2, 4)):
        return False
    R, C = hw.matrix.rows, hw.matrix.cols
    tq = TOH * s.Wq
    streamed, across = (tq, TO) if T.orientation == "channels" else (TO, tq)
    matmuls = s.taps * -(-T.TC // R) * -(-across // C) * hw.matrix.matmul_cycles(streamed, "bf16") * s.passes
    window = T.TC * (TOH + s.halo_rows) * s.W * s.in_bytes
    piece = TO // steps * TOH * s.OW * s.out_bytes
    return window + piece <= matmuls * hw.dram.bytes_per_cycle


def weights_in_flight(hw: HardwareConfig, weight_bytes: int) -> bool:
    """Whether weights fit in the DRAM's bandwidth-delay product (bytes in flight to cover one
    latency)."""
    return weight_bytes <= hw.dram.latency_cycles * hw.dram.bytes_per_cycle


def conv_weights_resident(hw: HardwareConfig, weight_bytes: int, copies: int,
                          matmul_dtype: str = "bf16") -> bool:
    """Whether conv.py prefetches a conv's packed weights whole across the kernel boundary
    (`ConvKernel.resident`, where they fit beside the kernel before's buffers and its own)
    instead of loading a block per output tile in its loops.

    On a latency-bound target (server: `context.latency_bound`) bf16 weights of any size: the
    whole block is requested while the kernel before computes, a streamed block only when the
    kernel's loop reaches it, a DRAM latency before it can arrive (ResNet-50 bf16 server
    399,399 -> 393,599 cycles, MobileNetV2 223,334 -> 221,641; the single-layer convs, which
    have no kernel before, unchanged; Hugging Face ConvNeXt +0.2 %, docs/tiling.md). Else only weights within the bandwidth-delay product
    (`weights_in_flight`), a larger block arriving well after the first window:
    - on edge the DRAM bounds the model, and a whole block's transfer takes its bandwidth from
      the kernel before's loads (every fitting conv resident: MobileNetV2 edge 6,079,557 ->
      6,097,707, though ResNet-50 edge 21,316,560 -> 21,280,529);
    - the fp32 emulation's two weight copies (hi and lo) put twice the bytes in the in-order
      load queue ahead of the kernel's first windows (ResNet-50 fp32 server 1,158,951 ->
      1,164,551 with every fitting conv resident);
    - int8 weights: not measured."""
    from infer.passes.graph_to_tile.context import latency_bound  # (graph_to_tile imports this module)

    if copies == 1 and matmul_dtype == "bf16" and latency_bound(hw):
        return True
    return weights_in_flight(hw, weight_bytes)


def window_prepared_ahead(hw: HardwareConfig, s: ConvSpec, T: ConvTiles) -> bool:
    """Whether tile-to-npu issues each row tile's window preparation an iteration ahead
    (docs/codegen.md "Pipelined preparation", `rotation.pipelinable_preparation`), so it runs
    beside the tile before's matmuls instead of behind its epilogue: a stride-1 1x1 conv whose
    staged input rows one copy converts into the window (one channel step, "pixels", no im2col,
    no prepared planes, one group), in a row loop of at least 3 trips (a 2-trip loop does not
    rotate) holding one output tile per iteration, its epilogue included: one output-channel
    tile, or those tiles outside with the weights resident (prefetched whole; else each one's
    weight block load, which this model does not count, bounds them: edge 256->1024 at 14x14
    picked TO = 128 and lost 2 %)."""
    nO, nR = -(-s.Og // min(T.TO, s.Og)), -(-s.OH // min(T.TOH, s.OH))
    resident = conv_weights_resident(hw, s.groups * s.Og * s.Cg * s.taps * 2 * s.copies, s.copies,
                                     s.matmul_dtype)
    return (s.Cg <= T.TC and s.taps == 1 and s.stride == 1 and not s.prepared and not T.im2col
            and T.orientation == "pixels" and s.groups == 1 and nR >= 3
            and (nO == 1 or (T.outer == "o" and resident)))


CODE_TOLERANCE = 0.01  # conv tilings this close to the fewest cycles are ranked by code size


def choose_conv(hw: HardwareConfig, s: ConvSpec, override: tuple[int, int, int] | None = None,
                memo: dict[ConvSpec, tuple[list[ConvEstimate], int]] | None = None) -> ConvChoice:
    """The fastest fitting conv tiling: orientation x TO x TOH x TC x loop order (x, for a
    padded input, planes in DRAM or windows padded on chip). `memo`: the rankings of the specs
    seen before on this `hw` (one dict per graph-to-tile run): a kernel equal to an earlier one
    (ResNet's repeated blocks) is ranked once; the autotuner's pick is still asked for on every
    call."""
    R = hw.matrix.rows
    padding = _padding_choices(s)
    if override is not None:
        TO, TOH, TC = override
        ests = [conv_estimate(hw, s, *fitting_buffers(hw, s, ConvTiles(o, TO, TOH, TC, outer, im2col, chip, whole)))
                for o in ("pixels", "channels") for outer in ("o", "rows")
                for im2col in ((False, True) if s.taps > 1 and TC < R else (False,)) for chip in padding
                for whole in ((False, True) if whole_weights_apply(s, outer, TC) else (False,))]
        best = min(ests, key=lambda e: (not e.feasible, e.spad > hw.memory.scratchpad_bytes
                                        or e.acc > hw.memory.accumulator_bytes, e.cycles))
        pick_index([])
        return ConvChoice(best.tiles, best, [best], overridden=True)
    ranked = memo.get(s) if memo is not None else None
    if ranked is None:
        ranked = _rank_conv(hw, s)
        if memo is not None:
            memo[s] = ranked
    cands, rejected = list(ranked[0]), ranked[1]
    if not cands:
        pick_index([])
        e = conv_estimate(hw, s, ConvTiles("pixels", min(16, s.Og), 1, min(R, s.Cg), "o"))
        return ConvChoice(e.tiles, e, [e], rejected=rejected)
    best = cands[pick_index([e.tiles for e in cands])]  # (autotuning's pick, if any)
    cands.remove(best)
    cands.insert(0, best)
    return ConvChoice(best.tiles, best, cands, rejected=rejected)


def _padding_choices(s: ConvSpec) -> tuple[bool, ...]:
    """ConvTiles.on_chip_padding's candidates: a padded or strided input's planes in DRAM, or
    its windows built on chip."""
    return (False, True) if s.prepared else (False,)


def whole_weights_apply(s: ConvSpec, outer: str, TC: int) -> bool:
    """Is `ConvTiles.whole_weights` a candidate: output-channel tiles outside and a step loop of
    3 or more trips (software-pipelined). With 2 steps the model's chains missed what the
    simulator measured (ResNet-50's 1x1/2 512->1024 at 28x28 in two steps of 256: 640 K
    predicted, 1.13 M simulated; 3x3 64->64 at 56x56 in two of 32: 638 K / 725 K), so those
    keep a block per step."""
    return outer == "o" and -(-s.Cg // max(1, TC)) >= 3


def fitting_buffers(hw: HardwareConfig, s: ConvSpec, T: ConvTiles) -> tuple[ConvTiles, tuple[int, int]]:
    """T and its (scratchpad, accumulator) bytes, or, where its accumulator tiles do not fit
    the accumulator in turns of two and one of them does (with the rest in the scratchpad),
    T with `single_acc` and those bytes: a larger output tile whose epilogue the next tile's
    matmuls wait for (ResNet-50's 1x1 1024->256 at 14x14 on edge: 128 output channels of 7
    rows, the input read twice instead of four times: 261 K -> 228 K cycles)."""
    buffers = conv_buffers(s, T)
    if buffers[1] <= hw.memory.accumulator_bytes:
        return T, buffers
    single = replace(T, single_acc=True)
    one = conv_buffers(s, single)
    if one[1] < buffers[1] and one[1] <= hw.memory.accumulator_bytes and one[0] <= hw.memory.scratchpad_bytes:
        return single, one
    return T, buffers


def fastest_conv_cycles(hw: HardwareConfig, s: ConvSpec,
                        memo: dict[ConvSpec, tuple[list[ConvEstimate], int]] | None = None) -> float:
    """The predicted cycles of choose_conv's pick for s without autotuning (inf when no tiling
    fits): how a caller compares two ways of lowering one conv before choosing its tiles."""
    ranked = memo.get(s) if memo is not None else None
    if ranked is None:
        ranked = _rank_conv(hw, s)
        if memo is not None:
            memo[s] = ranked
    return ranked[0][0].cycles if ranked[0] else float("inf")


def _rank_conv(hw: HardwareConfig, s: ConvSpec) -> tuple[list[ConvEstimate], int]:
    """The fitting candidates of choose_conv, the cost model's choice first, and how many did
    not fit."""
    R, Ccols = hw.matrix.rows, hw.matrix.cols
    padding = _padding_choices(s)
    cands: list[ConvEstimate] = []
    rejected = 0
    pow2_rows = pow2_candidates(s.OH, 1)
    even_rows = [t for t in even_row_splits(s.OH) if t not in pow2_rows]
    toh_cands = pow2_rows + even_rows
    tc_cands = pow2_candidates(s.Cg, R)
    for orientation in ("pixels", "channels"):
        to_cands = pow2_candidates(s.Og, Ccols if orientation == "channels" else min(16, R))
        for TO in to_cands:
            for TOH in toh_cands:
                for TC in tc_cands:
                    for outer, im2col, chip, whole in ((o, i, c, w) for o in ("o", "rows")
                                                       for i in ((False, True) if s.taps > 1 and TC < R else (False,))
                                                       for c in padding
                                                       for w in ((False, True) if whole_weights_apply(s, o, TC)
                                                                 else (False,))):
                        T, buffers = fitting_buffers(hw, s, ConvTiles(orientation, TO, TOH, TC, outer, im2col,
                                                                      chip, whole))
                        spad, acc = buffers
                        if TOH in even_rows and not T.single_acc and not staged_rows_apart(hw, s, T):
                            continue  # (even row splits only as a single accumulator's tiles: even_row_splits)
                        if spad > hw.memory.scratchpad_bytes or acc > hw.memory.accumulator_bytes:
                            rejected += 1  # (over capacity: not estimated; most of edge's candidates)
                            continue
                        e = conv_estimate(hw, s, T, buffers)
                        if e.feasible:
                            cands.append(e)
                        else:
                            rejected += 1
    if not cands:
        return cands, rejected
    # nests within the hardware loop depth first (deeper ones are unrolled: "loops stay loops"),
    # then fewest cycles
    cands.sort(key=lambda e: (e.unrolled, e.cycles, e.instructions, e.spad + e.acc))
    # candidates within CODE_TOLERANCE of the fewest cycles (well inside the model's error) are
    # equally fast: of those, the smallest program
    first = cands[0]
    near = [e for e in cands if e.unrolled == first.unrolled and e.cycles <= first.cycles * (1 + CODE_TOLERANCE)]
    best = min(near, key=lambda e: (e.instructions, e.cycles, e.spad + e.acc))
    cands.remove(best)
    cands.insert(0, best)
    return cands, rejected


def describe_conv(name: str, shape: str, ch: ConvChoice, top: int = 3) -> str:
    b = ch.best
    lines = [f"[graph-to-tile] {name}: conv2d {shape} tiles {b.tiles.text()}"
             f"{' (override)' if ch.overridden else ''}: est {b.cycles} cycles (compute {b.matrix}, memory "
             f"{b.memory}, vector {b.vector}, front end {b.frontend}) -> {b.bound}-bound; spad {b.spad} B, "
             f"acc {b.acc} B; code ~{b.instructions} instructions{' (unrolled)' if b.unrolled else ''}"]
    if not ch.overridden:
        others = ", ".join(f"{e.tiles.text()}={e.cycles} ({e.instructions} instr.)" for e in ch.candidates[1:top + 1])
        lines.append(f"[graph-to-tile] {name}:   why: fewest cycles of {len(ch.candidates)} fitting candidates"
                     f" ({ch.rejected} over capacity or too deep); next best {others or 'none'}")
    return "\n".join(lines)


@dataclass
class RowChoice:
    rows: int
    cols: int
    cycles: int
    memory: int
    vector: int
    candidates: list[tuple[int, int, int]] = field(default_factory=list)  # (rows, cycles, bytes)

    @property
    def bound(self) -> str:
        return "memory" if self.memory >= self.vector else "vector"


def choose_rows(hw: HardwareConfig, M: int, N: int, *, bytes_in: int, bytes_out: int,
                vec_cost: int, live_tiles: int, override: int | None = None,
                whole_row: bool = False,
                footprint: Callable[[int, int], int] | None = None, pipelined: bool = True,
                rounds: int = 1, column_cost: float = 0, contiguous_rows: bool = False) -> RowChoice:
    """Row-tiled vector kernels (elementwise, norms, softmax, pooling): tiles of
    [TR, TC] elements, `live_tiles` fp32 tiles of that size in the scratchpad
    (x2 for double buffering). `whole_row` keeps TC = N (row reductions).
    Cost per element = DRAM bytes / bandwidth vs vector ops / lanes.
    `footprint(tr, tc)`: the exact scratchpad bytes of the lowering's buffers for a
    [tr, tc] tile (replaces the `live_tiles` estimate); candidates over the capacity
    are dropped. Cycles: `pipeline_cycles` over the tiles (`pipelined`, `rounds`: its
    options). `vec_cost`: vector cycles per `lanes` elements of the tile; `column_cost`: per
    `lanes` rows (instructions on one column per row). `contiguous_rows`: the rows follow one
    another in DRAM (a row-major [M, N] buffer), so a tile of whole rows is one contiguous run
    of bytes, which tile-to-npu moves as one DMA row (its bursts counted once, not per row)."""
    L = hw.vector.lanes
    spad = hw.memory.scratchpad_bytes
    cap = spad // 2
    if footprint is None:
        def footprint(tr: int, tc: int) -> int:
            return tr * tc * 4 * live_tiles * 2
    if whole_row:
        tc = N
    else:
        tc = min(N, max(L, _largest_pow2_le(max(1, cap // (live_tiles * 4 * 2)))))
        while tc > L and footprint(1, tc) > cap:  # columns take at most half the scratchpad
            tc = max(L, _largest_pow2_le(tc - 1))
        tc = min(tc, N)
    rows_cands = pow2_candidates(M, 1)
    best: RowChoice | None = None
    cands = []
    for tr in ([override] if override else rows_cands):
        if not override and footprint(tr, tc) > spad:
            continue
        nt = -(-M // tr) * -(-N // tc)
        if contiguous_rows and tc == N:
            load_b, store_b = _burst_bytes(hw, tr * tc * bytes_in), _burst_bytes(hw, tr * tc * bytes_out)
        else:
            load_b, store_b = tr * _burst_bytes(hw, tc * bytes_in), tr * _burst_bytes(hw, tc * bytes_out)
        mem = nt * (load_b + store_b) // hw.dram.bytes_per_cycle
        vec_tile = -(-tr * tc // L) * vec_cost + -(-tr // L) * column_cost
        vec = nt * vec_tile
        cyc = pipeline_cycles(hw, nt, load_b, vec_tile + rounds * hw.vector.latency, store_b if bytes_out else 0,
                              pipelined=pipelined, rounds=rounds)
        cands.append((tr, cyc, mem))
        # within 2 % of the best, the larger tile wins: fewer instructions and per-tile waits,
        # which the estimate does not count (rows candidates grow, so a later one is larger)
        if best is None or cyc <= best.cycles * 1.02:
            if best is None or cyc < best.cycles or cyc <= min(c for _, c, _ in cands) * 1.02:
                best = RowChoice(tr, tc, cyc, mem, vec)
    if best is None:
        best = RowChoice(1, tc, 0, 0, 0)
    best.candidates = cands
    return best


@dataclass
class PermuteChoice:
    """Tiles of a permuted copy (transpose) through the scratchpad: `tiles` of the block
    dims, `loop` the block dim its per-block DMA / vector-copy loop runs over."""

    tiles: tuple[int, ...]
    loop: int
    cycles: int
    dmas: int
    vector: int
    loops: int
    candidates: int = 0


def _permute_cycles(hw: HardwareConfig, loads: int, load_rows: int, load_row_bytes: int,
                    stores: int, store_rows: int, store_row_bytes: int, vec_ops: int = 0,
                    vec_op_cycles: int = 0) -> tuple[int, int]:
    """(cycles, vector cycles) of a copy that is pure DMA (+ vector copies): the DRAM bytes
    (rows rounded up to bursts) over the bandwidth, or the DMA engines' channel throughput
    (each transfer holds a channel for setup + transfer + latency), or the vector unit,
    or the front end dispatching every instruction, whichever is slowest, plus one load and
    one store latency to fill and drain the pipeline."""
    bw, lat, setup, ch = hw.dram.bytes_per_cycle, hw.dram.latency_cycles, hw.dma.setup_cycles, hw.dma.channels
    lb, sb = load_rows * _burst_bytes(hw, load_row_bytes), store_rows * _burst_bytes(hw, store_row_bytes)
    dram = (lb + sb) / bw
    ld = (loads * (setup + lat) + lb / bw) / ch
    st = (stores * (setup + lat) + sb / bw) / ch
    vec = vec_ops * vec_op_cycles
    front = loads + stores + vec_ops
    return int(max(dram, ld, st, vec, front)) + 2 * (lat + setup), vec


def gather_rows_estimate(hw: HardwareConfig, count: int, width: int, tr: int, tc: int,
                         local_indices: bool = False, table_bytes: int | None = None) -> int:
    """Cycles of `tile.gather_rows` in [tr, tc] tiles (each stored by one DMA): per row the front
    end reads the index with a scalar `ld` (stalled for the DRAM latency; `local_indices`: `lds`
    from the scratchpad copy, a scratchpad latency, after one DMA round trip of the indices)
    and dispatches the address arithmetic and the row's DMA (4 more instructions,
    docs/tiling.md); the row DMAs run on the load engine's channels. Per tile the slower of the
    two, then the last row's round trip and the last tile's store round trip (earlier stores
    overlap the next tile's rows). `table_bytes`: the table is loaded into the scratchpad
    first (one DMA round trip of that many bytes) and each row is a vector copy instead of a
    DMA, which holds no channel for a DRAM latency."""
    lat, setup, ch = hw.dram.latency_cycles, hw.dma.setup_cycles, hw.dma.channels
    index_lat = hw.scalar.local_load_cycles if local_indices else lat
    total = 0.0
    for rows, n_r in _counts(count, tr):
        for cols, n_c in _counts(width, tc):
            row_bytes = _burst_bytes(hw, cols * 4)
            front = rows * (1 + index_lat + 4)
            if table_bytes is None:
                engine = rows * (setup + row_bytes / hw.dram.bytes_per_cycle + lat) / ch
            else:
                engine = rows * -(-cols // hw.vector.lanes) * hw.vector.cost["copy"]
            store = rows * row_bytes / hw.dram.bytes_per_cycle
            total += n_r * n_c * max(front, engine, store + rows * row_bytes / hw.dram.bytes_per_cycle)
    last_rows, last_cols = min(tr, count), min(tc, width)
    if table_bytes is not None:
        total += dma_round_trip(hw, _burst_bytes(hw, table_bytes))
    if local_indices:
        total += dma_round_trip(hw, _burst_bytes(hw, count * 8))
    return int(total + dma_round_trip(hw, _burst_bytes(hw, last_cols * 4))
               + dma_round_trip(hw, last_rows * _burst_bytes(hw, last_cols * 4)))


def dma_box_limits() -> tuple[int, int, int]:
    """Largest (contiguous bytes per row, rows, planes) one DMA instruction encodes (the ISA
    table's n0 / n1 / n2 fields)."""
    d = isa.BY_NAME["dma.load"]
    return d.field("n0").hi, d.field("n1").hi, d.field("n2").hi


def vector_limits() -> tuple[int, int]:
    """Largest (rows, byte stride) of one vector instruction (the ISA table's fields)."""
    d = isa.BY_NAME["vec.copy"]
    return d.field("rows").hi, d.field("astride").hi


def _trips(extent: int, tile: int) -> int:
    """Hardware loops `tiles(extent, tile)` emits (its full-tile loop when it has >= 2 trips)."""
    return 1 if extent // tile >= 2 else 0


def choose_permute_rows(hw: HardwareConfig, eu: int, ev: int, C: int, esize: int, outer: int,
                        outer_loops: int, u_adjacent: bool) -> PermuteChoice:
    """Permuted copy that keeps rows of C contiguous elements: block [Tu, Tv, TC] of two
    permuted dims u (outer in the input) and v (= the input's second innermost), loaded by
    one 3-D DMA in input order and stored by a loop of 2-D DMAs over one of u / v (`loop`
    0 = u, 1 = v), `outer` blocks of the remaining dims (`outer_loops` of them loops).
    Two block buffers (double buffered) take half the scratchpad."""
    cap = max(1, hw.memory.scratchpad_bytes // (4 * esize))
    n0, n1, n2 = dma_box_limits()
    TC = min(C, cap, n0 // esize)
    rest = max(1, cap // TC)
    lim = min(n1, n2)  # Tu / Tv are rows or planes of a DMA
    nc = -(-C // TC)
    best: PermuteChoice | None = None
    n = 0
    for loop in (0, 1):
        el, ew = (eu, ev) if loop == 0 else (ev, eu)
        for tl in pow2_candidates(min(el, rest, lim), 1):
            tw = min(ew, max(1, rest // tl), lim)
            tu, tv = (tl, tw) if loop == 0 else (tw, tl)
            nu, nv = -(-eu // tu), -(-ev // tv)
            blocks = outer * nu * nv * nc
            stores = outer * nc * (nv * eu if loop == 0 else nu * ev)
            # load: rows of TC (v merges into them when TC = C; u too when whole and adjacent)
            lrow = TC * (tv if TC == C else 1) * (tu if TC == C and tv == ev and u_adjacent else 1)
            lrows = outer * eu * ev * C // lrow
            cyc, _ = _permute_cycles(hw, blocks, lrows, lrow * esize, stores, outer * eu * ev * nc, TC * esize)
            loops = outer_loops + _trips(eu, tu) + _trips(ev, tv) + _trips(C, TC) + (1 if tl > 1 else 0)
            c = PermuteChoice((tu, tv, TC), loop, cyc, blocks + stores, 0, loops)
            n += 1
            key = (loops > hw.scalar.loop_depth, cyc, c.dmas, loops)
            if best is None or key < (best.loops > hw.scalar.loop_depth, best.cycles, best.dmas, best.loops):
                best = c
    assert best is not None
    best.candidates = n
    return best


def choose_permute_block(hw: HardwareConfig, ei: int, ej: int, esize: int, outer: int,
                         outer_loops: int, i_adjacent: bool, j_adjacent: bool, eh: int = 1) -> PermuteChoice:
    """Permuted copy that moves the innermost dim j (input rows of Tj contiguous elements)
    to a row dim of the output, whose rows are dim i: block [Th, Ti, Tj] loaded in input
    order, transposed on chip by a loop of vector copies (one column or row each, over the
    smaller tile side: `loop` 0 = i, 1 = j; per h) into [Th, Tj, Ti], stored in output order.
    Both double-buffered block buffers take half the scratchpad. `i_adjacent`: i is the
    input's second innermost dim (whole loaded blocks are one contiguous run);
    `j_adjacent`: j is the output's second innermost dim (same for stores). `eh` > 1: the
    outermost dim h (of extent eh, part of `outer`) is outermost in the output too, so
    blocks may span several of its indices (Th: the heads of attention's K transpose): fewer,
    larger blocks, whose chains (load round trip, copies, store) the double buffers keep only
    two of in flight. -> tiles (Ti, Tj, Th)."""
    cap = max(1, hw.memory.scratchpad_bytes // (8 * esize))
    lanes, ccopy = hw.vector.lanes, hw.vector.cost.get("copy", 1)
    lat, setup, bw = hw.dram.latency_cycles, hw.dma.setup_cycles, hw.dram.bytes_per_cycle
    n0, n1, n2 = dma_box_limits()
    vrows, vstride = vector_limits()
    # a side is a DMA row (n0 bytes) and rows of the other (n1), a vector copy's rows and stride
    lim = min(n0 // esize, n1, vrows, vstride // esize)
    best: PermuteChoice | None = None
    n = 0
    for tj in pow2_candidates(min(ej, cap, lim), 1):
        ti = min(ei, max(1, cap // tj), lim)
        ni, nj = -(-ei // ti), -(-ej // tj)
        loop = 0 if ti <= tj else 1
        vcyc = -(-max(ti, tj) // lanes) * ccopy
        for th in pow2_candidates(min(eh, max(1, cap // (ti * tj)), n2), 1) if eh > 1 else [1]:
            blocks = outer // eh * -(-eh // th) * ni * nj
            vops = outer * (nj * ei if loop == 0 else ni * ej)
            lrow = tj * (ti if tj == ej and i_adjacent else 1)
            srow = ti * (tj if ti == ei and j_adjacent else 1)
            total = outer * ei * ej
            cyc, vec = _permute_cycles(hw, blocks, total // lrow, lrow * esize, blocks, total // srow, srow * esize,
                                       vops, vcyc)
            if eh > 1:  # two block chains in flight (a load round trip and the block's copies
                # each), and the first block's load and the last one's store not overlapped
                xfer = th * ti * tj * esize / bw
                chain = lat + setup + xfer + th * min(ti, tj) * max(vcyc, 1)
                cyc = max(cyc, int(-(-blocks // 2) * chain) + lat + setup) + int(2 * xfer)
            loops = outer_loops + _trips(ei, ti) + _trips(ej, tj) + (1 if min(ti, tj) > 1 else 0)
            if th > 1:  # the h loop steps over blocks (not every h), plus a copy loop over a block's h
                loops += _trips(eh, th)
            c = PermuteChoice((ti, tj, th), loop, cyc, 2 * blocks, vec, loops)
            n += 1
            key = (loops > hw.scalar.loop_depth, cyc, c.dmas, loops)
            if best is None or key < (best.loops > hw.scalar.loop_depth, best.cycles, best.dmas, best.loops):
                best = c
    assert best is not None
    best.candidates = n
    return best


def _largest_pow2_le(x: int) -> int:
    return 1 << (max(1, x).bit_length() - 1)


def describe_choice(name: str, what: str, shape: str, ch: Choice, top: int = 3) -> str:
    b = ch.best
    tm, tn, tk = ch.tiles
    lines = [f"[graph-to-tile] {name}: {what} {shape} tiles TMxTNxTK = {tm}x{tn}x{tk}"
             f"{' (override)' if ch.overridden else ''}: est {b.cycles} cycles"
             f" (compute {b.matrix}, memory {b.memory}, vector {b.vector}) -> {b.bound}-bound;"
             f" spad {b.spad} B, acc {b.acc} B"]
    if not ch.overridden:
        others = ", ".join(f"{e.tiles[0]}x{e.tiles[1]}x{e.tiles[2]}={e.cycles}" for e in ch.candidates[1:top + 1])
        lines.append(f"[graph-to-tile] {name}:   why: fewest cycles of {len(ch.candidates)} fitting candidates"
                     f" ({ch.rejected} over capacity); next best {others or 'none'}")
    return "\n".join(lines)


def describe_rows(name: str, what: str, shape: str, rc: RowChoice) -> str:
    others = ", ".join(f"{r}={c}" for r, c, _ in sorted(rc.candidates, key=lambda t: t[1])[1:4])
    return (f"[graph-to-tile] {name}: {what} {shape} tiles {rc.rows}x{rc.cols}: est {rc.cycles} cycles"
            f" (memory {rc.memory}, vector {rc.vector}) -> {rc.bound}-bound\n"
            f"[graph-to-tile] {name}:   why: fewest cycles of {len(rc.candidates)} row-tile candidates;"
            f" next best {others or 'none'}")


_ = math
