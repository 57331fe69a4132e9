"""The tiling cost model predicts the simulator (issue 14 item 5): on small single-op models of
every kernel class (bench/bench_cost_model.py's quick set: conv, depthwise conv, linear, batched
matmul, attention, max pooling, elementwise, layer norm, softmax, gather), the cycles the cost
model predicted for the op's loop nests (the op marker's `predicted`, recorded by graph-to-tile)
against the cycles the simulator measured for the op's instructions. A loose bound: the median
error within 25 % and no kernel off by more than 75 % (before the calibration the median of this
set was 46 %, server kernels 2x off)."""

from __future__ import annotations

import statistics

import bench_cost_model as bench  # bench/ is on the test path (pyproject.toml)
import pytest

QUICK = [k for k in bench.kernels() if k.quick]


@pytest.mark.parametrize("target", ["edge", "server"])
def test_cost_model_error_is_bounded(target: str) -> None:
    errors = {}
    for kernel in QUICK:
        ops = bench.measure(kernel, target)
        assert ops, f"{kernel.name}: no op carries a cost-model prediction"
        predicted, simulated = sum(o[1] for o in ops), sum(o[2] for o in ops)
        errors[kernel.name] = bench.error(predicted, simulated)
    assert {k.kclass for k in QUICK} >= {"conv2d", "depthwise", "linear", "matmul", "attention", "max_pool2d",
                                         "elementwise", "layer_norm", "softmax", "gather", "global_avg_pool",
                                         "reduce_sum"}
    table = ", ".join(f"{name} {100 * e:.0f} %" for name, e in errors.items())
    assert statistics.median(errors.values()) <= 0.25, table
    assert max(errors.values()) <= 0.75, table


def test_error_table_lists_median_and_worst_per_class() -> None:
    rows = {("linear", "edge"): [("a", 110, 100), ("b", 50, 100), ("c", 100, 100)]}
    lines, median = bench.table(rows)
    assert median == pytest.approx(0.10)
    assert lines[2] == "| linear | edge | 3 | 10.0 % | 50.0 % | b (50 / 100) |"


def test_interleaved_resident_attention_on_server_is_predicted() -> None:
    """all-MiniLM-L6-v2's attention on server (12 heads of 128 x 32, one key tile, 6 heads
    interleaved, Q/K/V resident): the model had charged every head a weight tile's DRAM round
    trip that resident operands do not make and each head's step latency and accumulator
    round trip in full, where the interleaved heads overlap them (7,765 predicted against
    4,508 simulated); now within 10 %."""
    kernel = next(k for k in bench.kernels() if k.name == "minilm attn 12x128x32")
    ops = bench.measure(kernel, "server")
    predicted, simulated = sum(o[1] for o in ops), sum(o[2] for o in ops)
    assert abs(bench.error(predicted, simulated)) <= 0.10, (predicted, simulated)


def test_staged_row_tiles_are_predicted_as_two_recurrences_on_server() -> None:
    """ResNet-50's 1x1 64->64 at 56x56 with an f32 input on server: its row tiles' staged rows
    are freed by the copy that builds the window, not by the matmuls, and the output buffer is
    free again once the store of the tile before last has completed, whatever the accumulator's
    turn. Counted as one chain, 8-row tiles were predicted 5,733 cycles (4,132 simulated), so
    the model kept the whole map as one tile (5,703 simulated, nothing overlapped); now the row
    tiles are chosen and predicted within 10 %."""
    kernel = next(k for k in bench.kernels() if k.name == "r50 1x1 64->64 56")
    ops = bench.measure(kernel, "server")
    predicted, simulated = sum(o[1] for o in ops), sum(o[2] for o in ops)
    assert abs(bench.error(predicted, simulated)) <= 0.10, (predicted, simulated)
    assert simulated <= 4_500, simulated


@pytest.mark.parametrize("name, most_cycles, bound", [("r50 3x3 256 14", 560_000, 0.10),
                                                      ("r50 3x3 64->64 56", 630_000, 0.15)])
def test_windows_padded_on_chip_are_predicted_as_pipelined(name: str, most_cycles: int, bound: float) -> None:
    """ResNet-50's stride-1 3x3 convs on edge: a step loop whose padded windows are built on chip
    is software-pipelined (its loads a step early), so the model counts the window building
    beside the step before's matmuls, as far as the matrix queue's lead on them reaches. The
    256->256 at 14x14 takes those windows (predicted 829 K against 550 K simulated when its steps
    were charged in series, so the planes prepared in DRAM, 586 K, were chosen); the 64->64 at
    56x56 keeps its planes: counted as pipelined, its windows of one-row tiles (four steps each,
    whose pipeline refills at every tile) were predicted 623 K and simulated 824 K. The 64->64
    is now 4-row one-step "channels" tiles from planes prepared in DRAM: 660 K predicted, 620 K
    simulated while each tile zeroed its accumulator first, 585 K since its first tap's product
    overwrites it (conv.py `ConvKernel.FIRST_TAP_OVERWRITES`): the zeroing had chained each tile
    behind the epilogue before it on the in-order vector unit, as the model's serial step chain
    counts (12.8 % over, within the issue's 15 %). Counting such tiles as pipelined instead
    picked slower tilings for ResNet-50 (server 357 K -> 414 K cycles, edge 21.1 M -> 21.7 M)."""
    kernel = next(k for k in bench.kernels() if k.name == name)
    ops = bench.measure(kernel, "edge")
    predicted, simulated = sum(o[1] for o in ops), sum(o[2] for o in ops)
    assert abs(bench.error(predicted, simulated)) <= bound, (predicted, simulated)
    assert simulated <= most_cycles, simulated


def test_the_channels_transposition_adds_the_bias() -> None:
    """A float conv's bias is added by the "channels" orientation's transposition back, so the
    model charges it no vector pass of its own there (a stride-1 conv of several channel steps:
    one pass per output element less, [128, 56] tiles on edge: 448 cycles per tile); the
    "pixels" orientation, one-step and strided convs keep it."""
    from dataclasses import replace

    from infer.passes import tiling_cost
    from infer.target.hw import load_config

    hw = load_config("edge")
    spec = tiling_cost.ConvSpec(batch=1, groups=1, Og=128, Cg=512, taps=1, OH=28, OW=28, Wq=28, H=28, W=28,
                                stride=1, halo_rows=0, prepared=False, planes=1, row_phases=1, copies=1,
                                passes=1, epi_cost=2, epi_tiles=0)
    fused = replace(spec, bias_in_transpose=True)

    def vector(s, orientation: str, TC: int) -> int:
        return tiling_cost.conv_estimate(hw, s, tiling_cost.ConvTiles(orientation, 128, 2, TC, "o")).vector

    tiles = 14  # row tiles of 2 rows
    assert vector(spec, "channels", 16) - vector(fused, "channels", 16) == tiles * 128 * 56 // 16
    assert vector(spec, "pixels", 16) == vector(fused, "pixels", 16)
    assert vector(spec, "channels", 512) == vector(fused, "channels", 512)  # one step


@pytest.mark.parametrize("target", ["edge", "server"])
@pytest.mark.parametrize("name", ["small avgpool 32x16", "minilm row sum 1x384", "r50 avgpool 2048x7"])
def test_row_reductions_count_their_result_store(target: str, name: str) -> None:
    """Row reductions (global pools, reduce_sum over the last axis): the model counts the store
    of the last tile's results, each reduction's vector cost (one pass of rsum or rmax per
    element, the total's updates per row) and a tile of whole rows of a row-major buffer as one
    DMA row. Before, with no store, two vector passes per element and each row's bytes rounded
    to bursts, the 1 x 384 sum was predicted 523 cycles on server (1,030 simulated) and the
    2048 x 49 pool 33,272 on edge (26,004)."""
    kernel = next(k for k in bench.kernels() if k.name == name)
    ops = bench.measure(kernel, target)
    predicted, simulated = sum(o[1] for o in ops), sum(o[2] for o in ops)
    assert bench.error(predicted, simulated) <= 0.05, (predicted, simulated)


def test_kernels_reading_what_the_kernel_before_kept_are_predicted_on_server() -> None:
    """On server a one-tile kernel's result stays on chip for the kernels after it, which read it
    in place (no load, no DRAM latency): x * x, its row sum, then x * x divided by that sum.
    The division read both operands on chip but was predicted with their loads: 1,028 cycles
    against 527 simulated. Each kernel is now predicted within 5 %."""
    t = bench._t
    S = (1, 384)
    body = (f"%a = graph.mul %x, %x : ({t(S)}, {t(S)}) -> {t(S)}\n"
            f"  %r = graph.reduce_sum %a {{axes = array<i64: 1>, keepdims = true}} : ({t(S)}) -> {t((1, 1))}\n"
            f"  %y = graph.div %a, %r : ({t(S)}, {t((1, 1))}) -> {t(S)}")
    kernel = bench.Kernel("elementwise", "square, sum, divide", (("x", S, "f32"),), (), body, S)
    ops = bench.measure(kernel, "server")
    assert len(ops) == 3, ops
    for name, predicted, simulated in ops:
        assert bench.error(predicted, simulated) <= 0.05, (name, predicted, simulated)


def test_attention_softmax_costs_the_vector_passes_it_makes() -> None:
    """The online softmax's vector work per score element comes from the target's instruction
    costs (`attention.softmax_cost`: the band or mask add, rmax, sub, exp, the row sum unless the
    matrix unit makes it, fp32's split of P) plus O's rescale per O element, where a constant
    12 per score element (before P's row sums moved to the matrix unit) over-predicted the Llama
    prefill's causal attention on server by 82 % (58,508 against 32,117 simulated); interleaved
    heads' fences overlap. On edge, one head at a time, the chain and a key tile's split run in
    series: MiniLM's attention at sequence 256 was predicted 627 K and took 852 K in 16 x 256
    tiles, and the model now picks 128 x 16 tiles (693 K, the fastest of autotuning's four)."""
    llama = bench.attention("llama 8/2 512x64 causal", 8, 2, 512, 64, True)
    (_, predicted, simulated), = bench.measure(llama, "server")
    assert bench.error(predicted, simulated) <= 0.20, (predicted, simulated)
    assert simulated <= 33_000, simulated
    minilm = bench.attention("minilm 12x256x32", 12, 12, 256, 32, False)
    (_, predicted, simulated), = bench.measure(minilm, "edge")
    assert bench.error(predicted, simulated) <= 0.10, (predicted, simulated)
    assert simulated <= 700_000, simulated
