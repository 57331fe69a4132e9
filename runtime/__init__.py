"""infer.runtime: the `.npu` artifact and the runtime that runs it on the simulator.

    from infer.runtime import Artifact, Executable, load
    exe = load("model.npu"); outs = exe.run([x]); print(exe.last_report.summary())
    rep = exe.check([x]); print(rep.table())   # per-layer comparison with the reference

Imports only infer.target (+ numpy): a compiled artifact runs without the
compiler (passes/, frontend/ are never imported here).
"""

from infer.runtime.artifact import Artifact, ArtifactError, TensorSpec
from infer.runtime.check import CheckReport, Comparison, LayerCheck
from infer.runtime.executable import Executable, RunError, load
from infer.runtime.report import Report

__all__ = ["Artifact", "ArtifactError", "CheckReport", "Comparison", "Executable", "LayerCheck", "Report", "RunError",
           "TensorSpec", "load"]
