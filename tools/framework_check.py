"""The framework as the judge of `infer run --check --framework MODEL.onnx`.

`--check` compares the simulated run with the graph-level reference interpreter. When the two
disagree on an output, either may be wrong: the compiled program, or the reference interpreter
itself (its numerics on some input may differ from the framework the model comes from). With
`--framework`, onnxruntime runs the original ONNX model on the same inputs and each output the
simulator and the reference disagree on gets a verdict naming the odd one out:

- "reference": the simulator agrees with onnxruntime and the reference interpreter does not, so
  the compiled program is not at fault (the output does not count as a mismatch);
- "simulator": the reference agrees with onnxruntime, the compiled program is wrong;
- "all three": none of the three agree (or the framework gives no such output).

Agreement is the per-output criterion of `--check` (infer.runtime.check.Comparison.ok: cosine
and SQNR). Only whole outputs are judged: the framework's intermediate values have no names the
per-layer table could be matched against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from infer.runtime.check import Comparison, compare


class FrameworkError(Exception):
    """The framework cannot run the model on these inputs."""


@dataclass
class Verdict:
    """One output the simulator and the reference interpreter disagree on."""

    output: str
    simulator: Comparison | None  # the simulator against the framework (None: no such framework output)
    reference: Comparison | None  # the reference interpreter against the framework

    @property
    def odd_one_out(self) -> str:
        sim_ok = self.simulator is not None and self.simulator.ok()
        ref_ok = self.reference is not None and self.reference.ok()
        if sim_ok and not ref_ok:
            return "reference"
        if ref_ok and not sim_ok:
            return "simulator"
        return "all three"

    def line(self) -> str:
        if self.simulator is None or self.reference is None:
            return f"{self.output}: onnxruntime gives no output of this name; cannot judge"
        sim, ref = self.simulator, self.reference
        judged = {
            "reference": "the reference interpreter is the odd one out: the simulator agrees with onnxruntime",
            "simulator": "the compiled program is the odd one out: the reference interpreter agrees with onnxruntime",
            "all three": "simulator, reference interpreter and onnxruntime all disagree",
        }[self.odd_one_out]
        return (f"{self.output}: {judged} (simulator vs onnxruntime: cosine {sim.cosine:.6f}, max abs err "
                f"{sim.max_abs:.3g}; reference vs onnxruntime: cosine {ref.cosine:.6f}, max abs err {ref.max_abs:.3g})")


def onnxruntime_outputs(model: str | Path, input_names: Sequence[str], inputs: Sequence[np.ndarray]
                        ) -> dict[str, np.ndarray]:
    """The ONNX model's outputs by name, run by onnxruntime on the CPU."""
    try:
        import onnxruntime as ort
    except ImportError:  # pragma: no cover - a dev dependency
        raise FrameworkError("--framework needs onnxruntime (pip install onnxruntime)") from None
    path = Path(model)
    if not path.is_file():
        raise FrameworkError(f"{path}: no such file")
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:
        raise FrameworkError(f"{path}: onnxruntime cannot load it: {' '.join(str(e).split())[:300]}") from None
    wanted = [i.name for i in session.get_inputs()]
    given = dict(zip(input_names, inputs, strict=True))
    missing = [n for n in wanted if n not in given]
    if missing:
        raise FrameworkError(f"{path}: the model's input(s) {', '.join(missing)} are not inputs of the artifact "
                             f"({', '.join(input_names)}); is it the model the artifact was compiled from?")
    try:
        values = session.run(None, {n: np.asarray(given[n]) for n in wanted})
    except Exception as e:
        raise FrameworkError(f"{path}: onnxruntime failed on these inputs: {' '.join(str(e).split())[:300]}") from None
    return {o.name: np.asarray(v) for o, v in zip(session.get_outputs(), values, strict=True)}


def judge(names: Sequence[str], simulated: Sequence[np.ndarray], reference: Sequence[np.ndarray],
          framework: dict[str, np.ndarray]) -> list[Verdict]:
    """A verdict for each output where the simulator and the reference interpreter disagree."""
    verdicts = []
    for name, sim, ref in zip(names, simulated, reference, strict=True):
        if compare(name, np.asarray(ref), np.asarray(sim)).ok():
            continue
        fw = framework.get(name)
        if fw is None:
            verdicts.append(Verdict(name, None, None))
            continue
        verdicts.append(Verdict(name, compare(name, fw, np.asarray(sim)), compare(name, fw, np.asarray(ref))))
    return verdicts
