"""infer.tools.npz_files.read_npz: the arrays of an .npz archive, or one NpzReadError saying why
the file is not one (every command that reads .npz inputs or samples goes through it)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from infer.tools.npz_files import NpzReadError, read_npz


def test_reads_every_array_by_name(tmp_path: Path):
    x, ids = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([[3, 1]], np.int64)
    np.savez(tmp_path / "a.npz", x=x, ids=ids)
    np.savez_compressed(tmp_path / "c.npz", x=x)
    got = read_npz(tmp_path / "a.npz")
    assert sorted(got) == ["ids", "x"]
    np.testing.assert_array_equal(got["x"], x)
    np.testing.assert_array_equal(got["ids"], ids)
    assert got["ids"].dtype == np.int64
    np.testing.assert_array_equal(read_npz(tmp_path / "c.npz")["x"], x)


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


@pytest.mark.parametrize("make, reason", [
    (lambda d: d / "missing.npz", "No such file or directory"),
    (lambda d: (d / "t.npz").write_text("plain text") and d / "t.npz", "not an .npz archive"),
    (lambda d: (d / "z.npz").write_bytes(b"PK\x03\x04 damaged") and d / "z.npz", "not a valid zip archive"),
    (lambda d: (d / "e.npz").write_bytes(b"") == 0 and d / "e.npz", "the file is empty"),
    (lambda d: np.save(d / "one.npy", np.zeros(3)) or d / "one.npy", "it holds one .npy array"),
    (lambda d: _zip(d / "m.npz", {"x.npy": b"not an array"}), "its member 'x' is not an .npy array"),
    (lambda d: np.savez(d / "o.npz", x=np.array([object()], dtype=object)) or d / "o.npz",
     "Object arrays cannot be loaded when allow_pickle=False"),
])
def test_a_file_that_is_not_an_archive_of_arrays_is_one_error(tmp_path: Path, make, reason):
    path = make(tmp_path)
    with pytest.raises(NpzReadError) as info:
        read_npz(path)
    message = str(info.value)
    assert reason in message
    assert "\n" not in message and str(path) not in message  # the caller names the file
