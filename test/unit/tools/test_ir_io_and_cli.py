"""The weight store, IR file I/O diagnostics, and the `infer` CLI's error contract."""

from __future__ import annotations

import errno
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from infer.dialects.ir_io import IRError, load_ir_file, module_to_text
from infer.dialects.weights import WeightStore, WeightStoreError, referenced_weights, weights_of
from infer.frontend.builder import GraphBuilder
from infer.dialects import graph

BIN = Path(sys.executable).parent

IR = """module attributes {graph.weights = "w.safetensors"} {
  func.func @main(%x: tensor<2x3xf32> {graph.name = "x"}) -> (tensor<2x4xf32> {graph.name = "y"}) {
    %w = graph.weight @fc.weight : tensor<4x3xf32>
    %y = graph.linear %x, %w : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
    func.return %y : tensor<2x4xf32>
  }
}
"""


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    save_file({"fc.weight": w}, str(tmp_path / "w.safetensors"))
    (tmp_path / "m.mlir").write_text(IR)
    return tmp_path


def test_weights_resolve_relative_to_the_ir_file(model_dir: Path):
    module = load_ir_file(model_dir / "m.mlir")
    store = weights_of(module)
    np.testing.assert_array_equal(store.get("fc.weight"), np.arange(12, dtype=np.float32).reshape(4, 3))
    assert referenced_weights(module) == ["fc.weight"]


def test_missing_weight_names_the_file(model_dir: Path):
    store = WeightStore(model_dir / "w.safetensors")
    with pytest.raises(WeightStoreError, match="weight 'nope' not found in '.*w.safetensors'"):
        store.get("nope")


def test_new_weights_are_written_beside_the_output(model_dir: Path):
    module = load_ir_file(model_dir / "m.mlir")
    store = weights_of(module)
    store.set("fc.weight", store.get("fc.weight") * 2)
    out = model_dir / "sub" / "out.mlir"
    out.parent.mkdir()
    text = module_to_text(module, out)
    out.write_text(text)
    written = list(out.parent.glob("out.*.weights.safetensors"))
    assert len(written) == 1
    assert f'graph.weights = "{written[0].name}"' in text
    again = load_ir_file(out)
    np.testing.assert_array_equal(weights_of(again).get("fc.weight")[1], [6, 8, 10])


def test_verifier_error_names_file_line_and_op(tmp_path: Path):
    bad = tmp_path / "bad.mlir"
    bad.write_text(IR.replace("tensor<4x3xf32>", "tensor<4x5xf32>"))
    with pytest.raises(IRError) as e:
        load_ir_file(bad)
    assert str(e.value).startswith(f"{bad}:4:5: error: 'graph.linear' op input features 3")


def test_builder_infers_result_types_and_names_io():
    b = GraphBuilder()
    x = b.input("tokens", (2, 5), np.int64)
    table = b.weight("embed", np.zeros((10, 4), np.float32))
    y = b.op(graph.GatherOp, [table, x])
    module = b.finish([y], ["hidden"])
    text = str(module)
    assert "tensor<2x5x4xf32>" in text
    assert 'graph.name = "tokens"' in text and 'graph.name = "hidden"' in text


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "infer"), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_run_ir_with_named_inputs(model_dir: Path):
    np.savez(model_dir / "in.npz", x=np.ones((2, 3), np.float32))
    r = run_cli("run-ir", "m.mlir", "--inputs", "in.npz", "--output", "out.npz", cwd=model_dir)
    assert r.returncode == 0, r.stderr
    with np.load(model_dir / "out.npz") as out:
        np.testing.assert_allclose(out["y"], np.ones((2, 3)) @ np.arange(12).reshape(4, 3).T)


def bad_files(folder: Path) -> None:
    """Files that are not .npz archives of named arrays, and a folder where a file is expected."""
    (folder / "text.npz").write_text("not an archive")
    (folder / "empty.npz").write_bytes(b"")
    np.save(folder / "one.npy", np.ones((2, 3), np.float32))
    with zipfile.ZipFile(folder / "member.npz", "w") as z:
        z.writestr("x.npy", b"not an npy array")
    (folder / "out").mkdir()


@pytest.mark.parametrize(
    "args, message",
    [
        (("run-ir", "missing.mlir"), "missing.mlir: error: cannot read file"),
        (("run-ir", "m.mlir", "--inputs", "nope.npz"), "nope.npz: cannot read inputs as .npz: No such file"),
        (("run-ir", "m.mlir", "--inputs", "text.npz"), "text.npz: cannot read inputs as .npz: not an .npz archive"),
        (("run-ir", "m.mlir", "--inputs", "empty.npz"), "empty.npz: cannot read inputs as .npz: the file is empty"),
        (("run-ir", "m.mlir", "--inputs", "one.npy"), "one.npy: cannot read inputs as .npz: it holds one .npy array"),
        (("run-ir", "m.mlir", "--inputs", "member.npz"), "member 'x' is not an .npy array"),
        (("run-ir", "m.mlir", "--output", "no/such/out.npz"),
         "--output no/such/out.npz: cannot write: the folder no/such does not exist"),
        (("run-ir", "m.mlir", "--output", "out"), "--output out: is a folder"),
        (("import", "m.mlir", "-o", "no/m.mlir"), "--output no/m.mlir: cannot write: the folder no does not exist"),
        (("import", "m.txt"), "no such file"),
        (("import", "--input-shape", "bad", "m.mlir"), "expected NAME=DxDxD"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_1(model_dir: Path, args, message):
    bad_files(model_dir)
    r = run_cli(*args, cwd=model_dir)
    assert r.returncode == 1
    assert message in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cli_wrong_usage_is_exit_2():
    assert run_cli("no-such-command").returncode == 2


def test_cli_an_unwritable_output_is_a_user_error(model_dir: Path, monkeypatch, capsys):
    """An OSError naming a file (a full disk, a folder without permission) while a command writes
    its result is one line naming the file, exit 1: not an internal error."""
    from infer.tools import cli

    def full_disk(path, **arrays):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.chdir(model_dir)
    monkeypatch.setattr(cli.np, "savez", full_disk)
    assert cli.main(["run-ir", "m.mlir", "--output", "out.npz"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "infer run-ir: error: out.npz: No space left on device"
    assert not any("internal error" in line for line in err)
