"""ResNet-50 through the compiler: compile time next to iree-compile on the same
ONNX file, program size, and simulation wall time next to onnxruntime.

The model is a ResNet-50 (bottleneck blocks 3-4-6-3, 224x224, random weights)
defined here in torch and exported to ONNX, so nothing is downloaded. IREE's
compiler comes from the pip package `iree-base-compiler` (installed by
`make bench`); if it is missing, that column says so.

Printed (peers measured in the same run, since these machines are noisy):
- infer compile time (edge and server) vs iree-compile (llvm-cpu) on the same file
- instructions in the compiled program (target < 50k) and the IR op count
- simulated cycles and the simulator's wall time vs onnxruntime's wall time
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from infer.tools.zoo import build_resnet50_onnx


def time_iree(onnx_path: Path, work: Path) -> str:
    importer = shutil.which("iree-import-onnx") or str(Path(sys.executable).parent / "iree-import-onnx")
    compiler = shutil.which("iree-compile") or str(Path(sys.executable).parent / "iree-compile")
    if not Path(compiler).exists():
        return "iree-compile not installed (pip install iree-base-compiler)"
    t0 = time.perf_counter()
    imported = work / "resnet50.iree.mlir"
    r = subprocess.run([importer, str(onnx_path), "-o", str(imported)], capture_output=True, text=True)
    if r.returncode:
        return f"iree-import-onnx failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}"
    t1 = time.perf_counter()
    r = subprocess.run([compiler, str(imported), "--iree-hal-target-backends=llvm-cpu",
                        "--iree-llvmcpu-target-cpu=host", "-o", str(work / "resnet50.vmfb")],
                       capture_output=True, text=True)
    t2 = time.perf_counter()
    if r.returncode:
        return f"iree-compile failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}"
    return f"{t2 - t0:.1f} s (import {t1 - t0:.1f} s + iree-compile {t2 - t1:.1f} s, llvm-cpu)"


def main() -> int:
    import onnxruntime

    import infer

    work = Path(tempfile.mkdtemp(prefix="infer-resnet50-"))
    onnx_path = build_resnet50_onnx(work / "resnet50.onnx")
    print(f"== ResNet-50 (224x224, batch 1): {onnx_path.stat().st_size / 2**20:.0f} MiB ONNX")

    image = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    session.run(None, {"image": image})
    t0 = time.perf_counter()
    runs = 5
    for _ in range(runs):
        (expected,) = session.run(None, {"image": image})
    ort_s = (time.perf_counter() - t0) / runs
    print(f"onnxruntime (CPU): {ort_s * 1e3:.1f} ms per inference")

    print(f"iree-compile: {time_iree(onnx_path, work)}")

    for target in ("edge", "server"):
        t0 = time.perf_counter()
        try:
            exe = infer.compile(onnx_path, target=target)
        except Exception as e:  # report which stage stops the model, honestly
            print(f"infer compile -t {target}: does not compile yet: {type(e).__name__}: "
                  f"{str(e).splitlines()[0][:300]}")
            continue
        compile_s = time.perf_counter() - t0
        n_instr = len(exe.program)
        print(f"infer compile -t {target}: {compile_s:.1f} s, {n_instr} instructions "
              f"(target < 50k)")
        t0 = time.perf_counter()
        (logits,) = exe.run({"image": image})
        sim_s = time.perf_counter() - t0
        report = exe.last_report
        err = float(np.max(np.abs(logits - expected))) / max(1e-12, float(np.max(np.abs(expected))))
        print(f"  {report.counters.instructions:,} instructions executed "
              f"({report.counters.instructions / n_instr:.0f}x the program: loops stay loops)")
        print(f"  simulated {report.cycles:,} cycles = {report.seconds * 1e3:.2f} ms at the config clock; "
              f"simulator wall {sim_s:.1f} s = {sim_s / ort_s:.0f}x onnxruntime's wall time; "
              f"max error / output range {err:.2e}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
