"""The ONNX path for the real models: Llama (GQA), GPT-2, BERT and all-MiniLM-L6-v2
exported from torch (TorchScript exporter, opset 17), imported by infer and run on
the graph reference interpreter, compared with onnxruntime on the same file.
MiniLM is also compared with sentence-transformers (cosine >= 0.9999)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import infer

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

TOLERANCE = 1e-4  # max abs error vs onnxruntime (f32 end to end)


def _export(module, args: tuple, path: Path, input_names: list[str]) -> Path:
    module.eval()
    with warnings.catch_warnings():
        # The TorchScript exporter warns about its own deprecation and tracer details.
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), dynamo=False, input_names=input_names,
                          output_names=["output"], opset_version=17)
    return path


class _CausalLM(torch.nn.Module):
    """logits for input_ids with an explicit all-ones mask and positions (the
    exporter cannot trace transformers' mask inference)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        mask = torch.ones_like(input_ids)
        positions = torch.arange(input_ids.shape[1])[None]
        return self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=False)[0]


class _Encoder(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]


def _compare(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    (got,) = infer.import_model(path).run(feeds)
    assert got.shape == expected.shape
    err = float(np.max(np.abs(got - expected)))
    assert err <= TOLERANCE, f"max abs error {err:.3g} vs onnxruntime"
    return got


@pytest.mark.parametrize("which", ["llama", "gpt2"])
def test_decoder_logits_match_onnxruntime(which, llama_model, gpt2_model, tmp_path):
    model = llama_model if which == "llama" else gpt2_model
    ids = np.random.default_rng(0).integers(0, 256, (1, 8)).astype(np.int64)
    path = _export(_CausalLM(model), (torch.from_numpy(ids),), tmp_path / f"{which}.onnx", ["input_ids"])
    logits = _compare(path, {"input_ids": ids})
    with torch.no_grad():
        reference = _CausalLM(model)(torch.from_numpy(ids)).numpy()
    assert float(np.max(np.abs(logits - reference))) <= TOLERANCE


def test_bert_hidden_states_match_onnxruntime(bert_model, tmp_path):
    rng = np.random.default_rng(1)
    feeds = {
        "input_ids": rng.integers(0, 256, (2, 8)).astype(np.int64),
        "attention_mask": np.array([[1] * 8, [1] * 5 + [0] * 3], np.int64),
        "token_type_ids": np.zeros((2, 8), np.int64),
    }
    args = tuple(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))
    path = _export(_Encoder(bert_model), args, tmp_path / "bert.onnx", list(feeds))
    _compare(path, feeds)


def test_minilm_via_onnx_matches_sentence_transformers(minilm_st, minilm_batch, tmp_path):
    feeds, reference = minilm_batch
    encoder = minilm_st[0].auto_model
    args = tuple(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))
    path = _export(_Encoder(encoder), args, tmp_path / "minilm.onnx", list(feeds))
    hidden = _compare(path, feeds)
    # sentence-transformers' pooling (mean over unmasked tokens) and normalisation
    mask = feeds["attention_mask"][..., None].astype(np.float32)
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    cosine = (pooled * reference).sum(1) / np.linalg.norm(reference, axis=1)
    assert cosine.min() >= 0.9999, cosine
