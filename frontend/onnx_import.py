"""ONNX -> graph dialect.

    module = import_onnx("model.onnx", input_shapes={"x": (1, 3, 224, 224)})

Steps: load the protobuf without executing anything (external data is read by
us, every location confined to the model's folder); refuse an IR version newer than
the installed onnx reads or a default-domain opset newer than `TARGET_OPSET`;
`onnx.checker`; normalise
to `TARGET_OPSET` with `onnx.version_converter` (falling back to the original
model when the converter cannot); `onnx.shape_inference`; then one pass over
the nodes in order:

- values known at import time (initializers, `Constant`, `Shape` of a static
  tensor, and any node whose inputs are all known) are folded to numpy arrays,
  so shape arithmetic (Shape -> Gather -> Concat -> Reshape, ...) becomes the
  static attributes the graph dialect wants;
- every other node is mapped onto graph ops through `GraphBuilder`, directly or
  by a small decomposition into existing graph ops.

Problems are `ModelImportError`s naming the op type, the node and what is
missing; `list_unsupported=True` collects every problem in the model and raises
one error listing all of them.

Handlers accept every opset form of an op (attributes that became inputs,
Softmax's pre-13 "flatten" semantics, ...), since the version converter is
allowed to fail and leave the model at its own opset.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.utils.exceptions import VerifyException

from infer.dialects import graph as g
from infer.dialects.dtypes import from_numpy_dtype, numpy_dtype_of, shape_of
from infer.frontend.builder import GraphBuilder
from infer.frontend.model import ModelImportError

__all__ = ["import_onnx", "load_onnx_model", "StaticInputNeeded", "TARGET_OPSET", "SUPPORTED_OPS"]

TARGET_OPSET = min(onnx.defs.onnx_opset_version(), 28)
"""The default-domain opset models are converted to before import (when the
version converter can; upgrading almost always works, downgrading often does
not, hence the newest); handlers accept older forms as well."""

# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


class _NodeProblem(Exception):
    """Something about one node cannot be imported (collected per node)."""


class NeedsInputValue(_NodeProblem):
    """A node needs the value of a graph input at import time (a shape, axes, ...).

    The ONNX reference backend catches this and imports again once the input's
    value is known (`static_inputs=`)."""

    def __init__(self, input_name: str, message: str):
        super().__init__(message)
        self.input_name = input_name


class StaticInputNeeded(ModelImportError):
    """The import needs the value of graph input `input_name` (see `static_inputs=`)."""

    def __init__(self, input_name: str, message: str):
        super().__init__(message)
        self.input_name = input_name


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


def _label(source: Any) -> str:
    if isinstance(source, str | os.PathLike):
        return Path(source).name
    name = getattr(getattr(source, "graph", None), "name", "") or "model"
    return f"<ModelProto {name}>"


def load_onnx_model(source: str | os.PathLike[str] | onnx.ModelProto, base_dir: str | os.PathLike[str] | None = None) -> onnx.ModelProto:
    """Parse the model and load its external data, confined to its folder."""
    label = _label(source)
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        folder = Path(base_dir) if base_dir is not None else None
    else:
        path = Path(source)
        if not path.exists():
            raise ModelImportError(f"{path}: no such file")
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as e:  # protobuf DecodeError and friends
            raise ModelImportError(f"{label}: not a valid ONNX model: {_one_line(e)}") from None
        folder = path.resolve().parent
    if not model.HasField("graph"):
        raise ModelImportError(f"{label}: not a valid ONNX model: it has no graph")
    _load_external_data(model, folder, label)
    return model


def _all_tensors(model: onnx.ModelProto):
    from onnx.external_data_helper import _get_all_tensors

    return _get_all_tensors(model)


def _load_external_data(model: onnx.ModelProto, folder: Path | None, label: str) -> None:
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    for tensor in _all_tensors(model):
        if not uses_external_data(tensor):
            continue
        info = ExternalDataInfo(tensor)
        location = info.location or ""
        where = f"{label}: tensor '{tensor.name}' has external data at '{location}'"
        if folder is None:
            raise ModelImportError(
                f"{where}, but the model was given as a ModelProto without base_dir= "
                "(import it from its file instead)"
            )
        loc = Path(location)
        if not location or loc.is_absolute() or loc.drive or location.startswith(("/", "\\")):
            raise ModelImportError(f"{where}: absolute locations are not allowed (it must be inside the model's folder)")
        if ".." in loc.parts:
            raise ModelImportError(f"{where}: the location escapes the model's folder ('..')")
        target = folder / loc
        root = folder.resolve()
        try:
            resolved = target.resolve(strict=True)
        except (FileNotFoundError, RuntimeError, OSError):
            raise ModelImportError(f"{where}: no such file in {folder}") from None
        if not resolved.is_relative_to(root):
            raise ModelImportError(
                f"{where}: it resolves to {resolved}, outside the model's folder (a symlink?)"
            )
        if not resolved.is_file():
            raise ModelImportError(f"{where}: not a regular file")
        size = resolved.stat().st_size
        offset = int(info.offset or 0)
        length = int(info.length) if info.length is not None else size - offset
        if offset < 0 or length < 0 or offset + length > size:
            raise ModelImportError(
                f"{where}: offset {offset} + length {length} exceed the file size {size}"
            )
        with open(resolved, "rb") as f:
            f.seek(offset)
            data = f.read(length)
        tensor.raw_data = data
        tensor.data_location = TensorProto.DEFAULT
        del tensor.external_data[:]


def _default_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 1


def _check_versions(model: onnx.ModelProto, label: str) -> None:
    """A model newer than the importer knows is refused: its ops may mean something the
    handlers (written for opsets up to TARGET_OPSET) do not know about."""
    if model.ir_version > onnx.IR_VERSION:
        raise ModelImportError(
            f"{label}: the model's IR version is {model.ir_version}, newer than this importer "
            f"reads (up to {onnx.IR_VERSION}, onnx {onnx.__version__}); export it with an older "
            "IR version"
        )
    opset = _default_opset(model)
    if opset > TARGET_OPSET:
        raise ModelImportError(
            f"{label}: the model imports the default ONNX domain at opset {opset}, newer than "
            f"this importer knows (opsets 1 to {TARGET_OPSET}); export it for opset {TARGET_OPSET} "
            "or older"
        )


def _normalise(model: onnx.ModelProto, label: str) -> onnx.ModelProto:
    _check_versions(model, label)
    try:
        if model.ByteSize() < 2**31 - 1:
            onnx.checker.check_model(model)
    except Exception as e:
        raise ModelImportError(f"{label}: not a valid ONNX model: {_one_line(e)}") from None
    if _default_opset(model) != TARGET_OPSET and _convertible(model):
        try:
            from onnx import version_converter

            converted = version_converter.convert_version(model, TARGET_OPSET)
            if _default_opset(converted) == TARGET_OPSET:
                model = converted
        except Exception:
            pass  # keep the original opset; handlers accept every form
    return model


def _convertible(model: onnx.ModelProto) -> bool:
    # The converter only knows the default domain; leave anything else alone.
    return all(o.domain in ("", "ai.onnx") for o in model.opset_import) and not model.functions


# --------------------------------------------------------------------------
# dtype helpers
# --------------------------------------------------------------------------


def _np_dtype(elem_type: int, what: str) -> np.dtype:
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        dt = None
    name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)
    if dt is None or elem_type in _UNSUPPORTED_ELEM:
        raise _NodeProblem(f"{what} has element type {name}, which the graph dialect does not support")
    try:
        from_numpy_dtype(dt)
    except ValueError:
        raise _NodeProblem(f"{what} has element type {name}, which the graph dialect does not support") from None
    return dt


_UNSUPPORTED_ELEM = {
    getattr(TensorProto, n)
    for n in (
        "STRING", "COMPLEX64", "COMPLEX128", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
        "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2",
    )
    if hasattr(TensorProto, n)
}


# --------------------------------------------------------------------------
# The importer
# --------------------------------------------------------------------------

Handler = Callable[["_Importer", onnx.NodeProto], Sequence[Any]]


@dataclass
class _OpSpec:
    fn: Handler
    attrs: frozenset[str]
    fold: bool = True


_HANDLERS: dict[str, _OpSpec] = {}

NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial", "If", "Loop", "Scan"}


def _handler(*op_types: str, attrs: Sequence[str] = (), fold: bool = True):
    def register(fn: Handler) -> Handler:
        for t in op_types:
            _HANDLERS[t] = _OpSpec(fn, frozenset(attrs), fold)
        return fn

    return register


@dataclass
class _Problem:
    node: str
    text: str


class _Importer:
    def __init__(
        self,
        model: onnx.ModelProto,
        label: str,
        input_shapes: Mapping[str, Sequence[int]] | None,
        list_unsupported: bool,
        static_inputs: Mapping[str, np.ndarray] | None,
    ):
        self.model = model
        self.graph = model.graph
        self.label = label
        self.opset = _default_opset(model)
        self.input_shapes = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
        self.list_unsupported = list_unsupported
        self.static_inputs = dict(static_inputs or {})
        self.used_static_inputs: set[str] = set()
        self.b = GraphBuilder()
        self.consts: dict[str, np.ndarray] = {}
        self.ssa: dict[str, SSAValue] = {}
        self.poisoned: set[str] = set()
        self.problems: list[_Problem] = []
        self.const_ssa: dict[str, SSAValue] = {}
        self.graph_inputs: dict[str, SSAValue] = {}
        self.node: onnx.NodeProto | None = None

    # -- problems ---------------------------------------------------------
    def _node_label(self, node: onnx.NodeProto) -> str:
        domain = f"{node.domain}:" if node.domain not in ("", "ai.onnx") else ""
        outs = ", ".join(o for o in node.output if o)
        if node.name:
            name = node.name
        else:
            index = next((i for i, n in enumerate(self.graph.node) if n is node), None)
            name = f"#{index} -> {outs}" if index is not None else f"-> {outs}"
        return f"{domain}{node.op_type} node '{name}'"

    def fail(self, where: str, text: str) -> None:
        if not self.list_unsupported:
            raise ModelImportError(f"{self.label}: {where}: {text}")
        self.problems.append(_Problem(where, text))

    # -- values -----------------------------------------------------------
    def has(self, name: str) -> bool:
        return name in self.consts or name in self.ssa

    def is_const(self, name: str) -> bool:
        return name in self.consts

    def value(self, name: str) -> SSAValue:
        """The SSA value of `name` (constants are materialised once)."""
        if name in self.ssa:
            return self.ssa[name]
        if name in self.consts:
            if name not in self.const_ssa:
                self.const_ssa[name] = self.materialise(self.consts[name], name)
            return self.const_ssa[name]
        raise _NodeProblem(f"input '{name}' is not defined")

    def materialise(self, array: np.ndarray, name: str = "const") -> SSAValue:
        """A value known at import time in the IR: a constant, or a weight named after
        `name` when larger than INLINE_CONSTANT_LIMIT elements."""
        return self.b.constant(np.asarray(array), name=_weight_name(name))

    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.consts:
            return tuple(self.consts[name].shape)
        return shape_of(self.ssa[name])

    def dtype(self, name: str) -> np.dtype:
        if name in self.consts:
            return self.consts[name].dtype
        return numpy_dtype_of(self.ssa[name])

    def static(self, name: str, what: str) -> np.ndarray:
        """A value that must be known at import time (shape, axes, pads, ...)."""
        if name in self.consts:
            return self.consts[name]
        if name in self.static_inputs and name in self.graph_inputs:
            self.used_static_inputs.add(name)
            return np.asarray(self.static_inputs[name])
        if name in self.graph_inputs:
            raise NeedsInputValue(name, f"{what} comes from graph input '{name}', but it must be known at import time (make it an initializer)")
        raise _NodeProblem(f"{what} ('{name}') is computed at run time, but it must be known at import time")

    # -- driving ----------------------------------------------------------
    def run(self) -> ModuleOp:
        graph = self.graph
        initializer_names = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
        for t in graph.initializer:
            try:
                _np_dtype(t.data_type, f"initializer '{t.name}'")
                self.consts[t.name] = numpy_helper.to_array(t)
            except _NodeProblem as e:
                self.fail(f"initializer '{t.name}'", str(e))
                self.poisoned.add(t.name)
            except Exception as e:
                self.fail(f"initializer '{t.name}'", f"cannot be read: {_one_line(e)}")
                self.poisoned.add(t.name)
        for t in graph.sparse_initializer:
            self.fail(f"initializer '{t.values.name}'", "sparse initializers are not supported")
            self.poisoned.add(t.values.name)

        real_inputs = [i for i in graph.input if i.name not in initializer_names]
        unknown = sorted(set(self.input_shapes) - {i.name for i in real_inputs})
        if unknown:
            raise ModelImportError(
                f"{self.label}: input_shapes names unknown input(s) {', '.join(map(repr, unknown))} "
                f"(inputs: {', '.join(i.name for i in real_inputs) or 'none'})"
            )
        for vi in real_inputs:
            self._add_input(vi)

        for node in graph.node:
            self._import_node(node)

        outputs, names = [], []
        for vi in graph.output:
            names.append(vi.name)
            if vi.name in self.poisoned or not self.has(vi.name):
                if vi.name not in self.poisoned:
                    self.fail(f"graph output '{vi.name}'", "is not produced by any node")
                continue
            outputs.append(self.value(vi.name))
        if self.problems:
            lines = [f"{p.node}: {p.text}" for p in self.problems]
            raise ModelImportError(
                f"{self.label}: {len(lines)} problem(s) prevent the import:\n  " + "\n  ".join(lines)
            )
        try:
            return self.b.finish(outputs, names)
        except VerifyException as e:
            raise ModelImportError(f"{self.label}: the imported graph does not verify: {_one_line(e)}") from None

    def _add_input(self, vi: onnx.ValueInfoProto) -> None:
        where = f"graph input '{vi.name}'"
        t = vi.type
        if t.WhichOneof("value") != "tensor_type":
            self.fail(where, f"is a {t.WhichOneof('value') or 'untyped value'}, only tensors are supported")
            self.poisoned.add(vi.name)
            return
        try:
            dtype = _np_dtype(t.tensor_type.elem_type, where)
        except _NodeProblem as e:
            self.fail(where, str(e).removeprefix(where + " "))
            self.poisoned.add(vi.name)
            return
        declared: list[int | str | None] | None = None
        if t.tensor_type.HasField("shape"):
            declared = []
            for d in t.tensor_type.shape.dim:
                if d.HasField("dim_value"):
                    declared.append(int(d.dim_value))
                elif d.HasField("dim_param"):
                    declared.append(d.dim_param)
                else:
                    declared.append(None)
        given = self.input_shapes.get(vi.name)
        if given is not None:
            if declared is not None:
                if len(declared) != len(given):
                    raise ModelImportError(
                        f"{self.label}: input '{vi.name}' has rank {len(declared)} "
                        f"({_fmt_dims(declared)}) but the given shape {_fmt_dims(given)} has rank {len(given)}"
                    )
                for i, (d, gd) in enumerate(zip(declared, given)):
                    if isinstance(d, int) and d != gd:
                        raise ModelImportError(
                            f"{self.label}: input '{vi.name}' has dimension {i} = {d} but the given shape "
                            f"{_fmt_dims(given)} says {gd}"
                        )
            shape = tuple(given)
        else:
            if declared is None:
                raise ModelImportError(
                    f"{self.label}: input '{vi.name}' has no shape in the model; give one "
                    f"(input_shapes={{'{vi.name}': (...)}} or --input-shape {vi.name}=1x3x224x224)"
                )
            dynamic = [str(d) if d is not None else "?" for d in declared if not isinstance(d, int)]
            if dynamic:
                raise ModelImportError(
                    f"{self.label}: input '{vi.name}' has dynamic dimension(s) {', '.join(dynamic)} "
                    f"(shape {_fmt_dims(declared)}); give a static shape (input_shapes={{'{vi.name}': (...)}} "
                    f"or --input-shape {vi.name}=" + "x".join(str(d) if isinstance(d, int) else "N" for d in declared) + ")"
                )
            shape = tuple(int(d) for d in declared)  # type: ignore[arg-type]
        arg = self.b.input(vi.name, shape, dtype)
        self.ssa[vi.name] = arg
        self.graph_inputs[vi.name] = arg

    def _import_node(self, node: onnx.NodeProto) -> None:
        self.node = node
        where = self._node_label(node)
        outs = [o for o in node.output if o]
        ins = [i for i in node.input if i]
        if any(i in self.poisoned for i in ins):
            self.poisoned.update(outs)
            return
        missing = [i for i in ins if not self.has(i)]
        if missing:
            self.fail(where, f"input(s) {', '.join(map(repr, missing))} are not defined before the node")
            self.poisoned.update(outs)
            return
        spec = _HANDLERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if spec is None:
            body = self._function_body(node)
            if body is not None:
                for inner in body:
                    self._import_node(inner)
                return
        try:
            if spec is None:
                raise _NodeProblem(
                    f"op type '{node.op_type}'"
                    + (f" of domain '{node.domain}'" if node.domain not in ("", "ai.onnx") else "")
                    + " is not supported"
                )
            # Fold nodes whose inputs are all known (and whose result is not random).
            if spec.fold and node.op_type not in NO_FOLD and all(self.is_const(i) for i in ins) and (ins or node.op_type in _NULLARY_FOLD):
                folded = _fold(self, node)
                if folded is not None:
                    for name, arr in zip(node.output, folded):
                        if name:
                            self.consts[name] = arr
                    return
            extra = sorted(a.name for a in node.attribute if a.name not in spec.attrs)
            if extra:
                raise _NodeProblem(f"attribute(s) {', '.join(extra)} are not supported")
            results = list(spec.fn(self, node))
            for i, name in enumerate(node.output):
                if not name:
                    continue
                if i >= len(results) or results[i] is None:
                    raise _NodeProblem(f"output #{i} ('{name}') is not supported (only the first {len(results)})")
                r = results[i]
                if isinstance(r, np.ndarray):
                    self.consts[name] = r
                else:
                    self.ssa[name] = r
        except ModelImportError:
            raise
        except NeedsInputValue as e:
            if not self.list_unsupported:
                raise StaticInputNeeded(e.input_name, f"{self.label}: {where}: {e}") from None
            self.fail(where, str(e))
            self.poisoned.update(outs)
        except _NodeProblem as e:
            self.fail(where, str(e))
            self.poisoned.update(outs)
        except VerifyException as e:
            self.fail(where, f"the graph op does not verify: {_one_line(e)}")
            self.poisoned.update(outs)


    def _function_body(self, node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
        """The nodes of an op defined as an ONNX function (its schema's body
        for this opset), renamed into this graph; None if it has none."""
        if node.domain not in ("", "ai.onnx"):
            return None
        try:
            schema = onnx.defs.get_schema(node.op_type, self.opset, "")
        except Exception:
            return None
        try:
            from onnx import FunctionProto
            from onnx.backend.test.case.node import function_expand_helper

            fn = None
            versions = [v for v in schema.function_opset_versions if v <= self.opset]
            if versions:
                fn = FunctionProto.FromString(schema.get_function_with_opset_version(max(versions)))
            else:
                versions = [v for v in schema.context_dependent_function_opset_versions if v <= self.opset]
                if not versions:
                    return None
                types = []
                for name in node.input:
                    if not name:
                        types.append(onnx.TypeProto())
                        continue
                    elem = helper.np_dtype_to_tensor_dtype(self.dtype(name))
                    types.append(helper.make_tensor_type_proto(elem, self.shape(name)))
                full = onnx.NodeProto()
                full.CopyFrom(node)
                fn = FunctionProto.FromString(schema.get_context_dependent_function_with_opset_version(
                    max(versions), full.SerializeToString(), [t.SerializeToString() for t in types]))
            call = onnx.NodeProto()
            call.CopyFrom(node)
            present = {a.name for a in call.attribute}
            for attr_name, attr in schema.attributes.items():
                if attr_name not in present and attr.default_value and attr.default_value.name:
                    call.attribute.append(attr.default_value)
            self._expansions = getattr(self, "_expansions", 0) + 1
            prefix = f"{node.op_type}_{self._expansions}__"
            return function_expand_helper(call, fn, prefix)
        except Exception:
            return None


def _weight_name(name: str) -> str:
    out = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    return out or "const"


def _fmt_dims(dims: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


# --------------------------------------------------------------------------
# Constant folding
# --------------------------------------------------------------------------

_NULLARY_FOLD = {"Constant"}


def _constant_value(node: onnx.NodeProto) -> np.ndarray:
    for a in node.attribute:
        if a.name == "value":
            _np_dtype(a.t.data_type, "the constant")
            return numpy_helper.to_array(a.t)
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64)
        if a.name in ("value_string", "value_strings"):
            raise _NodeProblem("string constants are not supported")
        if a.name == "sparse_value":
            raise _NodeProblem("sparse constants are not supported")
    raise _NodeProblem("the constant has no value attribute")


def _fold(imp: _Importer, node: onnx.NodeProto) -> list[np.ndarray] | None:
    """Evaluate a node on constant inputs (numpy for the common shape ops,
    onnx.reference otherwise); None when it cannot be evaluated."""
    if node.op_type == "Constant":
        return [_constant_value(node)]
    ins = [imp.consts[i] if i else None for i in node.input]
    try:
        from onnx.reference import ReferenceEvaluator

        inputs = []
        feeds = {}
        for k, name in enumerate(node.input):
            if not name:
                inputs.append("")
                continue
            inputs.append(name)
            arr = ins[k]
            feeds[name] = arr
        n = helper.make_node(node.op_type, inputs, list(node.output), domain=node.domain)
        n.attribute.extend(node.attribute)
        vi_in = [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for nm, a in feeds.items()]
        vi_out = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.output if o]
        gr = helper.make_graph([n], "fold", vi_in, vi_out)
        m = helper.make_model(gr, opset_imports=list(imp.model.opset_import))
        outs = ReferenceEvaluator(m).run(None, feeds)
    except Exception:
        return None
    results = []
    for o in outs:
        a = np.asarray(o)
        try:
            from_numpy_dtype(a.dtype)
        except ValueError:
            return None
        results.append(a)
    return results


# --------------------------------------------------------------------------
# Attribute helpers
# --------------------------------------------------------------------------


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                return v.decode()
            if a.type == AttributeProto.INTS:
                return [int(x) for x in v]
            if a.type == AttributeProto.FLOATS:
                return [float(x) for x in v]
            return v
    return default


def _input(node: onnx.NodeProto, i: int) -> str:
    return node.input[i] if i < len(node.input) and node.input[i] else ""


def _ints_of(imp: _Importer, node: onnx.NodeProto, attr_name: str, input_index: int, what: str) -> list[int] | None:
    """An int list given as an attribute (old opsets) or a constant input (new)."""
    v = _attr(node, attr_name)
    if v is not None:
        return [int(x) for x in v]
    name = _input(node, input_index)
    if not name:
        return None
    return [int(x) for x in np.asarray(imp.static(name, what)).reshape(-1)]


def _norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise _NodeProblem(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


# --------------------------------------------------------------------------
# Handlers: elementwise
# --------------------------------------------------------------------------

_UNARY = {
    "Neg": g.NegOp, "Abs": g.AbsOp, "Sign": g.SignOp, "Exp": g.ExpOp, "Log": g.LogOp,
    "Sqrt": g.SqrtOp, "Reciprocal": g.ReciprocalOp, "Tanh": g.TanhOp, "Sigmoid": g.SigmoidOp,
    "Erf": g.ErfOp, "Sin": g.SinOp, "Cos": g.CosOp, "Floor": g.FloorOp, "Ceil": g.CeilOp,
    "Round": g.RoundOp, "Relu": g.ReluOp, "Softplus": g.SoftplusOp, "Not": g.NotOp,
}


@_handler(*_UNARY, attrs=("consumed_inputs",))
def _unary(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    cls = _UNARY[node.op_type]
    if cls.FLOAT_ONLY and numpy_dtype_of(x).kind not in "fV" and not _is_lowp(numpy_dtype_of(x)):
        raise _NodeProblem(f"{node.op_type} of {numpy_dtype_of(x)} is not supported (float types only)")
    return [imp.b.op(cls, [x])]


def _is_lowp(dt: np.dtype) -> bool:
    return dt.name == "bfloat16"


def _is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or _is_lowp(dt)


def _require_float(x: SSAValue, what: str) -> None:
    if not _is_float(numpy_dtype_of(x)):
        raise _NodeProblem(f"{what} of {numpy_dtype_of(x)} is not supported (float types only)")


_BINARY = {
    "Add": g.AddOp, "Sub": g.SubOp, "Mul": g.MulOp, "Div": g.DivOp,
    "Equal": g.EqualOp, "Less": g.LessOp, "LessOrEqual": g.LessEqualOp,
    "Greater": g.GreaterOp, "GreaterOrEqual": g.GreaterEqualOp,
    "And": g.AndOp, "Or": g.OrOp, "Xor": g.XorOp,
}


@_handler(*_BINARY, attrs=("broadcast", "axis", "consumed_inputs"))
def _binary(imp: _Importer, node: onnx.NodeProto):
    a, b = imp.value(node.input[0]), imp.value(node.input[1])
    if _attr(node, "broadcast", 0) and _attr(node, "axis") is not None:
        b = _legacy_broadcast(imp, a, b, int(_attr(node, "axis")))
    return [imp.b.op(_BINARY[node.op_type], [a, b])]


def _legacy_broadcast(imp: _Importer, a: SSAValue, b: SSAValue, axis: int) -> SSAValue:
    """Opset < 7 `broadcast=1, axis=k`: b's dims line up with a's from axis k."""
    ra, rb = len(shape_of(a)), len(shape_of(b))
    axis = axis % ra if ra else 0
    shape = (*shape_of(b), *([1] * (ra - axis - rb)))
    return imp.b.reshape(b, shape)


@_handler("Pow")
def _pow(imp: _Importer, node: onnx.NodeProto):
    a, b = imp.value(node.input[0]), imp.value(node.input[1])
    b = imp.b.cast(b, numpy_dtype_of(a))
    return [imp.b.op(g.PowOp, [a, b])]


@_handler("Mod", attrs=("fmod",))
def _mod(imp: _Importer, node: onnx.NodeProto):
    a, b = imp.value(node.input[0]), imp.value(node.input[1])
    if not _attr(node, "fmod", 0):
        return [imp.b.op(g.ModOp, [a, b])]
    # fmod: remainder with the sign of the dividend, a - trunc(a / b) * b
    q = imp.b.op(g.DivOp, [a, b])
    if _is_float(numpy_dtype_of(a)):
        q = imp.b.op(g.MulOp, [imp.b.op(g.SignOp, [q]), imp.b.op(g.FloorOp, [imp.b.op(g.AbsOp, [q])])])
    return [imp.b.op(g.SubOp, [a, imp.b.op(g.MulOp, [q, b])])]


@_handler("Max", "Min", "Sum", "Mean", attrs=("consumed_inputs",))
def _variadic(imp: _Importer, node: onnx.NodeProto):
    cls = {"Max": g.MaximumOp, "Min": g.MinimumOp, "Sum": g.AddOp, "Mean": g.AddOp}[node.op_type]
    vals = [imp.value(i) for i in node.input if i]
    acc = vals[0]
    for v in vals[1:]:
        acc = imp.b.op(cls, [acc, v])
    if node.op_type == "Mean" and len(vals) > 1:
        acc = imp.b.op(g.DivOp, [acc, imp.b.scalar(len(vals), acc)])
    return [acc]


@_handler("Where")
def _where(imp: _Importer, node: onnx.NodeProto):
    c, a, b = (imp.value(i) for i in node.input[:3])
    return [imp.b.op(g.WhereOp, [c, a, b])]


@_handler("Cast", attrs=("to", "saturate", "round_mode"))
def _cast(imp: _Importer, node: onnx.NodeProto):
    to = _attr(node, "to")
    if isinstance(to, str):
        to = getattr(TensorProto, to.upper())
    dt = _np_dtype(int(to), "the cast target")
    x = imp.value(node.input[0])
    return [imp.b.cast(x, dt)]


@_handler("CastLike", attrs=("saturate", "round_mode"))
def _cast_like(imp: _Importer, node: onnx.NodeProto):
    return [imp.b.cast(imp.value(node.input[0]), imp.dtype(node.input[1]))]


@_handler("Identity")
def _identity(imp: _Importer, node: onnx.NodeProto):
    return [imp.value(node.input[0])]


@_handler("Dropout", attrs=("ratio", "seed", "is_test"))
def _dropout(imp: _Importer, node: onnx.NodeProto):
    training = _input(node, 2)
    if training and bool(np.asarray(imp.static(training, "training_mode")).reshape(-1)[0]):
        raise _NodeProblem("training_mode = true (random dropout) is not supported")
    x = imp.value(node.input[0])
    mask = np.ones(shape_of(x), dtype=np.bool_)
    return [x, mask]


# -- activations -------------------------------------------------------------


@_handler("LeakyRelu", attrs=("alpha",))
def _leaky_relu(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    _require_float(x, "LeakyRelu")
    return [imp.b.op(g.LeakyReluOp, [x], alpha=g.f64_attr(_attr(node, "alpha", 0.01)))]


@_handler("Elu", attrs=("alpha", "consumed_inputs"))
def _elu(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    _require_float(x, "Elu")
    return [imp.b.op(g.EluOp, [x], alpha=g.f64_attr(_attr(node, "alpha", 1.0)))]


@_handler("Selu", attrs=("alpha", "gamma", "consumed_inputs"))
def _selu(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    _require_float(x, "Selu")
    e = imp.b.op(g.EluOp, [x], alpha=g.f64_attr(_attr(node, "alpha", 1.67326319217681884765625)))
    return [imp.b.op(g.MulOp, [e, imp.b.scalar(_attr(node, "gamma", 1.05070102214813232421875), x)])]


@_handler("Celu", attrs=("alpha",))
def _celu(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    _require_float(x, "Celu")
    alpha = _attr(node, "alpha", 1.0)
    a = imp.b.scalar(alpha, x)
    e = imp.b.op(g.EluOp, [imp.b.op(g.DivOp, [x, a])], alpha=g.f64_attr(1.0))
    return [imp.b.op(g.MulOp, [e, a])]


@_handler("HardSigmoid", attrs=("alpha", "beta", "consumed_inputs"))
def _hard_sigmoid(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    _require_float(x, "HardSigmoid")
    return [imp.b.op(g.HardSigmoidOp, [x], alpha=g.f64_attr(_attr(node, "alpha", 0.2)), beta=g.f64_attr(_attr(node, "beta", 0.5)))]


@_handler("HardSwish")
def _hard_swish(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    _require_float(x, "HardSwish")
    hs = imp.b.op(g.HardSigmoidOp, [x], alpha=g.f64_attr(1 / 6), beta=g.f64_attr(0.5))
    return [imp.b.op(g.MulOp, [x, hs])]


@_handler("Swish", attrs=("alpha",))
def _swish(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    _require_float(x, "Swish")
    alpha = float(_attr(node, "alpha", 1.0))
    if alpha == 1.0:
        return [imp.b.op(g.SiluOp, [x])]
    s = imp.b.op(g.SigmoidOp, [imp.b.op(g.MulOp, [x, imp.b.scalar(alpha, x)])])
    return [imp.b.op(g.MulOp, [x, s])]


@_handler("Mish")
def _mish(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    _require_float(x, "Mish")
    return [imp.b.op(g.MulOp, [x, imp.b.op(g.TanhOp, [imp.b.op(g.SoftplusOp, [x])])])]


@_handler("Softsign")
def _softsign(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    _require_float(x, "Softsign")
    d = imp.b.op(g.AddOp, [imp.b.op(g.AbsOp, [x]), imp.b.scalar(1, x)])
    return [imp.b.op(g.DivOp, [x, d])]


@_handler("ThresholdedRelu", attrs=("alpha",))
def _thresholded_relu(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    cond = imp.b.op(g.GreaterOp, [x, imp.b.scalar(_attr(node, "alpha", 1.0), x)])
    return [imp.b.op(g.WhereOp, [cond, x, imp.b.scalar(0, x)])]


@_handler("Shrink", attrs=("bias", "lambd"))
def _shrink(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    bias, lambd = _attr(node, "bias", 0.0), _attr(node, "lambd", 0.5)
    zero = imp.b.scalar(0, x)
    lo = imp.b.op(g.WhereOp, [imp.b.op(g.LessOp, [x, imp.b.scalar(-lambd, x)]), imp.b.op(g.AddOp, [x, imp.b.scalar(bias, x)]), zero])
    return [imp.b.op(g.WhereOp, [imp.b.op(g.GreaterOp, [x, imp.b.scalar(lambd, x)]), imp.b.op(g.SubOp, [x, imp.b.scalar(bias, x)]), lo])]


@_handler("PRelu", attrs=("consumed_inputs",))
def _prelu(imp: _Importer, node: onnx.NodeProto):
    x, slope = imp.value(node.input[0]), imp.value(node.input[1])
    neg = imp.b.op(g.LessOp, [x, imp.b.scalar(0, x)])
    return [imp.b.op(g.WhereOp, [neg, imp.b.op(g.MulOp, [x, slope]), x])]


@_handler("Gelu", attrs=("approximate",))
def _gelu(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    _require_float(x, "Gelu")
    approx = _attr(node, "approximate", "none")
    return [imp.b.op(g.GeluOp, [x], approximate=g.StringAttr(approx))]


@_handler("Clip", attrs=("min", "max", "consumed_inputs"))
def _clip(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    lo = _attr(node, "min")
    hi = _attr(node, "max")
    out = x
    for idx, bound, cls in ((1, lo, g.MaximumOp), (2, hi, g.MinimumOp)):
        name = _input(node, idx)
        if name and not imp.is_const(name):
            out = imp.b.op(cls, [out, imp.b.cast(imp.value(name), numpy_dtype_of(x))])
            continue
        if name:
            bound = np.asarray(imp.consts[name]).reshape(-1)[0].item()
        if bound is not None:
            out = imp.b.op(cls, [out, imp.b.scalar(bound, x)])
    return [out]


@_handler("IsNaN")
def _isnan(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    return [imp.b.op(g.NotOp, [imp.b.op(g.EqualOp, [x, x])])]


@_handler("IsInf", attrs=("detect_positive", "detect_negative"))
def _isinf(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    pos = imp.b.op(g.EqualOp, [x, imp.b.scalar(np.inf, x)])
    neg = imp.b.op(g.EqualOp, [x, imp.b.scalar(-np.inf, x)])
    dp, dn = _attr(node, "detect_positive", 1), _attr(node, "detect_negative", 1)
    if dp and dn:
        return [imp.b.op(g.OrOp, [pos, neg])]
    if dp:
        return [pos]
    if dn:
        return [neg]
    return [np.zeros(shape_of(x), dtype=np.bool_)]


def _trig(expr: Callable[[_Importer, SSAValue], SSAValue]):
    def fn(imp: _Importer, node: onnx.NodeProto):
        x = imp.value(node.input[0])
        _require_float(x, node.op_type)
        return [expr(imp, x)]

    return fn


def _half(imp: _Importer, x: SSAValue) -> SSAValue:
    return imp.b.op(g.MulOp, [x, imp.b.scalar(0.5, x)])


_handler("Tan")(_trig(lambda imp, x: imp.b.op(g.DivOp, [imp.b.op(g.SinOp, [x]), imp.b.op(g.CosOp, [x])])))
_handler("Sinh")(_trig(lambda imp, x: _half(imp, imp.b.op(g.SubOp, [imp.b.op(g.ExpOp, [x]), imp.b.op(g.ExpOp, [imp.b.op(g.NegOp, [x])])]))))
_handler("Cosh")(_trig(lambda imp, x: _half(imp, imp.b.op(g.AddOp, [imp.b.op(g.ExpOp, [x]), imp.b.op(g.ExpOp, [imp.b.op(g.NegOp, [x])])]))))
_handler("Asinh")(_trig(lambda imp, x: imp.b.op(g.LogOp, [imp.b.op(g.AddOp, [x, imp.b.op(g.SqrtOp, [imp.b.op(g.AddOp, [imp.b.op(g.MulOp, [x, x]), imp.b.scalar(1, x)])])])])))
_handler("Acosh")(_trig(lambda imp, x: imp.b.op(g.LogOp, [imp.b.op(g.AddOp, [x, imp.b.op(g.SqrtOp, [imp.b.op(g.SubOp, [imp.b.op(g.MulOp, [x, x]), imp.b.scalar(1, x)])])])])))
_handler("Atanh")(_trig(lambda imp, x: _half(imp, imp.b.op(g.LogOp, [imp.b.op(g.DivOp, [imp.b.op(g.AddOp, [imp.b.scalar(1, x), x]), imp.b.op(g.SubOp, [imp.b.scalar(1, x), x])])]))))


# --------------------------------------------------------------------------
# Handlers: linear algebra, conv, pooling, normalization
# --------------------------------------------------------------------------


@_handler("MatMul")
def _matmul(imp: _Importer, node: onnx.NodeProto):
    a, b = imp.value(node.input[0]), imp.value(node.input[1])
    return [imp.b.op(g.MatmulOp, [a, b])]


@_handler("Gemm", attrs=("alpha", "beta", "transA", "transB", "broadcast"))
def _gemm(imp: _Importer, node: onnx.NodeProto):
    alpha, beta = float(_attr(node, "alpha", 1.0)), float(_attr(node, "beta", 1.0))
    ta, tb = bool(_attr(node, "transA", 0)), bool(_attr(node, "transB", 0))
    a_name, b_name, c_name = node.input[0], node.input[1], _input(node, 2)
    a = imp.value(a_name)
    n = imp.shape(b_name)[0 if tb else 1]
    c_shape = imp.shape(c_name) if c_name else None
    # y = x @ W^T + b: the linear form with a constant weight.
    if not ta and alpha == 1.0 and imp.is_const(b_name) and (c_shape is None or (beta == 1.0 and c_shape in ((n,), (1, n)))):
        w = imp.consts[b_name] if tb else np.ascontiguousarray(imp.consts[b_name].T)
        wv = imp.value(b_name) if tb else imp.materialise(w, b_name + "_t")
        bias = None
        if c_name:
            bias = imp.b.reshape(imp.value(c_name), (n,))
        return [imp.b.op(g.LinearOp, [a, wv, bias])]
    y = imp.b.op(g.MatmulOp, [a, imp.value(b_name)], transpose_a=g.bool_attr(ta), transpose_b=g.bool_attr(tb))
    if alpha != 1.0:
        y = imp.b.op(g.MulOp, [y, imp.b.scalar(alpha, y)])
    if c_name:
        c = imp.value(c_name)
        if beta != 1.0:
            c = imp.b.op(g.MulOp, [c, imp.b.scalar(beta, c)])
        y = imp.b.op(g.AddOp, [y, c])
    return [y]


def _window(imp: _Importer, node: onnx.NodeProto, in_spatial: Sequence[int], kernel: Sequence[int]):
    """strides, dilations, pads (begin..., end...) with auto_pad made explicit."""
    r = len(in_spatial)
    strides = _attr(node, "strides") or [1] * r
    dilations = _attr(node, "dilations") or [1] * r
    pads = _attr(node, "pads") or [0] * (2 * r)
    auto_pad = _attr(node, "auto_pad", "NOTSET") or "NOTSET"
    if len(strides) != r or len(dilations) != r or len(pads) != 2 * r:
        raise _NodeProblem(f"strides/dilations/pads do not match the {r} spatial dims")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * r)
        for i in range(r):
            out = -(-in_spatial[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_spatial[i])
            small, big = total // 2, total - total // 2
            pads[i], pads[i + r] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    elif auto_pad == "VALID":
        pads = [0] * (2 * r)
    elif auto_pad != "NOTSET":
        raise _NodeProblem(f"auto_pad = {auto_pad} is not supported")
    return list(strides), list(dilations), list(pads)


def _as_2d(r: int, strides, dilations, pads, kernel):
    """Spatial params for 1-D (made 2-D with H = 1) or 2-D windows."""
    if r == 1:
        return [1, strides[0]], [1, dilations[0]], [0, pads[0], 0, pads[1]], [1, kernel[0]]
    return strides, dilations, pads, list(kernel)


_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@_handler("Conv", attrs=_CONV_ATTRS)
def _conv(imp: _Importer, node: onnx.NodeProto):
    x, w = imp.value(node.input[0]), imp.value(node.input[1])
    bias = imp.value(node.input[2]) if _input(node, 2) else None
    xs, ws = shape_of(x), shape_of(w)
    r = len(xs) - 2
    if r not in (1, 2):
        raise _NodeProblem(f"{r}-D convolution is not supported (1-D and 2-D only)")
    kernel = _attr(node, "kernel_shape") or list(ws[2:])
    strides, dilations, pads = _window(imp, node, xs[2:], kernel)
    strides, dilations, pads, _ = _as_2d(r, strides, dilations, pads, kernel)
    if r == 1:
        x = imp.b.reshape(x, (xs[0], xs[1], 1, xs[2]))
        w = imp.b.reshape(w, (ws[0], ws[1], 1, ws[2]))
    y = imp.b.op(
        g.Conv2dOp, [x, w, bias],
        stride=g.i64_array(strides), padding=g.i64_array(pads), dilation=g.i64_array(dilations),
        groups=g.i64_attr(int(_attr(node, "group", 1))),
    )
    if r == 1:
        ys = shape_of(y)
        y = imp.b.reshape(y, (ys[0], ys[1], ys[3]))
    return [y]


@_handler("MaxPool", "AveragePool", attrs=("auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "storage_order", "strides"))
def _pool(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    r = len(xs) - 2
    if r not in (1, 2):
        raise _NodeProblem(f"{r}-D pooling is not supported (1-D and 2-D only)")
    if _attr(node, "storage_order", 0):
        raise _NodeProblem("storage_order = 1 is not supported")
    if len(node.output) > 1 and node.output[1]:
        raise _NodeProblem("the Indices output is not supported")
    kernel = _attr(node, "kernel_shape")
    strides, dilations, pads = _window(imp, node, xs[2:], kernel)
    strides, dilations, pads, kernel = _as_2d(r, strides, dilations, pads, kernel)
    if r == 1:
        x = imp.b.reshape(x, (xs[0], xs[1], 1, xs[2]))
    props = dict(
        kernel=g.i64_array(kernel), stride=g.i64_array(strides), padding=g.i64_array(pads),
        ceil_mode=g.bool_attr(_attr(node, "ceil_mode", 0)),
    )
    if node.op_type == "MaxPool":
        y = imp.b.op(g.MaxPool2dOp, [x], dilation=g.i64_array(dilations), **props)
    else:
        if dilations != [1, 1]:
            raise _NodeProblem("dilations are not supported for AveragePool")
        y = imp.b.op(g.AvgPool2dOp, [x], count_include_pad=g.bool_attr(_attr(node, "count_include_pad", 0)), **props)
    if r == 1:
        ys = shape_of(y)
        y = imp.b.reshape(y, (ys[0], ys[1], ys[3]))
    return [y]


@_handler("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(imp: _Importer, node: onnx.NodeProto):
    cls = g.GlobalAvgPoolOp if node.op_type == "GlobalAveragePool" else g.GlobalMaxPoolOp
    return [imp.b.op(cls, [imp.value(node.input[0])])]


@_handler("BatchNormalization", attrs=("epsilon", "momentum", "training_mode", "spatial", "is_test", "consumed_inputs"))
def _batch_norm(imp: _Importer, node: onnx.NodeProto):
    if _attr(node, "training_mode", 0):
        raise _NodeProblem("training_mode = 1 is not supported (inference only)")
    if _attr(node, "spatial", 1) != 1:
        raise _NodeProblem("spatial = 0 is not supported")
    x = imp.value(node.input[0])
    params = [imp.b.cast(imp.value(n), numpy_dtype_of(x)) for n in node.input[1:5]]
    y = imp.b.op(g.BatchNormOp, [x, *params], epsilon=g.f64_attr(_attr(node, "epsilon", 1e-5)))
    return [y]


@_handler("InstanceNormalization", attrs=("epsilon",))
def _instance_norm(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    rank = len(shape_of(x))
    axes = list(range(2, rank))
    y = _normalize(imp, x, axes, float(_attr(node, "epsilon", 1e-5)))
    c = shape_of(x)[1]
    pshape = (c, *([1] * (rank - 2)))
    scale = imp.b.reshape(imp.value(node.input[1]), pshape)
    bias = imp.b.reshape(imp.value(node.input[2]), pshape)
    return [imp.b.op(g.AddOp, [imp.b.op(g.MulOp, [y, scale]), bias])]


def _normalize(imp: _Importer, x: SSAValue, axes: Sequence[int], eps: float, outputs: bool = False):
    mean = imp.b.reduce(g.ReduceMeanOp, x, axes, True)
    d = imp.b.op(g.SubOp, [x, mean])
    var = imp.b.reduce(g.ReduceMeanOp, imp.b.op(g.MulOp, [d, d]), axes, True)
    inv = imp.b.op(g.RsqrtOp, [imp.b.op(g.AddOp, [var, imp.b.scalar(eps, var)])])
    y = imp.b.op(g.MulOp, [d, inv])
    if outputs:
        return y, mean, inv
    return y


@_handler("LayerNormalization", attrs=("axis", "epsilon", "stash_type"))
def _layer_norm(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    scale = imp.value(node.input[1])
    bias = imp.value(node.input[2]) if _input(node, 2) else None
    rank = len(shape_of(x))
    axis = _norm_axis(int(_attr(node, "axis", -1)), rank)
    eps = float(_attr(node, "epsilon", 1e-5))
    wants_stats = any(o for o in node.output[1:])
    if not wants_stats:
        return [imp.b.op(g.LayerNormOp, [x, scale, bias], axis=g.i64_attr(axis), epsilon=g.f64_attr(eps))]
    stash = _attr(node, "stash_type", 1)
    xc = imp.b.cast(x, np.dtype(np.float32)) if stash == 1 and _is_float(numpy_dtype_of(x)) else x
    y, mean, inv = _normalize(imp, xc, list(range(axis, rank)), eps, outputs=True)
    y = imp.b.cast(y, numpy_dtype_of(x))
    y = imp.b.op(g.MulOp, [y, scale])
    if bias is not None:
        y = imp.b.op(g.AddOp, [y, bias])
    return [y, mean, inv]


@_handler("RMSNormalization", attrs=("axis", "epsilon", "stash_type"))
def _rms_norm(imp: _Importer, node: onnx.NodeProto):
    x, scale = imp.value(node.input[0]), imp.value(node.input[1])
    axis = _norm_axis(int(_attr(node, "axis", -1)), len(shape_of(x)))
    return [imp.b.op(g.RmsNormOp, [x, scale], axis=g.i64_attr(axis), epsilon=g.f64_attr(float(_attr(node, "epsilon", 1e-5))))]


@_handler("GroupNormalization", attrs=("epsilon", "num_groups", "stash_type"))
def _group_norm(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    n, c = xs[0], xs[1]
    groups = int(_attr(node, "num_groups"))
    eps = float(_attr(node, "epsilon", 1e-5))
    if c % groups:
        raise _NodeProblem(f"channels ({c}) are not divisible by num_groups ({groups})")
    xg = imp.b.reshape(x, (n, groups, math.prod(xs) // (n * groups) if n * groups else 0))
    y = imp.b.reshape(_normalize(imp, xg, [2], eps), xs)
    scale, bias = imp.value(node.input[1]), imp.value(node.input[2])
    rest = [1] * (len(xs) - 2)
    if shape_of(scale)[0] == groups and groups != c:
        # opset 18: one scale/bias per group
        scale = imp.b.reshape(imp.b.broadcast(imp.b.reshape(scale, (groups, 1)), (groups, c // groups)), (c,))
        bias = imp.b.reshape(imp.b.broadcast(imp.b.reshape(bias, (groups, 1)), (groups, c // groups)), (c,))
    scale, bias = imp.b.reshape(scale, (c, *rest)), imp.b.reshape(bias, (c, *rest))
    return [imp.b.op(g.AddOp, [imp.b.op(g.MulOp, [y, scale]), bias])]


@_handler("LpNormalization", attrs=("axis", "p"))
def _lp_norm(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    axis = _norm_axis(int(_attr(node, "axis", -1)), len(shape_of(x)))
    p = int(_attr(node, "p", 2))
    if p == 1:
        norm = imp.b.reduce(g.ReduceSumOp, imp.b.op(g.AbsOp, [x]), [axis], True)
    elif p == 2:
        norm = imp.b.op(g.SqrtOp, [imp.b.reduce(g.ReduceSumOp, imp.b.op(g.MulOp, [x, x]), [axis], True)])
    else:
        raise _NodeProblem(f"p = {p} is not supported (1 or 2)")
    zero = imp.b.scalar(0, x)
    is_zero = imp.b.op(g.EqualOp, [norm, zero])
    safe = imp.b.op(g.WhereOp, [is_zero, imp.b.scalar(1, x), norm])
    return [imp.b.op(g.WhereOp, [is_zero, zero, imp.b.op(g.DivOp, [x, safe])])]


@_handler("MeanVarianceNormalization", attrs=("axes",))
def _mvn(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    axes = _attr(node, "axes", [0, 2, 3])
    rank = len(shape_of(x))
    axes = sorted(_norm_axis(a, rank) for a in axes)
    mean = imp.b.reduce(g.ReduceMeanOp, x, axes, True)
    d = imp.b.op(g.SubOp, [x, mean])
    var = imp.b.reduce(g.ReduceMeanOp, imp.b.op(g.MulOp, [d, d]), axes, True)
    std = imp.b.op(g.SqrtOp, [var])
    return [imp.b.op(g.DivOp, [d, imp.b.op(g.AddOp, [std, imp.b.scalar(1e-9, std)])])]


@_handler("Softmax", "LogSoftmax", "Hardmax", attrs=("axis",))
def _softmax(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    rank = len(xs)
    opset = imp.opset
    if opset < 13:
        axis = _norm_axis(int(_attr(node, "axis", 1)), rank)
        flat = (math.prod(xs[:axis]), math.prod(xs[axis:]))
        y = _softmax_like(imp, node.op_type, imp.b.reshape(x, flat), 1)
        return [imp.b.reshape(y, xs)]
    axis = _norm_axis(int(_attr(node, "axis", -1)), rank)
    return [_softmax_like(imp, node.op_type, x, axis)]


def _softmax_like(imp: _Importer, op_type: str, x: SSAValue, axis: int) -> SSAValue:
    if op_type == "Softmax":
        return imp.b.op(g.SoftmaxOp, [x], axis=g.i64_attr(axis))
    if op_type == "LogSoftmax":
        return imp.b.op(g.LogSoftmaxOp, [x], axis=g.i64_attr(axis))
    xs = shape_of(x)
    am = imp.b.op(g.ArgmaxOp, [x], axes=g.i64_array([axis]), keepdims=g.bool_attr(True))
    iota = np.arange(xs[axis], dtype=np.int64).reshape([-1 if i == axis else 1 for i in range(len(xs))])
    eq = imp.b.op(g.EqualOp, [am, imp.materialise(iota, "iota")])
    return imp.b.cast(imp.b.broadcast(eq, xs), numpy_dtype_of(x))


# --------------------------------------------------------------------------
# Handlers: shapes and data movement
# --------------------------------------------------------------------------


@_handler("Constant", attrs=("value", "value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings", "sparse_value"))
def _constant(imp: _Importer, node: onnx.NodeProto):
    return [_constant_value(node)]


@_handler("Shape", attrs=("start", "end"))
def _shape(imp: _Importer, node: onnx.NodeProto):
    s = imp.shape(node.input[0])
    start, end = _attr(node, "start", 0), _attr(node, "end")
    return [np.array(s[start:end] if end is not None else s[start:], dtype=np.int64)]


@_handler("Size")
def _size(imp: _Importer, node: onnx.NodeProto):
    return [np.array(math.prod(imp.shape(node.input[0])), dtype=np.int64)]


@_handler("ConstantOfShape", attrs=("value",))
def _constant_of_shape(imp: _Importer, node: onnx.NodeProto):
    shape = [int(d) for d in imp.static(node.input[0], "the shape").reshape(-1)]
    v = _attr(node, "value")
    value = numpy_helper.to_array(v).reshape(-1) if v is not None else np.zeros(1, np.float32)
    return [np.full(shape, value[0], dtype=value.dtype)]


@_handler("EyeLike", attrs=("dtype", "k"))
def _eye_like(imp: _Importer, node: onnx.NodeProto):
    shape = imp.shape(node.input[0])
    dt = _attr(node, "dtype")
    dtype = _np_dtype(int(dt), "the result") if dt is not None else imp.dtype(node.input[0])
    return [np.eye(shape[0], shape[1], k=int(_attr(node, "k", 0)), dtype=dtype)]


@_handler("Range")
def _range(imp: _Importer, node: onnx.NodeProto):
    start, limit, delta = (imp.static(n, w).reshape(()) for n, w in zip(node.input, ("start", "limit", "delta")))
    return [np.arange(start, limit, delta, dtype=start.dtype)]


@_handler("Reshape", attrs=("allowzero", "shape", "consumed_inputs"))
def _reshape(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    target = _ints_of(imp, node, "shape", 1, "the target shape")
    xs = shape_of(x)
    allowzero = _attr(node, "allowzero", 0)
    shape = [xs[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
    if shape.count(-1) > 1:
        raise _NodeProblem(f"the target shape {target} has more than one -1")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        total = math.prod(xs)
        if known == 0 or total % known:
            raise _NodeProblem(f"cannot reshape {list(xs)} to {target}")
        shape[shape.index(-1)] = total // known
    if math.prod(shape) != math.prod(xs):
        raise _NodeProblem(f"cannot reshape {list(xs)} ({math.prod(xs)} elements) to {target}")
    return [imp.b.reshape(x, shape)]


@_handler("Flatten", attrs=("axis",))
def _flatten(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    axis = int(_attr(node, "axis", 1))
    axis = axis + len(xs) if axis < 0 else axis
    return [imp.b.reshape(x, (math.prod(xs[:axis]), math.prod(xs[axis:])))]


@_handler("Squeeze", attrs=("axes",))
def _squeeze(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    axes = _ints_of(imp, node, "axes", 1, "the axes")
    if axes is None:
        axes = [i for i, d in enumerate(xs) if d == 1]
    axes = {_norm_axis(a, len(xs)) for a in axes}
    for a in axes:
        if xs[a] != 1:
            raise _NodeProblem(f"cannot squeeze dimension {a} of size {xs[a]}")
    return [imp.b.reshape(x, [d for i, d in enumerate(xs) if i not in axes])]


@_handler("Unsqueeze", attrs=("axes",))
def _unsqueeze(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = list(shape_of(x))
    axes = _ints_of(imp, node, "axes", 1, "the axes") or []
    rank = len(xs) + len(axes)
    axes = sorted(_norm_axis(a, rank) for a in axes)
    for a in axes:
        xs.insert(a, 1)
    return [imp.b.reshape(x, xs)]


@_handler("Transpose", attrs=("perm",))
def _transpose(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    perm = _attr(node, "perm") or list(reversed(range(len(shape_of(x)))))
    return [imp.b.transpose(x, perm)]


@_handler("Concat", attrs=("axis",))
def _concat(imp: _Importer, node: onnx.NodeProto):
    vals = [imp.value(i) for i in node.input if i]
    rank = len(shape_of(vals[0]))
    axis = _norm_axis(int(_attr(node, "axis", 1)), rank)
    vals = [v for v in vals if shape_of(v)[axis] != 0] or vals[:1]
    if len(vals) == 1:
        return [vals[0]]
    return [imp.b.op(g.ConcatOp, vals, axis=g.i64_attr(axis))]


@_handler("Split", attrs=("axis", "split", "num_outputs"))
def _split(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    axis = _norm_axis(int(_attr(node, "axis", 0)), len(xs))
    sizes = _ints_of(imp, node, "split", 1, "the split sizes")
    n = len(node.output)
    if sizes is None:
        num = int(_attr(node, "num_outputs", n))
        chunk = -(-xs[axis] // num)
        sizes = [min(chunk, xs[axis] - i * chunk) for i in range(num)]
    if sum(sizes) != xs[axis]:
        raise _NodeProblem(f"split sizes {sizes} do not add up to dimension {axis} ({xs[axis]})")
    outs, start = [], 0
    for s in sizes:
        starts = [0] * len(xs)
        ends = list(xs)
        starts[axis], ends[axis] = start, start + s
        outs.append(imp.b.slice(x, starts, ends, [1] * len(xs)))
        start += s
    return outs


@_handler("Slice", attrs=("starts", "ends", "axes"))
def _slice(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    rank = len(xs)
    if imp.opset < 10 or _attr(node, "starts") is not None:
        starts, ends, axes, steps = _attr(node, "starts"), _attr(node, "ends"), _attr(node, "axes"), None
    else:
        starts = _ints_of(imp, node, "-", 1, "the starts")
        ends = _ints_of(imp, node, "-", 2, "the ends")
        axes = _ints_of(imp, node, "-", 3, "the axes")
        steps = _ints_of(imp, node, "-", 4, "the steps")
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    s_all, e_all, st_all = [0] * rank, list(xs), [1] * rank
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        a = _norm_axis(a, rank)
        d = xs[a]
        if st == 0:
            raise _NodeProblem("a slice step is 0")
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if d == 0:
            s, e, st = 0, 0, 1
        elif st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
            e = max(e, s)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
            e = min(e, s)
        s_all[a], e_all[a], st_all[a] = s, e, st
    if s_all == [0] * rank and e_all == list(xs) and st_all == [1] * rank:
        return [x]
    return [imp.b.slice(x, s_all, e_all, st_all)]


@_handler("Expand")
def _expand(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    shape = [int(d) for d in imp.static(node.input[1], "the target shape").reshape(-1)]
    out = np.broadcast_shapes(shape_of(x), tuple(shape))
    return [imp.b.broadcast(x, out)]


@_handler("Tile")
def _tile(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    reps = [int(r) for r in imp.static(node.input[1], "the repeats").reshape(-1)]
    inter = [v for d in xs for v in (1, d)]
    big = [v for d, r in zip(xs, reps) for v in (r, d)]
    y = imp.b.broadcast(imp.b.reshape(x, inter), big)
    return [imp.b.reshape(y, [d * r for d, r in zip(xs, reps)])]


@_handler("Gather", attrs=("axis",))
def _gather(imp: _Importer, node: onnx.NodeProto):
    x, idx = imp.value(node.input[0]), imp.value(node.input[1])
    axis = _norm_axis(int(_attr(node, "axis", 0)), len(shape_of(x)))
    return [imp.b.op(g.GatherOp, [x, idx], axis=g.i64_attr(axis))]


@_handler("Pad", attrs=("mode", "pads", "value", "paddings"))
def _pad(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    rank = len(xs)
    mode = _attr(node, "mode", "constant")
    pads = _attr(node, "pads") or _attr(node, "paddings")
    value = _attr(node, "value", 0.0)
    if pads is None:
        pads = [int(p) for p in imp.static(node.input[1], "the pads").reshape(-1)]
        cv = _input(node, 2)
        if cv:
            value = np.asarray(imp.static(cv, "the constant value")).reshape(-1)[0].item()
        axes_name = _input(node, 3)
        if axes_name:
            axes = [_norm_axis(int(a), rank) for a in imp.static(axes_name, "the axes").reshape(-1)]
            full = [0] * (2 * rank)
            for k, a in enumerate(axes):
                full[a], full[a + rank] = pads[k], pads[k + len(axes)]
            pads = full
    if len(pads) != 2 * rank:
        raise _NodeProblem(f"pads {pads} need {2 * rank} entries")
    if mode != "constant":
        return [_pad_mode(imp, x, pads, mode)]
    # negative pads crop
    if any(p < 0 for p in pads):
        starts = [max(0, -pads[i]) for i in range(rank)]
        ends = [xs[i] - max(0, -pads[i + rank]) for i in range(rank)]
        x = imp.b.slice(x, starts, ends, [1] * rank)
        pads = [max(0, p) for p in pads]
    if not any(pads):
        return [x]
    return [imp.b.op(g.PadOp, [x], pads=g.i64_array(pads), value=g.f64_attr(float(value)))]


def _pad_mode(imp: _Importer, x: SSAValue, pads: Sequence[int], mode: str) -> SSAValue:
    """edge / reflect / wrap padding, one axis at a time, with slices and concat."""
    rank = len(shape_of(x))
    if any(p < 0 for p in pads):
        raise _NodeProblem(f"negative pads are not supported in mode '{mode}'")
    if mode not in ("edge", "reflect", "wrap"):
        raise _NodeProblem(f"mode '{mode}' is not supported")
    for a in range(rank):
        before, after = pads[a], pads[a + rank]
        if not before and not after:
            continue
        xs = shape_of(x)
        d = xs[a]

        def piece(indices: list[int]) -> SSAValue | None:
            if not indices:
                return None
            idx = imp.materialise(np.array(indices, dtype=np.int64), "pad_idx")
            return imp.b.op(g.GatherOp, [x, idx], axis=g.i64_attr(a))

        if mode == "edge":
            lo, hi = [0] * before, [d - 1] * after
        elif mode == "reflect":
            if d < 2 or before >= d or after >= d:
                raise _NodeProblem(f"reflect padding of {before}/{after} needs a dimension larger than {d}")
            lo = [before - i for i in range(before)]
            hi = [d - 2 - i for i in range(after)]
        else:
            lo = [(i - before) % d for i in range(before)]
            hi = [i % d for i in range(after)]
        parts = [p for p in (piece(lo), x, piece(hi)) if p is not None]
        x = imp.b.op(g.ConcatOp, parts, axis=g.i64_attr(a))
    return x


@_handler("DepthToSpace", attrs=("blocksize", "mode"))
def _depth_to_space(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    n, c, h, w = shape_of(x)
    b = int(_attr(node, "blocksize"))
    if _attr(node, "mode", "DCR") == "DCR":
        y = imp.b.transpose(imp.b.reshape(x, (n, b, b, c // (b * b), h, w)), (0, 3, 4, 1, 5, 2))
    else:
        y = imp.b.transpose(imp.b.reshape(x, (n, c // (b * b), b, b, h, w)), (0, 1, 4, 2, 5, 3))
    return [imp.b.reshape(y, (n, c // (b * b), h * b, w * b))]


@_handler("SpaceToDepth", attrs=("blocksize",))
def _space_to_depth(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    n, c, h, w = shape_of(x)
    b = int(_attr(node, "blocksize"))
    y = imp.b.transpose(imp.b.reshape(x, (n, c, h // b, b, w // b, b)), (0, 3, 5, 1, 2, 4))
    return [imp.b.reshape(y, (n, c * b * b, h // b, w // b))]


@_handler("Trilu", attrs=("upper",))
def _trilu(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    k = int(np.asarray(imp.static(node.input[1], "k")).reshape(-1)[0]) if _input(node, 1) else 0
    rows, cols = xs[-2], xs[-1]
    fn = np.triu if _attr(node, "upper", 1) else np.tril
    mask = fn(np.ones((rows, cols), dtype=np.bool_), k)
    return [imp.b.op(g.WhereOp, [imp.materialise(mask, "trilu_mask"), x, imp.b.scalar(0, x)])]


@_handler("CumSum", attrs=("exclusive", "reverse"))
def _cumsum(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    rank = len(xs)
    axis = _norm_axis(int(np.asarray(imp.static(node.input[1], "the axis")).reshape(-1)[0]), rank)
    n = xs[axis]
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")  # out[j] = sum_i x[i] * m[i, j]
    excl, rev = _attr(node, "exclusive", 0), _attr(node, "reverse", 0)
    if rev:
        m = (i > j) if excl else (i >= j)
    else:
        m = (i < j) if excl else (i <= j)
    perm = [d for d in range(rank) if d != axis] + [axis]
    inv = list(np.argsort(perm))
    xt = imp.b.transpose(x, perm)
    y = imp.b.op(g.MatmulOp, [xt, imp.materialise(m.astype(numpy_dtype_of(x)), "cumsum_mask")])
    return [imp.b.transpose(y, inv)]


@_handler("OneHot", attrs=("axis",))
def _one_hot(imp: _Importer, node: onnx.NodeProto):
    idx = imp.value(node.input[0])
    depth = int(np.asarray(imp.static(node.input[1], "the depth")).reshape(-1)[0])
    values = imp.static(node.input[2], "the values").reshape(-1)
    rank = len(shape_of(idx)) + 1
    axis = _norm_axis(int(_attr(node, "axis", -1)), rank)
    if not _is_float(numpy_dtype_of(idx)):
        idx = imp.b.cast(idx, np.dtype(np.int64))
    else:
        idx = imp.b.cast(idx, np.dtype(np.int64))
    neg = imp.b.op(g.LessOp, [idx, imp.b.scalar(0, idx)])
    idx = imp.b.op(g.WhereOp, [neg, imp.b.op(g.AddOp, [idx, imp.b.scalar(depth, idx)]), idx])
    shape = list(shape_of(idx))
    shape.insert(axis, 1)
    idx = imp.b.reshape(idx, shape)
    iota = np.arange(depth, dtype=np.int64).reshape([-1 if i == axis else 1 for i in range(rank)])
    eq = imp.b.op(g.EqualOp, [idx, imp.materialise(iota, "iota")])
    off, on = imp.b.inline_constant(values[0]), imp.b.inline_constant(values[1])
    return [imp.b.op(g.WhereOp, [eq, on, off])]


# --------------------------------------------------------------------------
# Handlers: reductions
# --------------------------------------------------------------------------

_REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")


@_handler(*_REDUCE, attrs=("axes", "keepdims", "noop_with_empty_axes"))
def _reduce(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    rank = len(shape_of(x))
    axes = _ints_of(imp, node, "axes", 1, "the axes")
    keep = bool(_attr(node, "keepdims", 1))
    if not axes:
        if _attr(node, "noop_with_empty_axes", 0):
            return [x]
        axes = list(range(rank))
    axes = sorted({_norm_axis(a, rank) for a in axes})
    t = node.op_type

    def reduce_axes(cls: type[g.ReduceOp], v: SSAValue) -> SSAValue:
        return imp.b.reduce(cls, v, axes, keep)

    if t in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"):
        cls = {"ReduceSum": g.ReduceSumOp, "ReduceMean": g.ReduceMeanOp, "ReduceMax": g.ReduceMaxOp, "ReduceMin": g.ReduceMinOp, "ReduceProd": g.ReduceProdOp}[t]
        if t in ("ReduceMax", "ReduceMin") and any(shape_of(x)[a] == 0 for a in axes):
            fill = -np.inf if t == "ReduceMax" else np.inf
            if not _is_float(numpy_dtype_of(x)):
                info = np.iinfo(numpy_dtype_of(x)) if numpy_dtype_of(x) != np.bool_ else None
                fill = (info.min if t == "ReduceMax" else info.max) if info else (t == "ReduceMin")
            shape = _reduced_shape(shape_of(x), axes, keep)
            return [np.full(shape, fill, dtype=numpy_dtype_of(x))]
        return [reduce_axes(cls, x)]
    if t == "ReduceL1":
        return [reduce_axes(g.ReduceSumOp, imp.b.op(g.AbsOp, [x]))]
    if t == "ReduceSumSquare":
        return [reduce_axes(g.ReduceSumOp, imp.b.op(g.MulOp, [x, x]))]
    if t == "ReduceL2":
        return [_float_then_back(imp, reduce_axes(g.ReduceSumOp, imp.b.op(g.MulOp, [x, x])), g.SqrtOp)]
    if t == "ReduceLogSum":
        return [_float_then_back(imp, reduce_axes(g.ReduceSumOp, x), g.LogOp)]
    # ReduceLogSumExp, stably: m + log(sum(exp(x - m)))
    if any(shape_of(x)[a] == 0 for a in axes):
        return [np.full(_reduced_shape(shape_of(x), axes, keep), -np.inf, dtype=numpy_dtype_of(x))]
    m = imp.b.reduce(g.ReduceMaxOp, x, axes, True)
    s = imp.b.reduce(g.ReduceSumOp, imp.b.op(g.ExpOp, [imp.b.op(g.SubOp, [x, m])]), axes, keep)
    mk = m if keep else imp.b.reshape(m, shape_of(s))
    return [imp.b.op(g.AddOp, [mk, imp.b.op(g.LogOp, [s])])]


def _reduced_shape(shape: Sequence[int], axes: Sequence[int], keep: bool) -> list[int]:
    return [1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes]


def _float_then_back(imp: _Importer, x: SSAValue, cls) -> SSAValue:
    dt = numpy_dtype_of(x)
    if _is_float(dt):
        return imp.b.op(cls, [x])
    return imp.b.cast(imp.b.op(cls, [imp.b.cast(x, np.dtype(np.float64))]), dt)


@_handler("ArgMax", "ArgMin", attrs=("axis", "keepdims", "select_last_index"))
def _arg_reduce(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    axis = _norm_axis(int(_attr(node, "axis", 0)), len(xs))
    keep = bool(_attr(node, "keepdims", 1))
    cls = g.ArgmaxOp if node.op_type == "ArgMax" else g.ArgminOp
    if not _attr(node, "select_last_index", 0):
        return [imp.b.op(cls, [x], axes=g.i64_array([axis]), keepdims=g.bool_attr(keep))]
    starts, ends, steps = [0] * len(xs), list(xs), [1] * len(xs)
    starts[axis], ends[axis], steps[axis] = xs[axis] - 1, -1, -1
    rev = imp.b.slice(x, starts, ends, steps)
    i = imp.b.op(cls, [rev], axes=g.i64_array([axis]), keepdims=g.bool_attr(keep))
    return [imp.b.op(g.SubOp, [imp.b.scalar(xs[axis] - 1, i), i])]


SUPPORTED_OPS = frozenset(_HANDLERS)


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------


def import_onnx(
    source: str | os.PathLike[str] | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    list_unsupported: bool = False,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    static_inputs: Mapping[str, np.ndarray] | None = None,
    _used_static_inputs: set[str] | None = None,
) -> ModuleOp:
    """Import an ONNX model (path or ModelProto) into a graph-dialect module.

    input_shapes: static shapes for inputs with dynamic (or overridden) dims.
    list_unsupported: collect every problem and raise one error listing them.
    base_dir: folder for external data of a ModelProto (a path uses its folder).
    static_inputs: values of graph inputs that nodes need at import time
      (a Reshape's target shape fed as an input, ...); used only where a value
      must be static, the inputs stay function arguments.
    """
    label = _label(source)
    model = load_onnx_model(source, base_dir)
    model = _normalise(model, label)
    try:
        model = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception:
        pass  # shape inference is advisory here; the graph ops infer their own types
    imp = _Importer(model, label, input_shapes, list_unsupported, static_inputs)
    try:
        module = imp.run()
    finally:
        if _used_static_inputs is not None:
            _used_static_inputs.update(imp.used_static_inputs)
    return module


# --------------------------------------------------------------------------
# Handlers added after the first cut: Resize, GatherElements, LpPool
# --------------------------------------------------------------------------


def _resize_matrix(imp: _Importer, node: onnx.NodeProto, n: int, out: int | None, scale: float | None, roi: tuple[float, float] | None) -> np.ndarray:
    """The [out, n] interpolation matrix of one axis: Resize is separable and
    linear, so the reference Resize of an identity basis gives its weights."""
    from onnx.reference import ReferenceEvaluator

    attrs = [a for a in node.attribute if a.name not in ("axes", "keep_aspect_ratio_policy")]
    eye = np.eye(n, dtype=np.float64)
    names = ["X", "roi", "scales", "sizes"]
    feeds: dict[str, np.ndarray] = {"X": eye}
    if roi is not None:
        feeds["roi"] = np.array([roi[0], 0.0, roi[1], 1.0], dtype=np.float32)
    if scale is not None:
        feeds["scales"] = np.array([scale, 1.0], dtype=np.float32)
    else:
        feeds["sizes"] = np.array([out, n], dtype=np.int64)
    inputs = [nm if nm in feeds else "" for nm in names]
    while inputs and not inputs[-1]:
        inputs.pop()
    rn = helper.make_node("Resize", inputs, ["Y"])
    rn.attribute.extend(attrs)
    vi = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()]
    m = helper.make_model(
        helper.make_graph([rn], "resize_basis", vi, [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)]),
        opset_imports=[helper.make_opsetid("", max(imp.opset, 19))],
    )
    (y,) = ReferenceEvaluator(m).run(None, feeds)
    return np.asarray(y)  # [out, n]


@_handler("Resize", "Upsample", attrs=(
    "antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
    "extrapolation_value", "keep_aspect_ratio_policy", "mode", "nearest_mode", "scales", "height_scale", "width_scale",
))
def _resize(imp: _Importer, node: onnx.NodeProto):
    x = imp.value(node.input[0])
    xs = shape_of(x)
    rank = len(xs)
    mode = _attr(node, "mode", "nearest")
    ctm = _attr(node, "coordinate_transformation_mode", "half_pixel")
    if node.op_type == "Upsample" or imp.opset < 11:
        # Upsample-7/9 and Resize-10: asymmetric coordinates, floor for nearest
        scales = _attr(node, "scales")
        if scales is None:
            scales = [float(s) for s in imp.static(node.input[1], "the scales").reshape(-1)]
        sizes, roi = None, None
        ctm = "asymmetric"
        node = helper.make_node("Resize", [], [], mode="linear" if mode in ("linear", "bilinear") else "nearest",
                                coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        mode = "linear" if mode in ("linear", "bilinear") else "nearest"
        axes = list(range(rank))
    else:
        axes = [_norm_axis(a, rank) for a in (_attr(node, "axes") or range(rank))]
        roi_v = imp.static(node.input[1], "the roi").reshape(-1) if _input(node, 1) else None
        scales = [float(s) for s in imp.static(node.input[2], "the scales").reshape(-1)] if _input(node, 2) else None
        sizes = [int(s) for s in imp.static(node.input[3], "the sizes").reshape(-1)] if _input(node, 3) else None
        if scales is not None and len(scales) == 0:
            scales = None
        roi = None
        if ctm == "tf_crop_and_resize":
            if roi_v is None:
                raise _NodeProblem("tf_crop_and_resize needs a roi")
            if float(_attr(node, "extrapolation_value", 0.0)) != 0.0:
                raise _NodeProblem("a non-zero extrapolation_value is not supported")
            k = len(axes)
            roi = [(float(roi_v[i]), float(roi_v[i + k])) for i in range(k)]
    if mode not in ("nearest", "linear", "cubic"):
        raise _NodeProblem(f"mode '{mode}' is not supported")
    outs: list[int] = []
    per_axis_scale: list[float | None] = []
    if scales is not None:
        for a, s in zip(axes, scales, strict=True):
            lo, hi = roi[axes.index(a)] if roi else (0.0, 1.0)
            outs.append(int(math.floor(xs[a] * (hi - lo) * s)) if roi else int(math.floor(xs[a] * s)))
            per_axis_scale.append(s)
    else:
        if sizes is None:
            raise _NodeProblem("neither scales nor sizes is given")
        policy = _attr(node, "keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            outs = list(sizes)
            per_axis_scale = [None] * len(axes)
        else:
            ratios = [sz / xs[a] for a, sz in zip(axes, sizes)]
            s = min(ratios) if policy == "not_larger" else max(ratios)
            outs = [int(round(xs[a] * s)) for a in axes]
            if any(o != math.floor(xs[a] * s) for o, a in zip(outs, axes)):
                raise _NodeProblem(f"keep_aspect_ratio_policy '{policy}' with these sizes is not supported")
            per_axis_scale = [s] * len(axes)
    y = x
    for k, a in enumerate(axes):
        n, out, s = xs[a], outs[k], per_axis_scale[k]
        if out == n and (s is None or s == 1.0) and not roi:
            continue
        m = _resize_matrix(imp, node, n, out, s, roi[k] if roi else None)
        if m.shape[0] != out:
            raise _NodeProblem(f"axis {a}: expected {out} outputs, the basis gave {m.shape[0]}")
        one_hot = np.all((m == 0) | (m == 1)) and np.all(m.sum(axis=1) == 1)
        if one_hot:
            idx = imp.materialise(m.argmax(axis=1).astype(np.int64), "resize_index")
            y = imp.b.op(g.GatherOp, [y, idx], axis=g.i64_attr(a))
            continue
        if not _is_float(numpy_dtype_of(y)):
            raise _NodeProblem(f"mode '{mode}' on {numpy_dtype_of(y)} is not supported")
        perm = [d for d in range(rank) if d != a] + [a]
        yt = imp.b.transpose(y, perm)
        wt = imp.materialise(np.ascontiguousarray(m.T).astype(numpy_dtype_of(y)), "resize_weight")
        y = imp.b.transpose(imp.b.op(g.MatmulOp, [yt, wt]), list(np.argsort(perm)))
    return [y]


@_handler("GatherElements", attrs=("axis",))
def _gather_elements(imp: _Importer, node: onnx.NodeProto):
    """out[.., n, ..] = x[.., idx[.., n, ..], ..] along `axis`, as a one-hot
    select-and-sum: sum_d where(idx == d, x[.., d, ..], 0)."""
    x, idx = imp.value(node.input[0]), imp.value(node.input[1])
    xs, ish = shape_of(x), shape_of(idx)
    rank = len(xs)
    axis = _norm_axis(int(_attr(node, "axis", 0)), rank)
    d = xs[axis]
    # x restricted to idx's extent on the other axes
    ends = [ish[i] if i != axis else xs[i] for i in range(rank)]
    if ends != list(xs):
        x = imp.b.slice(x, [0] * rank, ends, [1] * rank)
    idx = imp.b.cast(idx, np.dtype(np.int64))
    idx = imp.b.op(g.WhereOp, [imp.b.op(g.LessOp, [idx, imp.b.scalar(0, idx)]), imp.b.op(g.AddOp, [idx, imp.b.scalar(d, idx)]), idx])
    xe = imp.b.reshape(x, [*ends[:axis], 1, d, *ends[axis + 1:]])
    ie = imp.b.reshape(idx, [*ish[:axis], ish[axis], 1, *ish[axis + 1:]])
    iota = np.arange(d, dtype=np.int64).reshape([1] * (axis + 1) + [d] + [1] * (rank - axis - 1))
    eq = imp.b.op(g.EqualOp, [ie, imp.materialise(iota, "iota")])
    if numpy_dtype_of(x) == np.bool_:
        picked = imp.b.op(g.AndOp, [eq, xe])
        return [imp.b.reduce(g.ReduceMaxOp, picked, [axis + 1], False)]
    picked = imp.b.op(g.WhereOp, [eq, xe, imp.b.scalar(0, xe)])
    return [imp.b.reduce(g.ReduceSumOp, picked, [axis + 1], False)]


@_handler("LpPool", attrs=("auto_pad", "ceil_mode", "dilations", "kernel_shape", "p", "pads", "strides"))
def _lp_pool(imp: _Importer, node: onnx.NodeProto):
    """(sum over the window of |x|^p)^(1/p) = (avg_pool(|x|^p, pads counted) * k)^(1/p)."""
    x = imp.value(node.input[0])
    _require_float(x, "LpPool")
    xs = shape_of(x)
    r = len(xs) - 2
    if r not in (1, 2):
        raise _NodeProblem(f"{r}-D pooling is not supported (1-D and 2-D only)")
    p = float(_attr(node, "p", 2))
    kernel = _attr(node, "kernel_shape")
    strides, dilations, pads = _window(imp, node, xs[2:], kernel)
    if any(d != 1 for d in dilations):
        raise _NodeProblem("dilations are not supported for LpPool")
    strides, dilations, pads, kernel2 = _as_2d(r, strides, dilations, pads, kernel)
    if r == 1:
        x = imp.b.reshape(x, (xs[0], xs[1], 1, xs[2]))
    xp = imp.b.op(g.PowOp, [imp.b.op(g.AbsOp, [x]), imp.b.scalar(p, x)])
    avg = imp.b.op(
        g.AvgPool2dOp, [xp], kernel=g.i64_array(kernel2), stride=g.i64_array(strides), padding=g.i64_array(pads),
        ceil_mode=g.bool_attr(_attr(node, "ceil_mode", 0)), count_include_pad=g.bool_attr(True),
    )
    total = imp.b.op(g.MulOp, [avg, imp.b.scalar(math.prod(kernel2), avg)])
    y = imp.b.op(g.PowOp, [total, imp.b.scalar(1.0 / p, total)])
    if r == 1:
        ys = shape_of(y)
        y = imp.b.reshape(y, (ys[0], ys[1], ys[3]))
    return [y]


SUPPORTED_OPS = frozenset(_HANDLERS)
