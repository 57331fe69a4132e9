"""`infer run --check`: compare the simulator's outputs with the reference.

The reference is the graph-level reference interpreter run on the graph IR the
artifact was compiled from (stored in the artifact). Running it needs the
dialects (xDSL); they are imported only when a check is asked for, so plain
`Executable.run` still needs nothing but infer.target.

Metrics per output: cosine similarity, max abs error, SQNR in dB
(10 log10(sum ref^2 / sum (ref - got)^2); inf when exact).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from infer.runtime.artifact import Artifact, ArtifactError


@dataclass
class Comparison:
    name: str
    cosine: float
    max_abs: float
    sqnr_db: float
    shape_ok: bool = True

    def ok(self, min_cosine: float = 0.999, min_sqnr: float = 30.0) -> bool:
        return self.shape_ok and (self.sqnr_db >= min_sqnr or self.max_abs == 0.0) and (
            math.isnan(self.cosine) or self.cosine >= min_cosine)

    def line(self) -> str:
        sq = "inf" if math.isinf(self.sqnr_db) else f"{self.sqnr_db:.1f}"
        return (f"{self.name}: cosine {self.cosine:.6f}  max abs err {self.max_abs:.3g}  SQNR {sq} dB  "
                f"{'OK' if self.ok() else 'MISMATCH'}")


def compare(name: str, ref: np.ndarray, got: np.ndarray) -> Comparison:
    if ref.shape != got.shape:
        return Comparison(name, float("nan"), float("inf"), float("-inf"), shape_ok=False)
    r = np.asarray(ref, np.float64).ravel()
    g = np.asarray(got, np.float64).ravel()
    if r.size == 0:
        return Comparison(name, 1.0, 0.0, float("inf"))
    err = r - g
    max_abs = float(np.max(np.abs(err)))
    nr, ng = float(np.linalg.norm(r)), float(np.linalg.norm(g))
    if nr == 0 and ng == 0:
        cosine = 1.0
    elif nr == 0 or ng == 0:
        cosine = 0.0
    else:
        cosine = float(np.dot(r, g) / (nr * ng))
    noise = float(np.sum(err * err))
    sig = float(np.sum(r * r))
    if noise == 0:
        sqnr = float("inf")
    elif sig == 0:
        sqnr = float("-inf")
    else:
        sqnr = 10 * math.log10(sig / noise)
    return Comparison(name, cosine, max_abs, sqnr)


def reference_outputs(artifact: Artifact, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run the artifact's graph-level IR on the reference interpreter."""
    if artifact.graph_ir is None:
        raise ArtifactError("the artifact holds no graph-level IR to check against (compiled without it)")
    from infer.dialects.graph_interpreter import run_module
    from infer.dialects.ir_io import make_context, parse_ir
    from infer.dialects.weights import WEIGHTS_ATTR, WeightStore, attach_weights

    module = parse_ir(make_context(), artifact.graph_ir, "<artifact graph IR>")
    with tempfile.TemporaryDirectory() as tmp:
        store = None
        if artifact.graph_weights:
            path = Path(tmp) / "graph.weights.safetensors"
            path.write_bytes(artifact.graph_weights)
            store = WeightStore(path)
            # read everything now: the file goes away with the directory
            for n in store.names():
                store.set(n, np.array(store.get(n)))
            store.file = None
            store._file_names = set()
        elif WEIGHTS_ATTR in module.attributes:
            del module.attributes[WEIGHTS_ATTR]
        attach_weights(module, store or WeightStore(None))
        if WEIGHTS_ATTR in module.attributes and store is not None and store.file is None:
            del module.attributes[WEIGHTS_ATTR]
        return run_module(module, inputs, entry=artifact.entry)


def check(artifact: Artifact, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> list[Comparison]:
    ref = reference_outputs(artifact, inputs)
    names = [s.name for s in artifact.outputs]
    return [compare(n, np.asarray(r), np.asarray(o)) for n, r, o in zip(names, ref, outputs, strict=True)]
