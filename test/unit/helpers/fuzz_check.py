"""One differential run: a generated model on the reference interpreter vs compiled for a
hardware config and run on the simulator (with its race checker), and what came of it.

Outcomes (`Outcome.kind`):
  passed       the outputs agree within the e2e criteria (test/unit/e2e: fp32 max error
               <= 1e-3 of the output range, bf16 cosine >= 0.999; the same check as
               `infer-opt --verify-each-numerically` across lowering), or, for a model that
               is ill-conditioned (a sum that cancels, ...), within CONDITIONING times what
               its reference moves when its float inputs, weights and floats cast from integer
               inputs are perturbed by the precision's relative error (`detail` says so)
  unsupported  the compiler refused the model with a clean, located error (an `IRError`,
               e.g. graph-to-tile's LoweringError): counted, not a finding, unless the error
               says it is the compiler's own bug (COMPILER_BUG_REFUSALS): then a crash
  degenerate   the reference itself has NaN/inf: nothing to compare
  mismatch     a wrong number (finding)
  crash        anything else: an internal error while compiling, a simulator fault or data
               race, the reference interpreter failing on a model the verifier accepted, a
               wrong output count or shape (finding)
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import ModuleOp

import infer
from infer.dialects.graph_interpreter import InterpreterError, run_module
from infer.dialects.ir_io import IRError
from infer.tools.opt_numerics import NumericOptions, compare

from helpers.fuzz_graphs import FuzzGraph, build, make_inputs

FINDINGS = ("mismatch", "crash")
# Clean refusals whose message says the compiler is at fault, not the model: findings. ("cannot
# encode": tile-to-npu made an instruction the ISA cannot hold, such as a DMA of an empty box.)
COMPILER_BUG_REFUSALS = re.compile(r"cost-model bug|cannot encode")


@dataclass
class Outcome:
    kind: str
    detail: str = ""   # the error or mismatch, one line
    where: str = ""    # compile / run / reference / compare
    outputs: tuple[list[np.ndarray], list[np.ndarray]] | None = field(default=None, repr=False)

    @property
    def finding(self) -> bool:
        return self.kind in FINDINGS

    def reason(self) -> str:
        """The detail without locations and numbers: groups refusals and findings."""
        text = re.sub(r"^\S+:\d+:\d+: ", "", self.detail)
        text = re.sub(r"<unknown location>: ", "", text)
        text = re.sub(r"\[[^\]]*\]|\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
        return f"{self.where}: {text[:150]}"


def _one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"


# Relative error of one matrix product: fp32 as three bf16 passes drops lo*lo (2^-16), bf16
# rounds both operands (2^-8). Perturbing a model's inputs and weights by it shows how much
# its outputs move from rounding alone: the compiled result may differ by CONDITIONING times that.
PRODUCT_ERROR = {"fp32": 2.0**-16, "bf16": 2.0**-8}
CONDITIONING = 10.0


def run_case(fg: FuzzGraph, target: str, precision: str) -> Outcome:
    outcome = run_module_case(build(fg), make_inputs(fg), target, precision, keep_outputs=True)
    if outcome.kind != "mismatch" or outcome.outputs is None:
        return outcome
    # ill-conditioned? how far does the reference move when the data moves by the rounding error
    delta = PRODUCT_ERROR[precision]
    try:
        moved = run_module(build(fg, perturb=delta), make_inputs(fg, perturb=delta))
    except InterpreterError:
        return outcome
    refs, ys = outcome.outputs
    for y, r, m in zip(ys, refs, moved, strict=True):
        sensitivity = float(np.abs(np.asarray(m, np.float64) - np.asarray(r, np.float64)).max(initial=0.0))
        err = float(np.abs(np.asarray(y, np.float64) - np.asarray(r, np.float64)).max(initial=0.0))
        if not err <= CONDITIONING * sensitivity:
            return outcome
    return Outcome("passed", f"ill-conditioned: {outcome.detail}; within {CONDITIONING:g}x the reference's "
                             f"own movement under {delta:.2g} relative perturbations", "compare")


def run_module_case(module: ModuleOp, inputs: list[np.ndarray], target: str, precision: str,
                    keep_outputs: bool = False) -> Outcome:
    """The differential run of a graph-level module (not modified) on `inputs`;
    `keep_outputs`: a mismatch keeps (references, simulator outputs) in `outputs`."""
    try:
        refs = run_module(module, inputs)
    except InterpreterError as e:
        return Outcome("crash", _one_line(e), "reference")
    if not all(np.isfinite(np.asarray(r, np.float64)).all() for r in refs):
        return Outcome("degenerate", "the reference has NaN/inf", "reference")
    try:
        exe = infer.compile(module, target=target, precision=precision)
    except IRError as e:
        first = str(e).strip().splitlines()[0]
        return Outcome("crash" if COMPILER_BUG_REFUSALS.search(first) else "unsupported", first, "compile")
    except Exception as e:  # an internal compiler error is a finding
        return Outcome("crash", f"{_one_line(e)} (raised at {_last_frame(e)})", "compile")
    try:
        ys = exe.run(inputs, check_races=True, trace=False)
    except Exception as e:  # simulator faults and races (RunError) included
        return Outcome("crash", _one_line(e), "run")
    if len(ys) != len(refs):
        return Outcome("crash", f"{len(ys)} outputs, the reference has {len(refs)}", "run")
    # the fast mode, then a replay of its recorded run (target/sim_replay.py), which converts
    # the constant weights it keeps, then one with those conversions and without the DMAs only
    # they read (target/sim_constants.py): the reference engine's bits
    for mode in ("fast", "replayed fast", "kept-weights fast"):
        try:
            fast = exe.run(inputs, check_races=False, trace=False)
        except Exception as e:
            return Outcome("crash", f"{mode} mode: {_one_line(e)}", "run")
        if [y.tobytes() for y in fast] != [y.tobytes() for y in ys]:
            return Outcome("mismatch", f"the {mode} mode's outputs differ from the reference "
                                       "engine's", "run")
    for i, (y, r) in enumerate(zip(ys, refs, strict=True)):
        if y.shape != r.shape:
            return Outcome("crash", f"output #{i} has shape {y.shape}, the reference {r.shape}", "run")
        m = compare(np.asarray(r), np.asarray(y), "lowering", precision, NumericOptions())
        if m is not None:
            idx = "[" + ", ".join(map(str, m.index)) + "]"
            return Outcome("mismatch", f"output #{i} at {idx}: simulator {m.after:.6g}, reference "
                                       f"{m.before:.6g} ({m.error}; {m.detail or m.tolerance})", "compare",
                           (refs, ys) if keep_outputs else None)
    return Outcome("passed")


def _last_frame(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    return "/".join(f.filename.split("/")[-2:]) + f":{f.lineno}"
