"""`infer sweep`: a hardware design-space sweep with recompilation per point, on Ray.

    infer sweep MODEL [-t BASE] --param KEY=V1,V2,... [--param ...] [--precision fp32|bf16]
                [--ray-address ADDR] [--input-shape NAME=DxD...] [--no-plots] -o DIR

Writes DIR/sweep.csv (a row per point: the parameters, status, cycles, latency, energy by
component, average power, area by component, Pareto flags) and DIR/{latency,energy,area,
pareto}.png, prints the table; results are cached in DIR/cache (tools/sweep.py,
docs/hardware-feedback.md). Bad input (an unknown key, a value of the wrong type, a model that
does not import) is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import sys


def cmd_sweep(args: argparse.Namespace) -> int:
    from infer.tools.driver import parse_input_shapes
    from infer.tools.sweep import default_progress, run_sweep

    shapes = parse_input_shapes(args.input_shape) if args.input_shape else {}
    result = run_sweep(args.model, args.target, args.param, precision=args.precision, out_dir=args.output,
                       ray_address=args.ray_address, input_shapes=shapes, plots=not args.no_plots,
                       progress=default_progress())
    print(result.table())
    cached = sum(1 for r in result.rows if r.get("cached"))
    print(f"{len(result.rows)} point(s): {result.computed} computed, {cached} from the cache; "
          f"{result.wall_seconds:.1f} s", file=sys.stderr)
    written = [result.csv_path, *result.plots]
    print(f"wrote {', '.join(map(str, written))}", file=sys.stderr)
    return 0


def _guarded(fn):
    def run(args: argparse.Namespace) -> int:
        from infer.dialects.ir_io import IRError
        from infer.frontend.model import ModelImportError
        from infer.tools.driver import DriverError
        from infer.tools.sweep import SweepError

        try:
            return fn(args)
        except (SweepError, DriverError, IRError, ModelImportError) as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"infer sweep: error: {msg.removeprefix('error: ')}", file=sys.stderr)
            return 1
    return run


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("sweep", help="hardware design-space sweep: recompile and simulate (timing only) a grid "
                                            "of configs on Ray; sweep.csv and plots")
    p.add_argument("model", help=".onnx, .pt2, Hugging Face folder, or graph-level .mlir")
    p.add_argument("-t", "--target", default="edge", help="base config: edge, server or a CONFIG.toml (default: edge)")
    p.add_argument("--param", action="append", default=[], required=True, metavar="KEY=V1,V2,...",
                   help="a config key and its values, e.g. matrix.rows=16,32,64 (repeatable: the grid is every "
                        "combination); K1+K2=V1,V2 sets both keys to each value")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="compile precision (default fp32)")
    p.add_argument("--ray-address", help="Ray cluster to run the points on (default: a local Ray instance)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DxD...",
                   help="static shape for a model input with dynamic dims (repeatable)")
    p.add_argument("--no-plots", action="store_true", help="write sweep.csv only")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder (sweep.csv, plots, cache/)")
    p.set_defaults(func=_guarded(cmd_sweep))
