"""Compile time: `infer compile` next to iree-compile (llvm-cpu) on the same ONNX file.

    python bench/bench_compile.py [--repeat N] [--targets edge,server] [--timing]

The model is the ResNet-50 of bench_resnet50.py (torch -> ONNX here, nothing downloaded).
Both compilers run as fresh processes on the same file, one after the other in this run
(the machines are shared and noisy: only ratios measured side by side mean something), and
each time is the best of `--repeat` runs:
- iree: `iree-import-onnx` (ONNX -> MLIR) + `iree-compile --iree-hal-target-backends=llvm-cpu`;
  from the pip package `iree-base-compiler` (the `bench` extra, installed by `make bench`);
- infer: `infer compile MODEL.onnx -t TARGET --quiet` (import, the compile-npu pipeline,
  the artifact), per target.
Printed: each time, and infer / iree per target (the goal of issue 15: <= 1.0).
`--timing` also prints infer's per-pass report (`infer compile --timing`) of the last run.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from infer.tools.zoo import build_resnet50_onnx


def tool(name: str) -> str | None:
    """An executable next to this Python (the venv's) or on PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else shutil.which(name)


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    return time.perf_counter() - start, done


def last_line(done: subprocess.CompletedProcess) -> str:
    text = (done.stderr or done.stdout).strip()
    return text.splitlines()[-1] if text else f"exit status {done.returncode}"


def time_iree(onnx_path: Path, work: Path, repeat: int) -> tuple[float, float] | str:
    """(import seconds, compile seconds), each the best of `repeat`, or why not."""
    importer, compiler = tool("iree-import-onnx"), tool("iree-compile")
    if importer is None or compiler is None:
        return "not installed (pip install iree-base-compiler, or make bench)"
    imported = work / "model.iree.mlir"
    best_import = best_compile = float("inf")
    for _ in range(repeat):
        seconds, done = timed([importer, str(onnx_path), "-o", str(imported)])
        if done.returncode:
            return f"iree-import-onnx failed: {last_line(done)}"
        best_import = min(best_import, seconds)
        seconds, done = timed([compiler, str(imported), "--iree-hal-target-backends=llvm-cpu",
                               "--iree-llvmcpu-target-cpu=host", "-o", str(work / "model.vmfb")])
        if done.returncode:
            return f"iree-compile failed: {last_line(done)}"
        best_compile = min(best_compile, seconds)
    return best_import, best_compile


def time_infer(onnx_path: Path, work: Path, target: str, repeat: int,
               timing: bool) -> tuple[float, str] | str:
    """(seconds, the --timing report of the last run or ""), best of `repeat`, or why not."""
    infer = tool("infer")
    if infer is None:
        return "the infer command is not installed"
    cmd = [infer, "compile", str(onnx_path), "-t", target, "-o", str(work / f"{target}.npu"),
           "--quiet"] + (["--timing"] if timing else [])
    best, report = float("inf"), ""
    for _ in range(repeat):
        seconds, done = timed(cmd)
        if done.returncode:
            return f"infer compile failed: {last_line(done)}"
        best, report = min(best, seconds), done.stderr
    return best, report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs per compiler (the best counts)")
    ap.add_argument("--targets", default="edge,server", help="infer targets (comma-separated)")
    ap.add_argument("--timing", action="store_true", help="print infer's per-pass timing report")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="infer-bench-compile-") as tmp:
        work = Path(tmp)
        onnx_path = build_resnet50_onnx(work / "resnet50.onnx")
        print(f"== compile time, ResNet-50 (224x224, {onnx_path.stat().st_size / 2**20:.0f} MiB ONNX), "
              f"best of {args.repeat}")
        iree = time_iree(onnx_path, work, args.repeat)
        if isinstance(iree, str):
            print(f"iree: {iree}")
            iree_s = None
        else:
            iree_s = sum(iree)
            print(f"iree-import-onnx + iree-compile (llvm-cpu): {iree_s:.1f} s "
                  f"(import {iree[0]:.1f} s + compile {iree[1]:.1f} s)")
        for target in [t for t in args.targets.split(",") if t]:
            result = time_infer(onnx_path, work, target, args.repeat, args.timing)
            if isinstance(result, str):
                print(f"infer compile -t {target}: {result}")
                continue
            seconds, report = result
            ratio = f" = {seconds / iree_s:.2f}x iree (goal <= 1.0)" if iree_s else ""
            print(f"infer compile -t {target}: {seconds:.1f} s{ratio}")
            if args.timing:
                print(report.rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
