"""ONNX -> graph dialect.

    module = import_onnx("model.onnx", input_shapes={"x": (1, 3, 224, 224)})

Steps: load the protobuf without executing anything (external data is read by
us, every location confined to the model's folder); refuse an IR version newer
than the installed onnx reads or a default-domain opset newer than
`TARGET_OPSET`; `onnx.checker`; normalise to `TARGET_OPSET` with
`onnx.version_converter` (falling back to the original model when the converter
cannot); `onnx.shape_inference`; then one pass over the nodes in order:

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
allowed to fail and leave the model at its own opset. This module loads, checks
and walks the model (`Importer`); the handlers are in onnx_elementwise.py,
onnx_nn.py and onnx_structure.py, registered in the op table of onnx_ops.py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import google.protobuf.message
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import ModuleOp, NameLoc, StringAttr, UnknownLoc
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from infer.dialects.dtypes import from_numpy_dtype, numpy_dtype_of, shape_of
from infer.frontend import (
    onnx_elementwise,
    onnx_nn,
    onnx_qoperator,
    onnx_quant,
    onnx_recurrent,
    onnx_sequence,
    onnx_signal,
    onnx_structure,
)
from infer.frontend.builder import GraphBuilder
from infer.frontend.model import ModelImportError
from infer.frontend.onnx_ops import (
    HANDLERS,
    NeedsInputValue,
    NodeProblem,
    constant_node_value,
    domain_ops,
    handler_key,
    numpy_dtype_for,
)

_HANDLER_MODULES = (onnx_elementwise, onnx_nn, onnx_qoperator, onnx_quant, onnx_recurrent, onnx_sequence, onnx_signal,
                    onnx_structure)
"""Imported for their `handler` registrations in HANDLERS."""

__all__ = ["import_onnx", "load_onnx_model", "StaticInputNeeded", "TARGET_OPSET", "SUPPORTED_OPS"]

TARGET_OPSET = min(onnx.defs.onnx_opset_version(), 28)
"""The default-domain opset models are converted to before import (when the
version converter can; upgrading almost always works, downgrading often does
not, hence the newest); handlers accept older forms as well."""


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
    return _load_onnx(source, base_dir)[0]


def _load_onnx(source: str | os.PathLike[str] | onnx.ModelProto,
               base_dir: str | os.PathLike[str] | None) -> tuple[onnx.ModelProto, bool]:
    """load_onnx_model, and whether any tensor's data was external (now loaded)."""
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
    return model, _load_external_data(model, folder, label)


def _all_tensors(model: onnx.ModelProto):
    from onnx.external_data_helper import _get_all_tensors

    return _get_all_tensors(model)


def _load_external_data(model: onnx.ModelProto, folder: Path | None, label: str) -> bool:
    """Read every tensor's external data into it (confined to the model's folder); returns
    whether there was any."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    loaded = False
    for tensor in _all_tensors(model):
        if not uses_external_data(tensor):
            continue
        loaded = True
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
    return loaded


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


def _normalise(model: onnx.ModelProto, label: str, whole_file: Path | None = None) -> onnx.ModelProto:
    """The model checked, converted to TARGET_OPSET (when it converts) and with ONNX's shape
    inference's value_info. The converter and shape inference each serialise the model and
    parse their result: for a model of big weights that copying is most of the import, and
    neither reads a weight's values (only its type and dims), so they run on the model with
    its big initializers' bytes left out, put back afterwards (`_BulkData`). `whole_file`: the
    file the model was parsed from, every tensor in it (checked from the file)."""
    _check_versions(model, label)
    _check_model(model, label, whole_file)
    bulk = _BulkData.take(model)
    try:
        out = _convert_and_infer(model)
    finally:
        bulk.put_back(model)
    if out is not model and not bulk.put_back(out):
        out = _convert_and_infer(model)  # the passes changed a weight left out: run them on the whole model
    return out


def _check_model(model: onnx.ModelProto, label: str, whole_file: Path | None = None) -> None:
    """onnx.checker on the model (one serialisation, or the file it was parsed from; models of
    2 GiB or more, which protobuf cannot serialise, are not checked)."""
    if sum(len(t.raw_data) for t in model.graph.initializer) >= _PROTOBUF_LIMIT:
        return
    if whole_file is not None:
        try:
            onnx.checker.check_model(str(whole_file))
        except Exception as e:
            raise ModelImportError(f"{label}: not a valid ONNX model: {_one_line(e)}") from None
        return
    try:
        data = model.SerializeToString()
    except (ValueError, OverflowError, google.protobuf.message.EncodeError):  # over protobuf's limit
        return
    if len(data) >= _PROTOBUF_LIMIT:
        return
    try:
        onnx.checker.check_model(data)
    except Exception as e:
        raise ModelImportError(f"{label}: not a valid ONNX model: {_one_line(e)}") from None


_PROTOBUF_LIMIT = 2**31 - 1


def _convert_and_infer(model: onnx.ModelProto) -> onnx.ModelProto:
    if _default_opset(model) != TARGET_OPSET and _convertible(model):
        try:
            from onnx import version_converter

            converted = version_converter.convert_version(model, TARGET_OPSET)
            if _default_opset(converted) == TARGET_OPSET:
                model = converted
        except Exception:
            pass  # keep the original opset; handlers accept every form
    try:
        model = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception:
        pass  # shape inference is advisory here; the graph ops infer their own types
    return model


@dataclass
class _BulkData:
    """The bytes of a model's big initializers (at least BULK_BYTES of raw data, not int32 /
    int64: the small and integer tensors, which shape inference may read as shapes, axes or
    sizes, stay), taken out by name while the version converter and shape inference run."""

    BULK_BYTES = 4096
    data: dict[str, tuple[bytes, tuple[int, ...], int]]  # name -> (raw_data, dims, data_type)

    @classmethod
    def take(cls, model: onnx.ModelProto) -> _BulkData:
        inits = model.graph.initializer
        counts: dict[str, int] = {}
        for t in inits:
            counts[t.name] = counts.get(t.name, 0) + 1
        data = {}
        for t in inits:
            if (len(t.raw_data) >= cls.BULK_BYTES and t.name and counts[t.name] == 1
                    and t.data_type not in (TensorProto.INT32, TensorProto.INT64)):
                data[t.name] = (t.raw_data, tuple(t.dims), t.data_type)
                t.raw_data = b""
        return cls(data)

    def put_back(self, model: onnx.ModelProto) -> bool:
        """The bytes back into `model`'s initializers of the same names; False (and nothing
        changed) unless each is there once, with its dims and type and no data."""
        found = {}
        for t in model.graph.initializer:
            kept = self.data.get(t.name)
            if kept is None:
                continue
            if t.name in found or t.raw_data or (tuple(t.dims), t.data_type) != kept[1:]:
                return False
            found[t.name] = t
        if len(found) != len(self.data):
            return False
        for name, t in found.items():
            t.raw_data = self.data[name][0]
        return True


def _convertible(model: onnx.ModelProto) -> bool:
    # The converter only knows the default domain; leave anything else alone.
    return all(o.domain in ("", "ai.onnx") for o in model.opset_import) and not model.functions


# --------------------------------------------------------------------------
# The importer
# --------------------------------------------------------------------------

@dataclass
class _Problem:
    node: str
    text: str


class Importer:
    """The import of one model: what is known so far about each ONNX value (`consts`: numpy
    arrays known at import time, `ssa`: graph values), the GraphBuilder `b` handlers emit
    through, and the problems found. `run()` walks the nodes and returns the module."""

    def __init__(
        self,
        model: onnx.ModelProto,
        label: str,
        input_shapes: Mapping[str, Sequence[int]] | None,
        list_unsupported: bool,
        static_inputs: Mapping[str, np.ndarray] | None,
        declared_outputs: Mapping[str, onnx.TypeProto] | None = None,
    ):
        self.model = model
        self.declared_outputs = dict(declared_outputs or {})
        self.graph = model.graph
        self.label = label
        self.opset = _default_opset(model)
        self.input_shapes = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
        self.list_unsupported = list_unsupported
        self.static_inputs = dict(static_inputs or {})
        self.used_static_inputs: set[str] = set()
        self.b = GraphBuilder()
        self.module_attributes: dict[str, Attribute] = {}  # what handlers record on the module
        self.consts: dict[str, np.ndarray] = {}
        self.ssa: dict[str, SSAValue] = {}
        self.sequences: dict[str, onnx_sequence.TensorSequence] = {}  # ONNX sequences (onnx_sequence.py)
        self.poisoned: set[str] = set()
        self.problems: list[_Problem] = []
        self.const_ssa: dict[str, SSAValue] = {}
        self.graph_inputs: dict[str, SSAValue] = {}
        self.node: onnx.NodeProto | None = None

    # -- problems ---------------------------------------------------------
    def _locate_new_ops(self, before: Operation | None, where: str) -> None:
        """The ops a node added (after `before`) carry its label as their location, so an error
        at any level below names the layer (ir_io.describe_location)."""
        loc = NameLoc(StringAttr(f"{self.label}: {where}"), UnknownLoc())
        op = before.next_op if before is not None else self.b.block.first_op
        while op is not None:
            if isinstance(op.location, UnknownLoc):
                op.location = loc
            op = op.next_op

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
        return name in self.consts or name in self.ssa or name in self.sequences

    def sequence(self, name: str) -> onnx_sequence.TensorSequence:
        """The tensors of sequence `name` (onnx_sequence.py)."""
        if name not in self.sequences:
            raise NodeProblem(f"input '{name}' is a tensor where a sequence is expected")
        return self.sequences[name]

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
        if name in self.sequences:
            raise NodeProblem(f"input '{name}' is a sequence where a tensor is expected")
        raise NodeProblem(f"input '{name}' is not defined")

    def materialise(self, array: np.ndarray, name: str = "const") -> SSAValue:
        """A value known at import time in the IR: a constant, or a weight named after
        `name` when larger than INLINE_CONSTANT_LIMIT elements."""
        return self.b.constant(np.asarray(array), name=_weight_name(name))

    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.consts:
            return tuple(self.consts[name].shape)
        return shape_of(self.value(name))

    def dtype(self, name: str) -> np.dtype:
        if name in self.consts:
            return self.consts[name].dtype
        return numpy_dtype_of(self.value(name))

    def static(self, name: str, what: str) -> np.ndarray:
        """A value that must be known at import time (shape, axes, pads, ...)."""
        if name in self.consts:
            return self.consts[name]
        if name in self.static_inputs and name in self.graph_inputs:
            self.used_static_inputs.add(name)
            return np.asarray(self.static_inputs[name])
        if name in self.graph_inputs:
            raise NeedsInputValue(name, f"{what} comes from graph input '{name}', but it must be known at import time (make it an initializer)")
        raise NodeProblem(f"{what} ('{name}') is computed at run time, but it must be known at import time")

    def fold_like(self, node: onnx.NodeProto, runtime_input: str) -> list[np.ndarray] | None:
        """Fold `node`, whose inputs are all known but `runtime_input`, of which it only
        reads the element type (CastLike's `target_type`); None when it cannot be folded."""
        return _fold(self, node, {runtime_input: np.zeros((0,), self.dtype(runtime_input))})

    # -- driving ----------------------------------------------------------
    def run(self) -> ModuleOp:
        graph = self.graph
        initializer_names = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
        for t in graph.initializer:
            try:
                numpy_dtype_for(t.data_type, f"initializer '{t.name}'")
                self.consts[t.name] = numpy_helper.to_array(t)
            except NodeProblem as e:
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
            if vi.name in self.sequences:
                self.fail(f"graph output '{vi.name}'", "is a sequence; only tensors are supported as outputs")
                continue
            value = self.value(vi.name)
            self._check_declared_output(vi, value)
            outputs.append(value)
        if self.problems:
            lines = [f"{p.node}: {p.text}" for p in self.problems]
            raise ModelImportError(
                f"{self.label}: {len(lines)} problem(s) prevent the import:\n  " + "\n  ".join(lines)
            )
        try:
            module = self.b.finish(outputs, names)
            module.attributes.update(self.module_attributes)
            return module
        except VerifyException as e:
            raise ModelImportError(f"{self.label}: the imported graph does not verify: {_one_line(e)}") from None

    def _check_declared_output(self, vi: onnx.ValueInfoProto, value: SSAValue) -> None:
        """A graph output's declared element type and static dims (as the file declares them, not
        as ONNX's shape inference fills them in) must be what the graph computes.

        A model whose declaration disagrees is malformed or was imported with other input shapes
        than it was exported for; taking the inferred type silently would hand the caller a tensor
        of another shape than the model promises. Symbolic and unknown dims are not checked.
        """
        where = f"graph output '{vi.name}'"
        t = self.declared_outputs.get(vi.name, vi.type)
        if t.WhichOneof("value") != "tensor_type":
            return
        computed_dtype = numpy_dtype_of(value)
        computed_shape = shape_of(value)
        elem = t.tensor_type.elem_type
        if elem != TensorProto.UNDEFINED:
            try:
                declared_dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
            except (KeyError, ValueError, TypeError):
                declared_dtype = None
            if declared_dtype is not None and declared_dtype != computed_dtype:
                self.fail(where, f"is declared {TensorProto.DataType.Name(elem)} but the graph computes {computed_dtype.name}")
                return
        if not t.tensor_type.HasField("shape"):
            return
        dims = t.tensor_type.shape.dim
        if len(dims) != len(computed_shape):
            self.fail(where, f"is declared with rank {len(dims)} but the graph computes shape "
                             f"{_fmt_dims(computed_shape)} (rank {len(computed_shape)})")
            return
        for i, (d, c) in enumerate(zip(dims, computed_shape)):
            if d.HasField("dim_value") and int(d.dim_value) != int(c):
                declared = [int(x.dim_value) if x.HasField("dim_value") else (x.dim_param or "?") for x in dims]
                self.fail(where, f"is declared with shape {_fmt_dims(declared)} but the graph computes "
                                 f"{_fmt_dims(computed_shape)} (dimension {i}: {d.dim_value} against {c})")
                return

    def _add_input(self, vi: onnx.ValueInfoProto) -> None:
        where = f"graph input '{vi.name}'"
        t = vi.type
        if t.WhichOneof("value") != "tensor_type":
            self.fail(where, f"is a {t.WhichOneof('value') or 'untyped value'}, only tensors are supported")
            self.poisoned.add(vi.name)
            return
        try:
            dtype = numpy_dtype_for(t.tensor_type.elem_type, where)
        except NodeProblem as e:
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
        spec = HANDLERS.get(handler_key(node.domain, node.op_type))
        if spec is None:
            body = self._function_body(node)
            if body is not None:
                for inner in body:
                    self._import_node(inner)
                return
        try:
            if spec is None:
                raise NodeProblem(f"op type '{node.op_type}'" + (
                    f" of domain '{node.domain}' is not supported (supported in that domain: "
                    f"{', '.join(domain_ops(node.domain)) or 'none'})"
                    if node.domain not in ("", "ai.onnx") else " is not supported"))
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
                raise NodeProblem(f"attribute(s) {', '.join(extra)} are not supported")
            before = self.b.block.last_op
            results = list(spec.fn(self, node))
            self._locate_new_ops(before, where)
            for i, name in enumerate(node.output):
                if not name:
                    continue
                if i >= len(results) or results[i] is None:
                    raise NodeProblem(f"output #{i} ('{name}') is not supported (only the first {len(results)})")
                r = results[i]
                if isinstance(r, onnx_sequence.TensorSequence):
                    self.sequences[name] = r
                elif isinstance(r, np.ndarray):
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
        except NodeProblem as e:
            self.fail(where, str(e))
            self.poisoned.update(outs)
        except VerifyException as e:
            self.fail(where, f"the graph op does not verify: {_one_line(e)}")
            self.poisoned.update(outs)


    def inline_graph(self, graph: onnx.GraphProto) -> list[SSAValue | np.ndarray | onnx_sequence.TensorSequence]:
        """Import a subgraph (an If's branch) into this graph: its initializers and nodes (which
        may read this graph's values), then its outputs' values."""
        outer = self.node
        for t in graph.initializer:
            self.consts[t.name] = numpy_helper.to_array(t)
        for inner in graph.node:
            self._import_node(inner)
        self.node = outer
        results: list[SSAValue | np.ndarray | onnx_sequence.TensorSequence] = []
        for vi in graph.output:
            if vi.name in self.poisoned:
                raise NodeProblem(f"the branch's output '{vi.name}' is not imported (its problems are listed)")
            if not self.has(vi.name):
                raise NodeProblem(f"the branch's output '{vi.name}' is not produced by any node")
            results.append(self.consts[vi.name] if vi.name in self.consts
                           else self.sequences[vi.name] if vi.name in self.sequences else self.ssa[vi.name])
        return results

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

NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial", "If", "Loop", "Scan"}

_NULLARY_FOLD = {"Constant"}


def _fold(imp: Importer, node: onnx.NodeProto, stand_ins: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray] | None:
    """Evaluate a node on constant inputs (numpy for the common shape ops,
    onnx.reference otherwise); None when it cannot be evaluated. `stand_ins` gives
    values for inputs that are not constants but whose value the node does not read."""
    if node.op_type == "Constant":
        return [constant_node_value(node)]
    stand_ins = stand_ins or {}
    ins = [(stand_ins[i] if i in stand_ins else imp.consts[i]) if i else None for i in node.input]
    identity = node.op_type == "Identity" and node.domain in ("", "ai.onnx")
    if identity and len(ins) == 1 and isinstance(ins[0], np.ndarray):
        # (torch exports pass weights through Identity nodes: a copy, without building and
        # running a one-node model on onnx.reference, ~4 ms each)
        return [np.array(ins[0], copy=True)]
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
    model, had_external_data = _load_onnx(source, base_dir)
    # a file whose tensors all live in it is the model as parsed: the checker reads it itself
    # (C++) instead of a serialisation of the parsed model (ResNet-50: 0.15 s against 0.25 s)
    whole_file = None if isinstance(source, onnx.ModelProto) or had_external_data else Path(source)
    # the outputs as the file declares them: ONNX's shape inference fills in their symbolic
    # dims, and for some ops it disagrees with the ONNX spec and onnxruntime (a ceil_mode pool
    # whose last window starts in the padding: one more row), which is no fault of the model
    declared_outputs = {}
    for vi in model.graph.output:
        declared_outputs[vi.name] = onnx.TypeProto()
        declared_outputs[vi.name].CopyFrom(vi.type)
    model = _normalise(model, label, whole_file)
    imp = Importer(model, label, input_shapes, list_unsupported, static_inputs, declared_outputs)
    try:
        module = imp.run()
    finally:
        if _used_static_inputs is not None:
            _used_static_inputs.update(imp.used_static_inputs)
    return module


SUPPORTED_OPS = frozenset(HANDLERS)
