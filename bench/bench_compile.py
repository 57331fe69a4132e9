"""Compile time: `infer compile` next to iree-compile (llvm-cpu) on the same ONNX file.

    python bench/bench_compile.py [--repeat N] [--targets edge,server] [--models resnet50,minilm,llama] [--timing]

The models (nothing downloaded): the ResNet-50 of bench_resnet50.py (torch -> ONNX here), and
the ONNX exports bench_simulator.py measures onnxruntime on: all-MiniLM-L6-v2 (real weights,
sequence 32, with mean pooling) and issue 14's Llama-style prefill (hidden 512, GQA, sequence 512).
Both compilers run as fresh processes on the same file, one after the other in this run
(the machines are shared and noisy: only ratios measured side by side mean something), and
each time is the best of `--repeat` runs:
- iree: `iree-import-onnx` (ONNX -> MLIR) + `iree-compile --iree-hal-target-backends=llvm-cpu`;
  from the pip package `iree-base-compiler` (the `bench` extra, installed by `make bench`);
- infer: `infer compile MODEL.onnx -t TARGET --quiet` (import, the compile-npu pipeline,
  the artifact), per target.
Printed: each time (wall, and the CPU time of the child processes: user + system, steadier
than wall time on a loaded machine; iree-compile runs threads, so its CPU time can exceed its
wall time), and infer / iree per target by both (the goal of issue 15: <= 1.0).
`--timing` also prints infer's per-pass report (`infer compile --timing`) of the last run.
infer's bytecode is compiled first (compileall), as an installed package's is: with
PYTHONDONTWRITEBYTECODE set (as on our machines) an editable checkout would otherwise compile
its ~220 modules from source at every start of `infer` (~0.4 s CPU per run), which is not
compile time a user of the installed package pays.
"""

from __future__ import annotations

import argparse
import compileall
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from infer.tools.zoo import build_resnet50_onnx

MODEL_TITLES = {"resnet50": "ResNet-50 (224x224)", "minilm": "all-MiniLM-L6-v2 (sequence 32)",
                "llama": "Llama prefill (2 layers, hidden 512, GQA, sequence 512)"}


def build_onnx(name: str, work: Path) -> Path:
    """The model's ONNX file in `work`."""
    if name == "resnet50":
        return build_resnet50_onnx(work / "resnet50.onnx")
    from bench_simulator import MODELS  # the exports onnxruntime runs in the simulator bench

    return MODELS[name](work)[1]


def tool(name: str) -> str | None:
    """An executable next to this Python (the venv's) or on PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else shutil.which(name)


class Timed(NamedTuple):
    wall: float
    cpu: float  # user + system seconds of the child

    def best(self, other: Timed) -> Timed:
        return Timed(min(self.wall, other.wall), min(self.cpu, other.cpu))


NEVER = Timed(float("inf"), float("inf"))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str]) -> tuple[Timed, subprocess.CompletedProcess]:
    start, start_cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run(cmd, capture_output=True, text=True)
    return Timed(time.perf_counter() - start, _children_cpu() - start_cpu), done


def last_line(done: subprocess.CompletedProcess) -> str:
    text = (done.stderr or done.stdout).strip()
    return text.splitlines()[-1] if text else f"exit status {done.returncode}"


def time_iree(onnx_path: Path, work: Path, repeat: int) -> tuple[Timed, Timed] | str:
    """(import time, compile time), each the best of `repeat`, or why not."""
    importer, compiler = tool("iree-import-onnx"), tool("iree-compile")
    if importer is None or compiler is None:
        return "not installed (pip install iree-base-compiler, or make bench)"
    imported = work / "model.iree.mlir"
    best_import = best_compile = NEVER
    for _ in range(repeat):
        seconds, done = timed([importer, str(onnx_path), "-o", str(imported)])
        if done.returncode:
            return f"iree-import-onnx failed: {last_line(done)}"
        best_import = best_import.best(seconds)
        seconds, done = timed([compiler, str(imported), "--iree-hal-target-backends=llvm-cpu",
                               "--iree-llvmcpu-target-cpu=host", "-o", str(work / "model.vmfb")])
        if done.returncode:
            return f"iree-compile failed: {last_line(done)}"
        best_compile = best_compile.best(seconds)
    return best_import, best_compile


def time_infer(onnx_path: Path, work: Path, target: str, repeat: int,
               timing: bool) -> tuple[Timed, str] | str:
    """(time, the --timing report of the last run or ""), best of `repeat`, or why not."""
    infer = tool("infer")
    if infer is None:
        return "the infer command is not installed"
    cmd = [infer, "compile", str(onnx_path), "-t", target, "-o", str(work / f"{target}.npu"),
           "--quiet"] + (["--timing"] if timing else [])
    best, report = NEVER, ""
    for _ in range(repeat):
        seconds, done = timed(cmd)
        if done.returncode:
            return f"infer compile failed: {last_line(done)}"
        best, report = best.best(seconds), done.stderr
    return best, report


def compile_bytecode() -> None:
    """The infer package's .pyc files, written (not the checkout's .venv and build/)."""
    import infer

    compileall.compile_dir(Path(infer.__file__).parent, quiet=1, rx=re.compile(r"[/\\](\.venv|build)[/\\]"))


def bench_model(name: str, work: Path, args: argparse.Namespace) -> None:
    onnx_path = build_onnx(name, work)
    print(f"== compile time, {MODEL_TITLES[name]}, {onnx_path.stat().st_size / 2**20:.1f} MiB ONNX, "
          f"best of {args.repeat}")
    iree = time_iree(onnx_path, work, args.repeat)
    if isinstance(iree, str):
        print(f"iree: {iree}")
        iree_s = None
    else:
        iree_s = Timed(iree[0].wall + iree[1].wall, iree[0].cpu + iree[1].cpu)
        print(f"iree-import-onnx + iree-compile (llvm-cpu): {iree_s.wall:.1f} s wall, {iree_s.cpu:.1f} s CPU "
              f"(import {iree[0].wall:.1f} s + compile {iree[1].wall:.1f} s wall)")
    for target in [t for t in args.targets.split(",") if t]:
        result = time_infer(onnx_path, work, target, args.repeat, args.timing)
        if isinstance(result, str):
            print(f"infer compile -t {target}: {result}")
            continue
        seconds, report = result
        ratio = (f": {seconds.wall / iree_s.wall:.2f}x iree by wall time, {seconds.cpu / iree_s.cpu:.2f}x by CPU "
                 "time (goal <= 1.0)") if iree_s else ""
        print(f"infer compile -t {target}: {seconds.wall:.1f} s wall, {seconds.cpu:.1f} s CPU{ratio}")
        if args.timing:
            print(report.rstrip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs per compiler (the best counts)")
    ap.add_argument("--targets", default="edge,server", help="infer targets (comma-separated)")
    ap.add_argument("--models", default="resnet50,minilm,llama",
                    help=f"models (comma-separated, of {', '.join(MODEL_TITLES)})")
    ap.add_argument("--timing", action="store_true", help="print infer's per-pass timing report")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(MODEL_TITLES))
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(MODEL_TITLES)})")
    compile_bytecode()
    for name in models:
        with tempfile.TemporaryDirectory(prefix="infer-bench-compile-") as tmp:
            bench_model(name, Path(tmp), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
