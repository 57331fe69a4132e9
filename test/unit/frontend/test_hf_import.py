"""Hugging Face folder frontend against transformers / sentence-transformers."""

from __future__ import annotations

import json
import shutil
import struct

import numpy as np
import pytest

from infer.dialects.graph_interpreter import run_module
from infer.dialects.weights import weights_of
from infer.frontend import ModelImportError, import_model
from infer.frontend.hf_checkpoint import ShardedWeightStore
from infer.frontend.hf_import import import_hf_folder

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

B, S, P = 2, 8, 16
TOL = 1e-4


def _func_names(module):
    return [op.sym_name.data for op in module.body.block.ops]


def _reference_logits(model, ids):
    with torch.no_grad():
        return model(torch.from_numpy(ids), use_cache=False).logits.numpy()


def _check_prefill_decode(model, folder, steps=3, **kw):
    """Prefill S tokens then `steps` decode steps with the explicit KV cache; each
    step's logits against transformers on the whole sequence (causal, so equal
    to its generation logits)."""
    module = import_hf_folder(folder, seq_len=S, batch=B, max_len=P, **kw)
    assert _func_names(module) == ["prefill", "decode"]
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 256, size=(B, S + steps), dtype=np.int64)
    ref = _reference_logits(model, ids)
    outs = run_module(module, {"input_ids": ids[:, :S]}, entry="prefill")
    errs = [float(np.abs(outs[0] - ref[:, :S]).max())]
    cache = outs[1:]
    assert all(c.shape[2] == P for c in cache)
    for t in range(steps):
        feeds = [ids[:, S + t : S + t + 1], np.full((B,), S + t, np.int64), *cache]
        outs = run_module(module, feeds, entry="decode")
        cache = outs[1:]
        errs.append(float(np.abs(outs[0][:, 0] - ref[:, S + t]).max()))
    assert max(errs) <= TOL, errs
    return module


def test_llama_gqa_prefill_and_decode(llama_model, llama_folder):
    module = _check_prefill_decode(llama_model, llama_folder)
    # the weights are the checkpoint's own file: nothing copied, nothing in memory
    store = weights_of(module)
    assert store.file == llama_folder / "model.safetensors"
    assert not store.has_local
    text = str(module)
    assert "graph.rotary" in text and "graph.rms_norm" in text and "graph.attention" in text


@pytest.mark.parametrize("variant", ["llama_tied_linear", "qwen2"])
def test_llama_family_variants(llama_variant, variant):
    model, folder = llama_variant(variant)
    _check_prefill_decode(model, folder, steps=2)


def test_gpt2_prefill_and_decode(gpt2_model, gpt2_folder):
    module = _check_prefill_decode(gpt2_model, gpt2_folder)
    assert "graph.matmul" in str(module)  # Conv1D [in, out] weights used as stored


def test_phase_gives_one_main(llama_model, llama_folder):
    prefill = import_hf_folder(llama_folder, seq_len=S, batch=1, max_len=P, phase="prefill")
    decode = import_model(llama_folder, seq_len=S, batch=1, max_len=P, phase="decode")
    assert _func_names(prefill) == ["main"] and _func_names(decode.module) == ["main"]
    ids = np.arange(S, dtype=np.int64)[None] % 256
    out = run_module(prefill, [ids])
    ref = _reference_logits(llama_model, ids)
    assert np.abs(out[0] - ref).max() <= TOL
    step = decode.run([ids[:, :1], np.array([S], np.int64), *out[1:]])
    assert step[0].shape == (1, 1, 256)


def test_bert_random(bert_model, bert_folder):
    module = import_hf_folder(bert_folder, seq_len=S, batch=B)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 256, size=(B, S), dtype=np.int64)
    mask = np.ones((B, S), np.int64)
    mask[1, 5:] = 0
    types = (np.arange(S)[None] >= 4).astype(np.int64).repeat(B, 0)
    hidden, pooled = run_module(module, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    with torch.no_grad():
        ref = bert_model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                         token_type_ids=torch.from_numpy(types))
    assert np.abs(hidden - ref.last_hidden_state.numpy()).max() <= TOL
    assert np.abs(pooled - ref.pooler_output.numpy()).max() <= TOL


def test_minilm_sentence_embeddings(minilm_folder, minilm_batch):
    feeds, ref = minilm_batch
    module = import_hf_folder(minilm_folder, seq_len=feeds["input_ids"].shape[1], batch=len(ref))
    hidden, emb = run_module(module, feeds)
    cos = (emb * ref).sum(-1) / np.linalg.norm(emb, axis=-1) / np.linalg.norm(ref, axis=-1)
    assert cos.min() >= 0.9999, cos
    assert np.abs(np.linalg.norm(emb, axis=-1) - 1).max() < 1e-5  # Normalize module applied
    assert weights_of(module).file == minilm_folder / "model.safetensors"


def test_sharded_checkpoint(llama_model, tmp_path):
    llama_model.save_pretrained(str(tmp_path), safe_serialization=True, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    module = _check_prefill_decode(llama_model, tmp_path, steps=1)
    store = weights_of(module)
    assert isinstance(store, ShardedWeightStore)
    assert len({f for f in store.shards.values()}) > 1


def test_bfloat16_checkpoint_is_cast(llama_model, tmp_path):
    import copy

    bf = copy.deepcopy(llama_model).to(torch.bfloat16)
    bf.save_pretrained(str(tmp_path), safe_serialization=True)
    module = import_hf_folder(tmp_path, seq_len=S, batch=1, max_len=P, phase="prefill")
    ids = np.arange(S, dtype=np.int64)[None]
    out = run_module(module, [ids])[0]
    ref = _reference_logits(bf.float(), ids)  # same bf16 weights, f32 compute
    assert np.abs(out - ref).max() <= TOL
    assert "bf16" in str(module)


# -- errors ---------------------------------------------------------------------------


def _copy(folder, tmp_path):
    dst = tmp_path / "m"
    shutil.copytree(folder, dst)
    return dst


def test_shape_mismatch_names_tensor(llama_folder, tmp_path):
    dst = _copy(llama_folder, tmp_path)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["intermediate_size"] = 100
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelImportError) as e:
        import_hf_folder(dst, seq_len=S)
    msg = str(e.value)
    assert "layers.0.mlp.gate_proj.weight" in msg and "[128, 64]" in msg and "[100, 64]" in msg


def test_bad_safetensors_header(llama_folder, tmp_path):
    dst = _copy(llama_folder, tmp_path)
    f = dst / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[:8] = struct.pack("<Q", 10**12)
    f.write_bytes(bytes(data))
    with pytest.raises(ModelImportError, match="invalid safetensors header"):
        import_hf_folder(dst, seq_len=S)
    data[8:20] = b"not json!!!!"
    data[:8] = struct.pack("<Q", 64)
    f.write_bytes(bytes(data))
    with pytest.raises(ModelImportError, match="invalid safetensors header.*JSON"):
        import_hf_folder(dst, seq_len=S)


def test_missing_tensor_and_unsupported_type(llama_folder, tmp_path):
    from safetensors.numpy import load_file, save_file

    dst = _copy(llama_folder, tmp_path)
    tensors = load_file(str(dst / "model.safetensors"))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(dst / "model.safetensors"))
    with pytest.raises(ModelImportError, match="layers.1.mlp.up_proj.weight' is missing"):
        import_hf_folder(dst, seq_len=S)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["model_type"] = "mamba"
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelImportError, match="unsupported model_type 'mamba'"):
        import_hf_folder(dst)


def test_unsupported_rope_scaling(llama_folder, tmp_path):
    dst = _copy(llama_folder, tmp_path)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelImportError, match="rope scaling type 'yarn'"):
        import_hf_folder(dst)
