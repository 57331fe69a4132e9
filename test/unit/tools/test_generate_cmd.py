"""`infer generate` on a tiny random Llama GGUF written here (with a byte-level BPE tokenizer
and a chat template): greedy text against transformers loading the same file, seeded sampling
against infer.Generator, and one clear error with exit status 1 for bad input."""

from __future__ import annotations

import pytest
from helpers.gguf_models import write_llama_gguf

from infer.generation import Generator
from infer.tools.cli import main as cli_main

torch = pytest.importorskip("torch")
pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

PROMPT = "Hi there"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_llama_gguf(tmp_path_factory.mktemp("generate") / "tiny.gguf", "Q4_1", tokenizer=True)


def _generate(capsys, *args: str) -> tuple[int, str, str]:
    status = cli_main(["generate", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def test_greedy_text_matches_transformers(tiny_gguf, capsys):
    status, out, err = _generate(capsys, tiny_gguf, "--prompt", PROMPT, "--max-new-tokens", 10, "--max-context", 48)
    assert status == 0, err

    tok = transformers.AutoTokenizer.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name).eval()
    ids = tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True,
                                  return_dict=False)
    with torch.no_grad():
        generated = ref.generate(torch.tensor([ids]), max_new_tokens=10, do_sample=False,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id,
                                 attention_mask=torch.ones(1, len(ids), dtype=torch.long))[0, len(ids):].tolist()
    stopped_at_eos = tok.eos_token_id in generated
    if stopped_at_eos:
        generated = generated[: generated.index(tok.eos_token_id)]
    assert generated, "the reference stops at once: the comparison would not test the decode steps"
    assert out == tok.decode(generated, skip_special_tokens=True).rstrip("\ufffd") + "\n"
    assert f"prompt tokens:    {len(ids)} (chat template)" in err
    reason = "end of sequence" if stopped_at_eos else "--max-new-tokens reached"
    assert f"generated tokens: {len(generated)} (stopped: {reason})" in err
    # where it ran is said plainly, and no simulated time is claimed
    assert "reference interpreter" in err and "no simulated cycles" in err
    assert "device time:      not simulated (reference interpreter)" in err
    assert "host wall time:" in err and "time to first token" in err


def test_seeded_sampling_matches_the_generator(tiny_gguf, capsys):
    options = ["--temperature", 1.2, "--top-k", 40, "--top-p", 0.9, "--seed", 3, "--max-new-tokens", 6,
               "--max-context", 32]
    status, out, err = _generate(capsys, tiny_gguf, "--prompt", PROMPT, *options)
    assert status == 0, err
    gen = Generator(tiny_gguf, prefill_length=32, max_context=32)
    want = gen.generate_text(PROMPT, max_new_tokens=6, temperature=1.2, top_k=40, top_p=0.9, seed=3)
    assert out == want + "\n"
    assert f"generated tokens: {gen.last_stats.generated_tokens} " in err


def test_bad_input_is_one_error(tiny_gguf, tmp_path, capsys):
    phi = write_llama_gguf(tmp_path / "phi.gguf", "F16", arch="phi2")
    no_tokenizer = write_llama_gguf(tmp_path / "plain.gguf", "Q8_0")
    cases = [
        ([tmp_path / "missing.gguf", "--prompt", PROMPT], "missing.gguf: no such file or folder"),
        ([phi, "--prompt", PROMPT], "GGUF architecture 'phi2' is not supported (supported: llama)"),
        ([tiny_gguf, "--prompt", "word " * 40, "--max-context", 24],
         "the prompt is 203 tokens but the context holds 24 (raise --max-context"),
        ([no_tokenizer, "--prompt", PROMPT], "the model carries no tokenizer"),
        ([tiny_gguf, "--prompt", "word " * 40, "-t", "server", "--max-context", 32],
         "the prompt is 203 tokens but the KV cache holds 32 per sequence (raise --max-context"),
        ([tiny_gguf, "--prompt", PROMPT, "-t", "server", "--block-size", 12], "block_size must be a power of two"),
        ([tiny_gguf, "--prompt", "word " * 4, "-t", "server", "--chunk", 8, "--block-size", 4, "--num-blocks", 4],
         "the KV-cache pool is too small for this request: the prompt needs 6 blocks of 4 tokens, the pool has 2"),
        ([tiny_gguf, "--prompt", PROMPT, "--chunk", 8], "--chunk applies to generation on the simulated NPU"),
        ([tiny_gguf, "--prompt", PROMPT, "-t", "server", "--top-p", 2], "top_p must be in (0, 1]"),
        ([tiny_gguf, "--prompt", PROMPT, "--temperature", -1], "temperature must be >= 0"),
    ]
    for args, message in cases:
        status, out, err = _generate(capsys, *args)
        assert status == 1, (args, err)
        assert err.startswith("infer generate: error: ") and message in err, err
        assert "Traceback" not in err and out == ""


def test_help_says_where_it_runs(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["generate", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "reference interpreter" in text and "simulated NPU" in text and "infer.Generator" in text
    assert "DeviceExecutor" in text and "--chunk" in text and "default 32" in text


def test_on_the_simulated_npu_like_the_reference(tiny_gguf, capsys):
    """-t server: the paged artifact on the simulator gives the reference interpreter's greedy
    text, with simulated time to first token and per output token beside the host wall time."""
    options = ["--prompt", PROMPT, "--max-new-tokens", 6, "--max-context", 32]
    status, want, _ = _generate(capsys, tiny_gguf, *options)
    assert status == 0
    status, out, err = _generate(capsys, tiny_gguf, *options, "-t", "server", "--chunk", 8, "-q")
    assert status == 0, err
    assert out == want
    assert "runs on the simulated server NPU (fp32): chunk 8 tokens, KV cache" in err
    assert "device time:      time to first token " in err and " ms (simulated server cycles at " in err
    assert "host wall time:" in err and "import and compile" in err


def test_the_cache_dir_keeps_the_compiled_artifact(tiny_gguf, tmp_path, capsys):
    """--cache-dir: the first run compiles and keeps the artifact, the next run with the same
    model, config, precision and cache options loads it and gives the same text; other options
    are another artifact, and a file that does not load is compiled again and replaced."""
    cache = tmp_path / "cache"
    options = ["--prompt", PROMPT, "--max-new-tokens", 4, "--max-context", 32, "-t", "server", "--chunk", 8,
               "-q", "--cache-dir", cache]
    status, first, err = _generate(capsys, tiny_gguf, *options)
    assert status == 0, err
    kept = list(cache.glob("*.npu"))
    assert len(kept) == 1 and kept[0].name.startswith("tiny-server-fp32-")
    assert f"; kept in {kept[0]}" in err

    status, again, err = _generate(capsys, tiny_gguf, *options)
    assert status == 0, err
    assert again == first
    assert f"note: the compiled artifact from the cache: {kept[0]}" in err and "compiling" not in err

    status, other, err = _generate(capsys, tiny_gguf, *options[:-3], "--chunk", 4, "--cache-dir", cache)
    assert status == 0, err
    assert other == first and len(list(cache.glob("*.npu"))) == 2

    kept[0].write_bytes(kept[0].read_bytes()[:1000])  # truncated: compiled again, replaced
    status, again, err = _generate(capsys, tiny_gguf, *options)
    assert status == 0, err
    assert again == first and "compiling" in err and kept[0].stat().st_size > 1000
    assert not list(cache.glob("*.tmp"))


def test_the_cache_dir_keeps_a_gguf_tokenizer(tiny_gguf, tmp_path, capsys, monkeypatch):
    """--cache-dir keeps the tokenizer transformers builds from the GGUF metadata (slow for a
    real vocabulary) as a saved fast tokenizer: it tokenizes, decodes and applies the chat
    template as the built one does, the next run loads it instead of building it, and a damaged
    copy is built again and replaced."""
    from infer.frontend.tokenizer import load_saved_tokenizer, load_tokenizer

    cache = tmp_path / "cache"
    options = ["--prompt", PROMPT, "--max-new-tokens", 4, "--max-context", 32, "--cache-dir", cache]
    status, first, err = _generate(capsys, tiny_gguf, *options)
    assert status == 0, err
    kept = list(cache.glob("tiny-tokenizer-*"))
    assert len(kept) == 1 and (kept[0] / "tokenizer.json").is_file()
    built, saved = load_tokenizer(tiny_gguf), load_saved_tokenizer(kept[0])
    assert type(saved) is type(built)
    messages = [{"role": "user", "content": "Hi there, what's 2 + 2?"}]
    assert saved.chat_template == built.chat_template and saved.eos_token_id == built.eos_token_id
    assert (saved.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
            == built.apply_chat_template(messages, add_generation_prompt=True, return_dict=False))
    for text in ("Hi there", "  two  spaces\nand a newline", "caf\u00e9 \u4f60\u597d"):
        ids = built.encode(text)
        assert saved.encode(text) == ids and saved.decode(ids) == built.decode(ids)

    real = transformers.AutoTokenizer.from_pretrained

    def saved_copy_only(*args, **kwargs):
        assert "gguf_file" not in kwargs, "the tokenizer was built from the GGUF metadata again"
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(transformers.AutoTokenizer, "from_pretrained", saved_copy_only)
        status, again, err = _generate(capsys, tiny_gguf, *options)
    assert status == 0, err
    assert again == first

    (kept[0] / "tokenizer.json").write_text("{")  # damaged: built again, replaced
    status, again, err = _generate(capsys, tiny_gguf, *options)
    assert status == 0, err
    assert again == first and load_saved_tokenizer(kept[0]).encode("Hi there") == built.encode("Hi there")
    assert [p.name for p in cache.iterdir()] == [kept[0].name]  # no temporary folder left


def test_the_cache_key_follows_what_decides_the_artifact(tiny_gguf, tmp_path):
    from infer.target.hw import config_path
    from infer.tools.compile_cache import cache_key

    options = {"chunk": 8, "block_size": 16}
    key = cache_key(tiny_gguf, "server", "fp32", options)
    assert key == cache_key(tiny_gguf, "server", "fp32", dict(reversed(options.items())))
    assert key != cache_key(tiny_gguf, "server", "bf16", options)
    assert key != cache_key(tiny_gguf, "edge", "fp32", options)
    assert key != cache_key(tiny_gguf, "server", "fp32", {**options, "chunk": 4})
    toml = tmp_path / "server.toml"
    toml.write_text(config_path("server").read_text())
    same_config = cache_key(tiny_gguf, str(toml), "fp32", options)
    assert same_config == key  # the config's text, not its path
    toml.write_text(config_path("server").read_text().replace("queue_depth = 8", "queue_depth = 4", 1))
    assert cache_key(tiny_gguf, str(toml), "fp32", options) != key
    other_model = tmp_path / "tiny.gguf"
    data = tiny_gguf.read_bytes()
    other_model.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # one bit of the file
    assert cache_key(other_model, "server", "fp32", options) != key
