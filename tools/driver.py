"""The compile driver: a model or graph IR in, an `infer.runtime.Executable` out.

    exe = compile(source, target="edge", precision="fp32")   # import -> compile-npu -> artifact
    exe = load("model.npu")                                  # an artifact, ready to run and to check

Every caller goes through here: the command line (`infer compile`, `infer run`:
tools/compile_cmds.py), the Python API (`infer.compile`, `infer.load`) and the ONNX NPU backend
(tools/onnx_backend.py). The driver sits above frontend/, passes/ and runtime/ and imports no
command-line module; its errors are `DriverError`, `IRError` and the like, one line each.

`compile`:
1. the graph-level module: imported (`infer.import_model`: .onnx, .pt2, Hugging Face folder,
   onnx.ModelProto, torch module, ...), parsed (.mlir) or given (`infer.Model`, ModuleOp);
2. its signature (names, shapes, dtypes) and the graph IR itself (the reference for the
   outputs in `check`) with its weights;
3. the `compile-npu{target precision}` pipeline on a clone (the caller's module is left as it
   is; the clone keeps the weights, see dialects/weights.py), run through xDSL's
   `PassPipeline` so the driver hears about every stage through its callback: it reports
   progress and captures the graph IR just before graph-to-tile (one top-level op per
   kernel, the op index being the `layer` the op markers name) as the per-layer reference;
   its last stage, tile-to-npu, runs on its own (`TileToNpuPass.lower`, once per entry point):
   the program, layout and markers are packaged as the pass computes them, not built into
   npu ops and read back;
4. the artifact: program, DRAM layout (`npu.layout`, the contract of target/layout.py, as
   JSON), op markers, the weights the program reads, the hardware config's TOML, and the
   two graph IRs; it is serialised once and validated as a loader validates it.

`load` and `compile` return Executables holding a `GraphReference` (tools/reference.py), so
`exe.check(inputs)` works; `infer.runtime.load` alone gives Executables that run but cannot
check (the reference interpreter is compiler code).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np

from infer.runtime.artifact import Artifact, TensorSpec, dtype_name, save_safetensors
from infer.runtime.executable import Executable
from infer.tools.opt_pipeline import Node, TimePasses, expand
from infer.tools.entries import (EntryError, entry_aliases, function_names, keep_functions, lower_entries,
                                 select_entries, share_identical_weights)
from infer.tools.progress import ConsoleProgress
from infer.tools.reference import GraphReference

Progress = Callable[[str], None]


class DriverError(Exception):
    """Bad input for the compile driver (one line)."""


def progress_printer(enabled: bool = True) -> ConsoleProgress:
    """`say(msg)`: `[  1.23 s] msg` on stderr (seconds since this call), with a live status line
    on a terminal (tools/progress.py; `close()` it, or use it as a context manager), or nothing."""
    return ConsoleProgress(enabled)


class CompileTiming:
    """Where one `compile` spends its wall time, reported like mlir-opt's `--mlir-timing`
    (`infer-opt --time-passes`, the same report): the import, every pass of compile-npu as a
    tree (named pipelines with their stages), then the other phases: the graph reference
    IR (printed for `check`), the per-layer reference IR, packaging the artifact and loading it
    back to validate it. `infer compile --timing` prints it."""

    def __init__(self) -> None:
        self.timer = TimePasses(leading=("import",), cpu=True)
        self.roots: list[Node] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start, start_cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.timer.add(name, time.perf_counter() - start, time.process_time() - start_cpu)

    def seconds(self, cpu: bool = False) -> dict[str, float]:
        """Wall (or CPU) seconds per leaf pass (by name, repeats summed) and per other phase."""
        out: dict[str, float] = dict(self.timer.extra_cpu if cpu else self.timer.extra)

        def visit(node: Node) -> None:
            if node.children:
                for child in node.children:
                    visit(child)
            else:
                out[node.name] = out.get(node.name, 0.0) + (node.cpu_seconds if cpu else node.seconds)

        for root in self.roots:
            visit(root)
        return out

    def report(self, stream: IO[str]) -> None:
        self.timer.report(self.roots, stream)


def parse_input_shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`["input=1x3x224x224", ...]` (the `--input-shape` form) -> {name: shape}."""
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.split("x")) if dims else ()
        except ValueError:
            raise DriverError(f"--input-shape '{spec}': expected NAME=DxDxD, e.g. input=1x3x224x224") from None
    return shapes


# ---------------------------------------------------------------------------------- sources
def graph_module(source: Any, example_inputs: Any = None, **import_options: Any):
    """source -> the graph-level ModuleOp (imported, parsed, or the one given), with its weights."""
    from xdsl.dialects.builtin import ModuleOp

    from infer.frontend import Model, import_model

    if isinstance(source, Model):
        return source.module
    if isinstance(source, ModuleOp):
        return source
    if isinstance(source, str | Path) and str(source).endswith(".mlir"):
        from infer.dialects.ir_io import check_weights_present, load_ir_file

        module = load_ir_file(source)
        check_weights_present(module)
        return module
    return import_model(source, example_inputs, **import_options).module


def signature(module, entry: str = "main") -> dict[str, list[TensorSpec]]:
    """The artifact's signature of function `entry`: {inputs, outputs} (static shapes only)."""
    from xdsl.dialects.builtin import TensorType

    from infer.dialects.dtypes import to_numpy_dtype
    from infer.dialects.signature import entry_function, function_signature, output_names

    names, specs = function_signature(module, entry)
    inputs = [TensorSpec(n, tuple(s), dtype_name(d)) for n, (s, d) in zip(names, specs, strict=True)]
    results = entry_function(module, entry).function_type.outputs.data
    outputs = []
    for n, t in zip(output_names(module, len(results), entry), results, strict=True):
        if not isinstance(t, TensorType):
            raise DriverError(f"function @{entry}: result '{n}' is not a tensor ({t})")
        outputs.append(TensorSpec(n, tuple(t.get_shape()), dtype_name(to_numpy_dtype(t.get_element_type()))))
    for s in inputs + outputs:
        if any(d < 0 for d in s.shape):
            raise DriverError(f"'{s.name}' has a dynamic shape {list(s.shape)}: compile needs static shapes "
                              "(use --input-shape / input_shapes=)")
    return {"inputs": inputs, "outputs": outputs}


# ---------------------------------------------------------------------------------- compile
def compile(source: Any, target: str = "edge", precision: str = "fp32", *, entry: str | Sequence[str] | None = None,
            example_inputs: Any = None, progress: bool | Progress = False, graph_passes: str = "",
            calibration: Any = None, min_cosine: float | None = None, calibration_method: str | None = None,
            timing: CompileTiming | None = None, autotune: int = 0, autotune_cache: str = "",
            **import_options: Any) -> Executable:
    """Import (if needed) and compile for the accelerator -> `infer.runtime.Executable`.

    source: a model path (.onnx/.pt2/HF folder), a graph-level `.mlir` path, an
    `infer.Model`, a ModuleOp, an onnx.ModelProto, a torch module (+example_inputs)...
    target: "edge", "server" or a TOML path. precision: "fp32" (3-pass bf16
    emulation), "bf16", or "int8": graph-level int8 quantization first (`infer.quantize`
    with `calibration` (.npz samples or a .json table), `min_cosine`, `calibration_method`;
    the per-layer choice is reported through `progress`), then the lowering. progress: True
    prints each stage with a timestamp on stderr; a callable hears the same messages.
    graph_passes: a pass pipeline run on the graph-level module first (`-p` syntax; infer's
    passes and plugins). timing: a CompileTiming that records where the time goes.
    autotune: 0 (off) or N: each distinct linear/matmul/conv/attention kernel's top N tilings are
    simulated (timing mode) and the fastest kept, cached in `autotune_cache` ("": the default,
    $XDG_CACHE_HOME/infer/autotune; docs/tiling.md "Autotuning"); the whole program is then
    compared with the cost model's in timing mode and the faster kept (`_whole_program_check`).
    entry: the function(s) to compile: a name, a list of names, or None (default: @main when
    the module has one, else every function). Several functions give ONE artifact with one
    entry point each, sharing the weights (tools/entries.py); the Executable runs the first,
    `exe.artifact.for_entry(NAME)` / `infer.runtime.DeviceSession` the others."""
    if callable(progress):
        return _compile(source, target, precision, entry, example_inputs, progress, graph_passes,
                        calibration, min_cosine, calibration_method, timing or CompileTiming(),
                        import_options, autotune, autotune_cache)
    with progress_printer(progress) as say:
        return _compile(source, target, precision, entry, example_inputs, say, graph_passes,
                        calibration, min_cosine, calibration_method, timing or CompileTiming(),
                        import_options, autotune, autotune_cache)


def _compile(source: Any, target: str, precision: str, entry: Any, example_inputs: Any, say: Progress,
             graph_passes: str, calibration: Any, min_cosine: float | None, calibration_method: str | None,
             timing: CompileTiming, import_options: dict[str, Any], autotune: int = 0,
             autotune_cache: str = "") -> Executable:
    from infer.dialects.weights import weights_of
    from infer.passes.tile_to_npu.semaphores import OutOfSemaphores
    from infer.target.hw import config_path, load_config

    cfg = load_config(target)
    toml_text = config_path(target).read_text()
    if precision not in PRECISIONS:
        raise DriverError(f"precision must be one of {', '.join(PRECISIONS)}, got '{precision}'")
    if precision != "int8" and (calibration is not None or min_cosine is not None):
        raise DriverError("calibration data and a cosine target apply to --precision int8 only")
    say(f"importing {source if isinstance(source, str | Path) else type(source).__name__}")
    with timing.phase("import"):
        graph = graph_module(source, example_inputs, **import_options)
    try:
        entries = select_entries(graph, entry)
    except EntryError as e:
        raise DriverError(str(e)) from None
    entry = entries[0]
    if precision == "int8" and not (calibration is None and _is_quantized(graph)):
        if len(entries) > 1:
            raise DriverError("--precision int8 compiles one entry point; choose it with --entry")
        with timing.phase("int8 quantization"):
            graph = _quantized(graph, calibration, min_cosine, calibration_method, entry, say)
    elif precision == "int8" and _has_qdq(graph):
        _require_float_boundary(graph, entry)
        with timing.phase("int8 kernels of a QDQ model"):
            graph = _integer_kernels(graph, say)
    with timing.phase("graph reference IR"):
        require_npu_lowering(graph)
        sigs = {e: signature(graph, e) for e in entries}
        graph_ir, graph_weights = _reference_parts(graph)
        graph_store = weights_of(graph)
    if autotune < 0:
        raise DriverError(f"autotune must be 0 (off) or the number of candidates to simulate, got {autotune}")
    # A kernel tile-to-npu cannot fit in the semaphores at its last degrade level is lowered
    # again with the override graph-to-tile gave it for that (`tile.semaphore_fallback`: an
    # attention with fewer heads interleaved), and the whole pipeline runs again
    overrides = ""
    while True:
        started = time.perf_counter(), time.process_time()
        try:
            module, main_program, compiled, layer_ir, layer_weights = _lower(
                graph, graph_store, entries, target, precision, graph_passes, autotune, autotune_cache,
                overrides, timing, say)
            break
        except OutOfSemaphores as e:
            applied = set(overrides.split(","))
            if not e.fallback_overrides or applied.issuperset(e.fallback_overrides):
                raise  # (no fallback, or only ones already taken: lowering again would not change)
            timing.timer.add("lowering that ran out of semaphores", time.perf_counter() - started[0],
                             time.process_time() - started[1])
            overrides = ",".join(filter(None, (overrides, *e.fallback_overrides)))
            say(f"out of semaphores: lowering again with {', '.join(e.fallback_overrides)}")
    if autotune and main_program is not None:
        if isinstance(say, ConsoleProgress) and say.total is not None:
            say.expect(say.total - say.steps + 2)  # (the check's two messages)
        with timing.phase("autotuning: the whole program against the cost model's"):
            module, main_program, compiled, layer_ir, layer_weights = _whole_program_check(
                (module, main_program, compiled, layer_ir, layer_weights), cfg,
                lambda: _lower(graph, graph_store, entries, target, precision, graph_passes, 0, "",
                               overrides, CompileTiming(), lambda message: None), say)

    say("packaging the artifact")
    with timing.phase("packaging"):
        exe = _package(module, sigs, compiled, cfg, toml_text, precision, source, graph_ir, graph_weights,
                       layer_ir, layer_weights, _artifact_meta(graph), main_program)
    say(f"compiled: {len(exe.program)} instructions"
        + (f" (@{entry}; {len(entries)} entry points: {', '.join('@' + e for e in entries)})" if len(entries) > 1 else "")
        + f", {exe.layout.total_bytes} bytes of DRAM")
    return exe


def whole_program_cycles(program: Any, cfg: Any) -> int | None:
    """The program's cycles in the simulator's timing mode (no data), or None where its timing
    needs data (a loop count that `ld` reads: the fault the timing engine raises then)."""
    from infer.target.sim import Simulator
    from infer.target.sim_core import SimFault

    try:
        return Simulator(cfg).run(program, None, mode="timing").cycles
    except SimFault:
        return None


def _whole_program_check(tuned: tuple, cfg: Any, lower_untuned: Callable[[], tuple], say: Progress) -> tuple:
    """Autotuning picks each kernel's tiling on that kernel alone, where the epilogue the next
    kernel waits on, the loads ahead of it and the overlap with its neighbours are measured in
    part (ResNet-50 on server, bf16, autotune=4: 380,984 cycles against 356,386 with the cost
    model's tilings). So the whole program is lowered again with the cost model's tilings and
    both run in timing mode: the faster is kept (the autotuned one on a tie, or where either's
    timing needs data)."""
    from infer.passes.tile_to_npu.semaphores import OutOfSemaphores

    tuned_cycles = whole_program_cycles(tuned[1], cfg)
    if tuned_cycles is None:
        return tuned
    say("autotuning: lowering the model again with the cost model's tilings, to compare the whole programs")
    try:
        untuned = lower_untuned()
    except OutOfSemaphores:
        return tuned
    untuned_cycles = whole_program_cycles(untuned[1], cfg)
    if untuned_cycles is None:
        return tuned
    if tuned_cycles <= untuned_cycles:
        say(f"autotuned: {tuned_cycles:,} cycles against {untuned_cycles:,} with the cost model's tilings")
        return tuned
    say(f"autotuned: {tuned_cycles:,} cycles against {untuned_cycles:,} with the cost model's tilings: "
        "keeping the cost model's")
    return untuned


def _lower(graph, graph_store, entries: list[str], target: str, precision: str, graph_passes: str, autotune: int,
           autotune_cache: str, overrides: str, timing: CompileTiming, say: Progress) -> tuple:
    """compile-npu on a copy of the graph module -> (the module, the first entry's Program or
    None, the compiled entries, the per-layer reference IR and weights)."""
    from xdsl.passes import ModulePass, PassPipeline

    from infer.dialects.ir_io import make_context
    from infer.passes.graph_to_tile import GraphToTilePass
    from infer.passes.pipelines_npu import CompileNpuPass
    from infer.passes.tile_memory_plan import TilePlanMemoryPass
    from infer.passes.tile_to_npu.driver import TileToNpuPass

    entry = entries[0]
    with timing.phase("graph reference IR"):
        module = graph.clone()  # keeps the weights; what the passes add or replace stays the clone's
        if len(function_names(module)) > 1:
            keep_functions(module, entries)  # functions not compiled are not lowered either
    layer_parts: list[tuple[str, bytes | None]] = []

    # The stages of compile-npu with its named pipelines expanded, so each pass is timed and
    # reported on its own (the same passes in the same order as running the pipelines).
    pipeline = CompileNpuPass(target=str(target), precision=precision, graph_passes=graph_passes,
                              autotune=autotune, autotune_cache=str(autotune_cache or ""), overrides=overrides)
    pipeline.passes()  # (bad options: the pipeline's own error, before anything runs)
    stages, timing.roots = expand([pipeline])
    # tile-to-npu runs last and on its own: its program, layout and markers are packaged as they
    # are (`TileToNpuPass.lower`), not as npu ops read back; with several entry points it runs
    # once per entry
    lowering = stages[-1]
    assert isinstance(lowering.pass_, TileToNpuPass)
    stages = stages[:-1]
    per_entry = lowering if len(entries) > 1 else None
    if isinstance(say, ConsoleProgress):
        say.expect(len(stages) + 2)
    ran = 0  # stages done
    single_aliases: dict[str, str] = {}
    started, started_cpu = time.perf_counter(), time.process_time()

    def between(done: ModulePass | None, op, upcoming: ModulePass | None) -> None:
        nonlocal ran, started, started_cpu
        if done is not None:
            node = stages[ran].node
            node.seconds += time.perf_counter() - started
            node.cpu_seconds += time.process_time() - started_cpu
            ran += 1
        if isinstance(upcoming, GraphToTilePass):  # the graph IR it lowers: one top-level op per
            with timing.phase("layer reference IR"):  # kernel, the per-layer reference
                layer_parts.append(_reference_parts(op, graph_store))
        if per_entry is not None and isinstance(upcoming, TilePlanMemoryPass):  # before the weights get offsets
            share_identical_weights(op)
        if upcoming is not None:  # e.g. "pass graph-prepare-tiling > graph-optimize > graph-dce"
            say("pass " + " > ".join((*stages[ran].path[1:], upcoming.name)))
        started, started_cpu = time.perf_counter(), time.process_time()

    ctx = make_context()
    PassPipeline(tuple(stage.pass_ for stage in stages), callback=between).apply(ctx, module)
    layer_ir, layer_weights = layer_parts[0] if layer_parts else (None, None)
    if per_entry is None:
        say("pass " + " > ".join((*lowering.path[1:], lowering.pass_.name)))
        single_aliases.update(entry_aliases(module, entry))  # outputs updated in place
        started, started_cpu = time.perf_counter(), time.process_time()
        main_program, *parts = _lowered_program(lowering.pass_, module)
        compiled = [(entry, *parts, single_aliases)]
    else:
        main_program = None
        say(f"pass {per_entry.pass_.name}, once per entry point: {', '.join('@' + e for e in entries)}")
        started, started_cpu = time.perf_counter(), time.process_time()
        compiled = lower_entries(module, entries, str(target), _lowered_parts)
    lowering.node.seconds += time.perf_counter() - started
    lowering.node.cpu_seconds += time.process_time() - started_cpu
    return module, main_program, compiled, layer_ir, layer_weights


def _artifact_meta(graph) -> dict[str, Any]:
    """What the runtime needs to know of the graph module: a paged import's cache geometry
    (`infer.paged_kv`: block size, ...) for the device executor."""
    from infer.dialects.npu_attrs import attr_to_json

    attr = graph.attributes.get("infer.paged_kv")
    return {"paged_kv": attr_to_json(attr)} if attr is not None else {}


def _package(module, sigs, compiled, cfg, toml_text: str, precision: str, source: Any, graph_ir: str,
             graph_weights: bytes | None, layer_ir: str | None, layer_weights: bytes | None,
             meta: dict[str, Any], main_program: Any = None) -> Executable:
    """The compiled entry points -> an artifact (one weights section: the weights every entry
    reads), serialised (the bytes `save` writes) and validated as a loader would.
    `main_program`: the first entry's Program its bytes encode (not decoded again)."""
    from infer.dialects.weights import weights_of
    from infer.runtime.artifact import EntryPoint

    store = weights_of(module)
    names = sorted({w["name"] for _, _, layout, _, _ in compiled for w in layout.get("weights") or []})
    weights = save_safetensors({n: np.asarray(store.get(n)) for n in names})
    (entry, program, layout, ops, aliases), *others = compiled
    art = Artifact(program=program, weights=weights, signature=sigs[entry], layout=layout,
                   target_name=cfg.name, target_toml=toml_text, precision=precision, entry=entry,
                   source=str(source) if isinstance(source, str | Path) else type(source).__name__,
                   ops=ops, graph_ir=graph_ir, graph_weights=graph_weights, layer_ir=layer_ir,
                   layer_weights=layer_weights, aliases=aliases, meta=meta,
                   entries=[EntryPoint(e, p, sigs[e], lay, o, a) for e, p, lay, o, a in others])
    # serialised once (what `save` writes: the artifact keeps its parts), and validated as a
    # loader would by Executable (Artifact.validate: program, config, layout, signature and
    # weights agree), on the Program the compiler encoded (not decoded again). Not parsed back
    # from those bytes: a copy of every section (~200 MB for ResNet-50) and a second validation
    # for an artifact equal to this one (the header is JSON of JSON-born values: the layout and
    # markers come from attr_to_json)
    art.encode()
    if main_program is not None:
        art.known_decoding(main_program)
    return Executable(art, reference=GraphReference())


PRECISIONS = ("fp32", "bf16", "int8")


def _quantized(graph, calibration: Any, min_cosine: float | None, method: str | None, entry: str, say: Progress):
    """The int8 graph-level module (infer.quantize), the per-layer choice reported."""
    from infer.tools.quantize import quantize

    if calibration is None:
        raise DriverError("--precision int8 needs calibration data: --calibration CALIB.npz (samples keyed by "
                          "input name, leading sample axis) or a table from `infer calibrate` (.json)")
    qmodel, report = quantize(graph, calibration, min_cosine=min_cosine, method=method, entry=entry, progress=say)
    say("int8 quantization, per layer (float layers run as float kernels):\n" + report.table())
    return qmodel.module


def _is_quantized(module) -> bool:
    """Whether a graph module is quantized already (an `infer quantize` output, a QDQ or
    QOperator import, a `quantize_dynamic` model: frontend/onnx_qoperator.py)."""
    from infer.dialects import graph as g
    from infer.frontend.onnx_qoperator import DYNAMIC_QUANTIZATION_ATTR

    if DYNAMIC_QUANTIZATION_ATTR in module.attributes:
        return True
    return any(isinstance(op, (*g.QUANTIZATION_OPS, *g.INTEGER_KERNEL_OPS)) for op in module.walk())


def _has_qdq(module) -> bool:
    """Whether a quantized module still has `graph.quantize_linear` ops: a QDQ model as
    imported (onnxruntime's `quantize_static`), not yet in the integer-kernel form that
    `infer.quantize` writes."""
    from infer.dialects import graph as g

    return any(isinstance(op, g.QuantizeLinearOp) for op in module.walk())


def _require_float_boundary(graph, entry: str) -> None:
    """The NPU program of a quantized model takes and returns float tensors (onnxruntime's
    quantize_static writes QuantizeLinear / DequantizeLinear at the model's boundary): an int8
    or uint8 model input or output is one error, naming it."""
    sig = signature(graph, entry)
    for kind, specs in (("input", sig["inputs"]), ("output", sig["outputs"])):
        for spec in specs:
            if spec.dtype in ("int8", "uint8"):
                raise DriverError(
                    f"model {kind} '{spec.name}' is {spec.dtype}: the int8 program of a quantized model takes and "
                    "returns float tensors (quantize at the inputs and dequantize at the outputs inside the model, as "
                    "onnxruntime's quantize_static writes it); the model runs as it is on the reference interpreter")


def _integer_kernels(graph, say: Progress):
    """An imported QDQ or QOperator model in the form the NPU runs: max pooling of quantized
    values in float between dequantize / quantize (passes/quantize/pools.py), `graph-quantize-kernels` (DQ -> op ->
    Q into integer kernels, the remaining quantize_linear ops into requantize by 1 / scale), then
    the dequantize_linear ops of constants no kernel took folded to float constants, and uint8
    values moved to int8 (passes/quantize/unsigned.py)."""
    from infer.dialects.ir_io import make_context
    from infer.passes.graph_dce import GraphDCEPass
    from infer.passes.quantize.kernels import fold_constant_dequantize, quantize_kernels
    from infer.passes.quantize.pools import dequantize_pools
    from infer.passes.quantize.unsigned import signed_int8

    module = graph.clone()
    dequantize_pools(module)  # a QOperator model pools int8 values: in float on the NPU, exactly
    # the NPU has no int8 matmul of two runtime operands yet: those stay float matmuls of the
    # dequantized int8 values
    layers = quantize_kernels(module, runtime_rhs=False)
    fold_constant_dequantize(module)
    signed_int8(module)
    GraphDCEPass().apply(make_context(), module)
    say(f"int8 kernels of the QDQ model: {len(layers)} layer(s) ({', '.join(layers) or 'none'})")
    return module


def require_npu_lowering(module) -> None:
    """Every quantized op (integer kernels, quantize/dequantize ops) must have an int8 lowering
    to the NPU (graph_to_tile.lowerings): else one error naming the first that has none, never a
    float fallback."""
    from infer.dialects import graph as g
    from infer.dialects.ir_io import describe_location
    from infer.passes.graph_to_tile.lowerings import LOWERINGS, lowering_for
    from infer.passes.quantize.naming import NAME_ATTR

    quantized = (*g.QUANTIZATION_OPS, *g.INTEGER_KERNEL_OPS)
    for op in module.walk():
        if isinstance(op, quantized) and lowering_for(op) is None:
            where = describe_location(op)
            layer = op.attributes.get(NAME_ATTR)
            named = f" (layer {layer.data})" if layer is not None and hasattr(layer, "data") else ""
            lowered = sorted(t.name for t in quantized if t in LOWERINGS)
            raise DriverError(
                ("" if where.startswith("<") else f"{where}: ") + f"'{op.name}' op{named} has no int8 lowering to "
                f"the NPU yet (lowered: {', '.join(lowered)}); the int8 model runs on the reference interpreter: "
                "`infer quantize MODEL --calibration DATA -o MODEL.int8.mlir`, then `infer run-ir`")


def load(path: str | Path) -> Executable:
    """Load a `.npu` artifact (validated) as an Executable that can also `check`."""
    return Executable.load(path, reference=GraphReference())


def _reference_parts(module, known=None) -> tuple[str, bytes | None]:
    """Graph IR text (weights attribute dropped) and its weights as safetensors bytes
    (without those `known`, a weight store, holds with the same name and value)."""
    from xdsl.printer import Printer

    from infer.dialects.weights import WEIGHTS_ATTR, referenced_weights, weights_of

    store = weights_of(module)
    names = sorted(set(referenced_weights(module)))
    if known is not None:
        names = [n for n in names if not _same_weight(known, store, n)]
    blob = save_safetensors({n: np.asarray(store.get(n)) for n in names}) if names else None
    clone = module.clone()
    clone.attributes.pop(WEIGHTS_ATTR, None)
    stream = io.StringIO()
    Printer(stream=stream).print_op(clone)
    return stream.getvalue() + "\n", blob


def _same_weight(known, store, name: str) -> bool:
    if name not in known:
        return False
    a, b = known.get(name), store.get(name)
    return a is b or (a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b))


def _lowered_parts(lowering, module) -> tuple[bytes, dict[str, Any], list[dict[str, Any]]]:
    """tile-to-npu (`lowering`, a TileToNpuPass) on the planned module -> the program (binary),
    the npu.layout (JSON form) and the op markers, as the `npu.layout` and `npu.ops` attributes
    of the module it would have compiled give them."""
    return _lowered_program(lowering, module)[1:]


def _lowered_program(lowering, module) -> tuple[Any, bytes, dict[str, Any], list[dict[str, Any]]]:
    """`_lowered_parts` after the Program itself (what the binary encodes)."""
    from infer.dialects.npu_attrs import attr_to_json, layout_to_attr, ops_to_attr

    program, layout, markers = lowering.lower(module)
    return (program, program.to_bytes(), attr_to_json(layout_to_attr(layout)),
            attr_to_json(ops_to_attr(markers)))


__all__ = ["CompileTiming", "DriverError", "PRECISIONS", "compile", "require_npu_lowering", "graph_module", "load", "parse_input_shapes", "progress_printer", "signature"]
