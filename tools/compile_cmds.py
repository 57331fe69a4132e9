"""`infer compile` and `infer run`, and the Python driver `infer.compile`.

    infer compile MODEL_OR_MLIR [-t edge|server|CONFIG.toml] [--precision fp32|bf16] -o OUT.npu
    infer run ARTIFACT [--inputs IN.npz] [--output OUT.npz] [--check] [--trace TRACE.json] [--json REPORT.json]

`compile`: import (any format `infer import` reads, or graph-level `.mlir`) ->
the `compile-npu{target precision}` pipeline -> an artifact (program, weights,
signature, DRAM layout, the hardware config, and the graph IR for `--check`).
`run`: load (validated), run on the simulator, print an output summary and the
performance summary; `--check` compares with the reference interpreter layer by
layer (the value each kernel leaves in the simulated DRAM, copied right after it
ran, against the same op of the compiled graph IR) and every output against the
artifact's graph IR (cosine, max abs error, SQNR); exit 1 when an output mismatches.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _progress(enabled: bool):
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        if enabled:
            print(f"[{time.perf_counter() - t0:6.2f} s] {msg}", file=sys.stderr, flush=True)
    return say


# ---------------------------------------------------------------------------
# Python driver
# ---------------------------------------------------------------------------


def _graph_module(source: Any, example_inputs: Any = None, **import_options: Any):
    """source -> graph-level ModuleOp (imported or parsed), with its weight store bound."""
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


def _signature(module, entry: str):
    from xdsl.dialects import func
    from xdsl.dialects.builtin import TensorType

    from infer.dialects.dtypes import to_numpy_dtype
    from infer.runtime.artifact import TensorSpec, dtype_name
    from infer.tools.cli import CLIError, function_signature, output_names

    names, specs = function_signature(module, entry)
    inputs = [TensorSpec(n, tuple(s), dtype_name(d)) for n, (s, d) in zip(names, specs, strict=True)]
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp) and op.sym_name.data == entry)
    outs = []
    results = fn.function_type.outputs.data
    onames = output_names(module, len(results), entry)
    for n, t in zip(onames, results, strict=True):
        if not isinstance(t, TensorType):
            raise CLIError(f"function @{entry}: result '{n}' is not a tensor ({t})")
        outs.append(TensorSpec(n, tuple(t.get_shape()), dtype_name(to_numpy_dtype(t.get_element_type()))))
    for s in inputs + outs:
        if any(d < 0 for d in s.shape):
            raise CLIError(f"'{s.name}' has a dynamic shape {list(s.shape)}: compile needs static shapes "
                           "(use --input-shape / input_shapes=)")
    return {"inputs": inputs, "outputs": outs}


def _attr_to_py(attr: Any) -> Any:
    """Builtin attribute (dictionary, array, integer, string, ...) -> JSON-able Python."""
    import json

    from xdsl.dialects import builtin as b

    if isinstance(attr, b.DictionaryAttr):
        return {k: _attr_to_py(v) for k, v in attr.data.items()}
    if isinstance(attr, b.ArrayAttr):
        return [_attr_to_py(v) for v in attr.data]
    if isinstance(attr, b.DenseArrayBase):
        return list(attr.get_values())
    if isinstance(attr, b.IntegerAttr):
        v = attr.value.data
        return bool(v) if isinstance(attr.type, b.IntegerType) and attr.type.width.data == 1 else v
    if isinstance(attr, b.FloatAttr):
        return attr.value.data
    if isinstance(attr, b.UnitAttr):
        return True
    if isinstance(attr, b.StringAttr):
        text = attr.data
        if text[:1] in "{[":
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                pass
        return text
    if isinstance(attr, b.TypeAttribute | b.TensorType | b.MemRefType):
        return str(attr)
    return str(attr)


def _graph_reference_parts(module, known=None) -> tuple[str, bytes | None]:
    """Graph IR text (weights attribute dropped) and its weights as safetensors bytes
    (without those `known`, a WeightStore, holds with the same name and value)."""
    from xdsl.printer import Printer

    from infer.dialects.weights import WEIGHTS_ATTR, referenced_weights, weights_of
    from infer.runtime.artifact import save_safetensors

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


def compile(source: Any, target: str = "edge", precision: str = "fp32", *, entry: str = "main",
            example_inputs: Any = None, progress: bool = False, graph_passes: str = "", **import_options: Any):
    """Import (if needed) and compile for the accelerator -> `infer.runtime.Executable`.

    source: a model path (.onnx/.pt2/HF folder), a graph-level `.mlir` path, an
    `infer.Model`, a ModuleOp, an onnx.ModelProto, a torch module (+example_inputs)...
    target: "edge", "server" or a TOML path. precision: "fp32" (3-pass bf16
    emulation) or "bf16". graph_passes: a pass pipeline run on the graph-level
    module first (`-p` syntax; infer's passes and plugins)."""
    from xdsl.context import Context

    from infer.dialects.ir_io import make_context
    from infer.dialects.weights import WeightStore, attach_weights, weights_of
    from infer.passes.pipelines_npu import CompileNpuPass
    from infer.runtime.artifact import Artifact, save_safetensors
    from infer.runtime.executable import Executable
    from infer.target.hw import load_config

    say = _progress(progress)
    cfg = load_config(target)
    toml_path = Path(cfg.source) if Path(str(target)).is_file() else None
    toml_text = toml_path.read_text() if toml_path else _bundled_toml(target)
    say(f"importing {source if isinstance(source, str | Path) else type(source).__name__}")
    graph = _graph_module(source, example_inputs, **import_options)
    signature = _signature(graph, entry)
    graph_ir, graph_weights = _graph_reference_parts(graph)

    module = graph.clone()
    old = weights_of(graph)
    store = WeightStore(old.file)
    store._local = dict(old._local)
    attach_weights(module, store)
    ctx: Context = make_context()
    layer_parts: list[tuple[str, bytes | None]] = []

    def stage(name: str) -> None:
        if name == "graph-to-tile":  # the graph IR it lowers (one top-level op per kernel): the
            layer_parts.append(_graph_reference_parts(module, old))  # per-layer check's reference
        say(f"pass {name}")

    CompileNpuPass(target=str(target), precision=precision, graph_passes=graph_passes).apply(
        ctx, module, progress=stage)
    layer_ir, layer_weights = layer_parts[0] if layer_parts else (None, None)
    say("packaging the artifact")
    program, layout, ops = _codegen_result(module)
    names = [e["name"] for e in layout.get("weights") or []]
    weights = save_safetensors({n: np.asarray(store.get(n)) for n in names})
    art = Artifact(program=program, weights=weights, signature=signature, layout=layout,
                   target_name=cfg.name, target_toml=toml_text, precision=precision, entry=entry,
                   source=str(source) if isinstance(source, str | Path) else type(source).__name__,
                   ops=ops, graph_ir=graph_ir, graph_weights=graph_weights, layer_ir=layer_ir,
                   layer_weights=layer_weights)
    exe = Executable(Artifact.from_bytes(art.to_bytes()))  # validate as a loader would
    say(f"compiled: {len(exe.program)} instructions, {exe.layout.total_bytes} bytes of DRAM")
    return exe


def _bundled_toml(target: str) -> str:
    from infer.target.hw import _HERE

    return (_HERE / f"{target}.toml").read_text()


def _codegen_result(module) -> tuple[bytes, dict[str, Any], list[dict[str, Any]]]:
    """The npu.program (binary), the npu.layout (JSON form) and op markers of a compiled module."""
    from infer.dialects.npu import ProgramOp
    from infer.tools.cli import CLIError

    programs = [op for op in module.walk() if isinstance(op, ProgramOp)]
    if len(programs) != 1:
        raise CLIError(f"the compiled module has {len(programs)} npu.program ops (expected 1)")
    prog = programs[0]
    layout_attr = module.attributes.get("npu.layout") or prog.attributes.get("npu.layout")
    if layout_attr is None:
        raise CLIError("the compiled module has no npu.layout attribute")
    layout = _attr_to_py(layout_attr)
    ops_attr = module.attributes.get("npu.ops") or prog.attributes.get("npu.ops")
    ops = _attr_to_py(ops_attr) if ops_attr is not None else list(layout.pop("ops", []) or [])
    return prog.to_program().to_bytes(), layout, ops


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------


def cmd_compile(args: argparse.Namespace) -> int:
    from infer.tools.cli import _parse_input_shapes

    options: dict[str, Any] = {}
    if args.input_shape:
        options["input_shapes"] = _parse_input_shapes(args.input_shape)
    exe = compile(args.model, target=args.target, precision=args.precision, progress=True,
                  graph_passes=args.graph_passes, **options)
    out = args.output or str(Path(args.model).with_suffix(".npu"))
    exe.save(out)
    print(f"wrote {out} ({Path(out).stat().st_size} bytes): {exe!r}", file=sys.stderr)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from infer.runtime import Executable
    from infer.tools.cli import load_inputs, summarize

    say = _progress(True)
    exe = Executable.load(args.artifact)
    a = exe.artifact
    inputs = load_inputs(args.inputs, exe.input_names, [(s.shape, s.np_dtype) for s in a.inputs])
    checked = None
    if args.check:  # one run: outputs, performance report and a DRAM snapshot after each kernel
        checked = exe.check(inputs, trace=True, progress=say)
        outputs = checked.sim_outputs
    else:
        say(f"running {args.artifact} on the {exe.target} simulator ({len(exe.program)} instructions)")
        outputs = exe.run(inputs, trace=True)
    say("done")
    print(summarize(exe.output_names, outputs))
    if args.output:
        np.savez(args.output, **dict(zip(exe.output_names, outputs, strict=True)))
        print(f"wrote {args.output}", file=sys.stderr)
    report = exe.last_report
    print(report.summary())
    if args.trace:
        report.to_chrome_trace(args.trace)
        print(f"wrote {args.trace} (Chrome trace: open in chrome://tracing or ui.perfetto.dev)", file=sys.stderr)
    if args.json:
        import json

        doc = report.as_dict()
        if checked is not None:
            doc["check"] = checked.as_dict()
        Path(args.json).write_text(json.dumps(doc, indent=1))
    status = 0
    if checked is not None:
        print("check against the graph-level reference interpreter, per layer (the simulated DRAM "
              "right after each kernel):")
        print(checked.table())
        print("per output:")
        for r in checked.outputs:
            print("  " + r.line())
        if not checked.outputs_ok():
            status = 1
        elif checked.first_bad is not None:
            print(f"warning: layer {checked.first_bad.name} ({checked.first_bad.kernel}) is out of tolerance "
                  "although the outputs match", file=sys.stderr)
    return status


def _errors() -> tuple[type[Exception], ...]:
    from infer.dialects.ir_io import IRError
    from infer.runtime.artifact import ArtifactError
    from infer.target.hw import ConfigError

    return (ArtifactError, ConfigError, IRError)


def _guarded(cmd: str, fn):
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except _errors() as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"infer {cmd}: error: {msg.removeprefix('error: ')}", file=sys.stderr)
            return 1
    return run


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compile", help="compile a model (or graph IR) to a .npu artifact")
    p.add_argument("model", help=".onnx, .pt2, Hugging Face folder, or graph-level .mlir")
    p.add_argument("-t", "--target", default="edge", help="edge, server or a CONFIG.toml (default: edge)")
    p.add_argument("-o", "--output", help="artifact path (default: MODEL.npu)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="fp32 (3-pass bf16 emulation on the matrix unit) or bf16")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DxD...",
                   help="static shape for a model input with dynamic dims (repeatable)")
    p.add_argument("--graph-passes", default="", metavar="PIPELINE",
                   help="passes run on the graph-level IR first, e.g. 'my-pass{factor=2},graph-dce' "
                        "(infer's passes and plugins: infer-opt --list-passes)")
    p.set_defaults(func=_guarded("compile", cmd_compile))

    p = subparsers.add_parser("run", help="run a .npu artifact on the instruction-set simulator")
    p.add_argument("artifact")
    p.add_argument("--inputs", help=".npz keyed by input name (default: deterministic random inputs)")
    p.add_argument("--output", help="write outputs to this .npz")
    p.add_argument("--check", action="store_true",
                   help="compare with the reference interpreter layer by layer and per output (cosine, max abs "
                        "error, SQNR); exit 1 when an output mismatches")
    p.add_argument("--trace", help="write a Chrome-trace JSON of the engine timelines (and ops)")
    p.add_argument("--json", help="write the performance report as JSON")
    p.set_defaults(func=_guarded("run", cmd_run))
