"""infer: a multi-level inference compiler (graph -> tile -> npu) on xDSL.

    import infer
    m = infer.import_model("model.onnx")   # graph-level IR + weights
    outputs = m.run(inputs)                 # reference interpreter
"""

from infer.frontend import Model, ModelImportError, import_model

__all__ = ["Model", "ModelImportError", "import_model"]
__version__ = "0.1.0"
