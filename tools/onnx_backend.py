"""ONNX backend API over the whole compiler and the simulator.

    from infer.tools.onnx_backend import NpuBackend
    outputs = NpuBackend.run_model(model, [x])                 # target "edge"
    rep = NpuBackend.prepare(model, target="server")           # or INFER_TARGET=server

`prepare` imports the model like `ReferenceBackend` (shape-specialising imports
when input shapes or shape-defining inputs are only known at `run`), and each
imported module is compiled with the compile driver (tools/driver.py, the
`compile-npu` pipeline) and run on the instruction-set simulator. Compiled
executables are cached per specialisation.

It drives the compiler (it is the "compile and run" backend), so it lives in
tools/ next to the driver; its expected failures on the ONNX node tests are
listed beside it in npu_xfail.json (`python -m infer.tools.onnx_xfail --backend npu`).
"""

from __future__ import annotations

import os
from typing import Any

import onnx

from infer.frontend.onnx_backend import ReferenceBackend, ReferenceBackendRep

__all__ = ["NpuBackend", "NpuBackendRep"]


def default_target() -> str:
    return os.environ.get("INFER_TARGET") or "edge"


class NpuBackendRep(ReferenceBackendRep):
    """A prepared model: imports like the reference backend, then compiles and runs on the simulator."""

    def __init__(self, model: onnx.ModelProto, module=None, target: str | None = None, precision: str = "fp32"):
        super().__init__(model, module)
        self.target = target or default_target()
        self.precision = precision
        self._compiled: dict[int, Any] = {}
        self.last_executable = None

    def _executable(self, module):
        from infer.tools.driver import compile as compile_model

        key = id(module)
        exe = self._compiled.get(key)
        if exe is None:
            exe = compile_model(module, target=self.target, precision=self.precision)
            self._compiled = {k: v for k, v in self._compiled.items()
                              if k in {id(m) for *_, m in self._specialised} or k == id(self.module)}
            self._compiled[key] = exe
        return exe

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        arrays = self.input_arrays(inputs)
        module = self._module_for(arrays)
        exe = self._executable(module)
        self.last_executable = exe
        # inputs the import turned into constants are not runtime arguments any more
        by_name = dict(zip(self.input_names, arrays, strict=True))
        runtime_args = [by_name[n] if n in by_name else arrays[i] for i, n in enumerate(exe.input_names)]
        return tuple(exe.run(runtime_args))


class NpuBackend(ReferenceBackend):
    """import + compile-npu + the instruction-set simulator, on the "CPU" device."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto | str | bytes, device: str = "CPU", **kwargs: Any) -> NpuBackendRep:
        rep = super().prepare(model, device)
        return NpuBackendRep(rep.model, rep.module, target=kwargs.get("target"),
                             precision=kwargs.get("precision", "fp32"))
