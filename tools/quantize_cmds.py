"""`infer calibrate` and `infer quantize`: the command line over tools/quantize.py.

    infer calibrate MODEL --data CALIB.npz [--method minmax|percentile|entropy|mse] [-o MODEL.calib.json]
    infer quantize MODEL --calibration CALIB.npz|CALIB.json [--data CALIB.npz] [--min-cosine 0.99]
                   [--exclude LAYER,...] -o OUT.mlir [--report REPORT.json]

`calibrate` runs the reference interpreter over the samples and writes the calibration table
(readable JSON: per tensor its name, min, max, the chosen threshold and the method; edit a
threshold to override it). `quantize` writes the int8 model as graph IR (integer kernels;
`infer run-ir OUT.mlir` runs it) and prints the per-layer sensitivity and precision.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DATA_HELP = ("an .npz with one array per model input, keyed by the input's name, each with a leading sample "
             "axis (input x of shape 1x3x32x32, 16 samples: an array of 16x1x3x32x32)")


def _import_options(args: argparse.Namespace) -> dict[str, Any]:
    from infer.tools.driver import parse_input_shapes

    return {"input_shapes": parse_input_shapes(args.input_shape)} if args.input_shape else {}


def cmd_calibrate(args: argparse.Namespace) -> int:
    from infer.tools.driver import progress_printer
    from infer.tools.quantize import calibrate

    out = args.output or str(Path(args.model).with_suffix("")) + ".calib.json"
    table = calibrate(args.model, args.data, args.method, output=out, entry=args.entry, bins=args.bins,
                      percentile=args.percentile, progress=progress_printer(True), **_import_options(args))
    print(f"wrote {out}: {len(table.tensors)} tensor(s), method {table.method}, {table.samples} sample(s)",
          file=sys.stderr)
    return 0


def cmd_quantize(args: argparse.Namespace) -> int:
    from infer.tools.driver import progress_printer
    from infer.tools.quantize import quantize

    exclude = [n for item in args.exclude for n in item.split(",") if n]
    model, report = quantize(args.model, args.calibration, data=args.data, min_cosine=args.min_cosine,
                             method=args.method, exclude=exclude, entry=args.entry,
                             progress=progress_printer(True), **_import_options(args))
    print(report.table())
    if args.output:
        model.save(args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    if args.report:
        Path(args.report).write_text(json.dumps(report.as_dict(), indent=1) + "\n")
        print(f"wrote {args.report}", file=sys.stderr)
    if not report.met:
        print(f"warning: output cosine {report.cosine:.6f} is below the target {report.min_cosine}", file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from infer.tools.cli import writes

    from infer.passes.quantize.calibration import CALIBRATION_METHODS, DEFAULT_BINS, DEFAULT_METHOD, DEFAULT_PERCENTILE

    p = subparsers.add_parser(
        "calibrate", help="record each activation's range on calibration samples (for int8 quantization)",
        description="Run the reference interpreter over calibration samples and write each activation's "
                    "range and chosen threshold (JSON).")
    p.add_argument("model", help=".onnx, .pt2, Hugging Face folder, or graph-level .mlir")
    p.add_argument("--data", required=True, metavar="CALIB.npz", help=DATA_HELP)
    p.add_argument("--method", choices=CALIBRATION_METHODS, default=DEFAULT_METHOD,
                   help=f"how each threshold is chosen (default {DEFAULT_METHOD}): minmax = max |x|; percentile = "
                        "the --percentile of |x|; entropy = TensorRT's KL-divergence search; mse = least expected "
                        "squared quantization error")
    p.add_argument("-o", "--output", metavar="OUT.json", help="the table (default: MODEL.calib.json)")
    p.add_argument("--bins", type=int, default=DEFAULT_BINS, help=f"histogram bins (default {DEFAULT_BINS})")
    p.add_argument("--percentile", type=float, default=DEFAULT_PERCENTILE,
                   help=f"for --method percentile (default {DEFAULT_PERCENTILE})")
    p.add_argument("--entry", default="main", help="function to calibrate (default: main)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DxD...",
                   help="static shape for a model input with dynamic dims (repeatable)")
    p.set_defaults(func=cmd_calibrate)
    writes(p, "output")

    p = subparsers.add_parser(
        "quantize", help="int8-quantize a model at the graph level (runs on the reference interpreter)",
        description="Quantize conv2d/linear/matmul to int8 (integer kernels) from calibration samples or a "
                    "table, report each layer's sensitivity, and keep sensitive layers in float for --min-cosine.")
    p.add_argument("model", help=".onnx, .pt2, Hugging Face folder, or graph-level .mlir")
    p.add_argument("--calibration", required=True, metavar="CALIB.npz|CALIB.json",
                   help=f"samples ({DATA_HELP}) or a table from `infer calibrate`")
    p.add_argument("--data", metavar="CALIB.npz", help="samples for the sensitivity when --calibration is a table")
    p.add_argument("--method", choices=CALIBRATION_METHODS, help="calibration method for .npz samples")
    p.add_argument("--min-cosine", type=float, metavar="C",
                   help="keep the most sensitive layers in float until the output cosine is >= C")
    p.add_argument("--exclude", action="append", default=[], metavar="LAYER,...", help="layers kept in float")
    p.add_argument("-o", "--output", metavar="OUT.mlir", help="write the int8 graph IR (weights beside it)")
    p.add_argument("--report", metavar="REPORT.json", help="write the per-layer report as JSON")
    p.add_argument("--entry", default="main", help="function to quantize (default: main)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DxD...",
                   help="static shape for a model input with dynamic dims (repeatable)")
    p.set_defaults(func=cmd_quantize)
    writes(p, "output", "report")
