"""`infer-opt --verify-each-numerically`: per-pass translation validation.

Before the first stage of the pipeline the module's entry function is run on
the interpreter of its level with seeded inputs; after every stage (each stage
of a named pipeline on its own) it is run again on the same inputs, on the
interpreter of the level the stage left it at, and compared with the results
before the stage. The first stage whose results differ beyond its tolerance
fails with one diagnostic naming the stage, the output, the index of the worst
element, both values and the error; infer-opt exits 1.

Levels (the inputs are the same arrays at every level, by position):
  graph  tensors: the reference interpreter (`graph_interpreter.run_module`)
  tile   memrefs: the tile interpreter (`tile_interpreter.run_tile_module`), whose
         numerics are the simulator's
  npu    an `npu.program` + `npu.layout`: the instruction-set simulator, with its race
         checker, on the DRAM image the layout describes (target/layout.py);
         i64 inputs the lowering narrowed to i32 are converted as the runtime does
Inputs and the level runners are those of `infer.passes.testing`
(`random_inputs`, `run_entry`), which `check_pass_preserves_semantics` uses.

Tolerances: what a stage may change depends on what it claims.
  exact     (default) bit-identical results (NaN equals NaN; -0.0 differs from 0.0):
            every graph-level rewrite, fusion, memory planning, tile -> npu (the tile
            interpreter is bit-identical to the simulator)
  rounding  fp32 results reassociated (batch-norm folding): max |after - before| <=
            rounding-tol x the scale of the results before the stage (the larger of their
            range and their largest magnitude)
  lowering  graph -> tile at the pass's `precision`, the criteria of test/unit/e2e:
            fp32 (3-pass bf16 products) max |after - before| <= fp32-tol x scale;
            bf16 cosine similarity >= bf16-cosine per output
A pass declares its claim with a class attribute `numerics = "exact" | "rounding" |
"lowering"`; `PASS_NUMERICS` holds the claims of infer's own passes that are not
exact, and a stage that turns a graph function into a tile function is a lowering
whatever it declares. Integer and boolean results are always compared exactly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.traits import SymbolTable

from infer.dialects.ir_io import IRError, describe_location, first_line
from infer.tools.npz_files import NpzReadError, read_npz
from infer.tools.opt_pipeline import Instrumentation, Stage, TimePasses

GRAPH, TILE, NPU = "graph", "tile", "npu"
RUNNERS = {GRAPH: "the graph interpreter", TILE: "the tile interpreter", NPU: "the simulator"}
CLAIMS = ("exact", "rounding", "lowering")
# Results whose magnitudes are all below this on both sides agree under the inexact claims: a
# bf16 product flushes what fp32 still holds as a subnormal (e^-100 after a softmax).
TINY = 1e-30

# Claims of infer's passes that are not bit-exact (every other pass is held to bit-exact).
PASS_NUMERICS: dict[str, str] = {
    "graph-fold-batch-norm": "rounding",  # scale/shift folded into the weights: fp32 reassociation
    "graph-raise-activations": "rounding",  # a GELU formula's five rounded steps as one function
    "graph-raise-linear": "rounding",  # the bias joins the sum first
    "graph-merge-summed-convs": "rounding",  # two convs' sums as one, the biases summed first
    "graph-raise-rms-norm": "rounding",  # the norm's steps as one function
    "graph-raise-rotary": "rounding",  # the rotation's products and sum as one function
    "graph-raise-attention": "rounding",  # the scale applied once; fully masked rows give zeros
    "graph-to-tile": "lowering",
}


class NumericCheckError(IRError):
    """A stage changed what the module computes beyond its tolerance, or the module
    cannot be run at its level (before the first stage or after a stage)."""


@dataclass(frozen=True)
class NumericOptions:
    seed: int = 0
    inputs_file: str | None = None
    entry: str | None = None
    rounding_tol: float = 1e-5
    fp32_tol: float = 1e-3
    bf16_cosine: float = 0.999


@dataclass(frozen=True)
class Mismatch:
    output: int
    index: tuple[int, ...]
    before: float
    after: float
    error: str        # "abs error 0.25 (0.012 of the output scale 20)"
    tolerance: str    # "bit-exact", "abs error <= 0.001 x scale (fp32 lowering)", ...
    detail: str = ""  # e.g. "3 of 40 elements differ", "cosine 0.98"


# --------------------------------------------------------------------------- levels

def level_of(module: ModuleOp, entry: str) -> str:
    from infer.dialects.npu import ProgramOp
    from infer.dialects.tile_interpreter import is_tile_function
    from infer.dialects.npu_attrs import LAYOUT_ATTR

    fn = SymbolTable.lookup_symbol(module, entry)
    if isinstance(fn, func.FuncOp):
        return TILE if is_tile_function(fn) else GRAPH
    if LAYOUT_ATTR in module.attributes and any(isinstance(op, ProgramOp) for op in module.ops):
        return NPU
    raise NumericCheckError(f"error: --verify-each-numerically: the module has no function @{entry} "
                            "and no npu.program with an npu.layout to run")


def _narrow(name: str, a: np.ndarray, want: np.dtype) -> np.ndarray:
    """An input as the lower level holds it: i64 narrowed to i32 (as `Executable.run`)."""
    if a.dtype == want:
        return a
    if a.dtype == np.int64 and want == np.int32:
        info = np.iinfo(np.int32)
        if a.size and (a.min() < info.min or a.max() > info.max):
            raise NumericCheckError(f"error: --verify-each-numerically: input '{name}' has int64 values "
                                    "outside the int32 range the lowered program holds it in")
        return a.astype(np.int32)
    raise NumericCheckError(f"error: --verify-each-numerically: input '{name}' is {a.dtype} but the "
                            f"lowered module takes {want}")


def _tile_inputs(module: ModuleOp, entry: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    from infer.dialects.dtypes import to_numpy_dtype
    from infer.dialects.tile_interpreter import output_arguments

    fn = SymbolTable.lookup_symbol(module, entry)
    assert isinstance(fn, func.FuncOp)
    outs = set(output_arguments(fn))
    types = [t for i, t in enumerate(fn.function_type.inputs.data) if i not in outs]
    if len(types) != len(inputs):
        raise NumericCheckError(f"error: --verify-each-numerically: @{entry} takes {len(types)} inputs at the "
                                f"tile level, {len(inputs)} before")
    return [_narrow(f"#{i}", a, to_numpy_dtype(t.get_element_type()))  # type: ignore[attr-defined]
            for i, (a, t) in enumerate(zip(inputs, types, strict=True))]


def _run_npu(module: ModuleOp, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    from infer.dialects.npu import ProgramOp
    from infer.dialects.weights import weights_of
    from infer.dialects.npu_attrs import layout_from_module
    from infer.target.sim import Simulator

    layout = layout_from_module(module)
    program = next(op for op in module.ops if isinstance(op, ProgramOp)).to_program()
    if len(layout.inputs) != len(inputs):
        raise NumericCheckError(f"error: --verify-each-numerically: the npu program takes {len(layout.inputs)} "
                                f"inputs, the module before it {len(inputs)}")
    arrays = [_narrow(r.name, np.asarray(a), r.np_dtype) for r, a in zip(layout.inputs, inputs, strict=True)]
    dram = layout.dram_image(arrays, weights_of(module) if layout.weights else None)
    Simulator(layout.target).run(program, dram, trace=False, check_races=True)
    return layout.read_outputs(dram)


def run_level(module: ModuleOp, entry: str, inputs: Sequence[np.ndarray]) -> tuple[str, list[np.ndarray]]:
    """(level, outputs) of `entry` on the interpreter (or simulator) of the module's level."""
    from infer.dialects.weights import weights_of
    from infer.passes.testing import run_entry

    level = level_of(module, entry)
    if level == NPU:
        return level, _run_npu(module, inputs)
    if level == TILE:
        inputs = _tile_inputs(module, entry, inputs)
    return level, run_entry(module, inputs, entry, weights_of(module))


# --------------------------------------------------------------------------- comparison

def _worst(diff: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape)) if diff.size else ()


def compare(before: np.ndarray, after: np.ndarray, claim: str, precision: str,
            opts: NumericOptions) -> Mismatch | None:
    """None if `after` is within the tolerance of `claim` of `before` (same shape assumed)."""
    exact = claim == "exact" or before.dtype.kind in "biu" or after.dtype.kind in "biu"
    b = before.astype(np.float64)
    a = after.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    same = (a == b) | both_nan
    with np.errstate(invalid="ignore"):  # inf - inf where both sides overflowed alike
        diff = np.where(same, 0.0, np.abs(a - b))
    diff = np.where(np.isnan(diff), np.inf, diff)  # NaN on one side only: the worst there is
    if exact:
        differs = ~same | (np.signbit(a) != np.signbit(b)) & ~both_nan
        if not differs.any():
            return None
        idx = _worst(np.where(differs, diff + 1.0, 0.0))
        return Mismatch(0, idx, float(b[idx]), float(a[idx]), f"abs error {diff[idx]:.3g}", "bit-exact",
                        f"{int(differs.sum())} of {differs.size} elements differ")
    finite = b[np.isfinite(b)]
    # e2e's criterion is relative to the output range; an output offset far from zero (or
    # a single value) is measured against its magnitude instead, as fp32's own rounding is
    span = max(float(finite.max() - finite.min()), float(np.abs(finite).max())) if finite.size else 0.0
    span = span or 1.0
    if np.isfinite(diff).all() and max(float(np.abs(a).max(initial=0.0)), float(np.abs(b).max(initial=0.0))) < TINY:
        return None  # all below TINY on both sides: no relative criterion means anything there
    idx = _worst(diff)
    err = float(diff[idx]) if diff.size else 0.0
    error = f"abs error {err:.3g} ({err / span:.3g} of the output scale {span:.3g})"
    if claim == "lowering" and precision == "bf16":
        # common infinities and NaNs left out (equal finite values stay: a softmax's one-hot rows
        # equal at their 1.0 and apart only in ~1e-41 tails had a cosine of 0, fuzz seed 278)
        common = same & ~(np.isfinite(a) & np.isfinite(b))
        fa, fb = np.where(common, 0.0, a), np.where(common, 0.0, b)
        na, nb = float(np.linalg.norm(fa)), float(np.linalg.norm(fb))
        if not np.isfinite(diff).all():
            cos = float("nan")
        elif na == 0.0 and nb == 0.0:
            cos = 1.0
        else:
            cos = float(fa.ravel() @ fb.ravel()) / (na * nb + 1e-30)
        if cos >= opts.bf16_cosine:
            return None
        return Mismatch(0, idx, float(b[idx]), float(a[idx]), error,
                        f"cosine >= {opts.bf16_cosine:g} (bf16 lowering)", f"cosine {cos:.9f}")
    tol = opts.fp32_tol if claim == "lowering" else opts.rounding_tol
    if err <= tol * span:
        return None
    what = f"{precision} lowering" if claim == "lowering" else "fp32 rounding"
    return Mismatch(0, idx, float(b[idx]), float(a[idx]), error, f"abs error <= {tol:g} x scale ({what})")


def claim_of(stage: Stage, level_before: str, level_after: str) -> str:
    if level_before == GRAPH and level_after != GRAPH:
        return "lowering"
    declared = getattr(type(stage.pass_), "numerics", None)
    if isinstance(declared, str) and declared in CLAIMS:
        return declared
    return PASS_NUMERICS.get(stage.name, "exact")


# --------------------------------------------------------------------------- the instrumentation

def _fmt(x: float) -> str:
    return f"{x:.9g}"


def _fmt_index(idx: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, idx)) + "]"


class VerifyEachNumerically(Instrumentation):
    """Runs the module before the first stage and after every stage; raises
    `NumericCheckError` after the first stage that changed the results beyond its
    tolerance (run_stages reports it as that stage's failure)."""

    def __init__(self, options: NumericOptions, timer: TimePasses | None = None):
        self.opts = options
        self.timer = timer  # --time-passes: the runs are reported as one row, "verify-numerics"
        self.entry = "main"
        self.inputs: list[np.ndarray] = []
        self.outputs: list[np.ndarray] = []
        self.level = GRAPH
        self.names: list[str] = []
        self.where = "<unknown location>"  # the entry function, as the module was before the stage
        self.producers: list[str] = []     # per output: its defining op's location (graph level)

    # ---------------------------------------------------------------- setup
    def _entry_of(self, module: ModuleOp) -> str:
        """--verify-numerics-entry, else @main, else the module's only function."""
        if self.opts.entry:
            return self.opts.entry
        names = [op.sym_name.data for op in module.ops if isinstance(op, func.FuncOp) and not op.is_declaration]
        return names[0] if len(names) == 1 and "main" not in names else "main"

    def _inputs(self, module: ModuleOp) -> list[np.ndarray]:
        from infer.passes.testing import random_inputs

        if self.opts.inputs_file is None:
            return random_inputs(module, self.opts.seed, self.entry)
        fn = SymbolTable.lookup_symbol(module, self.entry)
        assert isinstance(fn, func.FuncOp)
        names = _arg_names(fn)
        path = self.opts.inputs_file
        try:
            given = read_npz(path)
        except NpzReadError as e:
            raise NumericCheckError(f"error: --verify-numerics-inputs: cannot read {path} as .npz: {e}") from None
        missing = [n for n in names if n not in given]
        if missing:
            raise NumericCheckError(f"error: --verify-numerics-inputs: {path} lacks input(s) {', '.join(missing)} "
                                    f"(@{self.entry} takes {', '.join(names) or 'none'})")
        return [given[n] for n in names]

    def _start(self, module: ModuleOp) -> None:
        from infer.dialects.graph_interpreter import InterpreterError

        self.entry = self._entry_of(module)
        if not isinstance(SymbolTable.lookup_symbol(module, self.entry), func.FuncOp):
            raise NumericCheckError(f"error: --verify-each-numerically: the module has no function @{self.entry} "
                                    "to run (--verify-numerics-entry names it)")
        try:
            self.inputs = self._inputs(module)
            self.level, self.outputs = run_level(module, self.entry, self.inputs)
        except InterpreterError as e:
            hint = "" if self.opts.inputs_file else " (--verify-numerics-inputs gives inputs it can run on)"
            raise NumericCheckError(f"error: --verify-each-numerically: cannot run @{self.entry} before the first "
                                    f"pass: {first_line(str(e))}{hint}") from None

    def _remember_locations(self, module: ModuleOp) -> None:
        fn = SymbolTable.lookup_symbol(module, self.entry)
        if isinstance(fn, func.FuncOp):
            self.where = describe_location(fn)
            self.names = _result_names(fn)
            ret = fn.body.block.last_op
            self.producers = []
            if isinstance(ret, func.ReturnOp) and self.level == GRAPH:
                for v in ret.operands:
                    owner = v.owner
                    self.producers.append(describe_location(owner) if isinstance(owner, Operation) else self.where)

    # ---------------------------------------------------------------- hooks
    def before_pass(self, stage: Stage, module: ModuleOp) -> None:
        start = time.perf_counter()
        try:
            if stage.index == 0:
                self._start(module)
            self._remember_locations(module)
        finally:
            self._count(start)

    def after_pass(self, stage: Stage, module: ModuleOp) -> None:
        start = time.perf_counter()
        try:
            self._check(stage, module)
        finally:
            self._count(start)

    def _count(self, start: float) -> None:
        if self.timer is not None:
            self.timer.add("verify-numerics", time.perf_counter() - start)

    def _check(self, stage: Stage, module: ModuleOp) -> None:
        try:
            level, outputs = run_level(module, self.entry, self.inputs)
        except NumericCheckError:
            raise
        except Exception as e:  # interpreter errors, simulator faults (races included), bad layouts
            what = f"{type(e).__name__}: " if type(e).__name__ not in ("InterpreterError", "SimFault") else ""
            raise NumericCheckError(
                f"{_at(self.where)}error: --verify-each-numerically: after {stage.label()}, @{self.entry} cannot run on "
                f"{RUNNERS[level_of(module, self.entry)]}: {what}{first_line(str(e))}") from None
        claim = claim_of(stage, self.level, level)
        precision = str(getattr(stage.pass_, "precision", "fp32"))
        if len(outputs) != len(self.outputs):
            self._fail(stage, level, f"@{self.entry} has {len(outputs)} outputs after it, {len(self.outputs)} before")
        for i, (b, a) in enumerate(zip(self.outputs, outputs, strict=True)):
            if a.shape != b.shape:
                self._fail(stage, level, f"output #{i}{self._name(i)} is {a.dtype} {list(a.shape)} after it, "
                                         f"{b.dtype} {list(b.shape)} before")
            m = compare(b, a, claim, precision, self.opts)
            if m is not None:
                self._fail(stage, level, self._describe(i, m), where=self._producer(i))
        self.level, self.outputs = level, outputs

    # ---------------------------------------------------------------- reporting
    def _name(self, i: int) -> str:
        return f" '{self.names[i]}'" if i < len(self.names) else ""

    def _producer(self, i: int) -> str:
        return self.producers[i] if i < len(self.producers) else self.where

    def _describe(self, i: int, m: Mismatch) -> str:
        detail = f"; {m.detail}" if m.detail else ""
        return (f"output #{i}{self._name(i)} at {_fmt_index(m.index)} is {_fmt(m.after)} after it and "
                f"{_fmt(m.before)} before ({m.error}; tolerance: {m.tolerance}{detail})")

    def _fail(self, stage: Stage, level: str, what: str, where: str | None = None) -> None:
        inputs = (f"the inputs of {self.opts.inputs_file}" if self.opts.inputs_file
                  else f"random inputs of seed {self.opts.seed}")
        note = (f"note: on {inputs}; before the pass @{self.entry} ran on {RUNNERS[self.level]}, "
                f"after it on {RUNNERS[level]}")
        raise NumericCheckError(f"{_at(where or self.where)}error: --verify-each-numerically: {stage.label()} changed "
                                f"the results: {what}\n{note}")


def _at(location: str) -> str:
    return "" if location.startswith("<unknown") else f"{location}: "


def _arg_names(fn: func.FuncOp) -> list[str]:
    attrs = fn.arg_attrs.data if fn.arg_attrs is not None else [None] * len(fn.args)
    out = []
    for i, a in enumerate(attrs):
        name = a.data.get("graph.name") if a is not None else None
        out.append(name.data if isinstance(name, StringAttr) else f"arg{i}")
    return out


def _result_names(fn: func.FuncOp) -> list[str]:
    from infer.dialects.tile_interpreter import output_arguments

    outs = output_arguments(fn)
    if outs:
        names = _arg_names(fn)
        return [names[i] for i in outs]
    if fn.res_attrs is None:
        return []
    out = []
    for i, a in enumerate(fn.res_attrs.data):
        name = a.data.get("graph.name")
        out.append(name.data if isinstance(name, StringAttr) else f"output{i}")
    return out
