"""A query row whose every key is masked (a left-padded batch of a causal LM: the padding
positions' own queries) attends to nothing: graph.attention's reference and torch give zeros.
The flash kernel gave the mean of V (keys masked by the NPU's -1e30) and, through ONNX, NaN
(torch.onnx writes the boolean mask as where(mask, 0, -inf)), which the next layer spread to
every position. A float mask of finfo.min (eager attention) gives the uniform softmax, the mean
of V, in both."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import infer

torch = pytest.importorskip("torch")


class _Sdpa(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class _EagerFloatMask(torch.nn.Module):
    def forward(self, q, k, v, mask):
        bias = (1.0 - mask.float()) * torch.finfo(torch.float32).min
        return ((q @ k.transpose(-1, -2)) / 4.0 + bias).softmax(-1) @ v


def _inputs(seq: int):
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, seq, 16) for _ in range(3))
    mask = torch.tril(torch.ones(seq, seq, dtype=torch.bool))[None, None].clone()
    mask[..., :3] = False  # three padding keys: query rows 0..2 see no key
    return q, k, v, mask


@pytest.mark.parametrize("model, frontend, seq, target", [
    (_Sdpa, "export", 8, "server"), (_Sdpa, "onnx", 8, "edge"),  # one key tile
    (_Sdpa, "onnx", 300, "server"), (_Sdpa, "export", 300, "edge"),  # running statistics
    (_EagerFloatMask, "onnx", 8, "server"), (_EagerFloatMask, "export", 300, "server"),
])
def test_fully_masked_query_rows(tmp_path, model, frontend, seq, target):
    args = _inputs(seq)
    with torch.no_grad():
        want = model()(*args).numpy()
    if frontend == "export":
        source = torch.export.export(model(), args)
    else:
        source = str(tmp_path / "attention.onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model(), args, source, dynamo=False, opset_version=17)
    exe = infer.compile(source, target=target)
    got = exe.run([a.numpy() for a in args], check_races=True)[0]
    assert np.isfinite(got).all()
    if model is _Sdpa:
        assert np.all(want[:, :, :3] == 0)
    else:
        np.testing.assert_allclose(want[:, :, :3], np.broadcast_to(args[2].numpy()[:, :, :, :].mean(2, keepdims=True), want[:, :, :3].shape), atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
