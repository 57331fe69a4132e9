"""`infer asm`, `infer disasm`, `infer sim`: NPU assembler, disassembler and simulator CLI.

    infer asm FILE.s [-o OUT.bin]            assemble (`-o -` writes hex words to stdout)
    infer disasm FILE.bin|FILE.hex [-o OUT.s]
    infer sim FILE.bin|FILE.hex|FILE.s [-t edge|server|CONFIG.toml] [--reg r1=5 ...]
              [--dram-size BYTES | --dram-in IMAGE] [--dram-out IMAGE] [--trace T.json] [--json]

Errors are one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

_ERRORS: tuple[type[Exception], ...] = ()


def _errors() -> tuple[type[Exception], ...]:
    from infer.target.asm import AsmError
    from infer.target.hw import ConfigError
    from infer.target.isa import EncodingError
    from infer.target.sim import SimFault

    return (AsmError, EncodingError, SimFault, ConfigError, OSError, ValueError)


def _fail(cmd: str, e: Exception) -> int:
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    if isinstance(e, OSError) and e.filename:
        msg = f"{e.filename}: {e.strerror}"
    print(f"infer {cmd}: error: {msg}", file=sys.stderr)
    return 1


def _guarded(cmd: str, fn):
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except _errors() as e:
            return _fail(cmd, e)
    return run


def _read_program(path: str):
    from infer.target.asm import load_program

    data = Path(path).read_bytes()
    return load_program(data)


def cmd_asm(args: argparse.Namespace) -> int:
    from infer.target.asm import AsmError, Program

    text = Path(args.file).read_text()
    try:
        prog = Program.from_asm(text)
    except AsmError as e:
        raise AsmError(f"{args.file}: {e}") from None
    out = args.output or str(Path(args.file).with_suffix(".bin"))
    if out == "-":
        sys.stdout.write(prog.to_hex())
    else:
        Path(out).write_bytes(prog.to_bytes())
    return 0


def cmd_disasm(args: argparse.Namespace) -> int:
    prog = _read_program(args.file)
    text = prog.to_asm()
    if args.output and args.output != "-":
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_sim(args: argparse.Namespace) -> int:
    import numpy as np

    from infer.target.sim import Simulator

    sim = Simulator(args.target)
    prog = _read_program(args.file)
    if args.dram_in:
        dram = np.fromfile(args.dram_in, dtype=np.uint8).copy()
    else:
        dram = np.zeros(args.dram_size, np.uint8)
    regs: dict[str, int] = {}
    for r in args.reg:
        name, eq, val = r.partition("=")
        if not eq:
            raise ValueError(f"--reg expects rN=VALUE, got '{r}'")
        regs[name.strip()] = int(val, 0)
    counters = sim.run(prog, dram, regs=regs, trace=bool(args.trace))
    if args.trace:
        counters.to_chrome_trace(args.trace)
    if args.dram_out:
        dram.tofile(args.dram_out)
    if args.json:
        print(json.dumps(counters.as_dict(), indent=2))
    else:
        print(counters.summary())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from infer.tools.cli import writes

    p = subparsers.add_parser("asm", help="assemble NPU assembly into a binary")
    p.add_argument("file", help="assembly file (.s)")
    p.add_argument("-o", "--output", help="output .bin (default: FILE.bin; '-' = hex to stdout)")
    p.set_defaults(func=_guarded("asm", cmd_asm))
    writes(p, "output")

    p = subparsers.add_parser("disasm", help="disassemble an NPU binary (or hex words)")
    p.add_argument("file", help=".bin container or hex text")
    p.add_argument("-o", "--output", help="output .s (default: stdout)")
    p.set_defaults(func=_guarded("disasm", cmd_disasm))
    writes(p, "output")

    p = subparsers.add_parser("sim", help="run an NPU program on the instruction-set simulator")
    p.add_argument("file", help=".bin, hex text or assembly")
    p.add_argument("-t", "--target", default="edge", help="edge, server or a CONFIG.toml")
    p.add_argument("--reg", action="append", default=[], metavar="rN=VALUE",
                   help="set a scalar register before the run (repeatable)")
    p.add_argument("--dram-size", type=int, default=1 << 20, help="zeroed DRAM bytes")
    p.add_argument("--dram-in", help="raw DRAM image to start from")
    p.add_argument("--dram-out", help="write the final DRAM image here")
    p.add_argument("--trace", help="write a Chrome-trace/Perfetto JSON of engine timelines")
    p.add_argument("--json", action="store_true", help="print counters as JSON")
    p.set_defaults(func=_guarded("sim", cmd_sim))
    writes(p, "dram_out", "trace")
