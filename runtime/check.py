"""`infer run --check` / `Executable.check`: compare a simulated run with the reference.

The reference is the graph-level reference interpreter run on graph IR stored in the artifact.
The interpreter is compiler code (the dialects, xDSL), which the runtime never imports; so the
comparison lives here (numpy only) and the reference is injected: an Executable holds a
`CheckReference` (`infer.tools.reference.GraphReference`, which `infer.load` and
`infer.compile` give every Executable they make), and an Executable made with `infer.runtime`
alone raises `NoReferenceError` when asked to check.

Two comparisons:

* per output (`check`): the simulator's outputs against the interpreter on the graph IR the
  artifact was compiled from (`graph_ir`; `CheckReference.outputs`);
* per layer (`check_layers`, what `Executable.check` and `infer run --check` print): one row
  per graph-level kernel. tile-to-npu's op markers name, for each kernel, the DRAM region
  holding the graph-level value it defines (`ops[i]["values"]`); the simulator copies that
  region when its front end reaches the marker's end at loop depth 0 (`Simulator.run`'s
  `on_pc` hook: functional results are computed in program order, so every earlier
  instruction's effects are visible and no later kernel has reused the bytes yet). The
  reference value is the same op's result in the graph IR graph-to-tile lowered (`layer_ir`:
  after the graph-level passes, e.g. batch norm folded into the conv, one top-level op per
  kernel; `CheckReference.layers`). Each layer is compared with the reference
  computed from the reference's own inputs, so an error shows up first at the layer that
  makes it and the first flagged row localises it. A fused kernel (conv + relu) defines one
  value: that one is compared; values inside a fused kernel, and helper kernels (copies),
  are not (the table footer lists them).

Metrics: cosine similarity, max abs error, SQNR in dB (10 log10(sum ref^2 / sum (ref -
got)^2); inf when exact). A row is flagged when cosine < min_cosine (0.999) or SQNR <
min_sqnr (30 dB) and the values differ at all. NaN and +-inf are values a model may compute
(the log of a negative, an overflow a later `where` discards): the metrics are taken over the
positions finite on both sides, and the others must agree (NaN where the reference has NaN,
the same infinity where it has one); a position where they do not is a mismatch (`specials`
counts the agreeing ones, `special_mismatches` the others). A bool value (a comparison, a
mask) is held as 0 / 1 and compared exactly: any difference flags it.

Layer names: the op's `graph.name` attribute when the frontend recorded one, else its ops
(`conv2d+relu` for a fused kernel) numbered per kind in program order (`conv2d+relu_1`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from infer.runtime.artifact import Artifact, ArtifactError, MarkerValue, marker_values, np_dtype

MIN_COSINE = 0.999
MIN_SQNR = 30.0


@dataclass
class Comparison:
    name: str
    cosine: float
    max_abs: float
    sqnr_db: float
    shape_ok: bool = True
    specials: int = 0  # positions NaN or +-inf on both sides, alike (not in the metrics)
    special_mismatches: int = 0  # positions NaN or +-inf on one side only, or different infinities
    exact: bool = False  # a value with no tolerance (a bool mask): any difference fails

    def ok(self, min_cosine: float = MIN_COSINE, min_sqnr: float = MIN_SQNR) -> bool:
        if self.exact:
            return self.shape_ok and not self.special_mismatches and self.max_abs == 0.0
        return self.shape_ok and not self.special_mismatches and (
            self.sqnr_db >= min_sqnr or self.max_abs == 0.0) and (
            math.isnan(self.cosine) or self.cosine >= min_cosine)

    def specials_note(self) -> str:
        """What the metrics leave out, for a table row or a line ("" when nothing)."""
        notes = []
        if self.special_mismatches:
            notes.append(f"NaN/inf where the reference differs at {self.special_mismatches} position(s)")
        if self.specials:
            notes.append(f"NaN/inf as the reference at {self.specials} position(s)")
        return "; ".join(notes)

    def line(self) -> str:
        note = self.specials_note()
        return (f"{self.name}: cosine {self.cosine:.6f}  max abs err {self.max_abs:.3g}  SQNR {_db(self.sqnr_db)} dB  "
                f"{'OK' if self.ok() else 'MISMATCH'}" + (f"  ({note})" if note else ""))

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "cosine": _json_float(self.cosine), "max_abs": _json_float(self.max_abs),
                "sqnr_db": _json_float(self.sqnr_db), "shape_ok": self.shape_ok, "specials": self.specials,
                "special_mismatches": self.special_mismatches, "exact": self.exact, "ok": self.ok()}


def _with_notes(flag: str, *notes: str) -> str:
    """A table row's flag followed by each non-empty note in parentheses."""
    return " ".join([flag] * bool(flag) + [f"({n})" for n in notes if n])


def _db(x: float) -> str:
    return ("inf" if x > 0 else "-inf") if math.isinf(x) else ("nan" if math.isnan(x) else f"{x:.1f}")


def _json_float(x: float) -> float | str:
    """JSON has no inf/nan: those become strings."""
    return x if math.isfinite(x) else str(x)


def compare(name: str, ref: np.ndarray, got: np.ndarray) -> Comparison:
    """got against ref; a bool ref (a mask: 0 / 1) is compared exactly (Comparison.exact)."""
    exact = np.asarray(ref).dtype == np.bool_
    if ref.shape != got.shape:
        return Comparison(name, float("nan"), float("inf"), float("-inf"), shape_ok=False)
    r = np.asarray(ref, np.float64).ravel()
    g = np.asarray(got, np.float64).ravel()
    finite = np.isfinite(r) & np.isfinite(g)
    specials = mismatches = 0
    if not finite.all():
        odd_r, odd_g = r[~finite], g[~finite]
        alike = (np.isnan(odd_r) & np.isnan(odd_g)) | (odd_r == odd_g)  # same NaN-ness, same inf
        specials, mismatches = int(alike.sum()), int((~alike).sum())
        r, g = r[finite], g[finite]
    if r.size == 0:
        return Comparison(name, 1.0, 0.0, float("inf"), specials=specials, special_mismatches=mismatches, exact=exact)
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
    return Comparison(name, cosine, max_abs, sqnr, specials=specials, special_mismatches=mismatches, exact=exact)


# ----------------------------------------------------------------------------- the reference
class NoReferenceError(ArtifactError):
    """A check was asked of an Executable that has no reference interpreter."""


@dataclass(frozen=True)
class LayerOp:
    """One op of the body of the layer IR's entry function."""

    description: str  # its ops without the dialect (`conv2d+relu` for a fused kernel)
    user_name: str | None = None  # the name the frontend recorded (`graph.name`), if any


@dataclass(frozen=True)
class OutputSource:
    """Where a result of the layer IR's entry function comes from: an op of the body, or an
    argument returned as it is (neither: somewhere else)."""

    layer: int | None = None
    argument: int | None = None


@dataclass
class LayerReference:
    """The reference run of the layer IR (`CheckReference.layers`)."""

    ops: list[LayerOp]  # the entry function's body, in order (`MarkerValue.layer` indexes it)
    values: dict[int, np.ndarray]  # the first result of each op that was asked for
    outputs: list[np.ndarray]  # the entry function's results
    output_sources: list[OutputSource]


class CheckReference(Protocol):
    """The reference side of a check: runs the graph-level reference interpreter on the graph
    IR an artifact holds. The runtime cannot (it imports no compiler code); the compile
    driver's `infer.tools.reference.GraphReference` does."""

    def outputs(self, artifact: Artifact, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The outputs of the artifact's `graph_ir` (the model as compiled) on `inputs`."""
        ...

    def layers(self, artifact: Artifact, inputs: list[np.ndarray], wanted: set[int],
               progress: Callable[[str], None]) -> LayerReference:
        """Run the artifact's `layer_ir` on `inputs`, keeping the results of the body ops `wanted`."""
        ...


def _require(reference: CheckReference | None) -> CheckReference:
    if reference is None:
        raise NoReferenceError("this Executable has no reference interpreter to check against (the reference is "
                               "compiler code, and infer.runtime alone does not load it): load the artifact with "
                               "infer.load(...) or `infer run --check`")
    return reference


def check(artifact: Artifact, inputs: list[np.ndarray], outputs: list[np.ndarray],
          reference: CheckReference | None) -> list[Comparison]:
    """Per output: the simulator's `outputs` against the reference interpreter."""
    if artifact.graph_ir is None:
        raise ArtifactError("the artifact holds no graph-level IR to check against (compiled without it)")
    ref = _require(reference).outputs(artifact, inputs)
    names = [s.name for s in artifact.outputs]
    return [compare(n, np.asarray(r), np.asarray(o)) for n, r, o in zip(names, ref, outputs, strict=True)]


# ----------------------------------------------------------------------------- per layer
@dataclass
class LayerCheck:
    """One row of the per-layer table: a graph-level value a kernel defines."""

    name: str  # layer name (graph.name of the op, else its ops numbered per kind)
    kernel: str  # the op marker (compiler kernel name, as in the performance table)
    kind: str
    layer: int | None  # index of the defining op in the body of the artifact's layer IR
    output: str | None  # the model output this kernel writes, if it writes one
    shape: tuple[int, ...]
    comparison: Comparison | None = None  # None: not compared (see note)
    note: str = ""

    def ok(self, min_cosine: float = MIN_COSINE, min_sqnr: float = MIN_SQNR) -> bool:
        return self.comparison is None or self.comparison.ok(min_cosine, min_sqnr)

    @property
    def cosine(self) -> float:
        return self.comparison.cosine if self.comparison else float("nan")

    @property
    def max_abs(self) -> float:
        return self.comparison.max_abs if self.comparison else float("nan")

    @property
    def sqnr_db(self) -> float:
        return self.comparison.sqnr_db if self.comparison else float("nan")

    def as_dict(self, min_cosine: float = MIN_COSINE, min_sqnr: float = MIN_SQNR) -> dict[str, Any]:
        c = self.comparison
        return {"name": self.name, "kernel": self.kernel, "kind": self.kind, "layer": self.layer,
                "output": self.output, "shape": list(self.shape), "compared": c is not None,
                "cosine": _json_float(c.cosine) if c else None, "max_abs": _json_float(c.max_abs) if c else None,
                "sqnr_db": _json_float(c.sqnr_db) if c else None, "ok": self.ok(min_cosine, min_sqnr),
                "note": self.note}


@dataclass
class CheckReport:
    """`Executable.check(...)`: per-layer rows (program order) and the per-output comparison."""

    layers: list[LayerCheck]
    outputs: list[Comparison]
    uncompared_kernels: list[str] = field(default_factory=list)  # kernels defining no graph-level value
    note: str = ""  # why there are no layer rows, if there are none
    min_cosine: float = MIN_COSINE
    min_sqnr: float = MIN_SQNR
    sim_outputs: list[np.ndarray] = field(default_factory=list, repr=False)  # the run's outputs

    def ok(self) -> bool:
        """Every output and every compared layer within tolerance."""
        return self.outputs_ok() and self.first_bad is None

    def outputs_ok(self) -> bool:
        return all(c.ok(self.min_cosine, self.min_sqnr) for c in self.outputs)

    @property
    def first_bad(self) -> LayerCheck | None:
        """The first layer (program order) out of tolerance: where the error starts."""
        return next((r for r in self.layers if not r.ok(self.min_cosine, self.min_sqnr)), None)

    def as_dict(self) -> dict[str, Any]:
        bad = self.first_bad
        return {"layers": [r.as_dict(self.min_cosine, self.min_sqnr) for r in self.layers],
                "outputs": [c.as_dict() for c in self.outputs],
                "uncompared_kernels": list(self.uncompared_kernels), "note": self.note,
                "min_cosine": self.min_cosine, "min_sqnr_db": self.min_sqnr,
                "first_bad": bad.name if bad else None, "ok": self.ok()}

    def table(self) -> str:
        """The per-layer table (layers, then the final outputs) with its footer."""
        rows: list[tuple[str, str, str, Comparison | None, str]] = []
        first = self.first_bad
        for r in self.layers:
            flag = ("<- first out of tolerance" if r is first else "LOW") if not r.ok(self.min_cosine, self.min_sqnr) \
                else ""
            if r.comparison is None:
                flag = f"not compared: {r.note}"
            else:
                flag = _with_notes(flag, r.note, r.comparison.specials_note(),
                                   f"writes output {r.output}" if r.output else "")
            rows.append((r.name, r.kernel, r.kind, r.comparison, flag))
        for c in self.outputs:
            flag = _with_notes("" if c.ok(self.min_cosine, self.min_sqnr) else "MISMATCH", c.specials_note())
            rows.append((f"output {c.name}", "-", "-", c, flag))
        w = min(max([len("layer"), *(len(r[0]) for r in rows)]), 40)
        wk = min(max([len("kernel"), *(len(r[1]) for r in rows)]), 12)
        wt = min(max([len("kind"), *(len(r[2]) for r in rows)]), 14)
        head = f"  {'layer':<{w}}  {'kernel':<{wk}}  {'kind':<{wt}}  {'cosine':>9}  {'max abs err':>11}  {'SQNR dB':>7}"
        lines = [head]
        for name, kernel, kind, c, flag in rows:
            name = name if len(name) <= w else name[:w - 1] + "~"
            if c is None:
                nums = f"{'-':>9}  {'-':>11}  {'-':>7}"
            elif not c.shape_ok:
                nums = f"{'-':>9}  {'-':>11}  {'-':>7}"
                flag = "shape mismatch " + flag
            else:
                nums = f"{c.cosine:>9.6f}  {c.max_abs:>11.3g}  {_db(c.sqnr_db):>7}"
            lines.append(f"  {name:<{w}}  {kernel[:wk]:<{wk}}  {kind[:wt]:<{wt}}  {nums}  {flag}".rstrip())
        if self.note:
            lines.append(f"  note: {self.note}")
        if self.layers:
            lines.append(f"  flagged: cosine < {self.min_cosine:g} or SQNR < {self.min_sqnr:g} dB (and not exact); "
                         "each layer is compared with the reference computed from the reference's own inputs")
            if first is not None:
                lines.append(f"  first layer out of tolerance: {first.name} ({first.kernel}); later rows inherit "
                             "its error")
        if self.uncompared_kernels:
            ks = self.uncompared_kernels
            lines.append(f"  not compared: {len(ks)} kernel(s) defining no graph-level value (values inside a "
                         f"fused graph op, helper copies): {', '.join(ks[:12])}{', ...' if len(ks) > 12 else ''}")
        return "\n".join(lines)


def snapshot_hooks(artifact: Artifact, store: dict[tuple[int, int], np.ndarray],
                   extra: Mapping[int, Callable[[int, np.ndarray], None]] | None = None,
                   progress: Callable[[str], None] | None = None):
    """`Simulator.run(on_pc=...)` callbacks that copy, at each op marker's end, the DRAM bytes
    of the values it lists into store[(marker index, value index)]; `extra` callbacks at the
    same pc run first (e.g. a test corrupting a kernel's output). `progress` hears every few
    seconds how many kernels have run."""
    by_pc: dict[int, list[tuple[int, int, MarkerValue]]] = {}
    ends: dict[int, int] = {}  # pc -> index of the marker ending there
    for i, o in enumerate(artifact.ops):
        ends[int(o["end"])] = i
        for j, v in enumerate(marker_values(o)):
            by_pc.setdefault(int(o["end"]), []).append((i, j, v))
    clock = [time.perf_counter(), time.perf_counter()]  # start, last report
    total = len(artifact.ops)

    def tell(pc: int) -> None:
        now = time.perf_counter()
        if progress is not None and now - clock[1] > 5.0 and pc in ends:
            clock[1] = now
            i = ends[pc]
            progress(f"simulator: {i + 1}/{total} kernels run ({artifact.ops[i].get('name')}, "
                     f"{now - clock[0]:.0f} s)")

    hooks: dict[int, Callable[[int, np.ndarray], None]] = {}
    for pc in set(by_pc) | set(extra or {}) | (set(ends) if progress is not None else set()):
        snaps = by_pc.get(pc, [])
        user = (extra or {}).get(pc)

        def hook(at: int, dram: np.ndarray, snaps=snaps, user=user) -> None:
            if user is not None:
                user(at, dram)
            for i, j, v in snaps:
                store[(i, j)] = dram[v.offset:v.offset + v.nbytes].copy()
            tell(at)
        hooks[pc] = hook
    return hooks


def check_layers(exe, inputs: Any = None, *, trace: bool = True, check_races: bool | None = None,
                 progress: Callable[[str], None] | None = None, min_cosine: float = MIN_COSINE,
                 min_sqnr: float = MIN_SQNR,
                 on_pc: Mapping[int, Callable[[int, np.ndarray], None]] | None = None,
                 reference: CheckReference | None = None,
                 mode: str = "fast") -> CheckReport:
    """Run `exe` (an Executable) on the simulator (simulation `mode`) with a DRAM snapshot
    after every kernel, run the reference interpreter (`reference`), and compare layer by
    layer and output by output."""
    say = progress or (lambda _msg: None)
    reference = _require(reference)
    art: Artifact = exe.artifact
    if art.graph_ir is None:
        raise ArtifactError("the artifact holds no graph-level IR to check against (compiled without it)")
    arrays = exe._normalise_inputs([] if inputs is None else inputs)
    snaps: dict[tuple[int, int], np.ndarray] = {}
    per_layer = art.layer_ir is not None and any(o.get("values") for o in art.ops)
    hooks = snapshot_hooks(art, snaps, on_pc, progress) if per_layer else dict(on_pc or {})
    nvals = sum(len(o.get("values") or []) for o in art.ops) if per_layer else 0
    say(f"running on the {exe.target} simulator ({len(exe.program)} instructions"
        + (f", {nvals} per-layer DRAM snapshots)" if per_layer else ")"))
    outputs = exe.run(arrays, trace=trace, check_races=check_races, on_pc=hooks or None, mode=mode)

    layers: list[LayerCheck] = []
    uncompared: list[str] = []
    note = ""
    if per_layer:
        layers, uncompared = _layer_rows(art, arrays, snaps, say, reference)
    elif art.layer_ir is None:
        note = "the artifact holds no per-layer reference (compiled by an older infer): outputs only"
    else:
        note = "the artifact's op markers name no per-layer values: outputs only"
    say("running the reference interpreter on the artifact's graph IR (outputs)")
    ref = reference.outputs(art, arrays)
    outs = [compare(s.name, np.asarray(r), np.asarray(o)) for s, r, o in zip(art.outputs, ref, outputs, strict=True)]
    return CheckReport(layers, outs, uncompared, note, min_cosine, min_sqnr, outputs)


def _layer_rows(art: Artifact, arrays: list[np.ndarray], snaps: dict[tuple[int, int], np.ndarray],
                say: Callable[[str], None], reference: CheckReference) -> tuple[list[LayerCheck], list[str]]:
    assert art.layer_ir is not None
    values = [(i, j, v) for i, o in enumerate(art.ops) for j, v in enumerate(marker_values(o))]
    wanted = {v.layer for _, _, v in values if v.layer is not None}
    ref = reference.layers(art, arrays, wanted, say)
    out_names = [s.name for s in art.outputs]

    counts: dict[str, int] = {}
    named: dict[int, str] = {}  # layer index -> its row name

    def name_of(v: MarkerValue) -> str:
        layer = None
        if v.layer is not None:
            layer = v.layer if v.layer < len(ref.ops) else None
        elif v.output is not None and v.output < len(ref.output_sources):
            source = ref.output_sources[v.output]
            if source.argument is not None:  # an output that is an input: a copy
                k = source.argument
                return f"input {art.inputs[k].name if k < len(art.inputs) else k} (copy)"
            layer = source.layer
        if layer is None:
            return "value"
        if layer in named:  # a value written twice (e.g. returned twice): the later is a copy
            return f"{named[layer]} (copy)"
        op = ref.ops[layer]
        name = op.user_name
        if name is None:
            name = f"{op.description}_{counts.get(op.description, 0)}"
            counts[op.description] = counts.get(op.description, 0) + 1
        named[layer] = name
        return name

    rows: list[LayerCheck] = []
    uncompared = [str(o.get("name", f"op{i}")) for i, o in enumerate(art.ops) if not o.get("values")]
    for i, j, v in values:
        o = art.ops[i]
        name = name_of(v)
        row = LayerCheck(name, str(o.get("name", f"op{i}")), str(o.get("kind", "")), v.layer,
                         out_names[v.output] if v.output is not None and v.output < len(out_names) else None,
                         v.shape)
        if v.layer is not None:
            r = ref.values.get(v.layer)
        else:
            r = ref.outputs[v.output] if v.output is not None and v.output < len(ref.outputs) else None
        got = snaps.get((i, j))
        row.comparison, row.note = _compare_value(name, r, got, v)
        rows.append(row)
    return rows, uncompared


def _compare_value(name: str, ref: np.ndarray | None, raw: np.ndarray | None,
                   v: MarkerValue) -> tuple[Comparison | None, str]:
    if ref is None:
        return None, "no reference value"
    if raw is None:
        return None, "the run never reached the end of this kernel"
    ref = np.asarray(ref)
    got = raw.view(np_dtype(v.dtype))
    if ref.dtype.kind not in "fiub":
        return None, f"held as {v.dtype} in DRAM, {ref.dtype} in the reference"
    if got.size != ref.size:
        return None, f"DRAM holds {v.dtype}{list(v.shape)}, the reference {ref.dtype}{list(ref.shape)}"
    note = "bool, held as 0 / 1: exact" if ref.dtype == np.bool_ else ""
    return compare(name, ref, got.reshape(ref.shape)), note
