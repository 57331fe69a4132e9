"""`infer compile` and `infer run`: the command line over the compile driver (tools/driver.py).

    infer compile MODEL_OR_MLIR [-t edge|server|CONFIG.toml] [--precision fp32|bf16|int8] -o OUT.npu
                  [--calibration CALIB.npz|CALIB.json [--min-cosine 0.99] [--calibration-method M]]
                  [--autotune[=N] [--autotune-cache DIR]]
                  [--entry NAME ...] [--chunk C] [--max-context N] [--block-size BS] [--num-blocks NB] [--batch B]
    infer run ARTIFACT [--inputs IN.npz] [--output OUT.npz] [--entry NAME] [--check [--framework MODEL.onnx]]
              [--trace TRACE.json] [--json REPORT.json] [--plot DIR] [--what-if]

`compile`: import (any format `infer import` reads, or graph-level `.mlir`) ->
the `compile-npu{target precision}` pipeline -> an artifact (program, weights,
signature, DRAM layout, the hardware config, and the graph IR for `--check`).
`--precision int8` quantizes at the graph level first (tools/quantize.py), prints the
per-layer choice and lowers the integer kernels to the matrix unit's int8 path (float layers
as bf16); an already quantized module (`infer quantize -o M.int8.mlir`) compiles without
calibration data. A quantized op with no int8 lowering is one error naming it.
A module with several functions gives one artifact with an entry point per function (`--entry`
picks them, default all, or @main alone when the module has one; a missing one is an error
listing the module's functions), the weights shared (tools/entries.py). GGUF files and Hugging
Face decoder folders are imported with a paged KV cache (@prefill_chunk, @decode; the cache and
batch options, defaults in --help; docs/gguf.md).
`run`: load (validated), run on the simulator, print an output summary and the
performance summary; `--check` compares with the reference interpreter layer by
layer (the value each kernel leaves in the simulated DRAM, copied right after it
ran, against the same op of the compiled graph IR) and every output against the
artifact's graph IR (cosine, max abs error, SQNR); exit 1 when an output mismatches.
`--framework MODEL.onnx` (with `--check`): onnxruntime runs the model the artifact was
compiled from on the same inputs and names the odd one out of each mismatching output
(tools/framework_check.py); an output where the simulator agrees with onnxruntime and the
reference interpreter does not is reported as such and does not fail the run. `--what-if`:
what bounds the program on its config, the same program simulated again with each resource
unlimited, with only each limited and with none (runtime/what_if.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np


def _judge_by_framework(model: str, exe: Any, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> int:
    """The mismatching outputs judged by onnxruntime: 0 when the reference interpreter is the odd
    one out of every one of them, else 1."""
    from infer.tools.framework_check import FrameworkError, judge, onnxruntime_outputs
    from infer.tools.reference import GraphReference

    try:
        framework = onnxruntime_outputs(model, exe.input_names, inputs)
    except FrameworkError as e:
        print(f"infer run: error: --framework: {e}", file=sys.stderr)
        return 1
    reference = GraphReference().outputs(exe.artifact, inputs)
    verdicts = judge(exe.output_names, outputs, reference, framework)
    print("the mismatching outputs, judged by onnxruntime on the original model:")
    for v in verdicts:
        print("  " + v.line())
    return 0 if verdicts and all(v.odd_one_out == "reference" for v in verdicts) else 1


def cmd_compile(args: argparse.Namespace) -> int:
    from infer.tools.driver import CompileTiming, DriverError, parse_input_shapes
    from infer.tools.driver import compile as compile_model

    options: dict[str, Any] = {}
    if args.input_shape:
        options["input_shapes"] = parse_input_shapes(args.input_shape)
    options.update(decoder_options(args))
    if args.precision != "int8" and (args.calibration or args.min_cosine is not None):
        raise DriverError("--calibration and --min-cosine apply to --precision int8 only")
    timing = CompileTiming() if args.timing else None
    exe = compile_model(args.model, target=args.target, precision=args.precision, progress=not args.quiet,
                        graph_passes=args.graph_passes, calibration=args.calibration, min_cosine=args.min_cosine,
                        calibration_method=args.calibration_method, timing=timing, entry=args.entry or None,
                        autotune=args.autotune, autotune_cache=args.autotune_cache or "", **options)
    out = args.output or str(Path(args.model).with_suffix(".npu"))
    exe.save(out)
    if not args.quiet:
        print(f"wrote {out} ({Path(out).stat().st_size} bytes): {exe!r}", file=sys.stderr)
    if timing is not None:
        timing.report(sys.stderr)
    return 0


AUTOTUNE_TOP = 4  # `--autotune` without N: candidates simulated per kernel

DECODER_OPTIONS = ("chunk", "max_context", "block_size", "num_blocks", "batch")


def is_decoder_source(model: str) -> bool:
    """A GGUF file or a Hugging Face decoder folder (Llama family, GPT-2)."""
    path = Path(model)
    if path.suffix.lower() == ".gguf":
        return True
    if not (path / "config.json").is_file():
        return False
    from infer.frontend.hf_import import GPT2_TYPES, LLAMA_TYPES, read_config
    from infer.frontend.model import ModelImportError

    try:
        return str(read_config(path).get("model_type", "")).lower() in LLAMA_TYPES | GPT2_TYPES
    except ModelImportError:
        return False


def decoder_options(args: argparse.Namespace) -> dict[str, Any]:
    """The paged-KV import options of a decoder (GGUF file, Hugging Face decoder folder): its
    @prefill_chunk and @decode (docs/paged-kv.md); an error for another model."""
    from infer.tools.driver import DriverError

    given = [o for o in DECODER_OPTIONS if getattr(args, o) is not None]
    if not is_decoder_source(args.model):
        if given:
            raise DriverError(f"--{given[0].replace('_', '-')} applies to decoders (a .gguf file or a Hugging Face "
                              "Llama-family / GPT-2 folder)")
        return {}
    options = {"kv_cache": "paged", "chunk": args.chunk, "max_len": args.max_context, "block_size": args.block_size,
               "num_blocks": args.num_blocks, "batch": args.batch}
    return {k: v for k, v in options.items() if v is not None}


def add_decoder_arguments(p: argparse.ArgumentParser) -> None:
    """The paged-KV options of `infer compile` and `infer generate` (decoders)."""
    from infer.frontend.paged_decoder import DEFAULT_BLOCK_SIZE, DEFAULT_CHUNK

    g = p.add_argument_group("decoders (.gguf, Hugging Face Llama-family / GPT-2 folders): a paged KV cache, "
                             "entry points @prefill_chunk and @decode (docs/paged-kv.md)")
    g.add_argument("--chunk", type=positive_int, metavar="C",
                   help=f"tokens per prefill step (default {DEFAULT_CHUNK}); a longer prompt takes several chunks")
    g.add_argument("--max-context", type=positive_int, metavar="N",
                   help="most tokens one sequence holds, prompt and generated (default: 256, at most the model's "
                        "context length)")
    g.add_argument("--block-size", type=positive_int, metavar="BS",
                   help=f"tokens per KV-cache block, a power of two (default {DEFAULT_BLOCK_SIZE})")
    g.add_argument("--num-blocks", type=positive_int, metavar="NB",
                   help="blocks in the KV-cache pool (default: --batch full sequences, plus the blocks that padding "
                        "rows write to)")
    g.add_argument("--batch", type=positive_int, metavar="B", help="sequences per decode step (default 1)")


def positive_int(text: str) -> int:
    """argparse type of a count option: an integer >= 1 (also used by `infer generate`)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def cmd_run(args: argparse.Namespace) -> int:
    from infer.tools.cli import load_inputs, summarize
    from infer.tools.driver import load, progress_printer

    say = progress_printer(not args.quiet)
    if args.mode == "timing" and (args.check or args.output):
        print(f"infer run: error: --mode timing computes no data: it cannot {'--check' if args.check else '--output'}",
              file=sys.stderr)
        return 1
    if args.framework and not args.check:
        print("infer run: error: --framework judges the check's mismatches: it needs --check", file=sys.stderr)
        return 1
    if args.mode == "functional" and args.what_if:
        print("infer run: error: --mode functional has no timing model: it cannot --what-if (use --mode fast)",
              file=sys.stderr)
        return 1
    if args.mode == "functional" and (args.plot or args.trace):
        # Plots and traces are drawn from the timing model's events, which this mode skips.
        print(f"infer run: error: --mode functional has no timing model: it cannot {'--plot' if args.plot else '--trace'} "
              "(use --mode fast)", file=sys.stderr)
        return 1
    from infer.target.sim_lanes import THREADS_ENV, default_threads
    from infer.target.sim_memo import default_budget

    if args.sim_threads is not None:  # read by every Simulator this command creates
        os.environ[THREADS_ENV] = str(args.sim_threads)
    try:  # the environment every Simulator reads (INFER_SIM_THREADS, INFER_SIM_MEMO_MB)
        default_threads()
        default_budget()
    except ValueError as e:
        print(f"infer run: error: {e}", file=sys.stderr)
        return 1
    exe = load(args.artifact)
    if args.entry is not None and args.entry != exe.artifact.entry:
        from infer.runtime import Executable

        exe = Executable(exe.artifact.for_entry(args.entry), reference=exe.reference)
    a = exe.artifact
    inputs = load_inputs(args.inputs, exe.input_names, [(s.shape, s.np_dtype) for s in a.inputs])
    checked = None
    if args.check:  # one run: outputs, performance report and a DRAM snapshot after each kernel
        checked = exe.check(inputs, trace=True, progress=say, mode=args.mode)
        outputs = checked.sim_outputs
    else:
        say(f"running {args.artifact} on the {exe.target} simulator ({len(exe.program)} instructions, "
            f"{args.mode} mode)")
        outputs = exe.run(inputs, trace=True, mode=args.mode)
    say("done")
    say.close()
    if args.mode == "timing":
        print("outputs: not computed (timing mode)")
        outputs = []
    else:
        print(summarize(exe.output_names, outputs))
    if args.output:
        np.savez(args.output, **dict(zip(exe.output_names, outputs, strict=True)))
        print(f"wrote {args.output}", file=sys.stderr)
    report = exe.last_report
    print(report.summary())
    if args.trace:
        report.to_chrome_trace(args.trace)
        print(f"wrote {args.trace} (Chrome trace: open in chrome://tracing or ui.perfetto.dev)", file=sys.stderr)
    if args.plot:
        from infer.runtime.plots import write_plots

        print(f"wrote {', '.join(map(str, write_plots(report, args.plot)))}", file=sys.stderr)
    what_if = _what_if(exe, inputs, args.mode, args.quiet) if args.what_if else None
    if what_if is not None:
        print("\n".join(what_if.lines()))
    if args.json:
        import json

        doc = report.as_dict()
        if checked is not None:
            doc["check"] = checked.as_dict()
        if what_if is not None:
            doc["what_if"] = what_if.as_dict()
        Path(args.json).write_text(json.dumps(doc, indent=1))
    status = 0
    if checked is not None:
        print("check against the graph-level reference interpreter, per layer (the simulated DRAM "
              "right after each kernel):")
        print(checked.table())
        print("per output:")
        for r in checked.outputs:
            print("  " + r.line())
        if not checked.outputs_ok() and args.framework:
            status = _judge_by_framework(args.framework, exe, inputs, outputs)
        elif not checked.outputs_ok():
            status = 1
        elif checked.first_bad is not None:
            print(f"warning: layer {checked.first_bad.name} ({checked.first_bad.kernel}) is out of tolerance "
                  "although the outputs match", file=sys.stderr)
    return status


def _what_if(exe, inputs, mode: str, quiet: bool):
    """The program simulated again with resources unlimited (`runtime.what_if`): in timing
    mode where the program allows it (a program whose control reads its data, such as a paged
    decode step's block tables, needs the data: then in `mode`)."""
    from infer.runtime.executable import RunError
    from infer.runtime.what_if import what_bounds
    from infer.tools.driver import progress_printer

    say = progress_printer(not quiet)
    modes = ["timing"] if mode == "timing" else ["timing", mode]

    def simulate(config):
        while True:
            try:
                exe.run(inputs, trace=False, mode=modes[0], config=config)
                break
            except RunError:
                if len(modes) == 1:
                    raise
                modes.pop(0)
        say(f"what-if: {exe.last_report.cycles:,} cycles")
        return exe.last_report.counters

    say("what bounds it: simulating the program again with resources unlimited (10 runs)")
    result = what_bounds(exe.config, simulate)
    say.close()
    return result


def _errors() -> tuple[type[Exception], ...]:
    from infer.dialects.ir_io import IRError
    from infer.frontend.model import ModelImportError
    from infer.runtime.artifact import ArtifactError
    from infer.target.hw import ConfigError
    from infer.tools.driver import DriverError

    return (ArtifactError, ConfigError, DriverError, IRError, ModelImportError)


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
    from infer.tools.cli import writes

    p = subparsers.add_parser("compile", help="compile a model (or graph IR) to a .npu artifact")
    p.add_argument("model", help=".onnx, .pt2, .gguf, Hugging Face folder, or graph-level .mlir")
    p.add_argument("-t", "--target", default="edge", help="edge, server or a CONFIG.toml (default: edge)")
    p.add_argument("-o", "--output", help="artifact path (default: MODEL.npu)")
    p.add_argument("--precision", choices=["fp32", "bf16", "int8"], default="fp32",
                   help="fp32 (3-pass bf16 emulation on the matrix unit), bf16, or int8 (graph-level int8 "
                        "quantization with --calibration, then the lowering; docs/quantization.md)")
    p.add_argument("--calibration", metavar="CALIB.npz|CALIB.json",
                   help="int8: calibration samples (.npz: one array per model input, keyed by input name, with a "
                        "leading sample axis) or a table from `infer calibrate` (.json)")
    p.add_argument("--min-cosine", type=float, metavar="C",
                   help="int8: keep the most sensitive layers in float until the model's output cosine to the "
                        "float model on the calibration samples is >= C (e.g. 0.99; needs .npz samples)")
    p.add_argument("--calibration-method", choices=["minmax", "percentile", "entropy", "mse"],
                   help="int8 with .npz samples: how each activation's range is chosen (default entropy)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DxD...",
                   help="static shape for a model input with dynamic dims (repeatable)")
    p.add_argument("--graph-passes", default="", metavar="PIPELINE",
                   help="passes run on the graph-level IR first, e.g. 'my-pass{factor=2},graph-dce' "
                        "(infer's passes and plugins: infer-opt --list-passes)")
    p.add_argument("--timing", action="store_true",
                   help="print where the compile time goes on stderr: the import, every pass of the pipeline "
                        "and the packaging (a report like mlir-opt's --mlir-timing)")
    p.add_argument("--entry", action="append", default=[], metavar="NAME",
                   help="the function to compile (repeatable; default: @main when the module has one, else every "
                        "function: one artifact, one entry point per function, the weights shared)")
    p.add_argument("--autotune", nargs="?", type=positive_int, const=AUTOTUNE_TOP, default=0, metavar="N",
                   help=f"simulate the cost model's top N tilings (default {AUTOTUNE_TOP}) of each distinct "
                        "linear/matmul/conv/attention kernel and keep the fastest; results are cached; the "
                        "whole autotuned program is kept where it runs no slower than the cost model's "
                        "(docs/tiling.md, Autotuning)")
    p.add_argument("--autotune-cache", metavar="DIR",
                   help="where autotuning results are cached (default $XDG_CACHE_HOME/infer/autotune, "
                        "else ~/.cache/infer/autotune)")
    add_decoder_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr (errors still are)")
    p.set_defaults(func=_guarded("compile", cmd_compile))
    writes(p, "output")

    p = subparsers.add_parser("run", help="run a .npu artifact on the instruction-set simulator")
    p.add_argument("artifact")
    p.add_argument("--entry", metavar="NAME", help="the entry point to run (an artifact compiled from several "
                                                  "functions; default: its first)")
    p.add_argument("--inputs", help=".npz keyed by input name (default: deterministic random inputs)")
    p.add_argument("--output", help="write outputs to this .npz")
    p.add_argument("--check", action="store_true",
                   help="compare with the reference interpreter layer by layer and per output (cosine, max abs "
                        "error, SQNR); exit 1 when an output mismatches")
    p.add_argument("--framework", metavar="MODEL.onnx",
                   help="with --check: run this ONNX model (the one the artifact was compiled from) on "
                        "onnxruntime and name the odd one out of each output the simulator and the reference "
                        "interpreter disagree on; the run fails only if the simulator is not the one agreeing "
                        "with onnxruntime")
    p.add_argument("--trace", help="write a Chrome-trace JSON of the engine timelines (and ops)")
    p.add_argument("--json", help="write the performance report as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr (errors still are)")
    p.add_argument("--mode", choices=["fast", "reference", "functional", "timing"], default="fast",
                   help="simulation mode: fast (default: batched loops, outputs and cycles identical to "
                        "reference), reference (one instruction at a time), functional (outputs only, no "
                        "timing model), timing (cycles and counters only, no outputs; for sweeps)")
    p.add_argument("--sim-threads", type=positive_int, metavar="N",
                   help="threads the simulator may split big batched operations over (default: INFER_SIM_THREADS, "
                        "else 1; helps programs of big stacked matmuls, slows small ones: docs/simulator.md). "
                        "Outputs and cycles do not depend on it")
    p.add_argument("--what-if", action="store_true",
                   help="what bounds the program: simulate it again with each resource unlimited (DRAM, the weight "
                        "path, the vector unit, the array's fill and drain), with only each limited, and with none; "
                        "prints the cycles of each (docs/hardware-feedback.md)")
    p.add_argument("--plot", metavar="DIR", help="write PNG plots to DIR: roofline.png (every op on the roofline), "
                   "timeline.png (per-engine Gantt chart by op), time_by_kind.png")
    p.set_defaults(func=_guarded("run", cmd_run))
    writes(p, "output", "trace", "json")
