"""infer.frontend: model files and framework objects into the graph dialect.

`import_model` dispatches on what it is given:
- a path ending in .onnx, or an onnx.ModelProto            -> infer.frontend.onnx_import
- a path ending in .pt2, a torch.export.ExportedProgram,
  or a torch.nn.Module with example_inputs                   -> infer.frontend.torch_import
- a Hugging Face folder (config.json + *.safetensors)        -> infer.frontend.hf_import
- a path ending in .gguf (llama.cpp)                         -> infer.frontend.gguf_import
- a path ending in .mlir                                     -> parsed graph IR
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from infer.frontend.model import Model, ModelImportError


def _is_instance_of(obj: Any, module: str, name: str) -> bool:
    """isinstance against a framework class without importing the framework
    (if the caller has such an object, the framework is already imported)."""
    import sys

    mod = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return cls is not None and isinstance(obj, cls)


_ONNX_ONLY_OPTIONS = ("input_shapes", "list_unsupported")


def _reject_onnx_options(kind: str, options: dict[str, Any]) -> None:
    given = [o for o in _ONNX_ONLY_OPTIONS if options.get(o)]
    if given:
        raise ModelImportError(f"option(s) {', '.join(given)} apply to ONNX models only, not to {kind}")
    for o in _ONNX_ONLY_OPTIONS:
        options.pop(o, None)


def import_model(source: Any, example_inputs: Any = None, **options: Any) -> Model:
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if path.is_dir():
            from infer.frontend.hf_import import import_hf_folder

            _reject_onnx_options("a Hugging Face folder", options)
            return Model(import_hf_folder(path, **options), source=path)
        if not path.exists():
            raise ModelImportError(f"{path}: no such file or folder")
        suffix = path.suffix.lower()
        if suffix == ".onnx":
            from infer.frontend.onnx_import import import_onnx

            return Model(import_onnx(path, **options))
        if suffix == ".gguf":
            from infer.frontend.gguf_import import import_gguf

            _reject_onnx_options(".gguf files", options)
            return Model(import_gguf(path, **options), source=path)
        if suffix == ".pt2":
            from infer.frontend.torch_import import import_pt2

            _reject_onnx_options(".pt2 files", options)
            return Model(import_pt2(path, **options))
        if suffix == ".mlir":
            from infer.dialects.ir_io import IRError, load_ir_file

            _reject_onnx_options(".mlir files", options)
            try:
                return Model(load_ir_file(path))
            except IRError as e:
                raise ModelImportError(str(e)) from None
        raise ModelImportError(
            f"{path}: unsupported model format '{suffix}' (supported: .onnx, .pt2, .gguf, .mlir, "
            "or a Hugging Face folder with config.json and *.safetensors)"
        )
    if isinstance(source, Model):
        return source
    if _is_instance_of(source, "onnx", "ModelProto"):
        from infer.frontend.onnx_import import import_onnx

        return Model(import_onnx(source, **options))
    if _is_instance_of(source, "torch.nn", "Module") or _is_instance_of(source, "torch.export", "ExportedProgram"):
        from infer.frontend.torch_import import import_torch

        return Model(import_torch(source, example_inputs, **options))
    raise ModelImportError(
        f"cannot import a {type(source).__name__}: give a path (.onnx, .pt2, .gguf, .mlir, Hugging Face "
        "folder), an onnx.ModelProto, a torch.nn.Module with example_inputs, or an ExportedProgram"
    )


__all__ = ["Model", "ModelImportError", "import_model"]
