"""The `.npu` artifact: everything needed to run a compiled model, in one file.

Layout of the file (all integers little-endian):

    8 bytes   magic b"INFERNPU"
    u32       format version (FORMAT_VERSION)
    u32       header length H
    H bytes   header: UTF-8 JSON (see below)
    ...       payload: the sections, back to back, at the offsets the header gives
    32 bytes  SHA-256 of every byte before it

Header keys: `format` ("infer-npu-artifact"), `format_version`, `infer_version`,
`target` ({name, toml}: the hardware config's TOML text, so the artifact runs with
exactly the config it was built for), `precision`, `entry`, `source` (what was
compiled), `signature` ({inputs, outputs}: lists of {name, shape, dtype}),
`layout` (the JSON form of tile-to-npu's `npu.layout`, the DRAM layout contract of
infer.target.layout: see docs/codegen.md),
`ops` (optional per-op instruction ranges [start, end) with name/kind, for the
performance report; an op may list `values` = [{layer | output, offset, shape, dtype}]: the
DRAM regions holding graph-level values that are final when the op ends, for the per-layer
check), `sections` ({name: {offset, size, sha256}}) and `meta` (free-form).

Several entry points (a decoder's `prefill_chunk` and `decode`, compiled from one module): the
top-level `entry`, `signature`, `layout`, `ops` and `program` section describe the first one;
header key `entries` = {name: {signature, layout, ops, aliases}} the others, each with its own
program section `program:NAME`. Every entry reads the same `weights` section at the same
DRAM addresses (one copy of the weights on the device), and arguments of the same name, shape
and dtype (the KV-cache pools) have one address in every entry, so they stay resident in DRAM
across calls; each entry has its own activation arena, at the same address (entries run one at
a time). `aliases` ({output name: input name}, header key `aliases` for the first entry) lists
the outputs that ARE their input's buffer (updated in place, e.g. a KV pool after
`graph.kv_cache_write`): the runtime neither copies them in nor out per call.
`Artifact.entry_names()`, `Artifact.for_entry(NAME)` (the artifact seen as that one entry,
sharing the bytes) give access to them; an artifact without `entries` is a single-entry one.

Sections: `program` (the NPU binary container of target/asm.py), `weights`
(safetensors bytes of the weights the program reads, by layout name), and
optionally `graph_ir` (graph-level IR text the artifact was compiled from) and
`graph_weights` (its safetensors), which `infer run --check` uses as the reference for the
outputs, and `layer_ir` (the graph IR as graph-to-tile received it: after the graph-level
passes, one top-level op per kernel; an op value's `layer` is an index into its entry
function's body) with `layer_weights` (the weights it reads that `graph_weights` lacks), the
reference for the per-layer check.

`Artifact.from_bytes` validates everything and raises `ArtifactError` with one
clear message for a file that is not an artifact, is truncated, is corrupt
(checksum), has an unsupported version, or whose parts do not agree (signature vs
layout, weights vs layout, program vs config, layout vs DRAM size).

This module imports only infer.target (+ numpy, safetensors): a compiled
artifact runs without the compiler.
"""

from __future__ import annotations

import hashlib
import json
import struct
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from infer.runtime.boundary import converts
from infer.target.layout import DTYPES, DramLayout, LayoutError, lookup_dtype

MAGIC = b"INFERNPU"
FORMAT = "infer-npu-artifact"
#: 2 since the program's instruction encoding gained `wait2` (NPU binary version 2)
FORMAT_VERSION = 2
_PRELUDE = struct.Struct("<8sII")
_DIGEST = 32
_MAX_HEADER = 64 << 20


class ArtifactError(Exception):
    """A file is not a valid artifact, or its parts do not agree. One line."""


def infer_version() -> str:
    try:
        from importlib.metadata import version

        return version("infer")
    except Exception:  # not installed as a distribution
        return "0.1.0"


# ----------------------------------------------------------------------------- dtypes
def np_dtype(name: str) -> np.dtype:
    """A dtype name of the artifact (numpy spelling, or an ISA/MLIR alias) -> numpy dtype."""
    dt = lookup_dtype(name)
    if dt is None:
        raise ArtifactError(f"unsupported dtype '{name}'")
    return dt


def dtype_name(dt: Any) -> str:
    dt = np.dtype(dt)
    for k, v in DTYPES.items():
        if v == dt:
            return k
    raise ArtifactError(f"unsupported dtype {dt}")




# ----------------------------------------------------------------------------- signature / layout
@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def np_dtype(self) -> np.dtype:
        return np_dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.np_dtype.itemsize

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_dict(d: Any, what: str) -> TensorSpec:
        if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not isinstance(d.get("shape"), list):
            raise ArtifactError(f"{what}: expected {{name, shape, dtype}}, got {d!r:.80}")
        if not all(isinstance(x, int) and x >= 0 for x in d["shape"]):
            raise ArtifactError(f"{what} '{d['name']}': bad shape {d['shape']}")
        np_dtype(d.get("dtype", "?"))
        return TensorSpec(d["name"], tuple(d["shape"]), str(d["dtype"]))


def parse_layout(d: Any) -> DramLayout:
    """Check and normalise the JSON form of `npu.layout` (the contract of infer.target.layout)."""
    try:
        return DramLayout.from_json(d)
    except LayoutError as e:
        raise ArtifactError(str(e)) from None


# ----------------------------------------------------------------------------- the artifact
@dataclass
class EntryPoint:
    """One more entry point of a multi-entry artifact (the first is the Artifact's own fields)."""

    name: str
    program: bytes
    signature: dict[str, list[TensorSpec]]
    layout: dict[str, Any]
    ops: list[dict[str, Any]] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)

    def header(self) -> dict[str, Any]:
        return {"signature": {k: [s.as_dict() for s in v] for k, v in self.signature.items()},
                "layout": self.layout, "ops": self.ops, "aliases": self.aliases}


def _sha256_each(blobs: list[bytes]) -> list[str]:
    """The SHA-256 hex digest of each blob; the big ones (the weights sections, ~100 MB each for
    ResNet-50 fp32) on two threads at once (hashlib releases the GIL while it hashes)."""
    big = [i for i, blob in enumerate(blobs) if len(blob) >= _THREADED_HASH_BYTES]
    digests: dict[int, str] = {}
    if len(big) >= 2:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            digests = dict(zip(big, pool.map(lambda i: hashlib.sha256(blobs[i]).hexdigest(), big)))
    return [digests[i] if i in digests else hashlib.sha256(blob).hexdigest() for i, blob in enumerate(blobs)]


_THREADED_HASH_BYTES = 8 << 20


@dataclass
class Artifact:
    program: bytes                      # NPU binary container (target/asm.py)
    weights: bytes                      # safetensors
    signature: dict[str, list[TensorSpec]]
    layout: dict[str, Any]              # JSON form of npu.layout
    target_name: str
    target_toml: str
    precision: str = "fp32"
    entry: str = "main"
    source: str = ""
    ops: list[dict[str, Any]] = field(default_factory=list)
    graph_ir: str | None = None
    graph_weights: bytes | None = None
    layer_ir: str | None = None
    layer_weights: bytes | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    infer_version: str = field(default_factory=infer_version)
    format_version: int = FORMAT_VERSION
    aliases: dict[str, str] = field(default_factory=dict)  # of the first entry: {output: input}
    entries: list[EntryPoint] = field(default_factory=list)  # the other entry points
    # (the file's bytes, or its parts in order; sections; header without its section table) of
    # the last encode/to_bytes/from_bytes
    _encoded: tuple[bytes | list[bytes], list, str] | None = field(default=None, init=False, repr=False,
                                                                   compare=False)
    _decoded: tuple[bytes, Any] | None = field(default=None, init=False, repr=False, compare=False)  # (program, Program)

    # ---------------------------------------------------------------- entry points
    def entry_names(self) -> list[str]:
        return [self.entry, *(e.name for e in self.entries)]

    def for_entry(self, name: str) -> Artifact:
        """This artifact as its entry point `name` alone (same weights, config and IR bytes)."""
        if name == self.entry:
            return self
        for e in self.entries:
            if e.name == name:
                return Artifact(program=e.program, weights=self.weights, signature=e.signature, layout=e.layout,
                                target_name=self.target_name, target_toml=self.target_toml,
                                precision=self.precision, entry=e.name, source=self.source, ops=e.ops,
                                graph_ir=self.graph_ir, graph_weights=self.graph_weights, layer_ir=self.layer_ir,
                                layer_weights=self.layer_weights, meta=self.meta, infer_version=self.infer_version,
                                format_version=self.format_version, aliases=e.aliases)
        raise ArtifactError(f"the artifact has no entry point '{name}' (entry points: "
                            f"{', '.join(self.entry_names())})")

    # ---------------------------------------------------------------- derived
    @property
    def inputs(self) -> list[TensorSpec]:
        return self.signature["inputs"]

    @property
    def outputs(self) -> list[TensorSpec]:
        return self.signature["outputs"]

    def config(self):
        from infer.target.hw import ConfigError, from_dict

        try:
            return from_dict(tomllib.loads(self.target_toml), f"{self.target_name}.toml (in the artifact)")
        except tomllib.TOMLDecodeError as e:
            raise ArtifactError(f"hardware config in the artifact is not valid TOML: {e}") from None
        except ConfigError as e:
            raise ArtifactError(f"hardware config in the artifact is invalid: {e}") from None

    def parsed_layout(self) -> DramLayout:
        return parse_layout(self.layout)

    def decode_program(self):
        """The program section decoded (a new Program each call; the decoding is done once
        per program bytes: validating and running an artifact both need it)."""
        from infer.target.asm import Program
        from infer.target.isa import EncodingError

        kept = self._decoded
        if kept is None or kept[0] is not self.program:
            try:
                kept = self._decoded = (self.program, Program.from_bytes(self.program))
            except EncodingError as e:
                raise ArtifactError(f"program section: {e}") from None
        return Program(list(kept[1].instrs), dict(kept[1].meta))

    def known_decoding(self, program) -> None:
        """`program` (a target.asm.Program) is what this artifact's program bytes encode: the
        compiler that just encoded them says so, and `decode_program` gives it instead of
        decoding the bytes again (~0.3 s for ResNet-50 on edge, 49 K instructions)."""
        self._decoded = (self.program, program)

    def weight_arrays(self) -> dict[str, np.ndarray]:
        return load_safetensors(self.weights, "weights")

    # ---------------------------------------------------------------- serialisation
    def _sections(self) -> list[tuple[str, bytes | str]]:
        """The payload sections in file order (text ones as str: encoded when written)."""
        parts: list[tuple[str, bytes | str | None]] = [
            ("program", self.program), ("weights", self.weights), ("graph_ir", self.graph_ir),
            ("graph_weights", self.graph_weights), ("layer_ir", self.layer_ir),
            ("layer_weights", self.layer_weights), *((f"program:{e.name}", e.program) for e in self.entries)]
        return [(name, data) for name, data in parts if data is not None]

    def _header(self, table: dict[str, Any]) -> dict[str, Any]:
        header = {
            "format": FORMAT, "format_version": self.format_version, "infer_version": self.infer_version,
            "target": {"name": self.target_name, "toml": self.target_toml}, "precision": self.precision,
            "entry": self.entry, "source": self.source,
            "signature": {k: [s.as_dict() for s in v] for k, v in self.signature.items()},
            "layout": self.layout, "ops": self.ops, "meta": self.meta, "sections": table,
        }
        if self.aliases:
            header["aliases"] = self.aliases
        if self.entries:
            header["entries"] = {e.name: e.header() for e in self.entries}
        return header

    def encode(self) -> bytes | list[bytes]:
        """The file's bytes, or its parts in order (prelude, header, sections, checksum: what
        `save` writes, not joined into one bytes object, which would copy every section).
        Hashing the sections and the file dominates for big weights, so what an artifact was
        last written as or read from is kept (`_encoded`) and given again while every section
        is the same object and the header is unchanged."""
        sections = self._sections()
        encoded = self._encoded
        if encoded is not None:
            data, kept_sections, kept_header = encoded
            if (len(kept_sections) == len(sections)
                    and all(n == m and a is b for (n, a), (m, b) in zip(sections, kept_sections))
                    and json.dumps(self._header({}), sort_keys=True) == kept_header):
                return data
        payload = [text_or_bytes.encode() if isinstance(text_or_bytes, str) else text_or_bytes
                   for _, text_or_bytes in sections]
        table, off = {}, 0
        for (name, _), data, digest in zip(sections, payload, _sha256_each(payload), strict=True):
            table[name] = {"offset": off, "size": len(data), "sha256": digest}
            off += len(data)
        hbytes = json.dumps(self._header(table), sort_keys=True).encode()
        parts = [_PRELUDE.pack(MAGIC, self.format_version, len(hbytes)), hbytes, *payload]
        digest = hashlib.sha256()
        for part in parts:
            digest.update(part)
        parts.append(digest.digest())
        self._remember_encoding(parts)
        return parts

    def to_bytes(self) -> bytes:
        """The file's bytes (`encode`'s parts joined once, then kept)."""
        data = self.encode()
        if isinstance(data, list):
            data = b"".join(data)
            self._remember_encoding(data)
        return data

    def _remember_encoding(self, data: bytes | list[bytes]) -> None:
        self._encoded = (data, self._sections(), json.dumps(self._header({}), sort_keys=True))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        data = self.encode()
        with path.open("wb") as f:
            f.writelines(data if isinstance(data, list) else [data])
        return path

    @staticmethod
    def load(path: str | Path) -> Artifact:
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            raise ArtifactError(f"{path}: no such file") from None
        except OSError as e:
            raise ArtifactError(f"{path}: cannot read: {e.strerror or e}") from None
        try:
            return Artifact.from_bytes(data)
        except ArtifactError as e:
            raise ArtifactError(f"{path}: {e}") from None

    @staticmethod
    def from_bytes(data: bytes, checksums: bool = True) -> Artifact:
        """The artifact in `data`, validated. checksums=False skips the SHA-256 checks of the
        file and its sections (only for bytes this process has just written: the compile
        driver loading its artifact back)."""
        if len(data) < len(MAGIC) or data[: len(MAGIC)] != MAGIC:
            raise ArtifactError("not an infer .npu artifact (bad magic; compile one with `infer compile`)")
        if len(data) < _PRELUDE.size:
            raise ArtifactError("truncated artifact (incomplete file header)")
        _, version, hlen = _PRELUDE.unpack_from(data)
        if version != FORMAT_VERSION:
            raise ArtifactError(f"unsupported artifact format version {version} (this runtime reads version "
                                f"{FORMAT_VERSION}); recompile the model with this infer")
        if hlen > _MAX_HEADER:
            raise ArtifactError(f"corrupt artifact (header length {hlen} is implausible)")
        hend = _PRELUDE.size + hlen
        if len(data) < hend + _DIGEST:
            raise ArtifactError(f"truncated artifact ({len(data)} bytes; the header alone needs {hend + _DIGEST})")
        try:
            header = json.loads(data[_PRELUDE.size:hend].decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ArtifactError(f"corrupt artifact (header is not valid JSON: {e})") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise ArtifactError("corrupt artifact (header does not describe an infer artifact)")
        sections = header.get("sections")
        if not isinstance(sections, dict):
            raise ArtifactError("corrupt artifact (no section table)")
        payload_len = 0
        for name, s in sections.items():
            if not isinstance(s, dict) or not all(isinstance(s.get(k), int) for k in ("offset", "size")):
                raise ArtifactError(f"corrupt artifact (bad entry for section '{name}')")
            payload_len = max(payload_len, s["offset"] + s["size"])
        expected = hend + payload_len + _DIGEST
        if len(data) < expected:
            raise ArtifactError(f"truncated artifact ({len(data)} bytes, expected {expected})")
        if len(data) > expected:
            raise ArtifactError(f"corrupt artifact ({len(data) - expected} unexpected trailing bytes)")
        if checksums and hashlib.sha256(memoryview(data)[:-_DIGEST]).digest() != data[-_DIGEST:]:
            raise ArtifactError("corrupt artifact (checksum mismatch: the file was modified or damaged)")
        blobs: dict[str, bytes] = {}
        for name, s in sections.items():
            blob = data[hend + s["offset"]: hend + s["offset"] + s["size"]]
            if checksums and hashlib.sha256(blob).hexdigest() != s.get("sha256"):
                raise ArtifactError(f"corrupt artifact (section '{name}' checksum mismatch)")
            blobs[name] = blob
        for required in ("program", "weights"):
            if required not in blobs:
                raise ArtifactError(f"corrupt artifact (missing section '{required}')")
        try:
            target = header["target"]
            sig = header["signature"]
            art = Artifact(
                program=blobs["program"], weights=blobs["weights"],
                signature={k: [TensorSpec.from_dict(x, f"signature {k[:-1]}") for x in sig[k]]
                           for k in ("inputs", "outputs")},
                layout=header["layout"], target_name=str(target["name"]), target_toml=str(target["toml"]),
                precision=str(header.get("precision", "fp32")), entry=str(header.get("entry", "main")),
                source=str(header.get("source", "")), ops=list(header.get("ops") or []),
                graph_ir=blobs["graph_ir"].decode() if "graph_ir" in blobs else None,
                graph_weights=blobs.get("graph_weights"),
                layer_ir=blobs["layer_ir"].decode() if "layer_ir" in blobs else None,
                layer_weights=blobs.get("layer_weights"), meta=dict(header.get("meta") or {}),
                infer_version=str(header.get("infer_version", "?")), format_version=version,
                aliases=_aliases(header.get("aliases"), str(header.get("entry", "main"))),
            )
            for name, e in (header.get("entries") or {}).items():
                if f"program:{name}" not in blobs:
                    raise ArtifactError(f"corrupt artifact (missing section 'program:{name}')")
                art.entries.append(EntryPoint(
                    name=str(name), program=blobs[f"program:{name}"],
                    signature={k: [TensorSpec.from_dict(x, f"entry {name}: signature {k[:-1]}")
                                   for x in e["signature"][k]] for k in ("inputs", "outputs")},
                    layout=e["layout"], ops=list(e.get("ops") or []), aliases=_aliases(e.get("aliases"), name)))
        except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
            raise ArtifactError(f"corrupt artifact (header field missing or malformed: {e})") from None
        art.validate()
        art._remember_loaded(data, sections, data[_PRELUDE.size:hend])
        return art

    def _remember_loaded(self, data: bytes, file_table: dict[str, Any], file_header: bytes) -> None:
        """Keep `data` as this artifact's bytes if writing it would give them again (the
        header, re-made with the file's checksums, is byte for byte the file's)."""
        table, off = {}, 0
        for name, text_or_bytes in self._sections():
            size = len(text_or_bytes.encode() if isinstance(text_or_bytes, str) else text_or_bytes)
            table[name] = {"offset": off, "size": size, "sha256": file_table.get(name, {}).get("sha256")}
            off += size
        if json.dumps(self._header(table), sort_keys=True).encode() == file_header:
            self._remember_encoding(data)

    # ---------------------------------------------------------------- validation
    def validate(self) -> None:
        """Check that the parts agree; raises ArtifactError naming the first mismatch (of
        every entry point, and that the entries agree on the weights' and shared arguments'
        addresses)."""
        self._validate_entry()
        if not self.entries:
            return
        names = self.entry_names()
        if len(set(names)) != len(names):
            raise ArtifactError(f"corrupt artifact (duplicate entry point names: {', '.join(names)})")
        first = self.parsed_layout()
        weights = {w.name: w.offset for w in first.weights}
        for e in self.entries:
            view = self.for_entry(e.name)
            try:
                view._validate_entry()
            except ArtifactError as err:
                raise ArtifactError(f"entry point '{e.name}': {err}") from None
            lay = view.parsed_layout()
            for w in lay.weights:
                if weights.setdefault(w.name, w.offset) != w.offset:
                    raise ArtifactError(f"mismatched artifact: entry points '{self.entry}' and '{e.name}' place weight "
                                        f"'{w.name}' at different addresses")

    def _validate_entry(self) -> None:
        cfg = self.config()
        if cfg.name != self.target_name:
            raise ArtifactError(f"mismatched artifact: target name '{self.target_name}' but its config says "
                                f"'{cfg.name}'")
        prog = self.decode_program()
        try:
            from infer.target.sim import Simulator

            # configs the simulator cannot instantiate fail here (the environment's settings
            # are not the artifact's: INFER_SIM_THREADS and INFER_SIM_MEMO_MB are not read)
            Simulator(cfg, threads=1, memo_budget=0)
        except Exception as e:  # pragma: no cover - from_dict already validated
            raise ArtifactError(f"hardware config in the artifact: {e}") from None
        _check_program_against_config(prog, cfg)
        lay = self.parsed_layout()
        if lay.total_bytes > cfg.memory.dram_bytes:
            raise ArtifactError(f"mismatched artifact: the layout needs {lay.total_bytes} bytes of DRAM, config "
                                f"{cfg.name} has {cfg.memory.dram_bytes}")
        for what, specs, places in (("input", self.inputs, lay.inputs), ("output", self.outputs, lay.outputs)):
            if len(specs) != len(places):
                raise ArtifactError(f"mismatched artifact: the signature has {len(specs)} {what}(s), the layout "
                                    f"{len(places)}")
            for s, p in zip(specs, places, strict=True):
                if s.shape != p.shape or not converts(s.np_dtype, np_dtype(p.dtype), what):
                    raise ArtifactError(f"mismatched artifact: {what} '{s.name}' is {s.dtype} {list(s.shape)} in the "
                                        f"signature but {p.dtype} {list(p.shape)} in the layout")
                if p.offset + p.nbytes > lay.total_bytes:
                    raise ArtifactError(f"mismatched artifact: {what} '{s.name}' [{p.offset}, {p.offset + s.nbytes})"
                                        f" lies outside the DRAM image ({lay.total_bytes} bytes)")
        outputs, inputs = {p.name: p for p in lay.outputs}, {p.name: p for p in lay.inputs}
        for out, src in self.aliases.items():
            if out not in outputs or src not in inputs:
                raise ArtifactError(f"mismatched artifact: alias {out} -> {src} names no output/input of entry "
                                    f"'{self.entry}'")
            if (outputs[out].offset, outputs[out].shape) != (inputs[src].offset, inputs[src].shape):
                raise ArtifactError(f"mismatched artifact: output '{out}' is an alias of input '{src}' but the "
                                    "layout does not place them at the same address")
        arrays = self.weight_arrays()
        for w in lay.weights:
            name, off, size = w.name, w.offset, w.nbytes
            if name not in arrays:
                raise ArtifactError(f"mismatched artifact: the layout places weight '{name}' but the weights "
                                    "section does not hold it")
            if arrays[name].nbytes != size:
                raise ArtifactError(f"mismatched artifact: weight '{name}' has {arrays[name].nbytes} bytes, the "
                                    f"layout reserves {size}")
            if off + size > lay.total_bytes:
                raise ArtifactError(f"mismatched artifact: weight '{name}' lies outside the DRAM image")
        for i, o in enumerate(self.ops):
            if not isinstance(o, dict) or not all(isinstance(o.get(k), int) for k in ("start", "end")):
                raise ArtifactError(f"corrupt artifact (op marker {i} needs integer start/end)")
            if not 0 <= o["start"] <= o["end"] <= len(prog):
                raise ArtifactError(f"mismatched artifact: op marker '{o.get('name')}' covers instructions "
                                    f"[{o['start']}, {o['end']}) of a {len(prog)}-instruction program")
            for v in marker_values(o, f"op marker '{o.get('name')}'"):
                if v.offset + v.nbytes > lay.total_bytes:
                    raise ArtifactError(f"mismatched artifact: op marker '{o.get('name')}' places a value at "
                                        f"[{v.offset}, {v.offset + v.nbytes}), outside the DRAM image "
                                        f"({lay.total_bytes} bytes)")


def _aliases(d: Any, entry: str) -> dict[str, str]:
    if d is None:
        return {}
    if not isinstance(d, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in d.items()):
        raise ArtifactError(f"corrupt artifact (entry '{entry}': aliases must map output names to input names)")
    return dict(d)


@dataclass(frozen=True)
class MarkerValue:
    """A graph-level value in DRAM, final when its op marker ends (`ops[i]["values"]`):
    `layer` = index of the op defining it in the body of `layer_ir`'s entry function, or
    `output` = the model output it is."""

    offset: int
    shape: tuple[int, ...]
    dtype: str
    layer: int | None = None
    output: int | None = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np_dtype(self.dtype).itemsize


def marker_values(op: dict[str, Any], what: str = "op marker") -> list[MarkerValue]:
    """The checked `values` of one op marker ([] when it has none)."""
    raw = op.get("values") or []
    if not isinstance(raw, list):
        raise ArtifactError(f"corrupt artifact ({what}: 'values' must be a list)")
    out = []
    for v in raw:
        ok = (isinstance(v, dict) and isinstance(v.get("offset"), int) and v["offset"] >= 0
              and isinstance(v.get("shape"), list) and all(isinstance(n, int) and n >= 0 for n in v["shape"])
              and isinstance(v.get("dtype"), str)
              and sum(isinstance(v.get(k), int) and v[k] >= 0 for k in ("layer", "output")) == 1)
        if not ok:
            raise ArtifactError(f"corrupt artifact ({what}: bad value entry {v!r:.80})")
        np_dtype(v["dtype"])
        out.append(MarkerValue(v["offset"], tuple(v["shape"]), v["dtype"], v.get("layer"), v.get("output")))
    return out


def _check_program_against_config(prog, cfg) -> None:
    nreg, nsem = cfg.scalar.registers, cfg.scalar.semaphores
    checked: set[int] = set()  # an instruction seen before (decoding shares repeated ones) passed already
    for i, ins in enumerate(prog.instrs):
        if id(ins) in checked:
            continue
        checked.add(id(ins))
        for f, v in zip(ins.d.fields, ins.values, strict=True):
            if f.kind == "reg" and v >= nreg:
                raise ArtifactError(f"mismatched artifact: instruction {i} uses r{v}, config {cfg.name} has "
                                    f"r0..r{nreg - 1}")
        if max(ins.wait, ins.signal, ins.signal2, ins.wait2) > nsem:
            raise ArtifactError(f"mismatched artifact: instruction {i} uses a semaphore beyond s{nsem} "
                                f"(config {cfg.name})")
        if ins.d.engine == "matrix":
            from infer.target import isa

            dname = isa.DTYPES[ins.as_dict()["dtype"]][0]
            if dname not in cfg.matrix.dtypes:
                raise ArtifactError(f"mismatched artifact: instruction {i} uses {dname} on the matrix unit; "
                                    f"config {cfg.name} supports {', '.join(cfg.matrix.dtypes)}")


_ST_DTYPES = {"F32": "float32", "F16": "float16", "F64": "float64", "BF16": "bfloat16", "I8": "int8",
              "U8": "uint8", "I16": "int16", "I32": "int32", "I64": "int64", "U16": "uint16",
              "U32": "uint32", "U64": "uint64", "BOOL": "bool",
              "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
_ST_CODES = {v: k for k, v in _ST_DTYPES.items()}


def load_safetensors(data: bytes, what: str) -> dict[str, np.ndarray]:
    """Parse safetensors bytes (every dtype the NPU uses, incl. bf16/fp8) -> read-only arrays."""
    if not data:
        return {}
    try:
        (hlen,) = struct.unpack_from("<Q", data)
        header = json.loads(data[8:8 + hlen].decode())
        base = 8 + hlen
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dt = np_dtype(_ST_DTYPES[info["dtype"]])
            start, end = info["data_offsets"]
            shape = tuple(info["shape"])
            if base + end > len(data) or end - start != int(np.prod(shape, dtype=np.int64)) * dt.itemsize:
                raise ValueError(f"tensor '{name}' runs past the data or has the wrong size")
            count = (end - start) // dt.itemsize
            arr = np.frombuffer(data, dt, count, base + start) if count else np.zeros(0, dt)
            out[name] = arr.reshape(shape)
        return out
    except (struct.error, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError,
            ArtifactError) as e:
        raise ArtifactError(f"{what} section is not valid safetensors: {e}") from None


def save_safetensors(arrays: dict[str, np.ndarray]) -> bytes:
    """Arrays -> safetensors bytes (own writer: safetensors.numpy cannot read bf16 back)."""
    header: dict[str, Any] = {}
    chunks, off = [], 0
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        # the C-order bytes (as a.tobytes(), 0-d included), viewed, not copied: the weights are
        # copied once, into the result
        b = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        header[name] = {"dtype": _ST_CODES[dtype_name(a.dtype)], "shape": list(a.shape),
                        "data_offsets": [off, off + b.nbytes]}
        chunks.append(b)
        off += b.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return b"".join([struct.pack("<Q", len(h)), h, *chunks])
