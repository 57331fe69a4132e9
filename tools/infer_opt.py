"""`infer-opt`: the xDSL opt driver with every infer dialect, pass and target.

All xdsl-opt flags work (-p with pass options, --split-input-file,
--verify-diagnostics, --print-between-passes, -t, ...). Unlike plain xdsl-opt,
bad input never ends in a Python traceback: it gives one `file:line:col: error:`
line on stderr and exit status 1.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException
from xdsl.xdsl_opt_main import xDSLOptMain

from infer.dialects import infer_dialects
from infer.dialects.weights import WeightStoreError
from infer.dialects.ir_io import IRError, bind_weights, decode_source, first_line, module_to_text, parse_ir, verify_module
from infer.passes import infer_passes


def _npu_target(kind: str):
    def emit(module: ModuleOp, output: IO[str]) -> None:
        from infer.dialects import npu

        getattr(npu, f"emit_npu_{kind}")(module, output)

    return emit


class InferOptMain(xDSLOptMain):
    def __init__(self, args: Sequence[str] | None = None):
        super().__init__(description="infer modular optimizer driver (xdsl-opt with infer's dialects and passes)", args=args)

    def register_all_dialects(self):
        super().register_all_dialects()
        for name, factory in infer_dialects().items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self):
        super().register_all_passes()
        for name, factory in infer_passes().items():
            self.register_pass(name, factory)

    def register_all_targets(self):
        super().register_all_targets()
        self.available_targets["npu-asm"] = _npu_target("asm")
        self.available_targets["npu-bin"] = _npu_target("bin")

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0) -> ModuleOp | None:
        if (self.args.frontend or file_extension) != "mlir":
            return super().parse_chunk(chunk, file_extension, start_offset)
        name = self.get_input_name()
        text = decode_source(chunk.read(), name)
        try:
            module = parse_ir(self.ctx, text, name, start_offset)
        except IRError as e:
            if self.args.parsing_diagnostics:
                print(str(e))
                return None
            raise
        if not self.args.disable_verify:
            try:
                verify_module(module)
            except IRError:
                if not self.args.verify_diagnostics:
                    raise
                # Let xDSL print its full diagnostic (the op annotated in context),
                # which is what --verify-diagnostics tests check.
                module.verify()
        base = "." if self.args.input_file is None else os.path.dirname(self.args.input_file) or "."
        bind_weights(module, base)
        return module

    def output_resulting_program(self, prog: ModuleOp) -> str:
        if self.args.target == "mlir":
            module_to_text(prog, self.args.output_file, stem=self._stem())
        return super().output_resulting_program(prog)

    def _stem(self) -> str:
        return os.path.splitext(os.path.basename(self.args.input_file))[0] if self.args.input_file else "stdin"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv = [a for a in argv if a != "-"]  # "-" means stdin, as when no file is given
    try:
        opt = InferOptMain(args=argv)
    except ValueError as e:  # unknown pass, bad pass options
        print(f"infer-opt: error: {first_line(str(e))}", file=sys.stderr)
        return 1
    except ArgSpecParseError as e:  # a BaseException in xDSL, not caught above
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        detail = lines[-1] if lines else str(e)
        print(f"infer-opt: error: malformed pass pipeline: {detail}", file=sys.stderr)
        return 1
    except SystemExit as e:
        return int(e.code or 0)
    try:
        opt.run()
    except IRError as e:
        print(str(e), file=sys.stderr)
        return 1
    except WeightStoreError as e:
        print(f"{opt.get_input_name()}: error: {e}", file=sys.stderr)
        return 1
    except DiagnosticException as e:
        cause = e.__cause__ if e.__cause__ is not None else e
        print(f"{opt.get_input_name()}: error: {first_line(str(cause))}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"infer-opt: error: {first_line(str(e))}", file=sys.stderr)
        return 1
    except RecursionError:
        print(f"{opt.get_input_name()}: error: input nests too deeply", file=sys.stderr)
        return 1
    except Exception as e:  # never a traceback for the user; INFER_DEBUG=1 shows it
        if os.environ.get("INFER_DEBUG"):
            raise
        print(f"{opt.get_input_name()}: internal error: {type(e).__name__}: {first_line(str(e))} "
              "(set INFER_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
