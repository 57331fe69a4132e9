"""infer: a multi-level inference compiler (graph -> tile -> npu) on xDSL.

    import infer
    m = infer.import_model("model.onnx")   # graph-level IR + weights
    outputs = m.run(inputs)                 # reference interpreter
    exe = infer.compile(m, target="edge")   # the whole pipeline -> Executable (an artifact)
    outs = exe.run(inputs); exe.save("m.npu"); exe = infer.load("m.npu")
    table = infer.calibrate(m, "calib.npz")              # int8: activation ranges (JSON table)
    qm, report = infer.quantize(m, "calib.npz", min_cosine=0.99)   # int8 model + per-layer report
    gen = infer.Generator("model.gguf")     # text generation (reference interpreter by default)
    for piece in gen.generate("Hi!"): print(piece.text, end="")
    m = infer.import_model("model.gguf", kv_cache="paged")          # @prefill_chunk + @decode
    gen = infer.Generator(m, executor=infer.DeviceExecutor(infer.compile(m, target="server")))

Names are imported lazily, so `import infer.runtime` (running an artifact) does
not load the compiler. `infer.compile` and `infer.load` are the compile driver's
(tools/driver.py): their Executables can also `check` against the reference
interpreter; `infer.runtime.load` gives one that only runs.
"""

from typing import Any

__all__ = [
    "DeviceExecutor", "Generator", "Model", "ModelImportError", "calibrate", "compile", "import_model", "load", "quantize",
]
__version__ = "0.1.0"

_LAZY = {
    "Model": ("infer.frontend", "Model"),
    "ModelImportError": ("infer.frontend", "ModelImportError"),
    "import_model": ("infer.frontend", "import_model"),
    "compile": ("infer.tools.driver", "compile"),
    "load": ("infer.tools.driver", "load"),
    "calibrate": ("infer.tools.quantize", "calibrate"),
    "quantize": ("infer.tools.quantize", "quantize"),
    "Generator": ("infer.generation", "Generator"),
    "DeviceExecutor": ("infer.generation", "DeviceExecutor"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'infer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
