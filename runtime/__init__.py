"""infer.runtime: the `.npu` artifact and the runtime that runs it on the simulator.

    from infer.runtime import Artifact, Executable, load
    exe = load("model.npu"); outs = exe.run([x]); print(exe.last_report.summary())
    sess = DeviceSession(exe.artifact)         # several entry points, one DRAM, resident buffers
    outs = sess.run("decode", {...})
    rep = exe.check([x]); print(rep.table())   # per-layer comparison with the reference

Imports only infer.target (+ numpy): a compiled artifact runs without the
compiler (dialects/, passes/, frontend/, tools/ are never imported here). The
per-layer check's reference interpreter is compiler code: an Executable checks
with the `CheckReference` it was given (`infer.load` and `infer.compile` give one;
`infer.runtime.load` does not, and `check` then raises `NoReferenceError`).
"""

from infer.runtime.artifact import Artifact, ArtifactError, EntryPoint, TensorSpec
from infer.runtime.check import CheckReference, CheckReport, Comparison, LayerCheck, NoReferenceError
from infer.runtime.executable import Executable, RunError, load
from infer.runtime.report import Report
from infer.runtime.session import DeviceSession, SessionError

__all__ = ["Artifact", "ArtifactError", "CheckReference", "CheckReport", "Comparison", "DeviceSession", "EntryPoint",
           "Executable", "LayerCheck", "NoReferenceError", "Report", "RunError", "SessionError", "TensorSpec", "load"]
