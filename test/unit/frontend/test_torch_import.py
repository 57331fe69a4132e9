"""torch.export frontend against eager PyTorch / transformers / sentence-transformers."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from infer.dialects.graph_interpreter import run_module
from infer.frontend import ModelImportError, import_model

torch = pytest.importorskip("torch")
from infer.frontend.torch_import import import_pt2, import_torch  # noqa: E402

TOL = 1e-4


def _ops(module) -> list[str]:
    return [op.name for op in module.walk()]


def test_llama_gqa_logits(llama_model):
    ids = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(0))
    module = import_torch(llama_model, {"input_ids": ids, "use_cache": False})
    with torch.no_grad():
        ref = llama_model(ids, use_cache=False).logits.numpy()
    out = run_module(module, [ids.numpy()])
    assert np.abs(out[0] - ref).max() <= TOL
    ops = _ops(module)
    # causal mask and RoPE tables are folded at import; RMSNorm and rotate_half
    # RoPE are recognized; what the fusions leave dead is removed
    assert ops.count("graph.attention") == 2 and ops.count("graph.linear") == 15
    assert ops.count("graph.rms_norm") == 5 and ops.count("graph.rotary") == 4
    assert not {"graph.rsqrt", "graph.reduce_mean", "graph.neg", "graph.concat", "graph.slice"} & set(ops)


def test_gpt2_logits(gpt2_model):
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(1))
    module = import_torch(gpt2_model, {"input_ids": ids, "use_cache": False})
    with torch.no_grad():
        ref = gpt2_model(ids, use_cache=False).logits.numpy()
    out = run_module(module, [ids.numpy()])
    assert np.abs(out[0] - ref).max() <= TOL


def test_bert_with_padding_mask(bert_model):
    ids = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    module = import_torch(bert_model, {"input_ids": ids, "attention_mask": mask})
    with torch.no_grad():
        ref = bert_model(input_ids=ids, attention_mask=mask)
    hidden, pooled = run_module(module, [ids.numpy(), mask.numpy()])
    assert np.abs(hidden - ref.last_hidden_state.numpy()).max() <= TOL
    assert np.abs(pooled - ref.pooler_output.numpy()).max() <= TOL


class _SentenceEmbedder(torch.nn.Module):
    """The whole sentence-transformers pipeline (BERT, mean pooling, Normalize)."""

    def __init__(self, st):
        super().__init__()
        self.st = st

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.st({"input_ids": input_ids, "attention_mask": attention_mask,
                        "token_type_ids": token_type_ids})["sentence_embedding"]


def test_minilm_sentence_embeddings(minilm_st, minilm_batch):
    feeds, ref = minilm_batch
    example = tuple(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))
    module = import_torch(_SentenceEmbedder(minilm_st), example)
    (emb,) = run_module(module, [feeds["input_ids"], feeds["attention_mask"], feeds["token_type_ids"]])
    cos = (emb * ref).sum(-1) / np.linalg.norm(emb, axis=-1) / np.linalg.norm(ref, axis=-1)
    assert cos.min() >= 0.9999, cos


class _Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = torch.nn.functional.max_pool2d(x, 2)
        x = torch.nn.functional.hardswish(self.dw(x))
        x = torch.nn.functional.avg_pool2d(x, 2, ceil_mode=True)
        x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return torch.softmax(self.fc(x), -1), x.mean(dim=1, keepdim=True) * 2 - 1


def test_small_cnn():
    torch.manual_seed(0)
    m = _Cnn().eval()
    with torch.no_grad():
        m.bn.running_mean.normal_()
        m.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 3, 20, 20)
    module = import_torch(m, (x,))
    with torch.no_grad():
        ref = [r.numpy() for r in m(x)]
    out = run_module(module, [x.numpy()])
    for o, r in zip(out, ref, strict=True):
        assert np.abs(o - r).max() <= TOL
    ops = _ops(module)
    assert {"graph.conv2d", "graph.batch_norm", "graph.max_pool2d", "graph.avg_pool2d"} <= set(ops)


@pytest.mark.parametrize("make, shape", [
    (lambda: torch.nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1), (2, 6, 5, 7)),
    (lambda: torch.nn.ConvTranspose2d(6, 4, (3, 2), stride=(1, 3), padding=(2, 0), dilation=(2, 1)), (1, 6, 6, 4)),
    (lambda: torch.nn.ConvTranspose2d(6, 9, 4, stride=2, padding=1, groups=3, bias=False), (1, 6, 4, 4)),
    (lambda: torch.nn.ConvTranspose1d(5, 3, 4, stride=3, padding=2, output_padding=2), (2, 5, 9)),
    (lambda: torch.nn.ConvTranspose2d(6, 4, 4, stride=2, padding=1), (2, 6, 4, 5)),  # DCGAN: output phases
    (lambda: torch.nn.ConvTranspose2d(6, 4, (5, 3), stride=(3, 2), padding=(0, 2), output_padding=(2, 1)), (1, 6, 3, 4)),
    (lambda: torch.nn.ConvTranspose2d(6, 4, 3, stride=2, padding=2, groups=2), (1, 6, 5, 5)),
    (lambda: torch.nn.ConvTranspose2d(6, 4, 2, stride=2), (2, 6, 5, 3)),  # U-Net: a 1x1 conv, depth-to-space
    (lambda: torch.nn.ConvTranspose2d(6, 4, (3, 2), stride=(3, 2), bias=False), (1, 6, 4, 4)),
])
def test_conv_transpose(make, shape):
    """Transposed convs (stride, padding beyond the kernel's reach, output padding,
    dilation, groups, 1-D) import as a conv of the zero-inserted input and match torch."""
    torch.manual_seed(0)
    module = _import_matching_torch(make().eval(), torch.randn(*shape))
    assert "graph.conv2d" in _ops(module)


def _import_matching_torch(m, x):
    """m imported at x; its reference run matches m's output within TOL."""
    module = import_torch(m, (x,))
    with torch.no_grad():
        ref = m(x).numpy()
    out = run_module(module, [x.numpy()])[0]
    assert out.shape == ref.shape and np.abs(out - ref).max() <= TOL
    return module


class _AudioFrontEnd(torch.nn.Module):
    """wav2vec2's and Whisper's first layers: strided and padded conv1d, a group norm of one
    group per channel (wav2vec2) and of two groups, GELU."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 8, 10, stride=5, bias=False)
        self.norm = torch.nn.GroupNorm(8, 8, affine=True)
        self.conv2 = torch.nn.Conv1d(8, 6, 3, stride=2, padding=1, dilation=2, groups=2)
        self.norm2 = torch.nn.GroupNorm(2, 6)

    def forward(self, x):
        y = torch.nn.functional.gelu(self.norm(self.conv(x)))
        return self.norm2(self.conv2(y))


def test_conv1d_and_group_norm():
    torch.manual_seed(0)
    m = _AudioFrontEnd().eval()
    with torch.no_grad():
        m.norm.weight.uniform_(0.5, 1.5)
        m.norm.bias.normal_()
    module = _import_matching_torch(m, torch.randn(2, 1, 400))
    assert "graph.conv2d" in _ops(module)


class _Frames(torch.nn.Module):
    """Overlapping frames of a signal as a strided view, and adaptive average pooling (whose
    decomposition writes an as_strided that is the tensor itself: Swin's pooler)."""

    def forward(self, x):
        frames = torch.as_strided(x, (2, 5, 8), (40, 4, 1))
        pooled = torch.nn.functional.adaptive_avg_pool1d(x.reshape(2, 4, 10), 1)
        return frames * 2, pooled


def test_as_strided_views_of_contiguous_tensors():
    x = torch.randn(2, 40)
    module = import_torch(_Frames().eval(), (x,))
    ref = [r.numpy() for r in _Frames()(x)]
    out = run_module(module, [x.numpy()])
    for o, r in zip(out, ref, strict=True):
        assert o.shape == r.shape and np.abs(o - r).max() <= TOL
    assert "graph.gather" in _ops(module)


class _StridedTranspose(torch.nn.Module):
    def forward(self, x):
        return torch.as_strided(x.t(), (3, 4), (1, 3)) + 1


def test_as_strided_of_a_transposed_view_is_one_error():
    """The view reads the transpose's storage, which is not its logical order."""
    with pytest.raises(ModelImportError, match="as_strided of a non-contiguous tensor"):
        import_torch(_StridedTranspose().eval(), (torch.randn(3, 4),))


class _TopK(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.topk(x, 3, dim=1)
        smallest = torch.topk(x, 2, largest=False)
        return values, indices, smallest.values, smallest.indices


def test_topk_values_and_indices():
    """torch.topk along a middle and the last dim, largest and smallest, with ties: the values
    equal torch's, the indices torch's stable sort's (one order torch.topk may give)."""
    x = torch.round(torch.randn(2, 6, 5, generator=torch.Generator().manual_seed(3)) * 2) / 2
    module = import_torch(_TopK(), (x,))
    out = run_module(module, [x.numpy()])
    v, i, v2, i2 = _TopK()(x)
    np.testing.assert_array_equal(out[0], v.numpy())
    np.testing.assert_array_equal(out[2], v2.numpy())
    np.testing.assert_array_equal(out[1], torch.sort(x, dim=1, descending=True, stable=True).indices[:, :3].numpy())
    np.testing.assert_array_equal(out[3], torch.sort(x, dim=-1, stable=True).indices[..., :2].numpy())
    assert out[1].dtype == np.int64 and "graph.top_k" in _ops(module)


class _SortGather(torch.nn.Module):
    def forward(self, x, i):
        ascending = torch.sort(x, dim=1)
        descending = torch.sort(x, dim=-1, descending=True, stable=True)
        return (ascending.values, ascending.indices, descending.values, descending.indices,
                torch.argsort(x, dim=0), torch.argsort(x, dim=1, descending=True, stable=True),
                torch.gather(x, 1, i))


def test_sort_argsort_and_gather_equal_torch():
    """sort / argsort (both overloads) as graph.top_k of the whole axis, gather as the one-hot
    take along the axis (an index narrower than the input on the other dim too)."""
    x = torch.round(torch.randn(4, 6, generator=torch.Generator().manual_seed(5)) * 2) / 2
    i = torch.tensor([[0, 5], [1, 1], [3, 2]])
    module = import_torch(_SortGather(), (x, i))
    out = run_module(module, [x.numpy(), i.numpy()])
    for ours, theirs in zip(out, _SortGather()(x, i)):
        assert ours.dtype == theirs.numpy().dtype
        np.testing.assert_array_equal(ours, theirs.numpy())


def test_pt2_round_trip(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 3)).eval()
    x = torch.randn(2, 4)
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(m, (x,)), str(path))
    model = import_model(path)
    with torch.no_grad():
        ref = m(x).numpy()
    assert np.abs(model.run([x.numpy()])[0] - ref).max() <= TOL
    # parameters keep their state_dict names
    assert "@\"0.weight\"" in str(model) or "@0.weight" in str(model)


def test_pt2_with_pickled_payload_is_refused(tmp_path):
    m = torch.nn.Linear(2, 2)
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(m, (torch.randn(1, 2),)), str(path))
    evil = tmp_path / "evil.pt2"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(evil, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("_weights_config.json"):
                cfg = json.loads(data)
                for meta in cfg["config"].values():
                    meta["use_pickle"] = True
                data = json.dumps(cfg).encode()
            dst.writestr(info, data)
    with pytest.raises(ModelImportError, match="refusing to load.*pickled tensor"):
        import_pt2(evil)
    (tmp_path / "junk.pt2").write_bytes(b"not a zip")
    with pytest.raises(ModelImportError, match="not a torch.export archive"):
        import_pt2(tmp_path / "junk.pt2")


def test_unsupported_ops_are_collected():
    class M(torch.nn.Module):
        def forward(self, x):
            y = torch.histc(x, bins=4)
            z = torch.fft.rfft(x).abs()
            return y.sum() + z.sum() + torch.histc(x * 2, bins=3).sum()

    with pytest.raises(ModelImportError) as e:
        import_torch(M(), (torch.randn(3, 4),))
    msg = str(e.value)
    assert "aten.histc.default" in msg and "histc" in msg and "histc_1" in msg
    assert "fft" in msg


def test_module_needs_example_inputs():
    with pytest.raises(ModelImportError, match="example_inputs"):
        import_torch(torch.nn.Linear(2, 2))


# -- KV cache through torch.export ------------------------------------------------------
# The exported graphs take and return the cache as explicit tensors: a prefill
# program returns logits and k/v per layer, a decode program (exported for one
# past length; the cache grows by one per step) takes the new token and the
# past k/v. Masks and positions are folded at import for that past length.


class _Prefill(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        out = self.model(input_ids=input_ids, use_cache=True)
        return (out.logits, *[t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)])


class _Decode(_Prefill):
    def forward(self, input_ids, *past):
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        for i in range(len(past) // 2):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True)
        return (out.logits, *[t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)])


@pytest.mark.parametrize("which", ["llama", "gpt2"])
def test_prefill_then_decode_with_kv_cache(which, llama_model, gpt2_model):
    model = llama_model if which == "llama" else gpt2_model
    S, steps = 8, 3
    ids = torch.randint(0, 256, (2, S + steps), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = model(ids, use_cache=False).logits.numpy()
    prefill = import_torch(_Prefill(model), (ids[:, :S],))
    outs = run_module(prefill, [ids[:, :S].numpy()])
    errs = [np.abs(outs[0] - ref[:, :S]).max()]
    cache = outs[1:]
    for t in range(steps):
        tok = ids[:, S + t : S + t + 1]
        decode = import_torch(_Decode(model), (tok, *[torch.tensor(np.array(c)) for c in cache]))
        outs = run_module(decode, [tok.numpy(), *cache])
        cache = outs[1:]
        assert cache[0].shape[2] == S + t + 1
        errs.append(np.abs(outs[0][:, 0] - ref[:, S + t]).max())
    assert max(errs) <= TOL, errs


def test_stateful_program_is_refused():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("n", torch.zeros(1))

        def forward(self, x):
            self.n.add_(1)
            return x * self.n

    with pytest.raises(ModelImportError, match="mutates state"):
        import_torch(Counter(), (torch.randn(2),))


class _AdaptivePool(torch.nn.Module):
    def __init__(self, out):
        super().__init__()
        self.out = out

    def forward(self, x):
        return torch.nn.functional.adaptive_avg_pool2d(x, self.out)


@pytest.mark.parametrize("shape,out", [((1, 3, 5, 7), (3, 2)), ((2, 4, 2, 2), (6, 6)), ((1, 8, 13, 13), (6, 6))])
def test_adaptive_avg_pool_of_bins_of_different_sizes(shape, out):
    """Adaptive average pooling whose output does not divide its input (AlexNet's 6x6 pool of a
    smaller image's 2x2 or 13x13 features; bins overlap or repeat) was one import error; it is
    one graph.linear of a compile-time averaging matrix, matching torch in the reference and on
    the simulator."""
    import infer

    torch.manual_seed(0)
    x = torch.randn(*shape)
    m = _AdaptivePool(out)
    _import_matching_torch(m, x)
    exe = infer.compile(torch.export.export(m, (x,)), target="edge")
    want = m(x).numpy()
    got = exe.run([x.numpy()], check_races=True)[0]
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


@pytest.mark.parametrize("kernel,stride,padding,dilation,groups,shape", [
    ((3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1, (1, 3, 6, 10, 10)),  # r3d's stem and blocks
    ((3, 1, 1), (2, 1, 1), (1, 0, 0), (1, 1, 1), 2, (2, 4, 7, 5, 6)),  # R(2+1)D's temporal convs
    ((1, 3, 3), (1, 2, 2), (0, 1, 1), (1, 1, 1), 1, (1, 2, 4, 9, 9)),  # and its spatial ones
    ((2, 3, 3), (1, 1, 1), (1, 1, 1), (2, 1, 1), 4, (1, 4, 7, 6, 6)),  # dilated depth, depthwise
])
def test_conv3d_through_torch_export_and_onnx(tmp_path, kernel, stride, padding, dilation, groups, shape):
    """3-D convolutions (torchvision's video models) were one import error on both paths; each is
    one graph.conv2d over the depth taps (GraphBuilder.conv3d), matching torch in the reference
    and on the simulator whichever frontend brings it."""
    import warnings

    import infer

    torch.manual_seed(0)
    cin = shape[1]
    m = torch.nn.Conv3d(cin, 2 * cin, kernel, stride, padding, dilation, groups=groups).eval()
    x = torch.randn(*shape)
    _import_matching_torch(m, x)
    with torch.no_grad():
        want = m(x).numpy()
    onnx_path = tmp_path / "conv3d.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation
        torch.onnx.export(m, (x,), str(onnx_path), dynamo=False, input_names=["x"])
    for source, target in ((torch.export.export(m, (x,)), "edge"), (str(onnx_path), "server")):
        got = infer.compile(source, target=target).run([x.numpy()], check_races=True)[0]
        assert got.shape == want.shape and np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


class _Interpolate(torch.nn.Module):
    def __init__(self, **options):
        super().__init__()
        self.options = options

    def forward(self, x):
        if self.options["mode"] == "lanczos":  # torchvision's resize; F.interpolate has no such mode
            return torch.ops.aten._upsample_lanczos2d_aa(x, self.options["size"], False)
        return torch.nn.functional.interpolate(x, **self.options)


@pytest.mark.parametrize("rank,options", [
    (4, dict(scale_factor=2, mode="nearest")),  # FPN / YOLO necks
    (4, dict(size=(7, 9), mode="bilinear", align_corners=False)),  # segmentation heads
    (4, dict(scale_factor=2, mode="bilinear", align_corners=True)),
    (4, dict(scale_factor=0.5, mode="bilinear", recompute_scale_factor=True)),
    (4, dict(scale_factor=1.5, mode="bicubic")),
    (4, dict(size=(5, 6), mode="nearest-exact")),
    (4, dict(size=(3, 4), mode="bilinear", antialias=True)),
    (4, dict(size=(4, 11), mode="bicubic", antialias=True)),
    (4, dict(size=(3, 8), mode="lanczos")),
    (3, dict(scale_factor=2.5, mode="nearest")),
    (3, dict(scale_factor=2, mode="linear")),
    (5, dict(scale_factor=(1, 2, 2), mode="trilinear")),
])
def test_interpolate_modes(rank, options):
    """F.interpolate's resampling ops (aten.upsample_*) were one import error through torch.export
    (torchvision's segmentation models); each spatial axis is one compile-time [out, n] matrix
    taken from the op itself: nearest modes a gather (exact), the others a product."""
    torch.manual_seed(0)
    x = torch.randn(*([2, 3] + [6] * (rank - 2)))
    module = _import_matching_torch(_Interpolate(**options), x)
    ops = _ops(module)
    if options["mode"].startswith("nearest"):
        assert "graph.gather" in ops and "graph.matmul" not in ops
    else:
        assert "graph.matmul" in ops


class _SegmentationHead(torch.nn.Module):
    """A conv's logits upsampled back to the image (torchvision's FCN / DeepLabV3 / LRASPP)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 5, 3, stride=4, padding=1)

    def forward(self, x):
        return torch.nn.functional.interpolate(self.conv(x), size=x.shape[-2:], mode="bilinear", align_corners=False)


def test_bilinear_upsampling_on_the_simulator():
    import infer

    torch.manual_seed(0)
    m = _SegmentationHead().eval()
    x = torch.randn(1, 3, 24, 20)
    with torch.no_grad():
        want = m(x).numpy()
    exe = infer.compile(torch.export.export(m, (x,)), target="server")
    got = exe.run([x.numpy()], check_races=True)[0]
    assert got.shape == want.shape == (1, 5, 24, 20)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


class _PositionIds(torch.nn.Module):
    """RoBERTa's position ids from the input ids (an integer cumsum of the padding mask), a
    float cumsum and cumprod, a reversed one, and softplus's log1p."""

    def forward(self, ids, x):
        mask = ids.ne(1).int()
        positions = torch.cumsum(mask, dim=1) * mask + 1
        return (positions, torch.cumsum(x, -1), torch.cumprod(x, 0), torch.cumsum(x.flip(-1), -1).flip(-1),
                torch.log1p(torch.exp(x)), torch.cumsum(ids > 50, 1, dtype=torch.float32))


def test_cumulative_ops_and_log1p():
    """aten.cumsum / cumprod (RoBERTa, OPT, BLOOM, MPNet, ESM through torch.export) and
    aten.log1p (Mamba's softplus) were import errors; cumulative ops share GraphBuilder.cumulative
    with ONNX's CumSum / CumProd."""
    import infer

    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 12))
    ids[0, 8:] = 1
    x = torch.rand(2, 12) + 0.5
    m = _PositionIds().eval()
    module = import_torch(m, (ids, x))
    want = [r.numpy() for r in m(ids, x)]
    got = run_module(module, [ids.numpy(), x.numpy()])
    for o, r in zip(got, want, strict=True):
        assert o.dtype == r.dtype and o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-5)
    np.testing.assert_array_equal(got[0], want[0])  # integer positions exactly
    exe = infer.compile(torch.export.export(m, (ids, x)), target="edge")
    for o, r in zip(exe.run([ids.numpy(), x.numpy()], check_races=True), want, strict=True):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4 * np.abs(r).max())


class _ValidConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding="valid")
        self.conv1d = torch.nn.Conv1d(4, 2, 3, padding="same")

    def forward(self, x):
        y = self.conv(x)
        return y, self.conv1d(y.flatten(2))


def test_conv_padding_given_once_for_every_dim():
    """conv2d(padding="valid") (SigLIP's patch embedding, EfficientNet in transformers) decomposes to
    aten.convolution with padding [0]: one value for every spatial dim."""
    torch.manual_seed(0)
    m = _ValidConv().eval()
    x = torch.randn(1, 3, 9, 7)
    module = import_torch(m, (x,))
    with torch.no_grad():
        want = [r.numpy() for r in m(x)]
    for o, r in zip(run_module(module, [x.numpy()]), want, strict=True):
        assert o.shape == r.shape and np.abs(o - r).max() <= TOL


class _Routing(torch.nn.Module):
    """The pieces of transformers' grouped experts: a histogram of expert ids (values at the
    upper edge, outside the range and fractional), an inverse permutation by index_put, and an
    accumulating index_put of 2-D index tuples with a repeated position."""

    def forward(self, ids, x):
        _, perm = torch.sort(ids)
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.size(0))
        counts = torch.histc(x, bins=4, min=0, max=3)
        grid = torch.zeros(3, 4, 2).index_put((ids[:3] % 3, ids[3:6] % 4), x[:3, None].expand(3, 2), accumulate=True)
        return inverse, counts, grid


def test_histc_and_index_put():
    """aten.histc and aten.index_put (transformers' grouped MoE experts) match torch on the
    reference interpreter and the NPU."""
    import infer

    ids = torch.tensor([3, 1, 2, 0, 1, 3, 2, 0])
    x = torch.tensor([0.0, 3.0, 1.5, 2.99, -0.5, 3.5, 0.75, 1.0])
    ids[3] = ids[0]  # positions (0, 3) and (0, 3) of the accumulating index_put coincide
    m = _Routing().eval()
    want = [r.numpy() for r in m(ids, x)]
    assert want[1].tolist() == [1.0, 2.0, 1.0, 2.0]  # 3.0 in the last bin, -0.5 and 3.5 nowhere
    module = import_torch(m, (ids, x))
    for o, r in zip(run_module(module, [ids.numpy(), x.numpy()]), want, strict=True):
        assert o.dtype == r.dtype and o.shape == r.shape
        np.testing.assert_array_equal(o, r)
    exe = infer.compile(torch.export.export(m, (ids, x)), target="edge")
    for o, r in zip(exe.run([ids.numpy(), x.numpy()], check_races=True), want, strict=True):
        np.testing.assert_allclose(o, r, rtol=1e-6)


def test_mixtral_default_experts_through_torch_export():
    """Mixtral's default experts (transformers' grouped_mm path: sort, histc, a grouped
    product, index_put) import, and match transformers on the NPU."""
    import transformers

    import infer

    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2, max_position_embeddings=32)
    model = transformers.MixtralModel(cfg).eval()
    ids = torch.randint(0, 64, (1, 6))
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).last_hidden_state.numpy()
    ep = torch.export.export(model, (), {"input_ids": ids, "use_cache": False}, strict=False)
    ops = {str(n.target) for n in ep.graph.nodes}
    assert {"aten.histc.default", "transformers.grouped_mm_fallback.default"} <= ops  # the path under test
    module = import_torch(ep)
    got = run_module(module, [ids.numpy()])[0]
    assert np.abs(got - want).max() <= TOL
    exe = infer.compile(ep, target="server")
    got = exe.run([ids.numpy()], check_races=True)[0]
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


class _GroupedProduct(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 8, 8, generator=torch.Generator().manual_seed(0)).bfloat16())

    def forward(self, x, counts):
        offs = torch.cumsum(counts, 0, dtype=torch.int32)
        return torch._grouped_mm(x.bfloat16(), self.w, offs=offs).float()


def test_native_grouped_mm():
    """torch._grouped_mm (bf16 only in torch 2.13): rows 0-1 by expert 0, none by expert 1,
    2-4 by expert 2; the row past the last offset is zeros (torch leaves it unwritten)."""
    x, counts = torch.randn(6, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([2, 0, 3])
    m = _GroupedProduct().eval()
    with torch.no_grad():
        want = m(x, counts).numpy()
    got = run_module(import_torch(m, (x, counts)), [x.numpy(), counts.numpy()])[0]
    np.testing.assert_array_equal(got[:5], want[:5])
    np.testing.assert_array_equal(got[5], np.zeros(8, np.float32))


class _MaskedPut(torch.nn.Module):
    def forward(self, x, m):
        y = x.clone()
        y[y < 0] = 0.5  # a mask of every dim
        z = x.clone().index_put_((m,), torch.tensor(2.0), accumulate=True)  # a mask of the leading dim
        return y, z


def test_index_put_of_a_boolean_mask():
    """x[mask] = v is an index_put with a bool index: where(mask, v, x), not positions 0 and 1."""
    x, m = torch.randn(4, 3, generator=torch.Generator().manual_seed(2)), torch.tensor([True, False, True, True])
    mod = _MaskedPut().eval()
    want = [r.numpy() for r in mod(x, m)]
    got = run_module(import_torch(mod, (x, m)), [x.numpy(), m.numpy()])
    for o, r in zip(got, want, strict=True):
        np.testing.assert_array_equal(o, r)


def test_index_put_of_a_mask_with_many_values_is_one_error():
    class M(torch.nn.Module):
        def forward(self, x, m):
            y = x.clone()
            y[m] = torch.arange(2.0)
            return y

    with pytest.raises(ModelImportError, match="as many as the mask selects"):
        import_torch(M(), (torch.randn(4), torch.tensor([True, False, True, False])))
