"""The .npu artifact: round trip, and one clear error for every kind of bad file."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import numpy as np
import pytest

from infer.runtime.artifact import FORMAT_VERSION, MAGIC, Artifact, ArtifactError, save_safetensors

from helpers.runtime_artifacts import bias_relu_artifact, target_toml


def test_round_trip(tmp_path):
    art = bias_relu_artifact()
    path = art.save(tmp_path / "m.npu")
    back = Artifact.load(path)
    assert back.program == art.program and back.weights == art.weights
    assert back.signature == art.signature and back.layout == art.layout
    assert back.target_name == "edge" and back.target_toml == art.target_toml
    assert back.ops == art.ops and back.format_version == FORMAT_VERSION
    assert back.infer_version
    assert back.to_bytes() == art.to_bytes() == path.read_bytes()


def test_save_writes_the_encoded_parts(tmp_path):
    """`encode` keeps the file's parts unjoined (what `save` writes, without a copy of every
    section); the file is to_bytes, and a second save after to_bytes writes the same bytes."""
    art = bias_relu_artifact()
    parts = art.encode()
    assert isinstance(parts, list) and art.encode() is parts  # (kept)
    first = art.save(tmp_path / "a.npu").read_bytes()
    assert first == b"".join(parts) == art.to_bytes()
    assert art.save(tmp_path / "b.npu").read_bytes() == first
    assert Artifact.from_bytes(first).weights == art.weights


def test_optional_graph_sections_round_trip():
    art = bias_relu_artifact()
    art.graph_ir = "builtin.module {}\n"
    art.graph_weights = save_safetensors({"w": np.ones(3, np.float32)})
    back = Artifact.from_bytes(art.to_bytes())
    assert back.graph_ir == art.graph_ir and back.graph_weights == art.graph_weights


def test_big_sections_hashed_on_threads_round_trip():
    """Sections of 8 MB or more are hashed two at a time (artifact._sha256_each); loading
    checks every section's checksum, so the digests are each its own section's."""
    art = bias_relu_artifact()
    art.graph_ir = "builtin.module {}\n"
    art.graph_weights = save_safetensors({"w": np.arange(3 << 20, dtype=np.float32)})
    art.layer_ir = "builtin.module {}\n"
    art.layer_weights = save_safetensors({"w": -np.arange(3 << 20, dtype=np.float32)})
    back = Artifact.from_bytes(art.to_bytes())
    assert back.graph_weights == art.graph_weights and back.layer_weights == art.layer_weights


def test_kept_bytes_follow_every_change():
    """An artifact gives the bytes it was read from or last written as again only while
    nothing changed: a changed section or header field is serialised anew (a fresh
    artifact with the same parts is the reference)."""
    art = bias_relu_artifact()
    data = art.to_bytes()
    back = Artifact.from_bytes(data, checksums=False)
    assert back.to_bytes() is data
    back.meta["note"] = "changed"  # a header field, changed in place
    art.meta["note"] = "changed"
    assert back.to_bytes() == bias_relu_artifact_with(art).to_bytes() != data
    back.graph_ir = art.graph_ir = "builtin.module {}\n"  # a new section
    assert back.to_bytes() == bias_relu_artifact_with(art).to_bytes()
    back.weights = art.weights = save_safetensors(  # a section replaced (same names and shapes)
        {n: a + 1 for n, a in art.weight_arrays().items()})
    assert back.to_bytes() == bias_relu_artifact_with(art).to_bytes()
    assert Artifact.from_bytes(back.to_bytes()).weights == art.weights


def bias_relu_artifact_with(art: Artifact) -> Artifact:
    """A fresh Artifact of the same parts (nothing kept from an earlier serialisation)."""
    return Artifact(program=art.program, weights=art.weights, signature=art.signature, layout=art.layout,
                    target_name=art.target_name, target_toml=art.target_toml, precision=art.precision,
                    entry=art.entry, source=art.source, ops=art.ops, graph_ir=art.graph_ir,
                    graph_weights=art.graph_weights, layer_ir=art.layer_ir, layer_weights=art.layer_weights,
                    meta=art.meta, infer_version=art.infer_version, aliases=art.aliases, entries=art.entries)


def _err(data: bytes) -> str:
    with pytest.raises(ArtifactError) as e:
        Artifact.from_bytes(data)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_not_an_artifact():
    assert "not an infer .npu artifact" in _err(b"hello world, this is not an artifact")
    assert "not an infer .npu artifact" in _err(b"")


@pytest.mark.parametrize("cut", [10, 20, 200, -1, -40])
def test_truncated(cut):
    data = bias_relu_artifact().to_bytes()
    assert "truncated" in _err(data[:cut])


def test_trailing_bytes():
    assert "trailing bytes" in _err(bias_relu_artifact().to_bytes() + b"\0")


def test_corrupt_payload_checksum():
    data = bytearray(bias_relu_artifact().to_bytes())
    data[-100] ^= 0xFF  # inside the payload
    assert "checksum" in _err(bytes(data))


def test_corrupt_header():
    data = bytearray(bias_relu_artifact().to_bytes())
    data[20] = ord("!")
    assert "corrupt artifact" in _err(bytes(data))


def test_unsupported_version():
    data = bytearray(bias_relu_artifact().to_bytes())
    struct.pack_into("<I", data, len(MAGIC), 99)
    assert "format version 99" in _err(bytes(data))


def _resealed(mutate) -> bytes:
    """Rewrite the header with mutate(header) and fix the checksums: a consistent but
    mismatched file (what a buggy writer would produce)."""
    art = bias_relu_artifact()
    mutate(art)
    return art.to_bytes()


def test_mismatched_signature_vs_layout():
    from infer.runtime.artifact import TensorSpec

    def m(a):
        a.signature["inputs"] = [TensorSpec("x", (4, 8), "float32")]
    assert "mismatched artifact: input 'x'" in _err(_resealed(m))


def test_mismatched_weights():
    def m(a):
        a.weights = save_safetensors({"other": np.zeros(16, np.float32)})
    assert "weight 'b'" in _err(_resealed(m))

    def m2(a):
        a.weights = save_safetensors({"b": np.zeros(8, np.float32)})
    assert "reserves 64" in _err(_resealed(m2))


def test_mismatched_config():
    def m(a):
        a.target_toml = target_toml("server")
    assert "target name 'edge'" in _err(_resealed(m))

    def m2(a):
        a.target_toml = "name = [broken"
    assert "not valid TOML" in _err(_resealed(m2))


def test_program_needs_more_dram_than_config():
    def m(a):
        a.layout = dict(a.layout, dram_bytes=1 << 40)
    assert "bytes of DRAM" in _err(_resealed(m))


def test_bad_program_section():
    def m(a):
        a.program = b"NPUBIN\0\0" + b"\1\0\0\0\5\0\0\0"
    assert "program section" in _err(_resealed(m))


def test_bad_op_marker():
    def m(a):
        a.ops = [{"name": "x", "start": 0, "end": 1000}]
    assert "op marker 'x'" in _err(_resealed(m))


def test_bad_weights_section():
    def m(a):
        a.weights = b"\xff" * 16
    assert "not valid safetensors" in _err(_resealed(m))


def test_header_is_json_with_format(tmp_path):
    data = bias_relu_artifact().to_bytes()
    (hlen,) = struct.unpack_from("<I", data, 12)
    header = json.loads(data[16:16 + hlen])
    assert header["format"] == "infer-npu-artifact"
    assert set(header["sections"]) == {"program", "weights"}
    assert header["target"]["name"] == "edge" and "[matrix]" in header["target"]["toml"]


def test_runtime_imports_no_compiler(tmp_path):
    """Running an artifact loads no compiler module (dialects, passes, frontend, tools, xDSL);
    asking an Executable made by infer.runtime alone to check gives one clear error (the
    reference interpreter is compiler code: infer.load's Executables have it)."""
    path = bias_relu_artifact().save(tmp_path / "m.npu")
    code = ("import sys, numpy as np, infer.runtime, infer.runtime.check\n"
            f"exe = infer.runtime.load({str(path)!r})\n"
            "x = np.linspace(-2, 2, 64, dtype=np.float32).reshape(4, 16)\n"
            "(y,) = exe.run([x])\n"
            "b = np.linspace(-1, 1, 16, dtype=np.float32)\n"
            "assert np.array_equal(y, np.maximum(x + b, 0)) and exe.last_report.cycles > 0\n"
            "try:\n    exe.check([x])\nexcept infer.runtime.NoReferenceError as e:\n    print('check:', e)\n"
            "bad = [m for m in sys.modules if m.startswith(('infer.passes', 'infer.frontend', 'infer.tools', "
            "'infer.dialects', 'xdsl'))]\n"
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "check: this Executable has no reference interpreter" in r.stdout and "infer.load" in r.stdout
