"""Compiled artifacts kept on disk between runs (`infer generate --cache-dir`).

Compiling a language model for the NPU takes most of an `infer generate` run (SmolLM2-135M on
the server config, fp32, 4 tokens: import and compile 31 s of a 41 s run; 22 s in all with the
artifact from the cache), and a user trying prompts compiles the same model again every time. With a cache directory the artifact is saved
under a key of everything that decides it, and a later run with the same key loads it instead:

- the model's bytes (`sweep.model_hash`: the file, or every file of a folder, with names);
- the hardware config's TOML text (a bundled `edge` / `server` or a file: its contents, since
  a config edited in place must not hit an artifact compiled for the old one);
- the precision and the import options (paged KV cache: chunk, max_len, block size, blocks);
- the compiler version (`sweep.compiler_version`: the package version and a hash of the
  compiler's, simulator's and runtime's sources).

One file per key, `<model stem>-<target>-<precision>-<key>.npu`, written to a temporary name in
the same directory and renamed (a concurrent run sees a whole file or none). A file that does
not load as an artifact (truncated, corrupt, an older format) is compiled again and replaced.
Loading an artifact runs no code from it (runtime/artifact.py: JSON, safetensors, the program
binary). Nothing is evicted: delete the directory to reclaim the space.

The same directory keeps a GGUF model's tokenizer (`cached_tokenizer`). transformers builds it
from the GGUF metadata by parsing the whole file's metadata again and converting 49,152 tokens
and their merges (SmolLM2: 17 s, transformers' and torch's imports included); saved as a fast
tokenizer's JSON files (`save_pretrained`: tokenizer.json, tokenizer_config.json, the chat
template) it loads in 1.4 s, transformers' own import included (`load_saved_tokenizer`: not
through AutoTokenizer, whose registry imports torch). Its folder is keyed by the model's bytes
and the transformers version (whose converter made it); a folder that does not load is built
again. A Hugging Face folder's tokenizer files load quickly already and are not copied.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infer.frontend.model import Model
    from infer.runtime.artifact import Artifact

#: the environment variable `infer generate` takes its default cache directory from
CACHE_ENV = "INFER_CACHE_DIR"


def cache_key(model_path: str | Path, target: str, precision: str, options: dict[str, Any]) -> str:
    """The hex key of a compile: model bytes, config text, precision, options, compiler."""
    from infer.target.hw import config_path
    from infer.tools.sweep import compiler_version

    h = hashlib.sha256()
    h.update(json.dumps({
        "model": _model_bytes_hash(Path(model_path)),
        "config": hashlib.sha256(config_path(target).read_bytes()).hexdigest(),
        "precision": precision,
        "options": {k: options[k] for k in sorted(options)},
        "compiler": compiler_version(),
    }, sort_keys=True).encode())
    return h.hexdigest()[:24]


def cache_file(cache_dir: str | Path, model_path: str | Path, target: str, precision: str,
               options: dict[str, Any]) -> Path:
    """Where the artifact of this compile is kept in `cache_dir`."""
    stem = Path(model_path).name.removesuffix(".gguf") or "model"
    name = Path(target).stem if str(target).endswith(".toml") else str(target)
    return Path(cache_dir) / f"{stem}-{name}-{precision}-{cache_key(model_path, target, precision, options)}.npu"


def load_cached(path: Path) -> Artifact | None:
    """The artifact at `path`, or None when there is none or it does not load."""
    from infer.runtime.artifact import Artifact, ArtifactError

    if not path.is_file():
        return None
    try:
        return Artifact.load(path)
    except (ArtifactError, OSError, ValueError):
        return None


def store(artifact: Artifact, path: Path) -> Path:
    """Save `artifact` at `path` atomically (a temporary file in the same directory, renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        artifact.save(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _model_bytes_hash(path: Path) -> str:
    """sweep.model_hash of a model file or folder; a file's is computed once per process while
    its size and modification time stay (the artifact's key and the tokenizer's both need it:
    98 MB for SmolLM2)."""
    if path.is_file():
        st = path.stat()
        return _file_hash(str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    from infer.tools.sweep import model_hash

    return model_hash(path)


@functools.lru_cache(maxsize=8)
def _file_hash(path: str, inode: int, size: int, mtime_ns: int) -> str:
    from infer.tools.sweep import model_hash

    return model_hash(Path(path))


def tokenizer_folder(cache_dir: str | Path, model_path: str | Path) -> Path:
    """Where the tokenizer of the GGUF file `model_path` is kept in `cache_dir`."""
    from importlib.metadata import version

    h = hashlib.sha256(json.dumps({"model": _model_bytes_hash(Path(model_path)),
                                   "transformers": version("transformers")}).encode())
    stem = Path(model_path).name.removesuffix(".gguf") or "model"
    return Path(cache_dir) / f"{stem}-tokenizer-{h.hexdigest()[:24]}"


def cached_tokenizer(cache_dir: str | Path, model: Model) -> None:
    """Give `model`, imported from a GGUF file, its tokenizer from `cache_dir`; the first time,
    build it from the GGUF metadata and save it there. Models from other sources are left
    alone. A cache that cannot be written gets a note on stderr, not an error."""
    from importlib.metadata import PackageNotFoundError

    from infer.frontend.tokenizer import load_saved_tokenizer

    source = model.source
    if source is None or not source.is_file() or source.suffix.lower() != ".gguf":
        return
    try:
        folder = tokenizer_folder(cache_dir, source)
    except PackageNotFoundError:  # no transformers: model.tokenizer says so
        return
    if (folder / "tokenizer.json").is_file():
        try:
            model.tokenizer = load_saved_tokenizer(folder)
            return
        except Exception:  # noqa: BLE001 - any damage to the kept copy (tokenizers raises bare
            pass  # Exceptions on bad JSON): build it again from the model below
    tokenizer = model.tokenizer
    if tokenizer is None:
        return
    tmp = folder.with_name(f"{folder.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tokenizer.save_pretrained(str(tmp))
        if folder.exists():  # the damaged copy
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except OSError as e:  # the run goes on: only the next one builds it again
        print(f"note: the tokenizer was not kept in {cache_dir}: {e.strerror or e}", file=sys.stderr)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
