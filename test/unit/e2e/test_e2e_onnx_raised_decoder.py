"""A Llama-family decoder exported by torch.onnx writes its RMSNorms and rotary embeddings out
as arithmetic (pow, reduce_mean, sqrt, div, mul; slices, neg, concat, mul, add);
graph-raise-rms-norm and graph-raise-rotary make them graph.rms_norm and graph.rotary, so the
ONNX file compiles to the kernels the torch.export import gives (a tiny Llama, server: 40.6 K
cycles through ONNX before, 22.6 K after, the same as through torch.export). The batch is left
padded, so the padding positions' query rows see no key (zeros, as torch's)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import infer
from infer.dialects import graph as g
from infer.dialects.ir_io import make_context
from infer.passes.pipelines import GraphPrepareTilingPass

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SEQ, LAYERS = 16, 2


class _LastHidden(torch.nn.Module):
    """A Hugging Face base model as a function of (ids, attention mask) -> last hidden state."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, ids, mask):
        return self.m(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state


@pytest.fixture(scope="module")
def llama_onnx(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                   max_position_embeddings=64)
    model = transformers.LlamaModel(cfg).eval()

    ids = torch.randint(0, 100, (1, SEQ))
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    mask[0, :3] = 0  # left padding
    path = tmp_path_factory.mktemp("llama") / "llama.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the torch exporter's tracer warnings)
        torch.onnx.export(_LastHidden(model), (ids, mask), str(path), dynamo=False, opset_version=17,
                          input_names=["ids", "mask"], output_names=["hidden"])
    with torch.no_grad():
        want = _LastHidden(model)(ids, mask).numpy()
    return path, [ids.numpy(), mask.numpy()], want


def test_norms_and_rotary_are_raised(llama_onnx):
    path, _, _ = llama_onnx
    module = infer.import_model(path).module
    GraphPrepareTilingPass().apply(make_context(), module)
    ops = list(module.walk())
    count = {kind: sum(isinstance(op, kind) for op in ops) for kind in (g.RmsNormOp, g.RotaryOp, g.AttentionOp)}
    assert count == {g.RmsNormOp: 2 * LAYERS + 1, g.RotaryOp: 2 * LAYERS, g.AttentionOp: LAYERS}
    assert not any(isinstance(op, g.ConcatOp | g.PowOp | g.SqrtOp | g.SoftmaxOp) for op in ops)


@pytest.mark.parametrize("target", ["edge", "server"])
def test_llama_through_onnx_matches_torch(llama_onnx, target):
    path, inputs, want = llama_onnx
    got = infer.compile(str(path), target=target).run(inputs, check_races=True)[0]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())


def test_partial_rotary_is_one_op_through_both_frontends(tmp_path):
    """GPT-NeoX rotates the first quarter of each head's features: concat(rotary(x[..., :R]),
    x[..., R:]) is one graph.rotary with R-wide angles, through ONNX and torch.export alike."""
    torch.manual_seed(0)
    cfg = transformers.GPTNeoXConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                                     num_attention_heads=4, vocab_size=100, max_position_embeddings=64,
                                     rotary_pct=0.25)
    model = transformers.GPTNeoXModel(cfg).eval()

    ids = torch.randint(0, 100, (1, SEQ))
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    with torch.no_grad():
        want = _LastHidden(model)(ids, mask).numpy()
    onnx_path = tmp_path / "neox.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_LastHidden(model), (ids, mask), str(onnx_path), dynamo=False, opset_version=17)
        exported = torch.export.export(_LastHidden(model), (ids, mask))
    for source in (str(onnx_path), exported):
        module = infer.import_model(source).module
        GraphPrepareTilingPass().apply(make_context(), module)
        ops = list(module.walk())
        assert sum(isinstance(op, g.RotaryOp) for op in ops) == 2 * LAYERS
        assert not any(isinstance(op, g.ConcatOp) for op in ops)
    got = infer.compile(exported, target="server").run([ids.numpy(), mask.numpy()], check_races=True)[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())


def test_interleaved_partial_rotary_of_gptj():
    """GPT-J rotates pairs (x[2i], x[2i+1]) of the first rotary_dim features, its pairs' halves
    stacked on a new axis (an interleaving copy of a DMA per element): one graph.rotary
    {interleaved} per operand (the helper sweep's GPT-J, server: 214 K -> 80 K cycles)."""
    torch.manual_seed(0)
    cfg = transformers.GPTJConfig(n_embd=64, n_layer=LAYERS, n_head=4, rotary_dim=8, vocab_size=100,
                                  n_positions=64)
    model = transformers.GPTJModel(cfg).eval()

    ids = torch.randint(0, 100, (1, SEQ))
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    with torch.no_grad():
        want = _LastHidden(model)(ids, mask).numpy()
    exported = torch.export.export(_LastHidden(model), (ids, mask))
    module = infer.import_model(exported).module
    GraphPrepareTilingPass().apply(make_context(), module)
    rotary = [op for op in module.walk() if isinstance(op, g.RotaryOp)]
    assert len(rotary) == 2 * LAYERS and all(op.interleaved.value.data for op in rotary)
    assert not any(isinstance(op, g.ConcatOp) for op in module.walk())
    got = infer.compile(exported, target="server").run([ids.numpy(), mask.numpy()], check_races=True)[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
