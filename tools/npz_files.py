"""Reading a user's .npz archive of named arrays (`infer run --inputs`, `infer run-ir --inputs`,
`infer calibrate --data`, `infer-opt --verify-numerics-inputs`): one reader, so every command
turns a file that is not such an archive into the same one-line error, whatever numpy raised
(a corrupt or empty file, a single .npy array, a member that is not an .npy array, an object
array, which would need pickle)."""

from __future__ import annotations

import os
import zipfile
import zlib
from typing import BinaryIO

import numpy as np

from infer.dialects.ir_io import first_line


class NpzReadError(ValueError):
    """The file is not a readable .npz archive of named arrays; the message says why (without
    the path: the caller names the file and what it was for)."""


_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip archive's first member, or an empty archive

#: what numpy's reader raises on a file it cannot read: a missing or unreadable file (OSError),
#: a truncated or empty one (EOFError), a damaged zip archive or member (BadZipFile, zlib.error),
#: pickled data or object arrays, which allow_pickle=False refuses (ValueError)
_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def read_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every array of the .npz archive at `path`, by name; NpzReadError if it is not one."""
    try:
        f = open(path, "rb")  # (numpy leaves a file it failed to read open: ours is closed below)
    except OSError as e:
        raise NpzReadError(_reason(e)) from None
    with f:
        return _read(f)


def _read(f: BinaryIO) -> dict[str, np.ndarray]:
    try:
        head = f.read(len(_NPY_MAGIC))
        f.seek(0)
    except OSError as e:
        raise NpzReadError(_reason(e)) from None
    # told apart by their first bytes, as numpy.load does; whatever else numpy would read as a
    # pickle, which it refuses (allow_pickle=False) with advice meant for pickle files
    if not head:
        raise NpzReadError("the file is empty")
    if head.startswith(_NPY_MAGIC):
        raise NpzReadError("it holds one .npy array, not an .npz archive of arrays by name "
                           "(write one with numpy.savez(path, name=array, ...))")
    if not head.startswith(_ZIP_MAGIC):
        raise NpzReadError("not an .npz archive (an .npz file is a zip archive of .npy arrays: "
                           "write one with numpy.savez(path, name=array, ...))")
    try:
        loaded = np.load(f, allow_pickle=False)
    except _READ_ERRORS as e:
        raise NpzReadError(_reason(e)) from None
    with loaded:
        arrays: dict[str, np.ndarray] = {}
        for name in loaded.files:
            try:
                value = loaded[name]
            except _READ_ERRORS as e:
                raise NpzReadError(f"its member '{name}' cannot be read: {_reason(e)}") from None
            if not isinstance(value, np.ndarray):  # numpy hands back a member's raw bytes
                raise NpzReadError(f"its member '{name}' is not an .npy array")
            arrays[name] = value
    return arrays


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    if isinstance(e, EOFError):
        return "the file is truncated"
    if isinstance(e, zipfile.BadZipFile):  # an .npz is a zip archive of .npy files
        return f"not a valid zip archive ({first_line(str(e))})"
    return first_line(str(e)) or type(e).__name__
