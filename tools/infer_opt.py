"""`infer-opt`: infer's optimizer driver, with mlir-opt's conventions.

xdsl-opt's flags and registries (every upstream dialect, pass and target) plus
infer's dialects, passes, plugins (entry point group `infer.passes`) and the
`npu-asm` / `npu-bin` targets. Where xdsl-opt and mlir-opt differ, infer-opt
does what mlir-opt does:

- `--verify-diagnostics` checks the diagnostics against `expected-error`,
  `expected-warning`, `expected-note` and `expected-remark` annotations in the
  input (`infer.tools.opt_diagnostics`), pass errors included; a mismatch is an
  error and exit status 1.
- `--split-input-file` processes every chunk: a failing chunk reports its error
  and the others still run; the output chunks are separated by `// -----`;
  exit status 1 if any chunk failed.
- Named pipelines are expanded into their stages (`infer.tools.opt_pipeline`):
  each is verified after it runs, printed by `--print-between-passes` and timed
  by `--time-passes` (a tree on stderr at the end).
- `--print-ir-after-failure` prints the module as the failing pass left it.
- `--help` lists infer's passes with their options; `--list-passes[=all]`,
  `--help-pass NAME`; a wrong pass option names the valid ones.
- `-t npu-asm` / `-t npu-bin` refuse a module that has no `npu.program`.

Bad input never ends in a Python traceback: one `file:line:col: error:` line
(plus its notes) on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.arg_spec import parse_spec
from xdsl.utils.exceptions import DiagnosticException, ShrinkException
from xdsl.xdsl_opt_main import xDSLOptMain

from infer import __version__
from infer.dialects import infer_dialects
from infer.dialects.diagnostics import Diagnostic, collect, parse_diagnostics
from infer.dialects.ir_io import IRError, bind_weights, decode_source, first_line, module_to_text, parse_ir, verify_module
from infer.dialects.weights import WeightStoreError
from infer.passes import PassSpecError, PluginError, build_pipeline, registered_passes
from infer.tools.opt_diagnostics import check_diagnostics
from infer.tools.opt_pipeline import (
    Instrumentation,
    PrintBetweenPasses,
    PrintIRAfterFailure,
    Stage,
    StageFailed,
    TimePasses,
    VerifyEach,
    expand,
    run_stages,
)

SPLIT_MARKER = "// -----"


class TargetError(IRError):
    """A `-t` target that cannot emit the module."""


def _npu_programs(module: ModuleOp) -> list:
    from infer.dialects.npu import ProgramOp

    return [op for op in module.walk() if isinstance(op, ProgramOp)]


def _require_npu_program(target: str) -> Callable[[ModuleOp], None]:
    def check(module: ModuleOp) -> None:
        if _npu_programs(module):
            return
        top = sorted({op.name for op in module.ops}) or ["nothing"]
        raise TargetError(
            f"error: -t {target} emits npu.program ops and this module has none (it holds "
            f"{', '.join(top)}): lower it first, e.g. -p 'compile-npu{{target=edge}}' for graph-level "
            "IR or -p 'tile-to-npu' for planned tile-level IR")

    return check


def _npu_emitter(kind: str) -> Callable[[ModuleOp, IO[str]], None]:
    def emit(module: ModuleOp, output: IO[str]) -> None:
        from infer.dialects import npu

        getattr(npu, f"emit_npu_{kind}")(module, output)

    return emit


# -t NAME -> (emitter, check that the module is something it can emit)
NPU_TARGETS = {
    "npu-asm": (_npu_emitter("asm"), _require_npu_program("npu-asm")),
    "npu-bin": (_npu_emitter("bin"), _require_npu_program("npu-bin")),
}

# Exceptions that are the input's fault (reported as diagnostics), not infer-opt's.
def _user_errors() -> tuple[type[BaseException], ...]:
    from infer.target.hw import ConfigError

    return (IRError, WeightStoreError, DiagnosticException, ValueError, OSError, ConfigError,
            PluginError, PassSpecError, RecursionError)


class InferOptMain(xDSLOptMain):
    version_format = f"infer-opt (infer {__version__}) on xdsl {{xdsl_version}}"

    def __init__(self, args: Sequence[str] | None = None):
        argv = list(sys.argv[1:] if args is None else args)
        self._wants_help = any(a in ("-h", "--help") for a in argv)
        self.pass_origins: dict[str, str] = {}
        self.stages: list[Stage] = []
        # More instrumentations (checks between stages) are appended here by new flags.
        self.extra_instrumentations: list[Instrumentation] = []
        super().__init__(description="infer's optimizer driver: mlir-opt's conventions on xDSL, with infer's "
                                     "dialects, passes and targets", args=argv)
        if getattr(self.args, "verify_each_numerically", False):
            from infer.tools.opt_numerics import NumericOptions, VerifyEachNumerically

            a = self.args
            self.extra_instrumentations.append(VerifyEachNumerically(NumericOptions(
                seed=a.verify_numerics_seed, inputs_file=a.verify_numerics_inputs, entry=a.verify_numerics_entry,
                rounding_tol=a.verify_numerics_rounding_tol, fp32_tol=a.verify_numerics_fp32_tol,
                bf16_cosine=a.verify_numerics_bf16_cosine)))

    # ------------------------------------------------------------------ registries
    def register_all_dialects(self):
        super().register_all_dialects()
        for name, factory in infer_dialects().items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self):
        super().register_all_passes()
        self.pass_origins = {name: "xdsl" for name in self.available_passes}
        for name, entry in registered_passes().items():
            self.register_pass(name, entry.load)
            self.pass_origins[name] = entry.origin

    def register_all_targets(self):
        super().register_all_targets()
        for name, (emit, _) in NPU_TARGETS.items():
            self.available_targets[name] = emit

    # ------------------------------------------------------------------ arguments
    def register_all_arguments(self, arg_parser: argparse.ArgumentParser):
        super().register_all_arguments(arg_parser)
        helps = {
            "passes": "pass pipeline: NAME{option=value ...},NAME,... (infer's passes are listed below; "
                      "--list-passes=all adds the upstream ones)",
            "verify_diagnostics": "check the diagnostics against the expected-error/-warning/-note/-remark "
                                  "annotations of the input (as mlir-opt); exit 1 on any mismatch",
            "split_input_file": f"split the input at '{SPLIT_MARKER}' and process every chunk on its own; the "
                                f"outputs are separated by '{SPLIT_MARKER}'; exit 1 if any chunk failed",
            "print_between_passes": "print the IR after each pass (each stage of a named pipeline) but the last",
            "time_passes": "report the time of each pass (and of the stages of named pipelines) on stderr",
            "target": "output: mlir (default), npu-asm, npu-bin (both need an npu.program) or an upstream "
                      "target",
        }
        for action in arg_parser._actions:  # noqa: SLF001 (argparse has no public way to amend a help)
            if action.dest in helps:
                action.help = helps[action.dest]
        arg_parser.add_argument("--print-ir-after-failure", action="store_true",
                                help="when a pass fails, print the module as it left it (on stderr)")
        self._register_numeric_arguments(arg_parser)
        arg_parser.add_argument("--list-passes", nargs="?", const="infer", choices=["infer", "all"],
                                help="list infer's passes, named pipelines and plugins with their options "
                                     "(=all: and the upstream xDSL passes)")
        arg_parser.add_argument("--help-pass", action="append", metavar="NAME", default=[],
                                help="describe a pass: what it does, its options, its stages")
        if self._wants_help:  # the pass list imports every pass module: only when asked for
            arg_parser.formatter_class = argparse.RawDescriptionHelpFormatter
            arg_parser.epilog = self.pass_list(upstream=False)

    @staticmethod
    def _register_numeric_arguments(arg_parser: argparse.ArgumentParser) -> None:
        from infer.tools.opt_numerics import NumericOptions as D  # only dataclass defaults: no compiler import

        group = arg_parser.add_argument_group(
            "per-pass numeric validation",
            "--verify-each-numerically runs the module before the first pass and after every pass (each stage of "
            "a named pipeline) on the interpreter of its level (graph, tile; npu: the simulator) with the same "
            "inputs and reports the first pass whose results differ beyond its tolerance: bit-exact unless the "
            "pass declares otherwise; graph -> tile lowering: the e2e criteria of its precision")
        group.add_argument("--verify-each-numerically", action="store_true",
                           help="check every pass's results against the results before it (exit 1 on a difference)")
        group.add_argument("--verify-numerics-seed", type=int, default=D.seed, metavar="N",
                           help=f"seed of the random inputs (default {D.seed}; as infer.passes.testing.random_inputs)")
        group.add_argument("--verify-numerics-inputs", metavar="IN.npz",
                           help="inputs keyed by input name (graph.name, else arg<i>) instead of random ones")
        group.add_argument("--verify-numerics-entry", metavar="NAME",
                           help="the function to run (default: main, or the module's only function)")
        group.add_argument("--verify-numerics-rounding-tol", type=float, default=D.rounding_tol, metavar="X",
                           help="passes that round differently (batch-norm folding): max abs error <= X x the output's "
                                f"scale, the larger of its range and magnitude (default {D.rounding_tol:g})")
        group.add_argument("--verify-numerics-fp32-tol", type=float, default=D.fp32_tol, metavar="X",
                           help="graph -> tile at precision=fp32: max abs error <= X x the output's scale "
                                f"(default {D.fp32_tol:g})")
        group.add_argument("--verify-numerics-bf16-cosine", type=float, default=D.bf16_cosine, metavar="X",
                           help=f"graph -> tile at precision=bf16: cosine similarity >= X per output "
                                f"(default {D.bf16_cosine:g})")

    # ------------------------------------------------------------------ pass docs
    def _pass_doc(self, name: str):
        from infer.tools.pass_docs import pass_doc

        return pass_doc(name, self.available_passes[name](), self.pass_origins.get(name, "xdsl"))

    def pass_list(self, upstream: bool) -> str:
        from infer.tools.pass_docs import render_list, summary_of

        own = [self._pass_doc(n) for n, origin in self.pass_origins.items() if origin != "xdsl"]
        names = sorted(n for n, origin in self.pass_origins.items() if origin == "xdsl")
        listed = [(n, summary_of(self.available_passes[n]())) for n in names] if upstream else None
        return render_list(own, listed, len(names))

    def pass_help(self, names: list[str]) -> str:
        import difflib

        from infer.tools.pass_docs import render_pass_help

        parts = []
        for name in names:
            if name not in self.available_passes:
                close = difflib.get_close_matches(name, sorted(self.available_passes), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise PassSpecError(f"unknown pass '{name}'{hint}; infer-opt --list-passes lists the passes")
            parts.append(render_pass_help(self._pass_doc(name)))
        return "\n".join(parts)

    # ------------------------------------------------------------------ pipeline
    def setup_pipeline(self):
        if self.args.list_passes or self.args.help_pass:
            self.stages, self.roots = [], []
            return
        self.stages, self.roots = expand(build_pipeline(self.args.passes, self.available_passes))

    # ------------------------------------------------------------------ running
    def run(self) -> int:  # type: ignore[override]
        if self.args.list_passes or self.args.help_pass:
            text = self.pass_help(self.args.help_pass) if self.args.help_pass else ""
            if self.args.list_passes:
                text += ("\n" if text else "") + self.pass_list(upstream=self.args.list_passes == "all")
            sys.stdout.write(text)
            return 0
        name = self.get_input_name()
        chunks, extension = self._read_chunks()
        timer = TimePasses() if self.args.time_passes else None
        instrumentations: list[Instrumentation] = []
        if timer is not None:
            instrumentations.append(timer)
        if not self.args.disable_verify:
            instrumentations.append(VerifyEach(timer))
        if self.args.print_between_passes:
            instrumentations.append(PrintBetweenPasses(sys.stdout))
        for ins in self.extra_instrumentations:
            if timer is not None and hasattr(ins, "timer"):  # checks that report their own time (a row)
                ins.timer = timer
        instrumentations += self.extra_instrumentations
        if self.args.print_ir_after_failure:
            instrumentations.append(PrintIRAfterFailure(sys.stderr))

        output = self.prepare_output()
        failed = False
        try:
            for i, (text, offset) in enumerate(chunks):
                if i > 0:
                    output.write(SPLIT_MARKER + "\n")
                result, diagnostics, chunk_failed = self._process_chunk(text, offset, extension,
                                                                        instrumentations, timer)
                if result is not None:
                    output.write(result)
                output.flush()
                sys.stdout.flush()
                if self.args.verify_diagnostics:
                    problems = check_diagnostics(text, offset, name, diagnostics)
                    for p in problems:
                        print(p, file=sys.stderr)
                    failed |= bool(problems)
                else:
                    for d in diagnostics:
                        print(d.format(unknown=name), file=sys.stderr)
                    failed |= chunk_failed
        except ShrinkException:
            assert self.args.shrink
            print("Success, can shrink")
            return 0
        finally:
            if output is not sys.stdout:
                output.close()
        if timer is not None:
            timer.report(self.roots, sys.stderr)
        if self.args.shrink:
            print("Failure, can't shrink")
            return 1
        return 1 if failed else 0

    def _read_chunks(self) -> tuple[list[tuple[str, int]], str]:
        stream, extension = self.get_input_stream()
        try:
            data = stream.read()
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
        if (self.args.frontend or extension) not in self.available_frontends:
            raise ValueError(f"Unrecognized file extension '{extension}'")
        text = decode_source(data, self.get_input_name())
        if not self.args.split_input_file:
            return [(text, 0)], extension
        chunks, offset = [], 0
        for piece in text.split(SPLIT_MARKER):
            chunks.append((piece, offset))
            offset += piece.count("\n")
        return chunks, extension

    def _process_chunk(self, text: str, offset: int, extension: str, instrumentations: list[Instrumentation],
                       timer: TimePasses | None) -> tuple[str | None, list[Diagnostic], bool]:
        """(output text or None, diagnostics in the order they were produced, failed?)"""
        error: Diagnostic | None = None
        result = None
        with collect() as emitted:
            try:
                start = time.perf_counter()
                module = self.parse_chunk(io.BytesIO(text.encode()), extension, offset)
                if timer is not None:
                    timer.add("parse", time.perf_counter() - start)
                if module is not None:
                    run_stages(self.ctx, module, self.stages, instrumentations, self._stage_error)
                    start = time.perf_counter()
                    result = self.output_resulting_program(module)
                    if timer is not None:
                        timer.add("output", time.perf_counter() - start)
            except StageFailed as e:
                error = e.diagnostic
            except ShrinkException:
                raise
            except Exception as e:
                error = self._diagnostic(e)
        return result, list(emitted) + ([] if error is None else [error]), error is not None

    def _stage_error(self, error: BaseException, stage: Stage) -> Diagnostic:
        return self._diagnostic(error, f" in {stage.label()}")

    def _diagnostic(self, error: BaseException, where: str = "") -> Diagnostic:
        if isinstance(error, RecursionError):
            return Diagnostic("error", "input nests too deeply")
        if isinstance(error, DiagnosticException):
            cause = error.__cause__ if error.__cause__ is not None else error
            return parse_diagnostics(first_line(str(cause)))[0]
        if isinstance(error, WeightStoreError):
            return Diagnostic("error", str(error))
        if isinstance(error, _user_errors()):
            return parse_diagnostics(str(error))[0]
        if os.environ.get("INFER_DEBUG"):
            raise error
        return Diagnostic("error", f"internal error{where}: {type(error).__name__}: {first_line(str(error))} "
                                   "(set INFER_DEBUG=1 for a traceback)")

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0) -> ModuleOp | None:
        if (self.args.frontend or file_extension) != "mlir":
            return super().parse_chunk(chunk, file_extension, start_offset)
        name = self.get_input_name()
        text = chunk.read().decode()
        try:
            module = parse_ir(self.ctx, text, name, start_offset)
        except IRError as e:
            if self.args.parsing_diagnostics:  # xdsl-opt's flag: the parse error on stdout, exit 0
                print(str(e))
                return None
            raise
        if not self.args.disable_verify:
            verify_module(module)
        base = "." if self.args.input_file is None else os.path.dirname(self.args.input_file) or "."
        bind_weights(module, base)
        return module

    def output_resulting_program(self, prog: ModuleOp) -> str:
        target = parse_spec(self.args.target).name
        if target in NPU_TARGETS:
            NPU_TARGETS[target][1](prog)
        if target == "mlir":
            module_to_text(prog, self.args.output_file, stem=self._stem())
        return super().output_resulting_program(prog)

    def _stem(self) -> str:
        return os.path.splitext(os.path.basename(self.args.input_file))[0] if self.args.input_file else "stdin"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv = [a for a in argv if a != "-"]  # "-" means stdin, as when no file is given
    try:
        opt = InferOptMain(args=argv)
    except (PassSpecError, PluginError, ValueError, IRError) as e:  # unknown pass, bad options, broken plugin
        print(f"infer-opt: error: {first_line(str(e)).removeprefix('error: ')}", file=sys.stderr)
        return 1
    except SystemExit as e:
        return int(e.code or 0)
    try:
        return opt.run()
    except (PassSpecError, PluginError) as e:
        print(f"infer-opt: error: {first_line(str(e))}", file=sys.stderr)
        return 1
    except IRError as e:  # the input as a whole (e.g. not UTF-8)
        print(str(e), file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"infer-opt: error: {first_line(str(e))}", file=sys.stderr)
        return 1
    except Exception as e:  # never a traceback for the user; INFER_DEBUG=1 shows it
        if os.environ.get("INFER_DEBUG"):
            raise
        print(f"{opt.get_input_name()}: internal error: {type(e).__name__}: {first_line(str(e))} "
              "(set INFER_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
