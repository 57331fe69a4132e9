"""The `infer` command line.

    infer import MODEL [-o OUT.mlir] [--input-shape NAME=1x3x224x224] [--list-unsupported]
        MODEL: .onnx, .pt2 (torch.export), .gguf (llama.cpp), .mlir or a Hugging Face folder
    infer run-ir FILE.mlir [--inputs IN.npz] [--output OUT.npz]

Exit status: 0 success; 1 bad or unsupported input (one message on stderr);
2 wrong usage. No command prints a Python traceback for bad input
(INFER_DEBUG=1 shows one for internal errors).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# Subcommand modules: each has `register(subparsers)`; a parser's `func(args) -> int` runs it.
_SUBCOMMAND_MODULES = ["infer.tools.npu_cmds", "infer.tools.compile_cmds", "infer.tools.quantize_cmds",
                       "infer.tools.serve_sim_cmds", "infer.tools.generate_cmds", "infer.tools.sweep_cmds"]


class CLIError(Exception):
    """Bad input for a command: printed as one line, exit status 1."""


def _user_errors() -> tuple[type[Exception], ...]:
    from infer.dialects.ir_io import IRError
    from infer.dialects.weights import WeightStoreError
    from infer.frontend.model import ModelImportError
    from infer.tools.driver import DriverError

    from infer.passes import PluginError

    errors: list[type[Exception]] = [CLIError, DriverError, IRError, ModelImportError, WeightStoreError,
                                     PluginError]
    try:
        from infer.dialects.graph_interpreter import InterpreterError

        errors.append(InterpreterError)
    except ImportError:
        pass
    return tuple(errors)


# ---------------------------------------------------------------------------
# Inputs and outputs
# ---------------------------------------------------------------------------


def random_inputs(specs: Sequence[tuple[tuple[int, ...], np.dtype]], seed: int = 0) -> list[np.ndarray]:
    """Deterministic inputs: floats ~ N(0, 1), integers in [0, 8), booleans fair."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype in specs:
        if dtype == np.bool_:
            arrays.append(rng.random(shape) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            arrays.append(rng.integers(0, 8, size=shape).astype(dtype))
        else:
            arrays.append(rng.standard_normal(shape).astype(np.float32).astype(dtype))
    return arrays


def load_inputs(path: str | None, names: list[str], specs) -> list[np.ndarray]:
    if path is None:
        print(f"note: no --inputs given; using deterministic random inputs for {', '.join(names)}", file=sys.stderr)
        return random_inputs(specs)
    from infer.tools.npz_files import NpzReadError, read_npz

    try:
        given = read_npz(path)
    except NpzReadError as e:
        raise CLIError(f"{path}: cannot read inputs as .npz: {e}") from None
    missing = [n for n in names if n not in given]
    if missing:
        raise CLIError(
            f"{path}: missing input(s) {', '.join(missing)} (the model's inputs are {', '.join(names)}; "
            f"the file has {', '.join(given) or 'none'})"
        )
    return [given[n] for n in names]


def writes(parser: argparse.ArgumentParser, *dests: str) -> None:
    """Declare the options of `parser` (by dest) that name a file the command writes: `_main`
    checks each given one before the command runs (`check_output_paths`), so a compile or a
    simulation is not thrown away at the end for a mistyped folder."""
    parser.set_defaults(output_files=dests)


def check_output_paths(args: argparse.Namespace) -> None:
    """Each output file given (`writes`) must be a file path in an existing folder."""
    for dest in getattr(args, "output_files", ()):
        path = getattr(args, dest, None)
        if not isinstance(path, str) or path in ("", "-"):  # not given, or stdout
            continue
        flag = "--" + dest.replace("_", "-")
        target = Path(path)
        if target.is_dir():
            raise CLIError(f"{flag} {path}: is a folder; give a file path")
        folder = target.parent
        if not folder.is_dir():
            raise CLIError(f"{flag} {path}: cannot write: the folder {folder} does not exist")


def summarize(names: Sequence[str], arrays: Sequence[np.ndarray]) -> str:
    lines = []
    for name, a in zip(names, arrays, strict=True):
        stats = ""
        if a.size and (np.issubdtype(a.dtype, np.number) or a.dtype.kind == "V" or str(a.dtype) == "bfloat16"):
            f = a.astype(np.float64)
            stats = f"  min {f.min():.6g}  max {f.max():.6g}  mean {f.mean():.6g}"
        lines.append(f"{name}: {a.dtype} {'x'.join(map(str, a.shape)) or 'scalar'}{stats}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------


def cmd_import(args: argparse.Namespace) -> int:
    from infer.frontend import import_model
    from infer.tools.driver import parse_input_shapes

    options = {}
    if args.input_shape:
        options["input_shapes"] = parse_input_shapes(args.input_shape)
    if args.list_unsupported:
        options["list_unsupported"] = True
    model = import_model(args.model, **options)
    if args.output:
        model.save(args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(str(model))
    return 0


def cmd_run_ir(args: argparse.Namespace) -> int:
    from infer.dialects.graph_interpreter import run_module
    from infer.dialects.ir_io import load_ir_file
    from infer.dialects.signature import function_signature, output_names

    module = load_ir_file(args.file)
    names, specs = function_signature(module, args.entry)
    inputs = load_inputs(args.inputs, names, specs)
    outputs = run_module(module, inputs, entry=args.entry)
    out_names = output_names(module, len(outputs), args.entry)
    print(summarize(out_names, outputs))
    if args.output:
        np.savez(args.output, **dict(zip(out_names, outputs, strict=True)))
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="infer", description="infer: compile and run models on the infer accelerator")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("import", help="import a model (.onnx, .pt2, .gguf, Hugging Face folder) to graph-level IR")
    p.add_argument("model")
    p.add_argument("-o", "--output", help="write IR here (weights go beside it); default: stdout")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DxD...",
                   help="static shape for a model input with dynamic dims (repeatable)")
    p.add_argument("--list-unsupported", action="store_true",
                   help="list every unsupported op/attribute instead of stopping at the first")
    p.set_defaults(func=cmd_import)
    writes(p, "output")

    p = sub.add_parser("run-ir", help="run IR on the reference interpreter")
    p.add_argument("file")
    p.add_argument("--inputs", help=".npz keyed by input name (default: deterministic random inputs)")
    p.add_argument("--output", help="write outputs to this .npz")
    p.add_argument("--entry", default="main", help="function to run (default: main)")
    p.set_defaults(func=cmd_run_ir)
    writes(p, "output")

    for name in _SUBCOMMAND_MODULES:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the `infer` command itself: the process ends when main returns
        if sys.argv[1:2] == ["compile"]:
            keep_big_buffers_in_the_heap()
        try:
            return _main(argv)
        finally:
            # what is left (a compile leaves ~0.5 M objects of dead IR in reference cycles) is
            # freed by the OS: frozen, the interpreter's final garbage collection skips it
            # (~0.7 s of `infer compile` of ResNet-50). Not for main(argv) called in a process
            # that goes on (tests): there the garbage is collected as usual.
            gc.freeze()
    return _main(argv)


def keep_big_buffers_in_the_heap() -> None:
    """glibc's malloc tuned for one compile (`infer compile`, a process that ends when it is
    done): buffers of any size come from the heap (not mmap, up to 1 GiB), the heap grows by
    256 MiB at a time and is never trimmed. A compile allocates and frees buffers of up to a few
    hundred MB (weights as imported, packed, split into bf16 halves, serialised; the artifact's
    bytes): by default each is a fresh mapping whose every page faults in, then is unmapped, and
    freed heap memory goes back to the system. Reused, ResNet-50's compile takes ~40 % fewer page
    faults and ~0.5 s less system time; its peak memory stays the same (`target/heap.py`)."""
    from infer.target.heap import COMPILE, keep_buffers_in_heap

    keep_buffers_in_heap(COMPILE)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_output_paths(args)
        return args.func(args)
    except _user_errors() as e:
        print(f"infer {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # never a traceback for the user; INFER_DEBUG=1 shows it
        if isinstance(e, OSError) and e.filename is not None:
            # a file the command reads or writes (a full disk, a folder without permission):
            # the user's to fix, not an internal error
            print(f"infer {args.command}: error: {e.filename}: {e.strerror or e}", file=sys.stderr)
            return 1
        if os.environ.get("INFER_DEBUG"):
            raise
        print(f"infer {args.command}: internal error: {type(e).__name__}: {e} (set INFER_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
