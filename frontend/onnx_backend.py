"""ONNX backend API over the graph-level reference interpreter.

    from infer.frontend.onnx_backend import ReferenceBackend
    outputs = ReferenceBackend.run_model(model, [x])

`prepare` imports the model (`infer.frontend.onnx_import.import_onnx`) and the
returned rep runs it on `infer.dialects.graph_interpreter.run_module`.

The graph dialect is statically shaped, so a model whose input shapes are not
all static, or that feeds a value the import needs as an attribute (a Reshape
target shape, Slice starts, Pad pads, ...) from a graph input, is imported when
`run` sees the inputs: with those shapes, and with exactly those input values
that must be static (data inputs stay runtime arguments). Such imports are
cached by input shapes/dtypes and the values used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType
from xdsl.dialects.builtin import ModuleOp

from infer.frontend.model import ModelImportError
from infer.frontend.onnx_import import StaticInputNeeded, import_onnx

__all__ = ["ReferenceBackend", "ReferenceBackendRep"]

_MAX_SPECIALISATIONS = 8


def _runtime_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer} | {t.values.name for t in model.graph.sparse_initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _static_shape(vi: onnx.ValueInfoProto) -> bool:
    t = vi.type
    if t.WhichOneof("value") != "tensor_type":
        return True  # not a tensor: let the import say so at once
    if not t.tensor_type.HasField("shape"):
        return False
    return all(d.HasField("dim_value") for d in t.tensor_type.shape.dim)


class ReferenceBackendRep(BackendRep):
    """A prepared model: the imported module (or the recipe to import it once
    the inputs are known) and the reference interpreter to run it."""

    def __init__(self, model: onnx.ModelProto, module: ModuleOp | None = None):
        self.model = model
        self.input_names = [vi.name for vi in _runtime_inputs(model)]
        self.module = module
        # (shape/dtype key, {static input: value}, module)
        self._specialised: list[tuple[tuple, dict[str, np.ndarray], ModuleOp]] = []

    def _module_for(self, arrays: list[np.ndarray]) -> ModuleOp:
        if self.module is not None:
            return self.module
        key = tuple((a.shape, a.dtype.str) for a in arrays)
        by_name = dict(zip(self.input_names, arrays))
        for k, values, module in self._specialised:
            if k == key and all(np.array_equal(by_name[n], v) for n, v in values.items()):
                return module
        shapes = {n: tuple(a.shape) for n, a in by_name.items()}
        static: dict[str, np.ndarray] = {}
        used: set[str] = set()
        for _ in range(len(arrays) + 1):
            try:
                module = import_onnx(self.model, input_shapes=shapes, static_inputs=static, _used_static_inputs=used)
                break
            except StaticInputNeeded as e:
                if e.input_name in static or e.input_name not in by_name:
                    raise
                static[e.input_name] = by_name[e.input_name]
        else:  # pragma: no cover - each retry adds one input
            raise ModelImportError("the import kept asking for input values")
        self._specialised.append((key, {n: by_name[n].copy() for n in used}, module))
        del self._specialised[:-_MAX_SPECIALISATIONS]
        return module

    def input_arrays(self, inputs: Any) -> list[np.ndarray]:
        """The run's inputs in signature order (a mapping by name, one array, or a sequence)."""
        if isinstance(inputs, Mapping):
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise ValueError(f"missing input(s) {', '.join(missing)} (inputs: {', '.join(self.input_names)})")
            arrays = [np.asarray(inputs[n]) for n in self.input_names]
        elif isinstance(inputs, np.ndarray) and len(self.input_names) == 1:
            arrays = [inputs]
        else:
            arrays = [np.asarray(a) for a in inputs]
        if len(arrays) != len(self.input_names):
            raise ValueError(
                f"expected {len(self.input_names)} input(s) ({', '.join(self.input_names)}), got {len(arrays)}"
            )
        return arrays

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        from infer.dialects.graph_interpreter import run_module

        arrays = self.input_arrays(inputs)
        module = self._module_for(arrays)
        return tuple(run_module(module, arrays))


class ReferenceBackend(Backend):
    """import_onnx + the graph-level reference interpreter, on the CPU."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto | str | bytes, device: str = "CPU", **kwargs: Any) -> ReferenceBackendRep:
        if not cls.supports_device(device):
            raise ValueError(f"device {device!r} is not supported (CPU only)")
        if isinstance(model, bytes):
            model = onnx.load_model_from_string(model)
        elif isinstance(model, str):
            model = onnx.load(model)
        module = None
        if all(_static_shape(vi) for vi in _runtime_inputs(model)):
            try:
                module = import_onnx(model)
            except StaticInputNeeded:
                module = None  # imported by run() once the values are known
        return ReferenceBackendRep(model, module)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run one node: wrap it in a model with the inputs' types and shapes."""
        from onnx import helper

        arrays = [np.asarray(a) for a in (inputs.values() if isinstance(inputs, Mapping) else inputs)]
        names = [n for n in node.input if n]
        vi_in = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in zip(names, arrays)]
        if outputs_info is not None:
            vi_out = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape) for o, (dt, shape) in zip(node.output, outputs_info)]
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        if outputs_info is None:
            schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
            types = {vi.name: vi.type for vi in vi_in}
            inferred = onnx.shape_inference.infer_node_outputs(schema, node, types)
            vi_out = [helper.make_value_info(o, inferred[o]) for o in node.output if o]
        model = helper.make_model(helper.make_graph([node], "node", vi_in, vi_out), opset_imports=[helper.make_opsetid(node.domain or "", opset)])
        return cls.run_model(model, arrays, device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            return Device(device).type == DeviceType.CPU
        except Exception:
            return False
