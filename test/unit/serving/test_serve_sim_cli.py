"""infer serve-sim: the report table, JSON keys, plots, sweeps and one clear error per bad input."""

from __future__ import annotations

import json

import pytest

from infer.tools.cli import main

TINY = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 512}
JSON_KEYS = ["completed", "lost", "preemptions", "throughput_tokens_per_s", "ttft_p50_s", "ttft_p99_s",
             "tpot_p50_s", "tpot_p99_s"]


@pytest.fixture()
def model(tmp_path):
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    return folder


def serve(capsys, tmp_path, *args):
    rc = main(["serve-sim", *map(str, args), "--cache-dir", str(tmp_path / "cache")])
    out, err = capsys.readouterr()
    return rc, out, err


def test_generated_workload_json_and_plots(model, tmp_path, capsys):
    out_json, plots = tmp_path / "r.json", tmp_path / "plots"
    rc, out, err = serve(capsys, tmp_path, model, "-t", "server", "--rate", "50", "--num-requests", "30",
                         "--prompt-len-median", "64", "--output-len-median", "16", "--json", out_json,
                         "--plot-dir", plots)
    assert rc == 0, err
    assert "analytic roofline" in out and "TTFT" in out and "TPOT" in out
    d = json.loads(out_json.read_text())
    for key in JSON_KEYS + ["ttft_p90_s", "e2e_p99_s", "kv_waste_mean", "kv_utilization_mean", "batch_size_mean"]:
        assert key in d, key
    assert d["completed"] == 30 and d["lost"] == 0 and d["requests"] == 30
    assert 0 < d["ttft_p50_s"] <= d["ttft_p99_s"] and 0 < d["tpot_p50_s"] <= d["tpot_p99_s"]
    assert d["throughput_tokens_per_s"] == pytest.approx(d["output_tokens"] / d["sim_time_s"])
    assert "analytic roofline" in d["cost_source"]
    png = (plots / "latency_cdf.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_trace_and_small_pool_preempts_without_loss(model, tmp_path, capsys):
    trace = tmp_path / "req.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": 0.0, "prompt_tokens": 40 + 7 * i, "output_tokens": 60})
                             + "\n" for i in range(12)))
    out_json = tmp_path / "r.json"
    rc, out, err = serve(capsys, tmp_path, model, "-t", "edge", "--trace", trace, "--num-kv-blocks", "24",
                         "--block-size", "8", "--json", out_json)
    assert rc == 0, err
    d = json.loads(out_json.read_text())
    assert d["completed"] == 12 and d["lost"] == 0 and d["preemptions"] > 0
    assert d["output_tokens"] == 12 * 60


def test_sweep_serial(model, tmp_path, capsys):
    out_json, plots = tmp_path / "s.json", tmp_path / "plots"
    rc, out, err = serve(capsys, tmp_path, model, "-t", "edge,server", "--policy", "continuous,static",
                         "--rate", "5,20", "--num-requests", "20", "--output-len-median", "8", "--no-ray",
                         "--json", out_json, "--plot-dir", plots)
    assert rc == 0, err
    points = json.loads(out_json.read_text())["sweep"]
    assert len(points) == 8
    assert {(p["target"], p["policy"], p["rate"]) for p in points} == {
        (t, p, r) for t in ("edge", "server") for p in ("continuous", "static") for r in (5.0, 20.0)}
    assert all(p["completed"] == 20 and p["lost"] == 0 for p in points)
    assert (plots / "sweep.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("line, message", [
    ('{"arrival_s": 0.0, "prompt_tokens": 12', "req.jsonl:2: not valid JSON"),
    ('{"arrival_s": 0.0, "prompt_tokens": 12}', 'req.jsonl:2: missing "output_tokens"'),
    ('{"arrival_s": 0.0, "prompt_tokens": "12", "output_tokens": 3}', '"prompt_tokens" must be an integer, got "12"'),
    ('{"arrival_s": -1, "prompt_tokens": 12, "output_tokens": 3}', '"arrival_s" must be a finite number >= 0'),
    ('{"arrival_s": 0, "prompt_tokens": 0, "output_tokens": 3}', '"prompt_tokens" must be >= 1'),
    ('[1, 2, 3]', "req.jsonl:2: expected a JSON object"),
    ('{"arrival_s": 0, "prompt_tokens": 500, "output_tokens": 40}', "req.jsonl:2: prompt 500 + output 40 = 540 "
                                                                     "tokens exceeds the model's context of 512"),
])
def test_bad_trace_lines(model, tmp_path, capsys, line, message):
    trace = tmp_path / "req.jsonl"
    trace.write_text('{"arrival_s": 0.0, "prompt_tokens": 12, "output_tokens": 3}\n' + line + "\n")
    rc, out, err = serve(capsys, tmp_path, model, "--trace", trace)
    assert rc == 1
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["--rate", "0"], "--rate must be > 0"),
    (["--rate=-2,4"], "--rate must be > 0"),
    (["--rate", "1", "--policy", "fifo"], "--policy: unknown policy 'fifo' (supported: continuous, static)"),
    (["--rate", "1", "-t", "nosuch"], "unknown hardware config 'nosuch'"),
    (["--rate", "1", "--num-kv-blocks", "2", "--prompt-len-median", "200"], "KV blocks"),
])
def test_bad_options(model, tmp_path, capsys, args, message):
    rc, out, err = serve(capsys, tmp_path, model, *args)
    assert rc == 1
    assert message in err and err.count("\n") == 1


def test_not_a_model_and_usage_errors(tmp_path, capsys):
    rc, _, err = serve(capsys, tmp_path, tmp_path / "none", "--rate", "1")
    assert rc == 1 and "not a Hugging Face model folder" in err
    onnx = tmp_path / "model.onnx"  # a model file of another kind: what serve-sim takes instead
    onnx.write_bytes(b"\x08\x07\x12\x04onnx")
    rc, _, err = serve(capsys, tmp_path, onnx, "--rate", "1")
    assert rc == 1 and err.count("\n") == 1
    assert f"{onnx}: not a Hugging Face model folder or config.json (cannot read it as JSON" in err
    with pytest.raises(SystemExit) as e:
        main(["serve-sim", str(tmp_path)])           # neither --trace nor --rate
    assert e.value.code == 2
