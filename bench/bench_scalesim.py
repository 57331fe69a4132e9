"""The timing model cross-checked against SCALE-Sim, layer by layer (docs/hardware-feedback.md).

    python bench/bench_scalesim.py [--target edge|server] [--only NAME] [--json OUT.json]

For every distinct conv/GEMM shape of ResNet-50 (`infer.tools.zoo.build_resnet50_onnx`) and of
two transformer blocks (BERT-base at sequence 128; a Llama-style block, hidden 512, GQA, sequence
512), on the edge (16x16) and server (128x128) arrays, weight-stationary:

* `scalesim`: SCALE-Sim's compute cycles (PyPI `scalesim`, used as a library: its operand
  matrices and `systolic_compute_ws`; one demand-matrix row is one array cycle, and with no
  memory stalls its report's cycle count is that row count, see `scalesim_cycles`).
* `compiled`: the matrix unit's busy cycles (`Counters.busy["matrix"]`: the sum of `m *
  cycles_per_row` over the matmuls) of the layer compiled alone by `infer.compile(...,
  precision="bf16")` and run on our simulator.
* `ideal`: the busy cycles of SCALE-Sim's own mapping in our timing model (`T * folds`:
  every fold streams the T output rows once), so `compiled / ideal` is the compiler's mapping
  and `ideal / scalesim` is the timing model.
* `serial` / `pipelined`: our simulator running a hand-built program of SCALE-Sim's mapping
  (one `mx.loadw` + `mx.matmul` of T rows per fold, `timing_model_program`): cycles.
  `serial` makes SCALE-Sim's assumptions (each fold's weights load after the previous fold has
  drained, one weight row per cycle: `matrix.weight_load_bytes_per_cycle` = cols x 2 bytes);
  `serial_wpath` keeps the config's weight path; `pipelined` runs it as the ISA does
  (double-buffered weights, back-to-back matmuls pipelined).

Differences are (ours - scalesim) / scalesim. A batched matmul (attention heads) counts all
heads: SCALE-Sim runs each head as a layer, our compiled program runs them all.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infer.target import isa
from infer.target.asm import Builder

BF16 = isa.DTYPE_CODE["bf16"]


# ----------------------------------------------------------------------------- layers
@dataclass(frozen=True)
class Layer:
    """One conv or GEMM shape in SCALE-Sim's im2col view: T output rows (pixels or tokens)
    stream through the array, K (the conv window KH*KW*Cin, or the GEMM depth) maps onto its
    rows, N (filters or output features) onto its columns; `count` identical instances
    (attention heads) run one after another."""

    name: str
    T: int
    K: int
    N: int
    count: int = 1
    # conv: (cin, h, w, cout, kh, kw, stride, pad); None for a GEMM
    conv: tuple[int, int, int, int, int, int, int, int] | None = None
    runtime_rhs: bool = False  # both GEMM operands are model inputs (attention)

    @property
    def dims(self) -> str:
        if self.conv:
            cin, h, w, cout, kh, kw, s, p = self.conv
            return f"{cin}x{h}x{w}->{cout} {kh}x{kw}/{s}"
        return f"{self.T}x{self.K}x{self.N}" + (f" x{self.count}" if self.count > 1 else "")


def conv_layer(name: str, cin: int, h: int, w: int, cout: int, k: int, stride: int, pad: int) -> Layer:
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    return Layer(name, oh * ow, k * k * cin, cout, conv=(cin, h, w, cout, k, k, stride, pad))


def resnet50_layers() -> list[Layer]:
    """The distinct conv shapes of the zoo's ResNet-50 (in network order) and its classifier."""
    import onnx

    from infer.tools.zoo import build_resnet50_onnx

    with tempfile.TemporaryDirectory() as tmp:
        model = onnx.load(str(build_resnet50_onnx(Path(tmp) / "resnet50.onnx")))
    model = onnx.shape_inference.infer_shapes(model)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in (*model.graph.input, *model.graph.value_info, *model.graph.output)}
    shapes.update({t.name: list(t.dims) for t in model.graph.initializer})
    seen: dict[tuple[int, ...], Layer] = {}
    for node in model.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv":
            _, cin, h, w = shapes[node.input[0]]
            cout, _, kh, kw = shapes[node.input[1]]
            stride, pad = attrs.get("strides", [1, 1])[0], attrs.get("pads", [0] * 4)[0]
            assert kh == kw and attrs.get("group", 1) == 1 and len(set(attrs.get("pads", [0]))) == 1
            key = (cin, h, w, cout, kh, stride, pad)
            if key not in seen:
                seen[key] = conv_layer(f"r50.conv{len(seen)}", cin, h, w, cout, kh, stride, pad)
        elif node.op_type == "Gemm":
            n, k = shapes[node.input[1]] if attrs.get("transB", 0) else shapes[node.input[1]][::-1]
            seen[("fc",)] = Layer("r50.fc", shapes[node.input[0]][0], k, n)
    return list(seen.values())


def transformer_layers() -> list[Layer]:
    """BERT-base (hidden 768, 12 heads of 64, FFN 3072) at sequence 128, and a Llama-style block
    (hidden 512, 8 query / 2 KV heads of 64, SwiGLU FFN 1536) at sequence 512: projections, FFN
    GEMMs, and per head the score (q k^T) and context (p v) matmuls."""
    layers = [Layer("bert.qkvo_proj", 128, 768, 768), Layer("bert.ffn_up", 128, 768, 3072),
              Layer("bert.ffn_down", 128, 3072, 768),
              Layer("bert.scores", 128, 64, 128, 12, runtime_rhs=True),
              Layer("bert.context", 128, 128, 64, 12, runtime_rhs=True)]
    layers += [Layer("llama.qo_proj", 512, 512, 512), Layer("llama.kv_proj", 512, 512, 128),
               Layer("llama.gate_up", 512, 512, 1536), Layer("llama.down", 512, 1536, 512),
               Layer("llama.scores", 512, 64, 512, 8, runtime_rhs=True),
               Layer("llama.context", 512, 512, 64, 8, runtime_rhs=True)]
    return layers


# ----------------------------------------------------------------------------- SCALE-Sim
def scalesim_cycles(layer: Layer, rows: int, cols: int) -> int:
    """SCALE-Sim's compute cycles of one instance of `layer` on a rows x cols array.

    Drives SCALE-Sim's own classes: `topologies` (the layer as its conv topology row; a GEMM as
    its GEMM loader writes one, M x K ifmap with a 1 x K filter), `operand_matrix` (the im2col
    address matrices) and `systolic_compute_ws`, whose demand matrices hold one row per
    cycle of the array (weight fill, streaming, skew and drain of every fold). SCALE-Sim's
    memory simulation replays those rows one per cycle plus memory stalls; it is not run here:
    with a large enough SRAM the stalls are 0 (its 3.0.0 report code also fails on numpy >= 2).
    SCALE-Sim has no padding: a padded conv is given the padded input extent that yields the
    same output size ((OH - 1) * stride + KH)."""
    from scalesim.compute.operand_matrix import operand_matrix
    from scalesim.compute.systolic_compute_ws import systolic_compute_ws
    from scalesim.layout_utils import layouts
    from scalesim.scale_config import scale_config
    from scalesim.topology_utils import topologies

    cfg = scale_config()
    cfg.set_arr_dims(rows, cols)
    cfg.set_dataflow("ws")
    cfg.force_valid()
    if layer.conv:
        cin, h, w, cout, kh, kw, s, p = layer.conv
        oh, ow = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
        entry = [layer.name, (oh - 1) * s + kh, (ow - 1) * s + kw, kh, kw, cin, cout, s, s, 1, 1]
    else:
        entry = [layer.name, layer.T, layer.K, 1, layer.K, 1, layer.N, 1, 1, 1, 1]
    topo = topologies()
    topo.load_layer_params_from_list(layer.name, entry)
    ops = operand_matrix()
    ops.set_params(config_obj=cfg, topoutil_obj=topo, layoututil_obj=layouts(), layer_id=0)
    ops.create_operand_matrices()
    ifmap, filt, ofmap = ops.ifmap_addr_matrix, ops.filter_addr_matrix, ops.ofmap_addr_matrix
    assert ifmap.shape == (layer.T, layer.K) and filt.shape == (layer.K, layer.N), (layer, ifmap.shape)
    compute = systolic_compute_ws()
    compute.set_params(config_obj=cfg, ifmap_op_mat=ifmap, filter_op_mat=filt, ofmap_op_mat=ofmap)
    demands = compute.get_demand_matrices()
    return max(d.shape[0] for d in demands)


# ----------------------------------------------------------------------------- our timing model
def folds(layer: Layer, rows: int, cols: int) -> int:
    """Weight tiles of SCALE-Sim's ws mapping: ceil(K / rows) x ceil(N / cols), per instance."""
    return math.ceil(layer.K / rows) * math.ceil(layer.N / cols)


def timing_model_program(layer: Layer, cfg, serial: bool):
    """A program of SCALE-Sim's ws mapping for our ISA: per fold one `mx.loadw` (k x n weight
    tile, k <= rows, n <= cols) and the T rows streamed by `mx.matmul`s (in chunks the scratchpad
    and accumulator hold; back-to-back chunks with the same weights cost the same as one). Data
    is not meaningful (addresses are reused): this measures the timing model only. `serial`
    makes each weight load wait for the previous fold's last matmul to complete (drain),
    which is SCALE-Sim's per-fold assumption; otherwise folds overlap as the ISA allows."""
    R, C = cfg.matrix.rows, cfg.matrix.cols
    mem = cfg.memory
    chunk = min(layer.T, mem.accumulator_bytes // (C * 4), (mem.scratchpad_bytes - R * C * 2) // (R * 2))
    k_tiles = [(R, layer.K // R), (layer.K % R, 1)]
    n_tiles = [(C, layer.N // C), (layer.N % C, 1)]
    b = Builder()
    if serial:
        b.nop(signal=1)  # the first fold's weights need not wait
    for n, n_count in n_tiles:
        for k, k_count in k_tiles:
            if not (n and k and n_count and k_count):
                continue
            with b.loop(count=n_count * k_count * layer.count):
                b.mx_loadw(w=0, k=k, n=n, stride=n * 2, dtype=BF16, wait=1 if serial else 0)
                left = layer.T
                while left:
                    m = min(chunk, left)
                    left -= m
                    b.mx_matmul(act=R * C * 2, acc=isa.ACC_BASE, m=m, astride=k * 2, cstride=n * 4,
                                dtype=BF16, accum=1, signal=1 if serial and not left else 0)
    b.halt()
    return b.program()


def scalesim_weight_path(cfg):
    """The config with SCALE-Sim's weight fill: one row of bf16 weights per cycle."""
    import dataclasses

    return dataclasses.replace(cfg, matrix=dataclasses.replace(
        cfg.matrix, weight_load_bytes_per_cycle=cfg.matrix.cols * 2))


def timing_model_cycles(layer: Layer, cfg, serial: bool) -> tuple[int, int]:
    """(matrix busy cycles, total cycles) of `timing_model_program` on our simulator."""
    from infer.target.sim import ENGINES, Simulator

    counters = Simulator(cfg).run(timing_model_program(layer, cfg, serial))
    return counters.busy[ENGINES.index("matrix")], counters.cycles


# ----------------------------------------------------------------------------- compiled layer
def onnx_model(layer: Layer, seed: int = 0):
    """The layer alone as an ONNX model (conv without bias; MatMul with a weight, or of two
    inputs for the attention matmuls, heads as a batch dimension)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def tensor(name: str, shape: list[int]):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    inits = []
    if layer.conv:
        cin, h, w, cout, kh, kw, s, p = layer.conv
        oh, ow = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
        wt = rng.standard_normal((cout, cin, kh, kw)).astype(np.float32) / math.sqrt(cin * kh * kw)
        inits.append(numpy_helper.from_array(wt, "w"))
        node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[kh, kw], strides=[s, s], pads=[p] * 4)
        ins, out = [tensor("x", [1, cin, h, w])], tensor("y", [1, cout, oh, ow])
    elif layer.runtime_rhs:
        node = helper.make_node("MatMul", ["a", "b"], ["y"])
        ins = [tensor("a", [1, layer.count, layer.T, layer.K]), tensor("b", [1, layer.count, layer.K, layer.N])]
        out = tensor("y", [1, layer.count, layer.T, layer.N])
    else:
        wt = rng.standard_normal((layer.K, layer.N)).astype(np.float32) / math.sqrt(layer.K)
        inits.append(numpy_helper.from_array(wt, "w"))
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        ins, out = [tensor("x", [layer.T, layer.K])], tensor("y", [layer.T, layer.N])
    graph = helper.make_graph([node], layer.name.replace(".", "_"), ins, [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def compiled_cycles(layer: Layer, target: str) -> tuple[int, int]:
    """(matrix busy cycles, total cycles) of the layer compiled alone (bf16) and simulated."""
    import infer

    exe = infer.compile(onnx_model(layer), target=target, precision="bf16")
    rng = np.random.default_rng(1)
    exe.run([rng.standard_normal(s.shape).astype(np.float32) for s in exe.artifact.inputs], trace=False)
    rep = exe.last_report
    return rep.counters.busy_by_engine()["matrix"], rep.cycles


# ----------------------------------------------------------------------------- comparison
@dataclass
class Row:
    layer: str
    dims: str
    T: int
    K: int
    N: int
    count: int
    folds: int  # SCALE-Sim ws weight tiles, all instances
    scalesim: int
    ideal: int  # T * folds: busy cycles of SCALE-Sim's mapping in our timing model
    serial: int  # our simulator, SCALE-Sim's mapping and assumptions
    serial_wpath: int  # ... with the config's weight path
    pipelined: int  # ... as the ISA runs it
    compiled: int
    compiled_total: int = 0  # all cycles of the compiled layer (DMA included), for context

    @property
    def diff(self) -> float:  # compiled busy vs SCALE-Sim: the headline
        return pct(self.compiled, self.scalesim)

    @property
    def mapping(self) -> float:  # the compiler's mapping vs SCALE-Sim's mapping, same timing model
        return pct(self.compiled, self.ideal)

    @property
    def overhead(self) -> float:  # SCALE-Sim's per-fold fill/drain + weight load (ideal vs scalesim)
        return pct(self.ideal, self.scalesim)

    @property
    def timing(self) -> float:  # our simulator, same mapping, SCALE-Sim's assumptions
        return pct(self.serial, self.scalesim)

    @property
    def time(self) -> float:  # our simulator, same mapping, as the ISA runs it
        return pct(self.pipelined, self.scalesim)


def pct(ours: float, ref: float) -> float:
    return 100.0 * (ours - ref) / ref


def compare(layer: Layer, target: str) -> Row:
    from infer.target.hw import load_config

    cfg = load_config(target)
    R, C = cfg.matrix.rows, cfg.matrix.cols
    ss = scalesim_cycles(layer, R, C) * layer.count
    ideal_busy, serial = timing_model_cycles(layer, scalesim_weight_path(cfg), serial=True)
    busy2, serial_wpath = timing_model_cycles(layer, cfg, serial=True)
    busy3, pipelined = timing_model_cycles(layer, cfg, serial=False)
    f = folds(layer, R, C) * layer.count
    assert ideal_busy == busy2 == busy3 == layer.T * f * cfg.matrix.cycles_per_row, (layer, ideal_busy)
    compiled, total = compiled_cycles(layer, target)
    return Row(layer.name, layer.dims, layer.T, layer.K, layer.N, layer.count, f, ss, ideal_busy, serial,
               serial_wpath, pipelined, compiled, total)


def summary(rows: list[Row], attr: str) -> tuple[float, float, str]:
    """(median, worst, worst layer) of a difference column (worst = largest magnitude)."""
    vals = [getattr(r, attr) for r in rows]
    worst = max(rows, key=lambda r: abs(getattr(r, attr)))
    return statistics.median(vals), getattr(worst, attr), worst.layer


def table(rows: list[Row], target: str, cfg) -> str:
    mc = cfg.matrix
    head = (f"{'layer':<16} {'dims':<22} {'folds':>6} {'SCALE-Sim':>9} {'compiled':>9} {'diff':>8} | "
            f"{'ideal':>9} {'mapping':>8} {'overhead':>8} | {'serial':>9} {'timing':>7} {'wpath':>9} "
            f"{'pipelined':>9} {'time':>7}")
    lines = [f"== {target}: {mc.rows}x{mc.cols} array, weight-stationary, bf16 (fill_drain {mc.fill_drain_cycles}, "
             f"a full weight tile loads in {math.ceil(mc.rows * mc.cols * 2 / mc.weight_load_bytes_per_cycle)} "
             f"cycles; SCALE-Sim: {mc.rows} + {mc.rows + mc.cols - 2} cycles per fold)", head, "-" * len(head)]
    for r in rows:
        dims = r.dims if len(r.dims) <= 22 else f"{r.T}x{r.K}x{r.N}"
        lines.append(f"{r.layer:<16} {dims:<22} {r.folds:>6} {r.scalesim:>9} {r.compiled:>9} {r.diff:>+7.1f}% | "
                     f"{r.ideal:>9} {r.mapping:>+7.1f}% {r.overhead:>+7.1f}% | {r.serial:>9} {r.timing:>+6.1f}% "
                     f"{r.serial_wpath:>9} {r.pipelined:>9} {r.time:>+6.1f}%")
    for attr, what in (("diff", "compiled busy vs SCALE-Sim"),
                       ("mapping", "compiled busy vs ideal busy of SCALE-Sim's mapping (compiler mapping)"),
                       ("overhead", "ideal busy vs SCALE-Sim (SCALE-Sim's per-fold weight fill, skew and drain)"),
                       ("timing", "our simulator, SCALE-Sim's mapping and assumptions, vs SCALE-Sim"),
                       ("time", "our simulator, SCALE-Sim's mapping as the ISA runs it, vs SCALE-Sim")):
        med, worst, name = summary(rows, attr)
        lines.append(f"  {what}: median {med:+.1f}%, worst {worst:+.1f}% ({name})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from infer.target.hw import load_config

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", action="append", choices=["edge", "server"],
                    help="array(s) to compare (default: both)")
    ap.add_argument("--only", action="append", default=[], help="layer name prefix(es) to keep")
    ap.add_argument("--json", help="write every row as JSON")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    layers = resnet50_layers() + transformer_layers()
    if args.only:
        layers = [lay for lay in layers if any(lay.name.startswith(p) for p in args.only)]
    doc: dict[str, Any] = {}
    for target in args.target or ["edge", "server"]:
        rows = []
        for lay in layers:
            rows.append(compare(lay, target))
            print(f"[{time.perf_counter() - t0:6.1f} s] {target} {lay.name}", file=sys.stderr, flush=True)
        print(table(rows, target, load_config(target)), flush=True)
        print()
        doc[target] = [{**asdict(r), **{k: getattr(r, k) for k in ("diff", "mapping", "overhead", "timing", "time")}}
                       for r in rows]
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
