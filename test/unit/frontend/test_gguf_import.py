"""GGUF frontend: tiny Llama files written with gguf.GGUFWriter in each supported
tensor type, against transformers loading the same file; broken files."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.gguf_models import GGUF_LLAMA, write_llama_gguf

from infer.dialects.weights import weights_of
from infer.frontend import ModelImportError, import_model
from infer.generation import GenerationError, Generator
from infer.tools.cli import main as cli_main

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

S, P = 8, 32
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"]


def _reference(path):
    """transformers' own GGUF loader: dequantizes to fp32, un-permutes q/k."""
    return transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name).eval()


@pytest.mark.parametrize("qtype", TYPES)
def test_matches_transformers(llama_gguf, qtype):
    """Prefill + decode logits and greedy tokens against transformers on the same
    file; the weights stay in their stored type, memory-mapped, not dequantized."""
    path = llama_gguf(qtype, tied=qtype == "Q8_0")
    ref = _reference(path)
    model = import_model(path, seq_len=S, max_len=P)
    text = str(model)
    block = {"Q8_0": "q8_0", "Q4_0": "q4_0", "Q4_1": "q4_1"}.get(qtype)
    if block:
        assert f'graph.dequantize_blocks %' in text and f'{{format = "{block}"}}' in text
        packed = weights_of(model.module).get("blk.0.ffn_down.weight")
        fmt_bytes = {"q8_0": 34, "q4_0": 18, "q4_1": 20}[block]
        assert packed.dtype == np.uint8 and packed.shape == (GGUF_LLAMA["hidden"], GGUF_LLAMA["inter"] // 32 * fmt_bytes)
    else:
        assert "dequantize_blocks" not in text
        stored_type = {"F32": "f32", "F16": "f16", "BF16": "bf16"}[qtype]
        assert f"graph.weight @blk.0.attn_q.weight : tensor<64x64x{stored_type}>" in text
    stored = weights_of(model.module).get("blk.0.attn_q.weight")
    assert isinstance(stored.base, np.ndarray) or stored.base is not None  # a view of the mapped file, no copy
    assert 'interleaved = true' in text  # q/k rows used as llama.cpp stores them

    rng = np.random.default_rng(1)
    ids = rng.integers(0, GGUF_LLAMA["vocab"], size=(1, S + 3))
    with torch.no_grad():
        expected = ref(torch.from_numpy(ids)).logits.numpy()
    outs = model.run({"input_ids": ids[:, :S]}, entry="prefill")
    errors = [np.abs(outs[0] - expected[:, :S]).max()]
    cache = outs[1:]
    for t in range(3):
        outs = model.run([ids[:, S + t : S + t + 1], np.array([S + t]), *cache], entry="decode")
        cache = outs[1:]
        errors.append(np.abs(outs[0][:, 0] - expected[:, S + t]).max())
    assert max(errors) < 1e-4 * max(1.0, np.abs(expected).max()), errors

    # greedy generation from a prompt longer than the prefill (the rest goes through decode steps)
    prompt = rng.integers(0, GGUF_LLAMA["vocab"], size=S + 5).tolist()
    with torch.no_grad():
        out = ref.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, eos_token_id=None,
                           pad_token_id=0, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    want = out[0, len(prompt):].tolist()
    gen = Generator(model)
    got = [t.id for t in gen.generate(prompt, max_new_tokens=8)]
    assert got == want
    assert gen.last_stats.finish_reason == "max_new_tokens" and gen.last_stats.generated_tokens == 8


def test_tokenizer_and_chat_template_from_metadata(llama_gguf):
    path = llama_gguf("Q4_1", tokenizer=True)
    model = import_model(path, seq_len=S, max_len=P)
    ref_tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    assert model.chat_template == ref_tok.chat_template and "<|assistant|>" in model.chat_template
    ids = model.apply_chat_template("Hi there")
    assert ids == ref_tok.apply_chat_template([{"role": "user", "content": "Hi there"}],
                                              add_generation_prompt=True, return_dict=False)
    assert model.tokenizer.decode(ids) == "<|user|>Hi there<|end|><|assistant|>"
    gen = Generator(model)
    pieces = list(gen.generate("Hi there", max_new_tokens=6))
    assert [p.id for p in pieces] == [t.id for t in Generator(model).generate(ids, max_new_tokens=6)]
    text = "".join(p.text for p in pieces)
    assert text == model.tokenizer.decode([p.id for p in pieces], skip_special_tokens=True).rstrip("\ufffd")
    assert gen.last_stats.prompt_tokens == len(ids)


def test_model_without_tokenizer(llama_gguf):
    model = import_model(llama_gguf("F16"), seq_len=S, max_len=P)
    assert model.tokenizer is None and model.chat_template is None
    with pytest.raises(GenerationError, match="has no tokenizer: give token ids"):
        Generator(model).generate("Hello")
    pieces = list(Generator(model).generate([1, 2, 3], max_new_tokens=2))
    assert [p.text for p in pieces] == [None, None]


def test_prompt_longer_than_context(llama_gguf):
    model = import_model(llama_gguf("Q8_0"), seq_len=S, max_len=16)
    gen = Generator(model)
    with pytest.raises(GenerationError, match="the prompt has 17 tokens but the model's context holds 16"):
        gen.generate(list(range(17)))
    # a prompt that fills the context: one token from the prefill, then the context is full
    pieces = list(gen.generate(list(range(16)), max_new_tokens=4))
    assert len(pieces) == 1 and gen.last_stats.finish_reason == "context_full"


def test_bf16_compute_dtype(llama_gguf):
    """dequantize_blocks straight to bf16 when the compute dtype is bf16."""
    model = import_model(llama_gguf("Q4_1"), seq_len=S, max_len=P, dtype="bfloat16")
    assert '(tensor<128x40xui8>) -> tensor<128x64xbf16>' in str(model)
    f32 = import_model(llama_gguf("Q4_1"), seq_len=S, max_len=P)
    ids = np.arange(S)[None] % GGUF_LLAMA["vocab"]
    a = model.run({"input_ids": ids}, entry="prefill")[0].astype(np.float32)
    b = f32.run({"input_ids": ids}, entry="prefill")[0]
    cos = float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))
    assert cos > 0.999


# --------------------------------------------------------------------------
# Bad files: one clear error each, exit status 1 from the CLI
# --------------------------------------------------------------------------


def _cli_error(path, capsys) -> str:
    assert cli_main(["import", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_unsupported_architecture(tmp_path, capsys):
    path = write_llama_gguf(tmp_path / "phi.gguf", "F16", arch="phi2")
    err = _cli_error(path, capsys)
    assert "GGUF architecture 'phi2' is not supported (supported: llama)" in err


def test_unsupported_tensor_type(tmp_path, capsys):
    path = write_llama_gguf(tmp_path / "q5.gguf", "Q4_1", extra_tensor=("blk.0.ffn_up.weight_q5", "Q5_0"))
    err = _cli_error(path, capsys)
    assert "tensor 'blk.0.ffn_up.weight_q5' has type Q5_0, which is not supported" in err
    assert "F32, F16, BF16, Q8_0, Q4_0, Q4_1" in err
    path = write_llama_gguf(tmp_path / "rope_freqs.gguf", "Q8_0", extra_tensor=("rope_freqs.weight", "F32"))
    assert "not part of a dense Llama model" in _cli_error(path, capsys)


@pytest.mark.parametrize("where", ["magic", "metadata", "tensor_info", "tensor_data", "array_length",
                                   "string_length"])
def test_corrupt_or_truncated(llama_gguf, tmp_path, capsys, where):
    good = llama_gguf("Q4_1", tokenizer=True)
    data = bytearray(good.read_bytes())
    reader = gguf.GGUFReader(str(good))
    bad = tmp_path / f"{where}.gguf"
    if where == "magic":
        data[:4] = b"GGUX"
        expected = "not a GGUF file"
    elif where == "metadata":  # cut inside the token list
        data = data[: reader.fields["tokenizer.ggml.tokens"].offset + 500]
        expected = "truncated or corrupt: an array at offset"
    elif where == "tensor_info":  # cut inside the tensor table
        data = data[: reader.tensors[5].field.offset + 10]
        expected = "truncated or corrupt: reading"
    elif where == "tensor_data":  # the last tensor's data cut short
        data = data[: reader.tensors[-1].data_offset + 7]
        last = reader.tensors[-1].name
        expected = f"tensor '{last}' (Q4_1, 8192 values) has data at bytes"
    elif where == "string_length":  # the first token claims 2**40 bytes
        field = reader.fields["tokenizer.ggml.tokens"]
        length_at = field.offset + 8 + len("tokenizer.ggml.tokens") + 4 + 4 + 8
        data[length_at : length_at + 8] = (2**40).to_bytes(8, "little")
        expected = "truncated or corrupt: a string at offset"
    else:  # the token list claims 2**60 entries
        field = reader.fields["tokenizer.ggml.token_type"]
        length_at = field.offset + 8 + len("tokenizer.ggml.token_type") + 4 + 4
        data[length_at : length_at + 8] = (2**60).to_bytes(8, "little")
        expected = "claims 1152921504606846976 items"
    bad.write_bytes(bytes(data))
    err = _cli_error(bad, capsys)
    assert expected in err, err
    if where == "tensor_data":
        assert "past the end of the file" in err


def test_the_checked_reader_reads_what_gguf_reads(llama_gguf):
    """The importer's reader builds arrays (the tokenizer's strings and token types) in one pass
    where gguf-py reads them item by item: the same fields, parts, data indices and types."""
    from infer.frontend.gguf_import import _checked_reader_class

    path = llama_gguf("Q4_1", tokenizer=True)
    want, got = gguf.GGUFReader(str(path)), _checked_reader_class()(str(path))
    assert list(got.fields) == list(want.fields)
    assert len(want.fields["tokenizer.ggml.tokens"].data) > 100
    for name, field in want.fields.items():
        mine = got.fields[name]
        assert (mine.offset, mine.types, list(mine.data)) == (field.offset, field.types, list(field.data)), name
        assert [(p.dtype, p.shape, p.tobytes()) for p in mine.parts] == \
            [(p.dtype, p.shape, p.tobytes()) for p in field.parts], name
    assert got.fields["tokenizer.ggml.tokens"].contents() == want.fields["tokenizer.ggml.tokens"].contents()
    assert [(t.name, t.data_offset) for t in got.tensors] == [(t.name, t.data_offset) for t in want.tensors]


def test_missing_file_and_wrong_suffix(tmp_path, capsys):
    assert "no such file" in _cli_error(tmp_path / "none.gguf", capsys)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    assert "not a GGUF file (0 bytes" in _cli_error(empty, capsys)


def test_saved_module_runs_from_its_own_weights(llama_gguf, tmp_path):
    """Model.save writes the packed weights (ui8) to safetensors; the text parses back and runs."""
    model = import_model(llama_gguf("Q4_0"), seq_len=S, max_len=P, phase="prefill")
    path = model.save(tmp_path / "m.mlir")
    again = import_model(path)
    ids = np.arange(S)[None]
    np.testing.assert_array_equal(again.run([ids])[0], model.run([ids])[0])


def test_sampled_generation_is_seeded(llama_gguf):
    model = import_model(llama_gguf("Q4_0"), seq_len=S, max_len=P)
    gen = Generator(model)
    prompt = [5, 6, 7, 8]

    def run(**kw):
        return [t.id for t in gen.generate(prompt, max_new_tokens=12, **kw)]

    a = run(temperature=1.5, top_k=50, top_p=0.95, seed=7)
    assert a == run(temperature=1.5, top_k=50, top_p=0.95, seed=7)
    assert a != run(temperature=1.5, top_k=50, top_p=0.95, seed=8)
    assert run(temperature=0.0) == run(temperature=0.0, seed=123)  # greedy ignores the seed
    with pytest.raises(GenerationError, match="top_p must be in"):
        gen.generate(prompt, temperature=1.0, top_p=2.0)
