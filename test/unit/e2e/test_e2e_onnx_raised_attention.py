"""A BERT encoder exported by torch.onnx writes scaled dot-product attention as two batched
MatMuls around a Softmax (with the NaN guard of fully masked rows); graph-raise-attention makes
each layer's one graph.attention, so the ONNX file compiles to the flash-attention kernel the
Hugging Face import uses. Attention written by hand (Swin's windows) and exported by
torch.export comes as 3-D bmms between reshapes, and is raised too, as are Swin's shifted
windows (a relative position bias, then the windows' mask added through a 5-D view). all-MiniLM-L6-v2 through ONNX (sequence 32, bf16, server): 149,690
cycles before the raise passes, 70,537 after (the Hugging Face folder: 55,720)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import infer
from infer.dialects import graph as g
from infer.dialects.ir_io import make_context
from infer.passes.pipelines import GraphPrepareTilingPass

onnxruntime = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SEQ, VALID = 16, 11


@pytest.fixture(scope="module")
def bert_onnx(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=SEQ,
                                     attn_implementation="sdpa")
    bert = transformers.BertModel(config, add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask):
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    model = Encoder().eval()
    ids = torch.randint(1, 64, (1, SEQ))
    mask = torch.zeros(1, SEQ, dtype=torch.int64)
    mask[0, :VALID] = 1
    path = tmp_path_factory.mktemp("bert") / "bert.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
        torch.onnx.export(model, (ids, mask), str(path), dynamo=False, opset_version=17,
                          input_names=["ids", "mask"], output_names=["hidden"])
    return path, {"ids": ids.numpy(), "mask": mask.numpy()}


def test_each_layer_attention_is_raised(bert_onnx):
    path, _ = bert_onnx
    module = infer.import_model(str(path)).module
    before = [op for op in module.walk() if isinstance(op, g.SoftmaxOp)]
    assert len(before) == 2  # the export writes attention out
    GraphPrepareTilingPass().apply(make_context(), module)
    ops = list(module.walk())
    assert sum(isinstance(op, g.AttentionOp) for op in ops) == 2
    assert not any(isinstance(op, g.SoftmaxOp) for op in ops)


@pytest.mark.parametrize("target,precision", [("edge", "fp32"), ("server", "bf16")])
def test_bert_through_onnx_matches_onnxruntime(bert_onnx, target, precision):
    path, feeds = bert_onnx
    want = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    exe = infer.compile(str(path), target=target, precision=precision)
    got = exe.run([feeds[name] for name in exe.input_names], check_races=True)[0]
    if precision == "fp32":
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
    else:
        cosine = float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want))
        assert cosine >= 0.999, cosine


class _WindowAttention(torch.nn.Module):
    """Swin's window attention as torchvision writes it: one qkv projection split five ways,
    q scaled, q @ k^T plus a learned bias over the heads, softmax, @ v. torch.export writes the
    4-D matmuls as 3-D bmms between reshapes, and v reaches its bmm straight from the 5-D split."""

    def __init__(self, dim=32, heads=4, tokens=16, windows=0):
        super().__init__()
        self.heads, self.scale, self.windows = heads, (dim // heads) ** -0.5, windows
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.bias = torch.nn.Parameter(torch.randn(1, heads, tokens, tokens) * 0.5)
        self.proj = torch.nn.Linear(dim, dim)
        # shifted windows: which tokens of a window came from different regions (-100: apart)
        regions = torch.randint(0, 3, (max(windows, 1), tokens))
        self.register_buffer("shift_mask", torch.where(regions[:, :, None] == regions[:, None, :], 0.0, -100.0))

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale).matmul(k.transpose(-2, -1)) + self.bias
        if self.windows:  # torchvision's shifted_window_attention adds the mask through a 5-D view
            attn = attn.view(b // self.windows, self.windows, self.heads, n, n)
            attn = attn + self.shift_mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, n, n)
        out = attn.softmax(dim=-1).matmul(v)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


@pytest.mark.parametrize("target, windows, frontend", [
    ("edge", 0, "export"), ("server", 0, "export"),
    ("server", 2, "export"), ("edge", 2, "onnx"),  # shifted: 2 images of 2 windows
])
def test_window_attention_is_raised_and_matches_torch(tmp_path, target, windows, frontend):
    torch.manual_seed(1)
    model = _WindowAttention(windows=windows).eval()
    x = torch.randn(4 if windows else 3, 16, 32)
    if frontend == "export":
        source = torch.export.export(model, (x,))
    else:
        source = tmp_path / "window_attention.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (x,), str(source), dynamo=False, opset_version=17)
    module = infer.import_model(source).module
    GraphPrepareTilingPass().apply(make_context(), module)
    ops = list(module.walk())
    assert sum(isinstance(op, g.AttentionOp) for op in ops) == 1
    assert not any(isinstance(op, g.SoftmaxOp) for op in ops)
    exe = infer.compile(source, target=target)
    with torch.no_grad():
        want = model(x).numpy()
    got = exe.run([x.numpy()], check_races=True)[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
