"""Hardware configs: bundled ones load, invalid ones are rejected naming the field."""

import tomllib
from pathlib import Path

import pytest

from infer.target.hw import ConfigError, bundled_configs, from_dict, load_config

TARGET = Path(__file__).resolve().parents[3] / "target"


def test_bundled():
    assert {"edge", "server"} <= set(bundled_configs())
    e, s = load_config("edge"), load_config("server")
    assert (e.matrix.rows, e.matrix.cols) == (16, 16)
    assert e.memory.scratchpad_bytes == 256 * 1024 and e.memory.accumulator_bytes == 64 * 1024
    assert (s.matrix.rows, s.matrix.cols) == (128, 128)
    assert s.memory.scratchpad_bytes >= 16 * 2**20
    assert s.dram.bytes_per_cycle >= 900 and e.dram.bytes_per_cycle == 16
    assert load_config(TARGET / "edge.toml") == e


def test_macs_per_cycle_by_dtype():
    e, s = load_config("edge"), load_config("server")
    assert s.macs_per_cycle("int8") == 2 * s.macs_per_cycle("bf16") == 2 * s.peak_macs_per_cycle
    assert e.macs_per_cycle("int8") == e.macs_per_cycle("bf16") == e.peak_macs_per_cycle
    # an int8 matmul of m rows streams in ceil(m / 2) cycles on the server, m on the edge
    assert [s.matrix.matmul_cycles(m, "int8") for m in (1, 2, 7, 128)] == [1, 1, 4, 64]
    assert [s.matrix.matmul_cycles(m, "bf16") for m in (1, 7, 128)] == [1, 7, 128]
    assert [e.matrix.matmul_cycles(m, "int8") for m in (1, 7, 128)] == [1, 7, 128]
    # the rate is per PE, so a config with another array size keeps the int8 : bf16 ratio
    data = tomllib.loads((TARGET / "server.toml").read_text())
    data["matrix"]["rows"] = data["matrix"]["cols"] = 64
    small = from_dict(data, "server64")
    assert small.macs_per_cycle("int8") == 2 * small.macs_per_cycle("bf16") == 2 * 64 * 64


def _write(tmp_path, mutate):
    data = tomllib.loads((TARGET / "server.toml").read_text())
    mutate(data)
    lines = []

    def dump(d, prefix):
        for k, v in d.items():
            if not isinstance(v, dict):
                lines.append(f"{k} = {v!r}".replace("'", '"'))
        for k, v in d.items():
            if isinstance(v, dict):
                lines.append(f"[{prefix}{k}]")
                dump(v, f"{prefix}{k}.")

    dump(data, "")
    p = tmp_path / "server.toml"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("mutate,msg", [
    (lambda d: d["matrix"].update(rows=100),
     "server.toml: matrix.rows must be a positive power of two <= 2048, got 100"),
    (lambda d: d["dram"].pop("bytes_per_cycle"), "server.toml: dram.bytes_per_cycle is missing"),
    (lambda d: d["vector"]["cost"].pop("exp"), "server.toml: vector.cost.exp is missing"),
    (lambda d: d["vector"]["cost"].pop("dequant"), "server.toml: vector.cost.dequant is missing"),
    (lambda d: d["memory"].update(scratchpad_bytes=2**30), "memory.scratchpad_bytes must be <="),
    (lambda d: d["scalar"].update(registers=64), "scalar.registers must be <= 32"),
    (lambda d: d["dma"].update(channels=0), "dma.channels must be >= 1, got 0"),
    (lambda d: d["dma"].update(bogus=1), "dma.bogus is not a known config field"),
    (lambda d: d.update(clock_ghz="fast"), "clock_ghz must be a positive number"),
    (lambda d: d["matrix"].update(dtypes=["int3"]), "matrix.dtypes must be a non-empty list"),
    (lambda d: d["matrix"]["macs_per_pe"].pop("int8"), "server.toml: matrix.macs_per_pe.int8 is missing"),
    (lambda d: d["matrix"]["macs_per_pe"].update(int8=0), "matrix.macs_per_pe.int8 must be >= 1, got 0"),
    (lambda d: d["matrix"]["macs_per_pe"].update(bf16=2), "matrix.macs_per_pe.bf16 must be 1"),
    (lambda d: d["matrix"]["macs_per_pe"].update(fp8e4m3=1),
     "matrix.macs_per_pe.fp8e4m3 is not one of matrix.dtypes"),
])
def test_invalid_configs(tmp_path, mutate, msg):
    with pytest.raises(ConfigError) as e:
        load_config(_write(tmp_path, mutate))
    assert msg in str(e.value)


def test_unknown_name():
    with pytest.raises(ConfigError, match="unknown hardware config 'tpu9'"):
        load_config("tpu9")


@pytest.mark.parametrize("content", [b"not = [toml", b"\x89PNG\r\n\x1a\n\xff\xfe binary"])
def test_a_file_that_is_not_toml_names_its_path(tmp_path, content):
    path = tmp_path / "cfg.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert str(e.value).startswith(f"{path}: invalid TOML: ")
