"""The run report against the algorithmic roofline (docs/performance.md): the op markers carry
each kernel's model MACs, compulsory bytes, the cost model's prediction and its class, and
the report measures ops and the whole run against max(MACs x passes / peak, bytes / bandwidth)."""

from __future__ import annotations

import numpy as np
import pytest

import infer
from infer.dialects.ir_io import make_context, parse_ir, verify_module
from infer.dialects.weights import WeightStore, attach_weights
from infer.target.hw import load_config

M, K, N = 64, 128, 96
C, H, O = 16, 12, 32  # conv 3x3 pad 1

TEXT = f"""func.func @main(%x: tensor<{M}x{K}xf32> {{graph.name = "x"}}, %img: tensor<1x{C}x{H}x{H}xf32> {{graph.name = "img"}}) -> (tensor<{M}x{N}xf32> {{graph.name = "y"}}, tensor<1x{O}x{H}x{H}xf32> {{graph.name = "z"}}) {{
  %w = graph.weight @w : tensor<{N}x{K}xf32>
  %y = graph.linear %x, %w : (tensor<{M}x{K}xf32>, tensor<{N}x{K}xf32>) -> tensor<{M}x{N}xf32>
  %cw = graph.weight @cw : tensor<{O}x{C}x3x3xf32>
  %z = graph.conv2d %img, %cw {{padding = array<i64: 1, 1, 1, 1>}} : (tensor<1x{C}x{H}x{H}xf32>, tensor<{O}x{C}x3x3xf32>) -> tensor<1x{O}x{H}x{H}xf32>
  func.return %y, %z : tensor<{M}x{N}xf32>, tensor<1x{O}x{H}x{H}xf32>
}}"""


def model() -> infer.Model:
    module = parse_ir(make_context(), TEXT, "roofline.mlir")
    verify_module(module)
    store = WeightStore()
    rng = np.random.default_rng(0)
    store.set("w", (rng.standard_normal((N, K)) * 0.1).astype(np.float32))
    store.set("cw", (rng.standard_normal((O, C, 3, 3)) * 0.1).astype(np.float32))
    attach_weights(module, store)
    return infer.Model(module)


@pytest.mark.parametrize("precision, passes, operand_bytes", [("bf16", 1, 2), ("fp32", 3, 4)])
def test_markers_and_report_measure_against_the_model(precision, passes, operand_bytes):
    exe = infer.compile(model(), target="edge", precision=precision)
    rng = np.random.default_rng(1)
    exe.run([rng.standard_normal((M, K)).astype(np.float32),
             rng.standard_normal((1, C, H, H)).astype(np.float32)])
    rep = exe.last_report
    by_class = {o.kernel_class: o for o in rep.ops if o.model_macs}
    assert set(by_class) == {"linear", "conv2d"}
    linear, conv = by_class["linear"], by_class["conv2d"]
    # the model's MACs, not the executed ones (the conv computes padded-width rows)
    assert linear.model_macs == M * N * K
    assert conv.model_macs == O * H * H * C * 9
    assert conv.macs >= passes * conv.model_macs
    # compulsory bytes: f32 model inputs and outputs once, weights at the matrix operand size
    assert linear.weight_bytes == N * K * operand_bytes
    assert linear.compulsory_bytes == M * K * 4 + N * K * operand_bytes + M * N * 4
    assert conv.compulsory_bytes == C * H * H * 4 + O * C * 9 * operand_bytes + O * H * H * 4
    hw = load_config("edge")
    for op in (linear, conv):
        roof = max(op.model_macs * passes / hw.peak_macs_per_cycle,
                   op.compulsory_bytes / hw.dram.bytes_per_cycle)
        assert op.roofline_cycles == pytest.approx(roof)
        assert op.achieved == pytest.approx(roof / op.cycles)
        assert op.predicted and op.predicted > 0  # the cost model's estimate travels with the marker
    # the whole run: weights plus the model's inputs and outputs
    io = (M * K + C * H * H + M * N + O * H * H) * 4
    assert rep.compulsory_bytes == linear.weight_bytes + conv.weight_bytes + io
    assert rep.roofline_fraction == pytest.approx(
        max(rep.model_macs * passes / hw.peak_macs_per_cycle, rep.compulsory_bytes / hw.dram.bytes_per_cycle)
        / rep.cycles)
    assert 0 < rep.roofline_fraction < 1
    table = rep.table()
    assert "predicted" in table.splitlines()[0] and "conv2d" in table


@pytest.mark.parametrize("target", ["edge", "server"])
def test_the_latency_floor_adds_the_dram_latency_no_program_hides(target):
    """Report.latency_floor_cycles: max(MACs / peak + 2L, read bytes / bandwidth + 2L,
    compulsory bytes / bandwidth + L); the simulated run never beats it, and floor_fraction
    is the roofline over it (the most any program reaches)."""
    exe = infer.compile(model(), target=target, precision="bf16")
    rng = np.random.default_rng(1)
    exe.run([rng.standard_normal((M, K)).astype(np.float32),
             rng.standard_normal((1, C, H, H)).astype(np.float32)])
    rep = exe.last_report
    hw = load_config(target)
    lat, bw = hw.dram.latency_cycles, hw.dram.bytes_per_cycle
    outputs = (M * N + O * H * H) * 4
    assert rep.output_bytes == outputs and rep.dram_latency_cycles == lat
    floor = max(rep.model_macs / hw.peak_macs_per_cycle + 2 * lat,
                (rep.compulsory_bytes - outputs) / bw + 2 * lat, rep.compulsory_bytes / bw + lat)
    assert rep.latency_floor_cycles == pytest.approx(floor)
    assert rep.roofline_cycles < rep.latency_floor_cycles <= rep.cycles
    assert rep.floor_fraction == pytest.approx(rep.roofline_cycles / floor)
    assert rep.roofline_fraction <= rep.floor_fraction < 1
    assert rep.as_dict()["latency_floor_cycles"] == pytest.approx(floor)


def test_an_embedding_lookup_counts_the_rows_it_takes_not_the_table():
    """A table only gathers read is compulsory for the slices they take (at most the table):
    16 token ids into a 1000-row table read 16 rows."""
    V, D, T = 1000, 64, 16
    text = f"""func.func @main(%ids: tensor<{T}xi32> {{graph.name = "ids"}}) -> (tensor<{T}x{D}xf32> {{graph.name = "y"}}) {{
  %table = graph.weight @table : tensor<{V}x{D}xf32>
  %y = graph.gather %table, %ids : (tensor<{V}x{D}xf32>, tensor<{T}xi32>) -> tensor<{T}x{D}xf32>
  func.return %y : tensor<{T}x{D}xf32>
}}"""
    module = parse_ir(make_context(), text, "embedding.mlir")
    verify_module(module)
    store = WeightStore()
    table = np.random.default_rng(0).standard_normal((V, D)).astype(np.float32)
    store.set("table", table)
    attach_weights(module, store)
    exe = infer.compile(infer.Model(module), target="server", precision="bf16")
    ids = np.random.default_rng(1).integers(0, V, T).astype(np.int32)
    (y,) = exe.run([ids])
    np.testing.assert_array_equal(y, table[ids])
    (op,) = [o for o in exe.last_report.ops if o.kernel_class == "gather"]
    assert op.weight_bytes == T * D * 4
    assert op.compulsory_bytes == T * D * 4 + T * 4 + T * D * 4
    assert exe.last_report.compulsory_bytes == T * D * 4 + T * 4 + T * D * 4


def test_the_summary_names_the_latency_floor_where_it_caps_the_roofline():
    """A small model on server: the summary says how far any program can get."""
    exe = infer.compile(model(), target="server", precision="bf16")
    rng = np.random.default_rng(1)
    exe.run([rng.standard_normal((M, K)).astype(np.float32),
             rng.standard_normal((1, C, H, H)).astype(np.float32)])
    rep = exe.last_report
    assert rep.floor_fraction < 0.99
    (line,) = [x for x in rep.summary().splitlines() if "latency floor" in x]
    assert f"{rep.latency_floor_cycles:.0f} cycles" in line and f"{100 * rep.floor_fraction:.1f}%" in line
